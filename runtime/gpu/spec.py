"""Checks of the fields a GPU executable spec adds to the CPU spec (docs/gpu_contract.md):

    "target": {"kind": "gpu", "arch": "sm_80"}, "ptx": str, "emulation_ir": str,
    "launches": [{"kernel", "args": [[kind, x], ...], "grid", "block", "shared_bytes"}]
    "grown": [{"bytes": [dim, ...], "first_rows": int}], "run_dim_names": [str, ...]

`check_gpu_fields(spec, fail, check_expr)` reports the first problem through
`fail(where, problem)` (which must raise): wrong types, argument keys out of range, a
kernel missing from the PTX or the emulation IR, or declared there with another number of
parameters than its launch passes, launch sizes out of bounds. `check_expr(expr, where)`
checks a dim expression (the caller knows which symbols exist); `check_run_expr`, where
given, one that may also name the run dims (a loop's trip count, set during the run):
launch grids and grown buffers' sizes, never an offset. The GPU executable and
the file reader both use it, so a spec that passes can be launched without reading or
writing outside the buffers its keys name (given kernels that honour their sizes).
"""
import re

__all__ = ["check_gpu_fields", "is_gpu_target", "all_launches", "frame_keys", "ARG_KINDS",
           "MAX_BLOCK", "MAX_GRID", "MAX_SHARED_BYTES"]

ARG_KINDS = ("feed", "fetch", "var", "const", "arena", "grown")
MAX_FIRST_ROWS = 1 << 20        # a grown stack's first rows
MAX_BLOCK = 1024                # threads per block on every CUDA GPU
MAX_GRID = 2**31 - 1            # blocks in x
MAX_SHARED_BYTES = 227 * 1024   # dynamic shared memory per block (sm_90's opt-in limit)
MAX_LAUNCHES = 1 << 16
MAX_ARGS = 1 << 12
_ARCH = re.compile(r"sm_[1-9][0-9]{1,2}a?")
_PTX_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*\(")
_IR_DEFINE = re.compile(r'^define\b[^@\n]*@("(?:[^"\\]|\\.)*"|[-\w$.]+)\(', re.M)


def is_gpu_target(target):
    return isinstance(target, dict) and target.get("kind") == "gpu"


def check_gpu_fields(spec, fail, check_expr, need_ptx=True, check_run_expr=None):
    """need_ptx=False: a spec for the emulation alone may have "ptx": None."""
    target = spec.get("target")
    if not is_gpu_target(target) or not isinstance(target.get("arch"), str) \
            or not _ARCH.fullmatch(target["arch"]):
        fail("target", f"{target!r} is not a GPU target {{'kind': 'gpu', 'arch': 'sm_NN'}}")
    for field in ("ptx", "emulation_ir"):
        if field == "ptx" and not need_ptx and spec.get(field) is None:
            continue
        if not isinstance(spec.get(field), str):
            fail(field, "is missing or not a string")
    entries = ptx_entries(spec["ptx"]) if spec.get("ptx") is not None else None
    emulated = emulation_functions(spec["emulation_ir"])
    launches = spec.get("launches")
    if not isinstance(launches, list) or len(launches) > MAX_LAUNCHES:
        fail("launches", "is missing, not a list, or too long")
    limits = _key_limits(spec)
    limits["run_expr"] = check_run_expr or check_expr
    limits["run_dims"] = _check_run_dims(spec, fail)
    _check_grown(spec, fail, limits["run_expr"])
    _check_steps(launches, "launch", entries, emulated, limits, fail, check_expr, [0])


def all_launches(steps):
    """Every launch of a spec's steps, those in While and If bodies included."""
    for step in steps:
        if isinstance(step, dict) and ("while" in step or "if" in step):
            for key in REGION_BODIES["while" if "while" in step else "if"]:
                body = step.get(key)
                if isinstance(body, dict) and isinstance(body.get("steps"), list):
                    yield from all_launches(body["steps"])
            if isinstance(step.get("device_loop"), dict):
                yield step["device_loop"]
        else:
            yield step


def frame_keys(step):
    """(what, storage key) of each buffer a step names in the frame it runs in: a
    launch's args; a region step's inputs, outputs and scratch (its bodies' keys name
    frames of their own)."""
    if "while" in step or "if" in step:
        yield from ((f"input {k}", key) for k, key in enumerate(step["inputs"]))
        yield from ((f"output {k}", key) for k, keys in enumerate(step["outputs"])
                    for key in keys)
        if step.get("scratch") is not None:
            yield "scratch", step["scratch"]
    else:
        yield from ((f"arg {k}", key) for k, key in enumerate(step["args"]))


# the bodies of each kind of region step (runtime/gpu/control_flow.py)
REGION_BODIES = {"while": ("cond", "body"), "if": ("then", "else")}
_MAX_DEPTH = 64  # regions nested in regions


def _check_steps(steps, where, entries, emulated, limits, fail, check_expr, count,
                 depth=0):
    """Launches and region steps; limits: what the frame's keys may name (and the run
    dims' names, "run_dims", with "run_expr" checking an expression that may read them);
    count: the launches seen so far (one list shared by the nested calls)."""
    if not isinstance(steps, list):
        fail(where, "steps are not a list")
    for i, step in enumerate(steps):
        w = f"{where} {i}"
        if isinstance(step, dict) and ("while" in step or "if" in step):
            _check_region(step, w, entries, emulated, limits, fail, check_expr, count,
                          depth)
            continue
        count[0] += 1
        if count[0] > MAX_LAUNCHES:
            fail("launches", "too many")
        _check_launch(step, w, entries, emulated, limits, fail, check_expr)


def _check_region(step, where, entries, emulated, limits, fail, check_expr, count, depth):
    """A While or If step: its keys in the enclosing frame, its sizes, then each body's
    steps against the body's own frame (params, outputs; variables and constants shared)."""
    if depth >= _MAX_DEPTH:
        fail(where, f"regions nest deeper than {_MAX_DEPTH}")
    kind = "while" if "while" in step else "if"
    if not isinstance(step[kind], str):
        fail(where, f"field {kind!r} is not a name")
    for k, key in enumerate(_list(step, "inputs", where, fail)):
        _check_arg(key, f"{where} input {k}", limits, fail, check_expr)
    for k, keys in enumerate(_list(step, "outputs", where, fail)):
        for key in _list({"o": keys}, "o", f"{where} output {k}", fail):
            _check_arg(key, f"{where} output {k}", limits, fail, check_expr)
    if step.get("scratch") is not None:
        _check_arg(step["scratch"], f"{where} scratch", limits, fail, check_expr)
    check_expr(step.get("scratch_bytes"), f"{where} scratch_bytes")
    if kind == "while":
        for k, v in enumerate(_list(step, "vars", where, fail)):
            for field in ("bytes", "a", "b"):
                check_expr(_field(v, field, f"{where} var {k}", fail), f"{where} var {k}")
            if not isinstance(v.get("in_place", False), bool):
                fail(f"{where} var {k}", "in_place is not a boolean")
        for k, v in enumerate(_list(step, "stacks", where, fail)):
            for field in ("row_bytes", "row"):
                check_expr(_field(v, field, f"{where} stack {k}", fail), f"{where} stack {k}")
            if _field(v, "bytes", f"{where} stack {k}", fail) is None:
                _check_grown_stack(step, k, f"{where} stack {k}", limits, fail)
            else:
                check_expr(v["bytes"], f"{where} stack {k}")
            if not isinstance(v.get("zeroed_past_trips", False), bool):
                fail(f"{where} stack {k}", "zeroed_past_trips is not a boolean")
        trips_dim = step.get("trips_dim")
        if trips_dim is not None and (not _is_int(trips_dim) or
                                      not 0 <= trips_dim < len(limits["run_dims"])):
            fail(f"{where} trips_dim", f"{trips_dim!r} names no run dim (the spec has "
                                       f"{len(limits['run_dims'])})")
        if step.get("device_loop") is not None:
            _check_device_loop(step, where, entries, emulated, limits, fail, check_expr,
                               count)
    else:
        for field in ("slots", "bytes"):
            for k, e in enumerate(_list(step, field, where, fail)):
                check_expr(e, f"{where} {field} {k}")
    for key in REGION_BODIES[kind]:
        body, w = step.get(key), f"{where} {key}"
        if not isinstance(body, dict):
            fail(w, "is missing or not an object")
        check_expr(body.get("arena"), w + " arena")
        check_expr(body.get("arena_bytes"), w + " arena_bytes")
        params = body.get("params")
        if not _is_int(params) or not 0 <= params <= MAX_ARGS:
            fail(w, f"params {params!r} is not a count")
        fetches = _list(body, "fetches", w, fail)
        counts = {"kernel": len(fetches), "feed": params, "variable": limits["var"],
                  "constant": limits["const"]}
        for k, f in enumerate(fetches):
            if not isinstance(f, dict) or f.get("source") not in counts or \
                    not _is_int(f.get("index")) or not 0 <= f["index"] < counts[f["source"]]:
                fail(f"{w} fetch {k}", f"{f!r} is not a fetch source")
            check_expr(f.get("bytes"), f"{w} fetch {k} bytes")
        if kind == "if" and not all(_is_int(o) for o in _list(body, "outputs", w, fail)):
            fail(w, "outputs are not indices")
        # a body's frame has no grown buffers: a loop growing stacks is no body's
        inner = dict(limits, feed=params, kernel_fetches=set(range(len(fetches))), grown=0)
        _check_steps(body.get("steps"), w + " step", entries, emulated, inner, fail,
                     check_expr, count, depth + 1)


def _check_device_loop(step, where, entries, emulated, limits, fail, check_expr, count):
    """A While's one-kernel form: a launch of one block whose args are refs of the
    step's frame (graphc/compiler/backends/gpu/device_loop.py), each in range."""
    loop = step["device_loop"]
    w = f"{where} device_loop"
    if not isinstance(loop, dict):
        fail(w, "is not an object")
    count[0] += 1
    refs = loop.get("args")
    _check_launch(dict(loop, args=[]), w, entries, emulated, limits, fail, check_expr,
                  arg_count=len(refs) if isinstance(refs, list) else -1)
    if loop.get("grid") != 1:
        fail(w, f"grid {loop.get('grid')!r} is not 1 (the loop runs in one block)")
    threads = loop.get("max_threads")
    if not _is_int(threads) or threads < 0:
        fail(w, f"max_threads {threads!r} is not a count")
    counts = {"a": len(step["vars"]), "b": len(step["vars"]), "input": len(step["inputs"]),
              "row": len(step["stacks"])}
    for k, ref in enumerate(refs):
        at = f"{w} arg {k}"
        if not isinstance(ref, list) or not ref:
            fail(at, f"{ref!r} is not a ref")
        kind = ref[0]
        if kind in ("var", "const"):
            _check_arg(ref, at, limits, fail, check_expr)
        elif kind in counts:
            if len(ref) != 2 or not _is_int(ref[1]) or not 0 <= ref[1] < counts[kind]:
                fail(at, f"{ref!r} names no {kind} of the loop (it has {counts[kind]})")
        elif kind == "arena":
            if ref[1:] not in (["cond"], ["body"]):
                fail(at, f"{ref!r} names no body's arena")
        elif kind == "output":
            outputs = step["outputs"]
            if len(ref) != 3 or not all(_is_int(x) for x in ref[1:]) or \
                    not 0 <= ref[1] < len(outputs) or not 0 <= ref[2] < len(outputs[ref[1]]):
                fail(at, f"{ref!r} names no output buffer of the loop")
        else:
            fail(at, f"{ref!r} is not a ref of a device loop")


def _list(obj, field, where, fail):
    value = obj.get(field) if isinstance(obj, dict) else None
    if not isinstance(value, list) or len(value) > MAX_ARGS:
        fail(where, f"field {field!r} is missing, not a list, or too long")
    return value


def _field(obj, field, where, fail):
    if not isinstance(obj, dict) or field not in obj:
        fail(where, f"field {field!r} is missing")
    return obj[field]


def _key_limits(spec):
    fetches = spec.get("fetches") or []
    kernel_fetches = {j for j, f in enumerate(fetches)
                      if isinstance(f, dict) and f.get("source", "kernel") == "kernel"}
    grown = spec.get("grown")
    return {"feed": len(spec.get("feeds") or []), "var": len(spec.get("variables") or []),
            "const": len(spec.get("constants") or []), "kernel_fetches": kernel_fetches,
            "grown": len(grown) if isinstance(grown, list) else 0}


def _check_run_dims(spec, fail):
    """The run dims' names: distinct strings, one per run dim slot, no symbol's name."""
    names = spec.get("run_dim_names", [])
    symbols = {s.get("name") for s in spec.get("symbols") or () if isinstance(s, dict)}
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or \
            len(set(names)) != len(names) or symbols & set(names):
        fail("run_dim_names", f"{names!r} is not a list of distinct new dim names")
    if len(names) != spec.get("run_dims", 0):
        fail("run_dim_names", f"names {len(names)} dims, the spec has run_dims "
                              f"{spec.get('run_dims', 0)!r}")
    return names


def _check_grown(spec, fail, check_run_expr):
    """The buffers the runtime owns (runtime/gpu/grown.py): sizes of their values (which
    may read run dims), and the first rows of a stack grown in one."""
    grown = spec.get("grown", [])
    if not isinstance(grown, list) or len(grown) > MAX_ARGS:
        fail("grown", "is not a list, or too long")
    for g, entry in enumerate(grown):
        where = f"grown {g}"
        for k, e in enumerate(_list(entry, "bytes", where, fail)):
            check_run_expr(e, f"{where} bytes {k}")
        if not entry["bytes"]:
            fail(where, "sizes no value")
        rows = entry.get("first_rows")
        if not _is_int(rows) or not 1 <= rows <= MAX_FIRST_ROWS:
            fail(where, f"first_rows {rows!r} is not an integer in [1, {MAX_FIRST_ROWS}]")


def _check_grown_stack(step, k, where, limits, fail):
    """A stack that grows (bytes null): its rows in the grown buffer its one output key
    names (or nowhere: no kernel reads it), and a trip count the loop sets."""
    stack = step["stacks"][k]
    grown = stack.get("grown")
    outputs = step["outputs"]
    keys = outputs[len(step["vars"]) + 1 + k] if len(outputs) > len(step["vars"]) + 1 + k \
        else None
    if grown is not None and (not _is_int(grown) or not 0 <= grown < limits["grown"]):
        fail(where, f"grown buffer {grown!r} does not exist (the spec has {limits['grown']})")
    if keys != ([] if grown is None else [["grown", grown]]):
        fail(where, f"grows in buffer {grown!r}, but its output keys are {keys!r}")
    if step.get("trips_dim") is None:
        fail(where, "grows, but the loop sets no trips_dim")


def _check_launch(launch, where, entries, emulated, limits, fail, check_expr,
                  arg_count=None):
    """arg_count: the pointer arguments when they are not storage keys (args is empty)."""
    if not isinstance(launch, dict):
        fail(where, "is not an object")
    name = launch.get("kernel")
    if not isinstance(name, str) or not name:
        fail(where, "field 'kernel' is missing or not a string")
    args = launch.get("args")
    if not isinstance(args, list) or len(args) > MAX_ARGS:
        fail(where, "field 'args' is missing, not a list, or too long")
    n_args = len(args) if arg_count is None else arg_count
    if not 0 <= n_args <= MAX_ARGS:
        fail(where, "field 'args' is missing, not a list, or too long")
    if entries is not None and name not in entries:
        fail(where, f"kernel {name!r} has no .entry in the PTX")
    if entries is not None and entries[name] != n_args + 2:
        fail(where, f"kernel {name!r} takes {entries[name]} parameters in the PTX, the "
                    f"launch passes {n_args + 2} (buffers, syms, status)")
    if emulated.get(name) != (n_args + 2, 2):
        fail(where, f"the emulation IR has no function {name}.emulate taking "
                    f"{n_args + 2} pointers and (grid, block)")
    for k, arg in enumerate(args):
        _check_arg(arg, f"{where} arg {k}", limits, fail, check_expr)
    limits["run_expr"](launch.get("grid"), f"{where} grid")
    block = launch.get("block")
    if not _is_int(block) or not 1 <= block <= MAX_BLOCK:
        fail(where, f"block {block!r} is not an integer in [1, {MAX_BLOCK}]")
    shared = launch.get("shared_bytes", 0)
    if not _is_int(shared) or not 0 <= shared <= MAX_SHARED_BYTES:
        fail(where, f"shared_bytes {shared!r} is not an integer in [0, {MAX_SHARED_BYTES}]")


def _check_arg(arg, where, limits, fail, check_expr):
    if not isinstance(arg, list) or len(arg) != 2 or arg[0] not in ARG_KINDS:
        fail(where, f"{arg!r} is not a storage key [kind, index] with kind in {ARG_KINDS}")
    kind, index = arg
    if kind == "grown":
        if not _is_int(index) or not 0 <= index < limits["grown"]:
            fail(where, f"grown buffer {index!r} does not exist (the spec has "
                        f"{limits['grown']})")
        return
    if kind == "arena":
        check_expr(index, where + " offset")
        return
    if kind == "fetch":
        if not _is_int(index) or index not in limits["kernel_fetches"]:
            fail(where, f"fetch {index!r} is not a fetch computed by a kernel")
        return
    if not _is_int(index) or not 0 <= index < limits[kind]:
        fail(where, f"{kind} {index!r} does not exist (the spec has {limits[kind]})")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------- signatures
def ptx_entries(ptx):
    """{entry name: number of .param} of the kernels in PTX text."""
    out = {}
    for m in _PTX_ENTRY.finditer(ptx):
        params = _balanced(ptx, m.end() - 1)
        out[m.group(1)] = 0 if params is None else params.count(".param")
    return out


def emulation_functions(llvm_ir):
    """{kernel name: (pointer params, i64 params)} of the `<kernel>.emulate` functions."""
    out = {}
    for m in _IR_DEFINE.finditer(llvm_ir):
        name = m.group(1).strip('"')
        if not name.endswith(".emulate"):
            continue
        params = _balanced(llvm_ir, m.end() - 1)
        if params is None:
            continue
        kinds = [p.split()[0] for p in _split_top(params) if p.strip()]
        out[name[:-len(".emulate")]] = (kinds.count("ptr"), kinds.count("i64")) \
            if len(kinds) == kinds.count("ptr") + kinds.count("i64") else (-1, -1)
    return out


def _balanced(text, open_at, limit=1 << 16):
    """The text inside the parentheses opening at text[open_at], or None."""
    depth = 0
    for i in range(open_at, min(len(text), open_at + limit)):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i]
    return None


def _split_top(params):
    parts, depth, start = [], 0, 0
    for i, c in enumerate(params):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(params[start:i])
            start = i + 1
    parts.append(params[start:])
    return parts
