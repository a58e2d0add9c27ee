"""tf.contrib.data: tf.data.experimental's transformations under their TF 1.x contrib
names."""
from graphc.data.experimental_ops import (group_by_window, map_and_batch,  # noqa: F401
                                          parallel_interleave)
