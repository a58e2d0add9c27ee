"""Names of TensorFlow before 1.0 that TF 1.0 renamed (the renames of TF's tf_upgrade.py),
still called by the TF1-era scripts of the corpus tools/tf1_coverage.py reads. Each does
what its TF 1.x successor does; where the old name behaved differently, that is said.

    tf.sub, tf.mul, tf.neg        removed in 1.0: tf.subtract, tf.multiply, tf.negative
    tf.concat_v2(values, axis)    0.12 only: tf.concat(values, axis) of 1.0
    tf.nn.deconv2d                before 0.7: tf.nn.conv2d_transpose (same arguments)
    tf.scalar_summary, tf.histogram_summary, tf.image_summary, tf.audio_summary
                                  removed in 1.0: tf.summary.scalar / histogram / image /
                                  audio,
                                  except that the tag is used verbatim (the old ops were
                                  not prefixed by the name scope), and only one tag (a
                                  Python string) is taken
    tf.merge_summary, tf.merge_all_summaries
                                  removed in 1.0: tf.summary.merge / merge_all
    tf.train.SummaryWriter        removed in 1.0: tf.summary.FileWriter
"""
from graphc import dtypes
from graphc.framework.graph import GraphKeys
from graphc.ops.array_ops import concat
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.conv_ops import conv2d_transpose
from graphc.ops.math_ops import multiply, negative, subtract
from graphc.summary import summary_ops
from graphc.summary.writer import FileWriter

__all__ = ["sub", "mul", "neg", "concat_v2", "scalar_summary", "histogram_summary",
           "image_summary", "audio_summary", "merge_summary", "merge_all_summaries"]

sub = subtract
mul = multiply
neg = negative
SummaryWriter = FileWriter


def concat_v2(values, axis, name="concat_v2"):
    return concat(values, axis, name=name)


def deconv2d(value, filter, output_shape, strides, padding="SAME", name=None):  # noqa: A002
    return conv2d_transpose(value, filter, output_shape, strides, padding=padding,
                            name=name)


def scalar_summary(tags, values, collections=None, name=None):
    return summary_ops.tagged_summary_op("ScalarSummary", tags, values, {}, collections,
                                         name, "ScalarSummary")


def histogram_summary(tag, values, collections=None, name=None):
    return summary_ops.tagged_summary_op("HistogramSummary", tag, values, {}, collections,
                                         name, "HistogramSummary")


def image_summary(tag, tensor, max_images=3, collections=None, name=None):
    attrs = {"max_images": int(max_images), "bad_color": [255, 0, 0, 255]}
    return summary_ops.tagged_summary_op("ImageSummary", tag, tensor, attrs, collections,
                                         name, "ImageSummary")


def audio_summary(tag, tensor, sample_rate, max_outputs=3, collections=None, name=None):
    rate = convert_to_tensor(sample_rate, dtype=dtypes.float32, name="sample_rate")
    return summary_ops.tagged_summary_op("AudioSummaryV2", tag, tensor,
                                         {"max_outputs": int(max_outputs)}, collections, name,
                                         "AudioSummary", [rate])


def merge_summary(inputs, collections=None, name=None):
    return summary_ops.merge(inputs, collections=collections, name=name)


def merge_all_summaries(key=GraphKeys.SUMMARIES):
    return summary_ops.merge_all(key)
