#!/usr/bin/env python3
"""Fuzz the runtime's verifier with structured, re-checksummed edits of a real exported file.

A real file is exported (a symbolic batch, so two executables; constants, a variable the
graph updates, a BLAS call, a gather with its index error site), or --file names one.
Each case applies 1-3 edits from one category to the header (or the code), lays the
file out again (blobs move with their offsets when the header grows) and writes a valid
SHA-256, so only the verifier stands between the edit and the native code. Categories:
offsets, sizes, dims, dtypes, duplicate keys, guards, fetch sources, constants, state,
symbols, signature, error sites, code, and any leaf of the header.

Every case runs in its own process (forked from a server that imported the runtime and
compiled the original code once, so a case costs a verify and a run, not an interpreter
start): it loads the file and runs it on batches of 2 and 1. Outcomes:
  ok        loaded and ran with the original's results (the edit did not matter, e.g. a
            renamed output)
  differs   loaded and ran, with other results than the original (printed: either an
            edit that changes what the file means, such as stored state pointing at
            another blob of the same size, or a verifier gap)
  refused   a runtime error (FileFormatError, FeedError, ShapeError, ...: RuntimeFailure)
  foreign   any other exception (printed)                  -- must be 0
  crash     killed by a signal (SIGSEGV, SIGABRT, ...)       -- must be 0
  hang      still running after --timeout seconds           -- must be 0
  oversized its peak memory grew more than the file's declared needs (the original's
            peak growth + --slack-mb) or it hit the address-space cap -- must be 0

    python tools/fuzz_spec.py [--cases 5000] [--seed 0] [--file model.gcx] [--verbose]

Exit status 1 when any must-be-0 count is not 0.
"""
import argparse
import copy
import hashlib
import json
import os
import random
import resource
import signal
import sys
import tempfile
import time

# the cases run in forked children: no thread teams or BLAS threads to lose in the fork
os.environ.setdefault("GRAPHC_OPENMP", "0")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import runtime  # noqa: E402
from runtime import file_format as ff  # noqa: E402
from runtime import verify  # noqa: E402

MUST_BE_ZERO = ("foreign", "crash", "hang", "oversized")
_EXIT = {0: "ok", 3: "refused", 4: "foreign", 5: "oversized"}


# ------------------------------------------------------------------ the file
def export_sample(path, target="cpu"):
    import graphc as tf
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 4], name="x")
    idx = tf.placeholder(tf.int32, [None], name="idx")
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, name="w")
    c = tf.Variable(np.zeros(3, np.float32), name="c")
    table = tf.constant(np.arange(15, dtype=np.float32).reshape(5, 3))
    y = tf.nn.softmax(tf.matmul(x, w) + tf.gather(table, idx))
    update = tf.assign_add(c, tf.reduce_sum(y, 0))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        tf.export(sess, path, inputs={"x": x, "idx": idx}, outputs={"y": y, "c": update},
                  target=target)
    return path


def split(data):
    _, version, flags, size = ff.PREFIX.unpack_from(data, 0)
    return version, flags, data[ff.PREFIX.size:ff.PREFIX.size + size].decode(), \
        data[ff.PREFIX.size + size:-ff.CHECKSUM_BYTES]


def assemble(data, text, grow=0):
    """The file `data` with header `text` in a header area grown by `grow` bytes, and a
    valid checksum."""
    version, flags, old, rest = split(data)
    new = text.encode()
    new += b" " * max(0, len(old) + grow - len(new))
    body = ff.PREFIX.pack(ff.MAGIC, version, flags, len(new)) + new + rest
    return body + hashlib.sha256(body).digest()


def relaid(data, header):
    """`data` with `header`; when it no longer fits before the blobs, the blobs move by a
    multiple of 64 and every integer blob offset moves with them."""
    text = json.dumps(header, separators=(",", ":"))
    old = len(split(data)[2])
    if len(text) <= old:
        return assemble(data, text)
    grow = (len(text) - old + 1024) // 64 * 64
    for b in header.get("blobs", []) if isinstance(header.get("blobs"), list) else []:
        if isinstance(b, dict) and isinstance(b.get("offset"), int) \
                and not isinstance(b["offset"], bool):
            b["offset"] += grow
    return assemble(data, json.dumps(header, separators=(",", ":")), grow)


def feeds_for(header, batch):
    """Feeds matching the signature with every symbolic dim = batch (indices 0)."""
    feeds = {}
    for e in header["signature"]["inputs"]:
        shape = [d if isinstance(d, int) else batch for d in e["dims"]]
        dtype = np.dtype(e["dtype"])
        value = np.linspace(-1, 1, int(np.prod(shape))).reshape(shape)
        feeds[e["name"]] = value.astype(dtype) if dtype.kind == "f" else \
            np.zeros(shape, dtype)
    return feeds


# ------------------------------------------------------------------ edits
HUGE = [1 << 40, 1 << 62, (1 << 63) - 1, 1 << 64, 10 ** 30]
ABSURD = [-1, -64, 0, 1, 3, 63, 65, 2 ** 31, "x", None, True, 1.5, [], {}, "float128",
          "O"] + HUGE


def ints(rng, around=None):
    pool = [-1, -64, 0, 1, 2, 7, 64, 4096] + HUGE
    if isinstance(around, int) and not isinstance(around, bool):
        pool += [around - 64, around - 1, around + 1, around + 64, around * 2, -around]
    return rng.choice(pool)


def exprs(rng, symbols):
    s = rng.choice(symbols) if symbols else "x.0"
    return rng.choice([
        0, 1, 2, -1, 1 << 40, [[1 << 40, [[s, 1]]]], [[1, [[s, 8]]]], [[-1, [[s, 1]]]],
        [[1, [["nope", 1]]]], [[1, [[["floordiv", [[1, [[s, 1]]]], 0], 1]]]],
        [[1, [[["mod", [[1, [[s, 1]]]], [[-1, [[s, 1]]]]], 1]]]],
        [[1, [[["max", 0, [[1, [[s, 1]]]]], 1]]]], [[1, [[s, 1]]], [-2, []]],
        [[3, [[s, 1]]]], [[1, [[s, 2]]]], [[1, [[s, 9]]]], [[1, [[s, 1]]]] * 300,
        [[1, [[["max", [[1, [[["max", 0, 0], 1]]]], 0], 1]]]] * 2, "x", None, [1], [[1]]])


def tensors(h):
    """Every {"name", "dtype", "dims"} entry of the header."""
    out = list(h["signature"]["inputs"]) + list(h["signature"]["outputs"])
    for spec in h["executables"]:
        out += spec["feeds"] + spec["fetches"] + spec["variables"]
    return out


def pick_spec(h, rng):
    return rng.choice(h["executables"])


def symbols_of(h):
    return [s["name"] for spec in h["executables"] for s in spec["symbols"]]


def edit_offsets(h, rng, _):
    b = rng.choice(h["blobs"])
    field = rng.choice(["offset", "nbytes"])
    if rng.random() < 0.3:
        other = rng.choice(h["blobs"])
        b[field] = other[field]
    else:
        b[field] = ints(rng, b[field])


def edit_sizes(h, rng, _):
    spec = pick_spec(h, rng)
    field = rng.choice(["arena_bytes", "error_detail_slots", "constant"])
    if field == "arena_bytes":
        spec["arena_bytes"] = exprs(rng, symbols_of(h)) if rng.random() < 0.5 else \
            ints(rng, spec["arena_bytes"] if isinstance(spec["arena_bytes"], int) else 64)
    elif field == "error_detail_slots":
        spec["error_detail_slots"] = ints(rng, spec.get("error_detail_slots", 0))
    elif spec["constants"]:
        c = rng.choice(spec["constants"])
        if c["shape"]:
            c["shape"][rng.randrange(len(c["shape"]))] = ints(rng, c["shape"][0])
        else:
            c["shape"] = [ints(rng)]


def edit_dims(h, rng, _):
    t = rng.choice(tensors(h))
    dims = t["dims"]
    r = rng.random()
    if r < 0.2:
        t["dims"] = dims + [rng.choice([1, 3, 1 << 40])]
    elif r < 0.3 and dims:
        t["dims"] = dims[:-1]
    elif r < 0.35:
        t["dims"] = rng.choice([None, "x", [[[[1]]]], [0] * 40])
    elif dims:
        dims[rng.randrange(len(dims))] = exprs(rng, symbols_of(h))


def edit_dtypes(h, rng, _):
    entries = tensors(h) + h["state"] + [c for s in h["executables"] for c in s["constants"]]
    rng.choice(entries)["dtype"] = rng.choice(verify.DTYPES + ("float128", "O", "", 3))


def edit_duplicate_key(h, rng, text):
    """Text-level: a key repeated inside its object with another value before it."""
    keys = [k for k in ("arena_bytes", "dims", "dtype", "offset", "nbytes", "source", "index",
                        "shape", "blob", "feed", "axis", "name", "llvm_ir", "guards",
                        "error_detail_slots", "constants", "fetches")
            if f'"{k}":' in text]
    key = rng.choice(keys)
    positions = [i for i in range(len(text)) if text.startswith(f'"{key}":', i)]
    at = rng.choice(positions)
    value = json.dumps(rng.choice([0, 64, 1 << 40, [], "float64", [[1, [["x.0", 1]]]]]))
    return text[:at] + f'"{key}":{value},' + text[at:]


def edit_guards(h, rng, _):
    spec = pick_spec(h, rng)
    syms = [s["name"] for s in spec["symbols"]] or ["x.0"]
    r = rng.random()
    if r < 0.3 or not spec["guards"]:
        spec["guards"].append([exprs(rng, syms), rng.choice(["==", "!=", "<", ">=", "~"]),
                               exprs(rng, syms), rng.choice([True, False, 1])])
    elif r < 0.5:
        g = rng.choice(spec["guards"])
        g[3] = not g[3] if isinstance(g[3], bool) else True
    elif r < 0.6:
        spec["guards"] = []
    elif r < 0.8:
        spec["value_guards"] = [{
            "feed": rng.choice([0, 1, 5, -1]), "shape": rng.choice([[1 << 40], [2], [], [3, 3]]),
            "values": rng.choice([[], [0, 1], [1 << 63], ["a"]]),
            "name": rng.choice(["v", 3])}]
    else:
        g = rng.choice(spec["guards"])
        g[rng.choice([0, 2])] = exprs(rng, syms)


def edit_fetch_sources(h, rng, _):
    spec = pick_spec(h, rng)
    f = rng.choice(spec["fetches"])
    f["source"] = rng.choice(list(verify.SOURCES) + ["arena", None])
    f["index"] = rng.choice([0, 1, 2, -1, 1 << 40, "0"])


def edit_constants(h, rng, _):
    spec = pick_spec(h, rng)
    if not spec["constants"]:
        spec["constants"].append({"dtype": "float32", "shape": [4], "blob": 0})
        return
    c = rng.choice(spec["constants"])
    field = rng.choice(["blob", "shape", "dtype", "drop", "extra"])
    if field == "blob":
        c["blob"] = rng.choice([0, 1, 2, 3, -1, 1 << 40, None])
    elif field == "shape":
        c["shape"] = rng.choice([[], [1 << 40, 1 << 40], [-1, -12], [12], [3, 4], [2, 6]])
    elif field == "dtype":
        c["dtype"] = rng.choice(["float64", "int8", "bool", "complex128", "float16"])
    elif field == "drop":
        spec["constants"].pop()
    else:
        spec["constants"].append(dict(c))


def edit_state(h, rng, _):
    if not h["state"]:
        return
    s = rng.choice(h["state"])
    field = rng.choice(["name", "shape", "blob", "drop", "dup"])
    if field == "name":
        s["name"] = rng.choice(["w", "zz", "", 3])
    elif field == "shape":
        s["shape"] = rng.choice([[], [1 << 40], [-3], [6], [1, 3]])
    elif field == "blob":
        s["blob"] = rng.choice([0, 1, 2, -1, 99])
    elif field == "drop":
        h["state"].pop()
    else:
        h["state"].append(dict(s))


def edit_symbols(h, rng, _):
    spec = pick_spec(h, rng)
    if not spec["symbols"]:
        return
    s = rng.choice(spec["symbols"])
    field = rng.choice(["feed", "axis", "name", "dup", "drop"])
    if field == "feed":
        s["feed"] = rng.choice([0, 1, 2, -1, 1 << 40])
    elif field == "axis":
        s["axis"] = rng.choice([0, 1, 2, 5, -1])
    elif field == "name":
        s["name"] = rng.choice(["x.1", "y", "", 0])
    elif field == "dup":
        spec["symbols"].append(dict(s))
    else:
        spec["symbols"].pop()


def edit_signature(h, rng, _):
    side = rng.choice(["inputs", "outputs"])
    entries = h["signature"][side]
    e = rng.choice(entries)
    field = rng.choice(["name", "tensor", "drop", "dup", "swap"])
    if field == "name":
        e["name"] = rng.choice(["", "x", "y", "idx", 5])
    elif field == "tensor":
        e.pop("tensor")
    elif field == "drop":
        entries.pop()
    elif field == "dup":
        entries.append(dict(e))
    else:
        entries.reverse()


def edit_error_sites(h, rng, _):
    spec = pick_spec(h, rng)
    sites = spec["error_sites"]
    site = rng.choice(sites) if sites else {"class": "InvalidArgumentError", "message": "m"}
    if not sites:
        sites.append(site)
    field = rng.choice(["message", "args", "class", "drop"])
    if field == "message":
        site["message"] = rng.choice(["{0:>999999999}", "{}{}{}{}", "{0[9999999]}", "%s", 7])
    elif field == "args":
        site["args"] = rng.choice([["int"] * 300, [{"index": [[1 << 40, []]]}],
                                   [{"index": None}], [5], "int"])
    elif field == "class":
        site["class"] = rng.choice(["NoSuchError", "", 1])
    else:
        sites.clear()


SYSTEM = ('\ndeclare i32 @system(ptr)\n@cmd = private constant [5 x i8] c"true\\00"\n'
          'define i32 @evil() {\n  %r = call i32 @system(ptr @cmd)\n  ret i32 %r\n}\n')


def edit_code(h, rng, _):
    spec = pick_spec(h, rng)
    field = "emulation_ir" if "emulation_ir" in spec else "llvm_ir"
    ir = spec[field]
    marker = f'@"{verify.INTERFACE_GLOBAL}"'
    r = rng.choice(["system", "entry_system", "declare", "drop_interface", "bad_interface",
                    "truncate", "garbage", "inttoptr", "asm", "not_string", "global"])
    if r == "system":
        ir += SYSTEM
    elif r == "entry_system":
        ir = ir.replace('define i32 @"graphc_main"(', 'define i32 @"graphc_main_x"(', 1) + \
            SYSTEM + ('define i32 @"graphc_main"(ptr %a, ptr %b, ptr %c, ptr %d, ptr %e, '
                      'ptr %f) {\n  %r = call i32 @evil()\n  ret i32 %r\n}\n')
    elif r == "declare":
        ir += f"\ndeclare ptr @{rng.choice(['dlopen', 'mmap', 'execve', 'fopen', 'malloc'])}" \
              "(ptr, i32)\n"
    elif r == "drop_interface":
        ir = ir[:ir.find(marker)] if marker in ir else ir
    elif r == "bad_interface":
        start = ir.find(marker)
        ir = ir[:start] + f'{marker} = constant [3 x i8] c"{{{{[", align 1\n'
    elif r == "truncate":
        ir = ir[:rng.randrange(len(ir))]
    elif r == "garbage":
        ir = ir.replace("ret i32 0", "ret i64 0", 1)
    elif r == "inttoptr":
        ir += "\ndefine void @jump(i64 %a) {\n  %p = inttoptr i64 %a to ptr\n" \
              "  call void %p()\n  ret void\n}\n"
    elif r == "asm":
        ir += '\ndefine void @a() {\n  call void asm sideeffect "ud2", ""()\n  ret void\n}\n'
    elif r == "global":
        ir += "\n@environ = external global ptr\n"
    else:
        ir = rng.choice([None, 0, ["x"]])
    spec[field] = ir


def edit_launches(h, rng, _):
    """GPU files: a launch's arena offsets, storage keys, grid, block, shared memory."""
    spec = pick_spec(h, rng)
    launch = rng.choice(spec["launches"])
    field = rng.choice(["arena", "key", "grid", "block", "shared", "kernel"])
    arena_args = [a for a in launch["args"] if a[0] == "arena"]
    if field == "arena" and arena_args:
        rng.choice(arena_args)[1] = exprs(rng, symbols_of(h)) if rng.random() < 0.5 else \
            ints(rng, 64)
    elif field in ("key", "arena") and launch["args"]:
        arg = rng.choice(launch["args"])
        arg[0] = rng.choice(["feed", "fetch", "var", "const", "arena", "heap"])
        arg[1] = rng.choice([0, 1, 2, 9, -1, 1 << 40])
    elif field == "grid":
        launch["grid"] = exprs(rng, symbols_of(h))
    elif field == "block":
        launch["block"] = rng.choice([0, 1, 33, 1024, 1025, -1, 1 << 40])
    elif field == "shared":
        launch["shared_bytes"] = rng.choice([0, 64, 1 << 20, -8])
    else:
        launch["kernel"] = rng.choice([l["kernel"] for l in spec["launches"]] + ["nope"])


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in verify.CODE_FIELDS:
                yield from _leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, path + (i,))
    yield path


def edit_any_leaf(h, rng, _):
    paths = [p for p in _leaves(h) if p]
    path = rng.choice(paths)
    parent = h
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and rng.random() < 0.15:
        del parent[path[-1]]
    else:
        old = parent[path[-1]]
        parent[path[-1]] = ints(rng, old) if isinstance(old, int) and rng.random() < 0.5 \
            else copy.deepcopy(rng.choice(ABSURD))


CATEGORIES = {
    "offsets": edit_offsets, "sizes": edit_sizes, "dims": edit_dims, "dtypes": edit_dtypes,
    "duplicate_keys": edit_duplicate_key, "guards": edit_guards,
    "fetch_sources": edit_fetch_sources, "constants": edit_constants, "state": edit_state,
    "symbols": edit_symbols, "signature": edit_signature, "error_sites": edit_error_sites,
    "code": edit_code, "any_leaf": edit_any_leaf,
}


GPU_CATEGORIES = dict(CATEGORIES, launches=edit_launches)


def make_case(original, header_text, category, rng):
    """The bytes of one edited, re-checksummed file."""
    edit = GPU_CATEGORIES[category]
    if category == "duplicate_keys":
        text = header_text
        for _ in range(rng.randint(1, 2)):
            text = edit(None, rng, text)
        grow = max(0, (len(text) - len(header_text) + 1024) // 64 * 64) \
            if len(text) > len(header_text) else 0
        if grow:  # the header grew: move the blobs' offsets too (text-level)
            header = json.loads(header_text)
            for b in header["blobs"]:
                text = text.replace(f'"offset":{b["offset"]},',
                                    f'"offset":{b["offset"] + grow},')
        return assemble(original, text, grow)
    header = json.loads(header_text)
    for _ in range(rng.randint(1, 3)):
        try:
            edit(header, rng, None)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            pass  # an earlier edit of this case removed what this one edits
    return relaid(original, header)


# ------------------------------------------------------------------ running
def _vm_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _digest(results):
    h = hashlib.sha256()
    for values in results:
        for value in values:
            h.update(np.ascontiguousarray(value).tobytes())
    return h.hexdigest()


def _child(path, feeds, cap_bytes, report_fd, device):
    """Runs in the forked process: load, run twice, report; never returns."""
    code = 0
    message = ""
    digest = ""
    try:
        resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + cap_bytes,) * 2)
        model = runtime.load(path, device=device)
        digest = _digest([model.run(None, batch) for batch in feeds])
    except runtime.RuntimeFailure:
        code = 3
    except MemoryError:
        code, message = 5, "MemoryError"
    except BaseException as e:  # noqa: BLE001 -- what the fuzz is looking for
        code, message = 4, f"{type(e).__name__}: {str(e)[:300]}"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    os.write(report_fd, json.dumps({"message": message, "peak": peak,
                                    "digest": digest}).encode())
    os._exit(code)


def run_case(path, feeds, timeout, cap_bytes, device=None):
    """(outcome, message, peak RSS bytes, digest of the results) of one case in a forked
    child."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(path, feeds, cap_bytes, write_fd, device)
    os.close(write_fd)
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.002)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_fd)
        return "hang", f"still running after {timeout} s", 0, ""
    raw = b""
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        raw += chunk
    os.close(read_fd)
    if os.WIFSIGNALED(status):
        return "crash", f"signal {os.WTERMSIG(status)}", 0, ""
    report = json.loads(raw or b'{"message": "no report", "peak": 0, "digest": ""}')
    return (_EXIT.get(os.WEXITSTATUS(status), "crash"), report["message"], report["peak"],
            report["digest"])


def fuzz(original, cases, seed, timeout=30.0, slack_mb=256, verbose=False, out=sys.stdout,
         device=None):
    """Runs `cases` edits of the file bytes `original`; returns {outcome: count}."""
    header_text = split(original)[2]
    header = json.loads(header_text)
    feeds = [feeds_for(header, 2), feeds_for(header, 1)]
    scratch = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    path = os.path.join(scratch, "case.gcx")
    with open(path, "wb") as f:
        f.write(original)
    model = runtime.load(path, device=device)  # compiled once: the children reuse it
    for batch in feeds:
        model.run(batch)
    del model
    cap = 4 << 30
    base = run_case(path, feeds, timeout, cap, device)
    if base[0] != "ok":
        raise SystemExit(f"the original file does not run: {base}")
    limit = base[2] + (slack_mb << 20)  # the file's declared needs, measured, plus slack
    rng = random.Random(seed)
    names = sorted(GPU_CATEGORIES if ff.is_gpu_target(header.get("target")) else CATEGORIES)
    counts = {k: 0 for k in ("ok", "differs", "refused") + MUST_BE_ZERO}
    by_category = {name: dict.fromkeys(counts, 0) for name in names}
    examples = []
    for i in range(cases):
        category = names[i % len(names)]
        data = make_case(original, header_text, category, rng)
        with open(path, "wb") as f:
            f.write(data)
        outcome, message, peak, digest = run_case(path, feeds, timeout, cap, device)
        if outcome in ("ok", "refused") and peak > limit:
            outcome, message = "oversized", f"peak RSS {peak >> 20} MB > {limit >> 20} MB"
        elif outcome == "ok" and digest != base[3]:
            outcome, message = "differs", "ran with other results than the original"
        counts[outcome] += 1
        by_category[category][outcome] += 1
        if outcome in MUST_BE_ZERO or outcome == "differs":
            examples.append((i, category, outcome, message))
            if verbose:
                print(f"case {i} ({category}): {outcome}: {message}", file=out)
    os.unlink(path)
    os.rmdir(scratch)
    print(f"{cases} cases, seed {seed}: " + ", ".join(f"{k} {v}" for k, v in counts.items()),
          file=out)
    for name in names:
        c = by_category[name]
        print(f"  {name:15s} " + " ".join(f"{k}={v}" for k, v in c.items() if v), file=out)
    for example in examples[:20]:
        print("  case %d (%s): %s: %s" % example, file=out)
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--file", help="a compiled file to fuzz (default: export a sample)")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--slack-mb", type=int, default=256)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--target", choices=("cpu", "gpu"), default="cpu",
                        help="the sample's target; a GPU file runs on the emulated device")
    args = parser.parse_args(argv)
    path = args.file
    if path is None:
        path = export_sample(os.path.join(tempfile.mkdtemp(), "sample.gcx"), args.target)
    with open(path, "rb") as f:
        original = f.read()
    start = time.perf_counter()
    device = "emulated" if ff.is_gpu_target(json.loads(split(original)[2]).get("target")) \
        else None
    counts = fuzz(original, args.cases, args.seed, args.timeout, args.slack_mb, args.verbose,
                  device=device)
    print(f"({time.perf_counter() - start:.0f} s)")
    return 1 if any(counts[k] for k in MUST_BE_ZERO) else 0


if __name__ == "__main__":
    sys.exit(main())
