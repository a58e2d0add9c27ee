"""tf.estimator.ModeKeys and EstimatorSpec: what a model_fn returns, checked as TF1 checks it
(the loss, train_op and predictions each mode needs, scalar loss, (value, update_op) metric
pairs, hooks that are SessionRunHooks, tensors from the model_fn's own graph)."""
import collections

from graphc.framework.graph import Operation, Tensor, get_default_graph
from graphc.ops.array_ops import reshape
from graphc.train.monitored_session import Scaffold
from graphc.train.session_run_hook import SessionRunHook

__all__ = ["ModeKeys", "EstimatorSpec"]

LOSS_METRIC_KEY = "loss"


class ModeKeys:
    """The mode a model_fn builds its graph for."""
    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


_SPEC_FIELDS = ("mode", "predictions", "loss", "train_op", "eval_metric_ops", "export_outputs",
                "training_chief_hooks", "training_hooks", "scaffold", "evaluation_hooks",
                "prediction_hooks")


class EstimatorSpec(collections.namedtuple("EstimatorSpec", _SPEC_FIELDS)):
    """The ops and objects a model_fn returns: TRAIN needs loss and train_op, EVAL needs
    loss, PREDICT needs predictions (a Tensor or a dict of Tensors)."""

    def __new__(cls, mode, predictions=None, loss=None, train_op=None, eval_metric_ops=None,
                export_outputs=None, training_chief_hooks=None, training_hooks=None,
                scaffold=None, evaluation_hooks=None, prediction_hooks=None):
        if mode not in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT):
            raise ValueError(f"EstimatorSpec: mode={mode!r} unrecognized; use one of "
                             f"tf.estimator.ModeKeys.TRAIN, EVAL or PREDICT")
        graph = get_default_graph()
        loss = _checked_loss(loss, mode, graph)
        if train_op is None and mode == ModeKeys.TRAIN:
            raise ValueError("EstimatorSpec: missing train_op (needed in TRAIN mode).")
        if train_op is not None:
            _check_in_graph(train_op, "train_op", graph, (Tensor, Operation))
        if predictions is None and mode == ModeKeys.PREDICT:
            raise ValueError("EstimatorSpec: missing predictions (needed in PREDICT mode).")
        predictions = _checked_predictions(predictions, graph)
        eval_metric_ops = _checked_metrics(eval_metric_ops or {}, graph)
        scaffold = scaffold or Scaffold()
        if not isinstance(scaffold, Scaffold):
            raise TypeError(f"EstimatorSpec: scaffold must be a tf.train.Scaffold, given "
                            f"{scaffold!r}")
        hooks = {name: checked_hooks(value, f"EstimatorSpec: all {name}") for name, value in
                 (("training_chief_hooks", training_chief_hooks),
                  ("training_hooks", training_hooks), ("evaluation_hooks", evaluation_hooks),
                  ("prediction_hooks", prediction_hooks))}
        return super().__new__(cls, mode=mode, predictions=predictions, loss=loss,
                               train_op=train_op, eval_metric_ops=eval_metric_ops,
                               export_outputs=export_outputs, scaffold=scaffold, **hooks)

    def _replace(self, **kwds):
        if "mode" in kwds and self.mode != kwds["mode"]:
            raise ValueError("mode of EstimatorSpec cannot be changed.")
        return EstimatorSpec(**{**self._asdict(), **kwds})


def _check_in_graph(value, what, graph, kinds=(Tensor,)):
    if not isinstance(value, kinds):
        raise TypeError(f"EstimatorSpec: {what} must be a "
                        f"{' or '.join(k.__name__ for k in kinds)}, given: {value!r}")
    if value.graph is not graph:
        raise ValueError(f"EstimatorSpec: {what} must be from the default graph (the one "
                         f"the Estimator built for model_fn), given: {value!r}")


def _checked_loss(loss, mode, graph):
    if loss is None:
        if mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            raise ValueError(f"EstimatorSpec: missing loss (needed in {mode.upper()} mode).")
        return None
    _check_in_graph(loss, "loss", graph)
    if loss.shape.ndims is not None and loss.shape.as_list() == [1]:
        return reshape(loss, [])  # TF1 accepts a loss of shape [1] as the scalar it holds
    if loss.shape.ndims is not None and loss.shape.ndims != 0:
        raise ValueError(f"EstimatorSpec: loss must be scalar, given: {loss!r}")
    return loss


def _checked_predictions(predictions, graph):
    if isinstance(predictions, dict):
        for key, value in predictions.items():
            _check_in_graph(value, f"predictions[{key!r}]", graph)
    elif predictions is not None:
        _check_in_graph(predictions, "predictions", graph)
    return predictions


def _checked_metrics(eval_metric_ops, graph):
    if not isinstance(eval_metric_ops, dict):
        raise TypeError(f"EstimatorSpec: eval_metric_ops must be a dict, given: "
                        f"{eval_metric_ops!r}")
    for key, pair in eval_metric_ops.items():
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"EstimatorSpec: values of eval_metric_ops must be "
                            f"(metric_value, update_op) tuples, given: {pair!r} for key "
                            f"{key!r}")
        _check_in_graph(pair[0], f"eval_metric_ops[{key!r}][0]", graph)
        _check_in_graph(pair[1], f"eval_metric_ops[{key!r}][1]", graph, (Tensor, Operation))
    return dict(eval_metric_ops)


def checked_hooks(hooks, what):
    """hooks as a tuple, each a SessionRunHook, else a TypeError saying `what` must be
    ("EstimatorSpec: all training_hooks", "TrainSpec: all hooks", ...)."""
    hooks = tuple(hooks or ())
    for hook in hooks:
        if not isinstance(hook, SessionRunHook):
            raise TypeError(f"{what} must be SessionRunHook instances, given: {hook!r}")
    return hooks
