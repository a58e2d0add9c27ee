"""runtime.variants.Variants: the one chooser among guarded compiled variants, used by the
Session's native stages and by loaded files."""
import numpy as np
import pytest

import graphc as gc
import runtime
from graphc.export import export
from runtime.errors import GuardFailure, NoVariantFits
from runtime.variants import Variants


class _Fake:
    """A variant accepting feeds whose first dim satisfies `accepts`; counts its runs."""

    def __init__(self, name, ranks, accepts):
        self.name = name
        self.feeds = [{"dims": [0] * r} for r in ranks]
        self.accepts = accepts
        self.tried = 0

    def run(self, feed_arrays, variables):
        self.tried += 1
        n = feed_arrays[0].shape[0]
        if not self.accepts(n):
            raise GuardFailure(f"{self.name} refuses {n}")
        return [self.name]


def test_tries_the_last_variant_first_then_the_others_in_order():
    one, many, other_rank = (_Fake("one", [2], lambda n: n == 1),
                             _Fake("many", [2], lambda n: n != 1),
                             _Fake("rank3", [3], lambda n: True))
    variants = Variants()
    for v in (one, many, other_rank):
        variants.add(v)
    assert variants.last is None and len(variants) == 3
    assert variants.run([np.zeros((5, 2))], {}) == ["many"]
    assert (one.tried, many.tried, other_rank.tried) == (1, 1, 0)  # rank 3 never tried
    assert variants.last is many
    assert variants.run([np.zeros((7, 2))], {}) == ["many"]
    assert (one.tried, many.tried) == (1, 2)  # the last one fits: nothing else tried
    assert variants.run([np.zeros((1, 2))], {}) == ["one"]
    assert (one.tried, many.tried) == (2, 3) and variants.last is one


def test_no_variant_fits_lists_why_each_refused():
    variants = Variants()
    with pytest.raises(NoVariantFits) as empty:
        variants.run([np.zeros((1, 2))], {})
    assert empty.value.failures == []
    variants.add(_Fake("a", [2], lambda n: n == 1))
    variants.add(_Fake("b", [2], lambda n: n == 2))
    with pytest.raises(NoVariantFits) as e:
        variants.run([np.zeros((3, 2))], {})
    assert e.value.failures == ["a refuses 3", "b refuses 3"]
    assert isinstance(e.value, GuardFailure)  # the Session compiles another on it


def test_session_stage_and_loaded_file_choose_through_variants(tmp_path):
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    b = gc.constant(np.array([1.0, -2.0, 0.5], np.float32))
    y = gc.reduce_sum(gc.exp(x) + b, axis=1)   # size 1 broadcasts: the code is guarded
    path = str(tmp_path / "m.gcx")
    batches = {n: np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
               for n in (1, 4, 9)}
    session_out = {}
    with gc.Session() as sess:
        for n in (4, 9, 1, 4):
            session_out[n] = sess.run(y, {x: batches[n]})
            want = (np.exp(batches[n].astype(np.float64)) + [1.0, -2.0, 0.5]).sum(axis=1)
            np.testing.assert_allclose(session_out[n], want, rtol=1e-6)
        stages = [st for exe in sess._cache.values() for st in exe.stages]
        assert all(isinstance(st.variants, Variants) for st in stages)
        assert sum(len(st.variants) for st in stages) == 2  # batch > 1 and batch 1
        export(sess, path, inputs={"x": x}, outputs={"y": y})
    model = runtime.load(path)
    assert isinstance(model._variants, Variants) and len(model._variants) == 2
    for n in (4, 1, 9, 1):
        np.testing.assert_array_equal(model.run({"x": batches[n]})["y"], session_out[n])
