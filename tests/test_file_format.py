"""The compiled file format (runtime/file_format.py) on hand-written specs: round trip,
clear errors for bad files, and a fuzz test (byte flips, truncations, hostile headers)."""
import copy
import hashlib
import json
import os
import random
import resource
import shutil
import struct
import tempfile
import time

import numpy as np
import pytest

import runtime
from runtime import file_format as ff
from tests.test_runtime import VARIABLE_IR, add_spec, make_spec, sym

X_DIMS = [sym("x.0")]
ADD_SIGNATURE = {
    "inputs": [{"name": "x", "tensor": "x:0", "dtype": "float32", "dims": X_DIMS},
               {"name": "y", "tensor": "y:0", "dtype": "float32", "dims": X_DIMS}],
    "outputs": [{"name": "z", "tensor": "add:0", "dtype": "float32", "dims": X_DIMS}]}
CONST = np.array([10, 20, 30, 40], np.float32)


def variable_spec():
    """v += x in place, w = x + c (c a constant blob); fetches v (a copy)."""
    return make_spec(
        VARIABLE_IR,
        feeds=[{"name": "x:0", "dtype": "float32", "dims": [4]}],
        fetches=[{"name": "v:0", "dtype": "float32", "dims": [4], "source": "variable",
                  "index": 0}],
        variables=[{"name": "v", "dtype": "float32", "dims": [4], "written": True,
                    "read": True},
                   {"name": "w", "dtype": "float32", "dims": [4], "written": True,
                    "read": False}],
        constants=[{"dtype": "float32", "shape": [4], "data": CONST.tobytes()}])


VAR_SIGNATURE = {
    "inputs": [{"name": "x", "tensor": "x:0", "dtype": "float32", "dims": [4]}],
    "outputs": [{"name": "v", "tensor": "v:0", "dtype": "float32", "dims": [4]}]}


@pytest.fixture
def add_file(tmp_path):
    return ff.write(str(tmp_path / "add.gcx"), ADD_SIGNATURE, [add_spec()])


@pytest.fixture
def var_file(tmp_path):
    return ff.write(str(tmp_path / "var.gcx"), VAR_SIGNATURE, [variable_spec()],
                    state={"v": np.array([1, 2, 3, 4], np.float32)})


def test_round_trip_runs(add_file):
    m = runtime.load(add_file)
    assert [i.name for i in m.inputs] == ["x", "y"] and m.outputs[0].name == "z"
    assert m.inputs[0].shape == (None,) and m.inputs[0].dtype == np.float32
    assert m.inputs[0].dims == "[x.0]"
    for n in (2, 7, 1001):
        x = np.arange(n, dtype=np.float32)
        out = m.run({"x": x, "y": np.full(n, 0.5, np.float32)})
        assert list(out) == ["z"]
        np.testing.assert_array_equal(out["z"], x + 0.5)
    assert "x: float32[x.0]" in repr(m)


def test_state_and_constants_round_trip(var_file):
    m = runtime.load(var_file)
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(m.run({"x": x})["v"], [2, 3, 4, 5])
    np.testing.assert_array_equal(m.run({"x": x})["v"], [3, 4, 5, 6])  # state carried
    np.testing.assert_array_equal(m.state["w"], x + CONST)
    f = ff.read(var_file)
    for entry in f.header["blobs"]:
        assert entry["offset"] % 64 == 0
    const = f.array(f.header["executables"][0]["constants"][0])
    np.testing.assert_array_equal(const, CONST)
    assert not const.flags.writeable  # read in place from the memory map
    assert runtime.load(var_file).state["v"].tolist() == [1, 2, 3, 4]  # file unchanged


def test_input_name_and_shape_errors(add_file):
    m = runtime.load(add_file)
    x = np.ones(3, np.float32)
    with pytest.raises(runtime.FeedError, match="missing input.*'y'.*model takes x"):
        m.run({"x": x})
    with pytest.raises(runtime.FeedError, match="unknown input.*'q'"):
        m.run({"x": x, "y": x, "q": x})
    with pytest.raises(runtime.ShapeError, match="input 'x' has shape \\[3, 1\\]"):
        m.run({"x": x[:, None], "y": x})
    with pytest.raises(runtime.ShapeError, match="compiled for"):
        m.run({"x": x, "y": np.ones(4, np.float32)})
    with pytest.raises(runtime.FeedError, match="must be float32"):
        m.run({"x": ["a", "b", "c"], "y": x})


def rewrite(path, data):
    with open(path, "wb") as f:
        f.write(data)


def with_header(data, header, version=ff.FORMAT_VERSION, header_size=None):
    """The file `data` with a new header (blobs kept) and a valid checksum."""
    _, _, _, old_size = ff.PREFIX.unpack_from(data, 0)
    rest = data[ff.PREFIX.size + old_size:-ff.CHECKSUM_BYTES]
    new = json.dumps(header, separators=(",", ":")).encode()
    pad = old_size - len(new)
    if pad >= 0:  # keep blob offsets valid: pad the header with spaces
        new += b" " * pad
    body = ff.PREFIX.pack(ff.MAGIC, version, 0, len(new) if header_size is None
                          else header_size) + new + rest
    return body + hashlib.sha256(body).digest()


def header_of(data):
    _, _, _, size = ff.PREFIX.unpack_from(data, 0)
    return json.loads(data[ff.PREFIX.size:ff.PREFIX.size + size])


@pytest.mark.parametrize("mutate, pattern", [
    (lambda d: b"NOTGRAPH" + d[8:], "bad magic"),
    (lambda d: d[:40], "truncated"),
    (lambda d: d[:-1], "checksum mismatch|truncated"),
    (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:], "checksum mismatch"),
    (lambda d: b"", "too short"),
    (lambda d: with_header(d, header_of(d), version=7), "format version 7 is newer"),
    (lambda d: with_header(d, header_of(d), header_size=1 << 62), "exceeds"),
    (lambda d: with_header(d, header_of(d), header_size=len(d)), "truncated"),
    (lambda d: with_header(d, dict(header_of(d), format="other")), "does not describe"),
    (lambda d: with_header(d, {**header_of(d), "blobs": [{"offset": 64, "nbytes": 1 << 60}]}),
     "blob 0.*outside"),
    (lambda d: with_header(d, {**header_of(d), "blobs": [{"offset": 65, "nbytes": 4}]}),
     "not 64-byte aligned"),
])
def test_bad_files_get_clear_errors(var_file, mutate, pattern):
    with open(var_file, "rb") as f:
        data = f.read()
    rewrite(var_file, mutate(data))
    with pytest.raises(ff.FileFormatError, match=pattern) as info:
        runtime.load(var_file)
    assert var_file in str(info.value)


def _mutated_header(data, edit):
    h = header_of(data)
    edit(h)
    return with_header(data, h)


@pytest.mark.parametrize("edit, pattern", [
    (lambda h: h["executables"][0]["constants"][0].update(dtype="object"), "unsupported dtype"),
    (lambda h: h["executables"][0]["constants"][0].update(shape=[1 << 40, 1 << 40]),
     "needs .* bytes"),
    (lambda h: h["state"][0].update(shape=[5]), "needs 20 bytes, blob 1 has 16"),
    (lambda h: h["executables"][0]["feeds"][0].update(dims=[[[1, [["nope", 1]]]]]),
     "unknown symbol"),
    (lambda h: h["executables"][0].update(arena_bytes=[[1, [["x", 10 ** 9]]]]), "integer"),
    (lambda h: h["executables"][0].update(llvm_ir=5), "'llvm_ir'"),
    (lambda h: h["executables"][0]["fetches"][0].update(index=9), "no variable 9"),
    (lambda h: h.update(state=[]), "variable v is read but the file stores no value"),
    (lambda h: h["executables"][0].update(format_version=2), "executable format version 2"),
    (lambda h: h["signature"]["inputs"].append(dict(h["signature"]["inputs"][0])),
     "duplicate input names"),
    (lambda h: h["executables"][0].update(llvm_ir="this is not LLVM"), "not valid LLVM IR"),
])
def test_inconsistent_headers(var_file, edit, pattern):
    with open(var_file, "rb") as f:
        rewrite(var_file, _mutated_header(f.read(), edit))
    with pytest.raises(ff.FileFormatError, match=pattern):
        runtime.load(var_file)


def test_target_mismatch(tmp_path):
    spec = add_spec()
    target = dict(spec["target"], features="+no-such-feature")
    spec["target"] = target
    path = ff.write(str(tmp_path / "t.gcx"), ADD_SIGNATURE, [spec], target=target)
    with pytest.raises(runtime.TargetMismatch, match="t.gcx.*lacks: no-such-feature"):
        runtime.load(path)
    assert ff.read(path).header["target"] == target  # tools can still read it


# ------------------------------------------------------------------ fuzz
def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, path + (i,))
    yield path


_ABSURD = [-1, 1 << 63, 10 ** 30, -(1 << 62), 0, 65, 2 ** 40, "x", None, True, 1.5, [],
           {}, [[1 << 62, [["x.0", 64]]]], [1] * 40, {"offset": 1}, "float128", "O"]


def _edit(header, rng):
    paths = list(_leaves(header))
    path = paths[rng.randrange(len(paths))]
    if not path:
        return
    parent = header
    for key in path[:-1]:
        parent = parent[key]
    action = rng.random()
    if action < 0.15 and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = copy.deepcopy(rng.choice(_ABSURD))


def test_fuzz_no_crash_hang_or_huge_allocation(var_file):
    with open(var_file, "rb") as f:
        original = f.read()
    if os.path.isdir("/dev/shm"):  # thousands of file writes: use memory when we can
        scratch = tempfile.mkdtemp(dir="/dev/shm")
        var_file = os.path.join(scratch, "fuzz.gcx")
    rng = random.Random(1234)
    header = header_of(original)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    outcomes = {"rejected": 0, "accepted": 0}
    accepted = []
    cases = []
    for _ in range(1500):  # random byte flips
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        cases.append(bytes(data))
    for _ in range(500):   # truncations
        cases.append(original[:rng.randrange(len(original))])
    for _ in range(2500):  # hostile headers with valid checksums
        h = copy.deepcopy(header)
        for _ in range(rng.randint(1, 3)):
            _edit(h, rng)
        cases.append(with_header(original, h))
    for _ in range(200):   # absurd sizes in the fixed prefix
        size = rng.choice([0, 1, len(original), 1 << 32, (1 << 64) - 1, rng.randrange(1 << 20)])
        body = original[:16] + struct.pack("<Q", size) + original[24:-32]
        cases.append(body + hashlib.sha256(body).digest())
    for data in cases:
        rewrite(var_file, data)
        try:
            ff.read(var_file)
        except ff.FileFormatError:
            outcomes["rejected"] += 1
        else:
            outcomes["accepted"] += 1
            accepted.append(data)
    for data in accepted[:15]:  # what passes the checks must also build, or fail cleanly
        rewrite(var_file, data)
        try:
            runtime.load(var_file).run({"x": np.ones(4, np.float32)})
        except runtime.RuntimeFailure:
            pass
    elapsed = time.perf_counter() - start
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    print(f"\nfuzz: {len(cases)} cases, {outcomes}, {elapsed:.1f} s, peak RSS +{grown_mb:.0f} MB")
    assert len(cases) >= 4000
    assert outcomes["rejected"] > 3000
    assert elapsed < 30
    assert grown_mb < 200
    if os.path.isdir("/dev/shm"):
        shutil.rmtree(scratch)
