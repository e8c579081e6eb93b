"""Load a cpu kernel's host image (an x86-64 ELF relocatable object) and call it with pointers.

The runtime links the object into the process by itself, with ctypes, mmap and libc's
mprotect: no compiler, linker or llvmlite on the deploy host. The image's contract (entry
symbol and signature) is `hexir_format.elf`'s; what this loader adds:

- What linking needs that no address decides -- the entry symbol, which undefined symbols
  an image may name (`hexir_format.hostlink.ALLOWED_SYMBOLS`, and what the caller provides:
  the thread pool's loop gets `syscall`), which relocations it may use, where each part goes
  -- is `hexir_format.hostlink`'s, which the validator applies at load too (an image calling
  `hexir_rt_matmul`, the BLAS callback of modules compiled before hexir-compiler 0.2.0, is
  refused there with a line that says to recompile it). This loader resolves the undefined
  symbols against libm/libc and applies the relocations: R_X86_64_64, PC64, PC32, PLT32,
  GOTPCREL(X), REX_GOTPCRELX, and 32/32S when the value fits. libm is usually more than 2 GiB
  away, so each external gets a stub inside the mapping (`jmp *[rip+0]` and the address) for
  PLT32/PC32, and a GOT slot for GOTPCREL*.
- SHF_ALLOC sections go into one anonymous mapping, code, read-only data (and the GOT) and
  writable data each on their own pages, written while RW, then made R+X / R / RW: no page is
  ever writable and executable.

Everything is checked before a byte of the image runs; a refusal is one `DeviceError` line.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import platform
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hexir_format import CPU_LEVELS, FormatError, elf, hostlink
from hexir_runtime.errors import DeviceError

if TYPE_CHECKING:
    from hexir_runtime.hal.threads import Pool

MAX_ARGS = 1024
END = 2**63 - 1  # the `hi` of a kernel's last chunk: "to the end of your range"
R_64, R_PC32, R_PLT32, R_32, R_32S, R_PC64 = (hostlink.R_64, hostlink.R_PC32, hostlink.R_PLT32,
                                              hostlink.R_32, hostlink.R_32S, hostlink.R_PC64)

STUB = b"\xff\x25\x00\x00\x00\x00"  # jmp *[rip+0]: jumps to the 8-byte address that follows


@dataclass(frozen=True)
class Job:
    """A kernel launch as `threads.sequence` records it: `entry` over [0, extent) with
    `pointers`, in `chunks` on the pool (1: whole on the calling thread), the last chunk
    ending at `end`; the first `buffers` pointers are buffers' addresses (the rest, size
    operands; None: all)."""

    entry: int
    pointers: tuple[int, ...]
    extent: int
    end: int
    chunks: int
    buffers: int | None = None

    @property
    def addresses(self) -> tuple[int, ...]:
        return self.pointers if self.buffers is None else self.pointers[:self.buffers]


class HostKernel:
    """A loaded host image: its mapping, kept alive while this object is, and the entry."""

    def __init__(self, name: str, argc: int, mapping: mmap.mmap, base: int, entry: int):
        self.name, self.argc, self.entry = name, argc, entry
        self.base, self.size = base, len(mapping)
        self._mapping = mapping  # unmapped when closed or collected
        self._fn = call_kernel(entry, argc)  # ctypes releases the GIL for the call

    def run(self, pointers: Sequence[int], extent: int, pool: Pool | None = None, *,
            to_end: bool = False) -> None:
        """Run [0, extent); with a pool (`threads.Pool`), as chunks on its threads at once.

        `to_end` is for a kernel that clamps its range to the extent it was compiled for
        (every kernel the compiler writes): its last chunk then ends at END, so a grid that
        says too little (damage) costs parallelism, never part of the answer.
        """
        if self._fn is None:
            raise DeviceError(f"kernel '{self.name}': its host image was closed")
        if len(pointers) != self.argc:
            raise DeviceError(f"kernel '{self.name}': {len(pointers)} buffer pointers, "
                              f"expected {self.argc}")
        if extent < 0:
            raise DeviceError(f"kernel '{self.name}': extent {extent}, expected >= 0")
        self.bind(pointers, extent, pool, to_end=to_end)()

    def bind(self, pointers: Sequence[int], extent: int, pool: Pool | None = None, *,
             to_end: bool = False):
        """`run(pointers, extent, pool, to_end=...)` as a callable without arguments, made
        once: on one thread the foreign call itself, on a pool its job, the arguments
        converted now (a launch that `run` refuses refuses when called). The caller must not
        call it after `close()` (the code is unmapped then)."""
        if self._fn is None or len(pointers) != self.argc or extent < 0:
            return functools.partial(self.run, pointers, extent, pool, to_end=to_end)
        end = END if to_end else extent
        if end == 0:
            return _nothing
        alone = functools.partial(self._fn, *map(ctypes.c_void_p, pointers), 0, end)
        if pool is not None and extent > 1:
            return pool.launch(self.entry, [int(p) for p in pointers], extent, end, alone)
        return alone

    def job(self, pointers: Sequence[int], extent: int, pool: Pool | None = None, *,
            to_end: bool = False, buffers: int | None = None) -> Job | None:
        """The launch `bind` makes, as a record for `threads.sequence` (`buffers`: `Job`'s):
        None for one `run` refuses (it has no native form; `bind`'s callable raises)."""
        if self._fn is None or len(pointers) != self.argc or extent < 0:
            return None
        chunks = 1 if pool is None else pool.chunks(extent, len(pointers))
        return Job(self.entry, tuple(int(p) for p in pointers), extent,
                   END if to_end else extent, chunks, buffers)

    def close(self) -> None:
        self._fn = None
        self._mapping.close()

    def __enter__(self) -> HostKernel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<HostKernel {self.name!r} at 0x{self.base:x}, {self.size} bytes>"


def load(image: bytes | memoryview, entry: str, argc: int, *, what: str,
         provided: dict[str, int] | None = None) -> HostKernel:
    """Link `image` into this process and return its kernel `entry`, taking `argc` pointers.

    `what` starts every message, e.g. "host image of kernel 'relu_1'". `provided` names
    routines the caller offers this image (name -> address), beside libm/libc.
    """
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise DeviceError(f"{what}: host images are x86-64 code; this machine is "
                          f"{platform.machine()}")
    if not 0 <= argc <= MAX_ARGS:
        raise DeviceError(f"{what}: {argc} buffer arguments, expected 0 to {MAX_ARGS}")
    provided = provided or {}
    try:
        obj = elf.parse_object(image, what)
        plan = hostlink.layout(obj, entry, provided)
    except FormatError as e:
        raise DeviceError(str(e)) from None
    externals = {sym.index: provided.get(sym.name) or _external(sym.name, sym.index, what)
                 for sym in plan.externals}
    try:
        mapping = mmap.mmap(-1, plan.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                            prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as e:
        raise DeviceError(f"{what}: cannot map {plan.size} bytes: {e.strerror}") from None
    try:
        anchor = ctypes.c_char.from_buffer(mapping)
        base = ctypes.addressof(anchor)
        del anchor  # an exported buffer would keep close() from unmapping
        _write(mapping, obj, plan, externals, base, what)
        for start, end, prot in plan.regions:
            if _mprotect()(base + start, end - start, prot) != 0:
                raise DeviceError(f"{what}: mprotect of {end - start} bytes at 0x{base + start:x} "
                                  f"failed: {os.strerror(ctypes.get_errno())}")
    except BaseException:
        mapping.close()
        raise
    return HostKernel(entry, argc, mapping, base, base + plan.entry)


def _external(name: str, index: int, what: str) -> int:
    for library in _libraries():
        try:
            address = ctypes.cast(library[name], ctypes.c_void_p).value
        except AttributeError:
            continue
        if address is not None:  # None: resolved to NULL (an undefined weak symbol): absent
            return address
    raise DeviceError(f"{what}: undefined symbol '{name}' (symbol {index}) is not in this "
                      "process's libm or libc")


def _write(image: mmap.mmap, obj: elf.ElfObject, plan: hostlink.Layout,
           externals: dict[int, int], base: int, what: str) -> None:
    """Fill the (zeroed, writable) mapping at `base`: sections, stubs, GOT, relocations."""

    def address(sym: elf.Symbol) -> int:
        if sym.index == 0:  # "no symbol": S = 0
            return 0
        if sym.section == elf.SHN_ABS:
            return sym.value
        if not sym.defined:
            return externals[sym.index]
        return base + plan.offsets["section", sym.section] + sym.value

    for (kind, index), at in plan.offsets.items():
        if kind == "section":
            data = obj.sections[index].data
            image[at:at + len(data)] = data
        elif kind == "stub":
            image[at:at + len(STUB) + 8] = STUB + struct.pack("<Q", address(obj.symbols[index]))
        else:
            struct.pack_into("<Q", image, at, address(obj.symbols[index]))
    for table in obj.relocations:
        start = plan.offsets.get(("section", table.target))
        if start is None:
            continue
        for k, r in enumerate(table.relocations):
            sym, place = obj.symbols[r.symbol], start + r.offset
            target = address(sym)
            if r.type in (R_PC32, R_PLT32) and ("stub", sym.index) in plan.offsets:
                target = base + plan.offsets["stub", sym.index]
            elif r.type in hostlink.GOT_RELOCATIONS:
                target = base + plan.offsets["got", sym.index]
            value = target + r.addend - (0 if r.type in (R_64, R_32, R_32S) else base + place)
            if r.type in (R_64, R_PC64):
                struct.pack_into("<Q", image, place, value & (1 << 64) - 1)
                continue
            low, high, fmt = (0, 1 << 32, "<I") if r.type == R_32 else (-(1 << 31), 1 << 31, "<i")
            if not low <= value < high:
                name = sym.name or (obj.sections[sym.section].name
                                    if sym.section < len(obj.sections) else "")
                raise DeviceError(f"{what}: {obj.sections[table.index].label}: relocation {k} "
                                  f"at offset 0x{r.offset:x} ({elf.relocation_name(r.type)} to "
                                  f"'{name}'): value {value:#x} does not fit the 32-bit field")
            struct.pack_into(fmt, image, place, value)


def _nothing() -> None:
    """The launch of an empty range."""


@functools.cache
def _signature(argc: int):
    return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * argc, ctypes.c_int64, ctypes.c_int64)


def call_kernel(entry: int, argc: int):
    """The kernel at address `entry`, taking `argc` pointers and its range, as a ctypes
    function (which releases the GIL while it runs)."""
    return _signature(argc)(entry)


@functools.cache
def _libraries() -> tuple[ctypes.CDLL, ...]:
    """Where undefined symbols come from: libm (if it is a separate library), then the
    process's global scope (libc)."""
    try:
        return ctypes.CDLL("libm.so.6"), ctypes.CDLL(None)
    except OSError:
        return (ctypes.CDLL(None),)


@functools.cache
def _mprotect():
    fn = ctypes.CDLL(None, use_errno=True).mprotect
    fn.argtypes, fn.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    return fn


# The CPU features each x86-64 psABI level adds (as /proc/cpuinfo names them).
LEVEL_FEATURES = {
    2: ("cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"),
    3: ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"),
    4: ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}


LEVEL_SETTING = "HEXIR_CPU_LEVEL"


def usable_level() -> int:
    """The highest x86-64 level the runtime runs host code of: the CPU's (`host_level`), or
    $HEXIR_CPU_LEVEL when that names a lower one (to run a module's baseline code on a newer
    machine, e.g. to compare levels); a one-line DeviceError for a value that is no level."""
    text = os.environ.get(LEVEL_SETTING)
    if text is None:
        return host_level()
    level = next((n for n, name in CPU_LEVELS.items() if name == text), None)
    if level is None:
        raise DeviceError(f"{LEVEL_SETTING}={text!r}: expected one of "
                          f"{', '.join(CPU_LEVELS.values())}")
    return min(level, host_level())


@functools.cache
def host_level() -> int:
    """The highest x86-64 level (1-4) this machine's CPU supports, from /proc/cpuinfo; 1 when
    it cannot be read (every x86-64 CPU runs level 1)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            flags = next((line.split(":", 1)[1].split() for line in info
                          if line.startswith("flags")), [])
    except OSError:
        return 1
    have = set(flags)
    return next((level - 1 for level in (2, 3, 4) if not set(LEVEL_FEATURES[level]) <= have), 4)

