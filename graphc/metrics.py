"""tf.compat.v1.metrics: streaming metrics over several runs.

Each metric keeps its running sums in local variables (collections LOCAL_VARIABLES and
METRIC_VARIABLES, named as TF names them: mean/total, mean/count,
precision/true_positives/count, ...) and returns (value, update_op): running update_op
adds one batch to the sums and gives the updated metric; value reads the sums.
local_variables_initializer() resets them to zero.
"""
from graphc import dtypes
from graphc.framework.graph import GraphKeys, add_to_collections, name_scope
from graphc.ops import math_ops, reduction_ops
from graphc.ops.array_ops import ones_like, zeros_like
from graphc.ops.constant_ops import constant, convert_to_tensor
from graphc.variables import Variable, assign_add

__all__ = ["accuracy", "mean", "precision", "recall"]

METRIC_VARIABLES = GraphKeys.METRIC_VARIABLES


def metric_variable(name, dtype=dtypes.float32):
    """A scalar zero that only local_variables_initializer() (re)sets."""
    return Variable(lambda: constant(0, dtype=dtype), trainable=False, name=name,
                    collections=[GraphKeys.LOCAL_VARIABLES, METRIC_VARIABLES])


def _safe_div(num, den, name):
    """num / den, and 0 where den is 0 (an empty stream has metric 0, as in TF)."""
    zero = constant(0.0)
    ratio = math_ops.truediv(num, math_ops.maximum(den, constant(1e-30)))
    return math_ops.where(math_ops.greater(den, zero), ratio, zeros_like(ratio), name=name)


def _collect(value, update_op, metrics_collections, updates_collections):
    if metrics_collections:
        add_to_collections(metrics_collections, value)
    if updates_collections:
        add_to_collections(updates_collections, update_op)
    return value, update_op


def _as_float(x):
    x = convert_to_tensor(x)
    return x if x.dtype == dtypes.float32 else math_ops.cast(x, dtypes.float32)


def _weighted(values, weights):
    """(values * weights, weights broadcast to values), both float32."""
    values = _as_float(values)
    if weights is None:
        return values, ones_like(values)
    weights = math_ops.multiply(_as_float(weights), ones_like(values))
    return math_ops.multiply(values, weights), weights


def mean(values, weights=None, metrics_collections=None, updates_collections=None,
         name=None):
    with name_scope(name, "mean", [values, weights]):
        return _collect(*_streaming_mean(values, weights), metrics_collections,
                        updates_collections)


def _streaming_mean(values, weights):
    """(value, update_op) of a weighted mean kept in `total` and `count` of this scope."""
    weighted, weights = _weighted(values, weights)
    total = metric_variable("total")
    count = metric_variable("count")
    update_total = assign_add(total, reduction_ops.reduce_sum(weighted))
    update_count = assign_add(count, reduction_ops.reduce_sum(weights))
    value = _safe_div(total._as_tensor(), count._as_tensor(), "value")
    return value, _safe_div(update_total, update_count, "update_op")


def accuracy(labels, predictions, weights=None, metrics_collections=None,
             updates_collections=None, name=None):
    """The fraction of predictions equal to labels (both class ids of the same shape)."""
    with name_scope(name, "accuracy", [labels, predictions, weights]):
        labels, predictions = _same_shape(labels, predictions)
        if predictions.dtype != labels.dtype:
            predictions = math_ops.cast(predictions, labels.dtype)
        is_correct = math_ops.cast(math_ops.equal(predictions, labels), dtypes.float32)
        return _collect(*_streaming_mean(is_correct, weights), metrics_collections,
                        updates_collections)


def _same_shape(labels, predictions):
    labels = convert_to_tensor(labels)
    predictions = convert_to_tensor(predictions)
    if not labels.shape.is_compatible_with(predictions.shape):
        raise ValueError(f"Shapes {predictions.shape} and {labels.shape} are incompatible")
    return labels, predictions


def _count_where(condition, weights, name):
    """A variable counting the (weighted) true elements of `condition`, and its update."""
    with name_scope(None, name):
        var = metric_variable("count")
    hits, _ = _weighted(condition, weights)
    return var, assign_add(var, reduction_ops.reduce_sum(hits))


def _confusion(labels, predictions, weights, names):
    """Counters of true_positives / false_positives / false_negatives on bool labels."""
    labels, predictions = _same_shape(labels, predictions)
    labels = math_ops.cast(labels, dtypes.bool)
    predictions = math_ops.cast(predictions, dtypes.bool)
    conditions = {
        "true_positives": math_ops.logical_and(labels, predictions),
        "false_positives": math_ops.logical_and(math_ops.logical_not(labels), predictions),
        "false_negatives": math_ops.logical_and(labels, math_ops.logical_not(predictions)),
    }
    return [_count_where(conditions[n], weights, n) for n in names]


def _ratio_metric(default_name, other, labels, predictions, weights, metrics_collections,
                  updates_collections, name):
    """tp / (tp + other): precision (other = false positives) or recall (false negatives)."""
    with name_scope(name, default_name, [labels, predictions, weights]):
        (tp, tp_update), (x, x_update) = _confusion(labels, predictions, weights,
                                                    ["true_positives", other])
        tp_v, x_v = tp._as_tensor(), x._as_tensor()
        value = _safe_div(tp_v, math_ops.add(tp_v, x_v), "value")
        update_op = _safe_div(tp_update, math_ops.add(tp_update, x_update), "update_op")
        return _collect(value, update_op, metrics_collections, updates_collections)


def precision(labels, predictions, weights=None, metrics_collections=None,
              updates_collections=None, name=None):
    return _ratio_metric("precision", "false_positives", labels, predictions, weights,
                         metrics_collections, updates_collections, name)


def recall(labels, predictions, weights=None, metrics_collections=None,
           updates_collections=None, name=None):
    return _ratio_metric("recall", "false_negatives", labels, predictions, weights,
                         metrics_collections, updates_collections, name)

