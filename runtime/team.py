"""The process's thread team: worker threads that stay hot while a native run is in progress.

Generated code runs its large loops as *regions* (kernels/parallel.py: a task that claims
units of the loop from a shared counter until none are left) and tells the team when a
run starts and ends (the entry calls RUN_BEGIN_FN and RUN_END_FN; entry.py). This module
compiles, once per process, the native code behind those calls, and starts the workers
(Python threads that call into it and never come back to Python until the process
exits: ctypes releases the GIL, so they cost Python nothing).

Why our own team rather than libgomp's: a region of libgomp costs 1.5-3 us while its
threads still spin from the last one, and 300-430 us on this VM when they must be woken
(a halted virtual CPU), and its spin cannot be scoped: spinning for long between loops
stole the core OpenBLAS needed in the Python code between runs (W3 10-30x slower on a
loaded 2-core machine), spinning for short (GOMP_SPINCOUNT) let the workers fall asleep
between the regions of one run, so most regions of a step paid the wake-up. Here:

- while any run is in progress (RUNS > 0) a worker spins on the gate between regions,
  and for GRACE_NS after the last run ends (the caller's Python between two steps);
  then it sleeps on a futex that the next run's start wakes. Nothing spins between runs
  for longer than that, so the Python and the BLAS outside runs keep their cores.
- the caller never waits for a worker to *arrive*: it opens the gate, runs the task
  itself, then closes the gate and waits only for the workers that joined before it
  closed (they hold units they claimed). A worker that is asleep, preempted or slow
  joins the region if it comes while the gate is open, else it finds the gate closed
  and never touches the region's data: a lost try costs the caller nothing, and no
  worker can hang it.
- a region whose caller waited long for a joined worker (preempted holding a unit: a
  loaded machine) makes the caller run the next regions alone, backing off
  exponentially (LATE_SLACK_NS); a region that did not wait long shortens the backoff.
  Meanwhile the workers nap (NAP_NS) instead of spinning.
- the units, their order of claiming and the chunks of a fold do not depend on who
  runs them (kernels/parallel.py), so 1, 2 or N threads give the same bits.

The gate is one 64-bit word: the region's sequence number above GATE_SEQ_SHIFT, OPEN,
and the count of workers that joined in the low bits; a worker joins with one
compare-and-swap of the word it read (so never a region other than the one it saw open,
and never one that was closed meanwhile). Worker w is thread number w of every region it
joins (the caller is 0) and joins only regions that asked for more than w threads.

`held` and `gathered` make who runs a region independent of timing, for tests: no
worker joins, or every wanted worker joins before the caller starts.

Fork: a child has none of its parent's workers: `after_fork_in_child` empties the team
(regions there run on the caller; Executable runs children serially anyway). Exit: the
workers are told to quit and joined before the interpreter tears down the engine that
holds their code (it would be unmapped under them).

Linux only (futex); elsewhere runtime/jit.py forwards regions to libgomp as before.
"""
import contextlib
import ctypes
import os
import platform
import sys
import threading

import llvmlite.binding as llvm

PARALLEL_FN = "graphc_team_parallel"
THREAD_NUM_FN = "graphc_team_thread_num"
NUM_THREADS_FN = "graphc_team_num_threads"
RUN_BEGIN_FN = "graphc_team_run_begin"
RUN_END_FN = "graphc_team_run_end"
MAX_THREADS = 64  # kernels/parallel.py MAX_THREADS: the per-thread status slots
GATE_SEQ_SHIFT = 20
OPEN = 1 << 19
JOINED_MASK = OPEN - 1
# How long a worker spins after the last run ended before it sleeps: W3's Python
# between two native runs took 41 us at best, 97 us median at load 9 (Executable._call
# wrapped); a worker asleep at a run's start leaves that run's first few hundred
# microseconds to its caller alone.
GRACE_NS = 300_000
# Pauses in a row (a pause: 15-40 ns) after which a thread waiting on the team (a worker
# between the regions of a run, a caller at the join) offers its core to other threads
# at each pause: on a machine with more runnable threads than cores (other processes),
# a spinning worker would hold the core the caller or the worker it waits for needs.
# On an idle core sched_yield returns at once (~1 us).
YIELD_SPINS = 2000
# A region is lost when its caller waited for the workers that joined longer than twice
# what it worked plus LATE_SLACK_NS: a worker preempted holding a unit (the cores are
# oversubscribed: W3's median step doubled at load 12 with every region on the team,
# each waiting for a worker the OS had taken off its core). The caller then runs the
# next 2**misses regions alone (misses: regions lost less regions won, 0..MAX_MISSES:
# a loaded machine backs off to 256 regions alone, a stray loss on a quiet one costs 2)
# and opens the gate again. Twice: units are claimed, so a caller may wait up to one
# unit for the worker that took the last one while it worked one or two.
LATE_SLACK_NS = 20_000
MAX_MISSES = 8
# Meanwhile the workers nap this long at a time instead of spinning: at load 8 an LSTM
# step's process CPU rose from 32 to 51 ms with a worker spinning through a backoff
# that left it nothing to join, and its median step from 95 to 175 ms.
NAP_NS = 100_000
_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_PAUSE = {"x86_64": "pause", "amd64": "pause", "aarch64": "yield", "arm64": "yield"}
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129

_IR = """
@runs = global i64 0, align 64
@gate = global i64 0, align 64
@done = global i64 0, align 64
@wake = global i32 0, align 64
@sleepers = global i32 0, align 64
@quit = global i32 0, align 64
@hold = global i32 0, align 64
@rendezvous = global i32 0, align 64
@rest = global i32 0, align 64
@misses = global i32 0
@busy = global i32 0, align 64
@workers = global i32 0, align 64
@region.fn = global ptr null, align 64
@region.data = global ptr null
@region.n = global i32 1
@owner = global i64 0
@selves = global [{max_threads} x i64] zeroinitializer, align 64

declare i64 @syscall(i64, ...) nounwind
declare i64 @pthread_self() nounwind
declare i32 @clock_gettime(i32, ptr) nounwind
declare i32 @sched_yield() nounwind
declare i32 @nanosleep(ptr, ptr) nounwind

; a pause, and past YIELD_SPINS of them in a row the core to whoever else wants it
define internal void @wait_a_little(i64 %spins) nounwind {{
  call void @relax()
  %long = icmp sgt i64 %spins, {yield_spins}
  br i1 %long, label %give, label %out
give:
  call i32 @sched_yield()
  br label %out
out:
  ret void
}}

define internal void @relax() nounwind {{
  call void asm sideeffect "{pause}", ""()
  ret void
}}

; a worker between the regions of a run: while the callers run their regions alone (a
; backoff after a lost region) it naps NAP_NS at a time instead of spinning
define internal void @between_regions(i64 %spins) nounwind {{
  %rest = load atomic i32, ptr @rest monotonic, align 4
  %backoff = icmp sgt i32 %rest, 0
  br i1 %backoff, label %nap, label %spin
nap:
  %ts = alloca {{ i64, i64 }}
  store {{ i64, i64 }} {{ i64 0, i64 {nap_ns} }}, ptr %ts
  call i32 @nanosleep(ptr %ts, ptr null)
  ret void
spin:
  call void @wait_a_little(i64 %spins)
  ret void
}}

define internal i64 @now_ns() nounwind {{
  %ts = alloca {{ i64, i64 }}
  call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts
  %ns.at = getelementptr {{ i64, i64 }}, ptr %ts, i32 0, i32 1
  %ns = load i64, ptr %ns.at
  %s.ns = mul i64 %s, 1000000000
  %t = add i64 %s.ns, %ns
  ret i64 %t
}}

; runs fn(data) on the caller and on every worker that joins while it does; returns how
; many workers ran it (0: the caller alone)
define i32 @{parallel}(ptr %fn, ptr %data, i32 %n) nounwind {{
entry:
  %w = load atomic i32, ptr @workers acquire, align 4
  %many = icmp sgt i32 %n, 1
  %have = icmp sgt i32 %w, 0
  %try = and i1 %many, %have
  br i1 %try, label %backing, label %alone
backing:
  %rest = load atomic i32, ptr @rest monotonic, align 4
  %meet.early = load atomic i32, ptr @rendezvous monotonic, align 4
  %backs = icmp sgt i32 %rest, 0
  %free.meet = icmp eq i32 %meet.early, 0
  %backs.off = and i1 %backs, %free.meet
  br i1 %backs.off, label %sit.out, label %claim
sit.out:
  %rest.was = atomicrmw sub ptr @rest, i32 1 monotonic
  br label %alone
claim:
  %cx = cmpxchg ptr @busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %cx, 1
  br i1 %got, label %open, label %alone
alone:
  call void %fn(ptr %data)
  ret i32 0
open:
  store ptr %fn, ptr @region.fn
  store ptr %data, ptr @region.data
  store atomic i32 %n, ptr @region.n monotonic, align 4
  %self = call i64 @pthread_self()
  store atomic i64 %self, ptr @owner monotonic, align 8
  store atomic i64 0, ptr @done monotonic, align 8
  %g = load atomic i64, ptr @gate monotonic, align 8
  %seq = lshr i64 %g, {seq_shift}
  %seq.next = add i64 %seq, 1
  %seq.at = shl i64 %seq.next, {seq_shift}
  %opened = or i64 %seq.at, {open}
  store atomic i64 %opened, ptr @gate release, align 8
  %meet = load atomic i32, ptr @rendezvous monotonic, align 4
  %meeting = icmp ne i32 %meet, 0
  br i1 %meeting, label %gather, label %work
gather:
  %asked = sub i32 %n, 1
  %few = icmp slt i32 %w, %asked
  %want = select i1 %few, i32 %w, i32 %asked
  %want.64 = zext i32 %want to i64
  br label %gathering
gathering:
  %g.spins = phi i64 [0, %gather], [%g.spins.n, %gather.wait]
  %g.now = load atomic i64, ptr @gate acquire, align 8
  %g.joined = and i64 %g.now, {joined_mask}
  %g.all = icmp sge i64 %g.joined, %want.64
  br i1 %g.all, label %work, label %gather.wait
gather.wait:
  %g.spins.n = add i64 %g.spins, 1
  call void @wait_a_little(i64 %g.spins.n)
  br label %gathering
work:
  %t.start = call i64 @now_ns()
  call void %fn(ptr %data)
  %old = atomicrmw and ptr @gate, i64 {not_open} acq_rel
  %joined = and i64 %old, {joined_mask}
  %t.mine = call i64 @now_ns()
  br label %wait
wait:
  %spins = phi i64 [0, %work], [%spins.n, %relax]
  %d = load atomic i64, ptr @done acquire, align 8
  %all = icmp eq i64 %d, %joined
  br i1 %all, label %closed, label %relax
relax:
  %spins.n = add i64 %spins, 1
  call void @wait_a_little(i64 %spins.n)
  br label %wait
closed:
  store atomic i64 0, ptr @owner monotonic, align 8
  store atomic i32 0, ptr @busy release, align 4
  %ran = trunc i64 %joined to i32
  %had.help = icmp sgt i64 %joined, 0
  br i1 %had.help, label %judge, label %out
judge:
  %t.all = call i64 @now_ns()
  %worked = sub i64 %t.mine, %t.start
  %waited = sub i64 %t.all, %t.mine
  %bound.2 = shl i64 %worked, 1
  %bound = add i64 %bound.2, {late_slack_ns}
  %late = icmp sgt i64 %waited, %bound
  %had = load atomic i32, ptr @misses monotonic, align 4
  br i1 %late, label %lost, label %won
won:
  %some = icmp sgt i32 %had, 0
  %fewer = sub i32 %had, 1
  %kept = select i1 %some, i32 %fewer, i32 0
  store atomic i32 %kept, ptr @misses monotonic, align 4
  br label %out
lost:
  %more = add i32 %had, 1
  %capped = icmp sgt i32 %more, {max_misses}
  %now = select i1 %capped, i32 {max_misses}, i32 %more
  store atomic i32 %now, ptr @misses monotonic, align 4
  %regions = shl i32 1, %now
  store atomic i32 %regions, ptr @rest monotonic, align 4
  br label %out
out:
  ret i32 %ran
}}

define internal i32 @worker_index() nounwind {{
entry:
  %self = call i64 @pthread_self()
  %w = load atomic i32, ptr @workers monotonic, align 4
  br label %scan
scan:
  %k = phi i32 [1, %entry], [%k.next, %next]
  %past = icmp sgt i32 %k, %w
  br i1 %past, label %none, label %look
look:
  %at = getelementptr [{max_threads} x i64], ptr @selves, i32 0, i32 %k
  %who = load atomic i64, ptr %at monotonic, align 8
  %me = icmp eq i64 %who, %self
  br i1 %me, label %found, label %next
next:
  %k.next = add i32 %k, 1
  br label %scan
found:
  ret i32 %k
none:
  ret i32 0
}}

define i32 @{thread_num}() nounwind {{
  %k = call i32 @worker_index()
  ret i32 %k
}}

; the team size the running region asked for (its caller's and its workers' view), else 1
define i32 @{num_threads}() nounwind {{
entry:
  %k = call i32 @worker_index()
  %worker = icmp sgt i32 %k, 0
  %self = call i64 @pthread_self()
  %owner = load atomic i64, ptr @owner monotonic, align 8
  %caller = icmp eq i64 %owner, %self
  %inside = or i1 %worker, %caller
  %n = load atomic i32, ptr @region.n monotonic, align 4
  %r = select i1 %inside, i32 %n, i32 1
  ret i32 %r
}}

define void @{run_begin}() nounwind {{
entry:
  %before = atomicrmw add ptr @runs, i64 1 seq_cst
  %first = icmp eq i64 %before, 0
  br i1 %first, label %bump, label %out
bump:
  atomicrmw add ptr @wake, i32 1 seq_cst
  %sleeping = load atomic i32, ptr @sleepers seq_cst, align 4
  %any = icmp sgt i32 %sleeping, 0
  br i1 %any, label %wakeup, label %out
wakeup:
  call i64 (i64, ...) @syscall(i64 {futex}, ptr @wake, i32 {wake_op}, i32 2147483647)
  br label %out
out:
  ret void
}}

define void @{run_end}() nounwind {{
  atomicrmw sub ptr @runs, i64 1 release
  ret void
}}

; worker w's life: join regions; spin while a run is in progress and GRACE_NS after,
; then sleep until the next run starts; return when told to quit
define void @graphc_team_worker(i32 %w, i64 %grace) nounwind {{
entry:
  %self = call i64 @pthread_self()
  %self.at = getelementptr [{max_threads} x i64], ptr @selves, i32 0, i32 %w
  store atomic i64 %self, ptr %self.at release, align 8
  br label %loop
loop:
  %mine = phi i64 [0, %entry], [%seq, %ran], [%seq, %skip], [%mine, %busy.run],
              [%mine, %lost], [%mine, %idle.spin], [%mine, %idle.clock], [%mine, %woke]
  %idle = phi i64 [0, %entry], [0, %ran], [0, %skip], [0, %busy.run], [%idle, %lost],
              [%idle.n, %idle.spin], [%idle.n, %idle.clock], [0, %woke]
  %since = phi i64 [0, %entry], [0, %ran], [0, %skip], [0, %busy.run], [%since, %lost],
              [%since, %idle.spin], [%since.n, %idle.clock], [0, %woke]
  %spun = phi i64 [0, %entry], [0, %ran], [0, %skip], [%spun.n, %busy.run], [%spun, %lost],
              [0, %idle.spin], [0, %idle.clock], [0, %woke]
  %q = load atomic i32, ptr @quit monotonic, align 4
  %quitting = icmp ne i32 %q, 0
  br i1 %quitting, label %out, label %look
look:
  %g = load atomic i64, ptr @gate acquire, align 8
  %seq = lshr i64 %g, {seq_shift}
  %open.bit = and i64 %g, {open}
  %is.open = icmp ne i64 %open.bit, 0
  %new = icmp ne i64 %seq, %mine
  %h = load atomic i32, ptr @hold monotonic, align 4
  %free = icmp eq i32 %h, 0
  %fresh = and i1 %is.open, %new
  %candidate = and i1 %fresh, %free
  br i1 %candidate, label %sized, label %between
sized:
  ; read before joining, so it may race with the next region's caller (atomic); the
  ; compare-and-swap then fails, the gate having changed
  %n = load atomic i32, ptr @region.n monotonic, align 4
  %wanted = icmp slt i32 %w, %n
  br i1 %wanted, label %join, label %skip
skip:
  br label %loop
join:
  %g.joined = add i64 %g, 1
  %cx = cmpxchg ptr @gate, i64 %g, i64 %g.joined acq_rel monotonic
  %in = extractvalue {{ i64, i1 }} %cx, 1
  br i1 %in, label %run, label %lost
lost:
  br label %loop
run:
  %fn = load ptr, ptr @region.fn
  %data = load ptr, ptr @region.data
  call void %fn(ptr %data)
  atomicrmw add ptr @done, i64 1 release
  br label %ran
ran:
  br label %loop
between:
  %r = load atomic i64, ptr @runs monotonic, align 8
  %running = icmp sgt i64 %r, 0
  br i1 %running, label %busy.run, label %idle.count
busy.run:
  %spun.n = add i64 %spun, 1
  call void @between_regions(i64 %spun.n)
  br label %loop
idle.count:
  call void @relax()
  %idle.n = add i64 %idle, 1
  %tick = and i64 %idle.n, 255
  %check = icmp eq i64 %tick, 0
  br i1 %check, label %clock, label %idle.spin
idle.spin:
  br label %loop
clock:
  %t = call i64 @now_ns()
  %started = icmp eq i64 %since, 0
  %since.n = select i1 %started, i64 %t, i64 %since
  %spent = sub i64 %t, %since.n
  %long = icmp sgt i64 %spent, %grace
  br i1 %long, label %sleep, label %idle.clock
idle.clock:
  br label %loop
sleep:
  %s = load atomic i32, ptr @wake seq_cst, align 4
  atomicrmw add ptr @sleepers, i32 1 seq_cst
  %r2 = load atomic i64, ptr @runs seq_cst, align 8
  %q2 = load atomic i32, ptr @quit seq_cst, align 4
  %none = icmp eq i64 %r2, 0
  %stay = icmp eq i32 %q2, 0
  %nap = and i1 %none, %stay
  br i1 %nap, label %wait, label %woke
wait:
  call i64 (i64, ...) @syscall(i64 {futex}, ptr @wake, i32 {wait_op}, i32 %s, ptr null)
  br label %woke
woke:
  atomicrmw sub ptr @sleepers, i32 1 seq_cst
  br label %loop
out:
  ret void
}}

define void @graphc_team_quit() nounwind {{
  store atomic i32 1, ptr @quit seq_cst, align 4
  atomicrmw add ptr @wake, i32 1 seq_cst
  call i64 (i64, ...) @syscall(i64 {futex}, ptr @wake, i32 {wake_op}, i32 2147483647)
  ret void
}}
"""


def supported():
    """Whether this platform has what the team needs (a futex; a pause instruction)."""
    machine = platform.machine().lower()
    return sys.platform.startswith("linux") and machine in _FUTEX


def team_ir():
    machine = platform.machine().lower()
    return _IR.format(max_threads=MAX_THREADS, pause=_PAUSE[machine], futex=_FUTEX[machine],
                      wait_op=_FUTEX_WAIT_PRIVATE, wake_op=_FUTEX_WAKE_PRIVATE,
                      seq_shift=GATE_SEQ_SHIFT, open=OPEN, not_open=~OPEN,
                      joined_mask=JOINED_MASK, yield_spins=YIELD_SPINS,
                      late_slack_ns=LATE_SLACK_NS, max_misses=MAX_MISSES, nap_ns=NAP_NS, parallel=PARALLEL_FN,
                      thread_num=THREAD_NUM_FN, num_threads=NUM_THREADS_FN,
                      run_begin=RUN_BEGIN_FN, run_end=RUN_END_FN)


class Team:
    """The compiled team code, its state words and its worker threads."""

    def __init__(self, compiled_module):
        self.module = compiled_module  # keeps the code alive (see module doc: exit)
        for name in (PARALLEL_FN, THREAD_NUM_FN, NUM_THREADS_FN, RUN_BEGIN_FN, RUN_END_FN):
            llvm.add_symbol(name, compiled_module.address(name))
        word = lambda name, ctype: ctype.from_address(  # noqa: E731
            compiled_module.global_address(name))
        self.workers = word("workers", ctypes.c_int32)
        self.hold = word("hold", ctypes.c_int32)
        self.rendezvous = word("rendezvous", ctypes.c_int32)
        self.rest = word("rest", ctypes.c_int32)
        self.misses = word("misses", ctypes.c_int32)
        self.runs = word("runs", ctypes.c_int64)
        self._reset = [word(n, ctypes.c_int64) for n in ("runs", "gate", "done", "owner")] + \
            [word(n, ctypes.c_int32) for n in ("sleepers", "busy", "workers", "rest",
                                                "misses")]
        self._worker = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_int64)(
            compiled_module.address("graphc_team_worker"))
        self._quit = ctypes.CFUNCTYPE(None)(compiled_module.address("graphc_team_quit"))
        self._run_begin = ctypes.CFUNCTYPE(None)(compiled_module.address(RUN_BEGIN_FN))
        self._run_end = ctypes.CFUNCTYPE(None)(compiled_module.address(RUN_END_FN))
        self.threads = []
        self._lock = threading.Lock()
        self.pid = os.getpid()

    def ensure_workers(self, count):
        """At least min(count, MAX_THREADS - 1) workers are started (in this process)."""
        count = min(count, MAX_THREADS - 1)
        with self._lock:
            if self.pid != os.getpid():
                return  # a forked child keeps running its regions alone
            while len(self.threads) < count:
                w = len(self.threads) + 1
                thread = threading.Thread(target=self._worker, args=(w, GRACE_NS),
                                          name=f"graphc-team-{w}", daemon=True)
                # counted first: thread_num finds a worker only among the counted ones,
                # and a worker joins no region before it has recorded who it is
                self.workers.value = w
                thread.start()
                self.threads.append(thread)

    def run_begin(self):
        self._run_begin()

    def run_end(self):
        self._run_end()

    @contextlib.contextmanager
    def held(self):
        """Workers join no region meanwhile, as if each were asleep or preempted for
        the whole time (tests of a caller left alone)."""
        self.hold.value = 1
        try:
            yield
        finally:
            self.hold.value = 0

    @contextlib.contextmanager
    def gathered(self):
        """Meanwhile each region's caller waits until the workers its team asked for
        have joined before it runs its share, and runs no region alone for a backoff
        (it still records losses), and the workers stay awake (as in a run): which
        threads run a region then depends on no timing (tests)."""
        self.run_begin()
        self.rendezvous.value = 1
        try:
            yield
        finally:
            self.rendezvous.value = 0
            self.run_end()

    def after_fork_in_child(self):
        for word in self._reset:
            word.value = 0
        self.threads = []
        self._lock = threading.Lock()

    def stop(self):
        """Tells the workers to quit and waits for them (at exit)."""
        if self.pid != os.getpid():
            return
        self._quit()
        for thread in self.threads:
            thread.join(timeout=5)
