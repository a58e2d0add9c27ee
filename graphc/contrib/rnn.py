"""gc.contrib.rnn: TF1's tf.contrib.rnn names for the cells and static RNNs of gc.nn."""
from graphc.ops.rnn import (bidirectional_dynamic_rnn, dynamic_rnn,  # noqa: F401
                            static_bidirectional_rnn, static_rnn)
from graphc.ops.rnn_cell import *  # noqa: F401,F403
from graphc.ops.rnn_cell import __all__ as _cells

__all__ = list(_cells) + ["static_rnn", "static_bidirectional_rnn"]
