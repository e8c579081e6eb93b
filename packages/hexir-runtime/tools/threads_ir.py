"""Build the cpu thread pool's loop, `hexir_runtime/hal/threads.o`, from the LLVM IR below.

    hatch run full:python packages/hexir-runtime/tools/threads_ir.py

The runtime carries the object because it runs without llvmlite (or any compiler); the
compiler's tests check that the checked-in object is what this script builds. The protocol
is described in `hexir_runtime.hal.threads`, whose layout constants are compiled in here.
The code is for the x86-64 baseline (any x86-64 CPU), position-independent, and calls two
external functions of libc: `syscall`, for the futex (SYS_futex = 202 on x86-64) and
`sched_yield` (24), and `memcpy`.

Besides the pool's loop, `hexir_peak_v2`, `_v3` and `_v4`: the profile's compute peak, an
FMA loop per x86-64 level (`peak`; `threads.PEAK_LANES`), each compiled with its level's
target features and run only where the CPU has them.

The pool's entry, `hexir_threads(state, op, arg)`:
- WORK: a worker's loop, until CLOSE; `arg` is its participant number (1, 2, ...). It spins
  on the generation for `state.spin` cycles of the time-stamp counter after each job
  (yielding its core after YIELD_AFTER of them), then sleeps on it (FUTEX_WAIT_PRIVATE) with
  `state.sleepers` raised, so that a publisher knows to wake it.
- RUN: publish the job at `arg` (copied into the slot of the new generation's parity, field
  by field with atomic stores), reset the done count, open each participant's ticket
  (generation << 32 | the first chunk of its range), bump the generation, wake sleepers,
  claim chunks like a worker (as participant 0), then spin until every chunk is done,
  yielding its core after YIELD_AFTER cycles.
- CLOSE: raise `state.stop`, bump the generation and wake everyone: each worker returns.
- SEQUENCE: run the jobs of the sequence record at `arg` in order, as RUN would each one
  of more than one chunk; with a null state (no pool, or the pool busy with another
  thread's job), every job whole on the calling thread. A call's kernels in one foreign
  call: no Python between them.
- GENERATE: the decode loop of a generate entry point (`hexir_runtime.generate`) on the
  record at `arg`: per token, write the token and its position into the step's inputs, run
  the step's SEQUENCE, copy each cache's new position into the window, unmask it, and
  choose the next token (argmax of the logits), until a count or the end-of-sequence token.

The n chunks are cut into `parts` ranges (the state's PARTS: the caller and the workers),
range j = [q j + min(j, r), q (j + 1) + min(j + 1, r)) with q, r = divmod(n, parts), each with
its ticket. A participant claims the chunks of its own range, then of the next ones around;
a chunk is claimed by a compare-and-swap of its range's ticket, which carries the
generation, and the job's fields are read after the claim: the job cannot be replaced while
one of its chunks runs, so a worker that wakes late takes nothing of a finished job (every
range of a finished job is spent). A participant adds the chunks it ran to the done count
once, when it finds nothing left to claim. Chunk c of n over extent e is [q c + min(c, r),
q (c + 1) + min(c + 1, r)) with q, r = divmod(e, n); the last ends at the job's `end` (END
for a kernel that clamps its own range).
"""

import sys
from pathlib import Path

from hexir_runtime.hal import threads

OUT = Path(threads.__file__).with_name("threads.o")
TRIPLE, CPU = "x86_64-unknown-linux-gnu", "x86-64"
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE, SYS_FUTEX, SYS_SCHED_YIELD = 128, 129, 202, 24

FIELD = {name: 8 * i for i, name in enumerate(threads.JOB_FIELDS)}

IR = """
declare i64 @syscall(i64, ...) nounwind
declare void @llvm.x86.sse2.pause() nounwind
declare i64 @llvm.readcyclecounter() nounwind
declare i64 @llvm.umin.i64(i64, i64)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define void @{ENTRY}(ptr %s, i64 %op, i64 %arg) nounwind {{
entry:
  switch i64 %op, label %out [ i64 {WORK}, label %work  i64 {RUN}, label %run
                               i64 {CLOSE}, label %close  i64 {SEQUENCE}, label %sequence
                               i64 {GENERATE}, label %generate ]
sequence:
  %seq = inttoptr i64 %arg to ptr
  call void @sequence(ptr %s, ptr %seq)
  br label %out
generate:
  %gen = inttoptr i64 %arg to ptr
  call void @generate(ptr %s, ptr %gen)
  br label %out
work:
  call void @worker(ptr %s, i64 %arg)
  br label %out
run:
  %job = inttoptr i64 %arg to ptr
  call void @publish(ptr %s, ptr %job)
  br label %out
close:
  call void @close(ptr %s)
  br label %out
out:
  ret void
}}

; the job slot of generation %g
define internal ptr @slot(ptr %s, i32 %g) nounwind {{
  %parity = and i32 %g, 1
  %wide = zext i32 %parity to i64
  %skip = mul i64 %wide, {SLOT_BYTES}
  %at = add i64 %skip, {SLOTS}
  %slot = getelementptr inbounds i8, ptr %s, i64 %at
  ret ptr %slot
}}

define internal i64 @field(ptr %slot, i64 %at) nounwind {{
  %p = getelementptr inbounds i8, ptr %slot, i64 %at
  %v = load atomic i64, ptr %p monotonic, align 8
  ret i64 %v
}}

define internal void @wake(ptr %s) nounwind {{
  %r = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr %s, i64 {FUTEX_WAKE_PRIVATE},
                                     i64 2147483647)
  ret void
}}

define internal void @publish(ptr %s, ptr %job) nounwind {{
entry:
  %g0 = load atomic i32, ptr %s monotonic, align 4
  %g = add i32 %g0, 1
  %slot = call ptr @slot(ptr %s, i32 %g)
{COPY}
  %pdone = getelementptr inbounds i8, ptr %s, i64 {DONE}
  store atomic i64 0, ptr %pdone monotonic, align 8
  %gz = zext i32 %g to i64
  %t = shl i64 %gz, 32
  %parts = call i64 @parts(ptr %s)
  %n = call i64 @field(ptr %slot, i64 {CHUNKS})
  br label %open
open:
  %j = phi i64 [ 0, %entry ], [ %j1, %open ]
  %pticket = call ptr @ticket(ptr %s, i64 %j)
  %lo = call i64 @first_chunk(i64 %n, i64 %parts, i64 %j)
  %tj = or i64 %t, %lo
  store atomic i64 %tj, ptr %pticket release, align 8
  %j1 = add i64 %j, 1
  %opening = icmp ult i64 %j1, %parts
  br i1 %opening, label %open, label %opened
opened:
  store atomic i32 %g, ptr %s seq_cst, align 4
  %psleepers = getelementptr inbounds i8, ptr %s, i64 {SLEEPERS}
  %sleepers = load atomic i32, ptr %psleepers seq_cst, align 4
  %asleep = icmp ne i32 %sleepers, 0
  br i1 %asleep, label %wake, label %claim
wake:
  call void @wake(ptr %s)
  br label %claim
claim:
  call void @claim(ptr %s, i32 %g, i64 0)
  %chunks = call i64 @field(ptr %slot, i64 {CHUNKS})
  %start = call i64 @llvm.readcyclecounter()
  br label %wait
wait:
  %done = load atomic i64, ptr %pdone acquire, align 8
  %running = icmp ult i64 %done, %chunks
  br i1 %running, label %timer, label %exit
timer:
  %now = call i64 @llvm.readcyclecounter()
  %spent = sub i64 %now, %start
  %long = icmp ugt i64 %spent, {YIELD_AFTER}
  br i1 %long, label %yield, label %pause
yield:
  %y = call i64 (i64, ...) @syscall(i64 {SYS_SCHED_YIELD})
  br label %wait
pause:
  call void @llvm.x86.sse2.pause()
  br label %wait
exit:
  ret void
}}

; participant %j's first chunk of %n: q j + min(j, r) with q, r = divmod(n, parts) (its
; range ends where participant j + 1's begins; the last's at n)
define internal i64 @first_chunk(i64 %n, i64 %parts, i64 %j) nounwind {{
  %q = udiv i64 %n, %parts
  %r = urem i64 %n, %parts
  %qj = mul i64 %q, %j
  %rj = call i64 @llvm.umin.i64(i64 %j, i64 %r)
  %lo = add i64 %qj, %rj
  ret i64 %lo
}}

; participant %j's ticket: generation << 32 | the next chunk of its range
define internal ptr @ticket(ptr %s, i64 %j) nounwind {{
  %skip = mul i64 %j, {TICKET_BYTES}
  %at = add i64 %skip, {TICKETS}
  %p = getelementptr inbounds i8, ptr %s, i64 %at
  ret ptr %p
}}

; how many threads take part: the caller and the workers (set before any starts)
define internal i64 @parts(ptr %s) nounwind {{
  %p = getelementptr inbounds i8, ptr %s, i64 {PARTS}
  %v = load atomic i64, ptr %p monotonic, align 8
  ret i64 %v
}}

; participant %me's claims on job %g: the chunks of its own range in order, then those left
; of the others' ranges, theirs in turn (%me + 1, %me + 2, ... around)
define internal void @claim(ptr %s, i32 %g, i64 %me) nounwind {{
entry:
  %gz = zext i32 %g to i64
  %slot = call ptr @slot(ptr %s, i32 %g)
  %pdone = getelementptr inbounds i8, ptr %s, i64 {DONE}
  %parts = call i64 @parts(ptr %s)
  br label %range
range:
  %k = phi i64 [ 0, %entry ], [ %k1, %spent ]
  %ran = phi i64 [ 0, %entry ], [ %ran2, %spent ]
  %more = icmp ult i64 %k, %parts
  br i1 %more, label %pick, label %exit
pick:
  %mk = add i64 %me, %k
  %j = urem i64 %mk, %parts
  %pticket = call ptr @ticket(ptr %s, i64 %j)
  %j1 = add i64 %j, 1
  br label %next
next:
  %ran2 = phi i64 [ %ran, %pick ], [ %ran2, %take ], [ %ran3, %chunk ]
  %t = load atomic i64, ptr %pticket acquire, align 8
  %tg = lshr i64 %t, 32
  %current = icmp eq i64 %tg, %gz
  br i1 %current, label %left, label %exit
left:
  %c = and i64 %t, 4294967295
  %n = call i64 @field(ptr %slot, i64 {CHUNKS})
  %stop = call i64 @first_chunk(i64 %n, i64 %parts, i64 %j1)
  %some = icmp ult i64 %c, %stop
  br i1 %some, label %take, label %spent
take:
  %t1 = add i64 %t, 1
  %pair = cmpxchg ptr %pticket, i64 %t, i64 %t1 acq_rel monotonic
  %taken = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %taken, label %chunk, label %next
spent:
  %k1 = add i64 %k, 1
  br label %range
chunk:
  %entryv = call i64 @field(ptr %slot, i64 {ENTRY_FIELD})
  %fn = inttoptr i64 %entryv to ptr
  %argc = call i64 @field(ptr %slot, i64 {ARGC})
  %argsv = call i64 @field(ptr %slot, i64 {ARGS})
  %args = inttoptr i64 %argsv to ptr
  %e = call i64 @field(ptr %slot, i64 {EXTENT})
  %end = call i64 @field(ptr %slot, i64 {END})
  %q = udiv i64 %e, %n
  %r = urem i64 %e, %n
  %qc = mul i64 %q, %c
  %rc = call i64 @llvm.umin.i64(i64 %c, i64 %r)
  %lo = add i64 %qc, %rc
  %c1 = add i64 %c, 1
  %qc1 = mul i64 %q, %c1
  %rc1 = call i64 @llvm.umin.i64(i64 %c1, i64 %r)
  %hi0 = add i64 %qc1, %rc1
  %last = icmp eq i64 %c1, %n
  %hi = select i1 %last, i64 %end, i64 %hi0
  call void @invoke(ptr %fn, i64 %argc, ptr %args, i64 %lo, i64 %hi)
  %ran3 = add i64 %ran2, 1
  br label %next
exit:
  %total = phi i64 [ %ran, %range ], [ %ran2, %next ]
  %any = icmp ne i64 %total, 0
  br i1 %any, label %count, label %out
count:
  %old = atomicrmw add ptr %pdone, i64 %total release
  br label %out
out:
  ret void
}}

define internal void @worker(ptr %s, i64 %me) nounwind {{
entry:
  %psleepers = getelementptr inbounds i8, ptr %s, i64 {SLEEPERS}
  %pstop = getelementptr inbounds i8, ptr %s, i64 {STOP}
  %pspin = getelementptr inbounds i8, ptr %s, i64 {SPIN}
  %first = load atomic i32, ptr %s acquire, align 4
  br label %idle
idle:
  %seen = phi i32 [ %first, %entry ], [ %seen, %woke ], [ %g, %claim ]
  %start = call i64 @llvm.readcyclecounter()
  br label %spin
spin:
  %g = load atomic i32, ptr %s acquire, align 4
  %new = icmp ne i32 %g, %seen
  br i1 %new, label %job, label %stopped
stopped:
  %stop = load atomic i32, ptr %pstop monotonic, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %exit, label %timer
timer:
  %now = call i64 @llvm.readcyclecounter()
  %spent = sub i64 %now, %start
  %limit = load atomic i64, ptr %pspin monotonic, align 8
  %long = icmp ugt i64 %spent, %limit
  br i1 %long, label %sleep, label %polite
polite:
  %busy = icmp ugt i64 %spent, {YIELD_AFTER}
  br i1 %busy, label %yield, label %pause
yield:
  %y = call i64 (i64, ...) @syscall(i64 {SYS_SCHED_YIELD})
  br label %spin
pause:
  call void @llvm.x86.sse2.pause()
  br label %spin
sleep:
  %up = atomicrmw add ptr %psleepers, i32 1 seq_cst
  %g2 = load atomic i32, ptr %s seq_cst, align 4
  %same = icmp eq i32 %g2, %seen
  br i1 %same, label %wait, label %woke
wait:
  %seenz = zext i32 %seen to i64
  %w = call i64 (i64, ...) @syscall(i64 {SYS_FUTEX}, ptr %s, i64 {FUTEX_WAIT_PRIVATE},
                                     i64 %seenz, ptr null)
  br label %woke
woke:
  %down = atomicrmw sub ptr %psleepers, i32 1 seq_cst
  br label %idle
job:
  %stop2 = load atomic i32, ptr %pstop seq_cst, align 4
  %stopping2 = icmp ne i32 %stop2, 0
  br i1 %stopping2, label %exit, label %claim
claim:
  call void @claim(ptr %s, i32 %g, i64 %me)
  br label %idle
exit:
  ret void
}}

define internal void @close(ptr %s) nounwind {{
  %pstop = getelementptr inbounds i8, ptr %s, i64 {STOP}
  store atomic i32 1, ptr %pstop seq_cst, align 4
  %g0 = load atomic i32, ptr %s monotonic, align 4
  %g = add i32 %g0, 1
  store atomic i32 %g, ptr %s seq_cst, align 4
  call void @wake(ptr %s)
  ret void
}}

; a private record's field %at (bytes)
define internal i64 @get(ptr %record, i64 %at) nounwind {{
  %p = getelementptr inbounds i8, ptr %record, i64 %at
  %v = load i64, ptr %p, align 8
  ret i64 %v
}}

; a private record's field %at, an address
define internal ptr @pointer(ptr %record, i64 %at) nounwind {{
  %v = call i64 @get(ptr %record, i64 %at)
  %p = inttoptr i64 %v to ptr
  ret ptr %p
}}

define internal void @put(ptr %record, i64 %at, i64 %v) nounwind {{
  %p = getelementptr inbounds i8, ptr %record, i64 %at
  store i64 %v, ptr %p, align 8
  ret void
}}

; the jobs of the sequence at %q in order; each of more than one chunk on the pool, unless
; %s is null (no pool, or another thread's job has it), when every job runs here alone
define internal void @sequence(ptr %s, ptr %q) nounwind {{
entry:
  %count = call i64 @get(ptr %q, i64 {SEQ_COUNT})
  %jobs = call ptr @pointer(ptr %q, i64 {SEQ_JOBS})
  %alone = icmp eq ptr %s, null
  br label %head
head:
  %i = phi i64 [ 0, %entry ], [ %i1, %next ]
  %more = icmp ult i64 %i, %count
  br i1 %more, label %body, label %exit
body:
  %skip = mul i64 %i, {JOB_BYTES}
  %job = getelementptr inbounds i8, ptr %jobs, i64 %skip
  %chunks = call i64 @get(ptr %job, i64 {CHUNKS})
  %one = icmp ule i64 %chunks, 1
  %here = or i1 %alone, %one
  br i1 %here, label %direct, label %pooled
direct:
  %fn = call ptr @pointer(ptr %job, i64 {ENTRY_FIELD})
  %argc = call i64 @get(ptr %job, i64 {ARGC})
  %args = call ptr @pointer(ptr %job, i64 {ARGS})
  %end = call i64 @get(ptr %job, i64 {END})
  call void @invoke(ptr %fn, i64 %argc, ptr %args, i64 0, i64 %end)
  br label %next
pooled:
  call void @publish(ptr %s, ptr %job)
  br label %next
next:
  %i1 = add i64 %i, 1
  br label %head
exit:
  ret void
}}

; the index of the greatest of %n values at %x (f64 if %wide, else f32): the first of equal
; ones, and the first NaN if there is one (numpy's argmax)
define internal i64 @argmax(ptr %x, i64 %n, i64 %wide) nounwind {{
entry:
  %first = call double @value(ptr %x, i64 0, i64 %wide)
  %nan0 = fcmp uno double %first, %first
  br i1 %nan0, label %exit0, label %head
head:
  %i = phi i64 [ 1, %entry ], [ %i1, %keep ]
  %best = phi double [ %first, %entry ], [ %best1, %keep ]
  %at = phi i64 [ 0, %entry ], [ %at1, %keep ]
  %more = icmp ult i64 %i, %n
  br i1 %more, label %body, label %exit
body:
  %v = call double @value(ptr %x, i64 %i, i64 %wide)
  %nan = fcmp uno double %v, %v
  br i1 %nan, label %found, label %keep
keep:
  %greater = fcmp ogt double %v, %best
  %best1 = select i1 %greater, double %v, double %best
  %at1 = select i1 %greater, i64 %i, i64 %at
  %i1 = add i64 %i, 1
  br label %head
found:
  ret i64 %i
exit0:
  ret i64 0
exit:
  ret i64 %at
}}

define internal double @value(ptr %x, i64 %i, i64 %wide) nounwind alwaysinline {{
entry:
  %isf64 = icmp ne i64 %wide, 0
  br i1 %isf64, label %f64, label %f32
f64:
  %p64 = getelementptr inbounds double, ptr %x, i64 %i
  %v64 = load double, ptr %p64, align 8
  ret double %v64
f32:
  %p32 = getelementptr inbounds float, ptr %x, i64 %i
  %v32 = load float, ptr %p32, align 4
  %w = fpext float %v32 to double
  ret double %w
}}

; each copy's `bytes` from `outer` blocks `src_stride` apart to the same blocks `dst_stride`
; apart, at %filled times `bytes` into each: one new position of each cache
define internal void @copies(ptr %c, i64 %n, i64 %filled) nounwind {{
entry:
  br label %each
each:
  %k = phi i64 [ 0, %entry ], [ %k1, %done ]
  %more = icmp ult i64 %k, %n
  br i1 %more, label %one, label %exit
one:
  %skip = mul i64 %k, {COPY_RECORD}
  %copy = getelementptr inbounds i8, ptr %c, i64 %skip
  %srcv = call i64 @get(ptr %copy, i64 {COPY_SRC})
  %dstv = call i64 @get(ptr %copy, i64 {COPY_DST})
  %outer = call i64 @get(ptr %copy, i64 {COPY_OUTER})
  %sstride = call i64 @get(ptr %copy, i64 {COPY_SRC_STRIDE})
  %dstride = call i64 @get(ptr %copy, i64 {COPY_DST_STRIDE})
  %bytes = call i64 @get(ptr %copy, i64 {COPY_BYTES})
  %slot = mul i64 %filled, %bytes
  %dst0 = add i64 %dstv, %slot
  br label %block
block:
  %o = phi i64 [ 0, %one ], [ %o1, %moved ]
  %left = icmp ult i64 %o, %outer
  br i1 %left, label %move, label %done
move:
  %so = mul i64 %o, %sstride
  %sa = add i64 %srcv, %so
  %do = mul i64 %o, %dstride
  %da = add i64 %dst0, %do
  %sp = inttoptr i64 %sa to ptr
  %dp = inttoptr i64 %da to ptr
  call void @llvm.memcpy.p0.p0.i64(ptr %dp, ptr %sp, i64 %bytes, i1 false)
  br label %moved
moved:
  %o1 = add i64 %o, 1
  br label %block
done:
  %k1 = add i64 %k, 1
  br label %each
exit:
  ret void
}}

; the decode loop (hexir_runtime.generate): `count` times, feed `token` at position
; `filled` (ids[0], positions[0]), run the step's sequence, copy each present's new
; position into its past at `filled`, unmask it, and choose the next token, the greatest
; logit; each written to `tokens`, stopping after `eos`. Leaves `filled`, `token` and
; `produced` (how many were written) in the record.
define internal void @generate(ptr %s, ptr %g) nounwind {{
entry:
  %seq = call ptr @pointer(ptr %g, i64 {GEN_SEQUENCE})
  %logits = call ptr @pointer(ptr %g, i64 {GEN_LOGITS})
  %vocab = call i64 @get(ptr %g, i64 {GEN_VOCAB})
  %wide = call i64 @get(ptr %g, i64 {GEN_WIDE})
  %ids = call ptr @pointer(ptr %g, i64 {GEN_IDS})
  %positions = call ptr @pointer(ptr %g, i64 {GEN_POSITIONS})
  %mask = call ptr @pointer(ptr %g, i64 {GEN_MASK})
  %filled0 = call i64 @get(ptr %g, i64 {GEN_FILLED})
  %token0 = call i64 @get(ptr %g, i64 {GEN_TOKEN})
  %eos = call i64 @get(ptr %g, i64 {GEN_EOS})
  %count = call i64 @get(ptr %g, i64 {GEN_COUNT})
  %tokens = call ptr @pointer(ptr %g, i64 {GEN_TOKENS})
  %copies = call ptr @pointer(ptr %g, i64 {GEN_COPIES})
  %ncopies = call i64 @get(ptr %g, i64 {GEN_NCOPIES})
  br label %head
head:
  %k = phi i64 [ 0, %entry ], [ %k1, %next ]
  %filled = phi i64 [ %filled0, %entry ], [ %filled1, %next ]
  %token = phi i64 [ %token0, %entry ], [ %chosen, %next ]
  %more = icmp ult i64 %k, %count
  br i1 %more, label %step, label %exit
step:
  store i64 %token, ptr %ids, align 8
  store i64 %filled, ptr %positions, align 8
  call void @sequence(ptr %s, ptr %seq)
  call void @copies(ptr %copies, i64 %ncopies, i64 %filled)
  %pm = getelementptr inbounds i64, ptr %mask, i64 %filled
  store i64 1, ptr %pm, align 8
  %filled1 = add i64 %filled, 1
  %chosen = call i64 @argmax(ptr %logits, i64 %vocab, i64 %wide)
  %pt = getelementptr inbounds i64, ptr %tokens, i64 %k
  store i64 %chosen, ptr %pt, align 8
  %k1 = add i64 %k, 1
  %end = icmp eq i64 %chosen, %eos
  br i1 %end, label %exit, label %next
next:
  br label %head
exit:
  %kf = phi i64 [ %k, %head ], [ %k1, %step ]
  %ff = phi i64 [ %filled, %head ], [ %filled1, %step ]
  %tf = phi i64 [ %token, %head ], [ %chosen, %step ]
  call void @put(ptr %g, i64 {GEN_PRODUCED}, i64 %kf)
  call void @put(ptr %g, i64 {GEN_FILLED}, i64 %ff)
  call void @put(ptr %g, i64 {GEN_TOKEN}, i64 %tf)
  ret void
}}
"""


def copy_fields() -> str:
    """publish's copy of the job into its slot, one atomic store per field."""
    lines = []
    for name, at in FIELD.items():
        lines += [f"  %src_{name} = getelementptr inbounds i8, ptr %job, i64 {at}",
                  f"  %val_{name} = load i64, ptr %src_{name}, align 8",
                  f"  %dst_{name} = getelementptr inbounds i8, ptr %slot, i64 {at}",
                  f"  store atomic i64 %val_{name}, ptr %dst_{name} monotonic, align 8"]
    return "\n".join(lines)


def invoke() -> str:
    """`fn(args[0], ..., args[argc - 1], lo, hi)` for every argc up to MAX_ARGS."""
    arities = range(threads.MAX_ARGS + 1)
    cases = "\n".join(f"    i64 {n}, label %a{n}" for n in arities)
    out = [("define internal void @invoke(ptr %fn, i64 %argc, ptr %args, i64 %lo, i64 %hi) "
            "nounwind {"), "entry:", f"  switch i64 %argc, label %done [\n{cases} ]"]
    for n in arities:
        out.append(f"a{n}:")
        for i in range(n):
            out += [f"  %p{n}_{i} = getelementptr inbounds ptr, ptr %args, i64 {i}",
                    f"  %v{n}_{i} = load ptr, ptr %p{n}_{i}, align 8"]
        params = ", ".join([*(f"ptr %v{n}_{i}" for i in range(n)), "i64 %lo", "i64 %hi"])
        out += [f"  call void %fn({params})", "  br label %done"]
    out += ["done:", "  ret void", "}"]
    return "\n".join(out)


#: Each peak loop's target features beyond the baseline's (SSE2 has the v1/v2 loop's).
FEATURES = {2: "", 3: "+avx,+avx2,+fma", 4: "+avx,+avx2,+fma,+avx512f,+evex512"}


def peak(level: int) -> str:
    """`hexir_peak_v<level>(out, lo, hi)` (see `threads.PEAK_LANES`): PEAK_CHAINS
    independent chains a = a x 0.5 + 0.25 (exact in f32, a fixed point at 0.5: no
    denormals), one FMA each from v3 on, their sum stored at `out` + lo vectors."""
    lanes, chains = threads.PEAK_LANES[level], threads.PEAK_CHAINS
    vt = f"<{lanes} x float>"
    half, quarter = (f"<{', '.join([f'float {c}'] * lanes)}>" for c in ("0.5", "0.25"))
    out = [f"define void @hexir_peak_v{level}(ptr %out, i64 %lo, i64 %hi) #{level} {{",
           "entry:", "  %chunks = sub i64 %hi, %lo",
           f"  %n = mul i64 %chunks, {threads.PEAK_ITERATIONS}",
           "  %any = icmp sgt i64 %n, 0", "  br i1 %any, label %loop, label %done", "loop:",
           "  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]"]
    out += [f"  %a{c} = phi {vt} [ zeroinitializer, %entry ], [ %b{c}, %loop ]"
            for c in range(chains)]
    for c in range(chains):
        if level >= 3:
            out.append(f"  %b{c} = call {vt} @llvm.fma.v{lanes}f32({vt} %a{c}, {vt} {half}, "
                       f"{vt} {quarter})")
        else:
            out += [f"  %m{c} = fmul {vt} %a{c}, {half}", f"  %b{c} = fadd {vt} %m{c}, {quarter}"]
    out += ["  %i1 = add i64 %i, 1", "  %more = icmp slt i64 %i1, %n",
            "  br i1 %more, label %loop, label %done", "done:"]
    out += [f"  %r{c} = phi {vt} [ zeroinitializer, %entry ], [ %b{c}, %loop ]"
            for c in range(chains)]
    total = "%r0"
    for c in range(1, chains):
        out.append(f"  %s{c} = fadd {vt} {total}, %r{c}")
        total = f"%s{c}"
    out += [f"  %at = getelementptr inbounds {vt}, ptr %out, i64 %lo",
            f"  store {vt} {total}, ptr %at, align 4", "  ret void", "}"]
    if level >= 3:
        out.append(f"declare {vt} @llvm.fma.v{lanes}f32({vt}, {vt}, {vt})")
    features = f' "target-features"="{FEATURES[level]}"' if FEATURES[level] else ""
    width = f' "min-legal-vector-width"="{32 * lanes}"'
    out.append(f"attributes #{level} = {{ nounwind{features}{width} }}")
    return "\n".join(out) + "\n"


def offsets(prefix: str, fields: tuple[str, ...]) -> dict[str, int]:
    """A record's fields' byte offsets as the IR names them: SEQ_COUNT, GEN_VOCAB, ..."""
    return {f"{prefix}_{name.upper()}": 8 * i for i, name in enumerate(fields)}


def source() -> str:
    assert threads.GEN == 0, "the loop addresses the generation as the state itself"
    return IR.format(
        ENTRY=threads.ENTRY, WORK=threads.WORK, RUN=threads.RUN, CLOSE=threads.CLOSE,
        SLOT_BYTES=threads.SLOT_BYTES, SLOTS=threads.SLOTS, TICKETS=threads.TICKETS,
        TICKET_BYTES=threads.TICKET_BYTES, PARTS=threads.PARTS,
        DONE=threads.DONE, SLEEPERS=threads.SLEEPERS, STOP=threads.STOP, SPIN=threads.SPIN,
        CHUNKS=FIELD["chunks"], ENTRY_FIELD=FIELD["entry"], ARGC=FIELD["argc"],
        ARGS=FIELD["args"], EXTENT=FIELD["extent"], END=FIELD["end"], COPY=copy_fields(),
        SEQUENCE=threads.SEQUENCE, GENERATE=threads.GENERATE, JOB_BYTES=8 * len(FIELD),
        COPY_RECORD=8 * len(threads.COPY_FIELDS), **offsets("SEQ", threads.SEQ_FIELDS),
        **offsets("GEN", threads.GEN_FIELDS), **offsets("COPY", threads.COPY_FIELDS),
        SYS_FUTEX=SYS_FUTEX, SYS_SCHED_YIELD=SYS_SCHED_YIELD, YIELD_AFTER=threads.YIELD_AFTER,
        FUTEX_WAIT_PRIVATE=FUTEX_WAIT_PRIVATE,
        FUTEX_WAKE_PRIVATE=FUTEX_WAKE_PRIVATE) + invoke() + "".join(map(peak, (2, 3, 4)))


def build() -> bytes:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = llvm.parse_assembly(source())
    module.verify()
    machine = llvm.Target.from_triple(TRIPLE).create_target_machine(
        cpu=CPU, opt=2, reloc="pic", codemodel="small")
    module.triple, module.data_layout = TRIPLE, str(machine.target_data)
    return bytes(machine.emit_object(module))


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    out.write_bytes(build())
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
