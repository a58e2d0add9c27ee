"""TF1's file readers fed by string_input_producer queues (TextLineReader, WholeFileReader,
TFRecordReader, FixedLengthRecordReader) and tf.data.TextLineDataset, against TF1's
documented behaviour (keys "file:line" from 1, lines without "\\n"/"\\r\\n", empty lines
kept, OutOfRangeError at the end of the epochs)."""
import gzip

import numpy as np
import pytest

import graphc as gc
from graphc import errors


@pytest.fixture
def text_files(tmp_path):
    first = tmp_path / "a.txt"
    first.write_bytes(b"header\nalpha\r\nbeta\n\ngamma")  # no final newline
    second = tmp_path / "b.txt"
    second.write_bytes(b"header\nx\ny\n")
    return str(first), str(second)


def read_all(sess, fetches):
    out = []
    try:
        while True:
            out.append(sess.run(fetches))
    except errors.OutOfRangeError:
        return out


def started(sess):
    sess.run([gc.global_variables_initializer(), gc.local_variables_initializer()])
    coord = gc.train.Coordinator()
    return coord, gc.train.start_queue_runners(sess, coord)


def test_text_line_reader_keys_lines_and_header_skip(text_files):
    a, b = text_files
    queue = gc.train.string_input_producer([a, b], num_epochs=1, shuffle=False)
    reader = gc.TextLineReader(skip_header_lines=1)
    key, value = reader.read(queue)
    assert key.dtype == gc.string and value.shape.as_list() == []
    with gc.Session() as sess:
        coord, threads = started(sess)
        got = read_all(sess, [key, value])
        produced, completed = sess.run([reader.num_records_produced(),
                                        reader.num_work_units_completed()])
        coord.request_stop()
        coord.join(threads)
    assert got == [[f"{a}:2".encode(), b"alpha"], [f"{a}:3".encode(), b"beta"],
                   [f"{a}:4".encode(), b""], [f"{a}:5".encode(), b"gamma"],
                   [f"{b}:2".encode(), b"x"], [f"{b}:3".encode(), b"y"]]
    assert produced == 6 and completed == 2


def test_read_up_to_gives_a_short_last_batch(text_files):
    queue = gc.train.string_input_producer([text_files[1]], num_epochs=2, shuffle=False)
    keys, values = gc.TextLineReader().read_up_to(queue, 4)
    with gc.Session() as sess:
        coord, threads = started(sess)
        got = read_all(sess, values)
        coord.request_stop()
        coord.join(threads)
    assert [v.tolist() for v in got] == [[b"header", b"x", b"y", b"header"], [b"x", b"y"]]


def test_whole_file_reader_and_shuffled_epochs(text_files):
    queue = gc.train.string_input_producer(list(text_files), num_epochs=3, shuffle=True,
                                           seed=5)
    name, contents = gc.WholeFileReader().read(queue)
    with gc.Session() as sess:
        coord, threads = started(sess)
        got = read_all(sess, [name, contents])
        coord.request_stop()
        coord.join(threads)
    names = [n for n, _ in got]
    assert len(got) == 6
    for epoch in range(3):  # each pass holds every file once
        assert sorted(names[2 * epoch:2 * epoch + 2]) == sorted(f.encode() for f in text_files)
    with open(text_files[0], "rb") as f:
        assert dict(got)[text_files[0].encode()] == f.read()


def test_string_input_producer_of_nothing_is_an_error():
    with gc.Session() as sess:
        queue = gc.train.string_input_producer(gc.constant([], gc.string), num_epochs=1)
        qr = gc.get_collection(gc.GraphKeys.QUEUE_RUNNERS)[0]
        sess.run(gc.local_variables_initializer())
        with pytest.raises(errors.InvalidArgumentError, match="non-null input tensor"):
            sess.run(qr.enqueue_ops[0])
        assert queue is not None


def test_enqueue_many_of_strings_keeps_each_element_a_string():
    queue = gc.FIFOQueue(4, [gc.string], [[]])
    with gc.Session() as sess:
        sess.run(queue.enqueue_many([["p", "q"]]))
        assert sess.run(queue.dequeue()) == b"p"
        assert sess.run(queue.dequeue_many(1)).tolist() == [b"q"]


def test_tf_record_reader(tmp_path):
    path = str(tmp_path / "r.tfrecord")
    with gc.python_io.TFRecordWriter(path) as w:
        for record in (b"one", b"", b"three"):
            w.write(record)
    queue = gc.train.string_input_producer([path], num_epochs=1, shuffle=False)
    key, value = gc.TFRecordReader().read(queue)
    with gc.Session() as sess:
        coord, threads = started(sess)
        got = read_all(sess, [key, value])
        coord.request_stop()
        coord.join(threads)
    assert got == [[f"{path}:0".encode(), b"one"], [f"{path}:1".encode(), b""],
                   [f"{path}:2".encode(), b"three"]]


def test_fixed_length_record_reader_decoded_as_cifar(tmp_path):
    """The CIFAR-10 tutorial's pipeline: 1 label byte + 2x2x3 image bytes per record."""
    labels = np.array([3, 7], np.uint8)
    images = np.arange(24, dtype=np.uint8).reshape(2, 12)
    path = tmp_path / "batch.bin"
    path.write_bytes(b"HDR" + np.concatenate([labels[:, None], images], 1).tobytes() + b"F")
    queue = gc.train.string_input_producer([str(path)], num_epochs=1, shuffle=False)
    reader = gc.FixedLengthRecordReader(record_bytes=13, header_bytes=3, footer_bytes=1)
    _, value = reader.read(queue)
    record = gc.decode_raw(value, gc.uint8)
    label = gc.cast(record[0], gc.int32)
    image = gc.cast(gc.reshape(record[1:], [2, 2, 3]), gc.float32) / 255.0
    with gc.Session() as sess:
        coord, threads = started(sess)
        got = read_all(sess, [label, image])
        coord.request_stop()
        coord.join(threads)
    assert [g[0] for g in got] == [3, 7]
    for (_, img), want in zip(got, images):
        np.testing.assert_allclose(img, want.reshape(2, 2, 3).astype(np.float32) / 255.0,
                                   rtol=1e-6)


def test_a_reader_batched_by_train_batch(text_files):
    queue = gc.train.string_input_producer([text_files[1]], num_epochs=1, shuffle=False)
    _, line = gc.TextLineReader(skip_header_lines=1).read(queue)
    length = gc.strings.length(line)
    lines, lengths = gc.train.batch([line, length], batch_size=2)
    with gc.Session() as sess:
        coord, threads = started(sess)
        got_lines, got_lengths = sess.run([lines, lengths])
        coord.request_stop()
        coord.join(threads)
    assert got_lines.tolist() == [b"x", b"y"]
    np.testing.assert_array_equal(got_lengths, [1, 1])


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_text_line_dataset(tmp_path, compression):
    import zlib
    text = b"alpha\r\nbeta\n\ngamma"
    path = tmp_path / "t.txt"
    path.write_bytes({None: text, "GZIP": gzip.compress(text),
                      "ZLIB": zlib.compress(text)}[compression])
    ds = gc.data.TextLineDataset([str(path), str(path)], compression_type=compression)
    ds = ds.map(lambda s: (s, gc.strings.length(s)))
    line, n = gc.data.make_one_shot_iterator(ds).get_next()
    with gc.Session() as sess:
        got = read_all(sess, [line, n])
    assert [g[0] for g in got] == [b"alpha", b"beta", b"", b"gamma"] * 2
    assert [g[1] for g in got] == [5, 4, 0, 5] * 2


def test_text_line_dataset_of_a_fed_file_name(tmp_path):
    (tmp_path / "u.txt").write_bytes(b"one\ntwo\n")
    names = gc.placeholder(gc.string, [None])
    it = gc.data.make_initializable_iterator(gc.data.TextLineDataset(names))
    nxt = it.get_next()
    with gc.Session() as sess:
        sess.run(it.initializer, {names: [str(tmp_path / "u.txt")]})
        assert read_all(sess, nxt) == [b"one", b"two"]
        sess.run(it.initializer, {names: [str(tmp_path / "missing.txt")]})
        with pytest.raises(errors.NotFoundError):
            sess.run(nxt)


def test_match_filenames_once_feeds_a_reader(text_files, tmp_path):
    names = gc.train.match_filenames_once(str(tmp_path / "*.txt"))
    queue = gc.train.string_input_producer(names, num_epochs=1, shuffle=False)
    key, _ = gc.WholeFileReader().read(queue)
    with gc.Session() as sess:
        coord, threads = started(sess)
        (tmp_path / "later.txt").write_bytes(b"")  # matched once: not seen
        assert sess.run(names).tolist() == [f.encode() for f in sorted(text_files)]
        got = read_all(sess, key)
        coord.request_stop()
        coord.join(threads)
    assert got == [f.encode() for f in sorted(text_files)]
