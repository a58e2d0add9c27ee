"""Candidate sampling: seeded samplers and the sampled losses of gc.nn (nce_loss,
sampled_softmax_loss), following TF1's candidate_sampling_ops and nn_impl.

A sampler op draws num_sampled classes from [0, range_max) and reports each class's
expected count: how many times it is expected among the draws (TF's RangeSampler: with
unique=True the draws continue until num_sampled distinct classes came out, and the
count of a class of probability p after n draws is 1 - (1 - p)^n).
"""
import numpy as np

from graphc import dtypes
from graphc.framework.graph import name_scope
from graphc.framework.op_def import not_differentiable, register_op
from graphc.framework.tensor_shape import TensorShape
from graphc.ops import array_ops, math_ops, nn_ops, random_ops, reduction_ops
from graphc.ops.constant_ops import constant, convert_to_tensor
from graphc.ops.matmul_ops import matmul

__all__ = ["uniform_candidate_sampler", "log_uniform_candidate_sampler", "nce_loss",
           "sampled_softmax_loss"]

_FLOAT32_MAX = float(np.finfo(np.float32).max)


# ----------------------------------------------------------------------------- samplers
def _log_uniform_probability(classes, range_max):
    """Zipf-like P(k) = log((k + 2) / (k + 1)) / log(range_max + 1)."""
    k = classes.astype(np.float64)
    return np.log((k + 2.0) / (k + 1.0)) / np.log(range_max + 1.0)


def _log_uniform_draw(rng, n, range_max):
    # TF's LogUniformSampler::Sample: floor(exp(u * log(range_max + 1)) - 1) mod range_max
    values = np.exp(rng.random(n) * np.log(range_max + 1.0)) - 1.0
    return values.astype(np.int64) % range_max


def _uniform_probability(classes, range_max):
    return np.full(classes.shape, 1.0 / range_max)


def _uniform_draw(rng, n, range_max):
    return rng.integers(0, range_max, n, dtype=np.int64)


_SAMPLERS = {  # op type -> (probability of classes, draw n classes)
    "LogUniformCandidateSampler": (_log_uniform_probability, _log_uniform_draw),
    "UniformCandidateSampler": (_uniform_probability, _uniform_draw),
}


def _draw_unique(draw, rng, num_sampled, range_max):
    """num_sampled distinct classes in order of first appearance, and the draws it took."""
    picked, seen, tries = [], set(), 0
    while len(picked) < num_sampled:
        batch = draw(rng, max(num_sampled - len(picked), 16), range_max)
        for value in batch:
            tries += 1
            if value not in seen:
                seen.add(value)
                picked.append(value)
                if len(picked) == num_sampled:
                    break
    return np.array(picked, dtype=np.int64), tries


def _expected_count(p, num_sampled, tries):
    if tries == num_sampled:
        return p * num_sampled
    return -np.expm1(tries * np.log1p(-p))


def _sampler_kernel(op_type):
    probability, draw = _SAMPLERS[op_type]

    def kernel(state, op, true_classes):
        a = op.attrs
        rng = state.rng_for(op)
        if a["unique"]:
            sampled, tries = _draw_unique(draw, rng, a["num_sampled"], a["range_max"])
        else:
            sampled, tries = draw(rng, a["num_sampled"], a["range_max"]), a["num_sampled"]
        expected = lambda classes: _expected_count(  # noqa: E731
            probability(classes, a["range_max"]), a["num_sampled"], tries).astype(np.float32)
        return sampled, expected(true_classes), expected(sampled)
    return kernel


def _sampler_infer(inputs, a):
    true_classes = inputs[0]
    if true_classes.dtype != dtypes.int64:
        raise TypeError(f"true_classes must be int64, got {true_classes.dtype.name}")
    shape = true_classes.shape.with_rank(2)
    if shape[1].value is not None and shape[1].value != a["num_true"]:
        raise ValueError(f"true_classes must have num_true ({a['num_true']}) columns, "
                         f"got shape {shape}")
    return [(TensorShape([a["num_sampled"]]), dtypes.int64),
            (TensorShape([shape[0].value, a["num_true"]]), dtypes.float32),
            (TensorShape([a["num_sampled"]]), dtypes.float32)]


for _type in _SAMPLERS:
    # host-only: the sets are drawn without replacement (sequential, data-dependent)
    register_op(_type, infer=_sampler_infer, kernel=_sampler_kernel(_type), stateful=True,
                uses_context=True, kind="opaque", host_only=True)
not_differentiable(*_SAMPLERS)


def _candidate_sampler(op_type, true_classes, num_true, num_sampled, unique, range_max, seed,
                       name):
    if range_max < 1:
        raise ValueError(f"range_max must be positive, got {range_max}")
    if num_sampled < 1:
        raise ValueError(f"num_sampled must be positive, got {num_sampled}")
    if unique and num_sampled > range_max:
        raise ValueError(f"Sampler's range is too small: {num_sampled} unique samples from "
                         f"{range_max} classes")
    true_classes = convert_to_tensor(true_classes, dtype_hint=dtypes.int64)
    seed1, seed2 = random_ops.get_seed(seed)
    attrs = {"num_true": int(num_true), "num_sampled": int(num_sampled),
             "unique": bool(unique), "range_max": int(range_max), "seed": seed1,
             "seed2": seed2}
    op = true_classes.graph.create_op(op_type, [true_classes], attrs, name or op_type)
    return tuple(op.outputs)


def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                              seed=None, name=None):
    """Classes drawn uniformly from [0, range_max): (sampled_candidates,
    true_expected_count, sampled_expected_count)."""
    return _candidate_sampler("UniformCandidateSampler", true_classes, num_true, num_sampled,
                              unique, range_max, seed, name)


def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max,
                                  seed=None, name=None):
    """Classes drawn from the log-uniform (Zipfian) distribution over [0, range_max), for
    classes sorted by decreasing frequency: (sampled_candidates, true_expected_count,
    sampled_expected_count)."""
    return _candidate_sampler("LogUniformCandidateSampler", true_classes, num_true,
                              num_sampled, unique, range_max, seed, name)


# ----------------------------------------------------------------------------- sampled losses
def _accidental_hit_penalty(labels, sampled, logits):
    """-FLT_MAX where a sampled class is one of the example's true classes, else 0
    (TF's compute_accidental_hits scattered into [batch, num_sampled])."""
    hits = reduction_ops.reduce_any(
        math_ops.equal(array_ops.expand_dims(labels, 2), sampled), axis=1)
    return math_ops.where(hits, array_ops.fill(array_ops.shape(logits),
                                               constant(-_FLOAT32_MAX, dtype=logits.dtype)),
                          array_ops.zeros_like(logits))


def _compute_sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes,
                            num_true, sampled_values, remove_accidental_hits,
                            partition_strategy, name, seed=None):
    """(logits, labels) of shape [batch, num_true + num_sampled]: the true classes' logits
    then the sampled classes', each minus log(expected count); labels 1/num_true on the
    true columns."""
    weights = list(weights) if isinstance(weights, (list, tuple)) else [weights]
    with name_scope(name, "compute_sampled_logits", weights + [biases, inputs, labels]):
        inputs = convert_to_tensor(inputs, name="inputs")
        labels = math_ops.cast(convert_to_tensor(labels, dtype_hint=dtypes.int64),
                               dtypes.int64)
        labels_flat = array_ops.reshape(labels, [-1])
        if sampled_values is None:
            sampled_values = log_uniform_candidate_sampler(
                labels, num_true, num_sampled, True, num_classes, seed=seed)
        sampled, true_expected, sampled_expected = (
            array_ops.stop_gradient(convert_to_tensor(s)) for s in sampled_values)
        sampled = math_ops.cast(sampled, dtypes.int64)

        true_w = _as_dtype(nn_ops.embedding_lookup(weights, labels_flat, partition_strategy),
                           inputs.dtype)
        sampled_w = _as_dtype(nn_ops.embedding_lookup(weights, sampled, partition_strategy),
                              inputs.dtype)
        true_b = _as_dtype(nn_ops.embedding_lookup(biases, labels_flat, partition_strategy),
                           inputs.dtype)
        sampled_b = _as_dtype(nn_ops.embedding_lookup(biases, sampled, partition_strategy),
                              inputs.dtype)

        # true logits: each example's row dotted with its num_true true rows
        dim = array_ops.shape(true_w)[1:2]
        true_w = array_ops.reshape(true_w, array_ops.concat([[-1, num_true], dim], 0))
        true_logits = reduction_ops.reduce_sum(
            math_ops.multiply(array_ops.expand_dims(inputs, 1), true_w), axis=2)
        true_logits = true_logits + array_ops.reshape(true_b, [-1, num_true])
        sampled_logits = matmul(inputs, sampled_w, transpose_b=True) + sampled_b
        if remove_accidental_hits:
            sampled_logits = sampled_logits + _accidental_hit_penalty(labels, sampled,
                                                                      sampled_logits)
        true_logits = true_logits - math_ops.log(_as_dtype(true_expected, inputs.dtype))
        sampled_logits = sampled_logits - math_ops.log(_as_dtype(sampled_expected,
                                                                 inputs.dtype))
        out_logits = array_ops.concat([true_logits, sampled_logits], 1)
        out_labels = array_ops.concat([array_ops.ones_like(true_logits) / num_true,
                                       array_ops.zeros_like(sampled_logits)], 1)
        return out_logits, out_labels


def _as_dtype(x, dtype):
    return x if x.dtype == dtype else math_ops.cast(x, dtype)


def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1,
             sampled_values=None, remove_accidental_hits=False, partition_strategy="mod",
             name="nce_loss"):
    """Noise-contrastive estimation loss per example, [batch]: the sigmoid cross entropy
    of the true classes (label 1/num_true) and the sampled classes (label 0), summed."""
    logits, labels = _compute_sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values,
        remove_accidental_hits, partition_strategy, name)
    losses = nn_ops.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits,
                                                      name="sampled_losses")
    return reduction_ops.reduce_sum(losses, axis=1)


def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes,
                         num_true=1, sampled_values=None, remove_accidental_hits=True,
                         partition_strategy="mod", name="sampled_softmax_loss", seed=None):
    """Softmax cross entropy per example, [batch], over the true classes and a sample of
    the others, each logit corrected by minus log of its expected count."""
    logits, labels = _compute_sampled_logits(
        weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values,
        remove_accidental_hits, partition_strategy, name, seed=seed)
    labels = array_ops.stop_gradient(labels, name="labels_stop_gradient")
    return nn_ops.softmax_cross_entropy_with_logits_v2(labels=labels, logits=logits)
