"""The Python API for programs that embed the runtime.

    with hexir_runtime.load("model.hxb", device="cuda") as m:
        printed = m.run("main")        # what the program PRINTed, as numpy arrays
        y = m.main(x)                  # or m["main"](x): the entry's results
        y = m.main(x=x)                # inputs by name, where the module names them
        d = m.main.results(x)          # the results by name: {"y": ...}
        g = m.main(t, results_on_device=True)  # a torch/cupy array in, a DeviceArray out
        s = m.generate(ids, max_new_tokens=32)  # a module compiled with hexir -generate

`load` maps and validates the file, then creates the devices: cpu always, cuda when asked
for. Executables are loaded and constants uploaded once per load, on first use, and reused
by every later call. On cuda, an input may be a device array (`__cuda_array_interface__`),
checked against the signature like a numpy one; `out=` may name device arrays too.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from hexir_format import CPU_LEVELS, Device, DType, Generation, Op, TensorType
from hexir_runtime import generate, hal, library
from hexir_runtime.arena import Arena
from hexir_runtime.device_arrays import DevicePointer, is_device_array, pointer
from hexir_runtime.errors import ClosedError, DeviceError, EntryNotFound, InputError
from hexir_runtime.hal import threads
from hexir_runtime.interpreter import Execution, Printer, Program, Resident
from hexir_runtime.loader import MappedModule, Source
from hexir_runtime.profile import Profile, profile
from hexir_runtime.validate import DEFAULT_MAX_ALLOC_BYTES, EntryPlan, ModulePlan, check_module


def _cpu_code(plan: ModulePlan, entry: str) -> str | None:
    """`Module.cpu_code` of `entry`, from the validator's plan."""
    chosen = plan.entries[entry]
    level = chosen.cpu_level or max((plan.module.executables[i].cpu_level
                                     for i in chosen.executables), default=0)
    if not level:
        return None
    held = [CPU_LEVELS[v.cpu_level] for v in plan.variants[entry] if v.cpu_level]
    return CPU_LEVELS[level] + (f" (of {', '.join(held)})" if len(held) > 1 else "")


def load(path: Source, device: str = "cpu", *, copy: bool = False,
         max_alloc_bytes: int = DEFAULT_MAX_ALLOC_BYTES, cuda_graphs: bool = True,
         driver: Any = None) -> Module:
    """Map, validate and prepare a `.hxb` (a path, or the module's bytes). `device="cuda"`
    makes the GPU available (cpu is always available); `copy=True` reads the file into memory
    instead of mapping it (for a file that may change while it is loaded); `cuda_graphs=False`
    launches each cuda kernel on every call instead of replaying captured graphs; `driver`
    replaces cuda-python's driver module (tests)."""
    return Module(path, device, copy=copy, max_alloc_bytes=max_alloc_bytes,
                  cuda_graphs=cuda_graphs, driver=driver)


def arrange(plan: EntryPlan, inputs: Sequence[Any] | Mapping[str, Any],
            named: Mapping[str, Any] | None = None) -> Sequence[Any]:
    """The inputs in index order: `inputs` by position (or a mapping of input names to
    arrays), then `named` by the entry's input names. A name the entry does not have, one
    given twice or one left out is a one-line InputError listing the entry's input names; a
    module that names no inputs takes them by position only."""
    if type(inputs) is not tuple and isinstance(inputs, Mapping):  # (a tuple is the usual)
        if twice := sorted(inputs.keys() & (named or {}).keys()):
            raise InputError(f"input '{twice[0]}' of {plan.name} is given twice, in the mapping "
                             f"and as a keyword{_names_of(plan)}")
        named = {**inputs, **(named or {})}
        inputs = ()
    if not named:
        return inputs
    names = plan.signature.input_names
    if not names:
        raise InputError(f"{plan.name} names no inputs, so they are given by position, not by "
                         f"name ({', '.join(map(str, named))})")
    for name in named:
        if name not in names:
            raise InputError(f"{plan.name} has no input named '{name}'{_names_of(plan)}")
        if names.index(name) < len(inputs):
            raise InputError(f"input '{name}' of {plan.name} is given twice, by position and "
                             f"by name{_names_of(plan)}")
    if missing := [n for n in names[len(inputs):] if n not in named]:
        raise InputError(f"input '{missing[0]}' of {plan.name} is missing{_names_of(plan)}")
    return [*inputs, *(named[n] for n in names[len(inputs):])]


def _names_of(plan: EntryPlan) -> str:
    return f"; its inputs are: {', '.join(plan.signature.input_names) or 'none'}"


def typed(names: tuple[str, ...], types: tuple[TensorType, ...]) -> str:
    """`x: 2x3xf32, mask: 3xi1`, or `2x3xf32, 3xi1` where the module names none."""
    return ", ".join(f"{n}: {t}" for n, t in zip(names, types, strict=True)) if names else \
        ", ".join(map(str, types))


def check_inputs(plan: EntryPlan, inputs: Sequence[Any]) -> list[np.ndarray | DevicePointer]:
    """The inputs as contiguous arrays of the entry's signature (device arrays as their
    `DevicePointer`s), or a one-line InputError."""
    want, names = plan.signature.inputs, plan.signature.input_names
    if type(inputs) not in (tuple, list) and (not isinstance(inputs, Sequence) or
                                              isinstance(inputs, str | bytes)):
        raise InputError(f"{plan.name}: inputs must be a list or tuple of arrays, not "
                         f"{_article(type(inputs).__name__)} {type(inputs).__name__}")
    if len(inputs) != len(want):
        types = typed(names, want) or "none"
        raise InputError(f"{plan.name} takes {len(want)} input{'s' * (len(want) != 1)} "
                         f"({types}), got {len(inputs)}")
    return [x if type(x) is np.ndarray and x.dtype is _DTYPES.get(t.dtype) and
            x.shape == t.shape and x.flags.c_contiguous else  # the common case (a native
            # dtype is a singleton)
            _check_strings(_input_label(plan, i), x, t) if t.dtype is DType.STRING else
            _check_device_input(_input_label(plan, i), x, t)
            if is_device_array(x, _input_label(plan, i)) else
            _check_input(_input_label(plan, i), x, t)
            for i, (x, t) in enumerate(zip(inputs, want, strict=True))]


#: Each numeric element type's numpy dtype (a string input is checked apart: `library`).
_DTYPES: dict[DType, np.dtype] = {d: np.dtype(d.numpy) for d in DType if d is not DType.STRING}


def _check_strings(where: str, x: Any, t: TensorType) -> np.ndarray:
    """A string input as an object array of str (`library.strings_of`), or an InputError."""
    if is_device_array(x, where) and not isinstance(x, np.ndarray):
        raise InputError(f"{where}: expected {t}, got a cuda array; strings are given as a "
                         "numpy array of str, bytes or objects holding str")
    found = library.strings_of(where, x, t)
    if isinstance(found, str):
        raise InputError(f"{where}: expected {t}, {found}")
    return found


def _input_label(plan: EntryPlan, index: int) -> str:
    """`input 1 of main`, or `input 1 ('mask') of main` where the module names it."""
    names = plan.signature.input_names
    label = f" ('{names[index]}')" if names else ""
    return f"input {index}{label} of {plan.name}"


def check_outputs(plan: EntryPlan, out: Sequence[Any]) -> list[np.ndarray | DevicePointer]:
    """`out=` arrays the results can be written into (device arrays as their
    `DevicePointer`s), or a one-line InputError."""
    want = plan.signature.outputs
    if not isinstance(out, Sequence) or len(out) != len(want):
        got = len(out) if isinstance(out, Sequence) else type(out).__name__
        raise InputError(f"{plan.name} returns {len(want)} result{'s' * (len(want) != 1)}; "
                         f"out= gives {got}")
    checked: list[np.ndarray | DevicePointer] = []
    for i, (y, t) in enumerate(zip(out, want, strict=True)):
        where = f"out[{i}] of {plan.name}: expected a writable C-contiguous {t} array"
        if t.dtype is DType.STRING:
            raise InputError(f"out[{i}] of {plan.name}: a {t} result comes back as a new "
                             "numpy array of str; out= takes no array for it")
        if is_device_array(y, f"out[{i}] of {plan.name}") and not isinstance(y, np.ndarray):
            y = pointer(f"out[{i}] of {plan.name}", y)
            read_only, contiguous, noun, masked = y.read_only, y.contiguous, "cuda array", False
        elif isinstance(y, np.ndarray):
            read_only, contiguous, noun = not y.flags.writeable, y.flags.c_contiguous, "array"
            masked = isinstance(y, np.ma.MaskedArray)
        else:
            raise InputError(f"{where}, got {_article(type(y).__name__)} {type(y).__name__}")
        if read_only or not contiguous or masked or y.dtype.name != t.dtype.numpy or \
                y.shape != t.shape:
            flaws = [word for word, bad in (("read-only", read_only),
                                            ("non-contiguous", not contiguous)) if bad]
            what = " ".join([*flaws, f"{y.dtype} {noun} of shape {_shape(y.shape)}"])
            raise InputError(f"{where}, got {_article(what)} {what}")
        checked.append(y)
    return checked


def _check_device_input(where: str, x: Any, t: TensorType) -> DevicePointer:
    """A device array input: the numpy path's checks, but nothing is converted or copied
    on the host, so a non-contiguous array is refused rather than made contiguous."""
    p = pointer(where, x)
    where = f"{where}: expected {t}"
    if p.dtype != np.dtype(t.dtype.numpy):
        raise InputError(f"{where}, got {_article(p.dtype.name)} {p.dtype} cuda array of shape "
                         f"{_shape(p.shape)}")
    if p.shape != t.shape:
        raise InputError(f"{where}, got a cuda array of shape {_shape(p.shape)}")
    if not p.contiguous:
        raise InputError(f"{where}, got a non-contiguous cuda array: pass a contiguous one "
                         "(x.contiguous() in PyTorch, cupy.ascontiguousarray(x))")
    if p.nbytes and not p.address:
        raise InputError(f"{where}, got a cuda array whose pointer is null")
    return p


def _check_input(where: str, x: Any, t: TensorType) -> np.ndarray:
    where = f"{where}: expected {t}"
    if isinstance(x, np.ma.MaskedArray):
        raise InputError(f"{where}, got a masked array; its mask would be ignored: pass "
                         "x.filled(value) (or x.data) to say what masked elements hold")
    if not isinstance(x, np.ndarray):
        what = f"{_article(type(x).__name__)} {type(x).__name__}"
        try:
            converted = np.asarray(x, dtype=t.dtype.numpy)
            # numpy would truncate 2.5 to an integer and make any nonzero value true: an
            # integer or boolean input takes only the values its type holds exactly
            exact = t.dtype.is_float or np.array_equal(converted, np.asarray(x))
        except (TypeError, ValueError, OverflowError) as e:
            raise InputError(f"{where}, got {what} numpy cannot convert ({e})") from None
        except Exception as e:  # noqa: BLE001 (x's own __array__ raised)
            raise InputError(f"{where}, got {what} whose own conversion raised "
                             f"{type(e).__name__}: {e}") from None
        if not exact:
            raise InputError(f"{where}, got {what} whose values are not all exactly "
                             f"{t.dtype.numpy} values")
        x = converted
    elif x.dtype != _DTYPES[t.dtype]:
        if x.dtype.newbyteorder("=") != _DTYPES[t.dtype]:
            raise InputError(f"{where}, got {_article(x.dtype.name)} {x.dtype} array of shape "
                             f"{_shape(x.shape)}")
        x = x.astype(_DTYPES[t.dtype])  # the other byte order: the same values, converted
    if x.shape != t.shape:
        raise InputError(f"{where}, got shape {_shape(x.shape)}")
    return np.ascontiguousarray(x)


def _article(word: str) -> str:
    return "an" if word[:1] in "aeio" else "a"  # a uint8, an int32


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


class EntryPoint:
    """One entry of a loaded module; calling it runs it and returns its results.

    Inputs go by position, by name (where the module names them) or both, positional first:
    `m.main(x, mask=m)`, `m.main(x=x, mask=m)`, or one mapping `m.main({"x": x, "mask": m})`
    (the way to pass an input named `out`, which as a keyword is the results' destination).
    """

    def __init__(self, module: Module, plan: EntryPlan):
        self._module = module
        self._plan = plan
        self.name = plan.name
        self.signature = plan.signature
        self._exact = [(_DTYPES.get(t.dtype), t.shape) for t in plan.signature.inputs]
        # a dynamic module's entry: inputs of any sizes its symbols allow, checked per call
        self._dynamic = bool(module.symbols)

    def check_inputs(self, *inputs: Any, **named: Any) -> list[np.ndarray | DevicePointer]:
        """The inputs as this entry will see them, or the InputError calling it would raise."""
        arranged = arrange(self._plan, _given(inputs), named)
        if not self._dynamic:
            return check_inputs(self._plan, arranged)
        resident = self._module._enter()
        try:
            return check_inputs(self._module._program(resident, self._plan, arranged).plan,
                                arranged)
        finally:
            del resident
            self._module._leave()

    def __call__(self, *inputs: Any, out: Any = None, results_on_device: bool = False,
                 **named: Any) -> Any:
        """The results: None without outputs, the array for one, a tuple for several.

        `out` (an array, or one per output) receives the results instead of fresh arrays:
        each a C-contiguous, writable array of its output's exact type (numpy, or on cuda a
        device array), which is returned. `results_on_device=True` leaves the results a
        device holds there, as `DeviceArray`s (results computed on the cpu stay numpy)."""
        if out is None and not results_on_device and not named and self._plain(inputs):
            module = self._module
            resident = module._enter()
            try:
                outputs = (resident.sized(self._plan, inputs) if self._dynamic else
                           resident.program(self._plan)).run_plain(inputs)
            finally:
                del resident  # (as in `Module.execute`)
                module._leave()
        else:
            outputs = self._run(inputs, named, out, results_on_device).outputs
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else outputs

    def _reading(self, inputs: Sequence[np.ndarray],
                 read: Callable[[Sequence[np.ndarray]], Any]) -> Any:
        """A plain call (`_plain` inputs) whose results `read` sees as views of the call's
        buffers, valid only inside it (`Program.run_reading`); what `read` returns."""
        module = self._module
        resident = module._enter()
        try:
            program = resident.sized(self._plan, inputs) if self._dynamic else \
                resident.program(self._plan)
            return program.run_reading(inputs, read)
        finally:
            del resident  # (as in `Module.execute`)
            module._leave()

    def _holding(self, inputs: Sequence[np.ndarray],
                 use: Callable[[Program, Arena], Any]) -> Any:
        """What `use` returns, given the program of `inputs`' sizes and an arena of it held
        for the caller alone (`Program.holding`): for a caller that runs the arena's steps
        itself (the native decode loop, `generate`)."""
        module = self._module
        resident = module._enter()
        try:
            program = resident.sized(self._plan, inputs) if self._dynamic else \
                resident.program(self._plan)
            return program.holding(functools.partial(use, program))
        finally:
            del resident  # (as in `Module.execute`)
            module._leave()

    def _output_device(self, index: int) -> hal.Device:
        """The loaded device that computes output `index` (where a COPY brings it to the
        host, the device it is copied from)."""
        resident = self._module._resident
        if resident is None:
            raise ClosedError(f"module '{self._module.path}' is closed")
        commands = self._plan.commands
        slot = next(c.slot for c in commands if c.op is Op.OUTPUT and c.index == index)
        source = next((c.src for c in reversed(commands) if c.op is Op.COPY and c.dst == slot),
                      slot)
        return resident.devices[resident.plan.slot_device(source)]

    def _plain(self, inputs: tuple[Any, ...]) -> bool:
        """Whether `inputs` are what the call checks them into anyway -- numpy arrays of
        the exact types, contiguous -- so that it can skip the checks (the common call)."""
        if len(inputs) != len(self._exact):
            return False
        for x, (dtype, shape) in zip(inputs, self._exact):  # noqa: B905 (lengths checked)
            if x.__class__ is not np.ndarray or x.dtype is not dtype or not x.flags.c_contiguous \
                    or (len(x.shape) != len(shape) if self._dynamic else x.shape != shape):
                return False  # (a dynamic entry's sizes are bound, and checked, by the call)
        return True

    def results(self, *inputs: Any, out: Any = None, results_on_device: bool = False,
                **named: Any) -> dict[str, Any]:
        """The results by name, in output order (`Execution.results`): the module's output
        names, or `output_0`, `output_1`, ... where it names none."""
        return self._run(inputs, named, out, results_on_device).results

    def _run(self, inputs: tuple[Any, ...], named: dict[str, Any], out: Any,
             results_on_device: bool) -> Execution:
        if out is not None and (isinstance(out, np.ndarray) or is_device_array(out)):
            out = (out,)
        return self._module.execute(self.name, arrange(self._plan, _given(inputs), named),
                                    out=out, results_on_device=results_on_device)

    def __str__(self) -> str:
        s = self.signature
        return f"{self.name}({typed(s.input_names, s.inputs)}) -> " \
               f"({typed(s.output_names, s.outputs)})"

    def __repr__(self) -> str:
        return f"<hexir_runtime.EntryPoint {self}>"


def _given(inputs: tuple[Any, ...]) -> Sequence[Any] | Mapping[str, Any]:
    """A call's positional arguments: one mapping is the inputs by name."""
    return inputs[0] if len(inputs) == 1 and type(inputs[0]) is not np.ndarray and \
        isinstance(inputs[0], Mapping) else inputs


class Module:
    """A loaded `.hxb`: its entry points, ready to run on the devices it was loaded with."""

    def __init__(self, path: Source, device: str = "cpu", *, copy: bool = False,
                 max_alloc_bytes: int = DEFAULT_MAX_ALLOC_BYTES, cuda_graphs: bool = True,
                 driver: Any = None):
        if not isinstance(device, str):
            raise DeviceError(f"device must be 'cpu' or 'cuda', not {device!r}")
        try:
            requested = Device.from_name(device)
        except ValueError as e:
            raise DeviceError(str(e)) from None
        self._mapped = MappedModule(path, copy=copy)
        self.path = self._mapped.path
        parsed = self._mapped.module
        # a module just parsed (not yet closed), from the bytes its layout describes
        assert parsed is not None and parsed.layout is not None
        try:
            plan = check_module(parsed, max_alloc_bytes=max_alloc_bytes)
            devices = {Device.CPU: hal.create_device("cpu")}
            # cuda is made available, not imposed: a module that never needs it runs on the
            # cpu alone, and a host without a driver is not asked for one.
            if requested is Device.CUDA and any(need.device is Device.CUDA
                                                for p in plan.entries.values() for need in p.needs):
                devices[Device.CUDA] = hal.create_device("cuda", driver=driver,
                                                         graphs=cuda_graphs)
        except BaseException:
            self._mapped.close()
            raise
        self.version = plan.module.version
        self.layout = parsed.layout
        #: the module's size symbols (empty for a static module)
        self.symbols = plan.module.symbols
        self._plans = plan.entries
        self._cpu_code = {name: _cpu_code(plan, name) for name in plan.entries}
        self._resident: Resident | None = Resident(plan, devices,
                                                   max_alloc_bytes=max_alloc_bytes)
        # The calls in flight, by thread (a count each: a PRINT callback may call again):
        # close() waits for them, and a call never sees its resources freed under it.
        self._calls: dict[int, int] = {}
        # entering and leaving a call take the lock alone (a C call, where the Condition's
        # own methods are Python's: with the cache cold after a call's kernels, each Python
        # call costs microseconds); a close waits on the condition
        self._lock = threading.Lock()
        self._state = threading.Condition(self._lock)
        self._closing: Resident | None = None  # closed, not yet freed
        self._freed_by_last_call = False  # closed from inside a call: its end frees
        self._entries = {name: EntryPoint(self, p) for name, p in plan.entries.items()}

    # ---- running -------------------------------------------------------------------------

    def prepare(self, entry: str = "main") -> EntryPoint:
        """The entry point, once this load is known to have every device it needs and its
        kernels are loaded; running it later cannot fail for those reasons."""
        plan = self._plan(entry)
        resident = self._enter()
        try:
            if self._entries[entry]._dynamic:
                resident.ready(plan)
            else:
                resident.program(plan)
        finally:
            self._leave()
        return self._entries[entry]

    def execute(self, entry: str = "main", inputs: Sequence[Any] | Mapping[str, Any] = (),
                on_print: Printer | None = None, out: Sequence[Any] | None = None,
                results_on_device: bool = False) -> Execution:
        """Run `entry` on `inputs` (by position, or a mapping by input name); `on_print` sees
        each PRINTed array as it is printed; `out` (one array per output, of its exact type)
        receives the results instead of fresh arrays; `results_on_device` leaves the results
        a device holds there (`DeviceArray`s)."""
        plan = self._plan(entry)
        arranged = arrange(plan, inputs)
        dynamic = self._entries[plan.name]._dynamic
        if not dynamic:
            checked = check_inputs(plan, arranged)
        resident = self._enter()
        program: Program | None = None
        try:
            program = self._program(resident, plan, arranged)
            if dynamic:  # the entry with this call's sizes
                plan = program.plan
                checked = check_inputs(plan, arranged)
            if out is not None:
                out = check_outputs(plan, out)
            pointers = out is not None or DevicePointer in map(type, checked)
            if pointers and any(isinstance(x, DevicePointer) for x in (*checked, *(out or ()))) \
                    and Device.CUDA not in {d.kind for d in self.devices_used(entry)}:
                raise InputError(f"{plan.name} got a cuda array, but it runs on the cpu alone "
                                 "in this load: pass numpy arrays (or load a cuda module with "
                                 "device='cuda')")
            return program.run(checked, on_print, out, results_on_device)
        finally:
            del resident, program  # a close made inside the call can unmap the file as it
            self._leave()  # leaves: nothing here may hold what holds the mapping's views

    def _program(self, resident: Resident, plan: EntryPlan, inputs: Sequence[Any]) -> Program:
        """The program a call of `plan` on `inputs` runs: the entry's, or a dynamic module's
        for the sizes of `inputs` (refused in one line when they do not fit)."""
        if not self._entries[plan.name]._dynamic:
            return resident.program(plan)
        if type(inputs) not in (tuple, list) or len(inputs) != len(plan.signature.inputs):
            try:  # the count, or the container, refused as for any entry, with the sizes
                check_inputs(plan, inputs)
            except InputError as e:
                sizes = ", ".join(map(str, self.symbols))
                raise InputError(f"{e}; its sizes: {sizes}") from None
        return resident.sized(plan, inputs)

    @property
    def cache_info(self) -> tuple[int, int, int]:
        """A dynamic module's plans for the sizes of its calls: (hits, misses, kept): how
        many calls found their sizes' program made by an earlier call, how many made one,
        and how many are kept now (the last `sizes.CACHED_BINDINGS` per entry point)."""
        resident = self._resident
        if resident is None:
            return (0, 0, 0)
        return (resident.hits, resident.misses, len(resident.sized_programs))

    def _enter(self) -> Resident:
        """What a call runs on, once the module is known to be open and its file unchanged;
        the call is in flight until its `_leave`, and a close waits for it."""
        me = threading.get_ident()
        with self._lock:
            resident = self._resident
            if resident is None:
                raise ClosedError(f"module '{self.path}' is closed")
            self._calls[me] = self._calls.get(me, 0) + 1
        try:
            self._mapped.check_unchanged()
        except BaseException:
            self._leave()
            raise
        return resident

    def _leave(self) -> None:
        me = threading.get_ident()
        with self._lock:
            if self._calls[me] > 1:
                self._calls[me] -= 1
                return
            del self._calls[me]
            if self._calls or self._closing is None:  # (no close waits for it)
                return
            self._state.notify_all()
            free, self._freed_by_last_call = self._freed_by_last_call, False
        if free:
            self._free()

    def run(self, entry: str = "main", *inputs: Any) -> list[np.ndarray]:
        """Run `entry` (inputs by position, or one mapping by name) and return what it
        printed, one array per PRINT."""
        return self.execute(entry, _given(inputs)).printed

    def profile(self, entry: str = "main", *inputs: Any, calls: int = 20) -> Profile:
        """Time `calls` calls of `entry` kernel by kernel (`hexir_runtime.profile`): each
        kernel's median time, share of the call, GFLOP/s and GB/s against the machine's
        peaks, and the runtime's own overhead per call; `str()` of it is a table."""
        self._plan(entry)
        return profile(self, entry, self._entries[entry].check_inputs(*inputs), calls)

    def generate(self, input_ids: Any, max_new_tokens: Any = 32, *,
                 eos_token_id: int | None = None, on_token: Callable[[int], Any] | None = None,
                 entry: str = "generate") -> np.ndarray:
        """Text generation with a module compiled with `hexir -generate`: the prompt
        `input_ids` ([1, P] token ids) followed by up to `max_new_tokens` greedy tokens,
        [1, P + n] int64 -- the tokens `transformers`' `generate(do_sample=False)` returns.
        It stops after the end-of-sequence token: `eos_token_id`, else the module's (if it
        declares one). `on_token` is called with each new token as it is chosen (streaming).
        The decode loop and its KV cache run inside the runtime (`hexir_runtime.generate`)."""
        return generate.run(self, self._generation(entry), input_ids, max_new_tokens,
                            eos_token_id, on_token)

    def _generation(self, entry: str) -> Generation:
        resident = self._resident
        if resident is None:
            raise ClosedError(f"module '{self.path}' is closed")
        module = resident.plan.module
        found = module.generation(entry)
        if found is None:
            names = ", ".join(g.name for g in module.generations) or "none"
            raise EntryNotFound(f"no generate entry point '{entry}' in '{self.path}' (it has: "
                                f"{names}; compile a decoder-with-past step model with "
                                "hexir -generate)")
        return found

    def generation_step(self, entry: str = "generate") -> str:
        """The entry point a generate entry point runs each step."""
        return self._generation(entry).step

    @property
    def generations(self) -> tuple[Generation, ...]:
        """The module's generate entry points (`m.generate` runs them)."""
        resident = self._resident
        return resident.plan.module.generations if resident is not None else ()

    @property
    def cpu_threads(self) -> int:
        """How many threads cpu kernels run on: $HEXIR_CPU_THREADS, else one per core. The
        process has one pool of them, shared by every module; no kernel starts others."""
        return threads.cpu_threads()

    def _plan(self, entry: str) -> EntryPlan:
        if entry not in self._plans:
            raise self._not_found(entry)
        return self._plans[entry]

    def _not_found(self, entry: str) -> EntryNotFound:
        names = ", ".join(self._plans) or "none"
        return EntryNotFound(f"no entry point '{entry}' in '{self.path}' (it has: {names})")

    # ---- entry points ----------------------------------------------------------------------

    @property
    def entry_points(self) -> dict[str, EntryPoint]:
        return dict(self._entries)

    def __getitem__(self, name: str) -> EntryPoint:
        self._plan(name)
        return self._entries[name]

    def __getattr__(self, name: str) -> EntryPoint:
        entries = self.__dict__.get("_entries", {})
        if name in entries:
            return entries[name]
        if name.startswith("_") or "_entries" not in self.__dict__:
            raise AttributeError(f"'{type(self).__name__}' has no attribute '{name}'")
        raise self._not_found(name)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __dir__(self) -> list[str]:
        return [*super().__dir__(), *(n for n in self._entries if n.isidentifier())]

    # ---- devices and lifetime --------------------------------------------------------------

    @property
    def devices(self) -> tuple[hal.Device, ...]:
        """The devices this load can run on (cpu first)."""
        return tuple(self._resident.devices.values()) if self._resident else ()

    def cpu_code(self, entry: str = "main") -> str | None:
        """The x86-64 level of the host code `entry` runs (None when it runs none), and, for a
        module compiled for several levels, the levels it holds: `x86-64-v4 (of x86-64-v2,
        x86-64-v3, x86-64-v4)`. The runtime picks the highest variant the host runs
        ($HEXIR_CPU_LEVEL caps it)."""
        self._plan(entry)
        return self._cpu_code[entry]

    def devices_used(self, entry: str = "main") -> tuple[hal.Device, ...]:
        """The devices `entry` needs, among those of this load, in the load's order."""
        needed = {need.device for need in self._plan(entry).needs} or {Device.CPU}
        return tuple(d for d in self.devices if d.kind in needed)

    @property
    def closed(self) -> bool:
        return self._resident is None

    def close(self) -> None:
        """Free device buffers and images, release the devices and unmap the file. Arrays
        returned by runs are copies and stay valid. Calls begun after a close are refused
        (`ClosedError`); a close waits for the calls in flight on other threads, and one made
        inside a call (a PRINT callback) is finished by the last call in flight as it returns.
        """
        with self._state:
            if self._resident is None:
                return
            self._closing, self._resident = self._resident, None
            if threading.get_ident() in self._calls:
                self._freed_by_last_call = True
                return
            self._state.wait_for(lambda: not self._calls)
        self._free()

    def _free(self) -> None:
        resident, self._closing = self._closing, None
        assert resident is not None, "freed after the close that set _closing"
        resident.close()
        del resident  # it holds views of the mapping: drop them before unmapping
        self._mapped.close()

    def __enter__(self) -> Module:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "on " + ", ".join(d.name for d in self.devices)
        entries = "; ".join(str(e) for e in self._entries.values()) or "no entry points"
        return f"<hexir_runtime.Module '{self.path}' v{self.version} {state}: {entries}>"
