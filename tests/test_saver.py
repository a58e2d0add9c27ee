"""Saver and checkpoints: round trips, step suffixes, max_to_keep, the state file,
the file format, and the errors for missing or damaged checkpoints."""
import json
import os
import re
import struct

import numpy as np
import pytest

import graphc as gc
from graphc.train import checkpoint_file

VALUES = {
    "w": np.arange(21, dtype=np.float32).reshape(3, 7) / 7,
    "b": np.array([1.5], np.float64),
    "n": np.array([[3, -4]], np.int64),
    "flag": np.array(True),
    "scope/h": np.full([1, 1, 5], 0.25, np.float16),
}


def _make_vars():
    """Variables named as VALUES keys, initialized to zeros of their dtype."""
    out = {}
    for name, value in VALUES.items():
        scope, _, local = name.rpartition("/")
        with gc.name_scope(scope or None):
            out[name] = gc.Variable(np.zeros_like(value), name=local)
    return out


def _assign_values(sess, variables):
    for name, v in variables.items():
        v.load(VALUES[name], sess)


def _check_values(sess, variables):
    for name, v in variables.items():
        got = sess.run(v)
        assert np.asarray(got).dtype == VALUES[name].dtype
        np.testing.assert_array_equal(got, VALUES[name])


@pytest.mark.parametrize("initialize_first", [True, False])
def test_round_trip_into_fresh_session_and_graph(tmp_path, initialize_first):
    prefix = str(tmp_path / "model.ckpt")
    variables = _make_vars()
    saver = gc.train.Saver()
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        _assign_values(sess, variables)
        assert saver.save(sess, prefix) == prefix
    assert os.path.isfile(prefix + ".gcckpt") and gc.train.checkpoint_exists(prefix)

    with gc.Graph().as_default():
        fresh = _make_vars()
        restorer = gc.train.Saver()
        with gc.Session() as sess:
            if initialize_first:
                sess.run(gc.global_variables_initializer())
            restorer.restore(sess, prefix)
            _check_values(sess, fresh)


def test_var_list_as_list_and_dict_with_renames(tmp_path):
    prefix = str(tmp_path / "m")
    a = gc.Variable([1.0, 2.0], name="a")
    b = gc.Variable([3.0], name="b")
    gc.Variable([9.0], name="not_saved")
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        gc.train.Saver([a]).save(sess, prefix + "_list")
        gc.train.Saver({"renamed/a": a, "bee": b}).save(sess, prefix + "_dict")
    assert gc.train.list_variables(prefix + "_list") == [("a", [2])]
    assert gc.train.list_variables(prefix + "_dict") == [("bee", [1]), ("renamed/a", [2])]
    np.testing.assert_array_equal(gc.train.load_variable(prefix + "_dict", "renamed/a"),
                                  [1.0, 2.0])

    with gc.Graph().as_default():
        x = gc.Variable([0.0, 0.0], name="x")
        with gc.Session() as sess:
            gc.train.Saver({"renamed/a": x}).restore(sess, prefix + "_dict")
            np.testing.assert_array_equal(sess.run(x), [1.0, 2.0])


def test_global_step_suffix_state_file_and_latest_checkpoint(tmp_path):
    d = str(tmp_path)
    w = gc.Variable([0.0], name="w")
    gs = gc.train.get_or_create_global_step()
    step = gc.assign_add(gs, 1)
    saver = gc.train.Saver()
    assert gc.train.latest_checkpoint(d) is None
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        assert saver.save(sess, os.path.join(d, "model"), global_step=7) == \
            os.path.join(d, "model-7")
        sess.run(step)
        path = saver.save(sess, os.path.join(d, "model"), global_step=gs)  # a variable
    assert path == os.path.join(d, "model-1")
    assert gc.train.latest_checkpoint(d) == path
    state = gc.train.get_checkpoint_state(d)
    assert state.all_model_checkpoint_paths == [os.path.join(d, "model-7"), path]
    with open(os.path.join(d, "checkpoint")) as f:
        assert f.read().splitlines()[0] == f'model_checkpoint_path: "{path}"'
    assert gc.train.list_variables(d) == [("global_step", []), ("w", [1])]
    del w


def test_pad_step_number_and_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkdir("ckpts")
    gc.Variable(1.0, name="v")
    saver = gc.train.Saver(pad_step_number=True)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        path = saver.save(sess, "ckpts/model", global_step=12)
    assert path == "ckpts/model-00000012"
    with open("ckpts/checkpoint") as f:
        assert '"model-00000012"' in f.read()  # relative to the directory
    assert gc.train.latest_checkpoint("ckpts") == os.path.join("ckpts", "model-00000012")


def test_max_to_keep_deletes_oldest(tmp_path):
    d = str(tmp_path)
    gc.Variable([1.0], name="v")
    saver = gc.train.Saver(max_to_keep=2)
    keep_all = gc.train.Saver(max_to_keep=None)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        paths = [saver.save(sess, os.path.join(d, "m"), global_step=s) for s in range(4)]
        assert saver.last_checkpoints == paths[2:]
        assert [gc.train.checkpoint_exists(p) for p in paths] == [False, False, True, True]
        assert gc.train.get_checkpoint_state(d).all_model_checkpoint_paths == paths[2:]
        saver.save(sess, os.path.join(d, "m"), global_step=3)  # same name: kept once
        assert saver.last_checkpoints == [paths[2], paths[3]]
        others = [keep_all.save(sess, os.path.join(d, "k"), global_step=s) for s in range(3)]
    assert all(gc.train.checkpoint_exists(p) for p in others)
    assert keep_all.last_checkpoints == []
    assert sorted(f for f in os.listdir(d) if ".tmp" in f) == []  # no temp files left


def test_recover_last_checkpoints(tmp_path):
    d = str(tmp_path)
    gc.Variable([1.0], name="v")
    saver = gc.train.Saver(max_to_keep=2)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        paths = [saver.save(sess, os.path.join(d, "m"), global_step=s) for s in range(2)]
        again = gc.train.Saver(max_to_keep=2)
        again.recover_last_checkpoints(paths + [os.path.join(d, "gone")])
        assert again.last_checkpoints == paths
        again.save(sess, os.path.join(d, "m"), global_step=5)
    assert not gc.train.checkpoint_exists(paths[0])


def test_restore_missing_checkpoint_raises_not_found(tmp_path):
    gc.Variable([1.0], name="v")
    saver = gc.train.Saver()
    with gc.Session() as sess:
        with pytest.raises(gc.errors.NotFoundError, match="not a valid checkpoint"):
            saver.restore(sess, str(tmp_path / "nothing"))
        with pytest.raises(ValueError):  # TF1 raises ValueError here: both work
            saver.restore(sess, str(tmp_path / "nothing"))
        with pytest.raises(ValueError, match="None"):
            saver.restore(sess, None)


def test_restore_missing_variable_raises_not_found_and_changes_nothing(tmp_path):
    prefix = str(tmp_path / "m")
    a = gc.Variable([1.0], name="a")
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        gc.train.Saver().save(sess, prefix)
    with gc.Graph().as_default():
        a2 = gc.Variable([5.0], name="a")
        extra = gc.Variable([2.0], name="extra")
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            with pytest.raises(gc.errors.NotFoundError, match="Key extra not found"):
                gc.train.Saver().restore(sess, prefix)
            assert sess.run(a2)[0] == 5.0 and sess.run(extra)[0] == 2.0
    del a


@pytest.mark.parametrize("shape,dtype,match", [
    ([2], gc.float32, r"lhs shape= \[2\] rhs shape= \[3\]"),
    ([3, 1], gc.float32, r"lhs shape= \[3,1\] rhs shape= \[3\]"),
    ([3], gc.float64, "expected dtype float64 does not equal original dtype float32"),
])
def test_restore_mismatch_raises_invalid_argument(tmp_path, shape, dtype, match):
    prefix = str(tmp_path / "m")
    gc.Variable(np.ones(3, np.float32), name="v")
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        gc.train.Saver().save(sess, prefix)
    with gc.Graph().as_default():
        gc.Variable(np.zeros(shape, dtype.np), name="v")
        with gc.Session() as sess:
            with pytest.raises(gc.errors.InvalidArgumentError, match=match):
                gc.train.Saver().restore(sess, prefix)


def _saved_file(tmp_path):
    prefix = str(tmp_path / "m")
    gc.Variable(np.arange(7.0), name="v")
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        gc.train.Saver().save(sess, prefix)
    return prefix, prefix + ".gcckpt"


@pytest.mark.parametrize("damage", ["magic", "truncate_header", "truncate_data", "flip_data",
                                    "bad_json", "empty"])
def test_damaged_file_raises_data_loss(tmp_path, damage):
    prefix, path = _saved_file(tmp_path)
    raw = bytearray(open(path, "rb").read())
    header_len = struct.unpack("<Q", raw[8:16])[0]
    if damage == "magic":
        raw[0:4] = b"PK\x03\x04"
    elif damage == "truncate_header":
        raw = raw[:16 + header_len // 2]
    elif damage == "truncate_data":
        raw = raw[:-3]
    elif damage == "flip_data":
        raw[-5] ^= 0xFF
    elif damage == "bad_json":
        raw[16] = ord("[")
    else:
        raw = b""
    with open(path, "wb") as f:
        f.write(raw)
    with gc.Session() as sess:
        with pytest.raises(gc.errors.DataLossError, match="Unable to read checkpoint"):
            gc.train.Saver().restore(sess, prefix)


def test_file_format_is_documented_header_plus_raw_little_endian(tmp_path):
    prefix, path = _saved_file(tmp_path)
    raw = open(path, "rb").read()
    assert raw[:8] == b"\x89GCCKPT\n"
    header_len = struct.unpack("<Q", raw[8:16])[0]
    header = json.loads(raw[16:16 + header_len])
    (entry,) = header["tensors"]
    assert entry["name"] == "v" and entry["dtype"] == "float64" and entry["shape"] == [7]
    assert entry["offset"] % 64 == 0
    data = np.frombuffer(raw[entry["offset"]:entry["offset"] + entry["nbytes"]], "<f8")
    np.testing.assert_array_equal(data, np.arange(7.0))


def test_reader_api_and_direct_write(tmp_path):
    prefix = str(tmp_path / "direct")
    checkpoint_file.write_checkpoint(prefix, {"empty": (np.zeros([0, 3], np.float32),
                                                        gc.float32),
                                              "s": (np.int32(4), gc.int32)})
    reader = gc.train.NewCheckpointReader(prefix)
    assert reader.get_variable_to_shape_map() == {"empty": [0, 3], "s": []}
    assert reader.get_variable_to_dtype_map() == {"empty": gc.float32, "s": gc.int32}
    assert reader.get_tensor("s") == 4 and reader.get_tensor("empty").shape == (0, 3)
    with pytest.raises(gc.errors.NotFoundError, match="Key nope not found"):
        reader.get_tensor("nope")
    with pytest.raises(gc.errors.NotFoundError):
        gc.train.NewCheckpointReader(str(tmp_path / "absent"))


def test_saving_uninitialized_variable_fails(tmp_path):
    gc.Variable([1.0], name="v")
    with gc.Session() as sess:
        with pytest.raises(gc.errors.FailedPreconditionError, match="uninitialized value v"):
            gc.train.Saver().save(sess, str(tmp_path / "m"))
    assert os.listdir(tmp_path) == []


def test_saver_errors(tmp_path):
    v = gc.Variable([1.0], name="v")
    with pytest.raises(ValueError, match="same name"):
        gc.train.Saver([v, v])
    with pytest.raises(TypeError, match="not a Variable"):
        gc.train.Saver([gc.constant(1.0)])
    with gc.Graph().as_default():
        with pytest.raises(ValueError, match="No variables to save"):
            gc.train.Saver()
        assert gc.train.Saver(allow_empty=True).save(gc.Session(), str(tmp_path / "x")) is None
    saver = gc.train.Saver()
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        with pytest.raises(ValueError, match="Parent directory"):
            saver.save(sess, str(tmp_path / "no_such_dir" / "m"))
        with pytest.raises(TypeError, match="must be a Session"):
            saver.save("not a session", str(tmp_path / "m"))


def test_corrupt_state_file(tmp_path):
    with open(tmp_path / "checkpoint", "w") as f:
        f.write("model_checkpoint_path: not quoted\n")
    with pytest.raises(gc.errors.DataLossError, match="Unable to parse checkpoint state"):
        gc.train.latest_checkpoint(str(tmp_path))


def test_optimizer_slots_round_trip_resumes_training(tmp_path):
    prefix = str(tmp_path / "train")

    def build():
        w = gc.Variable([2.0, -1.0], name="w")
        gs = gc.train.get_or_create_global_step()
        train = gc.train.AdamOptimizer(0.1).minimize(gc.reduce_sum(gc.square(w)),
                                                     global_step=gs)
        return w, train, gc.train.Saver()

    w, train, saver = build()
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for _ in range(3):
            sess.run(train)
        saver.save(sess, prefix, global_step=gc.train.get_global_step())
        sess.run(train)
        after_four = sess.run(w)
    with gc.Graph().as_default():
        w, train, saver = build()
        with gc.Session() as sess:
            saver.restore(sess, gc.train.latest_checkpoint(str(tmp_path)))
            assert sess.run(gc.train.get_global_step()) == 3
            sess.run(train)
            np.testing.assert_allclose(sess.run(w), after_four, rtol=1e-6)


def test_keep_checkpoint_every_n_hours_spares_old_checkpoints(tmp_path):
    d = str(tmp_path)
    gc.Variable([1.0], name="v")
    # a 3.6 microsecond period: every checkpoint is old enough to be kept for good
    saver = gc.train.Saver(max_to_keep=1, keep_checkpoint_every_n_hours=1e-9)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        paths = [saver.save(sess, os.path.join(d, "m"), global_step=s) for s in range(3)]
    assert saver.last_checkpoints == paths[-1:]
    assert all(gc.train.checkpoint_exists(p) for p in paths)


def _with_header(path, edit=None, text=None):
    """Rewrites the checkpoint's header (edit(header dict), or raw `text`); the data stays
    where it was when the header keeps its length or shrinks."""
    raw = open(path, "rb").read()
    header_len = struct.unpack("<Q", raw[8:16])[0]
    if text is None:
        header = json.loads(raw[16:16 + header_len])
        edit(header)
        text = json.dumps(header)
    new = text.encode()
    new += b" " * max(0, header_len - len(new))
    with open(path, "wb") as f:
        f.write(raw[:8] + struct.pack("<Q", len(new)) + new + raw[16 + header_len:])


def _entry(h):
    return h["tensors"][0]


@pytest.mark.parametrize("damage", [
    lambda h: _entry(h).update(offset=-64),                      # OSError from seek before
    lambda h: _entry(h).update(shape=[-7, -1]),                  # ValueError from reshape
    lambda h: _entry(h).update(shape=[2 ** 62, 2 ** 62, 4]),     # the product wraps in int64
    lambda h: _entry(h).update(offset=16),                       # data inside the header
    lambda h: _entry(h).update(dtype="string"),
    "deep", "duplicate",
])
def test_lying_checkpoint_headers_raise_data_loss(tmp_path, damage):
    prefix, path = _saved_file(tmp_path)
    header_len = struct.unpack("<Q", open(path, "rb").read()[8:16])[0]
    if damage == "deep":  # RecursionError inside json before
        _with_header(path, text="[" * 100000 + "]" * 100000)
    elif damage == "duplicate":  # json keeps the last of two keys: refuse the ambiguity
        _with_header(path, text=open(path, "rb").read()[16:16 + header_len].decode().replace(
            '"offset":', '"offset": 0, "offset":', 1))
    else:
        _with_header(path, damage)
    with pytest.raises(gc.errors.DataLossError, match="Unable to read checkpoint"):
        checkpoint_file.CheckpointReader(prefix)
    with gc.Session() as sess:
        with pytest.raises(gc.errors.DataLossError, match="Unable to read checkpoint"):
            gc.train.Saver().restore(sess, prefix)


_KILLED_SAVE = """
import os, signal, sys
sys.path.insert(0, {root!r})
import numpy as np
import graphc as gc
gc.Variable(np.arange(5.0), name="v")
with gc.Session() as sess:
    sess.run(gc.global_variables_initializer())
    saver = gc.train.Saver(write_version={version})
    saver.save(sess, {prefix!r})
    os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed before the rename
    saver.save(sess, {prefix!r}, global_step=1)
"""


@pytest.mark.parametrize("version", ["None", "gc.train.SaverDef.V2"],
                         ids=["graphc_format", "tf_format"])
def test_next_save_removes_temp_files_of_a_killed_save(tmp_path, version):
    """Both formats: graphc's one file, and TF's index and data files (SaverDef.V2)."""
    import signal
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    prefix = str(tmp_path / "model.ckpt")
    script = _KILLED_SAVE.format(root=root, prefix=prefix, version=version)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = [f for f in os.listdir(tmp_path) if ".tmp" in f]
    assert left, "the killed save left no temporary file to clean up"
    # a live writer's temp file (this process) and a user's file are not touched
    live = tmp_path / f"other.gcckpt.tmp{os.getpid()}.abc"
    live.write_bytes(b"in progress")
    dead_pid = re.search(r"\.tmp([0-9]+)", left[0]).group(1)  # the killed writer's
    user = tmp_path / f"notes.tmp{dead_pid}"
    user.write_bytes(b"mine")
    v = gc.Variable(np.arange(3.0), name="w")
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        gc.train.Saver([v], write_version=eval(version)).save(sess, prefix, global_step=2)
    remaining = sorted(f for f in os.listdir(tmp_path) if ".tmp" in f)
    assert remaining == sorted([live.name, user.name])


def test_fuzzed_checkpoint_headers_raise_only_data_loss(tmp_path):
    """Random edits of every header leaf (deterministic): each damaged file reads back
    correctly or raises the clean DataLossError, never an exception from the reader."""
    import copy
    import random
    prefix, path = _saved_file(tmp_path)
    raw = open(path, "rb").read()
    header_len = struct.unpack("<Q", raw[8:16])[0]
    header = json.loads(raw[16:16 + header_len])
    values = [-1, -64, 0, 7, 2 ** 31, 2 ** 63, -(2 ** 63), 10 ** 30, "x", None, True, 1.5,
              [], {}, [-7], [1] * 40, "float128", "string", [[[]]]]

    def leaves(obj, where=()):
        items = obj.items() if isinstance(obj, dict) else \
            enumerate(obj) if isinstance(obj, list) else ()
        for k, v in items:
            yield from leaves(v, where + (k,))
        yield where
    rng = random.Random(11)
    outcomes = {"read": 0, "data_loss": 0}
    for _ in range(300):
        h = copy.deepcopy(header)
        where = rng.choice([p for p in leaves(h) if p])
        parent = h
        for key in where[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and rng.random() < 0.2:
            del parent[where[-1]]
        else:
            parent[where[-1]] = copy.deepcopy(rng.choice(values))
        _with_header(path, text=json.dumps(h))
        try:
            reader = checkpoint_file.CheckpointReader(prefix)
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
            outcomes["read"] += 1
        except gc.errors.DataLossError:
            outcomes["data_loss"] += 1
        with open(path, "wb") as f:
            f.write(raw)
    assert outcomes["data_loss"] > 150, outcomes
