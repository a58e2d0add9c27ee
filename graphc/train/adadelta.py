"""AdadeltaOptimizer (TF1's ApplyAdadelta):

    accum = rho * accum + (1 - rho) * g^2
    update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * g
    accum_update = rho * accum_update + (1 - rho) * update^2
    var -= lr * update

A sparse gradient (SparseApplyAdadelta) does the same on the touched rows only.
"""
from graphc.framework.graph import control_dependencies
from graphc.ops import math_ops
from graphc.ops.array_ops import gather
from graphc.ops.control_flow_ops import group
from graphc.train.optimizer import Optimizer
from graphc.variables import scatter_sub, scatter_update

__all__ = ["AdadeltaOptimizer"]


class AdadeltaOptimizer(Optimizer):
    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-8, use_locking=False,
                 name="Adadelta"):
        super().__init__(use_locking, name)
        self._lr, self._rho, self._epsilon = learning_rate, rho, epsilon

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "accum", self._name)
            self._zeros_slot(v, "accum_update", self._name)

    def _prepare(self):
        self._lr_t = self._hyper_tensor(self._lr, "lr")
        self._rho_t = self._hyper_tensor(self._rho, "rho")
        self._epsilon_t = self._hyper_tensor(self._epsilon, "epsilon")

    def _coefficients(self, var):
        return (self._cast(t, var) for t in (self._lr_t, self._rho_t, self._epsilon_t))

    @staticmethod
    def _step(accum, accum_update, g, rho, epsilon):
        """(new accum, update, new accum_update) of ApplyAdadelta."""
        accum = accum * rho + math_ops.square(g) * (1 - rho)
        update = math_ops.sqrt(accum_update + epsilon) * math_ops.rsqrt(accum + epsilon) * g
        return accum, update, accum_update * rho + math_ops.square(update) * (1 - rho)

    def _apply_dense(self, grad, var):
        lr, rho, epsilon = self._coefficients(var)
        accum, accum_update = self.get_slot(var, "accum"), self.get_slot(var, "accum_update")
        new_accum, update, new_update = self._step(accum, accum_update, grad, rho, epsilon)
        with control_dependencies([new_update.op]):  # after every read of the old slots
            return group(accum.assign(new_accum), accum_update.assign(new_update),
                         var.assign_sub(lr * update))

    def _apply_sparse(self, grad, var):
        lr, rho, epsilon = self._coefficients(var)
        g, rows = grad.values, grad.indices
        accum, accum_update = self.get_slot(var, "accum"), self.get_slot(var, "accum_update")
        new_accum, update, new_update = self._step(gather(accum._ref(), rows),
                                                   gather(accum_update._ref(), rows), g, rho,
                                                   epsilon)
        with control_dependencies([new_update.op]):
            return group(scatter_update(accum, rows, new_accum),
                         scatter_update(accum_update, rows, new_update),
                         scatter_sub(var, rows, lr * update))
