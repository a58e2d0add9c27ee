"""LLVM types of graphc dtypes (numpy names) and scalar load/store between memory and registers.

Registers: bool is i1, float16 is computed in float (it only exists as half in memory).
Memory: bool is i8 (numpy's layout), float16 is half.
"""
from llvmlite import ir

_FLOAT_BITS = {"float16": 16, "float32": 32, "float64": 64}
_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64,
             "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}

I1 = ir.IntType(1)
I8 = ir.IntType(8)


def dtype_name(dtype):
    """'float32' for 'float32', numpy dtypes and objects with a .name (graphc DType)."""
    return dtype if isinstance(dtype, str) else getattr(dtype, "name", str(dtype))


def is_float(dtype):
    return dtype_name(dtype) in _FLOAT_BITS


def is_bool(dtype):
    return dtype_name(dtype) == "bool"


def is_integer(dtype):
    return dtype_name(dtype) in _INT_BITS


def is_unsigned(dtype):
    return dtype_name(dtype).startswith("uint")


def bits(dtype):
    """Bit width of the value (bool: 1)."""
    name = dtype_name(dtype)
    if name == "bool":
        return 1
    return _FLOAT_BITS.get(name) or _INT_BITS[name]


def llvm_type(dtype):
    """Register type: i1 for bool, float for float16 (computed in float32)."""
    name = dtype_name(dtype)
    if name == "bool":
        return I1
    if name in ("float16", "float32"):
        return ir.FloatType()
    if name == "float64":
        return ir.DoubleType()
    if name in _INT_BITS:
        return ir.IntType(_INT_BITS[name])
    raise TypeError(f"no LLVM type for dtype {name}")


def memory_type(dtype):
    """In-memory element type: i8 for bool, half for float16."""
    name = dtype_name(dtype)
    if name == "bool":
        return I8
    if name == "float16":
        return ir.HalfType()
    return llvm_type(name)


def itemsize(dtype):
    return 1 if is_bool(dtype) else bits(dtype) // 8


def element_pointer(builder, base, index, dtype, name=""):
    """Address of element `index` (an integer Value) of a `dtype` array at `base`."""
    return builder.gep(base, [index], inbounds=True, name=name,
                       source_etype=memory_type(dtype))


def load_scalar(builder, ptr, dtype, name=""):
    """Loads one element at ptr and converts it to its register type."""
    name_ = dtype_name(dtype)
    value = builder.load(ptr, typ=memory_type(name_), name=name)
    if name_ == "bool":
        return builder.icmp_unsigned("!=", value, ir.Constant(I8, 0))
    if name_ == "float16":
        return builder.fpext(value, ir.FloatType())
    return value


def store_scalar(builder, value, ptr, dtype):
    """Converts a register value to its memory type and stores it at ptr."""
    name_ = dtype_name(dtype)
    if name_ == "bool":
        value = builder.zext(value, I8)
    elif name_ == "float16":
        value = builder.fptrunc(value, ir.HalfType())
    return builder.store(value, ptr)
