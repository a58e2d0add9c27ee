"""tf.contrib.slim: slim's layers are contrib.layers' (slim re-exports them), with
arg_scope and the slim helpers repeat and stack."""
from graphc.contrib.framework import add_arg_scope, arg_scope  # noqa: F401
from graphc.contrib import layers as _layers
from graphc.contrib.layers import (avg_pool2d, batch_norm, conv2d, convolution2d,  # noqa: F401
                                   dropout, flatten, fully_connected, l1_regularizer,
                                   l2_regularizer, layer_norm, max_pool2d,
                                   variance_scaling_initializer, xavier_initializer,
                                   xavier_initializer_conv2d)
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


class initializers:  # noqa: N801 - slim.initializers, contrib.layers' initializers module
    xavier_initializer = staticmethod(_layers.xavier_initializer)
    xavier_initializer_conv2d = staticmethod(_layers.xavier_initializer_conv2d)
    variance_scaling_initializer = _layers.variance_scaling_initializer


class regularizers:  # noqa: N801 - slim.regularizers, contrib.layers' regularizers module
    l1_regularizer = staticmethod(_layers.l1_regularizer)
    l2_regularizer = staticmethod(_layers.l2_regularizer)
    apply_regularization = staticmethod(_layers.apply_regularization)


class model_analyzer:  # noqa: N801 - slim.model_analyzer
    @staticmethod
    def tensor_description(var):
        """"(float32 3x3x64)": the dtype and the dimensions of a variable or tensor."""
        dims = "x".join(str(d) for d in var.get_shape().as_list()) \
            if var.get_shape().ndims is not None else ""
        return f"({var.dtype.name} {dims})"

    @staticmethod
    def analyze_vars(variables, print_info=False):
        """(total elements, total bytes) of the variables, each printed when print_info."""
        if print_info:
            print("---------\nVariables: name (type shape) [size]\n---------")
        total_size = total_bytes = 0
        for var in variables:
            size = var.get_shape().num_elements() or 0  # unknown shape: counted as 0
            nbytes = size * var.dtype.size
            total_size += size
            total_bytes += nbytes
            if print_info:
                print(var.name, model_analyzer.tensor_description(var),
                      f"[{size}, bytes: {nbytes}]")
        if print_info:
            print(f"Total size of variables: {total_size}")
            print(f"Total bytes of variables: {total_bytes}")
        return total_size, total_bytes
