"""The NumPy reference executor: runs a pruned subgraph with the ops' reference kernels.

It is the oracle for every compiled backend and the backend `"reference"` of a Session.
An executable is built once per run signature (feeds, fetches, targets) and then run
many times; run() takes the fed arrays and the session state and returns the fetches.
"""
import numpy as np

from graphc.framework.op_def import ref_input_indices
from graphc.framework.op_kernel import run_kernel
from graphc.framework.subgraph import (has_reshapable_variable, prune, reshaped_by_variables,
                                       statically_shaped_inputs, unfed_placeholder_error,
                                       value_inputs)


def _static_stand_in(t):
    """A zero-stride array of t's static shape: what a shape-reading kernel needs of it."""
    return np.broadcast_to(np.zeros((), t.dtype.np), tuple(t.shape.as_list()))


class ReferenceExecutable:
    """A pruned, ordered op list for one run signature, executed with NumPy."""

    def __init__(self, feeds, fetches, targets, exclude=frozenset()):
        self.feeds = list(feeds)
        self.fetches = list(fetches)
        self.ops = prune(self.fetches, targets, self.feeds, exclude, static_shapes=True)
        fed = self._fed = set(self.feeds)
        # VariableV2 ops are not run in order: their consumers read the variable when they run
        self.ops = [op for op in self.ops if op.type != "VariableV2" and
                    (not op.outputs or not all(t in fed for t in op.outputs))]
        self.unfed_error = unfed_placeholder_error(self.ops)
        reshapable = bool(self.ops) and has_reshapable_variable(self.ops[0].graph)
        self._static = [statically_shaped_inputs(op, reshapable) for op in self.ops]
        self._last_use = self._last_uses()
        self._loose = reshaped_by_variables(self.ops)

    def _last_uses(self):
        last = {}
        for i, op in enumerate(self.ops):
            for t in value_inputs(op):
                last[t] = i
        for t in self.fetches:
            last[t] = len(self.ops)
        drop = [[] for _ in self.ops]
        for t, i in last.items():
            if i < len(self.ops):
                drop[i].append(t)
        return drop

    def run(self, feed_arrays, state):
        if self.unfed_error is not None:
            raise self.unfed_error
        env = dict(zip(self.feeds, feed_arrays))

        def value(t):  # a variable is read when its consumer runs (TF1's ref semantics)
            if t.op.type == "VariableV2" and t not in env:
                return run_kernel(t.op, [], state)[0]
            return env[t]

        for i, op in enumerate(self.ops):
            refs = ref_input_indices(op)
            static = self._static[i]
            args = [None if j in refs else _static_stand_in(t) if t in static and t not in env
                    else value(t) for j, t in enumerate(op.inputs)]
            outs = run_kernel(op, args, state, op not in self._loose)
            for t, v in zip(op.outputs, outs):
                if t not in env:  # a fed output keeps its fed value
                    env[t] = v
            for t in self._last_use[i]:
                if t not in self._fed:
                    env.pop(t, None)
        return [value(t) for t in self.fetches]
