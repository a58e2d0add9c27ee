"""tensorflow.python.ops.data_flow_ops: the queues."""
from graphc.ops.queue_ops import (FIFOQueue, PaddingFIFOQueue, QueueBase,  # noqa: F401
                                  RandomShuffleQueue)
