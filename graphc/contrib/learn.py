"""tf.contrib.learn: the names of it that TF1 scripts still use next to tf.estimator.
ModeKeys is contrib.learn's (INFER where tf.estimator says PREDICT, the same "infer"
string), so a model_fn comparing either works under tf.estimator."""
from graphc.estimator.model_fn import ModeKeys as _EstimatorModeKeys

__all__ = ["ModeKeys"]


class ModeKeys:
    TRAIN = _EstimatorModeKeys.TRAIN
    EVAL = _EstimatorModeKeys.EVAL
    INFER = _EstimatorModeKeys.PREDICT
