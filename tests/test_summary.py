"""gc.summary: summary ops and FileWriter, read back with TensorBoard's own readers."""
import bisect
import glob
import importlib.util
import io
import os
import re
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import graphc as gc

HAVE_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
needs_tensorboard = pytest.mark.skipif(not HAVE_TENSORBOARD,
                                       reason="needs the summary extra (tensorboard)")


def _accumulator(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0,
                                                       "images": 0})
    acc.Reload()
    return acc


def _events(path):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    return list(EventFileLoader(str(path)).Load())


def _event_file(logdir):
    (path,) = glob.glob(os.path.join(str(logdir), "events.out.tfevents.*"))
    return path


def _decode_png(data):
    from PIL import Image  # a dependency of tensorboard: an independent PNG decoder
    return np.asarray(Image.open(io.BytesIO(data)))


# ------------------------------------------------------------------- scalars
@needs_tensorboard
def test_scalars_over_steps_read_back_by_tensorboard(tmp_path):
    x = gc.placeholder(gc.float32, [None], name="x")
    with gc.name_scope("train"):
        loss = gc.summary.scalar("loss", gc.reduce_mean(x))
    gc.summary.scalar("loss sum", gc.reduce_sum(x), family="totals")
    merged = gc.summary.merge_all()
    assert loss.dtype == gc.string and loss.shape == gc.TensorShape([])
    assert gc.get_collection(gc.GraphKeys.SUMMARIES)[0] is loss
    writer = gc.summary.FileWriter(str(tmp_path), gc.get_default_graph())
    with gc.Session() as sess:
        for step in range(7):
            data = np.arange(3, dtype=np.float32) * step
            summary = sess.run(merged, {x: data})
            assert isinstance(summary, bytes)
            writer.add_summary(summary, global_step=step)
    writer.close()
    acc = _accumulator(tmp_path)
    assert sorted(acc.Tags()["scalars"]) == ["totals/totals/loss_sum", "train/loss"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == \
        [(s, float(s)) for s in range(7)]
    assert [e.value for e in acc.Scalars("totals/totals/loss_sum")] == \
        [3.0 * s for s in range(7)]
    assert all(e.wall_time > 1e9 for e in acc.Scalars("train/loss"))


@needs_tensorboard
def test_manual_summary_proto_and_add_event(tmp_path):
    """Tutorials write values computed in Python with a hand-built Summary proto."""
    with gc.summary.FileWriter(str(tmp_path)) as writer:
        for step, acc in enumerate([0.5, 0.75]):
            writer.add_summary(gc.summary.Summary(value=[
                gc.summary.Summary.Value(tag="accuracy", simple_value=acc)]), step)
        writer.add_event(gc.summary.Event(step=9, summary=gc.summary.Summary(value=[
            gc.summary.Summary.Value(tag="accuracy", simple_value=1.0)])))
    assert [(e.step, e.value) for e in _accumulator(tmp_path).Scalars("accuracy")] == \
        [(0, 0.5), (1, 0.75), (9, 1.0)]


@needs_tensorboard
@pytest.mark.parametrize("shape", [[3], [None], [1, 1], None])
def test_scalar_of_a_non_scalar_is_rejected(shape):
    x = gc.placeholder(gc.float32, shape)
    if shape is None:  # unknown rank: caught when run
        s = gc.summary.scalar("s", x)
        with gc.Session() as sess, pytest.raises(gc.errors.InvalidArgumentError,
                                                  match="not the same shape"):
            sess.run(s, {x: [1.0, 2.0]})
    else:
        with pytest.raises(ValueError, match="not the same shape"):
            gc.summary.scalar("s", x)


@needs_tensorboard
def test_summary_ops_reject_strings_and_bools():
    with pytest.raises(TypeError):
        gc.summary.scalar("b", gc.constant(True))
    with pytest.raises(TypeError):
        gc.summary.histogram("b", gc.constant([True]))


# ------------------------------------------------------------------ histograms
def _tf_default_limits():
    pos, v = [], 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    pos.append(sys.float_info.max)
    return [-p for p in pos[::-1]] + [0.0] + pos


def _expected_histogram(values):
    """TF's Histogram: bucket b holds limit[b-1] <= v < limit[b]; then runs of empty
    buckets are merged into one whose limit is the run's last limit."""
    limits = _tf_default_limits()
    counts = [0] * len(limits)
    for v in values:
        counts[bisect.bisect_right(limits, v)] += 1
    out, i = [], 0
    while i < len(limits):
        end, count, j = limits[i], counts[i], i + 1
        while count == 0 and j < len(limits) and counts[j] == 0:
            end, count, j = limits[j], counts[j], j + 1
        out.append((end, count))
        i = j
    return out


@needs_tensorboard
@pytest.mark.parametrize("values", [[1.0], [-3.5, 0.0, 0.0, 2.0, 2.01, 1e5],
                                    list(np.linspace(-7, 7, 101))])
def test_histogram_has_tf_default_buckets(tmp_path, values):
    x = gc.placeholder(gc.float64, [None])
    h = gc.summary.histogram("weights", x)
    with gc.Session() as sess, gc.summary.FileWriter(str(tmp_path)) as writer:
        writer.add_summary(sess.run(h, {x: values}), 3)
    (event,) = _accumulator(tmp_path).Histograms("weights")
    hv = event.histogram_value
    assert event.step == 3
    assert (hv.min, hv.max, hv.num) == (min(values), max(values), len(values))
    np.testing.assert_allclose([hv.sum, hv.sum_squares],
                               [sum(values), sum(v * v for v in values)], atol=1e-9)
    assert list(zip(hv.bucket_limit, hv.bucket)) == _expected_histogram(values)


@needs_tensorboard
def test_histogram_of_ints_and_matrices_and_nan():
    x = gc.placeholder(gc.int32, [2, 3])
    y = gc.placeholder(gc.float32, [None])
    hx, hy = gc.summary.histogram("ints", x), gc.summary.histogram("floats", y)
    with gc.Session() as sess:
        proto = gc.summary.Summary.FromString(sess.run(hx, {x: [[1, 2, 3], [4, 5, 6]]}))
        assert proto.value[0].histo.num == 6 and proto.value[0].histo.sum == 21
        with pytest.raises(gc.errors.InvalidArgumentError, match="Nan in summary histogram"):
            sess.run(hy, {y: [1.0, np.nan]})


# ---------------------------------------------------------------------- images
@needs_tensorboard
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_uint8_images_round_trip_as_png(tmp_path, channels):
    rng = np.random.default_rng(channels)
    images = rng.integers(0, 256, size=(5, 7, 9, channels), dtype=np.uint8)
    x = gc.placeholder(gc.uint8, [None, 7, 9, channels])
    s = gc.summary.image("pics", x, max_outputs=2)
    with gc.Session() as sess, gc.summary.FileWriter(str(tmp_path)) as writer:
        writer.add_summary(sess.run(s, {x: images}), 1)
    acc = _accumulator(tmp_path)
    assert sorted(acc.Tags()["images"]) == ["pics/image/0", "pics/image/1"]
    for i in range(2):
        (event,) = acc.Images(f"pics/image/{i}")
        assert (event.width, event.height, event.step) == (9, 7, 1)
        decoded = _decode_png(event.encoded_image_string)
        np.testing.assert_array_equal(decoded.reshape(images[i].shape), images[i])


@needs_tensorboard
def test_float_images_are_rescaled_as_tf_does():
    pos = np.array([[[[0.0], [0.5]], [[1.0], [2.0]]]], np.float32)        # max -> 255
    mixed = np.array([[[[-2.0], [0.0]], [[1.0], [np.nan]]]], np.float32)  # 0 -> 128
    x = gc.placeholder(gc.float32, [1, 2, 2, 1])
    s = gc.summary.image("one", x)  # max_outputs=3 but a batch of 1
    with gc.Session() as sess:
        decode = [gc.summary.Summary.FromString(sess.run(s, {x: img})) for img in (pos, mixed)]
    assert [v.tag for v in decode[0].value] == ["one/image/0"]
    got_pos = _decode_png(decode[0].value[0].image.encoded_image_string)
    got_mixed = _decode_png(decode[1].value[0].image.encoded_image_string)
    np.testing.assert_array_equal(got_pos, np.floor(pos[0, ..., 0] * 255 / 2.0))
    # scale 127/2: -2 -> 1, 0 -> 128, 1 -> 191; NaN -> the red channel of bad_color
    np.testing.assert_array_equal(got_mixed, [[1, 128], [191, 255]])


@needs_tensorboard
def test_single_image_tag_and_bad_shapes():
    x = gc.placeholder(gc.float32, [4, 3, 3, 3])
    summary = gc.summary.image("img", x, max_outputs=1)
    with gc.Session() as sess:
        proto = gc.summary.Summary.FromString(sess.run(summary, {x: np.ones([4, 3, 3, 3])}))
    assert [v.tag for v in proto.value] == ["img/image"]
    assert proto.value[0].image.colorspace == 3
    for bad in ([2, 3, 3, 2], [3, 3, 3]):
        with pytest.raises(ValueError, match="4-D with last dim 1, 3, or 4"):
            gc.summary.image("bad", gc.placeholder(gc.float32, bad))
    with pytest.raises(TypeError):
        gc.summary.image("bad", gc.placeholder(gc.int32, [1, 2, 2, 1]))


# ----------------------------------------------------------------------- merge
@needs_tensorboard
def test_merge_concatenates_and_rejects_duplicate_tags():
    a = gc.summary.scalar("a", gc.constant(1.0), collections=[])
    b = gc.summary.scalar("b", gc.constant(2.0), collections=["mine"])
    assert gc.summary.merge_all() is None
    assert gc.get_collection("mine") == [b]
    merged = gc.summary.merge([a, b], name="both")
    dup = gc.summary.merge([a, a])
    assert merged.op.name == "both/both" and dup.op.name == "Merge/MergeSummary"
    with gc.Session() as sess:
        proto = gc.summary.Summary.FromString(sess.run(merged))
        assert [(v.tag, v.simple_value) for v in proto.value] == [("a", 1.0), ("b", 2.0)]
        with pytest.raises(gc.errors.InvalidArgumentError, match="Duplicate tag a"):
            sess.run(dup)
    assert gc.summary.merge_all("mine").op.type == "MergeSummary"


# ----------------------------------------------------------------------- graph
@needs_tensorboard
def test_graph_is_written_with_names_inputs_and_attrs(tmp_path):
    x = gc.placeholder(gc.float32, [None, 3], name="x")
    w = gc.constant(np.ones([3, 2], np.float32), name="w")
    big = gc.constant(np.zeros([100, 100], np.float32), name="big")
    with gc.control_dependencies([big.op]):
        y = gc.matmul(x, w, name="y")
    parts = gc.split(y, 2, axis=1, name="parts")
    out = gc.identity(parts[1], name="out")
    gc.summary.FileWriter(str(tmp_path), graph=gc.get_default_graph()).close()
    graph = _accumulator(tmp_path).Graph()
    nodes = {n.name: n for n in graph.node}
    assert set(op.name for op in gc.get_default_graph().get_operations()) == set(nodes)
    assert nodes["y"].op == "MatMul" and list(nodes["y"].input) == ["x", "w", "^big"]
    assert list(nodes["out"].input) == [parts[1].op.name + ":1"]
    assert nodes["x"].attr["dtype"].type == 1  # DT_FLOAT
    assert [d.size for d in nodes["x"].attr["shape"].shape.dim] == [-1, 3]
    value = nodes["w"].attr["value"].tensor
    assert [d.size for d in value.tensor_shape.dim] == [3, 2]
    np.testing.assert_array_equal(np.frombuffer(value.tensor_content, "<f4"), np.ones(6))
    assert "value" not in nodes["big"].attr  # beyond the size cap
    assert [d.size for d in nodes["big"].attr["_output_shapes"].list.shape[0].dim] == [100, 100]
    assert len(nodes["parts"].attr["_output_shapes"].list.shape) == 2
    assert out.op.name == "out"


@needs_tensorboard
def test_add_graph_later_and_graph_def_proto(tmp_path):
    g = gc.Graph()
    with g.as_default():
        gc.add(gc.constant(1), gc.constant(2), name="sum")
    from graphc.summary.graph_def import graph_def
    with gc.summary.FileWriter(str(tmp_path)) as writer:
        writer.add_graph(g, global_step=4)
    events = _events(_event_file(tmp_path))
    assert events[0].file_version == "brain.Event:2"
    assert events[1].step == 4 and events[1].graph_def == graph_def(g).SerializeToString()
    assert "sum" in [n.name for n in _accumulator(tmp_path).Graph().node]


# ---------------------------------------------------------- files, flush, close
@needs_tensorboard
def test_event_file_name_and_logdir_creation(tmp_path):
    logdir = tmp_path / "runs" / "a"
    first = gc.summary.FileWriter(str(logdir))
    second = gc.summary.FileWriter(str(logdir), filename_suffix=".v2")
    first.close(), second.close()
    names = sorted(os.listdir(logdir))
    host = re.escape(socket.gethostname())
    assert len(names) == 2 and first.get_logdir() == str(logdir)
    assert re.fullmatch(rf"events\.out\.tfevents\.\d{{10}}\.{host}", names[0])
    assert re.fullmatch(rf"events\.out\.tfevents\.\d{{10}}\.{host}\.v2", names[1])


@needs_tensorboard
def test_flush_makes_events_readable_and_close_stops_writing(tmp_path):
    writer = gc.summary.FileWriter(str(tmp_path), flush_secs=1000)
    path = _event_file(tmp_path)
    proto = gc.summary.Summary(value=[gc.summary.Summary.Value(tag="t", simple_value=1.0)])
    writer.add_summary(proto, 1)
    assert len(_events(path)) == 1  # only the file-version event is on disk
    writer.flush()
    assert [e.step for e in _events(path)] == [0, 1]
    writer.add_summary(proto.SerializeToString(), 2)
    writer.close()
    writer.add_summary(proto, 3)  # dropped after close, as in TF1
    writer.flush()
    assert [e.step for e in _events(path)] == [0, 1, 2]
    writer.reopen()
    writer.add_summary(proto, 4)
    writer.close()
    files = sorted(glob.glob(os.path.join(str(tmp_path), "events.*")))
    assert len(files) == 2 and [e.step for e in _events(files[1])] == [0, 4]


@needs_tensorboard
def test_max_queue_flushes_automatically(tmp_path):
    writer = gc.summary.FileWriter(str(tmp_path), max_queue=2, flush_secs=1000)
    for step in range(4):
        writer.add_summary(gc.summary.Summary(), step)
    assert [e.step for e in _events(_event_file(tmp_path))] == [0, 0, 1, 2, 3]
    writer.close()


@needs_tensorboard
def test_add_summary_rejects_non_summaries(tmp_path):
    with gc.summary.FileWriter(str(tmp_path)) as writer:
        with pytest.raises(TypeError):
            writer.add_summary(3.0)
        with pytest.raises(TypeError):
            writer.add_graph(None)


# ------------------------------------------------------- tensorboard missing
def test_without_tensorboard_import_works_and_summaries_name_the_extra():
    script = textwrap.dedent("""
        import sys

        class BlockTensorboard:
            def find_spec(self, name, path=None, target=None):
                if name == "tensorboard" or name.startswith("tensorboard."):
                    raise ImportError("No module named " + repr(name))

        sys.meta_path.insert(0, BlockTensorboard())
        import graphc as gc
        assert not any(m.startswith("tensorboard") for m in sys.modules)
        x = gc.constant(1.0)
        for use in (lambda: gc.summary.scalar("s", x), lambda: gc.summary.FileWriter("d"),
                    lambda: gc.summary.Summary):
            try:
                use()
            except ImportError as e:
                assert "pip install graphc[summary]" in str(e), str(e)
            else:
                raise AssertionError("no ImportError")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@needs_tensorboard
def test_add_run_metadata(tmp_path):
    """TF1's FileWriter.add_run_metadata: a TaggedRunMetadata event TensorBoard lists under
    its tag (graphc's RunMetadata has no step stats: an empty trace), each tag once."""
    x = gc.placeholder(gc.float32, [2])
    meta = gc.RunMetadata()
    with gc.Session() as sess:
        sess.run(x * 2.0, {x: [1.0, 2.0]}, options=gc.RunOptions(), run_metadata=meta)
    writer = gc.summary.FileWriter(str(tmp_path))
    writer.add_run_metadata(meta, "step1", global_step=1)
    with pytest.raises(ValueError, match="already used"):
        writer.add_run_metadata(meta, "step1")
    writer.close()
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event
    raw = [Event.FromString(r) for r in RawEventFileLoader(_event_file(tmp_path)).Load()]
    tagged = [e for e in raw if e.HasField("tagged_run_metadata")]
    assert [(e.step, e.tagged_run_metadata.tag) for e in tagged] == [(1, "step1")]


# ------------------------------------------------------------------------ audio
def _decode_wav(data):
    import wave  # the standard library's reader: independent of graphc's encoder
    with wave.open(io.BytesIO(data)) as w:
        frames = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        return w.getframerate(), w.getnchannels(), frames.reshape(-1, w.getnchannels())


def test_audio_summary_encodes_16_bit_wav_clips():
    rng = np.random.RandomState(0)
    clips = rng.uniform(-1.2, 1.2, size=(3, 7, 2)).astype(np.float32)  # some out of range
    clips[0, 0] = [0.5 / 32768, -0.5 / 32768]  # halves round away from zero
    x = gc.placeholder(gc.float32, [None, None, 2])
    summary = gc.summary.audio("speech", x, 8000, max_outputs=2)
    with gc.Session() as sess:
        values = gc.Summary.FromString(sess.run(summary, {x: clips})).value
    assert [v.tag for v in values] == ["speech/audio/0", "speech/audio/1"]
    for clip, value in zip(clips, values):
        audio = value.audio
        assert (audio.sample_rate, audio.num_channels, audio.length_frames,
                audio.content_type) == (8000.0, 2, 7, "audio/wav")
        rate, channels, frames = _decode_wav(audio.encoded_audio_string)
        scaled = clip.astype(np.float64) * 32768
        expected = np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + 0.5), -32768, 32767)
        assert (rate, channels) == (8000, 2)
        np.testing.assert_array_equal(frames, expected)
    assert _decode_wav(values[0].audio.encoded_audio_string)[2][0].tolist() == [1, -1]


def test_audio_summary_of_mono_frames_and_bad_input():
    mono = np.linspace(-1, 1, 5, dtype=np.float32).reshape(1, 5)
    summary = gc.summary.audio("a", mono, 100.0, max_outputs=1)
    with gc.Session() as sess:
        (value,) = gc.Summary.FromString(sess.run(summary)).value
    assert value.tag == "a/audio" and value.audio.num_channels == 1
    assert _decode_wav(value.audio.encoded_audio_string)[2].ravel().tolist() == [
        -32768, -16384, 0, 16384, 32767]
    with pytest.raises(TypeError, match="expects float32 audio"):
        gc.summary.audio("b", mono.astype(np.float64), 100.0)
    with pytest.raises(ValueError, match="3-D \\[batch_size, frames, channels\\] or 2-D"):
        gc.summary.audio("c", np.zeros(4, np.float32), 100.0)
