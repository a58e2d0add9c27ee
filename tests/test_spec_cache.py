"""The spec cache: a second compile of the same run signature skips the Python compiler,
lowering included (its key is made from the graph)."""
import json
import marshal
import os
import subprocess
import sys

import numpy as np
import pytest

import graphc as gc
from graphc.compiler import spec_cache

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_once(scale):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 3])
        y = gc.reduce_sum(gc.nn.softmax(x * scale), axis=1) + gc.exp(x[:, 0])
        with gc.Session() as sess:
            return sess.run(y, {x: np.arange(12, dtype=np.float32).reshape(4, 3) / 10})


def test_second_compile_of_the_same_module_is_a_hit(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    before = dict(spec_cache.stats)
    first = _run_once(2.0)
    assert spec_cache.stats["stores"] == before["stores"] + 1
    second = _run_once(2.0)  # a new graph and Session: only the disk cache can help
    assert spec_cache.stats["hits"] == before["hits"] + 1
    np.testing.assert_array_equal(first, second)
    third = _run_once(3.0)  # another constant: another module, another entry
    assert spec_cache.stats["hits"] == before["hits"] + 1
    assert not np.array_equal(first, third)


def test_a_corrupt_entry_is_recompiled(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    expected = _run_once(2.0)
    for entry in tmp_path.iterdir():
        entry.write_bytes(entry.read_bytes()[:40])  # truncate every entry
    np.testing.assert_array_equal(_run_once(2.0), expected)


def test_off_disables_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    before = dict(spec_cache.stats)
    _run_once(2.0)
    _run_once(2.0)
    assert spec_cache.stats["hits"] == before["hits"]


def test_codegen_settings_are_part_of_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    _run_once(2.0)
    before = dict(spec_cache.stats)
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")  # codegen decides loop splitting
    _run_once(2.0)
    assert spec_cache.stats["hits"] == before["hits"]


# ------------------------------------------------ the key, made before lowering
def _count_lowerings(monkeypatch):
    from graphc.compiler import driver
    calls = []
    original = driver.lower

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(driver, "lower", counting)
    return calls


def test_a_hit_does_not_lower(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    lowerings = _count_lowerings(monkeypatch)
    first = _run_once(2.0)
    assert len(lowerings) == 1
    before = dict(spec_cache.stats)
    second = _run_once(2.0)  # a new graph and Session
    assert spec_cache.stats["hits"] == before["hits"] + 1
    assert len(lowerings) == 1  # answered from the graph's key: lowering never ran
    np.testing.assert_array_equal(first, second)


_CHILD = """
import json, numpy as np, graphc as gc
from graphc.compiler import driver, spec_cache
lowerings = []
original = driver.lower
driver.lower = lambda *a, **k: lowerings.append(1) or original(*a, **k)
x = gc.placeholder(gc.float32, [None, 4])
w = gc.Variable(np.arange(8, dtype=np.float32).reshape(4, 2) / 8)
loss = gc.reduce_mean(gc.square(gc.nn.tanh(gc.matmul(x, w)) - 0.25))
train = gc.train.GradientDescentOptimizer(0.5).minimize(loss)
with gc.Session() as sess:
    sess.run(gc.global_variables_initializer())
    xv = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    sess.run(train, {x: xv})
    out = sess.run([loss, w], {x: xv})
print(json.dumps({"stats": spec_cache.stats, "lowerings": len(lowerings),
                  "loss": float(out[0]), "w": out[1].tolist()}))
"""


def _run_child(cache_dir):
    env = dict(os.environ, GRAPHC_CACHE_DIR=str(cache_dir), GRAPHC_BACKEND="compiled",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _expected_child():
    w = (np.arange(8).reshape(4, 2) / 8).astype(np.float64)
    x = np.linspace(-1, 1, 12).reshape(3, 4)

    def loss_and_grad(w):
        h = np.tanh(x @ w)
        return np.mean((h - 0.25) ** 2), x.T @ (2 * (h - 0.25) * (1 - h * h) / h.size)
    w = w - 0.5 * loss_and_grad(w)[1]
    return loss_and_grad(w)[0], w


def test_a_second_process_hits_without_lowering(tmp_path):
    cold = _run_child(tmp_path)
    assert cold["lowerings"] >= 2 and cold["stats"]["hits"] == 0
    assert cold["stats"]["stores"] == cold["lowerings"]
    warm = _run_child(tmp_path)
    assert warm["lowerings"] == 0 and warm["stats"]["misses"] == 0
    assert warm["stats"]["hits"] == cold["stats"]["stores"]
    loss, w = _expected_child()
    for run in (cold, warm):
        np.testing.assert_allclose(run["loss"], loss, rtol=1e-5)
        np.testing.assert_allclose(run["w"], w, rtol=1e-5, atol=1e-6)


class _Signature:
    """A small run signature (a loop whose body reads a constant, a variable, a
    reshape by a fed shape) and its key, rebuilt with one input changed."""

    def __init__(self, dtype=gc.float32, static=(None, 3), scale=2.0, body_step=1.0,
                 fetch_sum=False, control=False, var_shape=(3,), where=0):
        g = gc.Graph()
        with g.as_default():
            self.x = gc.placeholder(dtype, static, name="x")
            self.labels = gc.placeholder(gc.int32, [None], name="labels")
            self.v = gc.Variable(np.zeros(var_shape, dtype.as_numpy_dtype), name="v",
                                 validate_shape=False)
            y = [self.x * scale + gc.cast(gc.reduce_sum(self.labels), dtype),
                 self.x * scale + gc.cast(gc.reduce_sum(self.labels), dtype)][where]
            _, y = gc.while_loop(lambda i, a: i < 3,
                                 lambda i, a: (i + 1, a + gc.constant(body_step, dtype)),
                                 [gc.constant(0), y])
            if control:
                with gc.control_dependencies([gc.no_op(name="dep")]):
                    y = gc.identity(y)
            self.y = gc.reduce_sum(y + self.v) if fetch_sum else y + self.v
        self.graph = g

    def key(self, rows=4, labels=None, disable=(), target=None, fetches=None,
            variable_shapes=None, feed_values=True, exclude=frozenset()):
        from graphc.compiler.lower import ops_to_lower
        labels = np.arange(rows, dtype=np.int32) if labels is None else labels
        feeds = [self.x, self.labels]
        shapes = [(rows, 3), labels.shape]
        values = [np.ones(shapes[0], self.x.dtype.as_numpy_dtype), labels] \
            if feed_values else None
        fetches = fetches or [self.y]
        ops = ops_to_lower(fetches, [], feeds)
        return spec_cache.signature_key(
            feeds, fetches, [], shapes, values,
            {"v": (3,)} if variable_shapes is None else variable_shapes, exclude, ops,
            frozenset(disable), target or {"triple": "x86_64-unknown-linux-gnu",
                                           "cpu": "skylake", "features": "+avx2"})


def test_the_key_is_a_function_of_the_graph():
    # two graphs built alike (same names, attrs and lines) share a key
    assert _Signature().key() == _Signature().key()
    assert _Signature().key() is not None


def test_an_op_attr_changes_the_key():
    assert _Signature(scale=3.0).key() != _Signature().key()


def test_a_body_op_attr_changes_the_key():
    assert _Signature(body_step=2.0).key() != _Signature().key()


def test_a_dtype_changes_the_key():
    assert _Signature(dtype=gc.float64).key() != _Signature().key()


def test_a_static_shape_changes_the_key():
    assert _Signature(static=(4, 3)).key() != _Signature().key()


def test_a_fed_tensors_static_shape_changes_the_key():
    """A dim known at build is a constant of the module, an unknown one a symbol, even
    where no op after the feed has a shape that says which."""
    def key(static):
        g = gc.Graph()
        with g.as_default():
            x = gc.placeholder(gc.float32, static, name="x")
            y = gc.reduce_sum(x)
        from graphc.compiler.lower import ops_to_lower
        return spec_cache.signature_key([x], [y], [], [(4, 3)], None, {}, frozenset(),
                                        ops_to_lower([y], [], [x]), frozenset(),
                                        {"triple": "t"})
    assert key((None, 3)) != key((4, 3))
    assert key((None, 3)) == key((None, 3))


def test_a_fed_shape_changes_the_key():
    sig = _Signature()
    assert sig.key(rows=5) != sig.key(rows=4)
    assert sig.key(rows=1) != sig.key(rows=4)  # a dim of 1 is specialized on


def test_whether_a_feed_may_be_specialized_changes_the_key():
    sig = _Signature()
    assert sig.key(feed_values=False) != sig.key()


def test_fed_values_are_not_in_the_key():
    # unread values (labels) are no part of the key: load checks the read ones
    sig = _Signature()
    assert sig.key(labels=np.arange(4, dtype=np.int32)) == \
        sig.key(labels=np.arange(4, dtype=np.int32)[::-1].copy())


def test_the_fetches_change_the_key():
    sig = _Signature()
    assert sig.key(fetches=[sig.y, sig.x]) != sig.key()
    assert _Signature(fetch_sum=True).key() != _Signature().key()


def test_a_control_input_changes_the_key():
    assert _Signature(control=True).key() != _Signature().key()


def test_the_creation_site_changes_the_key():
    # errors name the user's line: a spec holds it
    assert _Signature(where=1).key() != _Signature(where=0).key()


def test_a_held_variable_shape_changes_the_key():
    sig = _Signature(var_shape=(3,))
    assert sig.key(variable_shapes={"v": (1,)}) != sig.key()
    assert sig.key(variable_shapes={"unrelated": (7,), "v": (3,)}) == sig.key()


def test_the_ops_an_earlier_stage_ran_change_the_key():
    sig = _Signature()
    assert sig.key(exclude=frozenset([sig.v.initializer])) != sig.key()


def test_the_numpy_version_changes_the_key(monkeypatch):
    # constant folding computes with NumPy's kernels
    sig = _Signature()
    base = sig.key()
    monkeypatch.setattr(np, "__version__", "0.0.1")
    assert sig.key() != base


def test_the_disabled_passes_change_the_key():
    sig = _Signature()
    assert sig.key(disable={"cse"}) != sig.key()


def test_the_target_changes_the_key():
    sig = _Signature()
    base = {"triple": "x86_64-unknown-linux-gnu", "cpu": "skylake", "features": "+avx2"}
    keys = {sig.key(target=base), sig.key(target=dict(base, features="-avx2")),
            sig.key(target=dict(base, cpu="znver3")),
            sig.key(target={"kind": "gpu", "arch": "sm_80"}),
            sig.key(target={"kind": "gpu", "arch": "sm_80", "ptx": False})}
    assert len(keys) == 5


@pytest.mark.parametrize("name", spec_cache._CODEGEN_ENV)
def test_a_codegen_setting_changes_the_key(monkeypatch, name):
    sig = _Signature()
    monkeypatch.delenv(name, raising=False)
    base = sig.key()
    monkeypatch.setenv(name, "0")
    assert sig.key() != base


def test_the_compiler_sources_change_the_key(monkeypatch):
    sig = _Signature()
    base = sig.key()
    monkeypatch.setattr(spec_cache, "_SOURCES", "another compiler")
    assert sig.key() != base


def test_the_llvm_toolchain_changes_the_key(monkeypatch):
    from runtime import jit
    sig = _Signature()
    base = sig.key()
    monkeypatch.setattr(jit, "toolchain_id", lambda: "llvm 99")
    assert sig.key() != base


def test_an_op_registered_outside_graphc_is_keyed_on_its_module(tmp_path, monkeypatch):
    """Its inference code is not in the sources hashed: no key from the graph."""
    from graphc.framework.op_def import OP_DEFS, register_op
    register_op("TestOnlyDouble", infer=lambda inputs, attrs: (inputs[0].shape,
                                                               inputs[0].dtype),
                kernel=lambda x: x * 2, kind="opaque")
    try:
        g = gc.Graph()
        with g.as_default():
            x = gc.placeholder(gc.float32, [2])
            y = g.create_op("TestOnlyDouble", [x]).outputs[0]
        from graphc.compiler.lower import ops_to_lower
        ops = ops_to_lower([y], [], [x])
        assert spec_cache.signature_key([x], [y], [], [(2,)], None, {}, frozenset(), ops,
                                        frozenset(), {"triple": "t"}) is None
    finally:
        del OP_DEFS["TestOnlyDouble"]


def _reshape_run(shape):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [12])
        s = gc.placeholder(gc.int32, [2])
        y = gc.reduce_sum(gc.reshape(x, s), axis=1)
        with gc.Session() as sess:
            return sess.run(y, {x: np.arange(12, dtype=np.float32),
                                s: np.array(shape, np.int32)})


def test_a_spec_specialized_on_a_fed_value_is_not_used_for_another(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    x = np.arange(12, dtype=np.float32)
    np.testing.assert_array_equal(_reshape_run([3, 4]), x.reshape(3, 4).sum(axis=1))
    before = dict(spec_cache.stats)
    # same key (values are not in it), but the stored spec reads the shape [3, 4]
    np.testing.assert_array_equal(_reshape_run([2, 6]), x.reshape(2, 6).sum(axis=1))
    assert spec_cache.stats["hits"] == before["hits"]
    np.testing.assert_array_equal(_reshape_run([2, 6]), x.reshape(2, 6).sum(axis=1))
    assert spec_cache.stats["hits"] == before["hits"] + 1


def _labels_run(labels):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 3])
        y = gc.placeholder(gc.int32, [None])
        loss = gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=x)
        with gc.Session() as sess:
            return sess.run(loss, {x: np.arange(12, dtype=np.float32).reshape(4, 3) / 4,
                                   y: np.array(labels, np.int32)})


def test_unread_feed_values_hit(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    logits = np.arange(12, dtype=np.float64).reshape(4, 3) / 4
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    _labels_run([0, 1, 2, 0])
    before = dict(spec_cache.stats)
    out = _labels_run([2, 2, 1, 0])
    assert spec_cache.stats["hits"] == before["hits"] + 1
    np.testing.assert_allclose(out, -log_p[np.arange(4), [2, 2, 1, 0]], rtol=1e-6)


def _is_spec(payload):
    """Whether an entry's payload is a spec (the object cache's entries are machine code)."""
    try:
        return isinstance(spec_cache._from_bytes(payload), dict)
    except (ValueError, KeyError, TypeError):
        return False


def _with_header(payload, edit):
    """A spec entry's payload with its JSON header edited by `edit` (the rest kept)."""
    n = int.from_bytes(payload[:8], "little")
    header = json.loads(payload[8:8 + n])
    edit(header)
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + payload[8 + n:]


def _texts_past_the_end(header):
    header["texts"][0][1] += 1 << 20


def _an_unknown_text(header):
    header["texts"][0][0] = "source"


@pytest.mark.parametrize("damage", ["truncate", "flip_payload", "not_a_spec",
                                    "texts_past_the_end", "an_unknown_text"])
def test_a_damaged_entry_is_recompiled_not_run(tmp_path, monkeypatch, damage):
    from runtime import compile_cache
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    lowerings = _count_lowerings(monkeypatch)
    expected = _run_once(2.0)
    cache = compile_cache.default_cache()
    (entry,) = [p for p in tmp_path.iterdir() if _is_spec(cache.load(p.stem))]
    blob = bytearray(entry.read_bytes())
    if damage == "truncate":
        blob = blob[:len(blob) - 7]
    elif damage == "flip_payload":
        blob[-3] ^= 0x5A
    elif damage == "not_a_spec":  # a well-formed entry whose payload is no spec
        cache.store(entry.stem, (2).to_bytes(8, "little") + b"{}")
        blob = bytearray(entry.read_bytes())
    else:  # well-formed and checksummed, its header's list of texts wrong
        payload = _with_header(cache.load(entry.stem), globals()["_" + damage])
        entry.unlink()
        cache.store(entry.stem, payload)
        blob = bytearray(entry.read_bytes())
    entry.write_bytes(bytes(blob))
    before = dict(spec_cache.stats)
    np.testing.assert_array_equal(_run_once(2.0), expected)
    assert spec_cache.stats["hits"] == before["hits"]
    assert spec_cache.stats["stores"] == before["stores"] + 1
    assert len(lowerings) == 2  # compiled again
    np.testing.assert_array_equal(_run_once(2.0), expected)
    assert spec_cache.stats["hits"] == before["hits"] + 1  # the rewritten entry is good


def test_an_entry_keeps_the_code_as_text_beside_its_json_header(tmp_path, monkeypatch):
    # the IR inside the JSON header was half of a warm first run's load of its spec
    from runtime import compile_cache
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    _run_once(2.0)
    cache = compile_cache.default_cache()
    (payload,) = [cache.load(p.stem) for p in tmp_path.iterdir()
                  if _is_spec(cache.load(p.stem))]
    n = int.from_bytes(payload[:8], "little")
    header = json.loads(payload[8:8 + n])
    assert "llvm_ir" not in header
    ((name, nbytes),) = header["texts"]
    spec = spec_cache._from_bytes(payload)
    assert name == "llvm_ir" and len(spec["llvm_ir"].encode()) == nbytes
    assert "define" in spec["llvm_ir"] and "texts" not in spec
    assert spec_cache._from_bytes(spec_cache._to_bytes(spec)) == spec


def test_the_compiling_machines_core_count_changes_the_key(monkeypatch):
    # gemm_team cuts a product into at most MAX_UNITS units (one per core of the
    # compiling machine): the generated code depends on it
    from graphc.compiler.backends.cpu import gemm_team
    sig = _Signature()
    keys = set()
    for units in (2, 16):
        monkeypatch.setattr(gemm_team, "MAX_UNITS", units)
        keys.add(sig.key())
    assert len(keys) == 2


# ------------------------------------- the graph's part of a key, once per graph state
def _walks():
    return spec_cache.stats["graph_summaries"]


def test_the_graph_is_walked_once_for_keys_of_one_signature():
    sig = _Signature()
    before = _walks()
    first = sig.key()
    # what is not the graph's (fed shapes, held shapes, the target) is read each time
    assert sig.key(rows=5) != first
    assert sig.key(variable_shapes={"v": (1,)}) != first
    assert sig.key(disable={"cse"}) != first
    assert sig.key() == first
    assert _walks() == before + 1
    sig.key(fetches=[sig.y.op.inputs[0]])  # other ops (the loop's alone): another walk
    assert _walks() == before + 2


def test_an_op_added_after_a_key_walks_again():
    sig = _Signature()
    first = sig.key()
    before = _walks()
    with sig.graph.as_default():
        gc.constant(1.0, name="unread")
    assert sig.key() == first  # an op the signature does not read: the same key
    assert _walks() == before + 1


def test_a_static_shape_narrowed_after_a_key_changes_it():
    # set_shape adds no op: the graph's edits, not its version, say it changed
    sig = _Signature()
    first = sig.key()
    sig.y.set_shape([4, 3])  # not a feed: only the graph's part of the key says it
    assert sig.key() != first


def test_a_control_input_added_after_a_key_changes_it():
    sig = _Signature()
    first = sig.key()
    # an op that exists (a fed one: the ops to lower stay the same): no op added
    sig.y.op._add_control_input(sig.labels.op)
    assert sig.key() != first


def test_a_loop_gradient_built_after_a_key_changes_the_loops_key():
    # the gradient makes the forward While save its body's values: new outputs and
    # attrs of an op that existed before
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float64, [3], name="x")
        _, y = gc.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, gc.sin(a) * x),
                             [gc.constant(0), gc.ones([3], gc.float64)])

    def key():
        from graphc.compiler.lower import ops_to_lower
        return spec_cache.signature_key([x], [y], [], [(3,)], None, {}, frozenset(),
                                        ops_to_lower([y], [], [x]), frozenset(),
                                        {"triple": "t"})
    first = key()
    with g.as_default():
        gc.gradients(y, x)
    assert key() != first


def _scaled_sum_graph():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float64, [None, 3], name="x")
        v = gc.Variable(np.arange(3, dtype=np.float64), name="v", validate_shape=False)
        y = gc.reduce_sum(x * 2.0, axis=1) + gc.reduce_sum(v)
    return g, x, v, y


_XS = np.arange(12, dtype=np.float64).reshape(4, 3) / 7


@pytest.mark.backends("compiled", "reference", "gpu_emulated")
def test_a_second_session_over_a_graph_reuses_its_walk(tmp_path, monkeypatch, backend):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    g, x, v, y = _scaled_sum_graph()
    expected = (_XS * 2).sum(axis=1) + 3.0
    before = dict(spec_cache.stats)
    for _ in range(2):
        with gc.Session(graph=g) as sess:
            sess.run(v.initializer)
            np.testing.assert_allclose(sess.run(y, {x: _XS}), expected, rtol=1e-12)
    compiled = backend != "reference"
    # the sum's signature walked once, hit by the second Session (the initializer,
    # validate_shape=False, runs on the host)
    assert _walks() == before["graph_summaries"] + compiled
    assert spec_cache.stats["hits"] == before["hits"] + compiled


@pytest.mark.backends("compiled", "reference", "gpu_emulated")
def test_a_graph_edited_between_sessions_misses_with_right_values(tmp_path, monkeypatch,
                                                                   backend):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    g, x, v, y = _scaled_sum_graph()
    with gc.Session(graph=g) as sess:
        sess.run(v.initializer)
        sess.run(y, {x: _XS})
    x.set_shape([4, 3])  # the rows a constant of the code now
    with g.as_default():
        z = y * gc.reduce_max(x)  # and an op added
    before = dict(spec_cache.stats)
    with gc.Session(graph=g) as sess:
        sess.run(v.initializer)
        got_y, got_z = sess.run([y, z], {x: _XS})
        if backend != "reference":
            assert spec_cache.stats["misses"] == before["misses"] + 1
            assert spec_cache.stats["hits"] == before["hits"]
        expected = (_XS * 2).sum(axis=1) + 3.0
        np.testing.assert_allclose(got_y, expected, rtol=1e-12)
        np.testing.assert_allclose(got_z, expected * _XS.max(), rtol=1e-12)


@pytest.mark.backends("compiled", "reference", "gpu_emulated")
def test_a_variable_reshaped_between_runs_misses_with_right_values(tmp_path, monkeypatch,
                                                                    backend):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    g, x, v, y = _scaled_sum_graph()
    with g.as_default():
        grow = gc.assign(v, gc.ones([5], gc.float64), validate_shape=False)
    with gc.Session(graph=g) as sess:
        sess.run(v.initializer)
        np.testing.assert_allclose(sess.run(y, {x: _XS}), (_XS * 2).sum(axis=1) + 3.0,
                                   rtol=1e-12)
        sess.run(grow)
        before = dict(spec_cache.stats)
        np.testing.assert_allclose(sess.run(y, {x: _XS}), (_XS * 2).sum(axis=1) + 5.0,
                                   rtol=1e-12)
        if backend != "reference":
            assert spec_cache.stats["misses"] == before["misses"] + 1
            assert _walks() == before["graph_summaries"]  # the held shapes are outside it


@pytest.mark.backends("compiled", "reference", "gpu_emulated")
def test_a_codegen_setting_changed_between_sessions_misses_with_right_values(
        tmp_path, monkeypatch, backend):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GRAPHC_PARALLEL_MIN_WORK", raising=False)
    g, x, v, y = _scaled_sum_graph()
    expected = (_XS * 2).sum(axis=1) + 3.0
    for setting in (None, "0"):
        if setting is not None:
            monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", setting)
        before = dict(spec_cache.stats)
        with gc.Session(graph=g) as sess:
            sess.run(v.initializer)
            np.testing.assert_allclose(sess.run(y, {x: _XS}), expected, rtol=1e-12)
        if backend != "reference":
            assert spec_cache.stats["hits"] == before["hits"]
            assert spec_cache.stats["misses"] == before["misses"] + 1


# ----------------------------- each op's form, made once while the op is unchanged
def _forms():
    return spec_cache.stats["op_forms"]


def test_each_ops_form_is_made_once():
    sig = _Signature()
    before = _forms()
    first = sig.key()
    made = _forms() - before
    assert made > 10  # the signature's ops (the loop's body included)
    with sig.graph.as_default():
        z = sig.y * 2.0  # a Mul and its Const
    walks = _walks()
    assert sig.key(fetches=[z]) != first
    # a new walk (ops were added) reads the other ops' forms: only the new ops' are made
    assert _walks() == walks + 1
    assert _forms() == before + made + 2
    assert sig.key() == first
    assert _forms() == before + made + 2


def test_a_control_input_on_an_op_already_read_changes_the_key():
    # the walk reaches the same ops: only the waiting op's form says it changed
    sig = _Signature()
    first = sig.key()
    sig.y.op._add_control_input(sig.y.op.inputs[1].op)
    assert sig.key() != first


def test_an_attr_changed_after_a_key_changes_it():
    sig = _Signature()
    first = sig.key()
    op = sig.y.op.inputs[0].op  # an op whose form the first key made
    op._set_attr("note", 1)
    assert sig.key() != first


def test_an_ops_attrs_are_read_only():
    # a write past _set_attr would leave the op's memoized form stale
    sig = _Signature()
    with pytest.raises(TypeError):
        sig.y.op.attrs["note"] = 1


def test_a_variable_reshaped_by_an_assign_built_after_a_key_changes_it():
    # assign(validate_shape=False) makes the variable's static shape and its shape attr
    # unknown: ops that existed before it changed
    g = gc.Graph()
    with g.as_default():
        v = gc.Variable(np.zeros(3, np.float64), name="v")
        y = v * 2.0

    def key():
        from graphc.compiler.lower import ops_to_lower
        return spec_cache.signature_key([], [y], [], [], None, {"v": (3,)}, frozenset(),
                                        ops_to_lower([y], [], []), frozenset(),
                                        {"triple": "t"})
    first = key()
    with g.as_default():
        gc.assign(v, np.zeros(5, np.float64), validate_shape=False)
    assert v.shape.ndims is None
    assert key() != first


@pytest.mark.backends("compiled", "reference", "gpu_emulated")
def test_a_static_shape_narrowed_after_a_run_misses_with_right_values(tmp_path, monkeypatch,
                                                                      backend):
    # an inner tensor's shape (not a feed's: those are in the key's run part) narrowed
    # after a run: the rows become a constant of the code, so the spec is another
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float64, [None, 3], name="x")
        h = x * 2.0
        y = gc.reduce_sum(gc.exp(h), axis=1)
    expected = np.exp(_XS * 2).sum(axis=1)
    with gc.Session(graph=g) as sess:
        np.testing.assert_allclose(sess.run(y, {x: _XS}), expected, rtol=1e-12)
    h.set_shape([4, 3])
    before = dict(spec_cache.stats)
    with gc.Session(graph=g) as sess:
        np.testing.assert_allclose(sess.run(y, {x: _XS}), expected, rtol=1e-12)
    if backend != "reference":
        assert spec_cache.stats["misses"] == before["misses"] + 1
        assert spec_cache.stats["hits"] == before["hits"]
        assert spec_cache.stats["op_forms"] == before["op_forms"] + 1  # h's op only


# ------------------------------------ the sources' hash, kept under their identity
def _sources_hash(monkeypatch, tree):
    """The compiler sources' hash as a fresh process computes it, the sources being the
    .py files under `tree`."""
    def files():
        found = []
        spec_cache._add_sources(str(tree), "pkg", found)
        return found
    monkeypatch.setattr(spec_cache, "_source_files", files)
    monkeypatch.setattr(spec_cache, "_SOURCES", None)
    return spec_cache._compiler_source_hash()


def test_the_sources_hash_is_read_back_until_a_source_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path / "cache"))
    tree = tmp_path / "src"
    (tree / "sub" / "__pycache__").mkdir(parents=True)
    (tree / "a.py").write_text("A = 1\n")
    (tree / "sub" / "b.py").write_text("B = 2\n")
    (tree / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"not a source")
    (tree / "notes.txt").write_text("not a source either")
    first = _sources_hash(monkeypatch, tree)
    assert first == spec_cache._sources_content_hash(spec_cache._source_files())
    # the next process reads it back: no source is read
    reads = []
    content_hash = spec_cache._sources_content_hash
    monkeypatch.setattr(spec_cache, "_sources_content_hash",
                        lambda files: reads.append(1) or content_hash(files))
    assert _sources_hash(monkeypatch, tree) == first and reads == []
    # a source written (its size kept, its time moved), one added, one removed
    b = tree / "sub" / "b.py"
    st = b.stat()
    b.write_text("B = 3\n")
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    second = _sources_hash(monkeypatch, tree)
    assert second != first and reads == [1]
    assert second == content_hash(spec_cache._source_files())
    (tree / "c.py").write_text("C = 4\n")
    third = _sources_hash(monkeypatch, tree)
    assert third not in (first, second) and reads == [1, 1]
    (tree / "c.py").unlink()
    assert _sources_hash(monkeypatch, tree) == second and reads == [1, 1]  # kept before


def test_the_sources_hash_without_a_cache_reads_the_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    (tmp_path / "a.py").write_text("A = 1\n")
    assert _sources_hash(monkeypatch, tmp_path) == \
        spec_cache._sources_content_hash(spec_cache._source_files())


def test_attr_forms_tell_every_value_apart():
    forms = [spec_cache._attrs_form({"a": v}) for v in (
        gc.float32, gc.float64, "float32", gc.TensorShape(None), gc.TensorShape([None, 3]),
        gc.TensorShape([4, 3]), gc.TensorShape([]), [4, 3], (4, 3), None, [gc.float32],
        ("dtype", "float32"), np.float32(1.0), np.array([4, 3]))]
    texts = [marshal.dumps(f, 2) for f in forms]  # the bytes a key hashes
    assert len(set(texts)) == len(texts), forms


def test_the_keys_walk_reaches_references_and_control_inputs_and_stops_at_feeds():
    # what lowering may look at: a variable only assigned (a reference input, which
    # pruning leaves out), a control input's op and its inputs; not a fed tensor's producer
    g = gc.Graph()
    with g.as_default():
        a = gc.constant(np.ones(2), name="a")
        fed = gc.identity(a, name="fed")
        w = gc.Variable(np.zeros(2), name="w")
        b = gc.constant(np.ones(2), name="b")
        gate = gc.identity(b, name="gate")
        with gc.control_dependencies([gate]):
            y = gc.add(fed * 2.0, 1.0, name="y")
        set_w = gc.assign(w, y, name="set_w")
    ops = [set_w.op, y.op, set_w.op]  # twice: walked once
    walked = [op.name for op in spec_cache._ancestors(ops, [fed])]
    assert walked == sorted(walked, key=lambda n: g.get_operation_by_name(n)._id)
    assert len(set(walked)) == len(walked)
    assert {"w", "gate", "b", "y", "set_w"} <= set(walked)
    assert "fed" not in walked and "a" not in walked
