"""Running one op's NumPy reference kernel, and the Session state its stateful kernels read
and write. The reference executor runs every op this way; constant folding and the
compiler's interpreter run single ops with it."""
import numpy as np

from graphc import errors
from graphc.framework.op_def import kernel_outputs
from runtime import memory


class SessionState:
    """What persists in a Session between runs: variables, random generators, iterators."""

    def __init__(self):
        self.variables = {}
        self.rngs = {}
        self.iterators = {}  # tf.data iterator positions by name (graphc/data/iterator_ops.py)
        self.print_counts = {}  # runs so far of each Print op, by name (its first_n)
        self.queues = {}  # FIFOQueue/RandomShuffleQueue elements by queue name (queue_ops)
        self.tables = {}  # lookup tables' entries by table name (ops/lookup_ops.py)
        self.readers = {}  # TF1 readers' positions by reader name (ops/reader_ops.py)
        self.operation_timeout_ms = 0  # the longest a queue wait lasts; 0: no limit

    # resource kind (an attribute above) -> (what the error calls it, its error class)
    _RESOURCES = {"queues": ("queue", errors.CancelledError),
                  "tables": ("table", errors.NotFoundError),
                  "readers": ("reader", errors.NotFoundError)}

    def resource(self, kind, handle):
        """The queue, table or reader a string handle names; a KernelError naming it when
        the op creating it has not run in this Session (a handle fed from elsewhere)."""
        name = np.asarray(handle, object)[()]
        name = name.decode() if isinstance(name, bytes) else str(name)  # a fed handle: bytes
        found = getattr(self, kind).get(name)
        if found is None:
            what, cls = self._RESOURCES[kind]
            raise errors.KernelError(f"{what} '{name}' was not created in this Session (run "
                                     f"the op creating it first)", cls)
        return found

    def rng_for(self, op):
        """The op's generator: seeded by (seed, seed2) when set, else from OS entropy."""
        rng = self.rngs.get(op.name)
        if rng is None:
            seed, seed2 = op.attrs.get("seed"), op.attrs.get("seed2")
            if seed is None and seed2 is None:
                rng = np.random.default_rng()
            else:
                rng = np.random.default_rng([int(seed or 0), int(seed2 or 0)])
            self.rngs[op.name] = rng
        return rng


def run_kernel(op, args, state, check_shapes=True):
    """Runs one op's reference kernel; returns its outputs as arrays of the declared dtypes
    (of its static shapes too, unless `check_shapes` is False)."""
    op_def = op.op_def
    _refuse_oversized(op, [t.shape.as_tuple_or_none() for t in op.outputs])
    try:
        if op_def.uses_context:
            out = op_def.kernel(state, op, *args)
        else:
            out = op_def.kernel(*args, **op.attrs)
    except errors.OpError:
        raise
    except errors.KernelError as e:
        raise errors.op_error(op, str(e), e.cls) from None
    except (ValueError, IndexError, TypeError, ArithmeticError) as e:
        raise errors.op_error(op, f"{type(e).__name__}: {e}") from None
    except MemoryError as e:  # a size known only now, past what NumPy could allocate
        raise errors.op_error(op, f"OOM when allocating: {e}", errors.ResourceExhaustedError) from None
    outs = kernel_outputs(op, out)
    _refuse_oversized(op, [np.shape(v) for v in outs])  # sizes known only now
    results = []
    for t, v in zip(op.outputs, outs):
        v = np.asarray(v)
        if v.dtype != t.dtype.np:
            v = v.astype(t.dtype.np)
        if check_shapes and not t.shape.is_compatible_with(v.shape):
            raise errors.op_error(op, f"kernel produced shape {v.shape} for {t.name}, whose static "
                               f"shape is {t.shape} (a graphc bug)", errors.InternalError)
        results.append(v)
    return results


def _refuse_oversized(op, shapes):
    """ResourceExhaustedError for an output of op whose shape needs more memory than
    the machine has: checked on the static shapes before its kernel runs (NumPy might
    allocate it lazily, then fill it), and on the shapes the kernel produced."""
    for t, shape in zip(op.outputs, shapes):
        if shape is None or None in shape or t.dtype.name == "string":
            continue
        message = memory.oom_message(shape, t.dtype.np)
        if message is not None:
            raise errors.op_error(op, message, errors.ResourceExhaustedError)
