"""The ranks' agreement on the collectives they run, and the watchdog that bounds each wait.

MPI matches the collectives of the ranks by their order alone: a rank running another op,
or the same op on another shape, would deadlock or reduce mismatched buffers. So the
ranks compare headers (what the collective is, its shape) before data moves, but not on
every call: that exchange is a collective itself, as costly as an allreduce of a few KiB.
Each rank keeps the sequence of collectives all ranks last agreed on (`Agreement`). A
call that follows it (the next collective of the sequence, or its first one again: the
sequence repeats, as a training loop does) moves its data at once; a call that departs
from it (a graph's first run, a new shape, another fetch) exchanges headers first, then
the sequence is extended with that call or, when the call closes a cycle of what ran
since the sequence last began, becomes that cycle.

Why no mismatch slips through: the ranks change their sequences only together (after an
exchange all of them took part in, with equal headers), so every rank holds the same
sequence and position. Two ranks moving data without an exchange therefore run the same
collective on the same shape. Where all ranks depart, the exchange compares them and a
mismatch raises FailedPreconditionError on every rank, naming what each runs; where only
some depart, they wait in the exchange while the others wait in a data collective, and the
watchdog ends the job after GRAPHC_MPI_TIMEOUT seconds. Headers travel on a duplicate of the
communicator, so a header is never matched with a gradient.

The watchdog: MPI's blocking collectives are the fastest path (a polled non-blocking one
costs 10-40% more on large buffers here) but cannot be interrupted, so a thread watches
the collective this rank is in: it warns after GRAPHC_MPI_STALL_WARNING seconds and,
after GRAPHC_MPI_TIMEOUT, prints which collective never completed and calls MPI_Abort, which
ends every rank of the job (a rank whose partners left can do nothing else: its MPI
state is broken). A collective that compiled code calls (native.py) is watched through
what the code writes while it waits (NativeWait), read while the entry runs without the GIL.
"""
import hashlib
import os
import sys
import threading
import time

import numpy as np

from graphc import errors
from runtime import mpi_library

_DESCRIPTION_BYTES = 240  # of a rank's description of its collective, in a mismatch report
# A sequence longer than this is restarted rather than extended: a job whose collectives
# never repeat exchanges headers at every call instead of keeping an ever longer list.
_MAX_SEQUENCE = 4096


def _seconds(variable, default):
    """A limit of the watchdog, read when init() makes it (a bad value fails init(), not
    `import graphc`)."""
    text = os.environ.get(variable, "").strip() or default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:  # (NaN too)
        raise ValueError(f"graphc.distribute: {variable} must be a number of seconds > 0, "
                         f"got {text!r}")
    return value



def hash64(text):
    """A 64-bit hash of `text` as a signed int (an int64 header field)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little",
                          signed=True)


def describe(op, shape):
    """What a mismatch report says of a collective `op` on `shape`."""
    return f"{op.type} '{op.name}' {op.outputs[0].dtype.name}{list(shape)} {dict(op.attrs)}"


class Agreement:
    """This rank's copy of the sequence of collectives the ranks agreed on, and the
    header exchange that extends it. `exchanges` counts the exchanges (tests read it)."""

    def __init__(self, comm, rank, size):
        self._comm = comm  # a duplicate of the data communicator
        self.rank, self.size = rank, size
        self._sequence = []  # keys: (op identity, shape)
        self._position = 0   # of the next key expected
        self.exchanges = 0
        self.watchdog = Watchdog(comm, rank)

    def follows(self, key):
        """Whether `key` is the sequence's next collective (moving on past it): then every
        rank that runs it now runs it, and no exchange is needed."""
        sequence, position = self._sequence, self._position
        if position < len(sequence) and sequence[position] == key:
            self._position = position + 1
            return True
        if position == len(sequence) and sequence and sequence[0] == key:  # it repeats
            self._position = 1
            return True
        return False

    def depart(self, op, key, shape, description=None):
        """Exchanges headers for a call that does not follow the sequence; raises on every
        rank when the ranks disagree. Else the sequence goes on from what this pass ran:
        when `key` ran in it, a cycle closes (the sequence becomes the keys from `key`'s
        last run on); otherwise `key` is appended to what ran (any rest is dropped).
        description: what a mismatch report says this rank runs, when not `op` alone."""
        self.exchange(op, key[0], shape, description=description)
        ran = self._sequence[:self._position]
        if key in ran:
            self._sequence = ran[len(ran) - 1 - ran[::-1].index(key):]
            self._position = 1
        else:
            self._sequence = ran + [key] if len(ran) < _MAX_SEQUENCE else [key]
            self._position = len(self._sequence)

    def exchange(self, op, identity, shape, dim0=None, description=None):
        """Every rank's (identity, shape) header; returns the ranks' `dim0`s (Allgather's
        row counts, which may differ; `shape` is then the rest of its shape). Raises
        FailedPreconditionError on every rank when the identities or shapes differ
        (description: a function giving what the report says this rank runs)."""
        mine = np.array([identity, hash64(repr(shape)), dim0 or 0], np.int64)
        headers = np.empty((self.size, mine.size), np.int64)
        self.watchdog.watch(op)
        try:
            self._comm.Allgather(mine, headers)
        finally:
            self.watchdog.done()
        self.exchanges += 1
        if not (headers[:, :2] == headers[0, :2]).all():
            shown = list(shape) if dim0 is None else [dim0] + list(shape)
            mine = description() if description is not None else describe(op, shown)
            raise errors.FailedPreconditionError(None, op, self._mismatch_report(op, mine))
        return headers[:, 2]

    def _mismatch_report(self, op, mine):
        """What each rank runs (`mine`: this rank's), gathered as fixed-size text (every
        rank is here: the header exchange completed)."""
        buf = np.zeros(_DESCRIPTION_BYTES, np.uint8)
        raw = mine.encode()[:_DESCRIPTION_BYTES]
        buf[:len(raw)] = np.frombuffer(raw, np.uint8)
        every = np.empty((self.size, _DESCRIPTION_BYTES), np.uint8)
        self._comm.Allgather(buf, every)
        lines = [f"  rank {r}: " + bytes(row).rstrip(b"\0").decode(errors="replace")
                 for r, row in enumerate(every)]
        return ("the ranks run different collectives at the same point of their schedules "
                "(different graphs, fetches or shapes on different ranks):\n" +
                "\n".join(lines) + f"\n\t [[node {op.describe()}]]")


class Watchdog:
    """A thread ending the job when this rank waits in one collective longer than
    GRAPHC_MPI_TIMEOUT seconds (default 600), after a warning at GRAPHC_MPI_STALL_WARNING
    (default 60): a rank may legitimately keep the others waiting a while (rank 0
    evaluating or writing a checkpoint). watch(op) before the MPI call, done() after it:
    two attribute stores, nothing the call's latency notices."""

    def __init__(self, comm, rank):
        self._comm = comm
        self._rank = rank
        self.timeout = _seconds("GRAPHC_MPI_TIMEOUT", "600")
        self.stall_warning = _seconds("GRAPHC_MPI_STALL_WARNING", "60")
        self._watched = None  # (op, since) of the collective this rank is in, or None
        self._thread = None
        # a tenth of the shorter limit: the message comes at most 10% late
        self._interval = min(1.0, self.stall_warning / 10, self.timeout / 10)

    def watch(self, op):
        self._start()
        self._watched = (op, time.monotonic())

    def watch_native(self, wait):
        """Watches the collectives compiled code runs until done() (a NativeWait, made
        once per native stage: graphc/distribute/native.py)."""
        self._start()
        wait.restart()
        self._watched = wait

    def done(self):
        self._watched = None

    def _start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="graphc-mpi-watchdog",
                                            daemon=True)
            self._thread.start()

    def _run(self):
        warned = None
        while True:
            time.sleep(self._interval)
            watched = self._watched
            if isinstance(watched, NativeWait):
                watched = watched.waiting()
            if watched is None:
                continue
            op, since = watched
            waited = time.monotonic() - since
            if waited > self.timeout:
                self._abort(op)
            if waited > self.stall_warning and warned is not watched and \
                    self.timeout > self.stall_warning:
                warned = watched
                sys.stderr.write(
                    f"graphc.distribute: rank {self._rank} has waited {self.stall_warning:g} "
                    f"s for the other ranks at collective {op.type} '{op.name}'; it fails "
                    f"after {self.timeout:g} s (GRAPHC_MPI_TIMEOUT)\n")
                sys.stderr.flush()

    def _abort(self, op):
        sys.stderr.write(
            f"graphc.distribute: FailedPreconditionError: rank {self._rank}: the other ranks "
            f"did not reach collective {op.type} '{op.name}' within {self.timeout:g} s "
            "(GRAPHC_MPI_TIMEOUT): a rank stopped, or runs other collectives (another graph, "
            f"other fetches or shapes) than this one\n\t [[node {op.describe()}]]\n"
            "graphc.distribute: aborting all ranks (MPI_Abort).\n")
        sys.stderr.flush()
        sys.stdout.flush()
        self._comm.Abort(1)


class NativeWait:
    """The wait of compiled code in a collective, as the watchdog sees it: the code writes
    the collective's tag and counts its calls in runtime.mpi_library.WORDS."""

    def __init__(self, tags):
        """tags: {tag: op} of the collectives the code may mark."""
        self._tags = tags
        self.restart()

    def restart(self):
        self._seen = None     # (calls, tag) last read
        self._waiting = None  # (op, since) of that call, or None outside collectives

    def waiting(self):
        """(op, since when) of the call the code is in now, or None: the same tuple for
        as long as one call lasts (the watchdog warns once per call)."""
        words = mpi_library.WORDS
        tag = words[mpi_library.IN_COLLECTIVE]
        seen = (words[mpi_library.CALLS], tag)
        if seen != self._seen:
            self._seen = seen
            self._waiting = (self._tags[tag], time.monotonic()) if tag in self._tags \
                else None
        return self._waiting
