"""FtrlOptimizer (TF1's ApplyFtrl, and ApplyFtrlV2 when l2_shrinkage_regularization_strength
is set), with p = learning_rate_power:

    g_s = g + 2 * l2_shrinkage * var                  (g_s = g without shrinkage)
    new_accum = accum + g^2
    linear += g_s - (new_accum^-p - accum^-p) / lr * var
    var = (l1 * sign(linear) - linear) / (new_accum^-p / lr + 2 * l2)   where |linear| > l1
          0                                                              elsewhere
    accum = new_accum

(x^0.5 as sqrt when p = -0.5, as TF's kernel.) A sparse gradient updates the touched rows.
"""
from graphc.framework.graph import control_dependencies
from graphc.ops import math_ops
from graphc.ops.array_ops import gather, zeros_like
from graphc.ops.control_flow_ops import group
from graphc.train.optimizer import Optimizer
from graphc.variables import scatter_update

__all__ = ["FtrlOptimizer"]


class FtrlOptimizer(Optimizer):
    def __init__(self, learning_rate, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 use_locking=False, name="Ftrl", accum_name=None, linear_name=None,
                 l2_shrinkage_regularization_strength=0.0):
        super().__init__(use_locking, name)
        checks = [(initial_accumulator_value < 0.0, "initial_accumulator_value",
                   initial_accumulator_value, "positive or zero"),
                  (learning_rate_power > 0.0, "learning_rate_power", learning_rate_power,
                   "less than or equal to 0"),
                  (l1_regularization_strength < 0.0, "l1_regularization_strength",
                   l1_regularization_strength, "positive or zero"),
                  (l2_regularization_strength < 0.0, "l2_regularization_strength",
                   l2_regularization_strength, "positive or zero"),
                  (l2_shrinkage_regularization_strength < 0.0,
                   "l2_shrinkage_regularization_strength",
                   l2_shrinkage_regularization_strength, "positive or zero")]
        for bad, what, value, rule in checks:
            if bad:
                raise ValueError(f"{what} {value:f} needs to be {rule}")
        self._lr = learning_rate
        self._power = float(learning_rate_power)
        self._initial_accumulator_value = initial_accumulator_value
        self._l1, self._l2 = l1_regularization_strength, l2_regularization_strength
        self._l2_shrinkage = l2_shrinkage_regularization_strength
        self._accum_name, self._linear_name = accum_name, linear_name

    def _create_slots(self, var_list):
        for v in var_list:
            self._get_or_make_slot(v, self._initial_accumulator_value, "accum",
                                   self._accum_name or self._name)
            self._zeros_slot(v, "linear", self._linear_name or self._name)

    def _prepare(self):
        self._lr_t = self._hyper_tensor(self._lr, "learning_rate")
        self._power_t = self._hyper_tensor(self._power, "learning_rate_power")
        self._l1_t = self._hyper_tensor(self._l1, "l1_regularization_strength")
        self._l2_t = self._hyper_tensor(self._l2, "l2_regularization_strength")
        self._l2_shrinkage_t = self._hyper_tensor(self._l2_shrinkage,
                                                  "l2_shrinkage_regularization_strength")

    def _power_of(self, accum):
        """accum^-p (p a float32 tensor cast to accum's dtype, as TF1's hyperparameters)."""
        if self._power == -0.5:
            return math_ops.sqrt(accum)
        return math_ops.pow(accum, -math_ops.cast(self._power_t, accum.dtype))

    def _step(self, var, accum, linear, g):
        """(new var, new accum, new linear) of ApplyFtrl(V2) for these values."""
        lr, l1, l2, shrink = (self._cast(t, var) for t in
                              (self._lr_t, self._l1_t, self._l2_t, self._l2_shrinkage_t))
        g_s = g + 2 * shrink * var if self._l2_shrinkage > 0 else g
        new_accum = accum + math_ops.square(g)
        linear = linear + g_s - (self._power_of(new_accum) - self._power_of(accum)) / lr * var
        quadratic = self._power_of(new_accum) / lr + 2 * l2
        shrunk = (l1 * math_ops.sign(linear) - linear) / quadratic
        new_var = math_ops.where(math_ops.greater(math_ops.abs(linear), l1 + zeros_like(linear)),
                                 shrunk, zeros_like(shrunk))
        return new_var, new_accum, linear

    def _apply_dense(self, grad, var):
        accum, linear = self.get_slot(var, "accum"), self.get_slot(var, "linear")
        new_var, new_accum, new_linear = self._step(var, accum, linear, grad)
        # new_var is computed from every old value: no assign may run before it
        with control_dependencies([new_var.op]):
            return group(var.assign(new_var), accum.assign(new_accum),
                         linear.assign(new_linear))

    def _apply_sparse(self, grad, var):
        g, rows = grad.values, grad.indices
        accum, linear = self.get_slot(var, "accum"), self.get_slot(var, "linear")
        new_var, new_accum, new_linear = self._step(
            gather(var._ref(), rows), gather(accum._ref(), rows), gather(linear._ref(), rows), g)
        with control_dependencies([new_var.op]):
            return group(scatter_update(var, rows, new_var),
                         scatter_update(accum, rows, new_accum),
                         scatter_update(linear, rows, new_linear))
