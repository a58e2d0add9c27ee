"""tensorflow.python.ops.data_flow_ops: the queues."""
from graphc.ops.queue_ops import FIFOQueue, QueueBase, RandomShuffleQueue  # noqa: F401
