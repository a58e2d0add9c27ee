"""tf.python_io: TFRecord files in TensorFlow's exact record format (tf_formats/records.py),
so that files TF wrote read here and the other way round."""
from graphc.tf_formats import records

__all__ = ["TFRecordWriter", "tf_record_iterator", "TFRecordOptions", "TFRecordCompressionType"]


class TFRecordCompressionType:
    NONE = 0
    ZLIB = 1
    GZIP = 2


class TFRecordOptions:
    """Which compression a TFRecord file has: "", "ZLIB" or "GZIP" (or the enum)."""

    compression_type_map = {TFRecordCompressionType.ZLIB: "ZLIB",
                            TFRecordCompressionType.GZIP: "GZIP",
                            TFRecordCompressionType.NONE: ""}

    def __init__(self, compression_type=None, flush_mode=None, input_buffer_size=None,
                 output_buffer_size=None, window_bits=None, compression_level=None,
                 compression_method=None, mem_level=None, compression_strategy=None):
        self.compression_type = records.compression_type(compression_type)

    @classmethod
    def get_compression_type_string(cls, options):
        return "" if options is None else records.compression_type(options)


class TFRecordWriter:
    """Writes records (bytes, e.g. a serialized tf.train.Example) to a TFRecord file."""

    def __init__(self, path, options=None):
        self._writer = records.RecordWriter(path, records.compression_type(options))

    def write(self, record):
        self._writer.write(record)

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def tf_record_iterator(path, options=None):
    """The records of a TFRecord file, as bytes; DataLossError for a damaged record."""
    return records.read_records(path, records.compression_type(options))
