"""Kernels identical up to their buffers are emitted once, before any IR is built.

dedupe.py merges identical kernel functions by their text, after every kernel was built:
a deep model's repeated layers still cost their full Python-side IR building (most of
codegen's time). Here a kernel gets a structural key first, everything its lowering reads
of it: kind, dims, each node's op type and attrs, the dtype and dims of each value, the
in-kernel wiring (values numbered in order of first use), which values it outputs, and of
each value computed outside it by a producer the lowerings look at (_PRODUCERS_READ and
updates: a scalar Const is inlined in the code, a constant's array read, a feed's or
variable's storage named by it) the producer's op type and attrs. Any other producer's
value is read through its buffer alone, so its op type is left out: an unrolled LSTM's
backward step kernels read the cell state's gradient from an AddN in some steps and a
Mul in another, and were built and compiled once more for it. A kernel whose key was
seen reuses the earlier kernel's function with its own buffers.

Its buffers are found by asking the Program the storage questions (storage_of,
stores_of, unread_stores: which stores may stream past the caches, and scratch_of of the
kernel itself: a conv's im2col buffer) the first lowering
asked, of the corresponding values. Reuse happens only when
the answers have the same pattern (which are equal, their kinds, how many stores) and
every pointer the first function takes is one of those answers or a variable the key
numbers. A first lowering that made error sites (they name their node) or asked about a
value the key does not number is never reused. Random ops (their state is named after the
node) and opaque kernels are always emitted.

An unrolled RNN's step kernels differ in one more thing: which output of a Split or Unpack
of the stacked sequence each step reads (its row of the stack). Output k of an equal split
is the input's elements from k times a fixed stride on, in the input's row-major order, so
the key counts the output read as the first and the replay passes the input's pointer
moved by (k - the first lowering's k) strides: the first function, reading its own row,
then reads the replay's. Only where that pointer is read through this one view (RowRead):
the split's input (or a chain of reshapes inside the kernel down to a stored value, which
keep the row-major order) has no other reader in the kernel, one output of the split is
read and none is stored, and the stored value's buffer answers no other storage question.
A 32-step LSTM's 61 step kernels, each built and then merged as LLVM text by
dedupe.merge_offset_kernels before, are built 4 times (the first step of each direction
differs).
"""
import numpy as np

from graphc.compiler.ir import PARAMETER, Value
from graphc.compiler.loops.expr import dim_key
from graphc.framework.op_def import RANDOM_OP_TYPES, UPDATE_OPS, OpTypes
from graphc.framework.symbolic import SymDim

_ROW_ORDER_KEEPING = OpTypes("aliases_input")  # input 0's elements in the same order
_SPLITS = ("Split", "Unpack")  # equal pieces, each a row of the input (_row_stride)

REUSABLE_KINDS = ("loop", "gemm", "conv")
# producers of a kernel's outside values whose op type or attrs its lowering reads (views
# and Program.storage_of): constants, feeds and variables, and updates (their value is
# their variable's)
_PRODUCERS_READ = ("Const", PARAMETER, "VariableV2")
_ASKED = ("storage_of", "stores_of", "scratch_of", "unread_stores")
_LISTS = ("stores_of", "unread_stores")  # questions answered with a list of storage keys
_KERNEL = "kernel"  # the number of the kernel itself in a lowering's log (scratch_of's)
_NOT_REUSABLE = "not reusable"


class KernelReuse:
    """Lowers the kernels of one Program, reusing the function of a structurally equal one."""

    def __init__(self, program):
        self.program = program
        self._seen = {}  # structural key -> _Lowering or _NOT_REUSABLE
        self.reused = 0
        self._memo = KeyMemo()

    def lower(self, lower, kernel, name, scalar_ops, rules):
        key = structural_key(kernel, self._memo)
        seen = self._seen.get(key) if key is not None else None
        if isinstance(seen, _Lowering):
            result = seen.replay(self.program, kernel, self._memo)
            if result is not None:
                self.reused += 1
                return result
        first = _Lowering(kernel, self._memo)
        result = first.run(self.program, lower, name, scalar_ops, rules)
        if key is not None and seen is None:
            self._seen[key] = first if first.reusable() else _NOT_REUSABLE
        return result


class _Lowering:
    """One kernel's lowering, with the storage questions it asked by value number."""

    def __init__(self, kernel, memo):
        self.kernel = kernel
        self.objects, self.index = _objects(kernel)
        self.row_reads = memo.row_reads(kernel)
        self.log = []  # (question, value number or None, answer)
        self.result = None
        self.new_sites = 0

    def run(self, program, lower, name, scalar_ops, rules):
        sites = len(program.error_sites)
        for question in _ASKED:  # KernelViews binds these when the lowering starts
            setattr(program, question, self._recorder(getattr(program, question), question))
        try:
            self.result = lower(program, self.kernel, name, scalar_ops, rules)
        finally:
            for question in _ASKED:
                delattr(program, question)  # the class's method again
        self.new_sites = len(program.error_sites) - sites
        return self.result

    def _recorder(self, ask, question):
        def recorded(value):
            answer = ask(value)
            number = _KERNEL if value is self.kernel else self.index.get(id(value))
            self.log.append((question, number, answer))
            return answer
        return recorded

    def reusable(self):
        if self.new_sites or any(number is None for _, number, _ in self.log):
            return False
        roles, _ = self._own_pattern()
        return all(s in roles for s in self.result[1])

    def _own_pattern(self):
        """_pattern of this lowering's log, made once: every replay compares with it (an
        unrolled RNN's step kernels replay one lowering per step)."""
        if not hasattr(self, "_roles_and_pattern"):
            self._roles_and_pattern = _pattern(self.log, self.objects)
        return self._roles_and_pattern

    def _moved_role(self, read, roles):
        """The role of the storage a row read's pointer moves: its stored source's, a
        pointer the function takes that answers no question about another value; else
        None (then only a kernel reading the same row reuses it: moving the pointer would
        move other reads too)."""
        number = self.index[id(read.source)]
        asked = {answer for question, n, answer in self.log
                 if question == "storage_of" and n == number}
        if len(asked) != 1 or None in asked:
            return None
        (key,) = asked
        if key[0] == "var" or key not in self.result[1]:
            return None
        for question, n, answer in self.log:
            answers = answer if question in _LISTS else [answer]
            if n != number and key in answers:
                return None
        return roles[key]

    def replay(self, program, kernel, memo):
        """(function, storages) for `kernel`, or None when its buffers' pattern differs."""
        objects, _ = _objects(kernel)
        try:
            log = [(q, n, getattr(program, q)(kernel if n == _KERNEL else objects[n]))
                   for q, n, _ in self.log]
        except LookupError:  # no buffer where the first had one: its own lowering says why
            return None
        roles, pattern = self._own_pattern()
        their_roles, their_pattern = _pattern(log, objects)
        if pattern != their_pattern:
            return None
        key_of_role = {role: key for key, role in their_roles.items()}
        theirs = memo.row_reads(kernel)
        if len(theirs) != len(self.row_reads):
            return None
        for mine, their in zip(self.row_reads, theirs):
            shift = (their.output - mine.output) * mine.stride_bytes
            if not shift:
                continue
            role = self._moved_role(mine, roles)
            if role is None or their.stride_bytes != mine.stride_bytes:
                return None
            key_of_role[role] = ("shifted", key_of_role[role], shift)
        fn, storages = self.result
        return fn, [key_of_role[roles[s]] for s in storages]


def _pattern(log, objects):
    """({storage key: role}, pattern): a key's role is where it was first answered (or the
    variable it is); the pattern lists every answer's roles, so two lowerings with equal
    patterns have their keys in one-to-one correspondence."""
    roles, pattern = {}, []
    for question, number, answer in log:
        keys = list(answer) if question in _LISTS else [] if answer is None else [answer]
        for slot, key in enumerate(keys):
            roles.setdefault(key, (question, number, slot, key[0]))
        pattern.append((question, number, tuple(roles[k] for k in keys)))
    for number, obj in enumerate(objects):
        name = _variable_name(obj)
        if name is not None:
            key = ("var", name)
            roles.setdefault(key, ("var", number))
            pattern.append(("var", number, roles[key]))
    return roles, pattern


def _variable_name(obj):
    """The variable a kernel may address directly by name (an update's ref, a read)."""
    node = getattr(obj, "node", None)
    if node is None:
        return getattr(obj, "name", None)
    return node.name if node.type == "VariableV2" else None


def _objects(kernel):
    """The values and variable refs the kernel's nodes use, in order of first use, and
    {id: number}."""
    objects, index = [], {}
    for node in kernel.nodes:
        for obj in list(node.inputs) + list(node.outputs):
            if id(obj) not in index:
                index[id(obj)] = len(objects)
                objects.append(obj)
    return objects, index


class KeyMemo:
    """What the keys of one module's kernels ask again, made once: a value is in the key
    of its producer's kernel and of each reader's (the keys were a quarter of depth 256's
    codegen), and an unrolled RNN's Unpack of its input is copied into every step's
    kernel, each key walking its outputs (a 32-step LSTM's keys were a fifth of its
    codegen). By id: the module's nodes, values and kernels live as long as the memo."""

    def __init__(self):
        self._attrs, self._objects, self._strides, self._reads = {}, {}, {}, {}

    def attrs(self, node):
        found = self._attrs.get(id(node))
        if found is None:
            found = self._attrs[id(node)] = canonical(node.attrs)
        return found

    def object_key(self, obj, inside):
        node = getattr(obj, "node", None)
        computed_inside = node is not None and id(node) in inside
        found = self._objects.get((id(obj), computed_inside))
        if found is None:
            found = self._objects[id(obj), computed_inside] = _object_key(
                obj, computed_inside, self)
        return found

    def row_stride(self, node):
        if node.type not in _SPLITS:
            return None
        if id(node) not in self._strides:
            self._strides[id(node)] = _row_stride(node)
        return self._strides[id(node)]

    def row_reads(self, kernel):
        if id(kernel) not in self._reads:
            self._reads[id(kernel)] = row_reads(kernel, self)
        return self._reads[id(kernel)]


def structural_key(kernel, memo=None):
    """A hashable key equal for kernels whose lowerings build the same code up to buffer
    names, or None when the kernel is never reused. memo: the KeyMemo of the kernels of
    one module."""
    memo = KeyMemo() if memo is None else memo
    if kernel.kind not in REUSABLE_KINDS or any(n.type in RANDOM_OP_TYPES
                                                for n in kernel.nodes):
        return None
    objects, index = _objects(kernel)
    inside = {id(n): k for k, n in enumerate(kernel.nodes)}
    # a row read's output counts as the split's first: the replay moves the pointer
    read_as = {id(r.node.outputs[r.output]): r.node.outputs[0]
               for r in memo.row_reads(kernel)}
    try:
        nodes = tuple((n.type, memo.attrs(n),
                       tuple(index[id(read_as.get(id(i), i))] for i in n.inputs),
                       tuple(index[id(o)] for o in n.outputs)) for n in kernel.nodes)
        outputs = tuple(index[id(v)] for v in kernel.outputs)
        inputs = tuple(index[id(v)] for v in kernel.inputs)
    except KeyError:  # a value outside the nodes' wiring: nothing to match it by
        return None
    main = inside.get(id(kernel.main)) if kernel.main is not None else -1
    if main is None:
        return None
    return (kernel.kind, _dims(kernel.dims), main, nodes, outputs, inputs,
            tuple(memo.object_key(o, inside) for o in objects))


class RowRead:
    """A split's one output read in a kernel: `output` (its index), the stored `source`
    its elements come from, and the bytes between two outputs' first elements there."""

    def __init__(self, node, output, source, stride_bytes):
        self.node = node
        self.output = output
        self.source = source
        self.stride_bytes = stride_bytes


def row_reads(kernel, memo=None):
    """The kernel's RowReads (see the module docstring), in node order."""
    memo = KeyMemo() if memo is None else memo
    if not any(n.type in _SPLITS for n in kernel.nodes):
        return []  # most kernels: no use list to build (every kernel's key asks)
    users, stored = {}, {id(v) for v in kernel.outputs}
    for n in kernel.nodes:
        for v in n.inputs:
            users.setdefault(id(v), []).append(n)
    inside = {id(n) for n in kernel.nodes}
    reads = []
    for n in kernel.nodes:
        stride = memo.row_stride(n)
        if stride is None:
            continue
        read = [k for k, v in enumerate(n.outputs) if id(v) in users]
        if len(read) != 1 or any(id(v) in stored for v in n.outputs):
            continue
        source = _stored_source(n, users, stored, inside)
        if source is not None:
            itemsize = np.dtype(getattr(source.dtype, "name", source.dtype)).itemsize
            reads.append(RowRead(n, read[0], source, stride * itemsize))
    return reads


def _row_stride(node):
    """Elements between the first elements of two consecutive outputs of an Unpack or
    an equal Split, in the input's row-major order; None for other nodes, or unknown."""
    if node.type == "Unpack":
        x, axis = node.inputs[0], node.attrs.get("axis", 0)
    elif node.type == "Split" and node.inputs[0].node.type == "Const":
        x = node.inputs[1]
        axis = int(np.reshape(node.inputs[0].node.attrs["value"], -1)[0])
    else:
        return None
    if not x.dims or any(v.dims is None for v in node.outputs):
        return None
    axis %= len(x.dims)
    size = 1 if node.type == "Unpack" else node.outputs[0].dims[axis]
    sizes = {dim_key(v.dims[axis]) for v in node.outputs} if node.type == "Split" else {1}
    inner = [dim_key(d) for d in x.dims[axis + 1:]]
    if sizes != {dim_key(size)} or not all(isinstance(d, int) for d in inner + [*sizes]):
        return None  # pieces of different or run-time sizes
    return int(dim_key(size)) * int(np.prod(inner, dtype=np.int64))


def _stored_source(node, users, stored, inside):
    """The value computed outside the kernel whose elements `node`'s data input holds in
    order (through reshapes inside it, each read by the next alone), or None."""
    v = node.inputs[0] if node.type == "Unpack" else node.inputs[1]
    reader = node
    while True:
        if not isinstance(v, Value) or len(users.get(id(v), ())) != 1 or \
                users[id(v)][0] is not reader or id(v) in stored:
            return None
        if id(v.node) not in inside:
            break
        if v.node.type not in _ROW_ORDER_KEEPING:
            return None
        reader, v = v.node, v.node.inputs[0]
    if v.node.type == "VariableV2" or v.node.type in UPDATE_OPS:
        return None  # read by name, not through a pointer the entry passes
    return v


def _object_key(obj, computed_inside, memo):
    dtype = getattr(obj.dtype, "name", obj.dtype)
    key = (type(obj).__name__, str(dtype), _dims(obj.dims))
    node = getattr(obj, "node", None)
    if node is None:
        return key
    if computed_inside:
        return key + (obj.index,)
    if node.type not in _PRODUCERS_READ and node.type not in UPDATE_OPS:
        return key + ("stored",)
    return key + (obj.index, node.type, memo.attrs(node))


def _dims(dims):
    if dims is None:
        return None
    return tuple(d if type(d) is int else dim_key(d) for d in dims)


def canonical(x):
    """A hashable form of an attr value, equal only for values that lower the same:
    arrays by dtype, shape and bytes; floats by their bits (0.0 is not -0.0)."""
    if isinstance(x, dict):
        return ("dict", tuple(sorted((str(k), canonical(v)) for k, v in x.items())))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(canonical(v) for v in x))
    if isinstance(x, (set, frozenset)):
        return ("set", frozenset(canonical(v) for v in x))
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape, np.ascontiguousarray(x).tobytes())
    if isinstance(x, np.generic):
        return ("scalar", x.dtype.str, x.tobytes())
    if isinstance(x, float):
        return ("float", x.hex())
    if isinstance(x, SymDim):
        return ("dim", dim_key(x))
    if x is None or isinstance(x, (bool, int, str, bytes)):
        return (type(x).__name__, x)
    return ("object", type(x).__qualname__, getattr(x, "name", None), repr(x))
