"""multinomial / random.categorical by the Gumbel-max trick: argmax(logits + G) with G
independent standard Gumbel noise, -log(-log(U)), draws class k with probability
softmax(logits)_k exactly, and composes native ops (random_uniform, log, argmax). The
draws follow TF1's distribution, not its random stream."""
from graphc import dtypes
from graphc.framework.graph import name_scope
from graphc.ops import array_ops, math_ops, random_ops, reduction_ops
from graphc.ops.constant_ops import convert_to_tensor

__all__ = ["multinomial", "categorical"]


def multinomial(logits, num_samples, seed=None, name=None, output_dtype=None):
    """[batch, num_samples] class indices drawn from each row of the [batch, classes]
    unnormalized log-probabilities (a -inf class is never drawn)."""
    with name_scope(name, "multinomial", [logits]) as scope:
        logits = convert_to_tensor(logits, name="logits")
        if not logits.dtype.is_floating:
            raise TypeError(f"multinomial: logits must be floating point, got "
                            f"{logits.dtype.name}")
        if logits.shape.ndims is not None and logits.shape.ndims != 2:
            raise ValueError(f"multinomial: logits must be 2-D [batch, classes], got shape "
                             f"{logits.shape}")
        output_dtype = dtypes.as_dtype(output_dtype or dtypes.int64)
        if output_dtype not in (dtypes.int32, dtypes.int64):
            raise TypeError(f"multinomial: output_dtype must be int32 or int64, got "
                            f"{output_dtype.name}")
        dims = array_ops.shape(logits)
        n = convert_to_tensor(num_samples, dtype_hint=dtypes.int32)
        noise_shape = array_ops.stack([dims[0], math_ops.cast(n, dims.dtype), dims[1]])
        u = random_ops.random_uniform(noise_shape, dtype=logits.dtype, seed=seed)
        gumbel = -math_ops.log(-math_ops.log(u))  # u = 0 gives -inf: never the argmax
        scores = array_ops.expand_dims(logits, 1) + gumbel
        return reduction_ops.argmax(scores, axis=2, output_type=output_dtype, name=scope)


def categorical(logits, num_samples, dtype=None, seed=None, name=None):
    return multinomial(logits, num_samples, seed=seed, name=name, output_dtype=dtype)
