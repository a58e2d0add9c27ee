"""The verifier of compiled files: everything a header claims is checked before anything
in the file is allocated, compiled or run, as XLA's HLO verifier and ONNX's checker do.

The SHA-256 trailer catches accidental damage only; a header written wrong (by a buggy
writer or on purpose) and re-checksummed must still be refused cleanly. What is checked:

- the JSON itself: duplicate keys (json would keep the last one silently), nesting depth;
- structure, types and bounds of every field, the cross references between them (symbol
  feeds and axes, fetch sources and their dtype and dims, constants against their blobs,
  blobs inside the data area and after the header, signature against every executable,
  stored state against the variables read, value guards, error sites and their details);
- sizes by bounds over every value of the symbolic dims the guards admit, not a sample:
  an arena size or GPU arena offset that is wrong for every admitted value is refused
  here; one wrong only for some values is refused by the run for those feed shapes
  (runtime.Executable: a negative arena; the GPU executable: an offset outside the arena),
  before anything is allocated;
- the code: the LLVM IR parses, declares only the functions the runtime provides
  (runtime.jit.allowed_external_functions: libm, the thread team, BLAS; and MPI once
  runtime.mpi_library is bound), calls nothing
  through a pointer or inline assembly, and carries the interface it was compiled for
  (`graphc_interface`, written by `bind_interface`), which must equal the header's spec:
  the arena offsets, fetch and feed layouts live in the code, so a header whose dims,
  dtypes, arena size or error sites differ from the ones the code was generated for is
  refused instead of letting the code write past its buffers.

Every problem is reported through `fail(where, problem)`, which must raise (the reader
raises FileFormatError naming the file and the field).
"""
import json
import re

import llvmlite.binding as llvm
import numpy as np

from . import jit, mpi_library
from .errors import RuntimeFailure
from .gpu.spec import check_gpu_fields, frame_keys, is_gpu_target
from .signature import FORMAT_VERSION as SPEC_VERSION

MAX_RANK = 32
MAX_DIM = 1 << 48
MAX_EXPR_TERMS = 256
MAX_EXPR_DEPTH = 16
MAX_JSON_DEPTH = 64
MAX_POWER = 8
MAX_INT = 1 << 62
MAX_DETAIL_SLOTS = 256
MAX_VALUE_GUARD_ELEMENTS = 1 << 16
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")
INTEGER_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                  "uint64")
COMPARE_OPS = ("==", "!=", "<", "<=", ">", ">=")
SOURCES = ("kernel", "feed", "variable", "constant")
# fields of a spec that hold code; the rest is the interface the code was compiled for
CODE_FIELDS = ("llvm_ir", "ptx", "emulation_ir", "debug")
INTERFACE_GLOBAL = "graphc_interface"
_INF = float("inf")


# ------------------------------------------------------------------ JSON
class DuplicateKey(ValueError):
    pass


def _unique_object(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKey(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def load_json(text):
    """json.loads that refuses duplicate keys (json keeps the last one silently: a header
    could then say one thing to a reader that keeps the first) and deep nesting.
    Raises ValueError (DuplicateKey for a repeated key)."""
    if _nesting_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
    return json.loads(text, object_pairs_hook=_unique_object)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _nesting_depth(text):
    """The deepest nesting of [ and { outside strings, measured before parsing (json
    recurses once per level)."""
    data = np.frombuffer(_STRING.sub("", text).encode(), np.uint8)
    steps = np.zeros(256, np.int64)
    steps[[ord("["), ord("{")]] = 1
    steps[[ord("]"), ord("}")]] = -1
    depth = np.cumsum(steps[data])
    return int(depth.max()) if depth.size else 0


# ------------------------------------------------------------- interface
def interface_of(spec):
    """The canonical text of a spec's interface: every field but the code."""
    return json.dumps({k: v for k, v in spec.items() if k not in CODE_FIELDS},
                      sort_keys=True, separators=(",", ":"))


def bind_interface(code, spec):
    """`code` (LLVM IR) with the spec's interface appended as a constant string global, so
    a reader can check that the header describes the code it carries."""
    data = interface_of(spec).encode()
    text = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}"
                   for b in data)
    return (f'{code}\n@"{INTERFACE_GLOBAL}" = constant [{len(data)} x i8] c"{text}", '
            f'align 1\n')


def _decode_c_string(text):
    out = bytearray()
    i = 0
    while i < len(text):
        if text.startswith("\\\\", i):  # LLVM prints a backslash as two
            out.append(92)
            i += 2
        elif text[i] == "\\":
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
        else:
            out.append(ord(text[i]))
            i += 1
    return bytes(out)


def check_code(llvm_ir, fail, where):
    """Parses the IR and checks what it may call; returns the interface it declares (a
    dict) or None when it declares none."""
    jit.initialize()
    try:
        module = llvm.parse_assembly(llvm_ir)
        module.verify()
    except RuntimeError as e:
        fail(where, f"the code is not valid LLVM IR ({str(e).strip()[:200]})")
    allowed = jit.allowed_external_functions() | mpi_library.provided_functions()
    for fn in module.functions:
        if fn.is_declaration and not fn.name.startswith("llvm.") and fn.name not in allowed:
            fail(where, f"the code declares function {fn.name!r}, which the runtime does not "
                        "provide")
        for block in fn.blocks:
            for ins in block.instructions:
                _check_instruction(ins, fn.name, fail, where)
    for gv in module.global_variables:
        if gv.is_declaration and gv.name not in jit.ALLOWED_EXTERNAL_GLOBALS | \
                mpi_library.provided_globals():
            fail(where, f"the code declares external global {gv.name!r}, which the runtime "
                        "does not provide")
    try:
        gv = module.get_global_variable(INTERFACE_GLOBAL)
    except NameError:
        return None
    text = str(gv)
    start, stop = text.find('c"'), text.rfind('"')
    if gv.is_declaration or start < 0 or stop <= start + 1:
        fail(where, f"{INTERFACE_GLOBAL} is not a constant string")
    try:
        return load_json(_decode_c_string(text[start + 2:stop]).decode())
    except (ValueError, UnicodeDecodeError) as e:
        fail(where, f"{INTERFACE_GLOBAL} is not valid JSON ({str(e)[:100]})")


def _check_instruction(ins, function, fail, where):
    opcode = ins.opcode
    if opcode == "inttoptr":
        fail(where, f"function {function!r} makes a pointer from an integer (inttoptr)")
    if opcode not in ("call", "invoke", "callbr"):
        return
    callee = list(ins.operands)[-1]
    kind = callee.value_kind
    if kind == llvm.ValueKind.inline_asm:
        fail(where, f"function {function!r} runs inline assembly")
    if kind != llvm.ValueKind.function:
        fail(where, f"function {function!r} calls through a pointer")


# ------------------------------------------------------------------ bounds
def _mul(a, b):
    return 0 if a == 0 or b == 0 else a * b


def _interval_mul(x, y):
    products = [_mul(a, b) for a in x for b in y]
    return min(products), max(products)


def _interval_pow(x, p):
    lo, hi = x
    corners = [lo ** p, hi ** p]
    if lo < 0 < hi and p % 2 == 0:
        corners.append(0)
    return min(corners), max(corners)


def expr_bounds(expr, ranges):
    """(lowest, highest) value of a dim expression over symbol values in `ranges`
    {name: (lo, hi)}; infinite where unbounded. Interval arithmetic: the bounds hold for
    every admitted value, they may only be looser than the exact extremes."""
    if isinstance(expr, int):
        return expr, expr
    lo = hi = 0
    for coeff, mono in expr:
        term = (coeff, coeff)
        for atom, power in mono:
            term = _interval_mul(term, _interval_pow(_atom_bounds(atom, ranges), power))
        lo, hi = lo + term[0], hi + term[1]
    return lo, hi


def _atom_bounds(atom, ranges):
    if isinstance(atom, str):
        return ranges.get(atom, (0, MAX_DIM))
    op, a, b = atom
    a, b = expr_bounds(a, ranges), expr_bounds(b, ranges)
    if op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if b[0] <= 0:  # a divisor that may be 0 fails at run time (ShapeError); sign unknown
        return -_INF, _INF
    if op == "mod":
        return 0, b[1] - 1
    quotients = [_floordiv(x, y) for x in a for y in b]
    return min(quotients), max(quotients)


def _floordiv(x, y):
    if y == _INF:
        return 0 if x >= 0 else -1
    if abs(x) == _INF:
        return x
    return x // y


def difference(a, b):
    """a - b as one dim expression, like terms combined (so that bounds see that
    64*n + 64 - 32*n is at least 64)."""
    terms = {}
    for sign, e in ((1, a), (-1, b)):
        for coeff, mono in ([[e, []]] if isinstance(e, int) else e):
            key = json.dumps(mono, sort_keys=True)
            terms[key] = (terms.get(key, (0, mono))[0] + sign * coeff, mono)
    return [[c, mono] for c, mono in terms.values() if c]


def symbol_ranges(guards, symbols):
    """{symbol: (lo, hi)}: a dim is in [0, MAX_DIM]; a guard `s == c` (or `s >= c`, ...)
    on a lone symbol narrows its range. Other guards are not used: bounds stay sound."""
    ranges = {name: (0, MAX_DIM) for name in symbols}
    for lhs, op, rhs, outcome in guards:
        linear = _one_symbol_linear(lhs)
        if linear is None or not isinstance(rhs, (list, int)) or _constant(rhs) is None:
            continue
        name, a, b = linear
        if not outcome:
            op = _NEGATED[op]
        if a < 0:  # a*s + b op c  <=>  -a*s + -b (op mirrored) -c
            a, b, c, op = -a, -b, -_constant(rhs), _MIRRORED[op]
        else:
            c = _constant(rhs)
        # a*s op c - b, a > 0: the integer bounds of s
        lo, hi = ranges.get(name, (0, MAX_DIM))
        floor_q, ceil_q = (c - b) // a, -((b - c) // a)
        if op == "==":
            if (c - b) % a:
                continue  # no integer admits it: nothing runs; keep the sound default
            lo, hi = max(lo, floor_q), min(hi, floor_q)
        elif op == ">=":
            lo = max(lo, ceil_q)
        elif op == ">":
            lo = max(lo, floor_q + 1)
        elif op == "<=":
            hi = min(hi, floor_q)
        elif op == "<":
            hi = min(hi, ceil_q - 1)
        ranges[name] = (lo, hi)
    return ranges


_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_MIRRORED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _one_symbol_linear(e):
    """(symbol, a, b) when the dim expression e is a*symbol + b (a != 0), else None: the
    guards a compile records on a lone dim (`H - 2 >= 0` for a VALID 3x3 window)."""
    if not isinstance(e, list):
        return None
    name, a, b = None, 0, 0
    for term in e:
        if not (isinstance(term, list) and len(term) == 2 and isinstance(term[0], int)):
            return None
        coeff, mono = term
        if not mono:
            b += coeff
        elif len(mono) == 1 and isinstance(mono[0][0], str) and mono[0][1] == 1 and \
                name in (None, mono[0][0]):
            name, a = mono[0][0], a + coeff
        else:
            return None
    return (name, a, b) if name is not None and a != 0 else None


def _constant(e):
    if isinstance(e, int):
        return e
    if len(e) == 0:
        return 0
    if len(e) == 1 and e[0][1] == [] and isinstance(e[0][0], int):
        return e[0][0]
    return None


# ---------------------------------------------------------------- header
class HeaderVerifier:
    """Checks a header's structure, types, bounds and cross references; `check_code`
    (False for tools that never compile the file) also verifies each spec's code and
    the interface it was compiled for."""

    def __init__(self, header, fail, data_start, data_end, check_code=True):
        self.header = header
        self._fail = fail
        self.data_start, self.data_end = data_start, data_end
        self.verify_code = check_code

    def fail(self, where, problem):
        self._fail(f"{where}: {problem}")

    def check(self):
        h = self.header
        self.blob_sizes = self.check_blobs(self.field(h, "blobs", list, "header"))
        sig = self.field(h, "signature", dict, "header")
        inputs = self.field(sig, "inputs", list, "signature")
        outputs = self.field(sig, "outputs", list, "signature")
        for where, entries in (("input", inputs), ("output", outputs)):
            names = []
            for i, e in enumerate(entries):
                self.tensor(e, f"signature {where} {i}", symbols=None)
                self.field(e, "tensor", str, f"signature {where} {i}")
                names.append(e["name"])
            if len(set(names)) != len(names):
                self.fail("signature", f"duplicate {where} names {names}")
        target = self.field(h, "target", dict, "header")
        if is_gpu_target(target):
            self.field(target, "arch", str, "target")
        else:
            for key in ("triple", "cpu", "features"):
                self.field(target, key, str, "target")
        specs = self.field(h, "executables", list, "header")
        if not specs:
            self.fail("header", "no executables")
        state = self.field(h, "state", list, "header")
        stored = {}
        for i, entry in enumerate(state):
            self.array_entry(entry, f"state {i}")
            name = self.field(entry, "name", str, f"state {i}")
            if name in stored:
                self.fail(f"state {i}", f"variable {name!r} is stored twice")
            stored[name] = entry
        for i, spec in enumerate(specs):
            where = f"executable {i}"
            variables = self.spec(spec, where, inputs, outputs)
            self.state_of(variables, stored, where)

    def state_of(self, variables, stored, where):
        for v in variables:
            entry = stored.get(v["name"])
            if not v.get("read", True):
                continue
            if entry is None:
                self.fail(where, f"variable {v['name']} is read but the file stores no value "
                                 "for it")
            if entry["dtype"] != v["dtype"]:
                self.fail(where, f"variable {v['name']} is {v['dtype']}, its stored value "
                                 f"{entry['dtype']}")

    # ----------------------------------------------------------- primitives
    def field(self, d, key, kind, where):
        if not isinstance(d, dict):
            self.fail(where, "is not an object")
        value = d.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            self.fail(where, f"field {key!r} is missing or not a {_kind_name(kind)}")
        return value

    def integer(self, value, where, low=0, high=MAX_INT):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            self.fail(where, f"{value!r} is not an integer in [{low}, {high}]")
        return value

    def check_blobs(self, blobs):
        sizes = []
        end_of_previous = self.data_start
        for k, b in enumerate(blobs):
            where = f"blob {k}"
            offset = self.integer(self.field(b, "offset", int, where), where)
            nbytes = self.integer(self.field(b, "nbytes", int, where), where)
            if offset % 64:
                self.fail(where, f"offset {offset} is not 64-byte aligned")
            if offset < end_of_previous or offset + nbytes > self.data_end:
                self.fail(where, f"bytes {offset}..{offset + nbytes} lie outside the data "
                                 f"area {self.data_start}..{self.data_end} of the file or "
                                 "overlap the blob before")
            end_of_previous = offset + nbytes
            sizes.append(nbytes)
        return sizes

    def dtype(self, value, where):
        if value not in DTYPES:
            self.fail(where, f"unsupported dtype {value!r}")
        return value

    def array_entry(self, entry, where):
        self.dtype(self.field(entry, "dtype", str, where), where)
        shape = self.field(entry, "shape", list, where)
        if len(shape) > MAX_RANK:
            self.fail(where, f"rank {len(shape)} exceeds {MAX_RANK}")
        count = 1
        for d in shape:
            count *= self.integer(d, where + " shape", 0, MAX_DIM)
        k = self.integer(self.field(entry, "blob", int, where), where, 0,
                         len(self.blob_sizes) - 1 if self.blob_sizes else -1)
        need = count * np.dtype(entry["dtype"]).itemsize
        if need != self.blob_sizes[k]:
            self.fail(where, f"a {entry['dtype']} array of shape {shape} needs {need} bytes, "
                             f"blob {k} has {self.blob_sizes[k]}")

    def expr(self, e, where, symbols, depth=0):
        """An int or [[coeff, [[atom, power], ...]], ...] naming only `symbols`."""
        if isinstance(e, int) and not isinstance(e, bool):
            self.integer(e, where, -MAX_INT, MAX_INT)
            return
        if depth > MAX_EXPR_DEPTH or not isinstance(e, list) or len(e) > MAX_EXPR_TERMS:
            self.fail(where, "malformed or oversized dim expression")
        for term in e:
            if not isinstance(term, list) or len(term) != 2 or not isinstance(term[1], list) \
                    or len(term[1]) > MAX_EXPR_TERMS:
                self.fail(where, "malformed dim expression term")
            self.integer(term[0], where, -MAX_INT, MAX_INT)
            for factor in term[1]:
                if not isinstance(factor, list) or len(factor) != 2:
                    self.fail(where, "malformed dim expression factor")
                atom, power = factor
                self.integer(power, where, 1, MAX_POWER)
                if isinstance(atom, str):
                    if symbols is not None and atom not in symbols:
                        self.fail(where, f"dim expression names unknown symbol {atom!r}")
                elif isinstance(atom, list) and len(atom) == 3 and \
                        atom[0] in ("floordiv", "mod", "max"):
                    self.expr(atom[1], where, symbols, depth + 1)
                    self.expr(atom[2], where, symbols, depth + 1)
                else:
                    self.fail(where, "malformed dim expression atom")

    def dims(self, dims, where, symbols):
        if not isinstance(dims, list) or len(dims) > MAX_RANK:
            self.fail(where, "dims are missing or have an impossible rank")
        for d in dims:
            self.expr(d, where, symbols)

    def tensor(self, entry, where, symbols):
        self.field(entry, "name", str, where)
        self.dtype(self.field(entry, "dtype", str, where), where)
        self.dims(entry.get("dims"), where, symbols)
        return entry

    # ----------------------------------------------------------------- spec
    def spec(self, spec, where, inputs, outputs):
        if not isinstance(spec, dict):
            self.fail(where, "is not an object")
        if spec.get("format_version") != SPEC_VERSION:
            self.fail(where, f"executable format version {spec.get('format_version')!r} is "
                             f"not the one this runtime runs ({SPEC_VERSION})")
        gpu = is_gpu_target(self.header["target"])
        if not gpu:
            self.field(spec, "entry", str, where)
            self.field(spec, "llvm_ir", str, where)
        feeds = self.field(spec, "feeds", list, where)
        symbols = self.symbols(spec, feeds, where)
        for i, f in enumerate(feeds):
            self.tensor(f, f"{where} feed {i}", symbols)
        self.matches_signature(feeds, inputs, f"{where} feeds", "input")
        fetches = self.field(spec, "fetches", list, where)
        variables = self.field(spec, "variables", list, where)
        constants = self.field(spec, "constants", list, where)
        for i, c in enumerate(constants):
            self.array_entry(c, f"{where} constant {i}")
        names = set()
        for i, v in enumerate(variables):
            w = f"{where} variable {i}"
            self.tensor(v, w, symbols)
            if v["name"] in names:
                self.fail(w, f"variable {v['name']!r} is listed twice")
            names.add(v["name"])
            for flag in ("written", "read", "shape_guard"):
                if not isinstance(v.get(flag, True), bool):
                    self.fail(w, f"field {flag!r} is not a boolean")
        for i, f in enumerate(fetches):
            self.fetch(f, f"{where} fetch {i}", symbols, feeds, variables, constants)
        self.matches_signature(fetches, outputs, f"{where} fetches", "output")
        guards = self.field(spec, "guards", list, where)
        for i, g in enumerate(guards):
            w = f"{where} guard {i}"
            if not isinstance(g, list) or len(g) != 4 or g[1] not in COMPARE_OPS or \
                    not isinstance(g[3], bool):
                self.fail(w, "malformed guard")
            self.expr(g[0], w, symbols)
            self.expr(g[2], w, symbols)
        value_guards = spec.get("value_guards", [])
        if not isinstance(value_guards, list):
            self.fail(where, "field 'value_guards' is not a list")
        for i, g in enumerate(value_guards):
            self.value_guard(g, f"{where} value guard {i}", feeds)
        ranges = symbol_ranges(guards, symbols)
        self.arena(spec, where, symbols, ranges)
        self.error_sites(spec, where, symbols)
        profiled = spec.get("profile_kernels") or []
        if not isinstance(profiled, list) or not all(isinstance(n, str) for n in profiled):
            self.fail(where, "field 'profile_kernels' is not a list of names")
        target = spec.get("target")
        if target is not None and target != self.header["target"]:
            self.fail(where, "target differs from the file's target")
        if gpu:
            if target is None:
                self.fail(where, "a GPU spec must name its target")
            # launch grids and grown sizes may read the trip counts set during the run
            names = spec.get("run_dim_names")
            run_symbols = dict(symbols, **{n: None for n in names if isinstance(n, str)}) \
                if isinstance(names, list) else symbols
            check_gpu_fields(spec, lambda w, problem: self.fail(f"{where} {w}", problem),
                             lambda e, w: self.expr(e, f"{where} {w}", symbols),
                             check_run_expr=lambda e, w: self.expr(e, f"{where} {w}",
                                                                   run_symbols))
            self.gpu_arena_offsets(spec, where, ranges)
            self.gpu_grown_sizes(spec, where, ranges)
        if self.verify_code:
            self.code(spec, where, "emulation_ir" if gpu else "llvm_ir")
        return variables

    def symbols(self, spec, feeds, where):
        symbols = {}
        for i, s in enumerate(self.field(spec, "symbols", list, where)):
            w = f"{where} symbol {i}"
            feed = self.integer(self.field(s, "feed", int, w), w, 0, len(feeds) - 1)
            dims = feeds[feed].get("dims") if isinstance(feeds[feed], dict) else None
            self.integer(self.field(s, "axis", int, w), w, 0,
                         len(dims) - 1 if isinstance(dims, list) else -1)
            name = self.field(s, "name", str, w)
            if name in symbols:
                self.fail(w, f"symbol {name!r} is defined twice")
            symbols[name] = i
        return symbols

    def matches_signature(self, entries, signature, where, kind):
        """The signature's inputs (outputs) are the spec's feeds (fetches), in order, with
        their dtypes and ranks (a dim the signature fixes is fixed in the spec too)."""
        if len(entries) != len(signature):
            self.fail(where, f"{len(entries)} for a signature of {len(signature)} {kind}s")
        for i, (e, s) in enumerate(zip(entries, signature)):
            if e["dtype"] != s["dtype"] or len(e["dims"]) != len(s["dims"]):
                self.fail(f"{where} {i}", f"{e['dtype']} of rank {len(e['dims'])}, but "
                                          f"signature {kind} {s['name']!r} is {s['dtype']} of "
                                          f"rank {len(s['dims'])}")
            for d, sd in zip(e["dims"], s["dims"]):
                if isinstance(sd, int) and d != sd:
                    self.fail(f"{where} {i}", f"dims {e['dims']} differ from signature "
                                              f"{kind} {s['name']!r}'s {s['dims']}")

    def fetch(self, f, where, symbols, feeds, variables, constants):
        self.tensor(f, where, symbols)
        source = f.get("source", "kernel")
        if source not in SOURCES:
            self.fail(where, f"unknown source {source!r}")
        if source == "kernel":  # its slot is its position; "index" is not read
            return
        index = self.integer(self.field(f, "index", int, where), where)
        pool = {"feed": feeds, "variable": variables, "constant": constants}[source]
        if index >= len(pool):
            self.fail(where, f"no {source} {index}")
        origin = pool[index]
        dims = origin["shape"] if source == "constant" else origin["dims"]
        if origin["dtype"] != f["dtype"] or dims != f["dims"]:
            self.fail(where, f"claims {f['dtype']} {f['dims']} but its source, {source} "
                             f"{index}, is {origin['dtype']} {dims}")

    def value_guard(self, g, where, feeds):
        feed = self.integer(self.field(g, "feed", int, where), where, 0, len(feeds) - 1)
        if feeds[feed]["dtype"] not in INTEGER_DTYPES:
            self.fail(where, f"feed {feed} is {feeds[feed]['dtype']}, not an integer")
        shape = self.field(g, "shape", list, where)
        values = self.field(g, "values", list, where)
        if len(shape) > MAX_RANK or len(values) > MAX_VALUE_GUARD_ELEMENTS:
            self.fail(where, "shape or values too long")
        count = 1
        for d in shape:
            count *= self.integer(d, where + " shape", 0, MAX_VALUE_GUARD_ELEMENTS)
        if count != len(values):
            self.fail(where, f"{len(values)} values for shape {shape}")
        if len(shape) != len(feeds[feed]["dims"]):
            self.fail(where, f"shape {shape} is not of feed {feed}'s rank")
        for v in values:
            self.integer(v, where + " values", -MAX_INT, MAX_INT)
        if not isinstance(g.get("name", ""), str):
            self.fail(where, "field 'name' is not a string")

    def arena(self, spec, where, symbols, ranges):
        """An arena size negative for every admitted dim is a lie. One negative only for
        some (a VALID convolution's (n - k) // s + 1 below the kernel's size) is left to
        the run: those feed shapes give negative dims, which the runtime refuses, and the
        Executable refuses a negative arena before allocating (bounds see neither)."""
        arena = spec.get("arena_bytes", 0)
        self.expr(arena, f"{where} arena_bytes", symbols)
        _, hi = expr_bounds(arena, ranges)
        if hi < 0:
            self.fail(f"{where} arena_bytes", "is negative for every dim the guards admit "
                                              f"(at most {hi})")

    def error_sites(self, spec, where, symbols):
        slots = spec.get("error_detail_slots", 0)
        self.integer(slots, f"{where} error_detail_slots", 0, MAX_DETAIL_SLOTS)
        self.integer(spec.get("run_dims", 0), f"{where} run_dims", 0, MAX_DETAIL_SLOTS)
        for i, site in enumerate(self.field(spec, "error_sites", list, where)):
            w = f"{where} error site {i}"
            self.field(site, "class", str, w)
            self.field(site, "message", str, w)
            if not isinstance(site.get("op", ""), str):
                self.fail(w, "field 'op' is not a string")
            args = site.get("args", [])
            if not isinstance(args, list) or len(args) > slots:
                self.fail(w, f"field 'args' is not a list of at most {slots} details")
            for a in args:
                if isinstance(a, dict):
                    self.dims(a.get("index"), w + " args", symbols)
                elif not isinstance(a, str):
                    self.fail(w, f"detail {a!r} is neither a kind name nor an index")

    def gpu_arena_offsets(self, spec, where, ranges):
        """Offsets outside the arena for every admitted dim; the GPU executable checks
        each offset against the arena again for the dims of each run."""
        arena = spec.get("arena_bytes", 0)
        for i, step in enumerate(spec["launches"]):
            for what, (kind, index) in frame_keys(step):
                if kind != "arena":
                    continue
                w = f"{where} launch {i} {what}"
                if expr_bounds(index, ranges)[1] < 0:
                    self.fail(w, "arena offset is negative for every dim the guards admit")
                if expr_bounds(difference(arena, index), ranges)[1] < 0:
                    self.fail(w, "arena offset lies past the arena's end for every dim the "
                                 "guards admit")

    def gpu_grown_sizes(self, spec, where, ranges):
        """A grown buffer's size negative for every admitted dim (a run dim: any count)
        is a lie; the runtime refuses a negative one when it sizes the buffer."""
        for g, entry in enumerate(spec.get("grown", [])):
            for k, nbytes in enumerate(entry["bytes"]):
                if expr_bounds(nbytes, ranges)[1] < 0:
                    self.fail(f"{where} grown {g} bytes {k}", "is negative for every dim "
                                                              "the guards admit")

    def code(self, spec, where, field):
        declared = check_code(spec[field], self.fail, f"{where} {field}")
        if declared is None:
            self.fail(where, f"the code declares no {INTERFACE_GLOBAL}: the file was written "
                             "by an older graphc; export it again")
        interface = json.loads(interface_of(spec))
        for key in sorted(set(interface) | set(declared)):
            if interface.get(key) != declared.get(key):
                self.fail(f"{where} {key}", "differs from what the code was compiled for")


# what runtime.Executable assumes when an in-memory spec leaves a field out
_SPEC_DEFAULTS = {"entry": "graphc_main", "feeds": [], "fetches": [], "variables": [],
                  "symbols": [], "guards": [], "value_guards": [], "arena_bytes": 0,
                  "error_sites": [], "error_detail_slots": 0}


class InvalidSpec(RuntimeFailure, ValueError):
    """An executable spec (as a compiler builds it, not read from a file) that fails the
    verifier."""


def verify_spec(spec, check_calls=False):
    """Verifies one in-memory spec as runtime.Executable takes it (constants carry their
    bytes in "data"): the same structure, bounds and cross references as a file's spec,
    against a signature of its own feeds and fetches. check_calls: also parse its code and
    check what it declares and calls (the cost of parsing the IR once more)."""
    def fail(problem):
        raise InvalidSpec(f"executable spec: {problem}")
    if not isinstance(spec, dict):
        fail("is not an object")
    constants, sizes = [], []
    for c in spec.get("constants", []) if isinstance(spec.get("constants"), list) else []:
        if not isinstance(c, dict) or "data" not in c:
            fail("a constant carries no data")
        constants.append({"dtype": c.get("dtype"), "shape": list(c.get("shape", ())),
                          "blob": len(sizes)})
        sizes.append(len(c["data"]))
    plain = dict(_SPEC_DEFAULTS, **spec)
    plain["constants"] = constants
    signature = {side: [dict(e, tensor=e.get("name")) if isinstance(e, dict) else e
                        for e in (spec.get(key) if isinstance(spec.get(key), list) else [])]
                 for side, key in (("inputs", "feeds"), ("outputs", "fetches"))}
    target = spec.get("target") or {}
    verifier = HeaderVerifier({"target": target}, fail, 0, 0, check_code=False)
    verifier.blob_sizes = sizes
    verifier.spec(plain, "spec", signature["inputs"], signature["outputs"])
    if check_calls:
        code = "emulation_ir" if is_gpu_target(target) else "llvm_ir"
        check_code(spec[code], verifier.fail, f"spec {code}")


def _kind_name(kind):
    return {list: "list", dict: "object", str: "string", int: "integer"}.get(kind, str(kind))
