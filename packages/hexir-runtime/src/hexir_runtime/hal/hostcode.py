"""Load a cpu kernel's host image (an x86-64 ELF relocatable object) and call it with pointers.

The runtime links the object into the process by itself, with ctypes, mmap and libc's
mprotect: no compiler, linker or llvmlite on the deploy host. The image's contract (entry
symbol and signature) is `hexir_format.elf`'s; what this loader adds:

- Undefined symbols resolve against libm/libc, but only names in `ALLOWED_SYMBOLS` (so an
  image cannot reach system(3) & co.), or against the routines the runtime provides for this
  kernel (`provided`: `hexir_rt_matmul` for a matmul, see `hal/cpu.py`).
- Relocations: R_X86_64_64, PC64, PC32, PLT32, GOTPCREL(X), REX_GOTPCRELX, and 32/32S when the
  value fits. libm is usually more than 2 GiB away, so each external gets a stub inside the
  mapping (`jmp *[rip+0]` and the address) for PLT32/PC32, and a GOT slot for GOTPCREL*.
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hexir_format import FormatError, elf

from hexir_runtime.errors import DeviceError

if TYPE_CHECKING:
    from hexir_runtime.hal.threads import Pool

# What an image may call: libm in its f64 and f32 forms, and the libc memory functions that
# LLVM emits for memset/memcpy/memmove intrinsics. All are thread-safe (no lgamma: signgam).
ALLOWED_SYMBOLS = (
    "exp", "expf", "exp2", "exp2f", "exp10", "exp10f", "expm1", "expm1f",
    "log", "logf", "log2", "log2f", "log10", "log10f", "log1p", "log1pf",
    "pow", "powf", "sqrt", "sqrtf", "cbrt", "cbrtf", "hypot", "hypotf",
    "sin", "sinf", "cos", "cosf", "tan", "tanf", "sincos", "sincosf",
    "asin", "asinf", "acos", "acosf", "atan", "atanf", "atan2", "atan2f",
    "sinh", "sinhf", "cosh", "coshf", "tanh", "tanhf",
    "asinh", "asinhf", "acosh", "acoshf", "atanh", "atanhf",
    "erf", "erff", "erfc", "erfcf", "tgamma", "tgammaf",
    "fma", "fmaf", "fabs", "fabsf", "fmod", "fmodf", "remainder", "remainderf",
    "fmin", "fminf", "fmax", "fmaxf", "copysign", "copysignf", "ldexp", "ldexpf",
    "floor", "floorf", "ceil", "ceilf", "trunc", "truncf", "round", "roundf",
    "rint", "rintf", "nearbyint", "nearbyintf", "roundeven", "roundevenf",
    "memset", "memcpy", "memmove",
)

# Loaded images stay well under 2 GiB, so PC32 between any two of their parts always fits.
MAX_IMAGE_BYTES = 256 << 20
MAX_ARGS = 1024
END = 2**63 - 1  # the `hi` of a kernel's last chunk: "to the end of your range"

R_64, R_PC32, R_PLT32, R_GOTPCREL, R_32, R_32S, R_PC64 = 1, 2, 4, 9, 10, 11, 24
R_GOTPCRELX, R_REX_GOTPCRELX = 41, 42
GOT_RELOCATIONS = (R_GOTPCREL, R_GOTPCRELX, R_REX_GOTPCRELX)
SUPPORTED = (R_64, R_PC32, R_PLT32, R_32, R_32S, R_PC64) + GOT_RELOCATIONS

STUB = b"\xff\x25\x00\x00\x00\x00"  # jmp *[rip+0]: jumps to the 8-byte address that follows
STUB_BYTES, GOT_BYTES = 16, 8  # a stub is padded with zeros (never reached)
PAGE = mmap.PAGESIZE


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
    try:
        obj = elf.parse_object(image, what)
    except FormatError as e:
        raise DeviceError(str(e)) from None
    plan = _plan(obj, entry, what, provided or {})
    try:
        mapping = mmap.mmap(-1, plan.size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                            prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as e:
        raise DeviceError(f"{what}: cannot map {plan.size} bytes: {e.strerror}") from None
    try:
        anchor = ctypes.c_char.from_buffer(mapping)
        base = ctypes.addressof(anchor)
        del anchor  # an exported buffer would keep close() from unmapping
        _write(mapping, obj, plan, base, what)
        for start, end, prot in plan.regions:
            if _mprotect()(base + start, end - start, prot) != 0:
                raise DeviceError(f"{what}: mprotect of {end - start} bytes at 0x{base + start:x} "
                                  f"failed: {os.strerror(ctypes.get_errno())}")
    except BaseException:
        mapping.close()
        raise
    return HostKernel(entry, argc, mapping, base, base + plan.entry)


@dataclass
class _Plan:
    """Where each part of the image goes, as offsets from the start of the mapping."""

    entry: int = 0
    externals: dict[int, int] = field(default_factory=dict)  # symbol index -> its address
    # ("section", section index), ("stub", symbol index) or ("got", symbol index) -> offset
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    regions: list[tuple[int, int, int]] = field(default_factory=list)  # start, end, prot
    size: int = 0


def _plan(obj: elf.ElfObject, entry: str, what: str, provided: dict[str, int]) -> _Plan:
    """Check everything that does not depend on the load address, and lay the image out."""
    plan = _Plan()
    home = _entry(obj, entry, what)
    loaded = [s for s in obj.sections if s.alloc]
    for s in loaded:
        if s.flags & elf.SHF_TLS or s.name.startswith((".init_array", ".fini_array",
                                                       ".preinit_array", ".ctors", ".dtors")):
            raise DeviceError(f"{what}: {s.label}: thread-local storage and constructors are "
                              "not supported in a host image")
    for sym in obj.symbols[1:]:
        if sym.section == elf.SHN_COMMON or sym.type == elf.STT_TLS:
            raise DeviceError(f"{what}: symbol {sym.index} ({sym.name}) is a common or "
                              "thread-local symbol, which a host image may not have")
        if not sym.defined:
            plan.externals[sym.index] = provided.get(sym.name) or _external(sym.name,
                                                                            sym.index, what)
    stubs = _check_relocations(obj, what)
    got = {r.symbol for t in obj.relocations if obj.sections[t.target].alloc
           for r in t.relocations if r.type in GOT_RELOCATIONS}
    offsets = plan.offsets

    def region(parts: list[tuple[str, int, int, int]], prot: int) -> None:
        """Lay out (kind, index, size, align) parts on fresh pages, with protection `prot`."""
        start = cursor = plan.size
        for kind, index, size, align in parts:
            offsets[kind, index] = cursor = _align(cursor, align)
            cursor += size
            if cursor > MAX_IMAGE_BYTES:
                part = obj.sections[index].label if kind == "section" else "the PLT and GOT"
                raise DeviceError(f"{what}: {part}: {size} bytes would make the loaded image "
                                  f"{cursor} bytes, more than the {MAX_IMAGE_BYTES} a host "
                                  "image may take")
        if cursor > start:
            plan.size = _align(cursor, PAGE)
            plan.regions.append((start, plan.size, prot))

    def sections(test) -> list[tuple[str, int, int, int]]:
        return [("section", s.index, s.size, s.align) for s in loaded if test(s.flags)]

    code, write = elf.SHF_EXECINSTR, elf.SHF_WRITE
    region(sections(lambda f: f & code) + [("stub", i, STUB_BYTES, 16) for i in sorted(stubs)],
           mmap.PROT_READ | mmap.PROT_EXEC)
    region(sections(lambda f: not f & (code | write)) +
           [("got", i, GOT_BYTES, 8) for i in sorted(got)], mmap.PROT_READ)
    region(sections(lambda f: f & write and not f & code), mmap.PROT_READ | mmap.PROT_WRITE)
    plan.entry = offsets["section", home.section] + home.value
    return plan


def _entry(obj: elf.ElfObject, name: str, what: str) -> elf.Symbol:
    found = [s for s in obj.symbols if s.name == name and s.bind in (elf.STB_GLOBAL,
                                                                      elf.STB_WEAK)]
    if not found:
        raise DeviceError(f"{what}: no global symbol '{name}' (the entry point); the object "
                          f"defines {', '.join(obj.functions) or 'no functions'}")
    sym = found[0]
    if len(found) > 1:
        raise DeviceError(f"{what}: symbol '{name}' is defined {len(found)} times")
    unusable = {elf.SHN_UNDEF: "undefined", elf.SHN_ABS: "absolute", elf.SHN_COMMON: "common"}
    if sym.section in unusable:
        raise DeviceError(f"{what}: entry symbol '{name}' (symbol {sym.index}) is "
                          f"{unusable[sym.section]}, expected a function defined in the object")
    if sym.type != elf.STT_FUNC:
        raise DeviceError(f"{what}: entry symbol '{name}' (symbol {sym.index}) is "
                          f"{elf.SYMBOL_TYPES.get(sym.type, f'type {sym.type}')}, expected "
                          "STT_FUNC")
    home = obj.sections[sym.section]
    if not home.flags & elf.SHF_EXECINSTR or not home.alloc or sym.value >= home.size:
        raise DeviceError(f"{what}: entry symbol '{name}' at 0x{sym.value:x} of {home.label} "
                          f"({home.size} bytes) is not inside loaded, executable code")
    return sym


def _external(name: str, index: int, what: str) -> int:
    if name not in ALLOWED_SYMBOLS:
        raise DeviceError(f"{what}: undefined symbol '{name}' (symbol {index}) is not one of "
                          "the libm/libc functions a host image may call")
    for library in _libraries():
        try:
            return ctypes.cast(library[name], ctypes.c_void_p).value
        except AttributeError:
            continue
    raise DeviceError(f"{what}: undefined symbol '{name}' (symbol {index}) is not in this "
                      "process's libm or libc")


def _check_relocations(obj: elf.ElfObject, what: str) -> set[int]:
    """Refuse unsupported types and targets that will not be loaded; the externals that
    PC32/PLT32 relocations reach (each gets a stub)."""
    stubs = set()
    for table in obj.relocations:
        if not obj.sections[table.target].alloc:
            continue
        for k, r in enumerate(table.relocations):
            sym = obj.symbols[r.symbol]
            if r.type not in SUPPORTED:
                problem = f"has type {elf.relocation_name(r.type)}, which the loader does not " \
                          "support"
            elif sym.index and not sym.defined and r.type in (R_PC32, R_PLT32):
                stubs.add(sym.index)
                continue
            elif 0 < sym.section < elf.SHN_LORESERVE and not obj.sections[sym.section].alloc:
                problem = f"refers to symbol {sym.index} ({sym.name}) in " \
                          f"{obj.sections[sym.section].label}, which is not loaded"
            else:
                continue
            raise DeviceError(f"{what}: {obj.sections[table.index].label}: relocation {k} at "
                              f"offset 0x{r.offset:x} {problem}")
    return stubs


def _write(image: mmap.mmap, obj: elf.ElfObject, plan: _Plan, base: int, what: str) -> None:
    """Fill the (zeroed, writable) mapping at `base`: sections, stubs, GOT, relocations."""

    def address(sym: elf.Symbol) -> int:
        if sym.index == 0:  # "no symbol": S = 0
            return 0
        if sym.section == elf.SHN_ABS:
            return sym.value
        if not sym.defined:
            return plan.externals[sym.index]
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
            elif r.type in GOT_RELOCATIONS:
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


def _align(n: int, align: int) -> int:
    return -(-n // align) * align


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

