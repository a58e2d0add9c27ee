"""tf.estimator.TrainSpec, EvalSpec and train_and_evaluate, in TF1's local mode (one
process, no TF_CONFIG cluster): training runs to TrainSpec.max_steps, and after each
checkpoint save (the first, of the untrained model, excepted) the model is evaluated if
EvalSpec.throttle_secs have passed since the last evaluation; the last checkpoint is
always evaluated."""
import collections

from graphc import logging
from graphc.estimator.estimator import Estimator
from graphc.estimator.model_fn import checked_hooks
from graphc.train.basic_session_run_hooks import CheckpointSaverListener, SecondOrStepTimer

__all__ = ["TrainSpec", "EvalSpec", "train_and_evaluate"]


class TrainSpec(collections.namedtuple("TrainSpec", ["input_fn", "max_steps", "hooks"])):
    def __new__(cls, input_fn, max_steps=None, hooks=None):
        if not callable(input_fn):
            raise TypeError(f"TrainSpec: input_fn must be callable, given: {input_fn!r}")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"TrainSpec: must specify max_steps > 0, given: {max_steps}")
        return super().__new__(cls, input_fn, max_steps,
                               checked_hooks(hooks, "TrainSpec: all hooks"))


class EvalSpec(collections.namedtuple("EvalSpec", [
        "input_fn", "steps", "name", "hooks", "exporters", "start_delay_secs",
        "throttle_secs"])):
    def __new__(cls, input_fn, steps=100, name=None, hooks=None, exporters=None,
                start_delay_secs=120, throttle_secs=600):
        if not callable(input_fn):
            raise TypeError(f"EvalSpec: input_fn must be callable, given: {input_fn!r}")
        if steps is not None and steps <= 0:
            raise ValueError(f"EvalSpec: must specify steps > 0, given: {steps}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"EvalSpec: name must be a string, given: {name!r}")
        if exporters:
            raise NotImplementedError("EvalSpec(exporters=...): graphc's Estimator does not "
                                      "export SavedModels")
        if start_delay_secs < 0:
            raise ValueError(f"EvalSpec: must specify start_delay_secs >= 0, given: "
                             f"{start_delay_secs}")
        if throttle_secs < 0:
            raise ValueError(f"EvalSpec: must specify throttle_secs >= 0, given: "
                             f"{throttle_secs}")
        return super().__new__(cls, input_fn, steps, name,
                               checked_hooks(hooks, "EvalSpec: all hooks"), (), start_delay_secs,
                               throttle_secs)


def train_and_evaluate(estimator, train_spec, eval_spec):
    """Trains and evaluates as described in the module docstring; returns (the last
    evaluation's metrics, []) (the second item holds exporters' results, and graphc has
    none)."""
    if not isinstance(estimator, Estimator):
        raise TypeError(f"train_and_evaluate: estimator must be a tf.estimator.Estimator, "
                        f"given {estimator!r}")
    if not isinstance(train_spec, TrainSpec):
        raise TypeError(f"train_and_evaluate: train_spec must be a TrainSpec, given "
                        f"{train_spec!r}")
    if not isinstance(eval_spec, EvalSpec):
        raise TypeError(f"train_and_evaluate: eval_spec must be an EvalSpec, given "
                        f"{eval_spec!r}")
    if eval_spec.throttle_secs <= 0:
        raise ValueError(f"train_and_evaluate: eval_spec.throttle_secs should be positive, "
                         f"given: {eval_spec.throttle_secs}. It is used do determine how "
                         f"long each training iteration should go when train and evaluate "
                         f"locally.")
    listener = _EvaluateAfterSave(estimator, eval_spec)
    estimator.train(train_spec.input_fn, hooks=list(train_spec.hooks),
                    max_steps=train_spec.max_steps, saving_listeners=[listener])
    if listener.eval_result is None:  # training was skipped: max_steps already reached
        listener.evaluate(None)
    return listener.eval_result, []


class _EvaluateAfterSave(CheckpointSaverListener):
    def __init__(self, estimator, eval_spec):
        self._estimator, self._eval_spec = estimator, eval_spec
        self.eval_result = None
        self._last_checkpoint = None

    def begin(self):
        self._timer = SecondOrStepTimer(every_secs=self._eval_spec.throttle_secs)
        self._first_save = True

    def after_save(self, session, global_step_value):
        if self._first_save:  # the model before any training step
            self._first_save = False
            return
        if self._timer.should_trigger_for_step(global_step_value):
            self.evaluate(global_step_value)
        else:
            logging.info("Skip the current checkpoint eval due to throttle secs (%s secs).",
                         self._eval_spec.throttle_secs)

    def end(self, session, global_step_value):
        if global_step_value != self._timer.last_triggered_step():
            self.evaluate(global_step_value)

    def evaluate(self, global_step_value):
        if global_step_value is not None:
            self._timer.update_last_triggered_step(global_step_value)
        checkpoint = self._estimator.latest_checkpoint()
        if checkpoint is None:
            raise RuntimeError("train_and_evaluate: there was no checkpoint after the "
                               "training to evaluate")
        if checkpoint == self._last_checkpoint:
            logging.info("Skipping evaluation: no new checkpoint since %s", checkpoint)
            return
        self._last_checkpoint = checkpoint
        spec = self._eval_spec
        self.eval_result = self._estimator.evaluate(spec.input_fn, steps=spec.steps,
                                                    hooks=list(spec.hooks), name=spec.name,
                                                    checkpoint_path=checkpoint)
