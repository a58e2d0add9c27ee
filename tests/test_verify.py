"""The runtime's verifier (runtime/verify.py): a compiled file whose header lies, re-written
with a valid checksum, is refused with a FileFormatError naming the field, before anything
is allocated or run; code may call only what the runtime provides; signed files."""
import hashlib
import itertools
import json

import numpy as np
import pytest

import graphc as tf
import runtime
from runtime import file_format as ff
from runtime import verify


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A real export: a symbolic batch (two executables), a constant, a variable it
    updates (state), a BLAS call and a thread team."""
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, name="w")
    c = tf.Variable(np.zeros(3, np.float32), name="c")
    y = tf.nn.softmax(tf.matmul(x, w) + 1.0)
    update = tf.assign_add(c, tf.reduce_sum(y, 0))
    path = str(tmp_path_factory.mktemp("verify") / "m.gcx")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        tf.export(sess, path, inputs={"x": x}, outputs={"y": y, "c": update})
    with open(path, "rb") as f:
        return path, f.read()


def split(data):
    _, version, flags, size = ff.PREFIX.unpack_from(data, 0)
    return version, flags, data[ff.PREFIX.size:ff.PREFIX.size + size].decode(), \
        data[ff.PREFIX.size + size:-ff.CHECKSUM_BYTES]


def with_header_text(data, text, grow=0):
    """`data` with header `text` and a valid checksum: damage the checksum cannot see. The
    header area grows by `grow` bytes (a multiple of 64; blob offsets must have moved by
    as much), padded with spaces."""
    version, flags, old, rest = split(data)
    new = text.encode()
    assert len(new) <= len(old) + grow, "the edit must not grow the header"
    new += b" " * (len(old) + grow - len(new))
    body = ff.PREFIX.pack(ff.MAGIC, version, flags, len(new)) + new + rest
    return body + hashlib.sha256(body).digest()


def edited(data, edit):
    """`data` with `edit(header dict)` applied; the blobs move (with their offsets) when
    the header no longer fits before them."""
    header = json.loads(split(data)[2])
    edit(header)
    text = json.dumps(header, separators=(",", ":"))
    grow = 0
    old = len(split(data)[2])
    if len(text) > old:
        grow = (len(text) - old + 1024) // 64 * 64
        for b in header.get("blobs", []):
            if isinstance(b, dict) and isinstance(b.get("offset"), int):
                b["offset"] += grow
        text = json.dumps(header, separators=(",", ":"))
    return with_header_text(data, text, grow)


def load_bytes(tmp_path, data, **kwargs):
    path = tmp_path / "edited.gcx"
    path.write_bytes(data)
    return runtime.load(str(path), **kwargs)


def refused(tmp_path, data, pattern, **kwargs):
    with pytest.raises(ff.FileFormatError, match=pattern):
        load_bytes(tmp_path, data, **kwargs)


def test_the_real_file_loads_and_runs(exported, tmp_path):
    m = load_bytes(tmp_path, exported[1])
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    logits = x @ (np.arange(12, dtype=np.float32).reshape(4, 3) / 10) + 1
    want = np.exp(logits - logits.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(m.run({"x": x})["y"], want, rtol=1e-5)


def test_duplicate_keys_are_refused(exported, tmp_path):
    text = split(exported[1])[2]
    # json keeps the last of two keys: a duplicated arena_bytes could hide a smaller arena
    dup = text.replace('"arena_bytes":', '"arena_bytes":0,"arena_bytes":', 1)
    refused(tmp_path, with_header_text(exported[1], dup[:len(text)].rstrip()
                                       if len(dup) > len(text) else dup),
            "duplicate key 'arena_bytes'")


def test_deeply_nested_header_is_refused(exported, tmp_path):
    text = split(exported[1])[2]
    deep = '{"format":"graphc.compiled","x":' + "[" * 5000 + "]" * 5000 + "}"
    assert len(deep) < len(text)
    refused(tmp_path, with_header_text(exported[1], deep), "nested more than")


ARENA_SHRUNK = lambda h: h["executables"][0].update(arena_bytes=64)  # noqa: E731


@pytest.mark.parametrize("edit, pattern", [
    # the code writes 3 columns; a header claiming 2 would let it write past the array
    (lambda h: [e.update(dims=[[[1, [["x.0", 1]]]], 2])
                for e in (h["executables"][0]["fetches"][0], h["signature"]["outputs"][0])],
     "executable 0 fetches: differs from what the code was compiled for"),
    (lambda h: [e.update(dtype="float16")
                for e in (h["executables"][0]["fetches"][1], h["signature"]["outputs"][1])],
     "executable 0 fetches: differs"),
    (ARENA_SHRUNK, "executable 0 arena_bytes: differs"),
    (lambda h: h["executables"][1]["error_sites"].append(
        {"class": "InvalidArgumentError", "message": "{0:>999999999}", "args": ["int"]}),
     "executable 1 error_sites: differs"),
    (lambda h: h["executables"][0]["variables"][0].update(dims=[300]),
     "executable 0 variables: differs"),
])
def test_header_must_describe_its_code(exported, tmp_path, edit, pattern):
    refused(tmp_path, edited(exported[1], edit), pattern)


@pytest.mark.parametrize("edit, pattern", [
    (lambda h: h["executables"][0]["value_guards"].append(
        {"feed": 0, "shape": [1 << 40], "values": []}),
     "executable 0 value guard 0: "),
    (lambda h: h["executables"][0].update(arena_bytes=[[-64, [["x.0", 1]]], [-64, []]]),
     "arena_bytes: is negative for every dim the guards admit"),
    (lambda h: h["executables"][0].update(error_detail_slots=1 << 40),
     "error_detail_slots"),
    (lambda h: h["signature"]["inputs"][0].update(dtype="float64"),
     "executable 0 feeds 0: float32 .* signature input 'x' is float64"),
    (lambda h: h["signature"]["outputs"][1].update(dims=[4]),
     "executable 0 fetches 1: dims .* differ from signature output 'c'"),
    (lambda h: h["signature"]["outputs"][0].pop("tensor"), "field 'tensor'"),
    (lambda h: h["executables"][0]["fetches"][0].update(source="feed", index=0),
     "fetch 0: claims float32 .*3\\] but its source, feed 0, is float32 .*4\\]"),
    (lambda h: h["executables"][0]["symbols"].append(dict(h["executables"][0]["symbols"][0])),
     "symbol 'x.0' is defined twice"),
    (lambda h: h["state"].append(dict(h["state"][0])), "stored twice"),
    (lambda h: h["blobs"][0].update(offset=64), "blob 0: bytes 64.*outside the data area"),
])
def test_lying_fields_are_named(exported, tmp_path, edit, pattern):
    refused(tmp_path, edited(exported[1], edit), pattern)


def _with_code(h, extra):
    spec = h["executables"][0]
    spec["llvm_ir"] = spec["llvm_ir"].replace("ret i32 0\n}", "ret i32 0\n}\n" + extra, 1)


SYSTEM_CALL = """
declare i32 @system(ptr)
@cmd = private constant [5 x i8] c"true\\00"
define i32 @graphc_evil() {
  %r = call i32 @system(ptr @cmd)
  ret i32 %r
}
"""


@pytest.mark.parametrize("extra, pattern", [
    (SYSTEM_CALL, "declares function 'system', which the runtime does not provide"),
    ("@environ = external global ptr\n", "external global 'environ'"),
    ("define void @graphc_jump(i64 %a) {\n  %p = inttoptr i64 %a to ptr\n"
     "  call void %p()\n  ret void\n}\n", "inttoptr"),
    ("define void @graphc_asm() {\n  call void asm sideeffect \"nop\", \"\"()\n  ret void\n}\n",
     "inline assembly"),
])
def test_code_may_call_only_what_the_runtime_provides(exported, tmp_path, extra, pattern):
    refused(tmp_path, edited(exported[1], lambda h: _with_code(h, extra)), pattern)


def test_entry_calling_system_does_not_run(exported, tmp_path):
    def edit(h):
        spec = h["executables"][0]
        spec["llvm_ir"] = spec["llvm_ir"].replace(
            "define i32 @\"graphc_main\"(", "define i32 @\"graphc_main_real\"(", 1) + """
define i32 @"graphc_main"(ptr %a, ptr %b, ptr %c, ptr %d, ptr %e, ptr %f) {
  %r = call i32 @graphc_evil()
  ret i32 %r
}
""" + SYSTEM_CALL
    data = edited(exported[1], edit)
    refused(tmp_path, data, "declares function 'system'")


# ------------------------------------------------------------------ bounds
EXPRS = [
    [[64, [["n", 1]]], [64, []]],
    [[1, [[["floordiv", [[1, [["n", 1]]], [-3, []]], 2], 1]]], [1, []]],
    [[1, [[["mod", [[1, [["n", 1]], ], [1, [["m", 1]]]], [[1, [["m", 1]]], [1, []]]], 1]]]],
    [[2, [["n", 2]]], [-3, [["n", 1], ["m", 1]]], [5, []]],
    [[1, [[["max", [[1, [["n", 1]]]], [[-1, [["m", 1]]], [7, []]]], 1]]]],
]


@pytest.mark.parametrize("expr", EXPRS)
def test_bounds_hold_for_every_admitted_value(expr):
    ranges = {"n": (2, 9), "m": (0, 5)}
    lo, hi = verify.expr_bounds(expr, ranges)
    values = [runtime.shapes.evaluate(expr, {"n": n, "m": m})
              for n, m in itertools.product(range(2, 10), range(0, 6))]
    assert lo <= min(values) and max(values) <= hi


def test_guards_narrow_symbol_ranges():
    eq = [[[[1, [["n", 1]]]], "==", [[1, []]], True]]
    ne = [[[[1, [["n", 1]]]], "==", [[1, []]], False]]
    ge = [[[[1, [["n", 1]]]], "<", [[4, []]], False]]
    assert verify.symbol_ranges(eq, ["n"])["n"] == (1, 1)
    assert verify.symbol_ranges(ne, ["n"])["n"] == (0, verify.MAX_DIM)  # a hole, not a bound
    assert verify.symbol_ranges(ge, ["n"])["n"] == (4, verify.MAX_DIM)
    # n - 4 is never negative once the guard admits only n >= 4
    assert verify.expr_bounds(verify.difference([[1, [["n", 1]]]], 4),
                              verify.symbol_ranges(ge, ["n"]))[0] == 0


# ------------------------------------------------------------------ signing
@pytest.fixture(scope="module")
def keys():
    ed25519 = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")
    return ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()


def _signed_export(tmp_path, key):
    tf.reset_default_graph()
    x = tf.placeholder(tf.float64, [3], name="x")
    y = x * 2.0 + 1.0
    path = str(tmp_path / "signed.gcx")
    with tf.Session() as sess:
        tf.export(sess, path, inputs={"x": x}, outputs={"y": y}, sign_with=key)
    return path


def test_signed_file_loads_with_its_key(tmp_path, keys):
    path = _signed_export(tmp_path, keys[0])
    x = np.array([0.5, -1.0, 3.0])
    for trusted in ([keys[0].public_key()], [keys[1].public_key(), keys[0].public_key()],
                    None):
        m = runtime.load(path, trusted_keys=trusted)
        np.testing.assert_array_equal(m.run({"x": x})["y"], x * 2 + 1)
    raw = keys[0].public_key().public_bytes_raw()
    runtime.load(path, trusted_keys=[raw])


def test_signature_refusals(tmp_path, keys, exported):
    path = _signed_export(tmp_path, keys[0])
    with pytest.raises(ff.FileFormatError, match="does not match any of the trusted keys"):
        runtime.load(path, trusted_keys=[keys[1].public_key()])
    with pytest.raises(ff.FileFormatError, match="not signed"):
        runtime.load(exported[0], trusted_keys=[keys[0].public_key()])
    # an edit re-checksummed but not re-signed
    with open(path, "rb") as f:
        data = f.read()
    text = split(data)[2]
    tampered = with_header_text(data, text.replace("2.0", "3.0") if "2.0" in text else
                                text.replace('"x"', '"z"', 1))
    assert tampered != data
    refused(tmp_path, tampered, "signature does not match", trusted_keys=[keys[0].public_key()])


# ------------------------------------------------------------ what the Session builds
def _session_specs(monkeypatch):
    """The specs of every executable the Session builds while running a mix of graphs:
    BLAS, thread teams, convolutions, gathers (error sites), random ops, an Adam step."""
    specs = []
    original = runtime.executable.Executable.__init__

    def collect(self, spec, *args, **kwargs):
        specs.append(spec)
        original(self, spec, *args, **kwargs)
    monkeypatch.setattr(runtime.executable.Executable, "__init__", collect)
    tf.reset_default_graph()
    rng = np.random.RandomState(0)
    x = tf.placeholder(tf.float32, [None, 6, 6, 2], name="images")
    idx = tf.placeholder(tf.int32, [None], name="idx")
    labels = tf.placeholder(tf.int64, [None], name="labels")
    k = tf.Variable(rng.randn(3, 3, 2, 4).astype(np.float32), name="k")
    w = tf.Variable(rng.randn(4 * 36, 5).astype(np.float32), name="w")
    table = tf.Variable(rng.randn(7, 5).astype(np.float32), name="table")
    h = tf.nn.relu(tf.nn.conv2d(x, k, [1, 1, 1, 1], "SAME"))
    logits = tf.matmul(tf.reshape(h, [-1, 4 * 36]), w) + tf.gather(table, idx)
    noise = tf.random_normal(tf.shape(logits), seed=3)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits + 0.01 * noise))
    train = tf.train.AdamOptimizer(0.01).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        feed = {x: rng.randn(3, 6, 6, 2).astype(np.float32), idx: [0, 6, 2],
                labels: [1, 0, 4]}
        for _ in range(2):
            sess.run([train, loss], feed)
        with pytest.raises(tf.errors.InvalidArgumentError):
            sess.run(logits, {**feed, idx: [0, 7, 2]})
    return specs


def test_every_spec_the_session_builds_verifies(monkeypatch):
    specs = _session_specs(monkeypatch)
    assert len(specs) >= 2
    assert any(s["error_sites"] for s in specs)
    for spec in specs:
        verify.verify_spec(spec, check_calls=True)  # raises InvalidSpec naming the field


def test_a_bad_in_memory_spec_names_its_field(monkeypatch):
    spec = next(s for s in _session_specs(monkeypatch) if s["fetches"])
    bad = dict(spec, fetches=[dict(f, dtype="float128") for f in spec["fetches"]])
    with pytest.raises(verify.InvalidSpec, match="spec fetch 0: unsupported dtype"):
        verify.verify_spec(bad)
    with pytest.raises(verify.InvalidSpec, match="error_detail_slots"):
        runtime.Executable(dict(spec, error_detail_slots=-1))
    with pytest.raises(verify.InvalidSpec, match="declares function 'system'"):
        verify.verify_spec(dict(spec, llvm_ir=spec["llvm_ir"] + SYSTEM_CALL), check_calls=True)


def test_guards_on_a_dim_plus_a_constant_bound_it():
    """A VALID window records `H - 2 >= 0`: the verifier narrows H to [2, ...] from it, so
    the arena of a strided VALID conv over unknown spatial dims is provably non-negative
    (it was refused as 'may be negative', failing every such compile)."""
    from runtime.verify import symbol_ranges
    h = [[1, [["H", 1]]], [-2, []]]                    # H - 2
    w = [[-3, [["W", 1]]], [30, []]]                   # 30 - 3W
    guards = [[h, ">=", [], True], [w, "<", [], False], [[[2, [["N", 1]]]], "==", 8, True]]
    ranges = symbol_ranges(guards, ["H", "W", "N"])
    assert ranges["H"][0] == 2 and ranges["W"] == (0, 10) and ranges["N"] == (4, 4)
    # a guard the verifier cannot read leaves the default range: bounds stay sound
    assert symbol_ranges([[[[1, [["H", 2]]]], ">=", 9, True]], ["H"])["H"][0] == 0


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_strided_conv_over_unknown_dims_compiles_and_runs(padding):
    x = tf.placeholder(tf.float32, [1, None, None, 3])
    w = np.arange(54, dtype=np.float32).reshape(2, 3, 3, 3) / 50
    y = tf.nn.conv2d(x, tf.constant(w), strides=[1, 2, 2, 1], padding=padding)
    xv = np.random.default_rng(0).standard_normal((1, 5, 7, 3)).astype(np.float32)
    with tf.Session(config=tf.ConfigProto(backend="reference")) as ref:
        want = ref.run(y, {x: xv})
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: xv}), want, rtol=1e-5, atol=1e-5)


def test_an_arena_negative_for_some_dims_is_refused_by_the_run():
    """A VALID convolution's arena can be negative for inputs smaller than its kernel; the
    verifier admits it (bounds cannot see that those inputs give negative dims), the run
    refuses those feed shapes before allocating anything."""
    from tests.test_runtime import add_spec
    # the arena is 64 * x.0 - 192: negative below x.0 = 3
    exe = runtime.Executable(add_spec(arena_bytes=[[64, [["x.0", 1]]], [-192, []]]))
    ones = np.ones(4, np.float32)
    np.testing.assert_array_equal(exe.run([ones, ones])[0], 2 * ones)
    with pytest.raises(runtime.ShapeError, match="negative arena size -64"):
        exe.run([ones[:2], ones[:2]])
