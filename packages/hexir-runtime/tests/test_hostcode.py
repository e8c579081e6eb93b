"""The host-image loader: checked-in x86-64 objects linked into this process and called.

The objects in fixtures/host/ are written by fixtures/host/generate.py (llvmlite, which this
environment lacks) for x86-64-v3, so the tests that call them need a CPU with AVX2 and FMA.
Damaged variants are made here by patching a good object; each must be refused with one line
before anything runs.
"""

import ctypes
import platform
import random
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import hexir_format as hf
import hexir_runtime as hr
from conftest import FIXTURES
from hexir_format import elf
from hexir_runtime.errors import DeviceError
from hexir_runtime.hal import hostcode, threads

HOST = Path(__file__).parent / "fixtures" / "host"
X86_64 = platform.machine().lower() in ("x86_64", "amd64")
V3_FLAGS = {"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"}


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split()}


pytestmark = pytest.mark.skipif(not X86_64, reason="host images are x86-64 code")
runs_v3 = pytest.mark.skipif(not V3_FLAGS <= _cpu_flags(),
                             reason="the fixtures are compiled for x86-64-v3")


def fixture(name: str) -> bytes:
    return (HOST / f"{name}.o").read_bytes()


def load(data: bytes, entry: str, argc: int) -> hostcode.HostKernel:
    return hostcode.load(data, entry, argc, what=f"host image of kernel '{entry}'")


def ptrs(*arrays: np.ndarray) -> list[int]:
    return [a.ctypes.data for a in arrays]


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def relocation_at(data: bytes, kind: int) -> int:
    """The file offset of the first relocation of type `kind` in a good object."""
    obj = elf.parse_object(data)
    for t in obj.relocations:
        for k, r in enumerate(t.relocations):
            if r.type == kind:
                return obj.sections[t.index].offset + k * elf.Elf64_Rela.sizeof()
    raise AssertionError(f"no relocation of type {kind}")


def symbol_at(data: bytes, name: str) -> int:
    obj = elf.parse_object(data)
    symtab = next(s for s in obj.sections if s.type == elf.SHT_SYMTAB)
    index = next(s.index for s in obj.symbols if s.name == name)
    return symtab.offset + index * elf.Elf64_Sym.sizeof()


@runs_v3
def test_f32_kernel_calls_expf_through_a_stub():
    x = np.linspace(-10, 10, 1001, dtype=np.float32)
    out = np.zeros_like(x)
    with load(fixture("exp_f32"), "exp_f32", 2) as k, threads.Pool(2) as pool:
        k.run(ptrs(x, out), len(x), pool)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


@runs_v3
def test_f64_kernel_calls_tanh():
    x = np.linspace(-5, 5, 333)
    out = np.zeros_like(x)
    with load(fixture("tanh_f64"), "tanh_f64", 2) as k:
        k.run(ptrs(x, out), len(x), None)
    np.testing.assert_allclose(out, np.tanh(x), rtol=1e-15)


def lut_expected(idx: np.ndarray) -> np.ndarray:
    return (idx & 15).astype(np.float32) + np.array([.25, .5, .75, 1], np.float32)[idx & 3]


@runs_v3
@pytest.mark.parametrize("gotpcrel", ["REX_GOTPCRELX", "GOTPCREL"])
def test_tables_in_rodata_through_pc32_and_the_got(gotpcrel):
    data = fixture("lut")
    if gotpcrel == "GOTPCREL":  # the same load without the relaxation hint: same result
        for _ in range(2):
            at = relocation_at(data, 42)
            data = patched(data, at + 8, "<Q", struct.unpack_from("<Q", data, at + 8)[0] - 42 + 9)
    idx = (np.arange(1000, dtype=np.int32) * 7919) % 1000
    out = np.zeros(1000, np.float32)
    with load(data, "lut", 2) as k:
        k.run(ptrs(idx, out), len(idx), None)
    np.testing.assert_array_equal(out, lut_expected(idx))


@runs_v3
def test_memset_from_libc():
    out = np.ones(100, np.float32)
    with load(fixture("zero"), "zero", 1) as k:
        k.run(ptrs(out), 60, None)
    assert not out[:60].any() and (out[60:] == 1).all()


@runs_v3
def test_absolute_pc64_got_and_bss_values():
    out = np.full(6, 0xAA, np.uint64)
    with load(fixture("probe"), "probe", 1) as k:
        k.run(ptrs(out), 1, None)
        expf = ctypes.cast(hostcode._libraries()[0]["expf"], ctypes.c_void_p).value
        target = int(out[3])
        assert k.base <= target < k.base + k.size  # .bss inside the mapping
        assert list(out) == [expf, target, target + 16, target, expf, 0]


@runs_v3
@pytest.mark.parametrize("spin", [1 << 20, 0])
@pytest.mark.parametrize("workers, extent", [(2, 1000), (3, 10), (8, 3), (4, 2), (2, 97)])
def test_a_pool_runs_each_chunk_once_contiguous_and_balanced(workers, extent, spin):
    """spin=0: the workers sleep on the futex between jobs, so every job wakes them."""
    with load(fixture("chunk"), "chunk", 2) as k, threads.Pool(workers, spin) as pool:
        for _ in range(50):
            first, runs = np.full(extent, -1, np.int64), np.zeros(extent, np.int64)
            k.run(ptrs(first, runs), extent, pool)
            assert (runs == 1).all()
            starts = sorted(set(first.tolist()))
            assert starts[0] == 0
            sizes = np.diff([*starts, extent])
            assert len(starts) == min(extent, workers * threads.CHUNKS_PER_THREAD)
            assert sizes.max() - sizes.min() <= 1
            np.testing.assert_array_equal(first, np.repeat(starts, sizes))
        assert pool.jobs == 50


@runs_v3
def test_each_participant_runs_its_own_range_first():
    """Participant i's range is the i-th of a job's chunks cut in `threads` runs; it claims
    all of those it can before any of the others'. So a thread that ran a chunk outside its
    range ran every chunk of its own (nobody steals from a range whose owner has not spent
    it), and when both keep up, the caller runs the first half of the job and the worker the
    second: the same thread writes the same part of a tensor kernel after kernel, and finds
    it in its own cache (bench/README.md: where the two cores are far apart a cache line
    another core wrote costs a round trip of ~380 ns against ~60). With the one ticket that
    both claimed in turn, as the pool did before, they took chunks alternately and the
    property fails in most jobs."""
    extent, work = 1 << 12, np.array([2000], np.int64)  # a chunk spins ~0.1 ms
    with load(fixture("owner"), "owner", 2) as k, threads.Pool(2, 1 << 24) as pool:
        caller = np.zeros(1, np.int64)
        k.run(ptrs(caller, work), 1, None)  # alone: this thread's identity
        chunks = 2 * threads.CHUNKS_PER_THREAD
        ranges = np.arange(chunks) >= chunks // 2  # False: the caller's, True: the worker's
        shared = 0
        for _ in range(60):
            owner = np.zeros(extent, np.int64)
            k.run(ptrs(owner, work), extent, pool)
            by_worker = owner.reshape(chunks, -1)[:, 0] != caller[0]
            assert (owner != 0).all() and len(set(owner.tolist())) <= 2
            for own in (False, True):  # the caller (False), then the worker (True):
                ran_mine = by_worker[ranges == own] == own  # its own range's chunks it ran
                ran_other = by_worker[ranges != own] == own  # the other's it ran
                assert not ran_other.any() or ran_mine.all(), by_worker
            shared += by_worker.any() and not by_worker.all()
        assert shared > 0, "the worker never took part: the property was never tested"


@runs_v3
def test_extent_zero_makes_no_call():
    out = np.full(6, 7, np.uint64)
    with load(fixture("probe"), "probe", 1) as k, threads.Pool(2) as pool:
        k.run(ptrs(out), 0, pool)  # probe writes out[0..5] whatever its range
        assert (out == 7).all() and pool.jobs == 0


@runs_v3
def test_calls_from_several_threads_share_the_pool_or_run_alone():
    """One job at a time: a thread that finds the pool busy runs its kernel by itself."""
    extent = 1 << 16
    with load(fixture("chunk"), "chunk", 2) as k, threads.Pool(2, 0) as pool:
        def calls() -> bool:
            first, runs = np.full(extent, -1, np.int64), np.zeros(extent, np.int64)
            go = k.bind(ptrs(first, runs), extent, pool)
            for _ in range(100):
                runs[:] = 0
                go()
                if not (runs == 1).all():
                    return False
            return True
        with ThreadPoolExecutor(4) as callers:
            assert all(callers.map(lambda _: calls(), range(4)))
        assert 0 < pool.jobs <= 400


def test_a_closed_pool_joins_its_workers_and_refuses():
    pool = threads.Pool(3)
    workers = list(pool._workers)
    assert all(w.is_alive() and w.daemon for w in workers)
    with load(fixture("chunk"), "chunk", 2) as k:
        first, runs = np.zeros(10, np.int64), np.zeros(10, np.int64)
        go = k.bind(ptrs(first, runs), 10, pool)
        pool.close()
        assert not any(w.is_alive() for w in workers)
        with pytest.raises(DeviceError, match="the cpu thread pool was closed"):
            go()
    pool.close()  # closing twice is harmless


def test_the_mapping_is_never_writable_and_executable():
    with load(fixture("probe"), "probe", 1) as k:
        regions = []
        for line in Path("/proc/self/maps").read_text().splitlines():
            lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
            if lo < k.base + k.size and hi > k.base:
                regions.append(line.split()[1])
    assert regions == ["r-xp", "r--p", "rw-p"]  # code + stubs, GOT, .data.rel.ro + .bss


@runs_v3
def test_two_loads_are_independent():
    a, b = load(fixture("probe"), "probe", 1), load(fixture("probe"), "probe", 1)
    assert a.base != b.base
    outs = np.zeros((2, 6), np.uint64)
    a.run(ptrs(outs[0]), 1)
    a.close()
    b.run(ptrs(outs[1]), 1)
    assert outs[0, 3] != outs[1, 3]  # each has its own .bss
    with pytest.raises(DeviceError, match="closed"):
        a.run(ptrs(outs[0]), 1)
    b.close()


def test_misuse_of_a_kernel_is_refused():
    with load(fixture("iota"), "iota", 1) as k:
        with pytest.raises(DeviceError, match="2 buffer pointers, expected 1"):
            k.run([0, 0], 4)
        with pytest.raises(DeviceError, match="extent -1"):
            k.run([0], -1)


def refused(data: bytes, entry: str, *needles: str) -> str:
    with pytest.raises(DeviceError) as e:
        load(data, entry, 1)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"host image of kernel '{entry}': ")
    for needle in needles:
        assert needle in message, message
    return message


def test_a_forbidden_symbol_is_refused():
    refused(fixture("system"), "shell", "undefined symbol 'system'", "libm/libc")


def test_entry_symbol_problems():
    data = fixture("lut")
    at = symbol_at(data, "lut")
    refused(data, "relu", "no global symbol 'relu'", "defines lut")
    refused(patched(data, at + 4, "B", elf.STB_GLOBAL << 4 | elf.STT_OBJECT), "lut",
            "STT_OBJECT, expected STT_FUNC")
    refused(patched(data, at + 6, "<H", 0), "lut", "'lut'", "undefined")
    refused(patched(data, at + 4, "B", elf.STB_LOCAL << 4 | elf.STT_FUNC), "lut",
            "no global symbol 'lut'")
    text = next(s for s in elf.parse_object(data).sections if s.name == ".text")
    refused(patched(data, at + 8, "<Q", text.size), "lut", "not inside loaded, executable code")


def test_unsupported_relocations_are_refused_by_name():
    data = fixture("lut")
    at = relocation_at(data, 2)
    info = struct.unpack_from("<Q", data, at + 8)[0] & ~0xFFFFFFFF
    refused(patched(data, at + 8, "<Q", info | 23), "lut", "R_X86_64_TPOFF32 (23)",
            "does not support")
    refused(patched(data, at + 8, "<Q", info | 200), "lut", "unknown type 200")


def test_a_32_bit_field_that_overflows_is_refused():
    data = fixture("lut")
    at = relocation_at(data, 2)  # PC32 to .rodata, read as an absolute address instead
    info = struct.unpack_from("<Q", data, at + 8)[0] & ~0xFFFFFFFF
    message = refused(patched(data, at + 8, "<Q", info | 11), "lut", "R_X86_64_32S (11)",
                      "does not fit the 32-bit field")
    assert "'.rodata'" in message


def test_an_absurd_nobits_section_is_refused():
    data = fixture("probe")
    obj = elf.parse_object(data)
    bss = next(s for s in obj.sections if s.name == ".bss")
    shdr = struct.unpack_from("<Q", data, 40)[0] + bss.index * 64
    refused(patched(data, shdr + 32, "<Q", 1 << 40), "probe", ".bss", "more than the")


def test_format_damage_surfaces_as_one_line_device_errors():
    data = fixture("exp_f32")
    refused(patched(data, 18, "<H", 3), "exp_f32", "e_machine 3 (EM_386)")
    for n in range(0, len(data), 7):
        refused(data[:n], "exp_f32")


def test_random_damage_is_refused_or_loads_but_never_escapes():
    rng = random.Random(2)
    good = fixture("probe")
    shoff = struct.unpack_from("<Q", good, 40)[0]
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(shoff if rng.random() < 0.7 else 0, len(good))] = rng.randrange(256)
        try:
            load(bytes(data), "probe", 1).close()  # loaded, never run
        except DeviceError as e:
            assert "\n" not in str(e)


def test_cpu_threads_spin_and_the_shared_pool(monkeypatch):
    monkeypatch.setenv("HEXIR_CPU_THREADS", "3")
    assert threads.cpu_threads() == 3
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv("HEXIR_CPU_THREADS", bad)
        with pytest.raises(DeviceError, match="HEXIR_CPU_THREADS"):
            threads.cpu_threads()
    monkeypatch.setenv("HEXIR_CPU_SPIN", "0")
    assert threads.spin_cycles() == 0
    for bad in ("-1", "long"):
        monkeypatch.setenv("HEXIR_CPU_SPIN", bad)
        with pytest.raises(DeviceError, match="HEXIR_CPU_SPIN"):
            threads.spin_cycles()
    monkeypatch.delenv("HEXIR_CPU_SPIN")
    monkeypatch.setattr(threads, "_made", False)
    monkeypatch.setattr(threads, "_shared", None)
    monkeypatch.setenv("HEXIR_CPU_THREADS", "1")
    assert threads.shared() is None
    monkeypatch.setattr(threads, "_made", False)
    monkeypatch.setenv("HEXIR_CPU_THREADS", "2")
    pool = threads.shared()
    try:
        assert pool.threads == 2 and len(pool._workers) == 1 and threads.shared() is pool
    finally:
        pool.close()


def test_the_pool_object_is_what_its_ir_builds():
    """hal/threads.o is checked in (the runtime has no llvmlite); where llvmlite is, it must
    be what tools/threads_ir.py builds now."""
    pytest.importorskip("llvmlite")
    import importlib.util

    tool = Path(__file__).resolve().parents[1] / "tools" / "threads_ir.py"
    spec = importlib.util.spec_from_file_location("threads_ir", tool)
    threads_ir = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(threads_ir)
    assert threads_ir.build() == threads_ir.OUT.read_bytes(), (
        "hal/threads.o is stale: run python packages/hexir-runtime/tools/threads_ir.py")


def _mlp_with_a_damaged_image(damage) -> bytes:
    """fixtures/mlp-f64.hxb with `damage(image)` applied to the host image of its softmax,
    the kernel that calls libm (`exp`) and so has relocations and an undefined symbol."""
    data = bytearray((FIXTURES / "mlp-f64.hxb").read_bytes())
    image = next(e.image for e in hf.parse(bytes(data)).executables if e.name == "softmax_3")
    at = bytes(data).find(bytes(image))
    data[at:at + len(image)] = damage(bytes(image))
    return bytes(data)


def _unsupported_relocation(image: bytes) -> bytes:
    obj = elf.parse_object(image)
    table = next(t for t in obj.relocations if t.relocations)
    at = obj.sections[table.index].offset
    info = struct.unpack_from("<Q", image, at + 8)[0] & ~0xFFFFFFFF
    return patched(image, at + 8, "<Q", info | 23)  # R_X86_64_TPOFF32


def _forbidden_symbol(image: bytes) -> bytes:
    """An undefined symbol renamed, in place, to a name no host image may call."""
    obj = elf.parse_object(image)
    sym = next(s for s in obj.symbols[1:] if not s.defined)
    strtab = obj.sections[next(s for s in obj.sections if s.type == elf.SHT_SYMTAB).link]
    at = strtab.offset + bytes(strtab.data).index(sym.name.encode() + b"\0")
    return image[:at] + b"Z" + image[at + 1:]


@pytest.mark.parametrize("damage, needle", [
    (_unsupported_relocation, "R_X86_64_TPOFF32 (23), which the loader does not support"),
    (_forbidden_symbol, "is not one of the libm/libc functions a host image may call"),
])
def test_an_image_the_loader_would_refuse_is_refused_by_the_validator_at_load(damage, needle):
    """What linking checks without an address is the one validator's: the module is refused
    when it is validated (hxb-dump, `load`), not at its first call."""
    data = _mlp_with_a_damaged_image(damage)
    with pytest.raises(hf.ValidationError, match="executable 3 .*, image: host image of "
                                                 f"kernel .*{re.escape(needle)}"):
        hf.validate.check(hf.parse(data))
    with pytest.raises(hr.ValidationError, match=re.escape(needle)):
        hr.load(data)
