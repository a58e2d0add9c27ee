"""The on-disk cache of finished executable specs: a warm process skips the Python compiler.

runtime's object cache (runtime/compile_cache.py) already skips LLVM for an unchanged IR;
this one also skips lowering, the passes and code generation (most of a warm first run's
compile time, tools/compile_time.py --scale --warm measures it). A run signature's key
(`signature_key`) is made from the graph before lowering: everything lowering reads, so
that a key changes whenever the lowered module, and so the generated code, could:
  - every op lowering may look at: the signature's ops and their ancestors (fed tensors
    cut the graph, as they cut lowering's shape inference), each with its name, type,
    attrs (arrays by a digest of their bytes), inputs, control inputs, output dtypes and
    static shapes, device, creation site and forward op (error messages name them), and
    the bodies (FuncGraphs) its attrs name, with their captures;
  - the feeds (dtype, static shape, creation site, the exact fed shape: dims of 0 or 1
    are specialized on and the others are the symbols' hints, which guards are decided
    on) and whether each may be specialized on its value; the fetches, the targets and
    the ops an earlier stage ran;
  - the held shapes of the variables those ops use (lowering reads them);
  - the compiler: a hash of graphc's, kernels' and runtime's sources (kept in the cache
    directory under the files' names, sizes and modification times), the LLVM, llvmlite
    and NumPy versions (constant folding runs NumPy), the target, the disabled passes and
    the environment settings codegen reads (_CODEGEN_ENV; GRAPHC_NUM_THREADS is not one:
    the thread count is set when the code is loaded, Executable.set_num_threads), and
    the compiling machine's cores as codegen uses them (gemm_team.MAX_UNITS: products
    are cut into at most that many units, so a spec made on 2 cores runs a 16-core
    machine's products on 2 units) and its cache size (loop_kernel.stream_threshold: which
    outputs are written past the caches).
The graph's part (the walk of the ops) is made once per state of the graph
(_graph_summary: Graph.version and Graph.edits, the bodies' too) for each set of ops
and feeds, each op's part of it (op_form) once per state of the op (kept on the op,
dropped by every change to it: Operation._changed); the rest is read on every key.
An op type registered outside graphc (a script's, a plugin's) has inference code the key
cannot see: such a signature is keyed on its lowered module instead, as before.
Fed VALUES are not in the key: lowering reads only those of the small integer feeds
shape inference asks for, and the spec records them (value_guards); `load` returns a spec
only when this run's feeds have those values, so the spec is the one lowering these feeds
would make. A module compiled directly (compile_module) is keyed on its plain-data form.
Entries live in the object cache's directory (GRAPHC_CACHE_DIR; "off" disables both) with
its checked, atomic writes: a truncated or corrupt entry fails its checksum and is
recompiled. Nothing is pickled: a spec is a JSON header, then its code texts (LLVM IR,
PTX) as UTF-8 and its constants' raw bytes, each of the length the header lists.
"""
import hashlib
import json
import marshal
import os
import platform
import weakref
from typing import NamedTuple

import numpy as np

from graphc.compiler.backends.cpu import gemm_team, loop_kernel
from graphc.dtypes import DType
from graphc.compiler.ir import encode_attr
from graphc.compiler.lower import specializable
from graphc.framework.op_def import OP_DEFS
from graphc.framework.subgraph import creation_order
from graphc.framework.tensor_shape import TensorShape
from runtime import compile_cache, file_format, jit

_SOURCES = None
_MARSHAL_FORMAT = 2  # the last without references (3 added them): see _GraphDigest
# environment settings the passes and codegen read: part of the key
_CODEGEN_ENV = ("GRAPHC_DISABLE_PASSES", "GRAPHC_PARALLEL", "GRAPHC_PARALLEL_MIN_WORK",
                "GRAPHC_PARALLEL_DEBUG")
# graph_summaries: walks of a graph's ops for a key (_summarize); op_forms: ops' forms
# made by those walks (op_form), once per op while it is unchanged
stats = {"hits": 0, "misses": 0, "stores": 0, "graph_summaries": 0, "op_forms": 0}
# the packages whose code is in every key (hashed sources; NumPy by its version)
_KEYED_PACKAGES = frozenset({"graphc", "kernels", "numpy"})


def _compiler_source_hash():
    """SHA-256 over graphc's, kernels' and runtime's Python sources (once per process):
    runtime reads the spec, so a change of its reader is a change of what a spec means.
    Reading every source was 7 ms CPU and 27 ms wall of each warm first run, so the hash
    is kept in the cache directory under the sources' identity (each file's path, size
    and modification time in ns: what Python's bytecode cache tells a source by) and
    read back while no file is added, removed or written."""
    global _SOURCES
    if _SOURCES is None:
        files = _source_files()
        identity = _sources_identity(files)
        memo = _source_memo()
        known = memo.load(identity) if memo is not None else None
        if known is not None and len(known) == 64:
            _SOURCES = known.decode("ascii")
        else:
            _SOURCES = _sources_content_hash(files)
            # a file written while it was read: its bytes may not be the ones stat saw
            if memo is not None and _sources_identity(_source_files()) == identity:
                memo.store(identity, _SOURCES.encode("ascii"))
    return _SOURCES


# counters of the source hash's entries, apart from the object cache's (tests count those)
_SOURCE_MEMO_STATS = dict.fromkeys(compile_cache.stats, 0)


def _source_memo():
    directory = compile_cache.cache_dir()
    return compile_cache.ObjectCache(directory, compile_cache.max_bytes(),
                                     stats=_SOURCE_MEMO_STATS) if directory else None


def _source_files():
    """(name, path, stat) of graphc's, kernels' and runtime's Python sources, in a fixed
    order (stat: as the directory listing read it, None when that failed)."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    files = []
    for root in ("graphc", "kernels", "runtime"):
        _add_sources(os.path.join(repo, root), root, files)
    return files


def _add_sources(folder, name, files):
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        if e.name.endswith(".py") and e.is_file():
            try:
                st = e.stat()
            except OSError:
                st = None
            files.append((f"{name}/{e.name}", e.path, st))
        elif e.is_dir() and e.name != "__pycache__":
            _add_sources(e.path, f"{name}/{e.name}", files)


def _sources_identity(files):
    h = hashlib.sha256(b"graphc-source-identity 1\0")
    h.update("".join(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0" if st is not None else
                     f"{name}\0gone\0" for name, _, st in files).encode())
    return h.hexdigest()


def _sources_content_hash(files):
    h = hashlib.sha256()
    for name, path, _ in files:
        h.update(name.encode())
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def key(module, disable, target):
    """The cache key of compiling `module` (as lowered, before any pass), or None when
    the module has no plain-data form."""
    plain = module.to_dict()
    plain.pop("name", None)  # a per-process counter: the same graph gets another name
    try:
        text = json.dumps(plain, sort_keys=True, default=_plain)
    except (TypeError, ValueError):
        return None
    return _digest(["module", text], disable, target)


def signature_key(feeds, fetches, targets, feed_shapes, feed_values, variable_shapes,
                  exclude, ops, disable, target):
    """The cache key of compiling one run signature (driver.compile_signature's
    arguments, `ops` pruned), computed from the graph without lowering it; None when an
    op's attrs have no plain-data form or its code is not in the key (an op type a script
    registers): the lowered module's key is used then."""
    summary = _graph_summary(ops, feeds)
    if summary is None or not all(map(_code_in_key, summary.op_types)):
        return None
    candidates = feed_values if feed_values is not None else [None] * len(feeds)
    held = variable_shapes or {}
    # whether a feed may be specialized on: such a feed looks like a Const to shape
    # inference even when its value is never read
    run = {"feeds": [[t.name, t.dtype.name, _static_shape(t), t.op.location,
                      [int(d) for d in shape], specializable(t.dtype, value)]
                     for t, shape, value in zip(feeds, feed_shapes, candidates)],
           "fetches": [t.name for t in fetches], "targets": [op.name for op in targets],
           "exclude": sorted(op.name for op in exclude),
           "variables": [[name, None if held.get(name) is None else
                          [int(d) for d in held[name]]]
                         for name in summary.variables]}
    return _digest(["signature", json.dumps(run), summary.digest], disable, target)


class _GraphSummary(NamedTuple):
    """What a signature's key reads of the graph: the digest of its ops (_GraphDigest),
    their types and the names of the variables among them, in order."""
    digest: str
    op_types: frozenset
    variables: tuple


# graph -> (its state, {(ops, fed tensors), as ids: _GraphSummary or None}): a graph's
# ops are never removed, so their ids name them while the graph lives
_SUMMARIES = weakref.WeakKeyDictionary()


def _graph_summary(ops, feeds):
    """The _GraphSummary of the signature of `ops` cut at `feeds` (None: an attr without
    a plain-data form), summarized once per state of the graph: a Session's next
    variant, another Session over the same graph, skip the walk of every op. The state
    (_graph_state) changes with anything that changes an op's line."""
    graph = ops[0].graph if ops else None
    if graph is None:
        return _summarize(ops, feeds)
    state = _graph_state(graph)
    known = _SUMMARIES.get(graph)
    if known is None or known[0] != state:
        known = _SUMMARIES[graph] = (state, {})
    signature = (tuple(map(id, ops)), tuple(map(id, feeds)))
    if signature not in known[1]:
        known[1][signature] = _summarize(ops, feeds)
    return known[1][signature]


def _graph_state(graph):
    """The graph's ops (version) and edits to them (edits), with those of the bodies its
    ops name, nested ones included (a body is a graph of its own)."""
    state, pending, seen = [], [graph], set()
    while pending:
        g = pending.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        state.append((id(g), g.version, g.edits))
        pending.extend(getattr(g, "_functions", {}).values())
    return tuple(state)


def _summarize(ops, feeds):
    stats["graph_summaries"] += 1
    digest = _GraphDigest()
    try:
        digest.add_ops(_ancestors(ops, feeds))
        text = digest.hexdigest()
    except (TypeError, ValueError):
        return None
    return _GraphSummary(text, frozenset(digest.op_types), tuple(sorted(digest.variables)))


def _digest(parts, disable, target):
    h = hashlib.sha256()
    settings = {name: os.environ.get(name) for name in _CODEGEN_ENV}
    for part in ["graphc-spec-cache 3", _compiler_source_hash(), jit.toolchain_id(),
                 f"numpy {np.__version__} python {platform.python_version()}",
                 json.dumps(target, sort_keys=True), ",".join(sorted(disable or ())),
                 json.dumps(settings, sort_keys=True),
                 f"product units {gemm_team.MAX_UNITS}",
                 f"stream bytes {loop_kernel.stream_threshold()}"] + parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()  # hex, as the object cache expects; the prefix above separates them


def _ancestors(ops, fed):
    """`ops` and every op they read, transitively (an excluded op's or a variable
    reference's producer included: shape inference may look through them), stopping at
    fed tensors, whose producers lowering never looks at; in creation order. (Sets of
    ids: ops and tensors hash in Python, which was most of this walk's time; the ops'
    and tensors' own fields, not their properties, which copy the control inputs: this
    walk reads every input of a signature in a fresh process's first run. One pass over
    a list that grows by the producers found: `ops` is most of the signature.)"""
    fed_ids = {id(t) for t in fed}
    seen = set(map(id, ops))
    pending = list(ops) if len(seen) == len(ops) else list(dict.fromkeys(ops))
    for op in pending:  # the loop reaches what it appends
        for t in op._inputs:
            producer = t._op
            if id(producer) not in seen and id(t) not in fed_ids:
                seen.add(id(producer))
                pending.append(producer)
        for producer in op._control_inputs:
            if id(producer) not in seen:
                seen.add(id(producer))
                pending.append(producer)
    return sorted(pending, key=creation_order)


class _GraphDigest:
    """A SHA-256 of ops as lowering sees them, with the bodies their attrs name.

    Each op is its form (op_form: a tuple of plain values, str, int, float, bool, None
    and containers of them, dicts in a fixed order, written by marshal) with the numbers
    of its creation sites, the whole written once at the end by marshal (format 2: no
    references between objects, so equal values give equal bytes whatever their
    identity): exact, loadable back to the same values, a third of repr's time and a
    ninth of json.dumps's; a value of another type is a ValueError. A creation site is a
    number into a table of the sites (its file's path repeated per op was a sixth of the
    text). An op's form is kept on the op (Operation._key_form) until the op changes:
    a key walk after an op was added reads the other ops' forms, not the ops."""

    def __init__(self):
        self._lines = []
        self._functions = set()
        self.variables = set()
        self._sites = {}  # creation site -> its number in the lines
        self.op_types = set()

    def hexdigest(self):
        text = marshal.dumps((self._lines, list(self._sites)), _MARSHAL_FORMAT)
        return hashlib.sha256(text).hexdigest()

    def add_ops(self, ops):
        # one loop, its names bound once: a fresh process's first run adds every op of
        # the signature here, and a call per op was a fifth of it
        lines, sites, types, variables = self._lines, self._sites, self.op_types, \
            self.variables
        graph, library = None, None
        for op in ops:
            kind, forward, form = op.type, op.forward_op, op._key_form
            types.add(kind)
            if kind == "VariableV2":
                variables.add(op.name)
            if form is None:
                form = op._key_form = op_form(op)
                stats["op_forms"] += 1
            lines.append((
                form, sites.setdefault(op.location, len(sites)),
                None if forward is None else sites.setdefault(forward.location, len(sites))))
            if op.graph is not graph:
                graph = op.graph
                library = getattr(graph, "_functions", None)
            if library and op._attrs:
                for body in _bodies(op):
                    self._add_function(body)

    def _add_function(self, body):
        if body.name in self._functions:
            return
        self._functions.add(body.name)
        self._lines.append(("function", body.name, [t.name for t in body.inputs],
                            [t.name for t in body.outputs],
                            [(o.name, i.name) for o, i in body.captures],
                            [(o.name, i.name) for o, i in body.ref_captures],
                            [op.name for op in body.control_captures],
                            [g.name for g in body.forward_graphs]))
        self.add_ops(sorted(body.get_operations(), key=creation_order))


def op_form(op):
    """What lowering reads of one op but its creation sites (their numbers differ from key
    to key): name, type, inputs, control inputs, attrs, device, outputs' dtypes and
    static shapes, forward op; as marshal's bytes. Memoized on the op (Operation._key_form)
    while the op is unchanged. A ValueError when an attr has no plain form. (The op's and
    its tensors' fields, not their properties: a fresh process's first run makes the
    form of every op of the signature, and the properties were a third of that.)"""
    attrs, forward, controls = op._attrs, op.forward_op, op._control_inputs
    return marshal.dumps((
        op.name, op.type, [t._name for t in op._inputs],
        [c.name for c in controls] if controls else [], _attrs_form(attrs) if attrs else None,
        op.device, [(t._dtype.name, t._shape.as_tuple_or_none()) for t in op.outputs],
        None if forward is None else (forward.name, forward.type)), _MARSHAL_FORMAT)


def _static_shape(t):
    return t.shape.as_tuple_or_none()


def _code_in_key(op_type):
    """Whether the code lowering and constant folding run for op_type (its shape
    inference and reference kernel) is in the key: graphc's, kernels' or NumPy's. An op a
    script or plugin registers is not: its signature is keyed on the lowered module."""
    op_def = OP_DEFS.get(op_type)
    if op_def is None:
        return False
    return all(fn is None or (getattr(fn, "__module__", None) or "").split(".")[0] in
               _KEYED_PACKAGES for fn in (op_def.infer, op_def.kernel))


def _bodies(op):
    """The FuncGraphs op's attrs name (a While's cond and body, an If's branches...)."""
    library = getattr(op.graph, "_functions", None)
    if not library:
        return []
    return [library[v] for _, v in sorted(op.attrs.items())
            if isinstance(v, str) and v in library]


_PLAIN_ATTRS = frozenset({bool, int, float, str, type(None)})


# the most common attrs' forms, without _attr_form's tests: tuples, which no other
# attr's form is (_attr_form writes a tuple as {"tuple": ...})
_QUICK_FORMS = {DType: lambda v: ("dtype", v.name),
                TensorShape: lambda v: ("shape", v.as_tuple_or_none())}


def _attrs_form(attrs):
    """An op's attrs as (name, plain form) pairs in name order."""
    out = []
    for k, v in sorted(attrs.items()):
        kind = type(v)
        out.append((k, v if kind in _PLAIN_ATTRS else _QUICK_FORMS[kind](v)
                    if kind in _QUICK_FORMS else _attr_form(v)))
    return out


def _attr_form(value):
    """encode_attr's plain form, with a numeric array as a digest of its bytes (a large
    constant costs one pass of hashing, not a base64 text); TypeError when not plain."""
    if isinstance(value, (np.ndarray, np.generic)) and np.asarray(value).dtype != object:
        arr = np.ascontiguousarray(value)
        return {"ndarray": hashlib.sha256(arr.tobytes()).hexdigest(), "dtype": arr.dtype.str,
                "shape": list(arr.shape), "scalar": isinstance(value, np.generic)}
    if isinstance(value, tuple):
        return {"tuple": [_attr_form(v) for v in value]}
    if isinstance(value, list):
        return [_attr_form(v) for v in value]
    if isinstance(value, dict):
        return {"dict": {str(k): _attr_form(v) for k, v in sorted(value.items())}}
    return encode_attr(value)


def load(key, feeds=None, feed_values=None):
    """The spec stored under `key`, or None. With `feeds`, only a spec whose recorded
    feed values (value_guards) this run's `feed_values` match: lowering these feeds
    would specialize on them the same way."""
    cache = compile_cache.default_cache()
    blob = cache.load(key) if cache and key else None
    spec = None
    if blob is not None:
        try:
            spec = _from_bytes(blob)
        except (ValueError, KeyError, TypeError):
            spec = None
    if spec is None or (feeds is not None and not _values_hold(spec, feeds, feed_values)):
        stats["misses"] += 1
        return None
    stats["hits"] += 1
    return spec


def _values_hold(spec, feeds, feed_values):
    for guard in spec.get("value_guards", ()):
        index = guard["feed"]
        value = None if feed_values is None else feed_values[index]
        if value is None:
            return False
        value = np.asarray(value, dtype=feeds[index].dtype.np)
        if list(value.shape) != list(guard["shape"]) or \
                [int(x) for x in value.reshape(-1)] != list(guard["values"]):
            return False
    return True


def store(key, spec):
    cache = compile_cache.default_cache()
    if cache is None or key is None:
        return
    try:
        blob = _to_bytes(spec)
    except (TypeError, ValueError):
        return  # a spec field without a plain-data form: not cached
    if cache.store(key, blob):
        stats["stores"] += 1


# spec fields of code text: stored as raw UTF-8 after the JSON header, not inside it
# (decoding a JSON string of a module of megabytes was half of a warm first run's load
# of its spec)
_TEXT_FIELDS = ("llvm_ir", "ptx", "emulation_ir")


def _to_bytes(spec):
    if "texts" in spec:
        raise ValueError("a spec field is named 'texts', as the entry's list of texts")
    constants = spec.get("constants", [])
    texts = [(name, spec[name].encode()) for name in _TEXT_FIELDS
             if isinstance(spec.get(name), str)]
    header = dict(spec, constants=[{"dtype": c["dtype"], "shape": list(c["shape"]),
                                    "nbytes": len(c["data"])} for c in constants],
                  texts=[[name, len(data)] for name, data in texts])
    for name, _ in texts:
        del header[name]
    text = json.dumps(header, default=_plain).encode()
    return b"".join([len(text).to_bytes(8, "little"), text] + [data for _, data in texts] +
                    [bytes(c["data"]) for c in constants])


def _from_bytes(blob):
    n = int.from_bytes(blob[:8], "little")
    if n > len(blob) - 8:
        raise ValueError("truncated spec entry")
    spec = json.loads(blob[8:8 + n])
    offset = 8 + n
    for name, nbytes in spec.pop("texts"):
        if name not in _TEXT_FIELDS:
            raise ValueError(f"unknown text field {name!r}")
        end = offset + int(nbytes)
        if end > len(blob):
            raise ValueError("truncated spec entry")
        spec[name] = blob[offset:end].decode()
        offset = end
    constants = []
    for c in spec["constants"]:
        end = offset + int(c.pop("nbytes"))
        if end > len(blob):
            raise ValueError("truncated spec entry")
        constants.append(dict(c, data=blob[offset:end]))
        offset = end
    spec["constants"] = constants
    return spec


def _plain(value):
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return file_format.plain_data(value)
