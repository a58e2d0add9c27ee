"""The compiled backend of a Session: one run signature -> native code, run by runtime.

A CompiledExecutable holds every variant compiled for one (feeds, fetches, targets)
signature: one per feed-rank tuple and guard set (graphc/framework/symbolic.py). A run
tries the variants whose ranks match; a guard failure (e.g. a batch of 1 where the code
assumed no broadcasting of the batch) compiles a new variant, so a new batch size such
as the last partial batch of an epoch normally reuses the code.

Host-side ops (dataset iterators, summaries and other string ops, variable-status
queries) never become native code: they run with their reference kernels, before the
compiled step when they depend only on feeds (IteratorGetNext feeds the step) and after
it when they consume its results (a scalar summary of the loss).
"""
import warnings

from graphc import errors
from graphc.reference_executor import ReferenceExecutable, prune, value_inputs

HOST_OP_TYPES = frozenset("""IteratorGetNext MakeIterator ScalarSummary HistogramSummary
    ImageSummary MergeSummary UninitializedNames IsVariableInitialized VariableValueOrDefault
    LogUniformCandidateSampler UniformCandidateSampler Where""".split())
# Why each is host-side: iterators and summaries are Python objects and strings; the
# variable-status queries read the Session's store itself; the candidate samplers draw
# sets without replacement (sequential, data-dependent); Where (the indices form) has a
# data-dependent output size, which compiled code (fetch arrays allocated from the dims
# before the call) cannot produce.


def is_host_op(op):
    return op.type in HOST_OP_TYPES or any(t.dtype.name == "string" for t in op.outputs)


class CompiledExecutable:
    """Native code for one run signature, with host stages around it where needed."""

    def __init__(self, feeds, fetches, targets, session):
        self.feeds, self.fetches, self.targets = list(feeds), list(fetches), list(targets)
        self.session = session
        fed = set(self.feeds)
        ops = [op for op in prune(self.fetches, self.targets, self.feeds)
               if not op.outputs or not all(t in fed for t in op.outputs)]
        self._plan_stages(ops, fed)
        self._variants = {}
        self._unlowered = None

    # ------------------------------------------------------------------ staging
    def _plan_stages(self, ops, fed):
        host = {op for op in ops if is_host_op(op)}
        pre = set()
        for op in ops:  # creation order is topological
            if op in host and all(t in fed or t.op.type == "VariableV2" or t.op in pre
                                  for t in value_inputs(op)):
                pre.add(op)
        post = host - pre
        native = [op for op in ops if op not in host]
        native_set = set(native)
        pre_out = [t for op in native for t in value_inputs(op) if t.op in pre]
        post_in = [t for op in post for t in value_inputs(op) if t.op in native_set]
        self.pre = None
        if pre:
            pre_fetch = list(dict.fromkeys(pre_out + [t for t in self.fetches if t.op in pre]))
            pre_targets = [op for op in pre if op in self.targets or not op.outputs]
            self.pre = ReferenceExecutable(self.feeds, pre_fetch, pre_targets)
        self.pre_fetches = self.pre.fetches if self.pre else []
        self.native_feeds = self.feeds + list(dict.fromkeys(pre_out))
        self.native_fetches = list(dict.fromkeys(
            [t for t in self.fetches if t.op in native_set] + post_in))
        self.native_targets = [op for op in self.targets if op in native_set]
        self.has_native = bool(native)
        from graphc.ops.random_ops import RANDOM_OP_TYPES
        self.random_ops = [op for op in native if op.type in RANDOM_OP_TYPES]
        self.post = None
        if post:
            known = self.native_feeds + self.native_fetches + self.pre_fetches
            post_fetch = [t for t in self.fetches if t.op in post]
            post_targets = [op for op in self.targets if op in post]
            self.post = ReferenceExecutable(list(dict.fromkeys(known)), post_fetch, post_targets)

    # --------------------------------------------------------------------- run
    def run(self, feed_arrays, state):
        values = dict(zip(self.feeds, feed_arrays))
        if self.pre is not None:
            values.update(zip(self.pre.fetches, self.pre.run(feed_arrays, state)))
        if self.has_native:
            arrays = [values[t] for t in self.native_feeds]
            self._create_random_states(state)
            values.update(zip(self.native_fetches, self._run_native(arrays, state)))
        if self.post is not None:
            arrays = [values[t] for t in self.post.feeds]
            values.update(zip(self.post.fetches, self.post.run(arrays, state)))
        return [values[t] for t in self.fetches]

    def _create_random_states(self, state):
        """Random ops keep their key and run counter in the state (created on first use,
        by whichever backend runs the op first; compiled code reads and counts them)."""
        from graphc.ops.random_ops import random_state
        for op in self.random_ops:
            random_state(state, op.name, op.attrs.get("seed"), op.attrs.get("seed2"))

    def _run_native(self, arrays, state):
        from runtime.errors import GuardFailure
        if self._unlowered is not None:
            return self._unlowered.run(arrays, state)
        ranks = tuple(a.ndim for a in arrays)
        for exe in self._variants.get(ranks, ()):
            try:
                return self._call(exe, arrays, state)
            except GuardFailure:
                continue
        from graphc.compiler.codegen import LoweringError
        try:
            exe = self._compile(arrays, state)
        except LoweringError as e:
            # Not every op has a native lowering yet: run this signature on the reference
            # executor and say so, rather than fail (the compiler issue tracks the rest).
            warnings.warn(f"graphc could not compile this run ({e}); it runs on the NumPy "
                          "reference executor instead.", RuntimeWarning, stacklevel=5)
            self._unlowered = ReferenceExecutable(self.native_feeds, self.native_fetches,
                                                  self.native_targets)
            return self._unlowered.run(arrays, state)
        self._variants.setdefault(ranks, []).append(exe)
        return self._call(exe, arrays, state)

    def _compile(self, arrays, state):
        from graphc.compiler.codegen import compile_executable
        self.session.compile_count += 1
        return compile_executable(self.native_feeds, self.native_fetches, self.native_targets,
                                  [a.shape for a in arrays], arrays,
                                  {name: a.shape for name, a in state.variables.items()})

    @staticmethod
    def _call(exe, arrays, state):
        from runtime import errors as rt
        try:
            return exe.run(arrays, state.variables)
        except rt.UninitializedVariable as e:
            raise errors.FailedPreconditionError(None, None, str(e)) from None
        except rt.KernelFailure as e:
            cls = getattr(errors, e.class_name, errors.InvalidArgumentError)
            raise cls(None, None, str(e)) from None

