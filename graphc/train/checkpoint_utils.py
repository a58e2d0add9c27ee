"""tf.train.init_from_checkpoint: variables whose initializers load a checkpoint's values
(graphc's own or TF's V2, e.g. a pretrained BERT), so global_variables_initializer()
starts them from the checkpoint instead of their initial values.

assignment_map maps checkpoint names to current variables, as TF1's:
    "ckpt_scope/": "scope/"     every variable under scope/ from ckpt_scope/ + its suffix
    "/": "scope/"               every variable under scope/ from the checkpoint's root
    "ckpt/name": "scope/var"    one variable (by name, or a Variable object)
The values are read when init_from_checkpoint is called and kept in the graph as the
variables' new initial values."""
from graphc.framework.graph import get_default_graph
from graphc.ops.constant_ops import constant
from graphc.train import checkpoint_management
from graphc.variables import Variable, assign, global_variables

__all__ = ["init_from_checkpoint"]


def init_from_checkpoint(ckpt_dir_or_file, assignment_map):
    reader = checkpoint_management.load_checkpoint(ckpt_dir_or_file)
    shapes = reader.get_variable_to_shape_map()
    store = {v.op.name: v for v in global_variables()}
    for ckpt_name, current in sorted(assignment_map.items(), key=lambda kv: kv[0]):
        var = current if isinstance(current, Variable) else store.get(
            current[:-2] if isinstance(current, str) and current.endswith(":0") else current)
        if var is not None:
            if ckpt_name not in shapes:
                raise ValueError(f"Tensor {ckpt_name} is not found in {ckpt_dir_or_file} "
                                 f"checkpoint {shapes}")
            _initialize_from(var, reader, ckpt_name, shapes[ckpt_name])
            continue
        for var_name, tensor_name in _scope_mapping(ckpt_name, current, store):
            if tensor_name not in shapes:
                raise ValueError(f"Tensor {tensor_name} ({var_name} in {ckpt_name}) is not "
                                 f"found in {ckpt_dir_or_file} checkpoint")
            _initialize_from(store[var_name], reader, tensor_name, shapes[tensor_name])


def _scope_mapping(ckpt_scope, current, store):
    """[(variable name, checkpoint name)] of a "ckpt_scope/": "scope/" entry."""
    if not isinstance(current, str):
        raise TypeError(f"assignment_map values are variables or names, got {current!r}")
    scope = current[:current.rindex("/")] if "/" in current else ""
    if not ckpt_scope.endswith("/"):
        raise ValueError(f"Assignment map with scope only name {scope} should map to scope "
                         f"only {ckpt_scope}. Should be 'scope/': 'other_scope/'.")
    pairs = []
    for var_name in sorted(store):
        if scope and not var_name.startswith(scope + "/"):
            continue
        suffix = var_name[len(scope):]
        if current != "/" and suffix.startswith("/"):
            suffix = suffix[1:]
        tensor_name = suffix if ckpt_scope == "/" else ckpt_scope + suffix
        pairs.append((var_name, tensor_name.rstrip("/")))
    if not pairs:
        raise ValueError(f"assignment_map[{ckpt_scope!r}] = {current!r}: no variable of the "
                         f"current graph is under scope {scope!r}")
    return pairs


def _initialize_from(var, reader, tensor_name, ckpt_shape):
    if not var.shape.is_compatible_with(ckpt_shape):
        raise ValueError(f"Shape of variable {var.name} ({var.shape}) doesn't match with shape "
                         f"of tensor {tensor_name} ({ckpt_shape}) from checkpoint reader.")
    ckpt_dtype = reader.get_variable_to_dtype_map()[tensor_name]
    if ckpt_dtype != var.dtype:
        raise ValueError(f"dtype of variable {var.name} ({var.dtype.name}) doesn't match the "
                         f"dtype of tensor {tensor_name} ({ckpt_dtype.name}) in the checkpoint")
    g = get_default_graph()
    with g.name_scope(None), g.name_scope(var.op.name + "/checkpoint_initializer"), \
            g.control_dependencies(None):
        value = constant(reader.get_tensor(tensor_name), dtype=var.dtype, name="value")
        var._initializer_op = assign(var._ref(), value, name="Assign").op
    var._initial_value = value
