"""The choice among the guarded compiled variants of one signature, for the Session's native
stages and for loaded files alike.

A variant is an executable (runtime.Executable, runtime.gpu.GpuExecutable, or anything with
`feeds` and `run(feed_arrays, variables)`) compiled under assumptions about its feeds: their
ranks, guards on their dims (a batch of 1 broadcasts differently, so code may assume a
batch is not 1), values it was specialized on. Its `run` raises GuardFailure before running
anything when the feeds break one. A run tries the variant that ran last (the common case:
the same shapes as the run before), then the others of the feeds' ranks in the order they
were added; when none accepts the feeds it raises NoVariantFits, which lists why each
refused.
"""
import numpy as np

from .errors import GuardFailure, NoVariantFits

__all__ = ["Variants"]


class Variants:
    def __init__(self):
        self._by_ranks = {}  # (rank of each feed) -> [variant], in the order added
        self.last = None     # the variant that ran last, tried first

    def __len__(self):
        return sum(len(v) for v in self._by_ranks.values())

    def add(self, variant):
        """Adds a variant, tried after those added before it."""
        ranks = tuple(len(f["dims"]) for f in variant.feeds)
        self._by_ranks.setdefault(ranks, []).append(variant)

    def run(self, feed_arrays, variables):
        """The fetches of the first variant that accepts the feeds (see the module
        docstring); errors other than guard failures come from that variant's run."""
        failures = []
        last = self.last
        if last is not None:
            try:
                return last.run(feed_arrays, variables)
            except GuardFailure as e:
                failures.append(str(e))
        ranks = tuple(np.ndim(a) for a in feed_arrays)
        for variant in self._by_ranks.get(ranks, ()):
            if variant is last:
                continue
            try:
                out = variant.run(feed_arrays, variables)
            except GuardFailure as e:
                failures.append(str(e))
                continue
            self.last = variant
            return out
        raise NoVariantFits(failures)
