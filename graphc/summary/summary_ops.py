"""Summary ops: host-only ops of dtype string whose kernels produce serialized `Summary`
protocol buffers, as TF1's ScalarSummary, HistogramSummary, ImageSummary,
AudioSummaryV2, MergeSummary.

The public functions name the op and its tag as TF1's summary_scope does and add the
op's output to GraphKeys.SUMMARIES, so `merge_all` gathers them."""
import math
import re
import struct
import sys

import numpy as np

from graphc import dtypes
from graphc.errors import KernelError
from graphc.framework.graph import GraphKeys, add_to_collection, get_collection, name_scope
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.tensor_shape import TensorShape
from graphc.ops.constant_ops import convert_to_tensor
from graphc.summary import protos
from graphc.summary.png import encode_png

__all__ = ["scalar", "histogram", "image", "audio", "merge", "merge_all"]

_SCALAR = TensorShape([])


def _serialized(summary):
    return np.array(summary.SerializeToString(), dtype=object)


def _require_real(tensor, what):
    if not (tensor.dtype.is_floating or tensor.dtype.is_integer):
        raise TypeError(f"{what} expects a real numeric tensor, got dtype {tensor.dtype.name}")


# ------------------------------------------------------------------------ scalar
def _scalar_infer(inputs, attrs):
    _require_real(inputs[0], "ScalarSummary")
    if not inputs[0].shape.is_compatible_with(_SCALAR):
        raise ValueError(f"tags and values not the same shape: [] != "
                         f"{inputs[0].shape.as_list()}")
    return _SCALAR, dtypes.string


def _scalar_kernel(values, tag):
    if values.shape != ():
        raise KernelError(f"tags and values not the same shape: [] != {list(values.shape)} "
                          f"(tag '{tag}')")
    pb = protos.summary_pb2()
    return _serialized(pb.Summary(value=[pb.Summary.Value(tag=tag, simple_value=float(values))]))


# --------------------------------------------------------------------- histogram
def _default_bucket_limits():
    """TF's default histogram buckets: limits growing by 10% from 1e-12 to 1e20, mirrored
    for negatives, with 0 between them and +-DBL_MAX at the ends."""
    positive = []
    v = 1.0e-12
    while v < 1.0e20:
        positive.append(v)
        v *= 1.1
    positive.append(sys.float_info.max)
    return np.array([-x for x in reversed(positive)] + [0.0] + positive)


BUCKET_LIMITS = _default_bucket_limits()


def histogram_proto(values):
    """TF's HistogramProto of `values` (float64): bucket i counts limit[i-1] <= v < limit[i];
    each run of empty buckets is coalesced into one, as Histogram::EncodeToProto does."""
    pb = protos.summary_pb2()
    values = np.asarray(values, np.float64).reshape(-1)
    counts = np.bincount(np.searchsorted(BUCKET_LIMITS, values, side="right"),
                         minlength=len(BUCKET_LIMITS)).astype(np.float64)
    # keep non-empty buckets and the last bucket of every empty run
    following = np.append(counts[1:], 1.0)
    keep = (counts > 0) | (following > 0)
    if values.size:
        lo, hi = float(values.min()), float(values.max())
    else:
        lo, hi = sys.float_info.max, -sys.float_info.max
    return pb.HistogramProto(min=lo, max=hi, num=float(values.size), sum=float(values.sum()),
                             sum_squares=float(np.dot(values, values)),
                             bucket_limit=BUCKET_LIMITS[keep].tolist(),
                             bucket=counts[keep].tolist())


def _histogram_infer(inputs, attrs):
    _require_real(inputs[0], "HistogramSummary")
    return _SCALAR, dtypes.string


def _histogram_kernel(values, tag):
    values = np.asarray(values, np.float64)
    if not np.isfinite(values).all():
        raise KernelError(f"{'Nan' if np.isnan(values).any() else 'Infinity'} in summary "
                          f"histogram for: {tag}")
    pb = protos.summary_pb2()
    return _serialized(pb.Summary(value=[pb.Summary.Value(tag=tag,
                                                          histo=histogram_proto(values))]))


# ------------------------------------------------------------------------- image
_IMAGE_DTYPES = (dtypes.uint8, dtypes.float16, dtypes.float32, dtypes.float64)


def _image_infer(inputs, attrs):
    x = inputs[0]
    if x.dtype not in _IMAGE_DTYPES:
        raise TypeError(f"ImageSummary expects uint8, float16, float32 or float64 images, "
                        f"got {x.dtype.name}")
    if x.shape.ndims is not None:
        depth = x.shape[-1].value if x.shape.ndims == 4 else None
        if x.shape.ndims != 4 or depth not in (None, 1, 3, 4):
            raise ValueError(f"Tensor must be 4-D with last dim 1, 3, or 4, not {x.shape}")
    return _SCALAR, dtypes.string


def to_uint8_image(image, bad_color):
    """TF's ImageSummary mapping of one float image [h, w, c] onto uint8: non-negative
    images scale so the max is 255; others center 0 at 128 and scale by the largest
    magnitude to 127. Pixels with a non-finite channel become bad_color."""
    compute = np.float64 if image.dtype == np.float64 else np.float32
    image = image.astype(compute)
    good = np.isfinite(image).all(axis=-1)
    finite = image[good]
    lo = float(finite.min()) if finite.size else math.inf
    hi = float(finite.max()) if finite.size else -math.inf
    if lo < 0:
        max_val = max(abs(lo), abs(hi))
        scale, offset = (0.0 if max_val < 1e-6 else 127.0 / max_val), 128.0
    else:
        scale, offset = (0.0 if hi < 1e-6 else 255.0 / hi), 0.0
    out = np.empty(image.shape, np.uint8)
    out[good] = (finite * compute(scale) + compute(offset)).astype(np.uint8)
    out[~good] = bad_color[:image.shape[-1]]
    return out


def _image_kernel(images, tag, max_images, bad_color):
    if images.ndim != 4 or images.shape[-1] not in (1, 3, 4):
        raise KernelError(f"Tensor must be 4-D with last dim 1, 3, or 4, not "
                          f"{list(images.shape)}")
    if images.shape[1] == 0 or images.shape[2] == 0:
        raise KernelError(f"Image summary '{tag}' needs images of nonzero height and width, "
                          f"got {list(images.shape)}")
    pb = protos.summary_pb2()
    bad_color = np.asarray(bad_color, np.uint8)
    values = []
    for i in range(min(max_images, images.shape[0])):
        img = images[i] if images.dtype == np.uint8 else to_uint8_image(images[i], bad_color)
        h, w, c = img.shape
        # the tag depends on how many images were asked for, not how many there are
        values.append(pb.Summary.Value(
            tag=f"{tag}/image/{i}" if max_images > 1 else f"{tag}/image",
            image=pb.Summary.Image(height=h, width=w, colorspace=c,
                                   encoded_image_string=encode_png(img))))
    return _serialized(pb.Summary(value=values))


# ------------------------------------------------------------------------- audio
def _audio_infer(inputs, attrs):
    x, rate = inputs
    if x.dtype != dtypes.float32:
        raise TypeError(f"AudioSummaryV2 expects float32 audio, got {x.dtype.name}")
    if x.shape.ndims not in (None, 2, 3):
        raise ValueError(f"Tensor must be 3-D [batch_size, frames, channels] or 2-D "
                         f"[batch_size, frames], not {x.shape}")
    if rate.dtype != dtypes.float32 or rate.shape.ndims not in (None, 0):
        raise ValueError(f"sample_rate must be a float32 scalar, got {rate.dtype.name} "
                         f"{rate.shape}")
    return _SCALAR, dtypes.string


def encode_wav(samples, sample_rate):
    """TF's EncodeAudioAsS16LEWav: [frames, channels] floats as 16-bit little-endian PCM,
    each sample round(x * 32768) (halves away from zero) clamped to the int16 range."""
    frames, channels = samples.shape
    scaled = samples.astype(np.float32) * np.float32(32768.0)
    rounded = np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))
    pcm = np.clip(rounded, -32768, 32767).astype("<i2").tobytes()
    header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(pcm), b"WAVE", b"fmt ", 16,
                         1, channels, sample_rate, sample_rate * channels * 2, channels * 2,
                         16, b"data", len(pcm))
    return header + pcm


def _audio_kernel(audio, sample_rate, tag, max_outputs):
    if audio.ndim not in (2, 3):
        raise KernelError(f"Tensor must be 3-D [batch_size, frames, channels] or 2-D "
                          f"[batch_size, frames], not {list(audio.shape)}")
    if audio.ndim == 2:
        audio = audio[:, :, None]
    if audio.shape[2] == 0:
        raise KernelError(f"Audio summary '{tag}' needs at least one channel")
    rate = float(sample_rate)
    pb = protos.summary_pb2()
    values = []
    for i in range(min(max_outputs, audio.shape[0])):
        values.append(pb.Summary.Value(
            tag=f"{tag}/audio/{i}" if max_outputs > 1 else f"{tag}/audio",
            audio=pb.Summary.Audio(sample_rate=rate, num_channels=audio.shape[2],
                                   length_frames=audio.shape[1], content_type="audio/wav",
                                   encoded_audio_string=encode_wav(audio[i], int(rate)))))
    return _serialized(pb.Summary(value=values))


# ------------------------------------------------------------------------- merge
def _merge_infer(inputs, attrs):
    for t in inputs:
        if t.dtype != dtypes.string:
            raise TypeError(f"MergeSummary inputs must be serialized summaries (string), "
                            f"got {t.dtype.name} from {t.name}")
    return _SCALAR, dtypes.string


def _merge_kernel(*inputs):
    pb = protos.summary_pb2()
    merged, tags = pb.Summary(), set()
    for serialized in (s for arr in inputs for s in np.asarray(arr, object).reshape(-1)):
        part = pb.Summary()
        try:
            part.ParseFromString(bytes(serialized))
        except Exception as e:  # protobuf's DecodeError does not derive from ValueError
            raise KernelError(f"Could not parse one of the summary inputs: {e}") from None
        for value in part.value:
            if value.tag in tags:
                raise KernelError(f"Duplicate tag {value.tag} found in summary inputs")
            tags.add(value.tag)
            merged.value.add().CopyFrom(value)
    return _serialized(merged)


# host-only: a summary is a protocol buffer in a string
_SUMMARY = dict(kind="opaque", host_only=True)
register_op("ScalarSummary", infer=_scalar_infer, kernel=_scalar_kernel, **_SUMMARY)
register_op("HistogramSummary", infer=_histogram_infer, kernel=_histogram_kernel, **_SUMMARY)
register_op("ImageSummary", infer=_image_infer, kernel=_image_kernel, **_SUMMARY)
register_op("AudioSummaryV2", infer=_audio_infer, kernel=_audio_kernel, **_SUMMARY)
register_op("MergeSummary", infer=_merge_infer, kernel=_merge_kernel, **_SUMMARY)
not_differentiable("ScalarSummary", "HistogramSummary", "ImageSummary", "AudioSummaryV2",
                   "MergeSummary")


# ------------------------------------------------------------------ public API
def _clean_tag(name):
    """TF's clean_tag: characters outside [-/\\w.] become '_', leading slashes go."""
    return re.sub(r"[^-/\w\.]", "_", name).lstrip("/") if name is not None else None


def _summary_op(op_type, name, tensor, attrs, collections, family, more_inputs=()):
    """Creates one summary op named like TF1's summary_scope; returns its output."""
    protos.summary_pb2()  # fail now, with the install hint, rather than at run time
    name, family = _clean_tag(name), _clean_tag(family)
    tensor = convert_to_tensor(tensor)
    base = name if family is None else f"{family}/{name}"
    with name_scope(base, values=[tensor]) as scope:
        tag = scope.rstrip("/") if family is None else f"{family}/{scope.rstrip('/')}"
        out = tensor.graph.create_op(op_type, [tensor] + list(more_inputs),
                                     dict(attrs, tag=tag), scope).outputs[0]
    for key in ([GraphKeys.SUMMARIES] if collections is None else collections):
        add_to_collection(key, out)
    return out


def tagged_summary_op(op_type, tag, tensor, attrs, collections, name, default_name,
                      more_inputs=()):
    """A summary op whose tag is `tag` verbatim, as TF before 1.0 made them
    (scalar_summary, histogram_summary, image_summary): the op is named by name_scope
    like any op and the tag is not prefixed by it."""
    protos.summary_pb2()
    if not isinstance(tag, str):
        raise TypeError(f"{default_name}: graphc takes the tag as a Python string, got "
                        f"{tag!r} (a tensor of tags is not supported)")
    tensor = convert_to_tensor(tensor)
    with name_scope(name, default_name, [tensor]) as scope:
        out = tensor.graph.create_op(op_type, [tensor] + list(more_inputs),
                                     dict(attrs, tag=tag), scope).outputs[0]
    for key in ([GraphKeys.SUMMARIES] if collections is None else collections):
        add_to_collection(key, out)
    return out


def scalar(name, tensor, collections=None, family=None):
    """A summary of one real number, shown as a curve over steps in TensorBoard."""
    return _summary_op("ScalarSummary", name, tensor, {}, collections, family)


def histogram(name, values, collections=None, family=None):
    """A histogram of all elements of `values`, in TF's default buckets."""
    return _summary_op("HistogramSummary", name, values, {}, collections, family)


def image(name, tensor, max_outputs=3, collections=None, family=None):
    """PNG images from a [batch, height, width, channels] tensor (channels 1, 3 or 4):
    uint8 as is, floats rescaled as TF does; at most max_outputs images."""
    attrs = {"max_images": int(max_outputs), "bad_color": [255, 0, 0, 255]}
    return _summary_op("ImageSummary", name, tensor, attrs, collections, family)


def audio(name, tensor, sample_rate, max_outputs=3, collections=None, family=None):
    """WAV clips (16-bit PCM) from float32 audio [batch, frames, channels] or [batch,
    frames] in [-1, 1] at sample_rate Hz; at most max_outputs clips."""
    rate = convert_to_tensor(sample_rate, dtype=dtypes.float32, name="sample_rate")
    return _summary_op("AudioSummaryV2", name, tensor, {"max_outputs": int(max_outputs)},
                       collections, family, [rate])


def merge(inputs, collections=None, name=None):
    """One serialized Summary holding all the values of `inputs` (duplicate tags fail)."""
    protos.summary_pb2()
    inputs = [convert_to_tensor(t) for t in inputs]
    if not inputs:
        raise ValueError("merge() needs at least one summary to merge")
    with name_scope(name, "Merge", inputs):
        out = inputs[0].graph.create_op("MergeSummary", inputs, {},
                                        name or "MergeSummary").outputs[0]
    for key in collections or []:
        add_to_collection(key, out)
    return out


def merge_all(key=GraphKeys.SUMMARIES, scope=None, name=None):
    """merge() of every summary in collection `key` (matching `scope`); None if none."""
    summaries = get_collection(key, scope=scope)
    return merge(summaries, name=name) if summaries else None
