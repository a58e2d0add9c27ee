"""The gc.nn namespace."""
from graphc.ops.conv_ops import *  # noqa: F401,F403
from graphc.ops.nn_ops import *  # noqa: F401,F403
