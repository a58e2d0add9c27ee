"""A While whose whole loop runs on the device: one kernel, one launch, no read-back.

The host-driven form (control_flow.py) launches the cond's and the body's kernels from the
host each iteration and reads the predicate back: a launch latency per kernel and a
device->host round trip per iteration, which dominate a small recurrence (a counter loop,
an elementwise RNN cell over a small state, a scan over rows). The device form emits ONE
kernel, launched with one block, that runs the same launches' templates one after the
other inside a loop in uniform code:

    trips = 0
    loop: current = trips even ? a : b, spare = the other (in place: a)
          the cond's launches (its predicate into the byte after the status word)
          bar.sync; read the status and the predicate; bar.sync
          stop on a failed check (status != 0) or a false predicate
          the body's launches (reading current, writing spare); bar.sync
          the body outputs no kernel writes (copies); bar.sync
          read the status; bar.sync; stop on a failed check
          trips += 1
    the final state and the trip count into the loop's outputs

with `bar.sync` wherever the host form had a launch boundary: within one block it orders
global memory as the boundary did. The loop's branches are uniform: every thread computes
the same trip count, and reads the status and the predicate between two barriers, so
that no thread can set them (a failed check in the next phase) while another still reads.

Eligibility, decided from the body's kernels:
- at compile time (`device_loop`): a While (an If's single pass gains nothing) whose cond
  and body hold launches and Ifs only (an If in the loop branches on the device: its
  predicate read by every thread after a barrier, one branch's launches, the other's
  saved outputs zeroed; a nested While keeps the host-driven form around its own steps,
  its inner loop being a device loop of its own where it allows) of templates that
  stride over blocks (`for (row = ctaid; row < rows; row += nctaid)`: the grid-stride
  loops, row reductions, scans, tiled products, TensorArray moves, run counters), so
  that one block computes what the host form's grid does. The
  block is the one the row, scan and product templates were planned for (their shared
  arrays and warp counts assume it; they must all agree); the grid-stride templates take
  any. At most two tiled products (their shared tiles, 16 KiB each in float64, against
  the 48 KiB of static shared memory a kernel may have). The stacks a forward loop keeps
  for its gradient are written as in the host form, row k by iteration k; a row past a
  stack's end (a cond that does not test maximum_iterations, which sizes it) stops the
  loop with an error naming the While, as the host form's check does. A loop whose
  stacks grow (no bound on its trip count, or arrays it appends to: regions.py) stays
  host-driven: the host grows their buffers between iterations (control_flow.py), and
  a kernel cannot allocate device memory the runtime would own and free.
- at run time, per binding (runtime/gpu/control_flow.py): the host form's launches of the
  cond and the body have each at most MAX_ROUNDS blocks' threads: the one block then
  does at most MAX_ROUNDS rounds of what the grid did at once. An estimate, not a
  measurement (no GPU was at hand): a round of a small state's elementwise work waits
  about one L2 access (a few tenths of a microsecond), so 32 rounds cost about what one
  launch does (a few microseconds), and the host form pays a launch per kernel plus a
  drained pipeline and a read-back (ten or more) per iteration. An LSTM's weight
  gradient summed over the steps ([48, 128]: 24 rounds) stays in. A larger state needs
  the grid, and a loop over the grid needs a grid-wide barrier between phases, which
  this form does not use (cooperative launches would): it stays host-driven.
The host form's kernels are emitted too: the runtime falls back to them per binding, and
GRAPHC_GPU_DEVICE_LOOPS=0 forces them (tests and comparisons). The emulation of the loop
kernel calls them, with one block of the loop's threads, where the PTX has each one's
code inline: blocks run one after another there, so a launch of one block is exactly
the code between two of the kernel's barriers, on the same pointers (computed by the
same code, _BodyFrame), and the host JIT does not compile every loop body twice.

The kernel's pointer arguments name buffers of the loop step's frame ("refs", resolved by
the runtime): ["a", i] / ["b", i] loop variable i's two buffers, ["input", k] the step's
input k, ["arena", "cond" | "body"] a body's arena, ["output", i, r] the r-th buffer of
the step's output i (i = number of loop variables: the trip count; after it the stacks),
["row", s] the scratch row of a stack s no kernel reads, ["var", v] / ["const", c] the
executable's variables and constants.
"""
from llvmlite import ir

from graphc.compiler.backends.gpu import gemm, kinds, loop, reduce, scan, tensor_arrays
from graphc.compiler.backends.gpu.spec import storage_json
from graphc.compiler.regions import branch_outputs, growable, row_bytes, value_bytes
from kernels.loops import I8, I32, I64, PTR

MAX_ROUNDS = 32           # the host form's blocks per launch one block may take on
PREDICATE_OFFSET = 4      # the cond's byte after the i32 status (runtime/gpu/control_flow.py)
_MAX_PRODUCTS = 2         # tiled products: 2 x 16 KiB of shared tiles in float64
# templates whose code is right for any block size (they read ntid), and those planned
# for their launch's block (shared arrays and shuffles sized by it)
_ANY_BLOCK = (loop.emit_loop_launch,)
_ANY_BLOCK_MODULES = (tensor_arrays.__name__, kinds.__name__)
_PLANNED_BLOCK = (reduce.emit_row_launch, scan.emit_scan_launch, gemm.emit_gemm_launch)


def device_loop(region):
    """The DeviceLoop of a RegionKernel (control_flow.py), or None when its loop stays
    host-driven (the module docstring's compile-time rule)."""
    if region.node.type != "While" or any(growable(v) for v in region.node.outputs):
        return None
    launches = _launches_within(region)
    if launches is None:
        return None
    block = _common_block(launches)
    if block is None:
        return None
    return DeviceLoop(region, block)


def _launches_within(region):
    """The launches of a region's bodies (and of the Ifs among their kernels), or None
    when a While is among them: a nested loop keeps the host-driven form around its own
    steps."""
    out = []
    for _, kernels in region.bodies.values():
        for k in kernels:
            if not hasattr(k, "bodies"):
                out.extend(k.launches)
                continue
            inner = _launches_within(k) if k.node.type == "If" else None
            if inner is None:
                return None
            out.extend(inner)
    return out


def _bodies(region):
    """(body Program, its kernels) of a region and of the Ifs inside it."""
    for body, kernels in region.bodies.values():
        yield body, kernels
        for k in kernels:
            if hasattr(k, "bodies"):
                yield from _bodies(k)


def _common_block(launches):
    """The one block every launch's template can run with, or None."""
    planned, products = set(), 0
    for launch in launches:
        template = launch.template
        if template in _PLANNED_BLOCK:
            planned.add(int(launch.block))
            products += template is gemm.emit_gemm_launch
        elif template not in _ANY_BLOCK and template.__module__ not in _ANY_BLOCK_MODULES:
            return None
    if len(planned) > 1 or products > _MAX_PRODUCTS:
        return None
    if planned:
        return planned.pop()
    return max((int(launch.block) for launch in launches), default=1)


class DeviceLoop:
    """The one-kernel form of a While: a launch (name, storages, template) emitted with
    the others by generate_gpu, whose args are refs (module docstring)."""

    def __init__(self, region, block):
        self.region = region
        self.name = region.name + "_device_loop"
        self.block = block
        self.refs = []
        self._ref_index = {}
        node = region.node
        n = node.attrs["num_loop_vars"]
        for i in range(n):
            self.ref(["a", i])
            self.ref(["b", i])
        for k in range(len(node.value_inputs)):
            self.ref(["input", k])
        for key in ("cond", "body"):
            self.ref(["arena", key])
        for i, keys in enumerate(region.stores.get(v, ()) for v in node.outputs):
            for r in range(len(keys)):
                self.ref(["output", i, r])
        stacks = node.outputs[n + 1:]
        for s, v in enumerate(stacks):
            if not region.stores.get(v):
                self.ref(["row", s])
        # made once: the kernel is emitted twice (PTX and emulation)
        self.past_stack_site = region.program.error_site(
            node, "iteration {0} of the loop has no row in its stack of {1} rows (its "
            "maximum_iterations)", args=["int", "int"]) if stacks else None
        for body, kernels in _bodies(region):
            for launch in (launch for k in kernels if not hasattr(k, "bodies")
                           for launch in k.launches):
                for storage in launch.storages:
                    json = storage_json(body, storage)
                    if json[0] in ("var", "const"):
                        self.ref(json)
            # an If's inputs the kernel reads itself (_branch): a constant of the body
            # among them (a captured shape a gradient branch reads)
            for key in (key for k in kernels if hasattr(k, "bodies") for key in k.inputs):
                if key[0] in ("var", "const"):
                    self.ref(list(key))
            for j, value in enumerate(body.module.outputs):
                source = body.fetch_source(value)
                if source["source"] in ("variable", "constant"):
                    self.ref(["var" if source["source"] == "variable" else "const",
                              int(source["index"])])
        self.storages = self.refs  # generate_gpu: one pointer argument each

    def ref(self, ref):
        """Adds a ref to the kernel's arguments (once)."""
        key = tuple(ref)
        if key not in self._ref_index:
            self._ref_index[key] = len(self.refs)
            self.refs.append(list(ref))

    def position(self, ref):
        """The argument index of a ref (the kernel's signature is fixed by __init__)."""
        return self._ref_index[tuple(ref)]

    def to_json(self):
        return {"kernel": self.name, "args": [list(r) for r in self.refs], "grid": 1,
                "block": int(self.block), "shared_bytes": 0,
                "max_threads": MAX_ROUNDS * int(self.block)}

    @staticmethod
    def template(t, program, layout, scalar_ops):
        _LoopEmission(t, layout, scalar_ops).emit()


class _LoopEmission:
    """The device loop's kernel body (module docstring), emitted into thread program t."""

    def __init__(self, t, loop_, scalar_ops):
        self.t, self.loop, self.scalar_ops = t, loop_, scalar_ops
        self.b = t.b
        self.region = loop_.region
        self.n = self.region.node.attrs["num_loop_vars"]
        # the body's buffers are read and written through several arguments (a and b swap)
        for arg in t.args:
            arg.attributes.discard("noalias")

    def arg(self, *ref):
        return self.t.args[self.loop.position(ref)]

    def emit(self):
        t, b = self.t, self.b
        trips_slot = self._entry_alloca(I64, "trips")
        b.store(ir.Constant(I64, 0), trips_slot)
        head = b.append_basic_block("loop.head")
        done = b.append_basic_block("loop.done")
        b.branch(head)
        b.position_at_end(head)
        trips = b.load(trips_slot, typ=I64, name="trips")
        current, spare = self._buffers(trips)
        cond, cond_kernels = self.region.bodies["cond"]
        self._phase(cond, cond_kernels, self._loop_frame(
            "cond", current, [self._predicate()], self.arg("arena", "cond")))
        t.barrier()
        failed = self._failed()
        predicate = b.load(self._predicate(), typ=I8)
        stop = b.or_(failed, b.icmp_unsigned("==", predicate, ir.Constant(I8, 0)))
        t.barrier()  # all have read them before a thread of the body may set the status
        go_on = b.append_basic_block("loop.body")
        b.cbranch(stop, done, go_on)
        b.position_at_end(go_on)
        self._check_stacks(trips, done)
        body, body_kernels = self.region.bodies["body"]
        self._phase(body, body_kernels, self._loop_frame(
            "body", current, spare + self._stack_rows(trips), self.arg("arena", "body")))
        t.barrier()
        failed = self._failed()
        t.barrier()  # as above: the next cond's threads may set the status
        after = b.append_basic_block("loop.next")
        b.cbranch(failed, done, after)
        b.position_at_end(after)
        b.store(b.add(trips, ir.Constant(I64, 1)), trips_slot)
        b.branch(head)
        b.position_at_end(done)
        trips = b.load(trips_slot, typ=I64, name="trips.final")
        self._write_outputs(trips, self._buffers(trips)[0])

    # ----------------------------------------------------------------- phases
    def _phase(self, body, kernels, frame):
        """A body's launches (and Ifs) in order, barriers where the host form's launches
        ended, then the outputs no launch writes (copies)."""
        for k, kernel in enumerate(kernels):
            if k:
                self.t.barrier()
            if hasattr(kernel, "bodies"):
                self._branch(kernel, frame)
                continue
            for j, launch in enumerate(kernel.launches):
                if j:
                    self.t.barrier()
                self._launch(body, launch, [frame.pointer(s) for s in launch.storages])
        copies = frame.copies()
        if copies:
            if kernels:
                self.t.barrier()
            self._copy(copies)

    def _launch(self, body, launch, pointers):
        if self.t.nvptx:
            launch.template(_LaunchView(self.t, pointers), body, launch, self.scalar_ops)
        else:
            self._call_emulation(launch, pointers)

    def _loop_frame(self, key, current, fetches, arena):
        """The frame of the While's cond or body: its params are the current loop
        variables, then its part of the step's inputs (initial values, the cond's extra
        inputs, the body's)."""
        body, _ = self.region.bodies[key]
        cond_params = len(self.region.bodies["cond"][0].module.params)
        first = self.n if key == "cond" else cond_params
        extras = [self.arg("input", first + k)
                  for k in range(len(body.module.params) - self.n)]
        return _BodyFrame(self, body, current + extras, fetches, arena)

    def _branch(self, region, frame):
        """An If in a phase: its predicate read by every thread (its writer ended before
        the barrier ahead), one branch's launches, then what the runtime's IfStep does
        after them: the other branch's saved outputs zeroed, extra output buffers
        copied."""
        b, node, body = self.b, region.node, frame.body
        offsets = region.scratch_offsets()
        scratch = frame.pointer(region.scratch) if region.scratch is not None else \
            ir.Constant(PTR, None)

        def part(what):
            offset = body.emit_dim(b, offsets[what], self.t.syms)
            return b.gep(scratch, [offset], source_etype=I8)
        inputs = [frame.pointer(k) for k in region.inputs]
        outputs = [frame.pointer(region.stores[v][0]) if region.stores.get(v) else
                   part(("slot", i)) for i, v in enumerate(node.outputs)]
        sizes = [body.emit_dim(b, value_bytes(v), self.t.syms) for v in node.outputs]
        taken = b.icmp_unsigned("!=", b.load(inputs[0], typ=I8), ir.Constant(I8, 0))
        # all have read it before a branch's thread may write: the host form reads it
        # before any launch, so memory planning may give its buffer to a branch's output
        self.t.barrier()
        blocks = {key: b.append_basic_block(f"if.{key}") for key in ("then", "else")}
        merge = b.append_basic_block("if.done")
        b.cbranch(taken, blocks["then"], blocks["else"])
        n_then = len(region.bodies["then"][0].module.params)
        feeds = {"then": inputs[1:1 + n_then], "else": inputs[1 + n_then:]}
        for key, mine in branch_outputs(node).items():
            b.position_at_end(blocks[key])
            branch, kernels = region.bodies[key]
            self._phase(branch, kernels, _BodyFrame(
                self, branch, feeds[key], [outputs[i] for i in mine], part(("arena", key))))
            self.t.barrier()
            zeros = [(outputs[i], None, sizes[i]) for i in range(len(outputs))
                     if i not in mine]
            copies = [(frame.pointer(k), outputs[i], sizes[i])
                      for i, v in enumerate(node.outputs)
                      for k in region.stores.get(v, ())[1:]]
            for moves in (zeros, copies):  # a zeroed output may be copied on
                if moves:
                    self._copy(moves)
                    self.t.barrier()
            b.branch(merge)
        b.position_at_end(merge)

    def _call_emulation(self, launch, pointers):
        """The emulation of a launch's code inside the loop: its host-form function, on
        one block of the loop's threads (module docstring)."""
        t = self.t
        fn = t.module.globals.get(f"{launch.name}.emulate")
        if fn is None:
            raise AssertionError(f"{self.loop.name}: {launch.name} is emitted after its loop")
        self.b.call(fn, pointers + [t.syms, t.status, ir.Constant(I64, 1), t.ntid])

    def _buffers(self, trips):
        """(current, spare) buffers of each loop variable in iteration `trips`."""
        b = self.b
        odd = b.trunc(trips, ir.IntType(1))
        current, spare = [], []
        for i in range(self.n):
            a, other = self.arg("a", i), self.arg("b", i)
            if i in self.region.in_place:
                current.append(a)
                spare.append(a)
            else:
                current.append(b.select(odd, other, a))
                spare.append(b.select(odd, a, other))
        return current, spare

    def _stacks(self):
        """(stack index, its value, whether a kernel reads it: it has a buffer)."""
        node = self.region.node
        for s, v in enumerate(node.outputs[self.n + 1:]):
            yield s, v, bool(self.region.stores.get(v))

    def _stack_rows(self, trips):
        """Where iteration `trips` writes each stack's row."""
        b, program, rows = self.b, self.region.program, []
        for s, v, kept in self._stacks():
            if not kept:
                rows.append(self.arg("row", s))
                continue
            offset = b.mul(trips, program.emit_dim(b, row_bytes(v), self.t.syms))
            rows.append(b.gep(self.arg("output", self.n + 1 + s, 0), [offset],
                              source_etype=I8))
        return rows

    def _check_stacks(self, trips, done):
        """A row past a kept stack's end: the error, and the loop stops."""
        b, program = self.b, self.region.program
        past, details = ir.Constant(ir.IntType(1), 0), None
        for _, v, kept in self._stacks():
            if not kept:
                continue
            row = program.emit_dim(b, row_bytes(v), self.t.syms)
            total = program.emit_dim(b, value_bytes(v), self.t.syms)
            end = b.mul(b.add(trips, ir.Constant(I64, 1)), row)
            over = b.and_(b.icmp_signed("!=", row, ir.Constant(I64, 0)),
                          b.icmp_signed(">", end, total))
            if details is None:  # every stack has maximum_iterations rows
                safe = b.select(b.icmp_signed("!=", row, ir.Constant(I64, 0)), row,
                                ir.Constant(I64, 1))
                details = [trips, b.sdiv(total, safe)]
            past = b.or_(past, over)
        if details is None:
            return
        fail = b.append_basic_block("loop.past_stack")
        fine = b.append_basic_block("loop.rows")
        b.cbranch(past, fail, fine)
        b.position_at_end(fail)
        with self.t.threads() as tid:
            with b.if_then(b.icmp_signed("==", tid, ir.Constant(I64, 0))):
                self.t.report_status(ir.Constant(I32, self.loop.past_stack_site + 1), details,
                                     self.region.program.error_detail_base)
        self.t.barrier()
        b.branch(done)
        b.position_at_end(fine)

    def _predicate(self):
        return self.b.gep(self.t.status, [ir.Constant(I64, PREDICATE_OFFSET)], source_etype=I8)

    def _failed(self):
        status = self.b.load(self.t.status, typ=I32)
        return self.b.icmp_signed("!=", status, ir.Constant(I32, 0))

    def _write_outputs(self, trips, current):
        region, node, b = self.region, self.region.node, self.b
        copies = []
        for i, v in enumerate(node.outputs[:self.n]):
            nbytes = region.program.emit_dim(b, value_bytes(v), self.t.syms)
            for r in range(len(region.stores.get(v, ()))):
                copies.append((self.arg("output", i, r), current[i], nbytes))
        counts = [self.arg("output", self.n, r)
                  for r in range(len(region.stores.get(node.outputs[self.n], ())))]
        for s, v, kept in self._stacks():
            keys = region.stores.get(v, ())
            nbytes = region.program.emit_dim(b, value_bytes(v), self.t.syms)
            copies.extend((self.arg("output", self.n + 1 + s, r),
                           self.arg("output", self.n + 1 + s, 0), nbytes)
                          for r in range(1, len(keys)))
        self._copy(copies, lambda tid: self._store_trips(tid, trips, counts))

    def _store_trips(self, tid, trips, counts):
        b = self.b
        with b.if_then(b.icmp_signed("==", tid, ir.Constant(I64, 0))):
            for ptr in counts:
                b.store(b.trunc(trips, I32), ptr)

    def _copy(self, copies, also=None):
        """One threads() region: each (dst, src, bytes) copied a byte per thread at a
        time (the loop state is small, by the run-time rule), or zeroed where src is
        None; then also(tid)."""
        b = self.b
        with self.t.threads() as tid:
            for dst, src, nbytes in copies:
                with loop.grid_stride_loop(b, tid, self.t.ntid, nbytes, "copy") as k:
                    byte = ir.Constant(I8, 0) if src is None else \
                        b.load(b.gep(src, [k], source_etype=I8), typ=I8)
                    b.store(byte, b.gep(dst, [k], source_etype=I8))
            if also is not None:
                also(tid)

    def _entry_alloca(self, ty, name):
        b = self.b
        saved = b.block
        b.position_at_start(b.function.entry_basic_block)
        slot = b.alloca(ty, name=name)
        b.position_at_end(saved)
        return slot


class _BodyFrame:
    """The pointers of a body's storage keys in one iteration: its params (feeds), its
    fetches, its arena, and the shared variables and constants (kernel arguments)."""

    def __init__(self, emission, body, feeds, fetches, arena):
        self.emission, self.body = emission, body
        self.feeds, self.fetches, self.arena = feeds, fetches, arena

    def pointer(self, storage):
        """The pointer of a launch's storage key (a Program key)."""
        if storage[0] == "arena":
            em = self.emission
            offset = self.body.emit_dim(em.b, self.body.arena_offset(storage[1]), em.t.syms)
            return em.b.gep(self.arena, [offset], source_etype=I8)
        kind, what = storage_json(self.body, storage)
        return self._pointer(kind, what)

    def _pointer(self, kind, what):
        if kind == "feed":
            return self.feeds[what]
        if kind == "fetch":
            return self.fetches[what]
        return self.emission.arg(kind, what)

    def copies(self):
        """(dst, src, bytes) of the outputs no launch writes (control_flow._body_fetch)."""
        out, b = [], self.emission.b
        kinds_of = {"kernel": "fetch", "feed": "feed", "variable": "var", "constant": "const"}
        for j, value in enumerate(self.body.module.outputs):
            source = self.body.fetch_source(value)
            kind, index = kinds_of[source["source"]], int(source["index"])
            if kind == "fetch" and index == j:
                continue
            nbytes = self.body.emit_dim(b, value_bytes(value), self.emission.t.syms)
            out.append((self.fetches[j], self._pointer(kind, index), nbytes))
        return out


class _LaunchView:
    """The thread program as one launch's template sees it: its args are the pointers
    of this iteration's buffers, everything else is the device loop kernel's."""

    def __init__(self, t, args):
        self._t = t
        self.args = args

    def __getattr__(self, name):
        return getattr(self._t, name)
