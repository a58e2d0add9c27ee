"""tensorflow.python.ops.control_flow_ops: cond, case, while_loop, group, tuple, ..."""
from graphc.ops.cond_v2 import case, cond  # noqa: F401
from graphc.ops.control_flow_ops import Assert, group, identity, no_op, tuple  # noqa: F401
from graphc.ops.while_v2 import while_loop  # noqa: F401
