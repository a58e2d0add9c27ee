"""The on-disk cache of finished executable specs: a warm process skips the Python compiler.

runtime's object cache (runtime/compile_cache.py) already skips LLVM for an unchanged IR;
this one, keyed on the lowered module (its whole plain-data form, constants, symbols and
guards included), the disabled passes, the host target and a hash of the compiler's own
source files, also skips the passes and code generation (most of a warm first run's compile time,
tools/compile_time.py measures it). A changed compiler never reuses an old spec. Entries live in
the same directory (GRAPHC_CACHE_DIR; "off" disables both) with the same checked, atomic
writes; nothing is pickled: a spec is JSON plus its constants' raw bytes.
"""
import hashlib
import json
import os

from runtime import compile_cache, file_format

_SOURCES = None
# environment settings the passes and codegen read: part of the key
_CODEGEN_ENV = ("GRAPHC_DISABLE_PASSES", "GRAPHC_PARALLEL", "GRAPHC_PARALLEL_MIN_WORK",
                "GRAPHC_PARALLEL_DEBUG")
stats = {"hits": 0, "misses": 0, "stores": 0}


def _compiler_source_hash():
    """SHA-256 over graphc's and kernels' Python sources (computed once per process)."""
    global _SOURCES
    if _SOURCES is None:
        h = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(__file__))
        roots = [os.path.dirname(here), os.path.join(os.path.dirname(os.path.dirname(here)),
                                                     "kernels")]
        for root in roots:
            for folder, dirs, files in sorted(os.walk(root)):
                dirs.sort()
                for name in sorted(f for f in files if f.endswith(".py")):
                    path = os.path.join(folder, name)
                    h.update(os.path.relpath(path, root).encode())
                    with open(path, "rb") as f:
                        h.update(f.read())
        _SOURCES = h.hexdigest()
    return _SOURCES


def key(module, disable, target):
    """The cache key of compiling `module` (as lowered, before any pass), or None when
    the module has no plain-data form."""
    plain = module.to_dict()
    plain.pop("name", None)  # a per-process counter: the same graph gets another name
    try:
        text = json.dumps(plain, sort_keys=True, default=_plain)
    except (TypeError, ValueError):
        return None
    h = hashlib.sha256()
    settings = {name: os.environ.get(name) for name in _CODEGEN_ENV}
    for part in ("graphc-spec-cache 1", _compiler_source_hash(), json.dumps(target, sort_keys=True),
                 ",".join(sorted(disable or ())), json.dumps(settings, sort_keys=True), text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()  # hex, as the object cache expects; the prefix above separates them


def load(key):
    cache = compile_cache.default_cache()
    blob = cache.load(key) if cache and key else None
    if blob is None:
        stats["misses"] += 1
        return None
    try:
        spec = _from_bytes(blob)
    except (ValueError, KeyError, TypeError):
        return None
    stats["hits"] += 1
    return spec


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


def _to_bytes(spec):
    constants = spec.get("constants", [])
    header = dict(spec, constants=[{"dtype": c["dtype"], "shape": list(c["shape"]),
                                    "nbytes": len(c["data"])} for c in constants])
    text = json.dumps(header, default=_plain).encode()
    return b"".join([len(text).to_bytes(8, "little"), text] +
                    [bytes(c["data"]) for c in constants])


def _from_bytes(blob):
    n = int.from_bytes(blob[:8], "little")
    if n > len(blob) - 8:
        raise ValueError("truncated spec entry")
    spec = json.loads(blob[8:8 + n])
    offset, constants = 8 + n, []
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
