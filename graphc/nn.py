"""The gc.nn namespace."""
from graphc.ops.conv_ops import *  # noqa: F401,F403
from graphc.ops.nn_ops import *  # noqa: F401,F403
from graphc.ops.rnn import *  # noqa: F401,F403
from graphc.ops.candidate_sampling import *  # noqa: F401,F403
from graphc.ops import rnn_cell  # noqa: F401,E402  (gc.nn.rnn_cell.BasicLSTMCell, ...)
from graphc.ops.conv_variants import *  # noqa: F401,F403,E402
from graphc.ops.topk_ops import in_top_k, top_k  # noqa: F401,E402
from graphc.ops.lrn_ops import *  # noqa: F401,F403,E402
from graphc.tf0_names import deconv2d  # noqa: F401,E402  (TF before 0.7)
