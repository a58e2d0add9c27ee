"""TFRecord files in TF's exact framing (tf.python_io), checked against known CRC32C
vectors and a file real TF 2.21 wrote (tests/data/tf_formats/examples.tfrecord)."""
import os
import struct

import numpy as np
import pytest

import graphc as gc
from graphc import errors
from graphc.tf_formats import records

pytest.importorskip("google_crc32c")
DATA = os.path.join(os.path.dirname(__file__), "data", "tf_formats")
TF_FILE = os.path.join(DATA, "examples.tfrecord")


def test_crc32c_known_vectors():
    # RFC 3720 (iSCSI) B.4 and the usual check value
    assert records.crc32c(b"123456789") == 0xE3069283
    assert records.crc32c(bytes(32)) == 0x8A9136AA
    assert records.crc32c(bytes([0xFF] * 32)) == 0x62A8AB43
    assert records.crc32c(bytes(range(32))) == 0x46DD794E
    for value in (0, 1, 0xE3069283, 0xFFFFFFFF):
        masked = records.masked_crc32c  # mask = rotate right 15, add 0xa282ead8
        rotated = ((value >> 15) | (value << 17)) & 0xFFFFFFFF
        assert records.unmask((rotated + 0xA282EAD8) & 0xFFFFFFFF) == value
    assert masked(b"") == (0 + 0xA282EAD8) & 0xFFFFFFFF  # crc32c of nothing is 0


def test_framing_is_byte_identical_to_tensorflows():
    raw = open(TF_FILE, "rb").read()
    datas = list(gc.python_io.tf_record_iterator(TF_FILE))
    assert len(datas) == 3
    assert b"".join(records.frame(d) for d in datas) == raw
    # the frame by hand: length, masked crc of the length bytes, data, masked crc of data
    length = struct.pack("<Q", len(datas[0]))
    assert raw[:8] == length
    assert struct.unpack("<I", raw[8:12])[0] == records.masked_crc32c(length)


def test_examples_written_by_tensorflow_parse():
    examples = [gc.train.Example.FromString(r) for r in gc.python_io.tf_record_iterator(TF_FILE)]
    for i, ex in enumerate(examples):
        f = ex.features.feature
        assert list(f["label"].int64_list.value) == [i, -i * 1000]
        np.testing.assert_array_equal(np.array(f["x"].float_list.value, np.float32),
                                      np.array([0.5 * i, 1.5, -2.0][:i + 1], np.float32))
        assert list(f["name"].bytes_list.value) == [b"ex%d" % i]


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB",
                                         gc.python_io.TFRecordCompressionType.GZIP])
def test_writer_round_trip(tmp_path, compression):
    path = str(tmp_path / "data.tfrecord")
    payloads = [b"", b"a", bytes(range(256)) * 40, b"last"]
    options = gc.python_io.TFRecordOptions(compression)
    with gc.python_io.TFRecordWriter(path, options) as w:
        for p in payloads:
            w.write(p)
    assert list(gc.python_io.tf_record_iterator(path, options)) == payloads
    if compression is None:
        assert os.path.getsize(path) == sum(len(p) + 16 for p in payloads)


def test_damaged_files_name_the_file_and_record(tmp_path):
    good = open(TF_FILE, "rb").read()
    first = 16 + struct.unpack("<Q", good[:8])[0]
    cases = {"data": good[:first + 20] + bytes([good[first + 20] ^ 1]) + good[first + 21:],
             "length": good[:first + 2] + bytes([good[first + 2] ^ 4]) + good[first + 3:],
             "truncated": good[:-3], "header": good[:first + 5]}
    messages = {"data": "record 1 at byte offset %d: corrupted record .the data's" % first,
                "length": "record 1 at byte offset %d: corrupted record .the length's" % first,
                "truncated": "record 2 .*truncated record",
                "header": "record 1 at byte offset %d: truncated record header" % first}
    for kind, content in cases.items():
        path = tmp_path / f"{kind}.tfrecord"
        path.write_bytes(content)
        with pytest.raises(errors.DataLossError, match=f"{path}: {messages[kind]}"):
            list(gc.python_io.tf_record_iterator(str(path)))
    with pytest.raises(errors.NotFoundError, match="nope.tfrecord"):
        list(gc.python_io.tf_record_iterator(str(tmp_path / "nope.tfrecord")))
    with pytest.raises(ValueError, match="compression_type must be one of"):
        gc.python_io.TFRecordOptions("LZ4")


def test_without_the_extra_import_works_and_tf_formats_name_it(tmp_path):
    """graphc imports without tensorboard and google-crc32c; each TF format names the
    `tf-formats` extra when it is used."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent(f"""
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("tensorboard", "google_crc32c"):
                    raise ImportError("No module named " + repr(name))

        sys.meta_path.insert(0, Block())
        import graphc as gc
        gc.placeholder(gc.float32, [2], name="x")
        uses = [lambda: gc.GraphDef, lambda: gc.get_default_graph().as_graph_def(),
                lambda: gc.python_io.TFRecordWriter({str(tmp_path / 'r')!r}).write(b"x"),
                lambda: gc.train.load_checkpoint({os.path.join(DATA, 'convnet-tf')!r})]
        for use in uses:
            try:
                use()
            except ImportError as e:
                assert "pip install graphc[tf-formats]" in str(e), str(e)
            else:
                raise AssertionError("no ImportError")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_huge_length_with_a_valid_checksum_is_truncation(tmp_path):
    length = struct.pack("<Q", 2 ** 62)
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(length + struct.pack("<I", records.masked_crc32c(length)) + b"abc")
    with pytest.raises(errors.DataLossError, match="record 0 at byte offset 0: truncated "
                                                   "record .length 4611686018427387904, 3 bytes"):
        list(gc.python_io.tf_record_iterator(str(path)))
