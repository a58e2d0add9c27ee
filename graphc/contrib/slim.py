"""tf.contrib.slim: slim's layers are contrib.layers' (slim re-exports them), with
arg_scope and the slim helpers repeat and stack."""
from graphc.contrib.framework import add_arg_scope, arg_scope  # noqa: F401
from graphc.contrib.layers import (avg_pool2d, batch_norm, conv2d, convolution2d,  # noqa: F401
                                   dropout, flatten, fully_connected, l1_regularizer,
                                   l2_regularizer, layer_norm, max_pool2d,
                                   variance_scaling_initializer, xavier_initializer)
from graphc.framework.graph import GraphKeys, get_default_graph
from graphc.ops.nn_ops import softmax  # noqa: F401
from graphc.variable_scope import variable_scope


def repeat(inputs, repetitions, layer, *args, **kwargs):
    """layer applied `repetitions` times in a chain, scoped <scope>/<scope>_1 ..."""
    scope = kwargs.pop("scope", None)
    with variable_scope(scope, "Repeat", [inputs]):
        base = scope or getattr(layer, "__name__", "repeat")
        outputs = inputs
        for i in range(repetitions):
            kwargs["scope"] = f"{base}_{i + 1}"
            outputs = layer(outputs, *args, **kwargs)
        return outputs


def stack(inputs, layer, stack_args, **kwargs):
    """layer applied once per entry of stack_args (its arguments after the input),
    scoped <scope>/<scope>_1 ..."""
    scope = kwargs.pop("scope", None)
    with variable_scope(scope, "Stack", [inputs]):
        base = scope or getattr(layer, "__name__", "stack")
        outputs = inputs
        for i, args in enumerate(stack_args):
            kwargs["scope"] = f"{base}_{i + 1}"
            args = args if isinstance(args, (list, tuple)) else [args]
            outputs = layer(outputs, *args, **kwargs)
        return outputs


def get_model_variables(scope=None):
    return get_default_graph().get_collection(GraphKeys.MODEL_VARIABLES, scope)


def get_variables(scope=None, collection=GraphKeys.GLOBAL_VARIABLES):
    return get_default_graph().get_collection(collection, scope)


def get_trainable_variables(scope=None):
    return get_variables(scope, GraphKeys.TRAINABLE_VARIABLES)
