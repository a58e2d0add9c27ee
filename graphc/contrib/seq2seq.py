"""gc.contrib.seq2seq: sequence_loss, TF1's weighted cross-entropy of sequences of logits."""
from graphc.framework.graph import get_default_graph
from graphc.ops import array_ops, math_ops, nn_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.reduction_ops import count_nonzero, reduce_sum

__all__ = ["sequence_loss"]


def _div_no_nan(x, y):
    """x / y, 0 where y is 0 (the gradient too: no 0 * inf)."""
    zero = math_ops.equal(y, array_ops.zeros_like(y))
    safe = math_ops.where(zero, array_ops.ones_like(y), y)
    return math_ops.where(zero, array_ops.zeros_like(x * safe), x / safe)


def sequence_loss(logits, targets, weights, average_across_timesteps=True,
                  average_across_batch=True, sum_over_timesteps=False, sum_over_batch=False,
                  softmax_loss_function=None, name=None):
    """The cross-entropy of logits [batch, time, classes] against targets [batch, time]
    weighted by weights [batch, time]; averaged (by the weights' sum) or summed (divided
    by the number of nonzero weights) over the axes the flags name, as TF1."""
    if average_across_timesteps and sum_over_timesteps:
        raise ValueError("average_across_timesteps and sum_over_timesteps cannot be set to "
                         "True at same time.")
    if average_across_batch and sum_over_batch:
        raise ValueError("average_across_batch and sum_over_batch cannot be set to True at "
                         "same time.")
    logits, targets = convert_to_tensor(logits), convert_to_tensor(targets)
    weights = convert_to_tensor(weights, dtype=logits.dtype)
    if logits.shape.ndims not in (None, 3):
        raise ValueError("Logits must be a [batch_size x sequence_length x logits] tensor")
    if targets.shape.ndims not in (None, 2):
        raise ValueError("Targets must be a [batch_size x sequence_length] tensor")
    if weights.shape.ndims not in (None, 2):
        raise ValueError("Weights must be a [batch_size x sequence_length] tensor")
    with get_default_graph().name_scope(name or "sequence_loss"):
        classes = array_ops.shape(logits)[2]
        flat_logits = array_ops.reshape(logits, array_ops.stack([-1, classes]))
        flat_targets = array_ops.reshape(targets, [-1])
        if softmax_loss_function is None:
            crossent = nn_ops.sparse_softmax_cross_entropy_with_logits(
                labels=flat_targets, logits=flat_logits)
        else:
            crossent = softmax_loss_function(labels=flat_targets, logits=flat_logits)
        crossent = crossent * array_ops.reshape(weights, [-1])
        if average_across_timesteps and average_across_batch:
            return _div_no_nan(reduce_sum(crossent), reduce_sum(weights))
        if sum_over_timesteps and sum_over_batch:
            count = math_ops.cast(count_nonzero(weights), crossent.dtype)
            return _div_no_nan(reduce_sum(crossent), count)
        crossent = array_ops.reshape(crossent, array_ops.shape(logits)[0:2])
        if average_across_timesteps or average_across_batch:
            axis = [0] if average_across_batch else [1]
            return _div_no_nan(reduce_sum(crossent, axis=axis), reduce_sum(weights, axis=axis))
        if sum_over_timesteps or sum_over_batch:
            axis = [0] if sum_over_batch else [1]
            count = math_ops.cast(count_nonzero(weights, axis=axis), crossent.dtype)
            return _div_no_nan(reduce_sum(crossent, axis=axis), count)
        return crossent

