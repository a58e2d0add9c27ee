"""tf.estimator (TF1): Estimator, EstimatorSpec, ModeKeys, RunConfig, inputs.numpy_input_fn,
TrainSpec, EvalSpec and train_and_evaluate, on top of MonitoredTrainingSession."""
from graphc.estimator import inputs  # noqa: F401
from graphc.estimator.estimator import Estimator  # noqa: F401
from graphc.estimator.model_fn import EstimatorSpec, ModeKeys  # noqa: F401
from graphc.estimator.run_config import RunConfig  # noqa: F401
from graphc.estimator.training import EvalSpec, TrainSpec, train_and_evaluate  # noqa: F401
