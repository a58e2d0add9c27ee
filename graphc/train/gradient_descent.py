"""GradientDescentOptimizer: var -= learning_rate * grad."""
from graphc.train.optimizer import Optimizer

__all__ = ["GradientDescentOptimizer"]


class GradientDescentOptimizer(Optimizer):
    def __init__(self, learning_rate, use_locking=False, name="GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _prepare(self):
        self._learning_rate_t = self._hyper_tensor(self._learning_rate, "learning_rate")

    def _apply_dense(self, grad, var):
        return var.assign_sub(self._cast(self._learning_rate_t, var) * grad)
