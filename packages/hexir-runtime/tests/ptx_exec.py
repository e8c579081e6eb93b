"""A PTX executor: runs the PTX a cuda kernel's image carries, on the cpu, for the tests.

The fake driver (`fake_driver.py`) launches kernels through it, so a module's cuda path runs
the code the compiler emitted -- the NVVM lowering, libdevice as inlined, the bare-pointer
parameters, the alignment the kernels assume -- instead of a numpy body chosen by the kernel's
kind. tinygrad's mock GPU does the same.

Design. A launch's threads run in lock step, vectorised with numpy: every register is one
array with an element per thread, and an instruction is one numpy operation over the threads
that execute it. Several whole blocks run together (at most `GROUP_THREADS` threads), each
with its own shared memory. Divergence is handled by giving each thread its own program
counter and always executing the lowest one among the threads that can run: threads that
branched ahead wait until the others reach them, which is where structured code reconverges.
A thread at `bar.sync` waits until no thread can run; then every block's waiting threads
must be at one barrier (else `BarrierError`), and all are released together.

What a GPU would fault on fails here, naming the kernel, the PTX line and the address:
global accesses outside every allocation of the driver's memory, shared accesses outside the
block's declared shared memory, and accesses not aligned to their size (a `v4.b32` to 16
bytes: so the `.align 16` promise of the parameters is checked). Races are detected where
cheap: two threads of one store writing different values to one address, and, in shared
memory, a thread reading or overwriting bytes another thread wrote since the last barrier.
An instruction the executor does not know is refused by name (`UnsupportedError`), so a new
opcode in the compiler's output fails loudly rather than computing something else.

Module-scope `.global`/`.const` variables (libdevice's `__cudart_i2opi_f` table) are laid out
when the module is parsed, each in its own region of device memory on a 256-byte line from
the module's `globals_base` (the fake driver gives each load its own, in a window far above
its allocations), initialised or zeroed; every launch of the module sees them beside the
driver's allocations, so their addresses (`mov`, `cvta` of the name, `[name+k]`) are ordinary
global addresses, bounds-checked per variable. Stores to `.const` are refused.

Calls to `.func`s are inlined when the kernel is parsed: the callee's registers, labels and
variables are renamed apart per call site, its `.param` names become the caller's argument
variables, and its `ret` a branch to the call's end. A `.param` declared in a body (a call's
arguments and results) is thread-private, so it lives in the thread's local memory, where
`st.param`/`ld.param` reach it. The lock-step scheduler needs no call stack this way, and a
divergent return is an ordinary divergent branch. Recursion cannot be inlined and is refused
by name.

Numerics: IEEE operations round as the GPU's do (`.rn`, and the directed `.rm`/`.rp`/`.rz`
forms, emulated from the exact double result); `fma` of f32 is computed in f64 and rounded
once more (it can differ from a fused result in the last bit); approximate instructions
(`ex2.approx`, `sqrt.approx`, `rcp.approx`, `tanh.approx`, ...) are computed exactly, which is
within their documented error.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

#: At most this many threads (whole blocks) run at once: registers cost 8 bytes each per thread.
GROUP_THREADS = 1 << 15
FATBIN_MAGIC = 0xBA55ED50
WARP = 32
#: Generic addresses of shared and local memory (cvta): above any device allocation.
SHARED_WINDOW = 1 << 60
LOCAL_WINDOW = 1 << 61
#: Where a module's `.global`/`.const` variables live by default: far above the fake driver's
#: allocations and below the shared window, so neither collides with them.
GLOBALS_WINDOW = 1 << 59
ALIGN = 256


class PtxError(Exception):
    """A failure of the executed code or of the executor; the message names kernel and line."""


class UnsupportedError(PtxError):
    """The PTX uses an instruction, operand or directive the executor does not implement."""


class FaultError(PtxError):
    """An access a GPU would fault on: out of bounds or misaligned."""


class RaceError(PtxError):
    """Threads of a block touched the same bytes with no barrier between, or one store wrote
    different values to one address."""


class BarrierError(PtxError):
    """Threads of one block wait at different barriers."""


# ---- images ---------------------------------------------------------------------------------

def ptx_text(image: bytes) -> str:
    """The PTX of a cuda image: the newest-architecture PTX entry of a fatbin, or the image
    itself when it is PTX text. Compressed entries and CUBIN-only images are refused."""
    data = bytes(image).rstrip(b"\0")
    if data.lstrip().startswith(b"//") or (b".version" in data[:4096] and b"\0" not in data):
        return data.decode()
    if len(data) < 16 or struct.unpack_from("<I", data)[0] != FATBIN_MAGIC:
        raise UnsupportedError("the image is neither PTX text nor a fatbin")
    _, _, header, size = struct.unpack_from("<IHHQ", data)
    offset, end, found = header, header + size, []
    while offset + 64 <= min(end, len(data)):
        kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, offset)
        flags = struct.unpack_from("<Q", data, offset + 40)[0] if entry_header >= 48 else 0
        arch = struct.unpack_from("<I", data, offset + 28)[0]
        if kind == 1:
            if flags & 0x2000:
                raise UnsupportedError("the fatbin's PTX entry is compressed")
            body = data[offset + entry_header:offset + entry_header + payload]
            found.append((arch, body.rstrip(b"\0").decode()))
        offset += entry_header + payload
    if not found:
        raise UnsupportedError("the fatbin carries no PTX entry (CUBIN only)")
    return max(found)[1]


# ---- parsing --------------------------------------------------------------------------------

TYPES = {
    "pred": np.bool_, "b8": np.uint8, "u8": np.uint8, "s8": np.int8,
    "b16": np.uint16, "u16": np.uint16, "s16": np.int16, "f16": np.float16,
    "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32,
    "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64,
}
UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SIGNED = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


@dataclass
class Instruction:
    line: int
    text: str
    guard: tuple[str, bool] | None
    opcode: str
    operands: list[str]
    run: Callable | None = None
    #: "op", "branch", "barrier", "exit"
    flow: str = "op"
    target: int = 0


@dataclass
class Kernel:
    name: str
    params: list[tuple[str, int]]  # (name, size in bytes), in order
    registers: dict[str, np.dtype] = field(default_factory=dict)
    shared: dict[str, int] = field(default_factory=dict)  # symbol -> offset
    shared_size: int = 0
    local: dict[str, int] = field(default_factory=dict)
    local_size: int = 0
    code: list[Instruction] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)
    #: the module's `.global`/`.const` variables: name -> device address
    globals: dict[str, int] = field(default_factory=dict)
    #: sizes of the local variables, so a redeclared one (a call's `.param`s) reuses its slot
    local_sizes: dict[str, int] = field(default_factory=dict)
    calls: int = 0  # calls inlined so far: names each one's renamed registers and labels


@dataclass
class Function:
    """A `.func`: inlined at each call (see `_call`)."""
    name: str
    params: list[str]
    returns: list[str]
    body: str
    first_line: int


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(r"\.(?:visible\s+|weak\s+)?\.?entry\s+([\w$]+)\s*\((.*?)\)(.*?)\{", re.S)


def parse(text: str, globals_base: int = GLOBALS_WINDOW
          ) -> tuple[dict[str, Kernel], dict[int, bytearray]]:
    """The kernels (`.entry`s) of a PTX module, their instructions compiled, and its
    module-scope variables laid out from `globals_base` ({address: bytes})."""
    text = _COMMENTS.sub("", text)
    functions, bodies = {}, []
    for match in _FUNC.finditer(text):
        returns, name, params = match.groups()
        after = re.match(r"[^{;]*", text[match.end():]).end() + match.end()
        if text[after] != "{":
            continue  # a prototype
        body, end = _body(text, after + 1)
        bodies.append((match.start(), end))
        functions[name] = Function(name, _param_names(params), _param_names(returns or ""),
                                   body, text[:after + 1].count("\n") + 1)
    entries = []
    for match in _ENTRY.finditer(text):
        body, end = _body(text, match.end())
        bodies.append((match.start(), end))
        entries.append((match, body))
    outside, at = "", 0
    for start, end in sorted(bodies):
        outside, at = outside + text[at:start] + "\n" * text[start:end].count("\n"), end
    addresses, regions = _globals(outside + text[at:], globals_base)
    kernels = {}
    for match, body in entries:
        name, params, _ = match.groups()
        kernel = Kernel(name, [_param(p) for p in params.split(",") if p.strip()],
                        globals=addresses)
        _statements(kernel, body, text[:match.end()].count("\n") + 1, functions, ())
        for ins in kernel.code:
            _compile(kernel, ins)
        kernels[name] = kernel
    return kernels, regions


_FUNC = re.compile(r"\.func\s+(?:\(([^)]*)\)\s*)?([\w$]+)\s*\(([^)]*)\)")
_GLOBAL = re.compile(r"(?:\.(?:visible|weak|extern)\s+)*\.(global|const)\s+([^;=]*?)\s*"
                     r"(?:=\s*([^;]*?))?\s*;")


def _param_names(decls: str) -> list[str]:
    names = []
    for decl in decls.split(","):
        if decl.strip():
            if not decl.split()[0] == ".param":
                raise UnsupportedError(f"a function parameter that is not .param: '{decl}'")
            names.append(re.sub(r"\[.*", "", decl.split()[-1]))
    return names


def _globals(text: str, base: int) -> tuple[dict[str, int], dict[int, bytearray]]:
    """The module-scope `.global`/`.const` variables of `text` (the module without its
    function bodies), each its own zero-filled or initialised region from `base`, on
    `ALIGN`-byte lines as the driver's allocations are (so an access past one faults)."""
    addresses, regions = {}, {}
    for match in _GLOBAL.finditer(text):
        space, decl, init = match.groups()
        line = text[:match.start()].count("\n") + 1
        words = decl.split()
        if "extern" in match.group(0).split()[0]:
            raise UnsupportedError(f"line {line}: an .extern variable has no definition here")
        type_ = next((w[1:] for w in words if w[1:] in TYPES), None)
        shape = re.fullmatch(r"([\w$]+)((?:\[\d*\])*)", words[-1])
        if type_ is None or type_ == "pred" or not shape:
            raise UnsupportedError(f"line {line}: .{space} variable '{decl}'")
        dtype = np.dtype(TYPES[type_])
        values = []
        if init is not None:
            for item in init.replace("{", " ").replace("}", " ").split(","):
                try:
                    values.append(_imm(item.strip(), dtype) if dtype.kind != "f" or
                                  re.match(r"0[fFdD]", item.strip()) else
                                  dtype.type(float(item)))
                except ValueError:
                    raise UnsupportedError(f"line {line}: initialiser '{item.strip()}' of "
                                           f".{space} variable {shape.group(1)}") from None
        count = 1
        for dim in re.findall(r"\[(\d*)\]", shape.group(2)):
            count *= int(dim) if dim else len(values)
        if len(values) > count:
            raise UnsupportedError(f"line {line}: {len(values)} initialisers for the {count} "
                                   f"elements of {shape.group(1)}")
        data = np.zeros(count, dtype)
        data[:len(values)] = values
        addresses[shape.group(1)] = base
        regions[base] = bytearray(data.tobytes())
        base += -(-max(data.nbytes, 1) // ALIGN) * ALIGN
    return addresses, regions


def _body(text: str, start: int) -> tuple[str, int]:
    depth, i = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1], i


def _param(decl: str) -> tuple[str, int]:
    words = decl.split()
    name = words[-1]
    array = re.fullmatch(r"([\w$]+)\[(\d+)\]", name)
    type_ = next(w[1:] for w in words if w[1:] in TYPES)
    size = np.dtype(TYPES[type_]).itemsize
    if array:
        name, size = array.group(1), size * int(array.group(2))
    return name, size


def _statements(kernel: Kernel, body: str, first_line: int, functions: dict[str, Function],
                stack: tuple[str, ...], end: str | None = None) -> None:
    """Appends the instructions of `body` to the kernel (not yet compiled). Inside an inlined
    function (`stack` names the calls in progress) `ret` branches to its `end` label."""
    pending_labels = []
    line = first_line
    for raw in re.split(r"(;|\n)", body):
        if raw == "\n":
            line += 1
            continue
        stmt = raw.strip()
        # a scope `{ .reg .b32 tmp; mov.b64 {%r2, tmp}, %rd7; }` (libdevice's inline asm): its
        # registers are declared kernel-wide, which is safe as every scope gives one type
        while stmt.startswith("{") and not stmt.startswith("{%"):
            stmt = stmt[1:].strip()
        if stmt.endswith("}") and stmt.count("{") < stmt.count("}"):
            stmt = stmt[:-1].strip()
        if not stmt or stmt == ";":
            continue
        while (label := re.match(r"^([\w$]+)\s*:\s*", stmt)):
            kernel.labels[label.group(1)] = len(kernel.code)
            stmt = stmt[label.end():]
            pending_labels.append(label.group(1))
        if not stmt or stmt in ("{", "}"):
            continue
        if stmt.startswith("."):
            _directive(kernel, stmt, line)
            continue
        guard = None
        g = re.match(r"^@(!?)(%[\w.$]+)\s+", stmt)
        if g:
            guard = (g.group(2), g.group(1) == "!")
            stmt = stmt[g.end():]
        opcode, _, rest = re.sub(r"\s+", " ", stmt, count=1).partition(" ")
        if opcode.split(".")[0] == "call":
            if guard:
                raise UnsupportedError(f"{kernel.name}: line {line}: a predicated call")
            _call(kernel, stmt, line, functions, stack)
            continue
        if stack and opcode in ("ret", "ret.uni"):
            opcode, rest = "bra.uni", end
        kernel.code.append(Instruction(line, stmt, guard, opcode, _operands(rest)))


_CALL = re.compile(r"call(?:\.uni)?\s+(?:\(([^)]*)\)\s*,\s*)?([\w$]+)\s*(?:,\s*\(([^)]*)\))?")


def _call(kernel: Kernel, stmt: str, line: int, functions: dict[str, Function],
          stack: tuple[str, ...]) -> None:
    """Inlines a call: the callee's body, its registers, labels and variables renamed apart
    (`%r1` -> `%c3$r1`, `L1` -> `c3$L1`) and its `.param` names replaced by the caller's
    argument variables, which live in the thread's local memory (`.param` in a body)."""
    call = _CALL.fullmatch(stmt.strip())
    where = f"{kernel.name}: line {line}"
    if not call:
        raise UnsupportedError(f"{where}: call '{stmt}'")
    returns, name, args = (g.split(",") if g else [] for g in call.groups())
    name = name[0].strip()
    if name not in functions:
        raise UnsupportedError(f"{where}: call of '{name}', which the module does not define")
    if name in stack:
        raise UnsupportedError(f"{where}: recursive call of '{name}' "
                               f"({' -> '.join((*stack, name))})")
    func = functions[name]
    returns, args = [r.strip() for r in returns], [a.strip() for a in args]
    if len(args) != len(func.params) or len(returns) != len(func.returns):
        raise UnsupportedError(f"{where}: '{name}' takes {len(func.params)} parameters and "
                               f"{len(func.returns)} results, the call passes {len(args)} and "
                               f"{len(returns)}")
    for arg in args + returns:
        if arg not in kernel.local:
            raise UnsupportedError(f"{where}: call argument '{arg}' is not a .param variable")
    kernel.calls += 1
    tag = f"c{kernel.calls}"
    names = dict(zip(func.params + func.returns, args + returns, strict=True))
    for decl in re.finditer(r"(%[\w$]+)(?:<(\d+)>)?", " ".join(
            d.group(1) for d in re.finditer(r"\.reg\s+\.\w+\s+([^;]*);", func.body))):
        reg, count = decl.groups()
        for n in [reg] + [f"{reg}{i}" for i in range(int(count or 0))]:
            names[n] = f"%{tag}${n[1:]}"
    labels_and_variables = (r"([\w$]+)\s*:|(?:^|[;{}])\s*\.(?:param|local|shared)\b"
                            r"[^;]*?([\w$]+)\s*(?:\[\d*\])?\s*;")
    for decl in re.finditer(labels_and_variables, func.body, re.M):
        own = decl.group(1) or decl.group(2)
        names[own] = f"{tag}${own}"
    body = re.sub(r"(?<![\w$.%])%?[\w$]+", lambda m: names.get(m.group(0), m.group(0)),
                  func.body)
    end = f"{tag}$return"
    _statements(kernel, body, func.first_line, functions, (*stack, name), end)
    kernel.labels[end] = len(kernel.code)


def _operands(rest: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _directive(kernel: Kernel, stmt: str, line: int) -> None:
    words = stmt.replace(",", " ").split()
    head = words[0]
    if head == ".reg":
        type_ = words[1][1:]
        if type_ not in TYPES:
            raise UnsupportedError(f"{kernel.name}: line {line}: register type .{type_}")
        for name in words[2:]:
            many = re.fullmatch(r"(%[\w$]+)<(\d+)>", name)
            names = [f"{many.group(1)}{i}" for i in range(int(many.group(2)))] if many \
                else [name]
            for n in names:
                kernel.registers[n] = np.dtype(TYPES[type_])
    elif head in (".shared", ".local", ".param"):
        # a `.param` in a body holds a call's argument or result: thread-private, as local
        decl = words[-1]
        array = re.fullmatch(r"([\w$]+)\[(\d*)\]", decl)
        type_ = next(w[1:] for w in words[1:-1] if w[1:] in TYPES)
        # a variable is aligned to its type's size unless `.align` says more
        align = max(int(words[words.index(".align") + 1]) if ".align" in words else 1,
                    np.dtype(TYPES[type_]).itemsize)
        size = np.dtype(TYPES[type_]).itemsize * (int(array.group(2) or 0) if array else 1)
        name = array.group(1) if array else decl
        if head != ".shared" and kernel.local_sizes.get(name, -1) >= size:
            return  # declared again (another call's scope): its slot serves
        if head != ".shared":
            kernel.local_sizes[name] = size
        table = kernel.shared if head == ".shared" else kernel.local
        used = kernel.shared_size if head == ".shared" else kernel.local_size
        offset = -(-used // align) * align
        table[name] = offset
        if head == ".shared":
            kernel.shared_size = offset + size
        else:
            kernel.local_size = offset + size
    elif head in (".pragma", ".loc", ".file", ".maxntid", ".reqntid", ".minnctapersm",
                  ".maxnreg"):
        pass
    else:
        raise UnsupportedError(f"{kernel.name}: line {line}: directive {head}")


# ---- execution state ------------------------------------------------------------------------

class Memory:
    """The device's global memory: allocations {base address: bytearray} (the fake driver's)."""

    def __init__(self, regions: dict[int, bytearray]):
        self.regions = regions
        self.bases = np.array(sorted(regions), dtype=np.uint64)
        self.ends = np.array([b + len(regions[b]) for b in sorted(regions)], dtype=np.uint64)

    def locate(self, addresses: np.ndarray, size: int, where: str) -> np.ndarray:
        """The index of the allocation holding each access of `size` bytes, or a fault."""
        index = np.searchsorted(self.bases, addresses, side="right").astype(np.int64) - 1
        ok = index >= 0
        ok[ok] &= addresses[ok] + np.uint64(size) <= self.ends[index[ok]]
        if not ok.all():
            bad = int(addresses[~ok][0])
            raise FaultError(f"{where}: {size}-byte global access at {bad:#x} is outside every "
                             "allocation (CUDA_ERROR_ILLEGAL_ADDRESS)")
        return index

    def _rows(self, addresses: np.ndarray, size: int, where: str):
        """[(allocation as rows of `size` bytes, row numbers, which accesses)] for accesses
        aligned to `size` (allocations start on 256-byte lines, so a row is one access)."""
        low, high = addresses.min(), addresses.max()
        first = int(np.searchsorted(self.bases, low, side="right")) - 1
        if first >= 0 and high + np.uint64(size) <= self.ends[first]:
            groups = [(first, slice(None))]
        else:
            index = self.locate(addresses, size, where)
            groups = [(int(i), index == i) for i in np.unique(index)]
        for i, which in groups:
            base = int(self.bases[i])
            region = self.regions[base]
            mem = np.frombuffer(region, np.uint8, count=len(region) // size * size)
            rows = ((addresses[which] - np.uint64(base)) // np.uint64(size)).astype(np.int64)
            yield mem.reshape(-1, size), rows, which

    def load(self, addresses: np.ndarray, size: int, where: str) -> np.ndarray:
        out = np.empty((len(addresses), size), np.uint8)
        for rows_of, rows, which in self._rows(addresses, size, where):
            out[which] = rows_of[rows]
        return out

    def store(self, addresses: np.ndarray, data: np.ndarray, where: str) -> None:
        for rows_of, rows, which in self._rows(addresses, data.shape[1], where):
            rows_of[rows] = data[which]


class State:
    """One group of whole blocks running together."""

    def __init__(self, kernel: Kernel, blocks: np.ndarray, grid, block, params: bytes,
                 memory: Memory):
        self.kernel = kernel
        per_block = block[0] * block[1] * block[2]
        self.per_block = per_block
        n = len(blocks) * per_block
        self.n = n
        local = np.tile(np.arange(per_block, dtype=np.int64), len(blocks))
        self.linear_tid = local
        self.block_of = np.repeat(np.arange(len(blocks), dtype=np.int64), per_block)
        ids = np.repeat(blocks, per_block)
        self.special = {
            "%tid.x": local % block[0], "%tid.y": local // block[0] % block[1],
            "%tid.z": local // (block[0] * block[1]),
            "%ntid.x": block[0], "%ntid.y": block[1], "%ntid.z": block[2],
            "%ctaid.x": ids % grid[0], "%ctaid.y": ids // grid[0] % grid[1],
            "%ctaid.z": ids // (grid[0] * grid[1]),
            "%nctaid.x": grid[0], "%nctaid.y": grid[1], "%nctaid.z": grid[2],
            "%laneid": local % WARP, "%warpid": local // WARP,
            "%nwarpid": -(-per_block // WARP),
        }
        self.regs = {name: np.zeros(n, dtype) for name, dtype in kernel.registers.items()}
        self.params = params
        self.memory = memory
        # rows padded to 16 bytes, so any aligned access is one row of a reshaped view
        self.shared = np.zeros((len(blocks), -(-max(kernel.shared_size, 1) // 16) * 16),
                               np.uint8)
        self.writer = np.full(self.shared.shape, -1, np.int32)  # shared bytes' writer since bar
        self.local = np.zeros((n, -(-max(kernel.local_size, 1) // 16) * 16), np.uint8)
        self.all = np.arange(n)


def _where(kernel: Kernel, ins: Instruction) -> str:
    return f"{kernel.name}: line {ins.line}: '{ins.text}'"


# ---- operands -------------------------------------------------------------------------------

def _imm(text: str, dtype: np.dtype):
    """An immediate as a `dtype` scalar; a float written as its bits (0f..., 0d...) keeps
    them when the instruction's type is an untyped one of the same size (`mov.b32`)."""
    for prefix, digits, bits, float_type in (("0f", 8, np.uint32, np.float32),
                                             ("0d", 16, np.uint64, np.float64)):
        if re.fullmatch(rf"0[{prefix[1]}{prefix[1].upper()}][0-9a-fA-F]{{{digits}}}", text):
            raw = np.array(int(text[2:], 16), bits)
            if dtype.kind != "f" and dtype.itemsize == raw.itemsize:
                return raw.view(dtype)[()]
            return raw.view(float_type).astype(dtype)[()]
    value = int(text.rstrip("Uu"), 0)
    if dtype.kind == "f":
        return dtype.type(value)
    bits = dtype.itemsize * 8
    return np.array(value & ((1 << bits) - 1), UNSIGNED[dtype.itemsize]).view(dtype)[()]


def _convert_bits(array: np.ndarray, dtype: np.dtype, signed_source: bool) -> np.ndarray:
    """`array`'s bits as `dtype`: reinterpreted when the sizes match, else extended (by the
    source's signedness) or truncated, as PTX moves a value between register sizes."""
    if array.dtype == dtype:
        return array
    if array.dtype == np.bool_ or dtype == np.bool_:
        return array.astype(dtype)
    if array.dtype.itemsize == dtype.itemsize:
        return array.view(dtype)
    source = (SIGNED if signed_source else UNSIGNED)[array.dtype.itemsize]
    widened = array.view(source).astype(
        (SIGNED if signed_source else UNSIGNED)[dtype.itemsize])
    return widened.view(UNSIGNED[dtype.itemsize]).view(dtype)


class Operands:
    """Compiles an instruction's operand strings into getters and setters over a State."""

    def __init__(self, kernel: Kernel, ins: Instruction):
        self.kernel, self.ins = kernel, ins

    def fail(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"{_where(self.kernel, self.ins)}: {what}")

    def get(self, text: str, dtype) -> Callable[[State, np.ndarray], np.ndarray]:
        dtype = np.dtype(dtype)
        neg = text.startswith("!")
        if neg:
            text = text[1:]
        if text in self.kernel.registers:
            source_signed = dtype.kind == "i"

            def read(st: State, sel):
                value = st.regs[text][sel]
                out = _convert_bits(value, dtype, source_signed)
                return ~out if neg else out
            return read
        if text in ("%tid.x", "%tid.y", "%tid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z",
                    "%laneid", "%warpid"):
            return lambda st, sel: st.special[text][sel].astype(dtype)
        if text in ("%ntid.x", "%ntid.y", "%ntid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z",
                    "%nwarpid"):
            return lambda st, sel: np.full(st.width, st.special[text], dtype)
        if text == "WARP_SZ":
            return lambda st, sel: np.full(st.width, WARP, dtype)
        if text in self.kernel.shared:
            offset = self.kernel.shared[text]
            return lambda st, sel: np.full(st.width, offset, dtype)
        if text in self.kernel.local:
            offset = self.kernel.local[text]
            return lambda st, sel: np.full(st.width, offset, dtype)
        if text in self.kernel.globals:
            address = self.kernel.globals[text]
            return lambda st, sel: np.full(st.width, address, dtype)
        try:
            value = _imm(text, dtype)
        except ValueError:
            raise self.fail(f"operand '{text}'") from None
        return lambda st, sel: np.full(st.width, value, dtype)

    def set(self, text: str, dtype) -> Callable[[State, np.ndarray, np.ndarray], None]:
        dtype = np.dtype(dtype)
        if text == "_":
            return lambda st, sel, value: None
        if text not in self.kernel.registers:
            raise self.fail(f"destination '{text}' is not a register")
        reg_type = self.kernel.registers[text]
        signed = dtype.kind == "i"

        def write(st: State, sel, value):
            value = np.asarray(value, dtype)
            if value.shape != (st.width,):
                value = np.full(st.width, value, dtype)
            st.regs[text][sel] = _convert_bits(value, reg_type, signed)
        return write

    def address(self, text: str) -> tuple[str | None, Callable]:
        """[base+offset]: the base symbol (a param, shared or local name) or None for a
        register/immediate base, and a getter of the u64 address."""
        inner = re.fullmatch(r"\[\s*([^\]+]+?)\s*(?:\+\s*(-?\w+))?\s*\]", text)
        if not inner:
            raise self.fail(f"address '{text}'")
        base, offset = inner.group(1), int(inner.group(2) or "0", 0)
        if base in self.kernel.registers:
            read = self.get(base, np.uint64)
            return None, lambda st, sel: read(st, sel) + np.uint64(offset & (2**64 - 1))
        names = dict(self.kernel.shared)
        names.update(self.kernel.local)
        names.update(self.kernel.globals)
        names.update({p: o for p, o in _param_offsets(self.kernel).items()})
        if base in names:
            value = np.uint64(names[base] + offset)
            return base, lambda st, sel: np.full(st.width, value, np.uint64)
        try:
            value = np.uint64(int(base, 0) + offset)
        except ValueError:
            raise self.fail(f"address base '{base}'") from None
        return None, lambda st, sel: np.full(st.width, value, np.uint64)


def _param_offsets(kernel: Kernel) -> dict[str, int]:
    offsets, at = {}, 0
    for name, size in kernel.params:
        align = min(size, 8)
        at = -(-at // align) * align
        offsets[name] = at
        at += size
    return offsets


# ---- instructions ---------------------------------------------------------------------------

def _parts(opcode: str) -> tuple[str, set[str], list[str]]:
    """(base op, modifiers, types in order) of an opcode like `cvt.rn.f32.s64`."""
    pieces = opcode.split(".")
    types = [p for p in pieces[1:] if p in TYPES]
    mods = {p for p in pieces[1:] if p not in TYPES}
    return pieces[0], mods, types


def _round_to(exact: np.ndarray, dtype, mode: str) -> np.ndarray:
    """The f64 values `exact` rounded to `dtype` in `mode` (rn, rz, rm, rp)."""
    nearest = exact.astype(dtype)
    if mode == "rn" or dtype == np.float64:
        return nearest
    back = nearest.astype(np.float64)
    down = np.nextafter(nearest, dtype(-np.inf))
    up = np.nextafter(nearest, dtype(np.inf))
    if mode == "rm":
        return np.where(back > exact, down, nearest)
    if mode == "rp":
        return np.where(back < exact, up, nearest)
    toward = np.where(exact > 0, np.where(back > exact, down, nearest),
                      np.where(back < exact, up, nearest))
    return toward  # rz


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x + y rounded, and its rounding error exactly (Knuth's TwoSum)."""
    total = x + y
    back = total - x
    return total, (x - (total - back)) + (y - back)


def _fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """`fma.rn.f64`: a * b + c rounded once, as the GPU does (libdevice's double-double
    arithmetic, e.g. in `pow`, depends on it). Vectorised with error-free transformations:
    a * b = p + e exactly (Dekker's product), p + c = s + t exactly (TwoSum), so the value is
    s + u + v with u + v = t + e exactly (TwoSum), and r = s + u rounded leaves w (s + u = r +
    w exactly). r is the value rounded once when v is 0, or when |w| + |v| stays clearly below
    half of r's smaller neighbouring gap (v cannot then move the value across a rounding
    boundary). The rest (near a boundary, or operands so large or small that the splitting is
    not exact) is computed with fractions, element by element. Infinities, NaNs and the sign
    of an exact zero from zero inputs are the unfused result's."""
    plain = a * b + c
    exact = np.isfinite(a) & np.isfinite(b) & np.isfinite(c) & ~((a * b == 0) & (c == 0))
    with np.errstate(over="ignore", invalid="ignore"):
        split = 134217729.0  # 2^27 + 1
        t_a, t_b = split * a, split * b
        a_hi, b_hi = t_a - (t_a - a), t_b - (t_b - b)
        a_lo, b_lo = a - a_hi, b - b_hi
        p = a * b
        e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
        s, t = _two_sum(p, c)
        u, v = _two_sum(t, e)
        fused, w = _two_sum(s, u)
        gap = np.spacing(np.nextafter(np.abs(fused), 0))  # the smaller gap beside |r|
        settled = (v == 0) | ((np.abs(w) + np.abs(v)) < gap * (0.5 - 2.0 ** -40))
    small = 2.0 ** -900
    safe = (exact & (np.abs(a) < 2.0 ** 500) & (np.abs(b) < 2.0 ** 500) & (np.abs(c) < 2.0 ** 1000)
            & ((a == 0) | (b == 0) | (np.abs(p) > small)) & settled & np.isfinite(fused))
    out = np.where(safe, fused, plain)
    for i in np.flatnonzero(exact & ~safe):
        value = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        try:
            out[i] = float(value) if value else 0.0
        except OverflowError:
            out[i] = np.inf if value > 0 else -np.inf
    return out


def _flush(x: np.ndarray) -> np.ndarray:
    """.ftz: subnormal f32 inputs and results become zero of the same sign."""
    tiny = np.abs(x) < np.finfo(np.float32).tiny
    return np.where(tiny & (x != 0), np.copysign(np.float32(0), x), x)


_CMP = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
    "hi": np.greater, "hs": np.greater_equal,
}


def _compare(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op in ("num", "nan"):
        either = np.isnan(a) | np.isnan(b)
        return ~either if op == "num" else either
    if op.endswith("u") and op[:-1] in _CMP and a.dtype.kind == "f":
        return _CMP[op[:-1]](a, b) | np.isnan(a) | np.isnan(b)
    if op in ("equ", "neu", "ltu", "leu", "gtu", "geu"):
        return _CMP[op[:-1]](a, b) | np.isnan(a) | np.isnan(b)
    if op == "ne" and a.dtype.kind == "f":
        return (a != b) & ~np.isnan(a) & ~np.isnan(b)
    return _CMP[op](a, b)


def _int_unsigned(t: str) -> bool:
    return t[0] in "ub"


def _compile(kernel: Kernel, ins: Instruction) -> None:
    """Sets `ins.run` (state, selected thread indices) and its control-flow kind."""
    ops = Operands(kernel, ins)
    base, mods, types = _parts(ins.opcode)
    args = ins.operands
    t = types[-1] if types else None
    dtype = np.dtype(TYPES[t]) if t else None

    if base in ("bra", "brx"):
        if base == "brx" or args[0] not in kernel.labels:
            raise ops.fail(f"branch target '{args[0]}'")
        ins.flow, ins.target = "branch", kernel.labels[args[0]]
        return
    if base in ("ret", "exit"):
        ins.flow = "exit"
        return
    if base in ("bar", "barrier") and ("sync" in mods or not mods - {"aligned"}):
        if "warp" in mods:
            ins.run = lambda st, sel: None
            return
        if args and args[0] not in ("0",):
            raise ops.fail("only barrier 0 with all of the block's threads is supported")
        ins.flow = "barrier"
        return
    if base in ("membar", "fence"):
        ins.run = lambda st, sel: None
        return

    def unary(fn):
        a = ops.get(args[1], dtype)
        out = ops.set(args[0], dtype)
        ins.run = lambda st, sel: out(st, sel, fn(a(st, sel)))

    def binary(fn):
        a, b = ops.get(args[1], dtype), ops.get(args[2], dtype)
        out = ops.set(args[0], dtype)
        ins.run = lambda st, sel: out(st, sel, fn(a(st, sel), b(st, sel)))

    float_op = dtype is not None and dtype.kind == "f"
    mode = next((m for m in ("rn", "rz", "rm", "rp") if m in mods), "rn")
    ftz = "ftz" in mods and t == "f32"

    def rounded(fn):
        """A float op computed exactly in f64 and rounded to the type in the mode."""
        def go(*xs):
            if ftz:
                xs = tuple(_flush(x) for x in xs)
            if dtype == np.float32 and (mode != "rn" or len(xs) == 3):
                value = fn(*(x.astype(np.float64) for x in xs))
                out = _round_to(value, dtype.type, mode)
            elif dtype == np.float64 and len(xs) == 3 and mode == "rn":
                out = _fma64(*xs)
            else:
                out = fn(*xs).astype(dtype)
            if "sat" in mods:
                out = np.where(np.isnan(out), dtype.type(0), np.clip(out, 0, 1))
            return _flush(out) if ftz else out
        return go

    if base == "mov":
        if args[1].startswith("{"):  # pack registers into a wider one
            parts = [p.strip() for p in args[1][1:-1].split(",")]
            width = dtype.itemsize // len(parts)
            getters = [ops.get(p, UNSIGNED[width]) for p in parts]
            out = ops.set(args[0], UNSIGNED[dtype.itemsize])

            def pack(st, sel):
                pieces = [g(st, sel) for g in getters]
                out(st, sel, np.stack(pieces, axis=1).reshape(-1).view(
                    UNSIGNED[dtype.itemsize]))
            ins.run = pack
            return
        if args[0].startswith("{"):  # unpack
            parts = [p.strip() for p in args[0][1:-1].split(",")]
            width = dtype.itemsize // len(parts)
            a = ops.get(args[1], UNSIGNED[dtype.itemsize])
            outs = [ops.set(p, UNSIGNED[width]) for p in parts]

            def unpack(st, sel):
                pieces = a(st, sel).view(UNSIGNED[width]).reshape(-1, len(parts))
                for k, o in enumerate(outs):
                    o(st, sel, pieces[:, k].copy())
            ins.run = unpack
            return
        unary(lambda x: x)
        return
    if base == "cvta":
        to = "to" in mods
        space = next((m for m in ("global", "shared", "local", "const", "param") if m in mods),
                     None)
        window = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW}.get(space, 0)
        a = ops.get(args[1], np.uint64)
        out = ops.set(args[0], dtype)
        shift = np.uint64(window)
        ins.run = (lambda st, sel: out(st, sel, a(st, sel) - shift)) if to else \
            (lambda st, sel: out(st, sel, a(st, sel) + shift))
        return
    if base in ("ld", "st"):
        _memory(kernel, ins, ops, base, mods, dtype)
        return
    if base in ("addc", "subc", "madc") or ("cc" in mods and base in ("add", "sub", "mad")):
        _carry(kernel, ins, ops, base, mods, dtype)
        return
    if base in ("add", "sub", "mul", "mad", "fma", "div", "rem", "min", "max"):
        _arith(kernel, ins, ops, base, mods, types, rounded)
        return
    if base in ("neg", "abs"):
        if float_op:
            unary(rounded(np.negative if base == "neg" else np.abs))
        else:
            unary(np.negative if base == "neg" else np.abs)
        return
    if base in ("and", "or", "xor"):
        fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[base]
        if t == "pred":
            fn = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[base]
        binary(fn)
        return
    if base == "not":
        unary(np.logical_not if t == "pred" else np.invert)
        return
    if base == "cnot":
        unary(lambda x: (x == 0).astype(dtype))
        return
    if base in ("shl", "shr"):
        a = ops.get(args[1], dtype)
        b = ops.get(args[2], np.uint32)
        out = ops.set(args[0], dtype)
        bits = dtype.itemsize * 8

        def shift(st, sel):
            x, n = a(st, sel), b(st, sel).astype(np.int64)
            big = n >= bits
            n = np.minimum(n, bits - 1).astype(dtype)
            if base == "shl":
                value = np.where(big, dtype.type(0), x << n)
            elif dtype.kind == "i":
                value = np.where(big, x >> dtype.type(bits - 1), x >> n)
            else:
                value = np.where(big, dtype.type(0), x >> n)
            out(st, sel, value)
        ins.run = shift
        return
    if base == "selp":
        a, b = ops.get(args[1], dtype), ops.get(args[2], dtype)
        p = ops.get(args[3], np.bool_)
        out = ops.set(args[0], dtype)
        ins.run = lambda st, sel: out(st, sel, np.where(p(st, sel), a(st, sel), b(st, sel)))
        return
    if base in ("setp", "set"):
        _setp(kernel, ins, ops, base, mods, types)
        return
    if base == "cvt":
        _cvt(kernel, ins, ops, mods, types)
        return
    if base == "testp":
        op = next(iter(mods))
        tests = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x),
                 "notanumber": np.isnan,
                 "normal": lambda x: np.isfinite(x) & (np.abs(x) >= np.finfo(dtype).tiny),
                 "subnormal": lambda x: (x != 0) & (np.abs(x) < np.finfo(dtype).tiny)}
        if op not in tests:
            raise ops.fail(f"testp.{op}")
        a = ops.get(args[1], dtype)
        out = ops.set(args[0], np.bool_)
        ins.run = lambda st, sel: out(st, sel, tests[op](a(st, sel)))
        return
    if base == "copysign":  # d = b with the sign of a
        binary(lambda a, b: np.copysign(b, a))
        return
    if base in ("sqrt", "rsqrt", "rcp", "ex2", "lg2", "sin", "cos", "tanh"):
        fn = {"sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "rcp": lambda x: 1 / x,
              "ex2": np.exp2, "lg2": np.log2, "sin": np.sin, "cos": np.cos,
              "tanh": np.tanh}[base]
        unary(rounded(fn))
        return
    if base in ("popc", "clz", "brev", "bfind"):
        a = ops.get(args[1], dtype)
        out = ops.set(args[0], np.uint32)
        bits = dtype.itemsize * 8

        def bitcount(st, sel):
            x = a(st, sel).view(UNSIGNED[dtype.itemsize]).astype(object)
            if base == "popc":
                r = [bin(int(v)).count("1") for v in x]
            elif base == "clz":
                r = [bits - int(v).bit_length() for v in x]
            elif base == "bfind":
                r = [int(v).bit_length() - 1 if v else 0xFFFFFFFF for v in x]
            else:
                r = [int(f"{int(v):0{bits}b}"[::-1], 2) for v in x]
            out(st, sel, np.array(r, np.uint64).astype(np.uint32))
        ins.run = bitcount
        if base == "brev":
            out = ops.set(args[0], dtype)

            def reverse(st, sel):
                x = a(st, sel).view(UNSIGNED[dtype.itemsize])
                r = [int(f"{int(v):0{bits}b}"[::-1], 2) for v in x]
                out(st, sel, np.array(r, UNSIGNED[dtype.itemsize]).view(dtype))
            ins.run = reverse
        return
    if base == "bfe":
        a = ops.get(args[1], dtype)
        pos, length = ops.get(args[2], np.uint32), ops.get(args[3], np.uint32)
        out = ops.set(args[0], dtype)
        bits = dtype.itemsize * 8
        unsigned = np.dtype(UNSIGNED[dtype.itemsize])

        def extract(st, sel):
            x = a(st, sel).view(unsigned)
            p = np.minimum(pos(st, sel) & 0xFF, bits).astype(unsigned)
            n = np.minimum(length(st, sel) & 0xFF, bits).astype(unsigned)
            top = unsigned.type(bits - 1)
            shifted = np.where(p >= bits, unsigned.type(0), x >> np.minimum(p, top))
            ones = ~unsigned.type(0)
            mask = np.where(n >= bits, ones, (unsigned.type(1) << np.minimum(n, top)) - 1)
            field = shifted & mask
            if dtype.kind == "i":  # sign-extend from bit min(p + n - 1, bits - 1) of x
                sign_at = np.minimum(p + n - 1, top)
                negative = ((x >> sign_at) & 1).astype(bool) & (n > 0)
                field = np.where(negative, field | ~mask, field)
            out(st, sel, np.where(n == 0, unsigned.type(0), field).view(dtype))
        ins.run = extract
        return
    if base == "prmt":
        _prmt(ins, ops, mods)
        return
    if base == "shf":  # funnel shift of the 64 bits {b:a} by c (mod 32, or clamped to 32)
        lo, hi = ops.get(args[1], np.uint32), ops.get(args[2], np.uint32)
        n = ops.get(args[3], np.uint32)
        out = ops.set(args[0], np.uint32)

        def funnel(st, sel):
            pair = lo(st, sel).astype(np.uint64) | hi(st, sel).astype(np.uint64) << np.uint64(32)
            count = n(st, sel)
            count = count & np.uint32(31) if "wrap" in mods else np.minimum(count, 32)
            count = count.astype(np.uint64)
            if "l" in mods:
                value = (pair << count) >> np.uint64(32)
            else:
                value = pair >> count
            out(st, sel, (value & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        ins.run = funnel
        return
    if base == "shfl":
        _shfl(kernel, ins, ops, mods, types)
        return
    if base in ("atom", "red"):
        _atomic(kernel, ins, ops, base, mods, dtype)
        return
    raise ops.fail(f"instruction '{ins.opcode}' is not one the executor knows")


def _arith(kernel, ins, ops, base, mods, types, rounded) -> None:
    args = ins.operands
    t = types[-1]
    dtype = np.dtype(TYPES[t])
    if dtype.kind == "f":
        fns = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
               "fma": lambda a, b, c: a * b + c, "mad": lambda a, b, c: a * b + c,
               "min": np.minimum if "NaN" in mods else np.fmin,
               "max": np.maximum if "NaN" in mods else np.fmax}
        if base not in fns:
            raise ops.fail(f"instruction '{ins.opcode}'")
        getters = [ops.get(a, dtype) for a in args[1:]]
        out = ops.set(args[0], dtype)
        fn = rounded(fns[base]) if base not in ("min", "max") else fns[base]
        ins.run = lambda st, sel: out(st, sel, fn(*(g(st, sel) for g in getters)))
        return
    width = dtype.itemsize
    signed = dtype.kind == "i"
    if "wide" in mods:
        wide = np.dtype((SIGNED if signed else UNSIGNED)[2 * width])
        getters = [ops.get(a, dtype) for a in args[1:]]
        out = ops.set(args[0], wide)
        if base == "mul":
            ins.run = lambda st, sel: out(st, sel, getters[0](st, sel).astype(wide)
                                          * getters[1](st, sel).astype(wide))
        else:  # mad.wide: c is already wide
            c = ops.get(args[3], wide)
            ins.run = lambda st, sel: out(st, sel, getters[0](st, sel).astype(wide)
                                          * getters[1](st, sel).astype(wide) + c(st, sel))
        return
    getters = [ops.get(a, dtype) for a in args[1:]]
    out = ops.set(args[0], dtype)
    if "hi" in mods:
        def high(st, sel):
            a, b = (g(st, sel).astype(object) for g in getters[:2])
            bits = width * 8
            r = [(int(x) * int(y)) >> bits for x, y in zip(a, b, strict=True)]
            if base == "mad":
                r = [v + int(c) for v, c in zip(r, getters[2](st, sel).astype(object),
                                                 strict=True)]
            mask = (1 << bits) - 1
            out(st, sel, np.array([v & mask for v in r], UNSIGNED[width]).view(dtype))
        ins.run = high
        return

    def divide(a, b):
        zero = b == 0
        safe = np.where(zero, dtype.type(1), b)
        if signed:
            q = np.abs(a.astype(np.int64)) // np.abs(safe.astype(np.int64))
            q = np.where((a < 0) != (safe < 0), -q, q).astype(dtype)
        else:
            q = a // safe
        return np.where(zero, dtype.type(-1) if signed else np.iinfo(dtype).max, q)

    def remainder(a, b):
        zero = b == 0
        safe = np.where(zero, dtype.type(1), b)
        if signed:
            r = np.fmod(a, safe)
        else:
            r = a % safe
        return np.where(zero, a, r)

    fns = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
           "mad": lambda a, b, c: a * b + c, "div": divide, "rem": remainder,
           "min": np.minimum, "max": np.maximum}
    fn = fns[base]
    ins.run = lambda st, sel: out(st, sel, fn(*(g(st, sel) for g in getters)))


#: the thread's carry flag (CC.CF) of extended-precision arithmetic: a hidden register
CARRY = "%$carry"


def _carry(kernel, ins, ops, base, mods, dtype) -> None:
    """Extended-precision integer arithmetic: `add.cc`/`sub.cc`/`mad.cc` set the carry (a
    borrow for sub), `addc`/`subc`/`madc` take it in, and set it too with `.cc`. Computed
    on Python ints (these run rarely, e.g. in libdevice's trig range reduction)."""
    kernel.registers[CARRY] = np.dtype(np.uint8)
    if dtype.kind not in "iu":
        raise ops.fail(f"instruction '{ins.opcode}'")
    bits = dtype.itemsize * 8
    getters = [ops.get(a, UNSIGNED[dtype.itemsize]) for a in ins.operands[1:]]
    out = ops.set(ins.operands[0], UNSIGNED[dtype.itemsize])
    carry_in = ops.get(CARRY, np.uint8)
    carry_out = ops.set(CARRY, np.uint8)
    takes, sets = base.endswith("c"), "cc" in mods
    op = base.rstrip("c") if base != "madc" else "mad"

    def run(st, sel):
        xs = [g(st, sel).astype(object) for g in getters]
        cf = carry_in(st, sel).astype(object) if takes else 0
        if op == "add":
            r = xs[0] + xs[1] + cf
        elif op == "sub":
            r = xs[0] - (xs[1] + cf)
        else:
            product = xs[0] * xs[1]
            part = product >> bits if "hi" in mods else product & ((1 << bits) - 1)
            r = part + xs[2] + cf
        mask = (1 << bits) - 1
        out(st, sel, np.array([int(v) & mask for v in r], UNSIGNED[dtype.itemsize]))
        if sets:
            carry_out(st, sel, np.array([int(v) >> bits != 0 for v in r], np.uint8))
    ins.run = run


def _setp(kernel, ins, ops, base, mods, types) -> None:
    args = ins.operands
    t = types[-1]
    dtype = np.dtype(TYPES[t])
    cmp = next(m for m in mods if m in _CMP or m in ("num", "nan") or
               (m.endswith("u") and m[:-1] in _CMP))
    combine = next((m for m in mods if m in ("and", "or", "xor")), None)
    dests = args[0].split("|")
    a, b = ops.get(args[1], dtype), ops.get(args[2], dtype)
    c = ops.get(args[3], np.bool_) if combine else None
    outs = [ops.set(d.strip(), np.bool_) for d in dests]
    join = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(combine)
    if base == "set":  # set.cmp.dtype.stype: all ones / 1.0f or 0
        raise ops.fail("set (use setp)")

    def compare(st, sel):
        r = _compare(cmp, a(st, sel), b(st, sel))
        if join:
            cv = c(st, sel)
            outs[0](st, sel, join(r, cv))
            if len(outs) > 1:
                outs[1](st, sel, join(~r, cv))
        else:
            outs[0](st, sel, r)
            if len(outs) > 1:
                outs[1](st, sel, ~r)
    ins.run = compare


def _cvt(kernel, ins, ops, mods, types) -> None:
    args = ins.operands
    to, frm = (np.dtype(TYPES[x]) for x in types[:2])
    a = ops.get(args[1], frm)
    out = ops.set(args[0], to)
    ftz = "ftz" in mods
    integer_round = next((m for m in ("rni", "rzi", "rmi", "rpi") if m in mods), None)
    mode = next((m for m in ("rn", "rz", "rm", "rp") if m in mods), "rn")
    sat = "sat" in mods
    to_int = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}

    def convert(st, sel):
        x = a(st, sel)
        if ftz and frm == np.float32:
            x = _flush(x)
        if frm.kind == "f" and to.kind == "f":
            value = to_int[integer_round](x) if integer_round else x
            value = _round_to(value.astype(np.float64), to.type, mode) if to == np.float32 \
                else value.astype(to)
            if sat:
                value = np.where(np.isnan(value), to.type(0), np.clip(value, 0, 1))
            return out(st, sel, value)
        if frm.kind == "f":  # float to integer: rounded, saturating, NaN is 0
            r = to_int[integer_round or "rzi"](x.astype(np.float64))
            info = np.iinfo(to)
            r = np.where(np.isnan(r), 0, np.clip(r, info.min, info.max))
            big = r >= 2.0 ** 63
            result = np.where(big, 0, r).astype(np.int64).astype(to)
            if to == np.uint64:
                result = np.where(big, (r - 2.0 ** 63).astype(np.uint64) + np.uint64(2 ** 63),
                                  result)
            return out(st, sel, result)
        if to.kind == "f":
            if frm.itemsize == 8 and to == np.float32 and mode != "rn":
                raise ops.fail("directed rounding of a 64-bit integer to f32")
            value = x.astype(np.float64) if to == np.float32 and mode != "rn" else x.astype(to)
            return out(st, sel, _round_to(value, to.type, mode) if value.dtype != to else value)
        if sat:  # integer to integer, clamped
            info = np.iinfo(to)
            return out(st, sel, np.clip(x.astype(object), info.min, info.max).astype(to))
        # integer to integer: extend by the source's signedness, or truncate
        wide = x.astype(np.int64 if frm.kind == "i" else np.uint64)
        return out(st, sel, wide.view(np.uint64).astype(UNSIGNED[to.itemsize]).view(to))
    ins.run = convert


def _memory(kernel, ins, ops, base, mods, dtype) -> None:
    args = ins.operands
    where = _where(kernel, ins)
    space = next((m for m in ("global", "shared", "param", "local", "const") if m in mods),
                 "generic")
    vec = next((int(m[1:]) for m in mods if m in ("v2", "v4", "v8")), 1)
    size = dtype.itemsize
    address_text, value_text = (args[1], args[0]) if base == "ld" else (args[0], args[1])
    symbol, address = ops.address(address_text)
    if space == "param" and symbol in kernel.local:
        space = "local"  # a call's argument or result (a `.param` declared in the body)
    if space == "const":
        if base == "st":
            raise ops.fail("a store to constant memory")
        space = "global"  # the module's .const variables are regions of device memory
    values = [v.strip() for v in value_text[1:-1].split(",")] if vec > 1 else [value_text]
    raw = np.dtype(UNSIGNED[size])

    def access(st: State, sel, addresses: np.ndarray, data: np.ndarray | None):
        total = size * vec
        kind = space
        if kind == "generic":
            kind = "global"
            if (addresses >= np.uint64(LOCAL_WINDOW)).all():
                kind, addresses = "local", addresses - np.uint64(LOCAL_WINDOW)
            elif (addresses >= np.uint64(SHARED_WINDOW)).all():
                kind, addresses = "shared", addresses - np.uint64(SHARED_WINDOW)
        if kind != "param" and (addresses % np.uint64(total)).any():
            bad = int(addresses[(addresses % np.uint64(total)) != 0][0])
            raise FaultError(f"{where}: {total}-byte {kind} access at {bad:#x} is not aligned "
                             "to its size (CUDA_ERROR_MISALIGNED_ADDRESS)")
        if kind == "global":
            if data is None:
                return st.memory.load(addresses, total, where)
            _store_race(addresses, data, where)
            st.memory.store(addresses, data, where)
            return None
        if kind == "param":
            if data is not None:
                raise ops.fail("a store to the parameter space")
            at = addresses.astype(np.int64)
            if (at + total > len(st.params)).any() or (at < 0).any():
                raise FaultError(f"{where}: parameter access past the {len(st.params)} bytes "
                                 "of parameters")
            buf = np.frombuffer(st.params, np.uint8)
            return buf[at[:, None] + np.arange(total)]
        if kind == "shared":
            memory, owner, declared = st.shared, st.block_of[sel], kernel.shared_size
        else:
            memory, owner, declared = st.local, st.all[sel], kernel.local_size
        at = addresses.astype(np.int64)
        outside = (at + total > declared) | (at < 0)
        if outside.any():
            raise FaultError(f"{where}: {total}-byte {kind} access at offset "
                             f"{int(addresses[outside][0]):#x} is past the {declared} bytes of "
                             f"{kind} memory")
        # aligned accesses and rows padded to 16 bytes: each access is one row of `total`
        rows = owner * (memory.shape[1] // total) + at // total
        if kind == "shared":
            writers = st.writer.reshape(-1, total)[rows]
            me = st.linear_tid[sel][:, None]
            if ((writers != -1) & (writers != me)).any():
                verb = "reads" if data is None else "overwrites"
                raise RaceError(f"{where}: a thread {verb} shared bytes another thread of its "
                                "block wrote with no barrier between")
        if data is None:
            return memory.reshape(-1, total)[rows]
        if kind == "shared":
            _store_race(rows.astype(np.uint64), data, where)
            st.writer.reshape(-1, total)[rows] = me
        memory.reshape(-1, total)[rows] = data
        return None

    if base == "ld":
        outs = [ops.set(v, dtype) for v in values]

        def load(st, sel):
            data = access(st, sel, address(st, sel), None)
            lanes = data.reshape(len(data), vec, size)
            for k, o in enumerate(outs):
                piece = np.ascontiguousarray(lanes[:, k, :]).view(raw).reshape(-1).view(dtype)
                o(st, sel, piece)
        ins.run = load
        return
    getters = [ops.get(v, dtype) for v in values]

    def store(st, sel):
        pieces = [np.ascontiguousarray(g(st, sel)).view(raw).view(np.uint8).reshape(-1, size)
                  for g in getters]
        access(st, sel, address(st, sel), np.concatenate(pieces, axis=1))
    ins.run = store


def _store_race(addresses: np.ndarray, data: np.ndarray, where: str) -> None:
    """Two threads of one store writing different bytes to one address."""
    if len(addresses) < 2:
        return
    order = np.argsort(addresses, kind="stable")
    a, d = addresses[order], data[order]
    same = a[1:] == a[:-1]
    if same.any() and (d[1:][same] != d[:-1][same]).any():
        bad = int(a[1:][same][0])
        raise RaceError(f"{where}: two threads store different values to {bad:#x} at once")


#: prmt's modes: for c[1:0] = 0..3, the source bytes of d's bytes 0..3 (the PTX ISA's table,
#: which lists them from d.b3 down).
_PRMT_MODES = {
    "f4e": ((0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6)),
    "b4e": ((0, 7, 6, 5), (1, 0, 7, 6), (2, 1, 0, 7), (3, 2, 1, 0)),
    "rc8": ((0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)),
    "ecl": ((0, 1, 2, 3), (1, 1, 2, 3), (2, 2, 2, 3), (3, 3, 3, 3)),
    "ecr": ((0, 0, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2), (0, 1, 2, 3)),
    "rc16": ((0, 1, 0, 1), (2, 3, 2, 3), (0, 1, 0, 1), (2, 3, 2, 3)),
}


def _prmt(ins, ops, mods) -> None:
    """prmt.b32{.mode} d, a, b, c: d's four bytes picked from the eight of {b, a} (a's are
    bytes 0-3). Without a mode each of c's low four nibbles picks one: its low three bits the
    byte, its top bit replicating that byte's sign bit instead."""
    args = ins.operands
    a, b, c = (ops.get(x, np.uint32) for x in args[1:4])
    out = ops.set(args[0], np.uint32)
    mode = next((m for m in mods if m in _PRMT_MODES), None)
    if mods - {mode}:
        raise ops.fail(f"prmt mode '.{'.'.join(sorted(mods - {mode}))}'")
    table = np.array(_PRMT_MODES[mode], np.int64) if mode else None
    shifts = np.arange(0, 16, 4, dtype=np.uint32)

    def permute(st, sel):
        source = np.stack([a(st, sel), b(st, sel)], axis=1).view(np.uint8)  # (n, 8)
        control = c(st, sel)
        if table is not None:
            picks, sign = table[control & 3], np.zeros((len(control), 4), bool)
        else:
            nibbles = (control[:, None] >> shifts) & 0xF
            picks, sign = (nibbles & 7).astype(np.int64), (nibbles & 8) != 0
        chosen = np.take_along_axis(source, picks, axis=1)
        chosen = np.where(sign, np.where(chosen & 0x80, 0xFF, 0).astype(np.uint8), chosen)
        out(st, sel, np.ascontiguousarray(chosen).view(np.uint32).reshape(-1))
    ins.run = permute


def _shfl(kernel, ins, ops, mods, types) -> None:
    args = ins.operands
    mode = next(m for m in mods if m in ("up", "down", "bfly", "idx"))
    dests = args[0].split("|")
    a = ops.get(args[1], np.uint32)
    b, c = ops.get(args[2], np.uint32), ops.get(args[3], np.uint32)
    out = ops.set(dests[0].strip(), np.uint32)
    pout = ops.set(dests[1].strip(), np.bool_) if len(dests) > 1 else None
    where = _where(kernel, ins)

    def shuffle(st, sel):
        lanes = st.linear_tid[sel]
        warps = st.block_of[sel] * (1 << 20) + lanes // WARP
        # every live lane of each warp must be here (lock step), as .sync requires
        all_warps = st.block_of * (1 << 20) + st.linear_tid // WARP
        live = st.status == 0
        if np.isin(all_warps[live], warps).sum() != st.width:
            raise PtxError(f"{where}: shfl.sync with part of a warp (divergent)")
        lane = lanes % WARP
        bval, cval = b(st, sel) & 0x1F, c(st, sel)
        seg = (cval >> 8) & 0x1F
        clamp = cval & 0x1F
        max_lane = (lane & seg) | (clamp & ~seg)
        min_lane = lane & seg
        if mode == "up":
            j = lane.astype(np.int64) - bval
            ok = j >= max_lane
        elif mode == "down":
            j = lane + bval
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            ok = j <= max_lane
        else:
            j = min_lane | (bval & ~seg)
            ok = j <= max_lane
        j = np.where(ok, j, lane).astype(np.int64)
        values = a(st, sel)
        # thread (warp, lane) -> position in sel
        key = warps.astype(np.int64) * WARP + lane
        source_key = warps.astype(np.int64) * WARP + j
        order = np.argsort(key)
        pos = order[np.searchsorted(key[order], source_key)]
        out(st, sel, values[pos])
        if pout is not None:
            pout(st, sel, ok)
    ins.run = shuffle


def _atomic(kernel, ins, ops, base, mods, dtype) -> None:
    args = ins.operands
    where = _where(kernel, ins)
    op = next((m for m in mods if m in ("add", "min", "max", "exch", "cas", "and", "or",
                                        "xor")), None)
    if op is None or not ({"global"} & mods or "shared" not in mods):
        raise ops.fail(f"instruction '{ins.opcode}'")
    if "shared" in mods:
        raise ops.fail("shared-memory atomics")
    if base == "atom":
        dest, address_text, operands = args[0], args[1], args[2:]
    else:
        dest, address_text, operands = None, args[0], args[1:]
    _, address = ops.address(address_text)
    getters = [ops.get(v, dtype) for v in operands]
    out = ops.set(dest, dtype) if dest else None
    size = dtype.itemsize
    fns = {"add": lambda o, v: o + v, "min": lambda o, v: min(o, v),
           "max": lambda o, v: max(o, v), "exch": lambda o, v: v,
           "and": lambda o, v: o & v, "or": lambda o, v: o | v, "xor": lambda o, v: o ^ v}

    def atomic(st, sel):
        addresses = address(st, sel)
        if (addresses % np.uint64(size)).any():
            raise FaultError(f"{where}: misaligned atomic")
        values = [g(st, sel) for g in getters]
        olds = np.empty(len(addresses), dtype)
        for k in range(len(addresses)):  # one thread at a time, in thread order
            at = addresses[k:k + 1]
            old = st.memory.load(at, size, where)[0].view(dtype)[0]
            if op == "cas":
                new = values[1][k] if old == values[0][k] else old
            else:
                new = fns[op](old, values[0][k])
            st.memory.store(at, np.array([new], dtype).view(np.uint8).reshape(1, size), where)
            olds[k] = old
        if out:
            out(st, sel, olds)
    ins.run = atomic


# ---- launching ------------------------------------------------------------------------------

class Module:
    """The kernels of one cuda image, parsed once, and its module-scope variables: allocated
    once per load from `globals_base` ({address: bytes}), seen by every launch of the module
    beside the driver's allocations."""

    def __init__(self, image: bytes, globals_base: int = GLOBALS_WINDOW):
        self.kernels, self.globals = parse(ptx_text(image), globals_base)

    @property
    def globals_end(self) -> int:
        """The first address after this module's variables: where another module's go."""
        return max((a + -(-len(r) // ALIGN) * ALIGN for a, r in self.globals.items()),
                   default=0)

    def launch(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int],
               params: bytes, memory: Memory) -> None:
        kernel = self.kernels[name]
        if self.globals:
            memory = Memory({**memory.regions, **self.globals})
        per_block = block[0] * block[1] * block[2]
        blocks = grid[0] * grid[1] * grid[2]
        if per_block == 0 or blocks == 0:
            return
        step = max(1, GROUP_THREADS // per_block)
        for first in range(0, blocks, step):
            ids = np.arange(first, min(blocks, first + step), dtype=np.int64)
            run_group(State(kernel, ids, grid, block, params, memory))


def run_group(st: State) -> None:
    """Runs the group's threads to the end. While every running thread is at one program
    counter (converged: the common case) an instruction runs on all of them at once with no
    per-thread bookkeeping; a branch that splits them switches to per-thread counters, which
    are merged back as soon as the threads meet again."""
    code = st.kernel.code
    st.status = np.zeros(st.n, np.int8)  # 0 running, 1 at a barrier, 2 exited
    pcs = np.zeros(st.n, np.int64)
    pc, sel = 0, slice(None)  # converged: the counter and the running threads
    with np.errstate(all="ignore"):
        while True:
            if sel is None:  # divergent: take the lowest counter among the running threads
                running = np.flatnonzero(st.status == 0)
                if not len(running):
                    if not (st.status == 1).any():
                        return
                    _release(st, pcs, st.status == 1)
                    continue
                at = pcs[running]
                pc = int(at.min())
                if pc == at.max() and not (st.status == 1).any():  # met again
                    sel = slice(None) if len(running) == st.n else running
                    continue
                here = running[at == pc]
            else:
                here = sel
            if pc >= len(code):  # falling off the end returns
                st.status[here] = 2
                if sel is not None:
                    return
                continue
            ins = code[pc]
            width = st.n if isinstance(here, slice) else len(here)
            active = here
            if ins.guard is not None:
                pred = st.regs[ins.guard[0]][here]
                taken = ~pred if ins.guard[1] else pred
                count = int(taken.sum())
                if count != width:
                    base = np.arange(st.n) if isinstance(here, slice) else here
                    active = base[taken]
                    width = count
            st.width = width
            split = active is not here
            if ins.flow == "op":
                if width:
                    ins.run(st, active)
                pc += 1
                if sel is None:
                    pcs[here] = pc
                continue
            if ins.flow == "branch":
                if sel is not None and not split:
                    pc = ins.target
                    continue
                if sel is not None and width == 0:
                    pc += 1
                    continue
                if sel is not None:  # the threads part: per-thread counters from here
                    pcs[here] = pc
                    sel = None
                pcs[here] += 1
                pcs[active] = ins.target
                continue
            if ins.flow == "exit":
                st.status[active] = 2
                if sel is not None:
                    if not split:
                        return
                    sel = np.setdiff1d(np.arange(st.n) if isinstance(sel, slice) else sel,
                                       active)
                pc += 1
                if sel is None:
                    pcs[here] = pc
                continue
            # a barrier
            if split:
                raise BarrierError(f"{_where(st.kernel, ins)}: a predicated barrier that "
                                   "only some threads take")
            if sel is not None:  # every running thread is here: release them at once
                pc += 1
                st.writer.fill(-1)
                continue
            st.status[here] = 1


def _release(st: State, pcs: np.ndarray, waiting: np.ndarray) -> None:
    """All running threads are at barriers: each block's must be at one; release them."""
    blocks = st.block_of[waiting]
    at = pcs[waiting]
    order = np.lexsort((at, blocks))
    b, p = blocks[order], at[order]
    differ = (b[1:] == b[:-1]) & (p[1:] != p[:-1])
    if differ.any():
        k = int(np.nonzero(differ)[0][0])
        lines = sorted({st.kernel.code[int(p[k])].line, st.kernel.code[int(p[k + 1])].line})
        raise BarrierError(f"{st.kernel.name}: threads of one block wait at different barriers "
                           f"(lines {lines[0]} and {lines[1]})")
    st.status[waiting] = 0
    pcs[waiting] += 1
    st.writer.fill(-1)
