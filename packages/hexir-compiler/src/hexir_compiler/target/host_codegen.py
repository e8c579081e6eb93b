"""LLVM -O3 and code generation of cpu kernels: LLVM IR text in, an ELF object out, in this
process or in worker processes (`Codegen`).

A default compile makes a program per x86-64 level, and each level's kernels go through
LLVM's optimizer and code generator, which is most of a big model's compile time and needs
nothing but the IR text: the parent lowers the next level while workers compile the last
one's kernels. A worker is this file run as a script (`python -P host_codegen.py`): it
imports llvmlite and the standard library only, never the MLIR bindings (seconds of
imports, and MLIR contexts are neither fork- nor pickle-safe), so it starts in a fifth of a
second. Each kernel is compiled from its own text by the same code in a worker as in the
parent, so the objects, and the `.hxb`, never depend on how many workers there are or which
one finished first.

Protocol, on the worker's stdin and stdout: a request is a pickled (text, cpu, name), a
reply a pickled (object bytes, None) or (None, LLVM's message), each after its length as 8
little-endian bytes; the worker ends at the end of its stdin.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, BinaryIO

TRIPLE = "x86_64-unknown-linux-gnu"
_V4 = "x86-64-v4"  # (by name: a worker imports no Hexir package, not even the format's)
#: At most this many workers, however many cores: past it the parent's own lowering is the
#: bottleneck.
MAX_WORKERS = 8
#: A compile of fewer kernels (all levels together) makes them in its own process: a worker's
#: start (a tenth of a second of CPU) outweighs a few small kernels' code generation.
MIN_KERNELS = 16


class RejectedIR(Exception):
    """LLVM refused a kernel's IR; the message is LLVM's first line."""


def compile_object(text: str, cpu: str) -> bytes:
    """The object code of the LLVM IR `text` for the x86-64 level `cpu`, optimized at -O3."""
    binding = llvm_binding()
    machine = _target_machine(cpu)
    try:
        parsed = binding.parse_assembly(text)
        parsed.verify()
    except RuntimeError as err:
        raise RejectedIR(str(err).strip().splitlines()[0]) from None
    parsed.triple = TRIPLE
    parsed.data_layout = str(machine.target_data)
    tuning = binding.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    builder = binding.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(parsed, builder)
    return bytes(machine.emit_object(parsed))


@functools.cache
def _target_machine(cpu: str):
    # AVX-512 registers in full: LLVM's default for the level is half of each (256 bits)
    features = "-prefer-256-bit" if cpu == _V4 else ""
    target = llvm_binding().Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic",
                                        codemodel="small")


def llvm_binding():
    """llvmlite's binding layer, initialised once (it is a compiler dependency only)."""
    import llvmlite.binding as binding

    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    return binding


def workers(kernels: int, jobs: int | None = None) -> int:
    """How many worker processes a compile of `kernels` kernels uses: `jobs` (0: none,
    compile in this process), or by default one per core this process may run on, at most
    MAX_WORKERS; none for fewer than MIN_KERNELS kernels, or on a single core (the parent
    would only wait on it)."""
    if jobs is not None:
        return max(0, jobs)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    return min(cores, MAX_WORKERS) if cores > 1 and kernels >= MIN_KERNELS else 0


class Objects:
    """The objects this process made, by (SHA-256 of the IR text, level): a kernel compiled
    again -- the same model compiled twice in a session, or two models sharing a layer shape
    -- is not optimized again. LLVM's output is a function of its input and options, so a
    reused object is the one a fresh compile makes. Bounded to `limit` objects, least
    recently used out first (an object is a few KB to a few hundred)."""

    def __init__(self, limit: int = 512):
        self.limit = limit
        self._objects: OrderedDict[tuple[bytes, str], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[bytes, str]) -> bytes | None:
        with self._lock:
            code = self._objects.get(key)
            if code is not None:
                self._objects.move_to_end(key)
            return code

    def put(self, key: tuple[bytes, str], code: bytes) -> bytes:
        with self._lock:
            self._objects[key] = code
            self._objects.move_to_end(key)
            while len(self._objects) > self.limit:
                self._objects.popitem(last=False)
        return code


made = Objects()


class Codegen:
    """Compiles kernels' LLVM IR as they are submitted: in `workers` child processes (one
    per thread of a pool that feeds them), or, with none, in this process at once. Use it as
    a context manager: leaving it ends the workers."""

    def __init__(self, workers: int = 0):
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, "hexir-codegen") if workers else None
        self._local = threading.local()
        self._processes: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    def submit(self, text: str, cpu: str) -> Future:
        """The object code of `text` for `cpu`, to come (`RejectedIR` where LLVM refuses it):
        from `made` where this process made it before."""
        key = (hashlib.sha256(text.encode()).digest(), cpu)
        future: Future = Future()
        if (code := made.get(key)) is not None:
            future.set_result(code)
            return future
        if self._pool is None:
            try:
                future.set_result(made.put(key, compile_object(text, cpu)))
            except RejectedIR as err:
                future.set_exception(err)
            return future
        return self._pool.submit(lambda: made.put(key, self._remote(text, cpu)))

    def _remote(self, text: str, cpu: str) -> bytes:
        """(On a pool thread) the job done by this thread's own worker."""
        process = getattr(self._local, "process", None)
        if process is None:
            process = self._local.process = self._start()
        assert process.stdin is not None and process.stdout is not None  # both piped
        try:
            _send(process.stdin, (text, cpu))
            reply = _receive(process.stdout)
        except OSError:  # the pipe broke: the worker is gone
            reply = None
        if reply is None:
            raise RuntimeError(f"a code generation worker ended unexpectedly (exit status "
                               f"{process.wait()})")
        code, message = reply
        if message is not None:
            raise RejectedIR(message)
        return code

    def _start(self) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-P", __file__], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE)
        with self._lock:
            self._processes.append(process)
        return process

    def close(self) -> None:
        """Wait for the submitted jobs and end the workers (each at the end of its stdin)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for process in self._processes:
            if process.stdin is not None:
                with contextlib.suppress(BrokenPipeError):  # a dead worker: nothing to flush to
                    process.stdin.close()
        for process in self._processes:
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
        self._processes.clear()

    def __enter__(self) -> Codegen:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _send(stream: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]):
    """The next message, or None where the other side closed its end."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """A worker's loop: compile each request, reply with the object or LLVM's message."""
    while (request := _receive(requests)) is not None:
        text, cpu = request
        try:
            _send(replies, (compile_object(text, cpu), None))
        except RejectedIR as err:
            _send(replies, (None, str(err)))


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group: the parent stops, and its end of the pipe
    # closing is what ends a worker (quietly, not with a traceback of its own).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(sys.stdin.buffer, sys.stdout.buffer)
