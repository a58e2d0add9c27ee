"""The compiled backend of a Session: one run signature -> native code, run by runtime.

A run signature's ops are split into stages that alternate between native code and the
host. Host-side ops (dataset iterators, summaries and other string ops, variable-status
queries, candidate samplers, Where's indices form) never become native code: they run
with their reference kernels. Most runs are one native stage; a training step fed by an
iterator is host (IteratorGetNext) then native; a step with a loss summary is native
then host. Each stage runs only its own ops (earlier stages' ops are excluded from its
pruning), and the values crossing a boundary are the next stage's feeds.

A NativeStage holds every variant compiled for its signature: one per feed-rank tuple
and guard set (graphc/framework/symbolic.py). A run tries the last variant used, then the
others; a guard failure (e.g. a batch of 1 where the code assumed no broadcasting of the
batch) compiles a new variant, so a new batch size such as the last partial batch of an
epoch normally reuses the code.
"""
import warnings

from graphc import errors
from graphc.reference_executor import ReferenceExecutable, prune, value_inputs
from runtime import errors as rt

HOST_OP_TYPES = frozenset("""IteratorGetNext MakeIterator ScalarSummary HistogramSummary
    ImageSummary MergeSummary UninitializedNames IsVariableInitialized VariableValueOrDefault
    LogUniformCandidateSampler UniformCandidateSampler Where""".split())
# Why each is host-side: iterators and summaries are Python objects and strings; the
# variable-status queries read the Session's store itself; the candidate samplers draw
# sets without replacement (sequential, data-dependent); Where (the indices form) has a
# data-dependent output size, which compiled code (fetch arrays allocated from the dims
# before the call) cannot produce.

_STAGE_FREE = frozenset({"VariableV2", "Const"})  # available to every stage


def is_host_op(op):
    return op.type in HOST_OP_TYPES or any(t.dtype.name == "string" for t in op.outputs)


class CompiledExecutable:
    """Native code for one run signature, with host stages where the signature needs them."""

    def __init__(self, feeds, fetches, targets, session):
        self.feeds, self.fetches, self.targets = list(feeds), list(fetches), list(targets)
        fed = set(self.feeds)
        ops = [op for op in prune(self.fetches, self.targets, self.feeds)
               if not op.outputs or not all(t in fed for t in op.outputs)]
        self.stages = _plan_stages(ops, fed, self.feeds, self.fetches, self.targets, session)
        single = self.stages[0] if len(self.stages) == 1 else None
        self._single = single if single is not None and single.fetches == self.fetches else None

    def run(self, feed_arrays, state):
        if self._single is not None:
            return self._single.run(feed_arrays, state)
        values = dict(zip(self.feeds, feed_arrays))
        for stage in self.stages:
            out = stage.run([values[t] for t in stage.feeds], state)
            values.update(zip(stage.fetches, out))
        return [values[t] for t in self.fetches]


def _plan_stages(ops, fed, feeds, fetches, targets, session):
    """Stages in run order: even numbers native, odd numbers host; an op goes to the first
    stage of its kind not before the stages of its inputs and control inputs."""
    stage_of = {}
    for op in ops:  # creation order is topological
        if op.type in _STAGE_FREE:
            continue
        deps = [t.op for t in value_inputs(op) if t not in fed] + op.control_inputs
        s = max((stage_of[d] for d in deps if d in stage_of), default=0)
        if (s % 2 == 1) != is_host_op(op):
            s += 1
        stage_of[op] = s
    numbers = sorted(set(stage_of.values()))
    if len(numbers) <= 1:
        kind = HostStage if numbers == [1] else NativeStage
        return [kind(feeds, fetches, targets, frozenset(), ops, session)]
    stages, done = [], set()
    for i, number in enumerate(numbers):
        mine = [op for op in ops if stage_of.get(op) == number]
        mine_set = set(mine)
        later = [op for op in ops if stage_of.get(op, -1) > number]
        s_feeds = feeds + list(dict.fromkeys(
            t for op in mine for t in value_inputs(op) if t.op in done and t not in fed))
        s_fetches = [t for t in fetches if t.op in mine_set]
        s_fetches += [t for op in later for t in value_inputs(op) if t.op in mine_set]
        if i == len(numbers) - 1:  # variable and constant fetches: read after everything
            s_fetches += [t for t in fetches if t.op.type in _STAGE_FREE]
        s_targets = [op for op in mine if op in targets or
                     any(op in later_op.control_inputs for later_op in later)]
        kind = HostStage if number % 2 else NativeStage
        stages.append(kind(s_feeds, list(dict.fromkeys(s_fetches)), s_targets,
                           frozenset(done), mine, session))
        done |= mine_set
    return stages


class HostStage(ReferenceExecutable):
    """Host ops, run with their reference kernels."""

    def __init__(self, feeds, fetches, targets, exclude, ops, session):
        super().__init__(feeds, fetches, targets, exclude)


class NativeStage:
    """The compiled variants of one native stage."""

    def __init__(self, feeds, fetches, targets, exclude, ops, session):
        from graphc.ops.random_ops import RANDOM_OP_TYPES
        self.feeds, self.fetches, self.targets = list(feeds), list(fetches), list(targets)
        self.exclude = exclude
        self.session = session
        self.random_ops = [op for op in ops if op.type in RANDOM_OP_TYPES]
        self._variants = {}
        self._last = None
        self._unlowered = None

    def run(self, arrays, state):
        if self.random_ops:
            self._create_random_states(state)
        exe = self._last
        if exe is not None:
            try:
                return exe.run(arrays, state.variables)
            except rt.GuardFailure:
                pass
            except rt.RuntimeFailure as e:
                raise _graphc_error(e) from None
        return self._run_slow(arrays, state)

    def _create_random_states(self, state):
        """Random ops keep their key and run counter in the state (created on first use,
        by whichever backend runs the op first; compiled code reads and counts them)."""
        from graphc.ops.random_ops import random_state
        for op in self.random_ops:
            random_state(state, op.name, op.attrs.get("seed"), op.attrs.get("seed2"))

    def _run_slow(self, arrays, state):
        if self._unlowered is not None:
            return self._unlowered.run(arrays, state)
        ranks = tuple(a.ndim for a in arrays)
        for exe in self._variants.get(ranks, ()):
            try:
                out = exe.run(arrays, state.variables)
            except rt.GuardFailure:
                continue
            except rt.RuntimeFailure as e:
                raise _graphc_error(e) from None
            self._last = exe
            return out
        from graphc.compiler.codegen import LoweringError
        try:
            exe = self._compile(arrays, state)
        except LoweringError as e:
            # An op the codegen cannot lower in this context: run this stage on the
            # reference executor and say so, rather than fail.
            warnings.warn(f"graphc could not compile this run ({e}); it runs on the NumPy "
                          "reference executor instead.", RuntimeWarning, stacklevel=6)
            self._unlowered = ReferenceExecutable(self.feeds, self.fetches, self.targets,
                                                  self.exclude)
            return self._unlowered.run(arrays, state)
        self._variants.setdefault(ranks, []).append(exe)
        self._last = exe
        try:
            return exe.run(arrays, state.variables)
        except rt.RuntimeFailure as e:
            raise _graphc_error(e) from None

    def _compile(self, arrays, state):
        from graphc.compiler.codegen import compile_executable
        self.session.compile_count += 1
        exe = compile_executable(self.feeds, self.fetches, self.targets,
                                 [a.shape for a in arrays], arrays,
                                 {name: a.shape for name, a in state.variables.items()},
                                 exclude=self.exclude)
        exe.set_num_threads(self.session.num_threads)  # ConfigProto's intra-op threads
        return exe


def _graphc_error(e):
    """The gc.errors exception for a runtime failure of compiled code."""
    if isinstance(e, rt.UninitializedVariable):
        return errors.FailedPreconditionError(None, None, str(e))
    if isinstance(e, rt.KernelFailure):
        cls = getattr(errors, e.class_name, errors.InvalidArgumentError)
        return cls(None, None, str(e))
    return errors.InvalidArgumentError(None, None, str(e))
