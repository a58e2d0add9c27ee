"""The region steps of a GPU spec (a While or an If, docs/gpu_contract.md) run on a device:
the host drives the launches of each body on device buffers.

A While's loop variables live in two device buffers each (parts of the node's scratch)
that swap roles every iteration: the body reads one and writes the other, nothing is
copied between iterations (a TensorArray flow the body writes a row of in place has
one buffer). The cond writes its predicate into the byte after the run's
status word (the control block at the arena's start), and one 8-byte device->host copy per
iteration reads both: the loop stops at a false predicate, and at a failed check (a
nonzero status) at once, as the CPU's loop does, so an error inside a body never spins
on garbage. An If reads its predicate's byte and runs one branch.

A While step may also carry a "device_loop": one kernel that runs the whole loop in one
block (graphc/compiler/backends/gpu/device_loop.py says which loops have one). It is
taken for a binding where each of the cond's and the body's launches runs at most
max_threads threads (the state fits the block's few rounds): then a run of the loop is
the copies of its initial values and one launch, with nothing read back; the kernel
writes the loop's outputs and trip count itself. GRAPHC_GPU_DEVICE_LOOPS=0 in the
environment when a binding is resolved keeps its loops host-driven.

A While without a bound on its trip count keeps its stacks (and the arrays it appends
to) in buffers the run owns (grown.py): before the body's launches of iteration k it
makes room for row k of each, doubling on the device; when the loop leaves it sets its
trip count's run dim ("trips_dim": the syms slot after the error details, and the run's
env), which sizes what reads them after it: launches whose grid reads a run dim are
resolved when they run (DeferredLaunch), grown buffers are sized at their first use.

Each body runs in a Frame of its own: its parameters (feeds), outputs (fetches) and arena
are device addresses the step chooses; variables, constants and the control block are the
executable's. Steps are resolved once per binding (the symbol values of a feed shape
tuple), as the executable resolves its launches.
"""
import os

import numpy as np

from ..errors import ShapeError
from ..shapes import evaluate as _evaluate
from .spec import MAX_GRID

__all__ = ["Frame", "Run", "DeferredLaunch", "resolve_steps", "run_steps",
           "PREDICATE_OFFSET"]

PREDICATE_OFFSET = 4  # bytes into the control block: after the i32 status, in its padding


class Frame:
    """Where a step's buffers are: kind 0: base + v (the executable's arena), 1: variable
    v, 2: absolute address v, 3: the frame's feed v, 4: its fetch v, 5: its arena + v,
    6: the run's grown buffer v (grown.py)."""

    __slots__ = ("base", "variables", "feeds", "fetches", "arena", "grown")

    def __init__(self, base, variables, feeds=(), fetches=(), arena=0, grown=None):
        self.base, self.variables = base, variables
        self.feeds, self.fetches, self.arena = feeds, fetches, arena
        self.grown = grown

    def address(self, where, v):
        if where == 0:
            return self.base + v
        if where == 1:
            return self.variables[v]
        if where == 2:
            return v
        if where == 3:
            return self.feeds[v]
        if where == 4:
            return self.fetches[v]
        if where == 6:
            return self.grown.address(v)
        return self.arena + v

    def inner(self, feeds=(), fetches=(), arena=0):
        """The frame of a body run from this one: the executable's buffers shared."""
        return Frame(self.base, self.variables, feeds, fetches, arena, self.grown)


class Run:
    """What every step of one run shares: the device, the control block (the kernels'
    status word, then their syms), the dim values (env: the binding's symbols, then each
    run dim once its loop has left) and the run dims' syms slots (run_dim_slots: [(name,
    device address)] in the spec's run_dim_names order)."""

    __slots__ = ("device", "syms", "status", "env", "run_dim_slots", "_control")

    def __init__(self, device, base, syms, env=None, run_dim_slots=()):
        self.device, self.syms, self.status = device, syms, base
        self.env = {} if env is None else env
        self.run_dim_slots = list(run_dim_slots)
        self._control = np.zeros(2, np.int32)

    def set_run_dim(self, index, value):
        """Run dim `index` (the spec's run_dim_names) is `value` for the rest of the run:
        in env for the host's sizes, in its syms slot for the kernels'."""
        name, address = self.run_dim_slots[index]
        self.env[name] = value
        self.device.copy_in(address, np.array(value, np.int64))

    def control(self):
        """(status, predicate) of the control block: one device->host copy."""
        self.device.copy_out(self._control, self.status)
        return int(self._control[0]), bool(self._control[1] & 0xFF)

    def copy(self, dst, src, nbytes):
        if nbytes and dst != src:
            self.device.copy(dst, src, nbytes)


def run_steps(run, steps, frame):
    """Runs resolved steps in a frame; returns a nonzero status when a region stopped on
    a failed check (launches only set the status: the caller reads it at the end)."""
    device, base, variables, address = run.device, frame.base, frame.variables, frame.address
    for step in steps:
        if type(step) is tuple:
            kernel, args, grid, block, shared = step
            # the executable's own kinds inline: a run's launches pay no call per pointer
            pointers = [base + v if w == 0 else variables[v] if w == 1 else v if w == 2
                        else address(w, v) for w, v in args]
            device.launch(kernel, pointers, run.syms, run.status, grid, block, shared)
        else:
            status = step.run(run, frame)
            if status:
                return status
    return 0


def resolve_steps(steps, env, arg_of, resolve_launch):
    """Steps for one binding: launch tuples and region objects. arg_of(kind, what,
    where) -> (frame kind, value) of a storage key; resolve_launch(launch, env, arg_of)
    -> a launch tuple (kernel, args, grid, block, shared bytes)."""
    out = []
    for step in steps:
        if "while" in step:
            out.append(WhileStep(step, env, arg_of, resolve_launch))
        elif "if" in step:
            out.append(IfStep(step, env, arg_of, resolve_launch))
        else:
            launch = resolve_launch(step, env, arg_of)
            if type(launch) is not tuple or launch[2] > 0:  # no blocks: nothing to compute
                out.append(launch)
    return out


class DeferredLaunch:
    """A launch whose grid reads a dim set during the run (a loop's trip count: a gather
    of the stack it appended to): its grid is evaluated when it runs, in the run's env."""

    __slots__ = ("kernel", "args", "grid", "block", "shared", "name")

    def __init__(self, kernel, args, grid, block, shared, name):
        self.kernel, self.args, self.grid = kernel, args, grid
        self.block, self.shared, self.name = block, shared, name

    def run(self, run, frame):
        try:
            grid = _evaluate(self.grid, run.env)
        except KeyError as e:
            raise ShapeError(f"kernel {self.name}: its grid reads {e.args[0]!r}, which no "
                             "loop before it has set") from None
        if not 0 <= grid <= MAX_GRID:
            raise ShapeError(f"kernel {self.name}: grid of {grid} blocks is outside "
                             f"[0, {MAX_GRID}]")
        if grid:
            pointers = [frame.address(w, v) for w, v in self.args]
            run.device.launch(self.kernel, pointers, run.syms, run.status, grid, self.block,
                              self.shared)
        return 0


class Body:
    """One body of a region: its steps in its own frame, its arena's place in the
    node's scratch, and the outputs its launches do not write (copied after them)."""

    def __init__(self, body, env, scratch_bytes, constant_arg, resolve_launch, where):
        self.arena = _evaluate(body["arena"], env)
        arena_bytes = _evaluate(body["arena_bytes"], env)
        if not (0 <= self.arena and 0 <= arena_bytes and
                self.arena + arena_bytes <= scratch_bytes):
            raise ShapeError(f"{where}: its arena [{self.arena}, +{arena_bytes}) lies "
                             f"outside the {scratch_bytes}-byte scratch")
        self.params = body["params"]
        fetches = body["fetches"]
        self.fetch_count = len(fetches)
        # (output, its source as a frame kind and value, bytes)
        self.copies = [(j, self._source(f, constant_arg, where), _evaluate(f["bytes"], env))
                       for j, f in enumerate(fetches)
                       if f["source"] != "kernel" or f["index"] != j]

        def arg_of(kind, what, at):
            if kind == "arena":
                offset = _evaluate(what, env)
                if not 0 <= offset <= arena_bytes:
                    raise ShapeError(f"{at}: arena offset {offset} is outside the body's "
                                     f"{arena_bytes}-byte arena")
                return 5, offset
            if kind == "feed":
                return 3, what
            if kind == "fetch":
                return 4, what
            return constant_arg(kind, what, at)
        self.steps = resolve_steps(body["steps"], env, arg_of, resolve_launch)

    def run(self, run, frame):
        status = run_steps(run, self.steps, frame)
        if status:
            return status
        for j, source, nbytes in self.copies:
            run.copy(frame.fetches[j], frame.address(*source), nbytes)
        return 0

    def _source(self, fetch, constant_arg, where):
        """The frame kind and value of where a body output is copied from."""
        kind, index = fetch["source"], fetch["index"]
        if kind == "kernel":
            return 4, index
        if kind == "feed":
            return 3, index
        return constant_arg("var" if kind == "variable" else "const", index, where)


def _outer_arg(arg_of):
    """arg_of for what a body shares with its enclosing frame: variables, constants."""
    def shared(kind, what, at):
        if kind not in ("var", "const"):
            raise ShapeError(f"{at}: a {kind} key in a body names its own frame")
        return arg_of(kind, what, at)
    return shared


class _Region:
    """What While and If share: inputs, outputs and scratch in the enclosing frame."""

    def __init__(self, step, env, arg_of, resolve_launch, name):
        self.name = name
        self.inputs = [arg_of(k[0], k[1], name) for k in step["inputs"]]
        self.outputs = [[arg_of(k[0], k[1], name) for k in keys] for keys in step["outputs"]]
        # no scratch: every part is empty, any address will do
        self.scratch = (0, 0) if step["scratch"] is None else \
            arg_of(step["scratch"][0], step["scratch"][1], name)
        scratch_bytes = _evaluate(step["scratch_bytes"], env)
        if scratch_bytes < 0 or (step["scratch"] is None and scratch_bytes):
            raise ShapeError(f"{name}: a scratch of {scratch_bytes} bytes is negative or has "
                             "no buffer")
        shared = _outer_arg(arg_of)
        self.bodies = {key: Body(step[key], env, scratch_bytes, shared, resolve_launch,
                                 f"{name} {key}")
                       for key in self.BODIES}
        self.scratch_bytes = scratch_bytes

    def part(self, offset, nbytes):
        if not (0 <= offset and offset + nbytes <= self.scratch_bytes):
            raise ShapeError(f"{self.name}: a part [{offset}, +{nbytes}) lies outside the "
                             f"{self.scratch_bytes}-byte scratch")
        return offset


class WhileStep(_Region):
    BODIES = ("cond", "body")

    def __init__(self, step, env, arg_of, resolve_launch):
        super().__init__(step, env, arg_of, resolve_launch, step["while"])
        self.var_bytes = [_evaluate(v["bytes"], env) for v in step["vars"]]
        self.a = [self.part(_evaluate(v["a"], env), b) for v, b in zip(step["vars"],
                                                                       self.var_bytes)]
        self.b = [self.part(_evaluate(v["b"], env), b) for v, b in zip(step["vars"],
                                                                       self.var_bytes)]
        # written in place by the body: one buffer, read and written by each iteration
        self.in_place = [bool(v.get("in_place")) for v in step["vars"]]
        # (row bytes, its scratch row, the stack's bytes or None when it grows, the grown
        # buffer it grows in or None)
        self.stacks = []
        for s in step["stacks"]:
            row = _evaluate(s["row_bytes"], env)
            grows = s.get("bytes") is None
            self.stacks.append((row, self.part(_evaluate(s["row"], env), row),
                                None if grows else _evaluate(s["bytes"], env),
                                s.get("grown") if grows else None))
        self.trips_dim = step.get("trips_dim")
        # the stacks whose rows past the trip count are zeroed (a product after the loop
        # reads every row)
        self.zeroed = [bool(s.get("zeroed_past_trips")) for s in step["stacks"]]
        n = len(self.var_bytes)
        if len(self.outputs) != n + 1 + len(self.stacks) or \
                self.bodies["cond"].params < n or self.bodies["body"].params < n or \
                len(self.inputs) != self.bodies["cond"].params + self.bodies["body"].params - n \
                or self.bodies["cond"].fetch_count != 1 or \
                self.bodies["body"].fetch_count != n + len(self.stacks):
            raise ShapeError(f"{self.name}: its inputs, outputs and bodies do not match")
        for k, (_, _, total, grown) in enumerate(self.stacks):
            keys = self.outputs[n + 1 + k]
            if total is None and (self.trips_dim is None or
                                  keys != ([] if grown is None else [(6, grown)])):
                raise ShapeError(f"{self.name}: stack {k} grows, but not in the one grown "
                                 "buffer its output names, or with no trip count to set")
        self.device_loop = self._device_loop(step, env, arg_of, resolve_launch)

    def _device_loop(self, step, env, arg_of, resolve_launch):
        """(kernel, refs as frame kinds and values, block) of the one-kernel form when
        this binding takes it (module docstring), else None."""
        loop = step.get("device_loop")
        if loop is None or not device_loops_enabled():
            return None
        launches = _launches([s for key in self.BODIES for s in self.bodies[key].steps])
        if not all(s is not None and s[2] * s[3] <= loop["max_threads"] for s in launches):
            return None
        kernel, _, _, block, _ = resolve_launch(dict(loop, args=[]), env, arg_of)
        refs = []
        for ref in loop["args"]:
            kind = ref[0]
            if kind in ("var", "const"):
                refs.append(("frame",) + tuple(arg_of(kind, ref[1], self.name)))
            elif kind == "arena":
                refs.append(("scratch", self.bodies[ref[1]].arena))
            elif kind in ("a", "b"):
                refs.append(("scratch", (self.a if kind == "a" else self.b)[ref[1]]))
            elif kind == "input":
                refs.append(("frame",) + tuple(self.inputs[ref[1]]))
            elif kind == "row":
                refs.append(("scratch", self.stacks[ref[1]][1]))
            else:
                refs.append(("frame",) + tuple(self.outputs[ref[1]][ref[2]]))
        return kernel, refs, block

    def run(self, run, frame):
        n = len(self.var_bytes)
        scratch = frame.address(*self.scratch)
        inputs = [frame.address(*a) for a in self.inputs]
        current = [scratch + a for a in self.a]
        spare = [c if same else scratch + b for c, b, same in zip(current, self.b,
                                                                   self.in_place)]
        for i in range(n):
            run.copy(current[i], inputs[i], self.var_bytes[i])
        if self.device_loop is not None:
            # its trip count stays on the device: every row is zeroed before the kernel
            # writes those of its iterations
            self._zero_rows_past(run, frame, 0)
            kernel, refs, block = self.device_loop
            pointers = [scratch + v[0] if where == "scratch" else frame.address(*v)
                        for where, *v in refs]
            run.device.launch(kernel, pointers, run.syms, run.status, 1, block, 0)
            return 0
        cond, body = self.bodies["cond"], self.bodies["body"]
        cond_extra = inputs[n:cond.params]
        body_extra = inputs[cond.params:]
        # a grown stack's rows move as it grows: asked of frame.grown each iteration
        stacks = [(frame.address(*keys[0]) if keys and grown is None else None, row,
                   scratch + fallback)
                  for keys, (row, fallback, _, grown) in zip(self.outputs[n + 1:],
                                                             self.stacks)]
        cond_frame = frame.inner((), [run.status + PREDICATE_OFFSET], scratch + cond.arena)
        body_frame = frame.inner((), (), scratch + body.arena)
        trips = 0
        while True:
            cond_frame.feeds = current + cond_extra
            status = cond.run(run, cond_frame)
            if not status:
                status, go_on = run.control()
            if status:
                return status
            if not go_on:
                break
            body_frame.feeds = current + body_extra
            body_frame.fetches = spare + [
                self._row(stack, row, fallback, total, trips) if grown is None else
                frame.grown.row(grown, trips, row)
                for (stack, row, fallback), (_, _, total, grown) in zip(stacks, self.stacks)]
            status = body.run(run, body_frame)
            if status:
                return status
            current, spare = spare, current
            trips += 1
        if self.trips_dim is not None:
            run.set_run_dim(self.trips_dim, trips)
        self._write_outputs(run, frame, current, trips)
        return 0

    def _row(self, stack, row, fallback, total, trips):
        """Where iteration `trips` writes its value saved in a stack: that row of the
        stack's storage (sized by maximum_iterations, which the cond tests), or the
        scratch row of a stack no kernel reads."""
        if stack is None:
            return fallback
        if row and (trips + 1) * row > total:  # never past the buffer, whatever the cond
            raise ShapeError(f"{self.name}: iteration {trips} has no row in its stack of "
                             f"{total // row} rows")
        return stack + trips * row

    def _zero_rows_past(self, run, frame, trips):
        """Zeros the rows from `trips` on of the stacks a product after the loop reads
        (before their copies to other buffers)."""
        n = len(self.var_bytes)
        for keys, (row, _, total, _), zeroed in zip(self.outputs[n + 1:], self.stacks,
                                                    self.zeroed):
            # a grown stack has the trip count's rows: none past them
            if zeroed and keys and total is not None and total > trips * row:
                run.device.zero(frame.address(*keys[0]) + trips * row, total - trips * row)

    def _write_outputs(self, run, frame, current, trips):
        n = len(self.var_bytes)
        self._zero_rows_past(run, frame, trips)
        for i, keys in enumerate(self.outputs[:n]):
            for arg in keys:
                run.copy(frame.address(*arg), current[i], self.var_bytes[i])
        for arg in self.outputs[n]:  # the trip count
            run.device.copy_in(frame.address(*arg), np.array(trips, np.int32))
        for keys, (_, _, total, _) in zip(self.outputs[n + 1:], self.stacks):
            for arg in keys[1:]:  # a grown stack has one (the compiler checked)
                run.copy(frame.address(*arg), frame.address(*keys[0]), total)


def _launches(steps):
    """The launch tuples of resolved steps, those in If branches included; None for a
    While and for a launch sized during the run (a device loop holds neither)."""
    for step in steps:
        if type(step) is tuple:
            yield step
        elif isinstance(step, IfStep):
            for body in step.bodies.values():
                yield from _launches(body.steps)
        else:
            yield None


def device_loops_enabled():
    return os.environ.get("GRAPHC_GPU_DEVICE_LOOPS", "1").lower() not in ("0", "off",
                                                                          "false", "no")


class IfStep(_Region):
    BODIES = ("then", "else")

    def __init__(self, step, env, arg_of, resolve_launch):
        super().__init__(step, env, arg_of, resolve_launch, step["if"])
        self.bytes = [_evaluate(b, env) for b in step["bytes"]]
        self.slots = [self.part(_evaluate(s, env), b) for s, b in zip(step["slots"],
                                                                      self.bytes)]
        self.mine = {key: list(step[key]["outputs"]) for key in self.BODIES}
        count = len(self.outputs)
        if len(self.bytes) != count or any(not 0 <= i < count for ks in self.mine.values()
                                           for i in ks) or \
                len(self.inputs) != 1 + sum(b.params for b in self.bodies.values()) or \
                any(len(self.mine[k]) != b.fetch_count for k, b in self.bodies.items()):
            raise ShapeError(f"{self.name}: its inputs, outputs and branches do not match")

    def run(self, run, frame):
        scratch = frame.address(*self.scratch)
        inputs = [frame.address(*a) for a in self.inputs]
        flag = np.zeros(1, np.uint8)
        run.device.copy_out(flag, inputs[0])
        key = "then" if flag[0] else "else"
        outputs = [frame.address(*keys[0]) if keys else scratch + slot
                   for keys, slot in zip(self.outputs, self.slots)]
        n_then = self.bodies["then"].params
        feeds = inputs[1:1 + n_then] if key == "then" else inputs[1 + n_then:]
        mine = self.mine[key]
        status = self.bodies[key].run(run, frame.inner(feeds, [outputs[i] for i in mine],
                                                       scratch + self.bodies[key].arena))
        if status:
            return status
        for i in set(range(len(outputs))) - set(mine):  # the other branch's saved values
            if self.bytes[i]:
                run.device.zero(outputs[i], self.bytes[i])
        for i, keys in enumerate(self.outputs):
            for arg in keys[1:]:
                run.copy(frame.address(*arg), outputs[i], self.bytes[i])
        return 0
