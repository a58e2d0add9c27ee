"""tf.estimator (TF1): Estimator train / evaluate / predict, EstimatorSpec, ModeKeys,
RunConfig, inputs.numpy_input_fn and train_and_evaluate, checked against NumPy computations
of what TF1's documentation says each does."""
import glob
import os

import numpy as np
import pytest

import graphc as tf

ROWS, FEATURES = 12, 3


def _data(dtype=np.float64):
    rng = np.random.RandomState(7)
    x = rng.randn(ROWS, FEATURES).astype(dtype)
    y = (x @ np.array([[0.5], [-1.0], [2.0]]) + 0.25).astype(dtype)
    return x, y


def _linear_model_fn(dtype=tf.float64):
    """y = x w + b from zeros, plain SGD with params["lr"]; predictions {"y", "x0"}."""
    def model_fn(features, labels, mode, params):
        w = tf.get_variable("w", [FEATURES, 1], dtype, initializer=tf.zeros_initializer())
        b = tf.get_variable("b", [1], dtype, initializer=tf.zeros_initializer())
        pred = tf.matmul(features["x"], w) + b
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={"y": pred,
                                                                 "x0": features["x"][:, 0]})
        loss = tf.reduce_mean(tf.square(pred - labels))
        train_op = tf.train.GradientDescentOptimizer(params["lr"]).minimize(
            loss, global_step=tf.train.get_global_step())
        return tf.estimator.EstimatorSpec(
            mode, loss=loss, train_op=train_op,
            eval_metric_ops={"abs_error": tf.metrics.mean(tf.abs(pred - labels))})
    return model_fn


def _numpy_sgd(x, y, batches, lr, w=None, b=None):
    """Plain SGD on mean((x w + b - y)^2) over the given row-index batches. TF1's
    optimizer holds a Python learning rate as a float32 tensor, cast to the variables'
    dtype: float64 variables step by float32(lr)."""
    lr = float(np.float32(lr))
    w = np.zeros((FEATURES, 1)) if w is None else w.copy()
    b = np.zeros(1) if b is None else b.copy()
    for rows in batches:
        xb, yb = x[rows], y[rows]
        err = xb @ w + b - yb
        w -= lr * 2.0 * xb.T @ err / err.size
        b -= lr * 2.0 * err.sum(0) / err.size
    return w, b


def _sequential_batches(steps, batch):
    return [np.arange(s * batch, (s + 1) * batch) % ROWS for s in range(steps)]


def _estimator(tmp_path, lr=0.05, **config):
    return tf.estimator.Estimator(_linear_model_fn(), model_dir=str(tmp_path),
                                  params={"lr": lr}, config=tf.estimator.RunConfig(**config))


def _train_input(x, y, batch=4):
    return tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=batch, num_epochs=None,
                                              shuffle=False)


# ---------------------------------------------------------------------------- train
def test_train_runs_sgd_steps_and_resumes_from_the_checkpoint(tmp_path):
    x, y = _data()
    est = _estimator(tmp_path)
    assert est.train(_train_input(x, y), steps=5) is est
    w, b = _numpy_sgd(x, y, _sequential_batches(5, 4), 0.05)
    np.testing.assert_allclose(est.get_variable_value("w"), w, rtol=1e-12)
    np.testing.assert_allclose(est.get_variable_value("b"), b, rtol=1e-12)
    assert est.get_variable_value("global_step") == 5
    assert sorted(est.get_variable_names()) == ["b", "global_step", "w"]
    # a second train() calls input_fn again (its rows start over) and goes on from step 5
    est.train(_train_input(x, y), steps=2)
    w, b = _numpy_sgd(x, y, _sequential_batches(2, 4), 0.05, w, b)
    np.testing.assert_allclose(est.get_variable_value("w"), w, rtol=1e-12)
    assert est.get_variable_value("global_step") == 7
    assert est.latest_checkpoint().endswith("model.ckpt-7")


def test_train_max_steps_is_a_global_step_and_is_skipped_once_reached(tmp_path):
    x, y = _data()
    est = _estimator(tmp_path)
    est.train(_train_input(x, y), max_steps=3)
    assert est.get_variable_value("global_step") == 3
    before = est.get_variable_value("w")
    est.train(_train_input(x, y), max_steps=3)  # already there: nothing runs
    np.testing.assert_array_equal(est.get_variable_value("w"), before)
    est.train(_train_input(x, y), max_steps=4)
    assert est.get_variable_value("global_step") == 4


def test_train_until_the_input_ends_and_float32(tmp_path):
    x, y = _data(np.float32)
    est = tf.estimator.Estimator(_linear_model_fn(tf.float32), model_dir=str(tmp_path),
                                 params={"lr": 0.05})
    # 12 rows, 2 epochs, batches of 5: 5, 5, 5, 5, 4 rows (the last one smaller)
    est.train(tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=5, num_epochs=2,
                                                 shuffle=False))
    order = np.concatenate([np.arange(ROWS), np.arange(ROWS)])
    batches = [order[i:i + 5] for i in range(0, 2 * ROWS, 5)]
    w, b = _numpy_sgd(x.astype(np.float64), y.astype(np.float64), batches, 0.05)
    assert est.get_variable_value("global_step") == 5
    assert est.get_variable_value("w").dtype == np.float32
    np.testing.assert_allclose(est.get_variable_value("w"), w, rtol=1e-5, atol=1e-6)


def test_train_writes_the_loss_summary_and_checkpoints_every_n_steps(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    x, y = _data()
    est = _estimator(tmp_path, save_checkpoints_steps=2, save_summary_steps=1,
                     keep_checkpoint_max=10)
    est.train(_train_input(x, y), steps=5)
    saved = sorted(int(p.rsplit("-", 1)[1].split(".")[0])
                   for p in glob.glob(str(tmp_path / "model.ckpt-*.meta")))
    assert saved == [0, 2, 4, 5]
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    losses = {e.step: e.value for e in acc.Scalars("loss")}
    # the loss summary of a step is the loss before that step's update
    w, b = np.zeros((FEATURES, 1)), np.zeros(1)
    for step, rows in enumerate(_sequential_batches(5, 4)):
        expected = np.mean((x[rows] @ w + b - y[rows]) ** 2)
        assert losses[step + 1] == pytest.approx(expected, rel=1e-6)
        w, b = _numpy_sgd(x, y, [rows], 0.05, w, b)


def test_model_fn_gets_params_config_and_mode_and_a_dataset_input_fn(tmp_path):
    seen = []
    x, y = _data()

    def model_fn(features, labels, mode, params, config):
        seen.append((mode, params["tag"], config.model_dir, features.shape.as_list()))
        w = tf.get_variable("w", [FEATURES, 1], tf.float64, tf.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - labels))
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=tf.train.AdamOptimizer(
            0.1).minimize(loss, global_step=tf.train.get_global_step()))

    def input_fn(params, mode):
        assert params == {"tag": "p"} and mode == tf.estimator.ModeKeys.TRAIN
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(5)

    est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path), params={"tag": "p"})
    est.train(input_fn)  # the dataset ends after 3 batches (5, 5, 2 rows)
    assert est.get_variable_value("global_step") == 3
    assert seen == [("train", "p", str(tmp_path), [None, FEATURES])]


# ------------------------------------------------------------------------- evaluate
def test_evaluate_reports_the_mean_batch_loss_the_metrics_and_the_step(tmp_path):
    x, y = _data()
    est = _estimator(tmp_path)
    est.train(_train_input(x, y), steps=4)
    w, b = est.get_variable_value("w"), est.get_variable_value("b")
    # 12 rows in batches of 5: 5, 5, 2. "loss" is the mean of the three batch losses (TF1's
    # metrics.mean of the scalar loss), abs_error the mean over all 12 rows; TF1's metrics
    # accumulate in float32
    result = est.evaluate(tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=5,
                                                             shuffle=False))
    err = x @ w + b - y
    batch_losses = [np.mean(err[i:i + 5] ** 2) for i in (0, 5, 10)]
    assert set(result) == {"loss", "abs_error", "global_step"}
    assert result["loss"] == pytest.approx(np.mean(batch_losses), rel=1e-6)
    assert result["loss"] != pytest.approx(np.mean(err ** 2), rel=1e-6)
    assert result["abs_error"] == pytest.approx(np.mean(np.abs(err)), rel=1e-6)
    assert result["global_step"] == 4
    one = est.evaluate(tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=5,
                                                          shuffle=False), steps=1, name="one")
    assert one["loss"] == pytest.approx(batch_losses[0], rel=1e-6)


def test_evaluate_writes_its_metrics_as_summaries_under_eval(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    x, y = _data()
    est = _estimator(tmp_path)
    est.train(_train_input(x, y), steps=2)
    result = est.evaluate(_train_input(x, y), steps=3, name="val")
    acc = EventAccumulator(str(tmp_path / "eval_val"), size_guidance={"scalars": 0})
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["abs_error", "loss"]
    (event,) = acc.Scalars("abs_error")
    assert event.step == 2 and event.value == pytest.approx(result["abs_error"], rel=1e-6)


def test_evaluate_and_predict_without_a_checkpoint_use_the_initial_values(tmp_path):
    x, y = _data()
    est = _estimator(tmp_path)
    result = est.evaluate(_train_input(x, y), steps=1)
    assert result["global_step"] == 0
    assert result["loss"] == pytest.approx(np.mean(y[:4] ** 2), rel=1e-6)
    preds = list(est.predict(tf.estimator.inputs.numpy_input_fn({"x": x[:2]},
                                                                shuffle=False)))
    assert [float(p["y"][0]) for p in preds] == [0.0, 0.0]


def test_evaluate_refuses_a_metric_named_loss(tmp_path):
    def model_fn(features, labels, mode):
        loss = tf.reduce_mean(features)
        return tf.estimator.EstimatorSpec(mode, loss=loss,
                                          eval_metric_ops={"loss": tf.metrics.mean(loss)})

    est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path))
    with pytest.raises(ValueError, match='Metric with name "loss" is not allowed'):
        est.evaluate(tf.estimator.inputs.numpy_input_fn(np.ones((3, 1)), shuffle=False))


# -------------------------------------------------------------------------- predict
def test_predict_yields_one_dict_per_example_from_the_checkpoint(tmp_path):
    x, y = _data()
    est = _estimator(tmp_path)
    est.train(_train_input(x, y), steps=3)
    w, b = est.get_variable_value("w"), est.get_variable_value("b")
    # 7 rows in batches of 3: every row comes out once, as {"y": (1,), "x0": ()}
    rows = x[:7]
    preds = list(est.predict(tf.estimator.inputs.numpy_input_fn({"x": rows}, batch_size=3,
                                                                shuffle=False)))
    assert len(preds) == 7 and all(sorted(p) == ["x0", "y"] for p in preds)
    np.testing.assert_allclose(np.stack([p["y"] for p in preds]), rows @ w + b, rtol=1e-12)
    np.testing.assert_array_equal([p["x0"] for p in preds], rows[:, 0])
    only_y = list(est.predict(tf.estimator.inputs.numpy_input_fn({"x": rows}, batch_size=3,
                                                                 shuffle=False),
                              predict_keys=["y"]))
    assert all(list(p) == ["y"] for p in only_y)
    batches = list(est.predict(tf.estimator.inputs.numpy_input_fn({"x": rows}, batch_size=3,
                                                                  shuffle=False),
                               yield_single_examples=False))
    assert [len(batch["y"]) for batch in batches] == [3, 3, 1]


def test_predict_of_a_single_tensor_yields_its_rows(tmp_path):
    def model_fn(features, mode):
        return tf.estimator.EstimatorSpec(mode, predictions=features * 2.0)

    est = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path))
    x = np.arange(10.0).reshape(5, 2)
    preds = list(est.predict(tf.estimator.inputs.numpy_input_fn(x, batch_size=2,
                                                                shuffle=False)))
    np.testing.assert_array_equal(np.stack(preds), x * 2.0)
    with pytest.raises(ValueError, match="predict_keys argument is not valid"):
        next(est.predict(tf.estimator.inputs.numpy_input_fn(x, shuffle=False),
                         predict_keys=["a"]))


# ------------------------------------------------------------------ numpy_input_fn
def _run_all(tensors):
    out = []
    with tf.Session() as sess:
        try:
            while True:
                out.append(sess.run(tensors))
        except tf.errors.OutOfRangeError:
            return out


def test_numpy_input_fn_batches_in_order_and_ends_after_num_epochs():
    x = np.arange(14, dtype=np.int64).reshape(7, 2)
    y = np.arange(7, dtype=np.float32)
    features, labels = tf.estimator.inputs.numpy_input_fn(
        {"a": x, "b": y * 10}, y, batch_size=3, num_epochs=2, shuffle=False)()
    assert sorted(features) == ["a", "b"] and features["a"].dtype == tf.int64
    batches = _run_all((features, labels))
    order = np.concatenate([np.arange(7), np.arange(7)])
    expected = [order[i:i + 3] for i in range(0, 14, 3)]
    assert [len(lab) for _, lab in batches] == [3, 3, 3, 3, 2]
    for (feat, lab), rows in zip(batches, expected):
        np.testing.assert_array_equal(feat["a"], x[rows])
        np.testing.assert_array_equal(feat["b"], y[rows] * 10)
        np.testing.assert_array_equal(lab, y[rows])


def test_numpy_input_fn_shuffles_each_epoch_and_repeats_forever():
    tf.set_random_seed(3)
    x = np.arange(20, dtype=np.float32)
    features = tf.estimator.inputs.numpy_input_fn(x, batch_size=5, num_epochs=None,
                                                  shuffle=True)()
    assert features.shape.as_list() == [5]  # every batch is full: a static batch size
    with tf.Session() as sess:
        rows = np.concatenate([sess.run(features) for _ in range(8)])
    first, second = rows[:20], rows[20:]
    assert sorted(first) == list(x) and sorted(second) == list(x)
    assert list(first) != list(x) and list(first) != list(second)


def test_numpy_input_fn_refuses_bad_arguments():
    with pytest.raises(ValueError, match="shuffle must be provided and explicitly set"):
        tf.estimator.inputs.numpy_input_fn(np.ones(3))
    with pytest.raises(ValueError, match="length of tensors in x and y is mismatched"):
        tf.estimator.inputs.numpy_input_fn({"a": np.ones(3)}, np.ones(4), shuffle=False)()
    with pytest.raises(ValueError, match="duplicate keys are found in both x and y"):
        tf.estimator.inputs.numpy_input_fn({"a": np.ones(3)}, {"a": np.ones(3)},
                                           shuffle=False)()
    with pytest.raises(ValueError, match="x cannot be an empty dict"):
        tf.estimator.inputs.numpy_input_fn({}, shuffle=False)()
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        tf.estimator.inputs.numpy_input_fn(np.ones(3), batch_size=0, shuffle=False)


# ------------------------------------------------------- EstimatorSpec / RunConfig
def test_mode_keys_are_tf1s_strings():
    assert (tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.EVAL,
            tf.estimator.ModeKeys.PREDICT) == ("train", "eval", "infer")


def test_estimator_spec_checks_what_each_mode_needs():
    spec_cls, keys = tf.estimator.EstimatorSpec, tf.estimator.ModeKeys
    x = tf.constant([1.0, 2.0])
    loss = tf.reduce_sum(x)
    with pytest.raises(ValueError, match="missing train_op"):
        spec_cls(keys.TRAIN, loss=loss)
    with pytest.raises(ValueError, match="missing loss"):
        spec_cls(keys.EVAL)
    with pytest.raises(ValueError, match="missing predictions"):
        spec_cls(keys.PREDICT)
    with pytest.raises(ValueError, match="loss must be scalar"):
        spec_cls(keys.EVAL, loss=x)
    with pytest.raises(TypeError, match=r"predictions\['p'\] must be a Tensor"):
        spec_cls(keys.PREDICT, predictions={"p": 3})
    with pytest.raises(TypeError, match="must be \\(metric_value, update_op\\) tuples"):
        spec_cls(keys.EVAL, loss=loss, eval_metric_ops={"m": loss})
    with pytest.raises(TypeError, match="training_hooks must be SessionRunHook"):
        spec_cls(keys.EVAL, loss=loss, training_hooks=[object()])
    with pytest.raises(ValueError, match="mode='fit' unrecognized"):
        spec_cls("fit", loss=loss)
    other = tf.Graph()
    with other.as_default():
        foreign = tf.constant(1.0)
    with pytest.raises(ValueError, match="loss must be from the default graph"):
        spec_cls(keys.EVAL, loss=foreign)
    one = spec_cls(keys.EVAL, loss=tf.reshape(loss, [1]))  # TF1 takes a [1] loss as scalar
    assert one.loss.shape.as_list() == [] and one.predictions is None
    assert isinstance(one.scaffold, tf.train.Scaffold) and one.training_hooks == ()


def test_run_config_defaults_and_replace():
    config = tf.estimator.RunConfig()
    assert (config.save_checkpoints_secs, config.save_checkpoints_steps) == (600, None)
    assert (config.save_summary_steps, config.keep_checkpoint_max,
            config.log_step_count_steps, config.model_dir) == (100, 5, 100, None)
    assert config.is_chief and config.num_worker_replicas == 1 and config.task_type == "worker"
    steps = config.replace(save_checkpoints_steps=50, tf_random_seed=1)
    assert (steps.save_checkpoints_secs, steps.save_checkpoints_steps,
            steps.tf_random_seed) == (None, 50, 1)
    assert config.tf_random_seed is None  # replace made a copy
    with pytest.raises(ValueError, match="can not provide both save_checkpoints_steps"):
        tf.estimator.RunConfig(save_checkpoints_steps=1, save_checkpoints_secs=1)
    with pytest.raises(ValueError, match="cluster is not allowed to be replaced"):
        config.replace(cluster=1)


def test_estimator_constructor_and_train_arguments_are_checked(tmp_path):
    def no_params(features, labels, mode):
        raise AssertionError("not called")

    with pytest.raises(ValueError, match="does not include params argument"):
        tf.estimator.Estimator(no_params, params={"a": 1})
    with pytest.raises(ValueError, match="must include features argument"):
        tf.estimator.Estimator(lambda x, mode: None)
    with pytest.raises(ValueError, match="model_dir are set both in constructor and RunConfig"):
        tf.estimator.Estimator(no_params, model_dir=str(tmp_path / "a"),
                               config=tf.estimator.RunConfig(model_dir=str(tmp_path / "b")))
    est = tf.estimator.Estimator(no_params, config=tf.estimator.RunConfig(
        model_dir=str(tmp_path)))
    assert est.model_dir == str(tmp_path)
    with pytest.raises(ValueError, match="can not provide both steps and max_steps"):
        est.train(lambda: None, steps=1, max_steps=1)
    with pytest.raises(ValueError, match="must specify steps > 0"):
        est.train(lambda: None, steps=0)
    with pytest.raises(TypeError, match="hooks must be SessionRunHook instances"):
        est.train(lambda: None, hooks=[print])
    with pytest.raises(ValueError, match="not trained yet"):
        est.get_variable_value("w")


def test_model_fn_must_return_an_estimator_spec_and_take_labels_it_gets(tmp_path):
    x, y = _data()
    est = tf.estimator.Estimator(lambda features, mode: None, model_dir=str(tmp_path))
    with pytest.raises(ValueError, match="model_fn does not take labels"):
        est.train(_train_input(x, y), steps=1)
    est = tf.estimator.Estimator(lambda features, labels: features, model_dir=str(tmp_path))
    with pytest.raises(ValueError, match="model_fn should return an EstimatorSpec"):
        est.train(_train_input(x, y), steps=1)


def test_hooks_passed_to_train_see_each_step(tmp_path):
    x, y = _data()
    steps = []

    class Record(tf.train.SessionRunHook):
        def before_run(self, run_context):
            return tf.train.SessionRunArgs(tf.train.get_global_step())

        def after_run(self, run_context, run_values):
            steps.append(int(run_values.results))

    _estimator(tmp_path).train(_train_input(x, y), hooks=[Record()], steps=3)
    # a variable read in the run that also updates it may see either value (as in TF1)
    assert len(steps) == 3 and all(s in (i, i + 1) for i, s in enumerate(steps))


# ---------------------------------------------------------------- train_and_evaluate
def test_train_and_evaluate_trains_to_max_steps_and_evaluates_the_last_checkpoint(tmp_path):
    x, y = _data()
    est = _estimator(tmp_path, save_checkpoints_steps=3)
    eval_input = tf.estimator.inputs.numpy_input_fn({"x": x}, y, batch_size=ROWS,
                                                    shuffle=False)
    metrics, exports = tf.estimator.train_and_evaluate(
        est, tf.estimator.TrainSpec(_train_input(x, y), max_steps=7),
        tf.estimator.EvalSpec(eval_input, steps=None, throttle_secs=1000))
    w, b = _numpy_sgd(x, y, _sequential_batches(7, 4), 0.05)
    assert metrics["global_step"] == 7 and exports == []
    assert metrics["loss"] == pytest.approx(np.mean((x @ w + b - y) ** 2), rel=1e-6)
    assert os.path.isdir(tmp_path / "eval")
    with pytest.raises(ValueError, match="throttle_secs should be positive"):
        tf.estimator.train_and_evaluate(est, tf.estimator.TrainSpec(_train_input(x, y)),
                                        tf.estimator.EvalSpec(eval_input, throttle_secs=0))
    with pytest.raises(ValueError, match="must specify max_steps > 0"):
        tf.estimator.TrainSpec(_train_input(x, y), max_steps=0)


def test_contrib_learn_mode_keys_are_the_estimator_strings():
    keys = tf.contrib.learn.ModeKeys
    assert (keys.TRAIN, keys.EVAL, keys.INFER) == ("train", "eval", "infer")
    assert keys.INFER == tf.estimator.ModeKeys.PREDICT


def test_warm_start_from_another_models_checkpoint(tmp_path):
    x, y = _data()
    source = _estimator(tmp_path / "source")
    source.train(_train_input(x, y), steps=4)
    w4, b4 = source.get_variable_value("w"), source.get_variable_value("b")
    warm = tf.estimator.Estimator(_linear_model_fn(), model_dir=str(tmp_path / "warm"),
                                  params={"lr": 0.05},
                                  warm_start_from=str(tmp_path / "source"))
    warm.train(_train_input(x, y), steps=2)
    # the trainable variables start from the source's values; the global step from 0
    w, b = _numpy_sgd(x, y, _sequential_batches(2, 4), 0.05, w4, b4)
    np.testing.assert_allclose(warm.get_variable_value("w"), w, rtol=1e-12)
    np.testing.assert_allclose(warm.get_variable_value("b"), b, rtol=1e-12)
    assert warm.get_variable_value("global_step") == 2
    # once the warm model has its own checkpoint, training resumes from that instead
    warm.train(_train_input(x, y), steps=1)
    w, b = _numpy_sgd(x, y, _sequential_batches(1, 4), 0.05, w, b)
    np.testing.assert_allclose(warm.get_variable_value("w"), w, rtol=1e-12)
