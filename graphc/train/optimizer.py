"""Optimizer: the base of gc.train's optimizers (tf.compat.v1.train.Optimizer).

minimize = compute_gradients (gc.gradients w.r.t. the variables) + apply_gradients
(one update per variable, built from assign ops and math ops so that the compiler
can fuse each update into one kernel). Slots (per-variable state such as Adam's m
and v) are non-trainable global variables named "<var>/<Optimizer>", "<var>/<Optimizer>_1",
... as in TF1 checkpoints; non-slot state (Adam's beta1_power) is named as given.
"""
from typing import Iterable, List, Tuple, Union

from graphc import dtypes
from graphc.framework.api_types import Optional, Sequence, TensorLike
from graphc.framework.graph import GraphKeys, Operation, Tensor, get_default_graph
from graphc.framework.indexed_slices import IndexedSlices
from graphc.gradients import gradients
from graphc.ops import array_ops, math_ops
from graphc.ops.constant_ops import convert_to_tensor
from graphc.ops.control_flow_ops import group, tuple as tensor_tuple
from graphc.variables import Variable, assign_add, trainable_variables

__all__ = ["Optimizer"]

_VALID_DTYPES = (dtypes.float16, dtypes.float32, dtypes.float64)


class Optimizer:
    GATE_NONE = 0
    GATE_OP = 1
    GATE_GRAPH = 2

    def __init__(self, use_locking, name):
        if not name:
            raise ValueError("Must specify the optimizer name")
        self._use_locking = use_locking
        self._name = name
        self._slots = {}        # slot name -> {primary Variable: slot Variable}
        self._non_slots = {}    # (name, graph) -> Variable

    def get_name(self):
        return self._name

    # ------------------------------------------------------------------ public API
    def minimize(self, loss: Tensor, global_step: Optional[Variable] = None,
                 var_list: Optional[Sequence[Variable]] = None, gate_gradients: int = GATE_OP,
                 aggregation_method=None, colocate_gradients_with_ops: bool = False,
                 name: Optional[str] = None, grad_loss: Optional[TensorLike] = None
                 ) -> "Operation":
        grads_and_vars = self.compute_gradients(
            loss, var_list=var_list, gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops, grad_loss=grad_loss)
        if not any(g is not None for g, _ in grads_and_vars):
            raise ValueError(
                "No gradients provided for any variable, check your graph for ops that do not "
                f"support gradients, between variables {[str(v) for _, v in grads_and_vars]} "
                f"and loss {loss}.")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def compute_gradients(self, loss: Tensor, var_list: Optional[Sequence[Variable]] = None,
                          gate_gradients: int = GATE_OP, aggregation_method=None,
                          colocate_gradients_with_ops: bool = False,
                          grad_loss: Optional[TensorLike] = None
                          ) -> List[Tuple[Optional[Union[Tensor, IndexedSlices]], Variable]]:
        """[(gradient or None, variable)] for each variable of var_list (default: the
        trainable variables)."""
        if callable(loss):
            raise TypeError("loss must be a Tensor; a callable loss is for eager execution.")
        if gate_gradients not in (self.GATE_NONE, self.GATE_OP, self.GATE_GRAPH):
            raise ValueError(f"gate_gradients must be one of: Optimizer.GATE_NONE, "
                             f"Optimizer.GATE_OP, Optimizer.GATE_GRAPH. Not {gate_gradients}")
        loss = convert_to_tensor(loss)
        self._assert_valid_dtypes([loss])
        if grad_loss is not None:
            grad_loss = convert_to_tensor(grad_loss)
            self._assert_valid_dtypes([grad_loss])
        if var_list is None:
            var_list = trainable_variables()
        else:
            var_list = list(var_list)
        if not var_list:
            raise ValueError("No variables to optimize.")
        for v in var_list:
            if not isinstance(v, Variable):
                raise TypeError(f"Trying to optimize {v!r}, which is not a gc.Variable.")
        self._assert_valid_dtypes([v._ref() for v in var_list])
        grads = gradients(loss, var_list, grad_ys=grad_loss,
                          aggregation_method=aggregation_method,
                          colocate_gradients_with_ops=colocate_gradients_with_ops)
        if gate_gradients == self.GATE_GRAPH:
            grads = tensor_tuple(grads)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars: Iterable[Tuple[Optional[TensorLike], Variable]],
                        global_step: Optional[Variable] = None,
                        name: Optional[str] = None) -> "Operation":
        """One op that applies every non-None gradient and then, if given, increments
        global_step by one."""
        grads_and_vars = list(grads_and_vars)
        if not grads_and_vars:
            raise ValueError("No variables provided.")
        converted = []
        for g, v in grads_and_vars:
            if not isinstance(v, Variable):
                raise TypeError(f"Trying to update {v!r}, which is not a gc.Variable.")
            if g is not None and not isinstance(g, IndexedSlices):
                g = convert_to_tensor(g)
            converted.append((g, v))
        var_list = [v for g, v in converted if g is not None]
        if not var_list:
            raise ValueError(f"No gradients provided for any variable: "
                             f"{[str(v) for _, v in converted]}.")
        graph = var_list[0].graph
        with graph.as_default():
            with graph.control_dependencies(None):  # slot initializers are never gated
                self._create_slots(var_list)
            update_ops = []
            with graph.name_scope(name or self._name) as scope:
                self._prepare()
                for grad, var in converted:
                    if grad is None:
                        continue
                    with graph.name_scope("update_" + var.op.name):
                        update_ops.append(_as_op(self._apply_update(grad, var)))
                if global_step is None:
                    train_op = self._finish(update_ops, scope)
                else:
                    with graph.control_dependencies([self._finish(update_ops, "update")]):
                        train_op = assign_add(global_step, 1, name=scope).op
            train_ops = graph.get_collection_ref(GraphKeys.TRAIN_OP)
            if train_op not in train_ops:
                train_ops.append(train_op)
            return train_op

    def get_slot(self, var, name):
        return self._slots.get(name, {}).get(var)

    def get_slot_names(self):
        return sorted(self._slots)

    def variables(self):
        """The optimizer's own variables (slots and e.g. beta1_power) in the default graph."""
        graph = get_default_graph()
        own = [v for (_, g), v in self._non_slots.items() if g is graph]
        own += [s for slots in self._slots.values() for s in slots.values() if s.graph is graph]
        return sorted(own, key=lambda v: v.name)

    # ------------------------------------------------------ for subclasses to define
    def _create_slots(self, var_list):
        pass

    def _prepare(self):
        pass

    def _apply_dense(self, grad, var):
        raise NotImplementedError

    def _apply_sparse(self, grad, var):
        """The update for an IndexedSlices gradient whose indices are unique, written as
        scatters into var and its slots (the rows the step did not touch are left alone,
        and no dense gradient of var is made)."""
        raise NotImplementedError

    def _apply_sparse_duplicate_indices(self, grad, var):
        """TF1 sums the rows of repeated indices before a sparse update."""
        summed, unique = _deduplicate_indexed_slices(grad.values, grad.indices)
        return self._apply_sparse(IndexedSlices(summed, unique, grad.dense_shape), var)

    def _apply_update(self, grad, var):
        if isinstance(grad, IndexedSlices):
            return self._apply_sparse_duplicate_indices(grad, var)
        return self._apply_dense(grad, var)

    def _finish(self, update_ops, name_scope):
        return group(*update_ops, name=name_scope)

    # ----------------------------------------------------------- helpers for them
    @staticmethod
    def _hyper_tensor(value, name):
        """A hyperparameter (float, tensor, or a callable returning one) as a tensor."""
        return convert_to_tensor(value() if callable(value) else value, name=name)

    @staticmethod
    def _cast(t, var):
        return math_ops.cast(t, var.dtype)

    def _zeros_slot(self, var, slot_name, op_name):
        return self._get_or_make_slot(var, 0.0, slot_name, op_name)

    def _get_or_make_slot(self, var, fill_value, slot_name, op_name):
        slots = self._slots.setdefault(slot_name, {})
        if var not in slots:
            slots[var] = _create_slot(var, fill_value, op_name)
        return slots[var]

    def _create_non_slot_variable(self, initial_value, name, colocate_with):
        graph = colocate_with.graph
        key = (name, graph)
        if key not in self._non_slots:
            with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
                self._non_slots[key] = Variable(initial_value, trainable=False, name=name)
        return self._non_slots[key]

    def _get_non_slot_variable(self, name, graph=None):
        return self._non_slots.get((name, graph or get_default_graph()))

    def _assert_valid_dtypes(self, tensors):
        for t in tensors:
            if t.dtype not in _VALID_DTYPES:
                raise ValueError(f"Invalid type {t.dtype!r} for {t.name}, expected: "
                                 f"{list(_VALID_DTYPES)}.")


def _create_slot(var, fill_value, op_name):
    """A non-trainable variable shaped like `var`, filled with `fill_value`, named
    "<var>/<op_name>" (made unique by the graph, so a second slot gets "_1")."""
    graph = var.graph
    known = var.shape.is_fully_defined()

    def initial_value():
        dims = var.shape.as_list() if known else array_ops.shape(var.initialized_value())
        return array_ops.fill(dims, convert_to_tensor(fill_value, dtype=var.dtype))

    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
        return Variable(initial_value, trainable=False, name=f"{var.op.name}/{op_name}",
                        dtype=var.dtype, validate_shape=known)


def _deduplicate_indexed_slices(values, indices):
    """(summed values, unique indices): the rows of repeated indices added up, the
    indices in order of first occurrence (TF1's unique + unsorted_segment_sum)."""
    unique, positions = array_ops.unique(indices)
    rows = array_ops.concat([array_ops.shape(unique), array_ops.shape(values)[1:]], 0)
    return array_ops.scatter_rows(values, positions, rows), unique


def _as_op(x):
    return x.op if isinstance(x, Tensor) else x
