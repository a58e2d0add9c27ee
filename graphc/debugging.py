"""The gc.debugging namespace."""
from graphc.ops.control_flow_ops import add_check_numerics_ops, check_numerics  # noqa: F401
from graphc.ops.check_ops import *  # noqa: F401,F403,E402
