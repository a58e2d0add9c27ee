"""tf.contrib.opt.AdamWOptimizer: Adam with decoupled weight decay (Loshchilov & Hutter),
as contrib's DecoupledWeightDecayExtension: before each variable's Adam update,
var -= weight_decay * var (for a sparse gradient, on the touched rows only), for the
variables of decay_var_list (all by default). weight_decay is not scaled by the learning
rate, as in contrib."""
from graphc.framework.graph import control_dependencies
from graphc.ops.array_ops import gather
from graphc.train.adam import AdamOptimizer
from graphc.variables import scatter_add

__all__ = ["AdamWOptimizer"]


class AdamWOptimizer(AdamOptimizer):
    def __init__(self, weight_decay, learning_rate=0.001, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, use_locking=False, name="AdamW"):
        super().__init__(learning_rate, beta1, beta2, epsilon, use_locking, name)
        self._weight_decay = weight_decay
        self._decay_var_list = None

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=1,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None, decay_var_list=None):
        self._decay_var_list = None if decay_var_list is None else set(decay_var_list)
        return super().minimize(loss, global_step, var_list, gate_gradients, aggregation_method,
                                colocate_gradients_with_ops, name, grad_loss)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None, decay_var_list=None):
        if decay_var_list is not None:
            self._decay_var_list = set(decay_var_list)
        return super().apply_gradients(grads_and_vars, global_step, name)

    def _prepare(self):
        super()._prepare()
        self._weight_decay_t = self._hyper_tensor(self._weight_decay, "weight_decay")

    def _decays(self, var):
        return self._decay_var_list is None or var in self._decay_var_list

    def _apply_dense(self, grad, var):
        if not self._decays(var):
            return super()._apply_dense(grad, var)
        decay = var.assign_sub(self._cast(self._weight_decay_t, var) * var)
        with control_dependencies([decay]):
            return super()._apply_dense(grad, var)

    def _apply_sparse(self, grad, var):
        if not self._decays(var):
            return super()._apply_sparse(grad, var)
        rows = grad.indices
        decay = scatter_add(var, rows,
                            -self._cast(self._weight_decay_t, var) * gather(var._ref(), rows))
        with control_dependencies([decay]):
            return super()._apply_sparse(grad, var)
