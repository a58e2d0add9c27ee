"""The gc.debugging namespace."""
from graphc.ops.control_flow_ops import add_check_numerics_ops, check_numerics  # noqa: F401
