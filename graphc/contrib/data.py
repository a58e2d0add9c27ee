"""tf.contrib.data: tf.data.experimental's transformations under their TF 1.x contrib
names."""
from graphc.data.experimental_ops import map_and_batch, parallel_interleave  # noqa: F401
