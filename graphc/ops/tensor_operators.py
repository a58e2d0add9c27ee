"""Python operators on Tensors (x + y, x @ w, x[1:, ::2], -x, x < y), as in TF1.

The functions are looked up when an operator is used, so this module can be imported
before the op modules that define them.
"""
from graphc.framework.graph import Tensor

_BINARY = {
    "add": ("math_ops", "add"), "sub": ("math_ops", "subtract"),
    "mul": ("math_ops", "multiply"), "truediv": ("math_ops", "truediv"),
    "floordiv": ("math_ops", "floordiv"), "mod": ("math_ops", "floormod"),
    "pow": ("math_ops", "pow"), "matmul": ("matmul_ops", "matmul"),
    "and": ("math_ops", "logical_and"), "or": ("math_ops", "logical_or"),
    "xor": ("math_ops", "logical_xor"),
}
_COMPARE = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}
_UNARY = {"neg": "negative", "abs": "abs", "invert": "logical_not"}


def _fn(module, name):
    import importlib
    return getattr(importlib.import_module("graphc.ops." + module), name)


def _binary(module, name, reverse):
    def op(self, other):
        from graphc.ops.constant_ops import convert_to_tensor
        if reverse:
            return _fn(module, name)(convert_to_tensor(other, dtype_hint=self.dtype), self)
        return _fn(module, name)(self, other)
    return op


for _py, (_mod, _name) in _BINARY.items():
    setattr(Tensor, f"__{_py}__", _binary(_mod, _name, False))
    setattr(Tensor, f"__r{_py}__", _binary(_mod, _name, True))
for _py, _name in _COMPARE.items():
    setattr(Tensor, f"__{_py}__", _binary("math_ops", _name, False))
for _py, _name in _UNARY.items():
    setattr(Tensor, f"__{_py}__", (lambda n: lambda self: _fn("math_ops", n)(self))(_name))
Tensor.__getitem__ = lambda self, key: _fn("array_ops", "slice_helper")(self, key)
