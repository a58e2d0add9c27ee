"""Print (TF1's identity that logs its data when run) and print (TF's tf.print op), run
on the host when the op runs. Print's first_n counts per Session, as TF1's kernel does
per Session."""
import sys

import numpy as np

from graphc.framework.graph import Tensor, get_default_graph
from graphc.framework.op_def import register_gradient, register_op
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["Print", "print"]


def _text(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (float, np.floating)):
        return f"{v:g}"
    return str(v)


def _summary_v1(a, n):
    """TF1's Print of one tensor: its first n elements (inner dims in brackets) then '...',
    all in brackets."""
    a = np.asarray(a)
    if a.ndim == 0:
        return "[" + _text(a.item() if a.dtype != object else a[()]) + "]"
    flat = a.reshape(-1)
    shown = [_text(v) for v in flat[:n]]

    def nest(level, start):
        if level == a.ndim - 1:
            return " ".join(shown[start:start + a.shape[level]]), start + a.shape[level]
        parts = []
        for _ in range(a.shape[level]):
            if start >= len(shown):
                break
            text, start = nest(level + 1, start)
            parts.append("[" + text + "]")
        return "".join(parts), start

    body, _ = nest(0, 0)
    return "[" + body + ("..." if flat.size > n else "") + "]"


def _print_kernel(state, op, x, *data):
    first_n = op.attrs["first_n"]
    counts = state.print_counts
    seen = counts.get(op.name, 0)
    counts[op.name] = seen + 1
    if first_n < 0 or seen < first_n:
        summarize = op.attrs["summarize"]
        sys.stderr.write(op.attrs["message"] + "".join(_summary_v1(d, summarize) for d in data)
                         + "\n")
    return x


# host_only: both write to the host's streams (Print also counts its runs for first_n)
register_op("Print", infer=lambda inputs, a: (inputs[0].shape, inputs[0].dtype),
            kernel=_print_kernel, stateful=True, uses_context=True, kind="opaque",
            host_only=True)


@register_gradient("Print")
def _print_grad(op, g):
    return [g] + [None] * (len(op.inputs) - 1)


def Print(input_, data, message=None, first_n=None, summarize=None, name=None):  # noqa: N802
    """input_, and when it is computed, `message` and each tensor of `data` (its first
    `summarize` elements, default 3) on stderr; only the first `first_n` times if given."""
    x = convert_to_tensor(input_)
    with x.graph.as_default():
        data = [convert_to_tensor(d) for d in data]
    attrs = {"message": message or "", "first_n": -1 if first_n is None else int(first_n),
             "summarize": 3 if summarize is None else int(summarize)}
    return x.graph.create_op("Print", [x] + data, attrs, name or "Print").outputs[0]


def _summary_v2(a, n):
    """tf.print's format: NumPy's brackets, the first and last n of a long axis."""
    a = np.asarray(a)
    if a.ndim == 0:
        return _text(a.item() if a.dtype != object else a[()])
    if n < 0:  # every element
        return np.array2string(a, separator=" ", threshold=sys.maxsize,
                               formatter={"all": _text})
    return np.array2string(a, separator=" ", threshold=2 * n, edgeitems=n,
                           formatter={"all": _text})


def _print_v2_kernel(*values, texts, is_tensor, sep, end, output_stream, summarize):
    pieces, it = [], iter(values)
    for text, tensor in zip(texts, is_tensor):
        pieces.append(_summary_v2(next(it), summarize) if tensor else text)
    line = sep.join(pieces) + end
    if output_stream.startswith("file://"):
        with open(output_stream[len("file://"):], "a") as f:
            f.write(line)
    elif output_stream.startswith("log:"):
        from graphc import logging
        getattr(logging, output_stream[len("log:"):])(line.rstrip("\n"))
    else:
        getattr(sys, output_stream).write(line)
    return []


register_op("PrintV2", infer=lambda inputs, a: [], kernel=_print_v2_kernel, stateful=True,
            kind="opaque", host_only=True)


def _stream_name(stream):
    from graphc import logging
    if stream is sys.stdout or stream is sys.__stdout__:
        return "stdout"
    if stream is sys.stderr or stream is sys.__stderr__:
        return "stderr"
    if isinstance(stream, str) and stream.startswith("file://"):
        return stream
    for level in ("info", "warning", "error", "debug"):
        if stream is getattr(logging, level):
            return f"log:{level}"
    raise ValueError(f"print: output_stream must be sys.stdout, sys.stderr, a 'file://' path "
                     f"or tf.logging.info/warning/error/debug, got {stream!r}")


def print(*inputs, **kwargs):  # noqa: A001 - TF's name
    """An op that, when run, writes its inputs (tensors formatted as NumPy does, the first
    and last `summarize` elements of long axes) separated by sep and followed by end."""
    output_stream = _stream_name(kwargs.pop("output_stream", sys.stderr))
    sep, end = kwargs.pop("sep", " "), kwargs.pop("end", "\n")
    summarize = kwargs.pop("summarize", 3)
    name = kwargs.pop("name", None)
    if kwargs:
        raise ValueError(f"print: unexpected keyword arguments {sorted(kwargs)}")
    tensors = [x for x in inputs if isinstance(x, Tensor)]
    graph = tensors[0].graph if tensors else get_default_graph()
    attrs = {"texts": [x if isinstance(x, str) else ("" if isinstance(x, Tensor) else str(x))
                       for x in inputs],
             "is_tensor": [isinstance(x, Tensor) for x in inputs], "sep": sep, "end": end,
             "output_stream": output_stream,
             "summarize": -1 if summarize is None else int(summarize)}
    return graph.create_op("PrintV2", tensors, attrs, name or "PrintV2")
