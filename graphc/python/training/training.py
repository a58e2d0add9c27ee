"""tensorflow.python.training.training: tf.train."""
from graphc.train import *  # noqa: F401,F403
from graphc.train.checkpoint_management import NewCheckpointReader  # noqa: F401
