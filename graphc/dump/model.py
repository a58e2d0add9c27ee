"""What graphc-dump shows, read from a compiled file or a saved graph, as plain data.

`read_dump(path)` -> a Dump: the file's kind ("compiled" or "graph"), its signature and
target, the graph at each stage as a list of op rows, the kernels, the memory plan, the
pass counts and texts, and the generated code. Rendering (text, dot, json, html) is in the
sibling modules; they only read a Dump.
"""
import json
import re

from graphc import graph_io
from runtime import file_format, shapes


class DumpError(Exception):
    """A file or request graphc-dump cannot serve; its message is one line for the user."""


class Op:
    """One row of an op table: what the dump shows of a node."""
    __slots__ = ("id", "name", "type", "dtype", "shape", "inputs", "kernels", "attrs",
                 "location")

    def __init__(self, id, name, type, dtype, shape, inputs, attrs="", location=None):
        self.id, self.name, self.type = id, name, type
        self.dtype, self.shape, self.inputs = dtype, shape, inputs
        self.kernels = []
        self.attrs = attrs
        self.location = location         # "file:line (function)" of the user's call, or None

    def to_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


class Dump:
    def __init__(self, path, kind):
        self.path = path
        self.kind = kind                 # "compiled" | "graph"
        self.format_version = None
        self.target = None
        self.signature = None
        self.variants = []               # compiled: per executable {"guards": [...]}
        self.state = []
        self.stages = {}                 # "before"/"after" -> [Op]
        self.kernels = []                # [{"name", "kind", "nodes", ..., "code"}]
        self.memory_plan = None
        self.pass_counts = {}
        self.pass_texts = {}
        self.symbol_hints = {}
        self.code = ""                   # the module's code as the target runs it
        self.code_language = "LLVM IR"   # or "PTX" for a GPU file

    def to_dict(self):
        """Everything the text summary shows, plus each kernel's code and the target."""
        out = {"kind": self.kind, "path": self.path, "format_version": self.format_version}
        if self.kind == "compiled":
            out.update(target=self.target, signature=self.signature, executables=self.variants,
                       state=self.state, kernels=self.kernels, memory_plan=self.memory_plan,
                       pass_counts=self.pass_counts, passes_recorded=list(self.pass_texts),
                       symbol_hints=self.symbol_hints)
        else:
            out["collections"] = getattr(self, "collections", {})
        out["stages"] = {k: [op.to_dict() for op in v] for k, v in self.stages.items()}
        return out

    def kernel(self, key):
        """A kernel by index, name or LLVM function name."""
        for i, k in enumerate(self.kernels):
            if key in (str(i), k["name"], k.get("function")):
                return k
        names = ", ".join(f"{i} ({k['name']})" for i, k in enumerate(self.kernels)) or "none"
        raise DumpError(f"no kernel {key!r}; kernels: {names}")


def read_dump(path):
    try:
        with open(path, "rb") as f:
            head = f.read(len(file_format.MAGIC))
    except OSError as e:
        raise DumpError(f"cannot read {path}: {e.strerror or e}") from None
    if head == file_format.MAGIC:
        return _compiled(path)
    return _graph(path)


# ------------------------------------------------------------------ compiled files
def _compiled(path):
    try:
        file = file_format.read(path)
    except file_format.FileFormatError as e:
        raise DumpError(str(e)) from None
    h = file.header
    d = Dump(path, "compiled")
    d.format_version = file.version
    d.target = h["target"]
    d.signature = h["signature"]
    d.state = [{"name": s["name"], "dtype": s["dtype"], "shape": s["shape"]}
               for s in h["state"]]
    main = h["executables"][0]
    d.variants = [{"guards": [shapes.guard_text(g) for g in e["guards"]]}
                  for e in h["executables"]]
    debug = main.get("debug") or {}
    d.code, d.code_language, functions = _module_code(main)
    d.pass_counts = debug.get("pass_counts") or {}
    d.pass_texts = debug.get("pass_texts") or {}
    d.symbol_hints = debug.get("symbol_hints") or {}
    records = debug.get("kernels") or []
    called = _kernel_calls(_entry_code(functions, main.get("entry") or "graphc_main"),
                           len(records))
    for i, k in enumerate(records):
        k = dict(k)
        prefix = k.get("function_prefix", f"kernel_{i}_")
        names = [f for f in functions if f.startswith(prefix)]
        if not names and called:
            # an identical kernel's function runs it (kernel_reuse.py, dedupe.py)
            k["shares_code_of"] = called[i]
            owner = _KERNEL_PREFIX.match(called[i]).group(0)
            names = [f for f in functions if f.startswith(owner)]
        k["function"] = names[0] if names else None
        k["code"] = "\n".join(functions[f] for f in names)
        k["dims_text"] = "" if k.get("dims") is None else shapes.dims_text(k["dims"])
        d.kernels.append(k)
    for stage, key in (("before", "graph_before"), ("after", "graph_after")):
        if debug.get(key):
            d.stages[stage] = _module_ops(debug[key])
    in_kernel = {}
    for i, k in enumerate(d.kernels):
        for node_id in k.get("nodes", []):
            in_kernel.setdefault(node_id, []).append(i)
    for op in d.stages.get("after", []):
        op.kernels = in_kernel.get(op.id, [])
    d.memory_plan = debug.get("memory_plan")
    return d


_DEFINE = re.compile(r'^define [^@]*@"?([\w.$-]+)"?\(')
# a PTX function: `.visible .entry name(` or `.func (.reg ...) name(`, its body ends at "}"
_PTX_FUNCTION = re.compile(r'^(?:\.visible\s+|\.weak\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?'
                           r'([A-Za-z_$%][\w$]*)\s*\(')


_KERNEL_PREFIX = re.compile(r"kernel_\d+_")
_CALL = re.compile(r'\bcall [^@]*@"?(kernel_\d+_[\w.$-]*?)"?\(')


def _entry_code(functions, entry):
    """The entry's code followed by that of the segments it calls, in order (a long entry
    calls its kernels through segment functions: backends/cpu/entry.py)."""
    code = functions.get(entry, "")
    segments = re.findall(r'\bcall [^@]*@"?(' + re.escape(entry) + r'\.segment\d+)"?\(', code)
    return "\n".join([code] + [functions.get(s, "") for s in segments])


def _kernel_calls(entry_code, n_kernels):
    """The kernel functions the CPU entry calls, in schedule order: one call per kernel,
    or None when the calls do not line up one to one with the kernels."""
    calls = _CALL.findall(entry_code)
    return calls if calls and len(calls) == n_kernels else None


def _module_code(executable):
    """(module text, its language, {function name: text}). A GPU file's kernels run as its
    PTX; the CPU emulation IR in the file is only how tests run them without a GPU, so it
    is shown only when the file carries no PTX."""
    if executable.get("ptx"):
        return executable["ptx"], "PTX", _functions(executable["ptx"], _PTX_FUNCTION)
    if executable.get("llvm_ir"):
        return executable["llvm_ir"], "LLVM IR", _functions(executable["llvm_ir"])
    ir = executable.get("emulation_ir") or ""
    return ir, "LLVM IR (CPU emulation: this GPU file carries no PTX)", _functions(ir)


def _functions(code, define=_DEFINE):
    """{function name: its text} for every function defined in the module."""
    out, name, lines = {}, None, []
    for line in code.splitlines():
        if name is None:
            m = define.match(line)
            if m:
                name, lines = m.group(1), [line]
        else:
            lines.append(line)
            if line == "}":
                out[name] = "\n".join(lines) + "\n"
                name = None
    return out


def dim_text(d):
    if d is None:
        return "?"
    if isinstance(d, dict):
        return shapes.to_text(d["expr"])
    return shapes.to_text(d)


def _dims_text(dims):
    return "[*]" if dims is None else "[" + ",".join(dim_text(d) for d in dims) + "]"


def _module_ops(module):
    nodes = {n["id"]: n for n in module["nodes"]}

    def ref_name(r):
        if isinstance(r, dict):
            return "&" + r["var"]
        node = nodes.get(r[0])
        if node is None:
            return f"%{r[0]}"
        name = node["name"]
        if node["type"] == "Parameter" or len(node["outputs"]) == 1:
            return name
        return f"{name}:{r[1]}"
    ops = []
    for n in module["nodes"]:
        outs = n["outputs"]
        dtype = ",".join(o["dtype"] for o in outs) or "-"
        shape = " ".join(_dims_text(o["dims"]) for o in outs) or "-"
        ops.append(Op(n["id"], n["name"], n["type"], dtype, shape,
                      [ref_name(r) for r in n["inputs"]], _attrs_text(n["attrs"]),
                      _location_text(n.get("location"))))
    return ops


def _location_text(location):
    """[file, line, function] as the user reads it; None when the file records none."""
    if not isinstance(location, (list, tuple)) or len(location) < 2:
        return None
    where = f"{location[0]}:{location[1]}"
    return f"{where} ({location[2]})" if len(location) > 2 and location[2] else where


def _attrs_text(attrs):
    parts = []
    for k, v in sorted(attrs.items()):
        if k in ("dtype", "T", "index"):
            continue
        parts.append(f"{k}={_attr_text(v)}")
    return " ".join(parts)


def _attr_text(v):
    if isinstance(v, dict):
        if "elided" in v:
            e = v["elided"]
            return f"<{e['dtype']} array {e['shape']}>"
        if "ndarray" in v:
            return f"<{v['dtype']} array {v['shape']}>"
        if "dtype" in v and len(v) == 1:
            return v["dtype"]
        if "shape" in v and len(v) == 1:
            return "[*]" if v["shape"] is None else json.dumps(v["shape"]).replace(" ", "")
        if "tuple" in v:
            return "(" + ",".join(_attr_text(x) for x in v["tuple"]) + ")"
        return json.dumps(v)[:40]
    if isinstance(v, list):
        return "[" + ",".join(_attr_text(x) for x in v) + "]"
    return json.dumps(v)


# ------------------------------------------------------------------ saved graphs
def _graph(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
        tf_message = graph_io.tf_graph_message(raw)
        if tf_message is not None:
            return _tf_graph(path, tf_message)
        data = graph_io._parse_json(raw, path)
        meta = data if data.get("format") == graph_io.META_FORMAT else None
        graph_def = graph_io._to_graph_def(data)
    except OSError as e:
        raise DumpError(f"cannot read {path}: {e.strerror or e}") from None
    except (ValueError, TypeError, KeyError) as e:
        if "is not a graphc graph file" in str(e):
            raise DumpError(f"{path}: not a graphc compiled file or saved graph") from None
        raise DumpError(f"{path}: {e}") from None
    d = Dump(path, "graph")
    d.format_version = data.get("version")
    _graph_ops(d, graph_def.node)
    if meta:
        d.collections = {k: len(v) for k, v in (meta.get("collections") or {}).items()}
    return d


def _tf_graph(path, message):
    """A TensorFlow GraphDef or MetaGraphDef proto (.pb, .pbtxt, .meta): imported into a
    graphc Graph (so dtypes and shapes are inferred as for graphc's own files), then shown
    as one; a graph graphc cannot import is refused naming the op, as import_graph_def does."""
    from graphc.framework.graph import Graph
    kind = type(message).DESCRIPTOR.name
    graph = Graph()
    try:
        with graph.as_default():
            graph_io.import_graph_def(message.graph_def if kind == "MetaGraphDef" else message,
                                      name="")
    except (ValueError, TypeError, KeyError, NotImplementedError) as e:
        raise DumpError(f"{path}: a TensorFlow {kind} graphc cannot import: {e}") from None
    d = Dump(path, "graph")
    d.format_version = f"TensorFlow {kind}"
    _graph_ops(d, graph_io.json_graph_def(graph).node)
    if kind == "MetaGraphDef":
        d.collections = {k: len(c.node_list.value) + len(c.bytes_list.value) +
                         len(c.int64_list.value) + len(c.float_list.value) +
                         len(c.any_list.value)
                         for k, c in message.collection_def.items()}
    return d


def _graph_ops(d, nodes):
    """d.stages["graph"]: one Op per node dict (graph_io's form)."""
    ops = []
    for i, n in enumerate(nodes):
        shapes_ = n.get("output_shapes") or []
        dtypes_ = n.get("output_dtypes") or []
        dtype = ",".join(dtypes_) or "-"
        shape = " ".join("[*]" if s is None else
                         "[" + ",".join("?" if x is None else str(x) for x in s) + "]"
                         for s in shapes_) or "-"
        inputs = list(n.get("inputs", [])) + ["^" + c for c in n.get("control_inputs", [])]
        ops.append(Op(i, n["name"], n["op"], dtype, shape, inputs,
                      _attrs_text(n.get("attrs") or {}), _location_text(n.get("location"))))
    d.stages["graph"] = ops
