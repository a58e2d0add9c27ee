"""tf.estimator.Estimator: a model_fn trained, evaluated and used for prediction through
MonitoredTrainingSession, with its checkpoints and summaries in model_dir.

Each call (train, evaluate, predict) builds a new graph: the global step, the input_fn's
features and labels, then model_fn(features, labels, mode, params, config) (each argument
passed only when model_fn names it) returning an EstimatorSpec. train restores the latest
checkpoint of model_dir and saves new ones (and the summaries, and "loss" among them);
evaluate and predict restore the latest checkpoint (or initialize the variables, with a log
line, when there is none, as TF 1.15 does).

An input_fn returns (features, labels), features alone, or a tf.data.Dataset of either
(then an initializable iterator is made and initialized when the session starts).
"""
import copy
import inspect
import os
import tempfile

import numpy as np

from graphc import logging
from graphc.data.dataset_ops import Dataset
from graphc.estimator.model_fn import LOSS_METRIC_KEY, EstimatorSpec, ModeKeys, checked_hooks
from graphc.estimator.run_config import RunConfig
from graphc.framework.graph import Graph, GraphKeys, add_to_collection, get_collection
from graphc.metrics import mean
from graphc.ops.random_ops import set_random_seed
from graphc.summary import FileWriter, protos, scalar
from graphc.train import training_util
from graphc.train.basic_session_run_hooks import (CheckpointSaverHook, FinalOpsHook,
                                                  LoggingTensorHook, NanTensorHook,
                                                  StopAtStepHook)
from graphc.train.checkpoint_management import (latest_checkpoint, list_variables,
                                                load_checkpoint, load_variable)
from graphc.train.checkpoint_utils import init_from_checkpoint
from graphc.train.monitored_session import (ChiefSessionCreator, MonitoredSession,
                                            MonitoredTrainingSession)
from graphc.train.saver import Saver
from graphc.train.session_run_hook import SessionRunHook
from graphc.variables import trainable_variables

__all__ = ["Estimator"]


class Estimator:
    """TF1's Estimator on one process (see the module docstring)."""

    def __init__(self, model_fn, model_dir=None, config=None, params=None,
                 warm_start_from=None):
        if not callable(model_fn):
            raise TypeError(f"Estimator: model_fn must be callable, given {model_fn!r}")
        self._model_fn_args = _arg_names(model_fn)
        if "features" not in self._model_fn_args:
            raise ValueError(f"Estimator: model_fn ({model_fn}) must include features "
                             f"argument.")
        if params is not None and "params" not in self._model_fn_args:
            raise ValueError(f"Estimator: model_fn ({model_fn}) does not include params "
                             f"argument, but params ({params}) is passed to Estimator.")
        config = config if config is not None else RunConfig()
        if not isinstance(config, RunConfig):
            raise ValueError(f"Estimator: config must be a tf.estimator.RunConfig, but "
                             f"provided {config!r}")
        if model_dir is not None and config.model_dir is not None and \
                os.fspath(model_dir) != config.model_dir:
            raise ValueError(f"Estimator: model_dir are set both in constructor and "
                             f"RunConfig, but with different values. In constructor: "
                             f"'{model_dir}', in RunConfig: '{config.model_dir}'")
        model_dir = model_dir if model_dir is not None else config.model_dir
        if model_dir is None:
            model_dir = tempfile.mkdtemp()
            logging.warning("Using temporary folder as model directory: %s", model_dir)
        self._config = config.replace(model_dir=os.fspath(model_dir))
        self._model_fn = model_fn
        self._params = copy.deepcopy(params or {})
        self._warm_start_from = warm_start_from
        if warm_start_from is not None and not isinstance(warm_start_from, (str, os.PathLike)):
            raise NotImplementedError("Estimator(warm_start_from=...): graphc takes a "
                                      "checkpoint path or directory (every trainable "
                                      "variable is warm-started from it), not a "
                                      "WarmStartSettings")

    model_dir = property(lambda self: self._config.model_dir)
    config = property(lambda self: copy.deepcopy(self._config))
    params = property(lambda self: copy.deepcopy(self._params))
    model_fn = property(lambda self: self._model_fn)

    def latest_checkpoint(self):
        return latest_checkpoint(self.model_dir)

    def get_variable_names(self):
        return [name for name, _ in list_variables(self._checkpoint_or_fail())]

    def get_variable_value(self, name):
        return load_variable(self._checkpoint_or_fail(), name)

    def _checkpoint_or_fail(self):
        path = self.latest_checkpoint()
        if path is None:
            raise ValueError(f"Estimator is not trained yet: no checkpoint in model_dir "
                             f"{self.model_dir}. Call train() first.")
        return path

    # ------------------------------------------------------------------------- train
    def train(self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None):
        """Trains until the input ends, `steps` more steps, or the global step reaches
        max_steps (training is skipped when the latest checkpoint is already there)."""
        if steps is not None and max_steps is not None:
            raise ValueError("Estimator.train: can not provide both steps and max_steps.")
        if steps is not None and steps <= 0:
            raise ValueError(f"Estimator.train: must specify steps > 0, given: {steps}")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"Estimator.train: must specify max_steps > 0, given: "
                             f"{max_steps}")
        if max_steps is not None and max_steps <= self._global_step_in_checkpoint():
            logging.info("Skipping training since max_steps has already saved.")
            return self
        hooks = list(checked_hooks(hooks, "Estimator: hooks"))
        if steps is not None or max_steps is not None:
            hooks.append(StopAtStepHook(steps, max_steps))
        with Graph().as_default() as graph:
            global_step = self._new_graph_with_global_step(graph)
            features, labels, input_hooks = self._input(input_fn, ModeKeys.TRAIN)
            spec = self._call_model_fn(features, labels, ModeKeys.TRAIN)
            self._warm_start()
            loss = self._train_with_spec(spec, global_step, input_hooks + hooks,
                                         saving_listeners)
        logging.info("Loss for final step: %s.", loss)
        return self

    def _train_with_spec(self, spec, global_step, hooks, saving_listeners):
        scalar("loss", spec.loss)
        hooks = hooks + [NanTensorHook(spec.loss),
                         LoggingTensorHook({"loss": spec.loss, "step": global_step},
                                           every_n_iter=self._config.log_step_count_steps)]
        hooks += list(spec.training_hooks)
        scaffold = spec.scaffold
        if scaffold.saver is None and not get_collection(GraphKeys.SAVERS):
            add_to_collection(GraphKeys.SAVERS, Saver(
                max_to_keep=self._config.keep_checkpoint_max,
                keep_checkpoint_every_n_hours=self._config.keep_checkpoint_every_n_hours))
        chief_hooks = list(spec.training_chief_hooks)
        config = self._config
        if (config.save_checkpoints_secs or config.save_checkpoints_steps) and not any(
                isinstance(h, CheckpointSaverHook) for h in hooks + chief_hooks):
            chief_hooks.append(CheckpointSaverHook(
                self.model_dir, save_secs=config.save_checkpoints_secs,
                save_steps=config.save_checkpoints_steps, scaffold=scaffold,
                listeners=saving_listeners))
        loss = None
        with MonitoredTrainingSession(
                checkpoint_dir=self.model_dir, scaffold=scaffold, hooks=hooks,
                chief_only_hooks=chief_hooks, save_checkpoint_secs=0,
                save_summaries_steps=config.save_summary_steps, config=config.session_config,
                log_step_count_steps=config.log_step_count_steps) as session:
            while not session.should_stop():
                _, loss = session.run([spec.train_op, spec.loss])
        return loss

    def _warm_start(self):
        """Trainable variables start from warm_start_from's checkpoint, unless model_dir
        has its own (then training resumes from that, as in TF1)."""
        if self._warm_start_from is None or self.latest_checkpoint() is not None:
            return
        names = {v.op.name for v in trainable_variables()}
        init_from_checkpoint(os.fspath(self._warm_start_from), {n: n for n in sorted(names)})

    # ---------------------------------------------------------------------- evaluate
    def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None):
        """The eval_metric_ops' values (and "loss", the mean loss, and "global_step") after
        running their update ops over `steps` batches or until the input ends; also
        written as summaries to model_dir/eval (or eval_<name>)."""
        if steps is not None and steps <= 0:
            raise ValueError(f"Estimator.evaluate: must specify steps > 0, given: {steps}")
        hooks = list(checked_hooks(hooks, "Estimator: hooks"))
        checkpoint_path = self._checkpoint_for("evaluate", checkpoint_path)
        with Graph().as_default() as graph:
            global_step = self._new_graph_with_global_step(graph)
            features, labels, input_hooks = self._input(input_fn, ModeKeys.EVAL)
            spec = self._call_model_fn(features, labels, ModeKeys.EVAL)
            if LOSS_METRIC_KEY in spec.eval_metric_ops:
                raise ValueError(f"Metric with name \"{LOSS_METRIC_KEY}\" is not allowed, "
                                 f"because Estimator already defines a default metric with "
                                 f"the same name.")
            metrics = {LOSS_METRIC_KEY: mean(spec.loss), **spec.eval_metric_ops}
            update_ops = [update for _, update in metrics.values()]
            final = FinalOpsHook({**{k: value for k, (value, _) in metrics.items()},
                                  GraphKeys.GLOBAL_STEP: global_step})
            hooks = input_hooks + hooks + list(spec.evaluation_hooks) + [final]
            if steps is not None:
                hooks.append(_StopAfterNRunsHook(steps))
            with self._restored_session(spec, checkpoint_path, hooks) as session:
                while not session.should_stop():
                    session.run(update_ops)
        results = final.final_ops_values
        if results is None:
            raise RuntimeError("Estimator.evaluate: the evaluation ended before its "
                               "metrics could be read")
        logging.info("Saving dict for global step %d: %s", results[GraphKeys.GLOBAL_STEP],
                     ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
        self._write_eval_summaries(results, name)
        return results

    def _write_eval_summaries(self, results, name):
        folder = os.path.join(self.model_dir, "eval" if not name else f"eval_{name}")
        summary = protos.summary_pb2().Summary()
        for key, value in sorted(results.items()):
            if key == GraphKeys.GLOBAL_STEP:
                continue
            value = np.asarray(value)
            if value.ndim == 0 and np.issubdtype(value.dtype, np.number):
                summary.value.add(tag=key, simple_value=float(value))
            else:
                logging.warning("Skipping summary for %s, must be a float or np.float32.",
                                key)
        writer = FileWriter(folder)
        writer.add_summary(summary, int(results[GraphKeys.GLOBAL_STEP]))
        writer.close()

    # ----------------------------------------------------------------------- predict
    def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None,
                yield_single_examples=True):
        """Yields the predictions for each example until the input ends (a dict when
        model_fn's predictions is a dict), or each batch's when yield_single_examples is
        False."""
        hooks = list(checked_hooks(hooks, "Estimator: hooks"))
        checkpoint_path = self._checkpoint_for("predict", checkpoint_path)
        with Graph().as_default() as graph:
            self._new_graph_with_global_step(graph)
            features, _, input_hooks = self._input(input_fn, ModeKeys.PREDICT)
            spec = self._call_model_fn(features, None, ModeKeys.PREDICT)
            predictions = _selected(spec.predictions, predict_keys)
            hooks = input_hooks + hooks + list(spec.prediction_hooks)
            with self._restored_session(spec, checkpoint_path, hooks) as session:
                while not session.should_stop():
                    values = session.run(predictions)
                    if not yield_single_examples:
                        yield values
                    elif not isinstance(values, dict):
                        yield from _rows(values, "predictions")
                    else:
                        for i in range(_batch_length(values)):
                            yield {key: value[i] for key, value in values.items()}

    # ------------------------------------------------------------------------ shared
    def _new_graph_with_global_step(self, graph):
        if self._config.tf_random_seed is not None:
            set_random_seed(self._config.tf_random_seed)
        return training_util.get_or_create_global_step(graph)

    def _global_step_in_checkpoint(self):
        path = self.latest_checkpoint()
        if path is None:
            return 0
        reader = load_checkpoint(path)
        if not reader.has_tensor(GraphKeys.GLOBAL_STEP):
            return 0
        return int(reader.get_tensor(GraphKeys.GLOBAL_STEP))

    def _checkpoint_for(self, what, checkpoint_path):
        if checkpoint_path is not None:
            return checkpoint_path
        path = self.latest_checkpoint()
        if path is None:
            logging.info("Could not find trained model in model_dir: %s, running "
                         "initialization to %s.", self.model_dir, what)
        return path

    def _restored_session(self, spec, checkpoint_path, hooks):
        creator = ChiefSessionCreator(scaffold=spec.scaffold, config=self._config.session_config,
                                      checkpoint_filename_with_path=checkpoint_path)
        return MonitoredSession(session_creator=creator, hooks=hooks)

    def _input(self, input_fn, mode):
        """(features, labels, hooks) from input_fn, called with the mode, params and
        config it names."""
        if not callable(input_fn):
            raise TypeError(f"Estimator: input_fn must be callable, given {input_fn!r}")
        args = _arg_names(input_fn)
        kwargs = {name: value for name, value in
                  (("mode", mode), ("params", self.params), ("config", self.config))
                  if name in args}
        result = input_fn(**kwargs)
        hooks = []
        if isinstance(result, Dataset):
            iterator = result.make_initializable_iterator()
            hooks.append(_IteratorInitializerHook(iterator))
            result = iterator.get_next()
        if isinstance(result, (list, tuple)):
            if len(result) != 2:
                raise ValueError("Estimator: input_fn should return (features, labels) as "
                                 f"a len 2 tuple, it returned {len(result)} values")
            return result[0], result[1], hooks
        return result, None, hooks

    def _call_model_fn(self, features, labels, mode):
        kwargs = {}
        if "labels" in self._model_fn_args:
            kwargs["labels"] = labels
        elif labels is not None:
            raise ValueError("Estimator: model_fn does not take labels, but input_fn "
                             "returns labels.")
        for name, value in (("mode", mode), ("params", self.params), ("config", self.config)):
            if name in self._model_fn_args:
                kwargs[name] = value
        spec = self._model_fn(features=features, **kwargs)
        if not isinstance(spec, EstimatorSpec):
            raise ValueError(f"Estimator: model_fn should return an EstimatorSpec, it "
                             f"returned {spec!r}")
        return spec


def _arg_names(fn):
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError) as e:
        raise TypeError(f"Estimator: cannot read the arguments of {fn!r}: {e}") from None


def _selected(predictions, keys):
    if keys is None:
        return predictions
    if not isinstance(predictions, dict):
        raise ValueError("Estimator.predict: predict_keys argument is not valid in case of "
                         "non-dict predictions.")
    keys = [keys] if isinstance(keys, str) else list(keys)
    chosen = {k: v for k, v in predictions.items() if k in keys}
    if not chosen:
        raise ValueError(f"Estimator.predict: expected to run at least one output from "
                         f"{sorted(predictions)}, provided {keys}.")
    return chosen


def _rows(value, what):
    value = np.asarray(value)
    if value.ndim == 0:
        raise ValueError(f"Estimator.predict: {what} must have a batch dimension (rank >= "
                         f"1) to yield single examples, got a scalar; use "
                         f"yield_single_examples=False")
    return iter(value)


def _batch_length(values):
    length = None
    for key, value in values.items():
        rows = len(list(_rows(value, f"predictions[{key!r}]")))
        if length is not None and rows != length:
            raise ValueError(f"Estimator.predict: batch length of predictions should be "
                             f"same. {key} has different batch length than others.")
        length = rows
    return length


class _IteratorInitializerHook(SessionRunHook):
    """Initializes a Dataset input_fn's iterator once the session exists."""

    def __init__(self, iterator):
        self._iterator = iterator

    def begin(self):
        self._initializer = self._iterator.initializer

    def after_create_session(self, session, coord):
        session.run(self._initializer)


class _StopAfterNRunsHook(SessionRunHook):
    """Stops an evaluation after `steps` runs of its update ops."""

    def __init__(self, steps):
        self._steps, self._done = steps, 0

    def after_run(self, run_context, run_values):
        self._done += 1
        if self._done >= self._steps:
            run_context.request_stop()
