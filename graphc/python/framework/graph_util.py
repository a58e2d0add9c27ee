"""tensorflow.python.framework.graph_util."""
from graphc.graph_util import *  # noqa: F401,F403
