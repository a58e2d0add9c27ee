"""tf.examples: the tutorial helpers TF1 scripts import (tutorials.mnist.input_data)."""
from graphc.examples import tutorials  # noqa: F401
