"""What linking a host image takes, before any address is known: the checks and the layout.

A cpu kernel's host image (`elf`) is linked into the runtime's process by `hexir_runtime`'s
loader. Everything that does not depend on where it lands is decided here, once, so that the
validator (`validate`, which hxb-dump runs too) refuses at load what the loader would refuse
at the first call: thread-local storage and constructors, common symbols, an entry symbol
that is not a defined function in loaded code, an undefined symbol outside `ALLOWED_SYMBOLS`
and the routines the runtime offers the kernel (`routines`), a relocation of a type the
loader does not apply or to a section it does not load, and an image that would take more
than `MAX_IMAGE_BYTES` once laid out. What is left to the loader depends on the process: the
addresses of libm's functions, and whether a 32-bit field fits the value it is given.

The layout: SHF_ALLOC sections on pages of their own protection -- code (with a 16-byte stub
per external that PC32/PLT32 reach), read-only data (with an 8-byte GOT slot per symbol that
GOTPCREL* reaches), writable data -- so no page is ever writable and executable.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable
from dataclasses import dataclass, field

from hexir_format import elf
from hexir_format.errors import FormatError

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
#: The prefix of the routines older runtimes offered kernels (`hexir_rt_matmul`, the BLAS
#: callback of modules compiled before hexir-compiler 0.2.0): refused, naming the fix.
RUNTIME_ROUTINE = "hexir_rt_"

# Loaded images stay well under 2 GiB, so PC32 between any two of their parts always fits.
MAX_IMAGE_BYTES = 256 << 20

R_64, R_PC32, R_PLT32, R_GOTPCREL, R_32, R_32S, R_PC64 = 1, 2, 4, 9, 10, 11, 24
R_GOTPCRELX, R_REX_GOTPCRELX = 41, 42
GOT_RELOCATIONS = (R_GOTPCREL, R_GOTPCRELX, R_REX_GOTPCRELX)
SUPPORTED = (R_64, R_PC32, R_PLT32, R_32, R_32S, R_PC64, *GOT_RELOCATIONS)

STUB_BYTES, GOT_BYTES = 16, 8  # a stub: `jmp *[rip+0]` and the 8-byte address it jumps to
PAGE = mmap.PAGESIZE


@dataclass
class Layout:
    """Where each part of the image goes, as offsets from the start of its mapping."""

    entry: int = 0
    externals: tuple[elf.Symbol, ...] = ()  # the undefined symbols, for the loader to resolve
    # ("section", section index), ("stub", symbol index) or ("got", symbol index) -> offset
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    regions: list[tuple[int, int, int]] = field(default_factory=list)  # start, end, prot
    size: int = 0


def layout(obj: elf.ElfObject, entry: str, offered: Iterable[str] = ()) -> Layout:
    """Check everything linking `obj` needs that does not depend on the load address, and lay
    it out; FormatError (its message starting with `obj.what`) otherwise. `offered`: the
    routines the caller offers this image (the thread pool's loop gets `syscall`)."""
    what, offered = obj.what, set(offered)
    plan = Layout()
    home = _entry(obj, entry)
    loaded = [s for s in obj.sections if s.alloc]
    for s in loaded:
        if s.flags & elf.SHF_TLS or s.name.startswith((".init_array", ".fini_array",
                                                       ".preinit_array", ".ctors", ".dtors")):
            _fail(what, f"{s.label}: thread-local storage and constructors are not supported "
                        "in a host image")
    for sym in obj.symbols[1:]:
        if sym.section == elf.SHN_COMMON or sym.type == elf.STT_TLS:
            _fail(what, f"symbol {sym.index} ({sym.name}) is a common or thread-local symbol, "
                        "which a host image may not have")
        if not sym.defined and sym.name.startswith(RUNTIME_ROUTINE):
            _fail(what, f"calls '{sym.name}', the runtime routine that modules compiled before "
                        "hexir-compiler 0.2.0 used for big cpu matmuls; this runtime has none "
                        "(every matmul is the image's own loops): recompile the module")
        if not sym.defined and sym.name not in offered and sym.name not in ALLOWED_SYMBOLS:
            _fail(what, f"undefined symbol '{sym.name}' (symbol {sym.index}) is not one of the "
                        "libm/libc functions a host image may call")
    plan.externals = tuple(s for s in obj.symbols[1:] if not s.defined)
    stubs = _check_relocations(obj)
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
                _fail(what, f"{part}: {size} bytes would make the loaded image {cursor} bytes, "
                            f"more than the {MAX_IMAGE_BYTES} a host image may take")
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


def _fail(what: str, message: str):
    raise FormatError(f"{what}: {message}", field="image")


def _entry(obj: elf.ElfObject, name: str) -> elf.Symbol:
    what = obj.what
    found = [s for s in obj.symbols if s.name == name and s.bind in (elf.STB_GLOBAL,
                                                                      elf.STB_WEAK)]
    if not found:
        _fail(what, f"no global symbol '{name}' (the entry point); the object defines "
                    f"{', '.join(obj.functions) or 'no functions'}")
    sym = found[0]
    if len(found) > 1:
        _fail(what, f"symbol '{name}' is defined {len(found)} times")
    unusable = {elf.SHN_UNDEF: "undefined", elf.SHN_ABS: "absolute", elf.SHN_COMMON: "common"}
    if sym.section in unusable:
        _fail(what, f"entry symbol '{name}' (symbol {sym.index}) is "
                    f"{unusable[sym.section]}, expected a function defined in the object")
    if sym.type != elf.STT_FUNC:
        _fail(what, f"entry symbol '{name}' (symbol {sym.index}) is "
                    f"{elf.SYMBOL_TYPES.get(sym.type, f'type {sym.type}')}, expected STT_FUNC")
    home = obj.sections[sym.section]
    if not home.flags & elf.SHF_EXECINSTR or not home.alloc or sym.value >= home.size:
        _fail(what, f"entry symbol '{name}' at 0x{sym.value:x} of {home.label} "
                    f"({home.size} bytes) is not inside loaded, executable code")
    return sym


def _check_relocations(obj: elf.ElfObject) -> set[int]:
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
            _fail(obj.what, f"{obj.sections[table.index].label}: relocation {k} at offset "
                            f"0x{r.offset:x} {problem}")
    return stubs


def _align(n: int, align: int) -> int:
    return -(-n // align) * align
