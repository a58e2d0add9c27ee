"""The compiled backend of a Session: one run signature -> native code, run by runtime.

A run signature's ops are split into stages that alternate between native code and the
host. Host-side ops (dataset iterators, summaries and other string ops, variable-status
queries, candidate samplers, Where's indices form) never become native code: they run
with their reference kernels. A While, If or TensorArray op is native on the CPU when
graphc/compiler/regions.py says so (loops and branches in the generated code; on the GPU,
launches of the bodies driven from the host: backends/gpu/control_flow.py), and so is
a host-only op whose OpDef's `native_on_cpu` says so (graphc.distribute's collectives in a
job of several ranks: a training step is then one native stage, with the host's work
around each run of it, the ranks' agreement, done by `_host_work`). Most runs
are one native stage; a training step fed by an iterator is host (IteratorGetNext) then
native; a step with a loss summary is native then host. Each stage runs only its own
ops (earlier stages' ops are excluded from its pruning), and the values crossing a
boundary are the next stage's feeds.

A NativeStage holds every variant compiled for its signature: one per feed-rank tuple
and guard set (graphc/framework/symbolic.py). A run tries the last variant used, then the
others (runtime/variants.py, which loaded files use too); when none fits (e.g. a batch of
1 where the code assumed no broadcasting of the batch) it compiles a new variant, so a new
batch size such as the last partial batch of an epoch normally reuses the code.

Every native stage compiles through graphc/compiler/driver.py, for the host CPU or, given
a runtime.gpu device, for the GPU (the same lowering, passes and schedule, then
backends/gpu's spec instead of backends/cpu's), and the GPU stages run with runtime.gpu's
GpuExecutable; host stages still run on the host, their inputs and outputs crossing as
the stages' fetches and feeds (host arrays), so no device mismatch is ever visible. A
stage whose kernels the GPU codegen does not lower yet (GpuCodegenNotImplemented) runs
the CPU's compiled code instead: explicit (one GpuFallbackWarning per kind of kernel)
and counted in GPU_FALLBACKS; GRAPHC_GPU_STRICT=1 makes it an error instead.
"""
import collections
import contextlib
import os
import re

from graphc import errors
from graphc import profiling
from graphc.compiler.driver import GPU_ARCH, compile_signature, gpu_target
from graphc.compiler.lower import RegionOnHost, ops_to_lower, unfed
from graphc.compiler.regions import (REGION_BODIES, TENSOR_ARRAY_OPS, compiles_natively,
                                     random_ops_within, tensor_array_compiles)
from graphc.framework.graph import tensor_dtype_names, warn_at_user
from graphc.framework.op_def import HOST_OP_TYPES, OP_DEFS
from graphc.framework.random_state import random_state, random_state_name
from graphc.framework.subgraph import prune, value_inputs
from graphc.reference_executor import ReferenceExecutable
from runtime import errors as rt
from runtime.executable import Executable
from runtime.variants import Variants

_STAGE_FREE = frozenset({"VariableV2", "Const"})  # available to every stage


class GpuFallbackWarning(RuntimeWarning):
    """A run signature on the GPU target ran CPU compiled code instead (a kernel kind
    the GPU codegen does not lower yet)."""


# {kind of kernel: signatures that fell back to CPU code}, for this process
GPU_FALLBACKS = collections.Counter()


def is_host_op(op, native_regions=True, host_regions=frozenset(), on_cpu=True):
    """Native code never holds a string: an op reading or making one runs on the host.
    native_regions: a While or If whose bodies compile (graphc/compiler/regions.py)
    runs in native code; else every one runs on the host, as do those named in
    host_regions (their lowering said RegionOnHost). The CPU and GPU targets compile
    the same ones. A host op that the CPU's code calls out to (its OpDef's
    `native_on_cpu`: MPI collectives) is native on the CPU target only (on_cpu)."""
    if op.type in REGION_BODIES:
        return not (native_regions and op.name not in host_regions and
                    compiles_natively(op, is_host_op))
    if op.type in TENSOR_ARRAY_OPS:
        return not (native_regions and tensor_array_compiles(op))
    if op.type in HOST_OP_TYPES:
        native = OP_DEFS[op.type].native_on_cpu
        return not (on_cpu and native_regions and native is not None and native.compiles(op))
    return reshapes_variable(op) or _holds_string(op.outputs) or _holds_string(op.inputs)


def _holds_string(tensors):
    for t in tensors:  # a loop, not any(): asked of every op of a signature
        if t.dtype.name == "string":
            return True
    return False


def reshapes_variable(op):
    """An Assign that may give its variable another shape (validate_shape=False, or a
    variable of unknown shape, checked against the shape it holds). Native code binds
    every variable buffer before it runs, so the assign runs on the host between native
    stages: reads after it compile against the new shape."""
    return op.type == "Assign" and (not op.attrs.get("validate_shape", True)
                                    or not op.inputs[0].shape.is_fully_defined())


class CompiledExecutable:
    """Native code for one run signature, with host stages where the signature needs them."""

    def __init__(self, feeds, fetches, targets, session, device=None, pruned=None):
        """pruned: prune(fetches, targets, feeds) when the caller has it."""
        self.feeds, self.fetches, self.targets = list(feeds), list(fetches), list(targets)
        self.device = device  # a runtime.gpu device, or None for the CPU
        fed = set(self.feeds)
        if pruned is None:
            pruned = prune(self.fetches, self.targets, self.feeds)
        ops = unfed(pruned, self.feeds)
        self.stages = _plan_stages(ops, fed, self.feeds, self.fetches, self.targets, session,
                                   device)
        single = self.stages[0] if len(self.stages) == 1 else None
        self._single = single if single is not None and single.fetches == self.fetches \
            and single.feeds == self.feeds else None

    def run(self, feed_arrays, state):
        if self._single is not None:
            return self._single.run(feed_arrays, state)
        return _run_stages(self.stages, self.feeds, self.fetches, feed_arrays, state)


def _run_stages(stages, feeds, fetches, feed_arrays, state):
    values = dict(zip(feeds, feed_arrays))
    for stage in stages:
        out = stage.run([values[t] for t in stage.feeds], state)
        values.update(zip(stage.fetches, out))
    return [values[t] for t in fetches]


class _Replanned:
    """A native stage planned again with While or If ops on the host (RegionOnHost)."""

    def __init__(self, stage, host_regions):
        self.stage = stage
        self.stages = _plan_stages(stage.ops, set(stage.feeds), stage.feeds, stage.fetches,
                                   stage.targets, stage.session, stage.device, host_regions,
                                   stage.exclude)

    def run(self, arrays, state):
        return _run_stages(self.stages, self.stage.feeds, self.stage.fetches, arrays, state)


def _plan_stages(ops, fed, feeds, fetches, targets, session, device,
                 host_regions=frozenset(), exclude=frozenset()):
    """Stages in run order: even numbers native, odd numbers host; an op goes to the first
    stage of its kind not before the stages of its inputs and control inputs.
    host_regions: While and If ops to run on the host; exclude: ops that earlier stages
    of the run have run."""
    on_cpu = device is None
    if not any(t.dtype.name == "string" for t in fetches) and \
            _all_native(ops, host_regions, on_cpu):
        # every op native (most signatures): the numbering below would put each in
        # stage 0, a walk of every op's inputs that a warm first run paid for nothing
        return [_whole_native_stage(ops, feeds, fetches, targets, session, device,
                                    host_regions, exclude)]
    stage_of = {}
    ready_at = {}  # a stage-free op (constant, variable) -> the stage its control inputs end
    for op in ops:  # creation order is topological
        deps = [t.op for t in value_inputs(op) if t not in fed] + op.control_inputs
        s = max((stage_of[d] if d in stage_of else ready_at[d] for d in deps
                 if d in stage_of or d in ready_at), default=0)
        if op.type in _STAGE_FREE:
            ready_at[op] = s
            continue
        if (s % 2 == 1) != is_host_op(op, True, host_regions, on_cpu=on_cpu):
            s += 1
        stage_of[op] = s
    # every control input must run in its stage, whoever waits for it (an op of a later
    # stage, or a constant fetched at the end, which no stage computes)
    controls = {d for op in ops for d in op.control_inputs}
    numbers = sorted(set(stage_of.values()))
    if any(t.dtype.name == "string" and t.op not in stage_of for t in fetches):
        # a fed or constant string fetched as it is: native code never holds a string, so
        # the last stage, which reads such fetches, is a host stage
        last = numbers[-1] if numbers else 0
        if last % 2 == 0:
            numbers.append(last + 1)
    if len(numbers) <= 1:
        if numbers == [1]:
            return [HostStage(_stage_feeds(feeds, HostStage), fetches, targets, exclude,
                              ops, session, device)]
        return [_whole_native_stage(ops, feeds, fetches, targets, session, device,
                                    host_regions, exclude)]
    stages, done = [], set()
    for i, number in enumerate(numbers):
        mine = [op for op in ops if stage_of.get(op) == number]
        mine_set = set(mine)
        later = [op for op in ops if stage_of.get(op, -1) > number]
        kind = HostStage if number % 2 else NativeStage
        s_feeds = _stage_feeds(feeds, kind) + list(dict.fromkeys(
            t for op in mine for t in value_inputs(op) if t.op in done and t not in fed))
        s_fetches = [t for t in fetches if t.op in mine_set]
        s_fetches += [t for op in later for t in value_inputs(op) if t.op in mine_set]
        if i == len(numbers) - 1:  # variable and constant fetches: read after everything
            s_fetches += [t for t in fetches if t.op.type in _STAGE_FREE]
        s_targets = [op for op in mine if op in targets or op in controls]
        stages.append(kind(s_feeds, list(dict.fromkeys(s_fetches)), s_targets,
                           frozenset(done) | exclude, mine, session, device,
                           **({"host_regions": host_regions} if kind is NativeStage else {})))
        done |= mine_set
    return stages


def _all_native(ops, host_regions, on_cpu):
    """Whether no op of `ops` but the stage-free ones is a host op (is_host_op). Asked of
    every op of a signature in a warm first run: only the types is_host_op decides by
    more than their tensors' dtypes (regions, TensorArrays, host-only ops, Assign) go
    through it; the others' dtypes are read at once (a fifth of the time)."""
    by_type = set(REGION_BODIES).union(TENSOR_ARRAY_OPS, HOST_OP_TYPES, ("Assign",))
    skipped = by_type.union(_STAGE_FREE)
    if "string" in tensor_dtype_names([op for op in ops if op.type not in skipped]):
        return False
    return not any(is_host_op(op, True, host_regions, on_cpu=on_cpu) for op in ops
                   if op.type in by_type and op.type not in _STAGE_FREE)


def _whole_native_stage(ops, feeds, fetches, targets, session, device, host_regions,
                        exclude):
    """The whole signature in one native stage: its ops are the ones lowering needs."""
    return NativeStage(_stage_feeds(feeds, NativeStage), fetches, targets, exclude, ops,
                       session, device, lowering_ops=None if exclude else ops,
                       host_regions=host_regions)


def _stage_feeds(feeds, kind):
    """The session's feeds a stage takes: native code never reads a string (an op that
    does is a host op), so a fed string (serialized protos, file names) stays on the host."""
    if kind is HostStage:
        return list(feeds)
    return [t for t in feeds if t.dtype.name != "string"]


class HostStage(ReferenceExecutable):
    """Host ops, run with their reference kernels."""

    def __init__(self, feeds, fetches, targets, exclude, ops, session, device=None):
        super().__init__(feeds, fetches, targets, exclude)


class NativeStage:
    """The compiled variants of one native stage (runtime.variants.Variants chooses)."""

    def __init__(self, feeds, fetches, targets, exclude, ops, session, device=None,
                 lowering_ops=None, host_regions=frozenset()):
        """ops: the stage's own ops; lowering_ops: what lowering its signature needs
        (lower.ops_to_lower: with the constants and variables it reads), when known;
        host_regions: the While and If ops it was planned with on the host."""
        self.feeds, self.fetches, self.targets = list(feeds), list(fetches), list(targets)
        self.exclude = exclude
        self.ops = list(ops)
        self.host_regions = host_regions
        self._lowering_ops = lowering_ops
        self.session = session
        self.device = device
        self.random_ops = random_ops_within(ops)
        self.op_count = len(ops)
        self.variants = Variants()
        self._unlowered = None
        self._host_work = _host_work(self.ops) if device is None else None

    def run(self, arrays, state):
        if self.random_ops:
            self._create_random_states(state)
        if self._unlowered is not None:
            return self._unlowered.run(arrays, state)
        if self._host_work is None:
            return self._run(arrays, state)
        # once per run, around the compile too: a run's host work happens once on every
        # rank however many variants it tries (graphc.distribute's agreement)
        with self._host_work:
            return self._run(arrays, state)

    def _run(self, arrays, state):
        try:
            return self.variants.run(arrays, state.variables)
        except rt.NoVariantFits:
            pass
        except rt.RuntimeFailure as e:
            raise _graphc_error(e, self.session.graph) from None
        return self._compile_and_run(arrays, state)

    def _create_random_states(self, state):
        """Random ops keep their key and run counter in the state (created on first use,
        by whichever backend runs the op first; compiled code reads and counts them)."""
        for op in self.random_ops:
            # `in` first: reading a state a GPU run counted would copy it to the host
            if random_state_name(op.name) not in state.variables:
                random_state(state, op.name, op.attrs.get("seed"), op.attrs.get("seed2"))

    def _compile_and_run(self, arrays, state):
        """No variant accepts the feeds: compiles one more (for these feeds) and runs."""
        from graphc.compiler.backends.cpu import LoweringError
        try:
            exe = self._compile(arrays, state)
        except RegionOnHost as e:
            # a loop or branch that cannot be native code for these sizes: on the host,
            # between native stages of the rest (as a body holding a host op is)
            self._unlowered = _Replanned(self, self.host_regions | {e.op_name})
            return self._unlowered.run(arrays, state)
        except LoweringError as e:
            # An op the codegen cannot lower in this context: run this stage on the
            # reference executor and say so, rather than fail.
            warn_at_user(f"graphc could not compile this run ({e}); it runs on the NumPy "
                         "reference executor instead.", RuntimeWarning)
            self._unlowered = ReferenceExecutable(self.feeds, self.fetches, self.targets,
                                                  self.exclude)
            return self._unlowered.run(arrays, state)
        self.variants.add(exe)
        try:
            return self.variants.run(arrays, state.variables)
        except rt.RuntimeFailure as e:
            raise _graphc_error(e, self.session.graph) from None

    def _compile(self, arrays, state):
        self.session.compile_count += 1
        args = (self.feeds, self.fetches, self.targets, [a.shape for a in arrays], arrays,
                _variable_shapes(state.variables))
        with profiling.CompileWatch(self._description(), self.op_count) as watch:
            if self.device is not None:
                from graphc.compiler.backends.gpu import GpuCodegenNotImplemented
                try:
                    return compile_gpu_executable(*args, exclude=self.exclude,
                                                  device=self.device, ops=self._lowered_ops(),
                                                  watch=watch)
                except GpuCodegenNotImplemented as e:
                    _note_gpu_fallback(e)
            result = compile_signature(*args, exclude=self.exclude, ops=self._lowered_ops())
            _watched(watch, result)
            with watch.stage("jit"):
                exe = Executable(result.spec)
        exe.set_num_threads(self.session.num_threads)  # ConfigProto's intra-op threads
        if profiling.enabled():
            profiling.PROFILE.keep(exe)
        return exe

    def _description(self):
        names = [t.name for t in self.fetches] + [op.name for op in self.targets]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3
                                        else "")
        return f"the run of {shown}"

    def _lowered_ops(self):
        """The ops lowering this stage's signature needs: pruned once, for every variant
        compiled (and for the CPU fallback of a GPU compile)."""
        if self._lowering_ops is None:
            self._lowering_ops = ops_to_lower(self.fetches, self.targets, self.feeds,
                                              self.exclude)
        return self._lowering_ops


def _host_work(ops):
    """The context each run of native code holding `ops` enters: the host's work around
    the host-only ops that the CPU's code runs (their OpDef's native_on_cpu), or None."""
    by_fact = {}
    # the types first: asked per op, HOST_OP_TYPES (a live view) was most of this walk
    # of a signature in a warm first run
    host = {op.type for op in ops}.intersection(HOST_OP_TYPES)
    for op in ops if host else ():
        native = OP_DEFS[op.type].native_on_cpu if op.type in host else None
        if native is not None:
            by_fact.setdefault(native, []).append(op)
    works = [native.host_work(mine) for native, mine in by_fact.items()]
    return works[0] if len(works) == 1 else _Nested(works) if works else None


class _Nested:
    """Several host works around one run, entered in order."""

    def __init__(self, works):
        self._works = works
        self._stacks = []

    def __enter__(self):
        with contextlib.ExitStack() as stack:
            for work in self._works:
                stack.enter_context(work)
            self._stacks.append(stack.pop_all())
        return self

    def __exit__(self, *exc):
        return self._stacks.pop().__exit__(*exc)


def _variable_shapes(store):
    """{name: shape} of the stored variables, without copying device values out."""
    shapes = getattr(store, "shapes", None)
    return shapes() if shapes is not None else {name: a.shape for name, a in store.items()}


# ------------------------------------------------------------------------- GPU
def _watched(watch, result):
    """Hands a compile's stage times and kernel count to the watch timing it."""
    if watch is None:
        return
    watch.add_times(result.times)
    if result.pass_stats is None:
        profiling.PROFILE.cache_hit()
    else:
        watch.kernels = result.pass_stats.get("fusion", {}).get("kernels")


def compile_gpu_executable(feeds, fetches, targets, feed_shapes, feed_values=None,
                           variable_shapes=None, exclude=frozenset(), device=None,
                           arch=GPU_ARCH, ops=None, watch=None):
    """The runtime.gpu.GpuExecutable of one run signature on `device` (the GPU twin of
    NativeStage's CPU compile); GpuCodegenNotImplemented when a kernel has no GPU lowering
    yet."""
    from runtime.gpu import GpuExecutable
    with_ptx = getattr(device, "kind", None) != "emulated"  # the emulation runs no PTX
    result = compile_signature(feeds, fetches, targets, feed_shapes, feed_values,
                               variable_shapes, exclude, target=gpu_target(arch, with_ptx),
                               ops=ops)
    _watched(watch, result)
    with watch.stage("jit") if watch is not None else contextlib.nullcontext():
        return GpuExecutable(result.spec, device)


_warned_fallbacks = set()


def _fallback_kind(error):
    """The kind of kernel a GpuCodegenNotImplemented names (its message up to details)."""
    text = re.sub(r"\s*\(.*", "", str(error).splitlines()[0] if str(error) else "")
    return text[:120] or type(error).__name__


def _note_gpu_fallback(error):
    """Counts (and warns once per kind of kernel) a signature that runs CPU code instead
    of GPU code; GRAPHC_GPU_STRICT=1 makes it an UnimplementedError instead."""
    kind = _fallback_kind(error)
    if os.environ.get("GRAPHC_GPU_STRICT", "0") not in ("", "0"):
        raise errors.UnimplementedError(None, None, f"GPU codegen: {error} "
                                                    "(GRAPHC_GPU_STRICT is set)") from None
    GPU_FALLBACKS[kind] += 1
    if kind not in _warned_fallbacks:
        _warned_fallbacks.add(kind)
        warn_at_user(f"GPU codegen: {kind}; this run signature runs CPU compiled code "
                     f"instead ({error}).", GpuFallbackWarning)


def _graphc_error(e, graph):
    """The gc.errors exception for a runtime failure of compiled code."""
    if isinstance(e, rt.UninitializedVariable):
        try:
            var_op = graph.get_operation_by_name(e.name)
        except (KeyError, ValueError):  # a state of graphc's own (random ops' counters)
            return errors.FailedPreconditionError(None, None, str(e))
        from graphc.variables import uninitialized_error
        return uninitialized_error(var_op)
    if isinstance(e, rt.KernelFailure):
        cls = getattr(errors, e.class_name, errors.InvalidArgumentError)
        return cls(None, None, str(e))
    return errors.InvalidArgumentError(None, None, str(e))
