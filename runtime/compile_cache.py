"""On-disk cache of JIT machine code, so that a second process compiling the same LLVM IR
skips LLVM optimization and code generation (runtime/jit.py hooks it into MCJIT's object
cache).

Key: SHA-256 of the UNoptimized IR text, the target (triple, CPU name, features), the LLVM
and llvmlite versions, the JIT's optimization settings and this file's format version; so
anything that could change the machine code changes the key, and the O3 pipeline is
skipped on a hit as well.

Location: $GRAPHC_CACHE_DIR, else $XDG_CACHE_HOME/graphc, else ~/.cache/graphc.
GRAPHC_CACHE_DIR="" or "off" disables the cache. GRAPHC_CACHE_MAX_MB bounds the directory
(default 512): when a store takes the directory past it, the least recently used entries
(by mtime, which a hit refreshes) are evicted until the rest fits (the directory is read
then, and every RESCAN_STORES stores, not after each one: _directory_bytes).

The module's name (the `; ModuleID` line: lower.py numbers every module) is no part of the
key: it names the module and changes no code, and keying on it made every module unique,
so two graphs compiling to the same code (a deep model's hundreds of variable initializers)
compiled it once each.

Within a process the object bytes are also kept in memory (`memory_load`/`memory_store`,
bounded by MEMORY_MAX_BYTES, least recently used first out), whether or not the disk cache
is on: a repeat of the same IR then skips LLVM without touching the disk. Each repeat still
gets its own MCJIT engine from the bytes, so no module shares globals with another.

Entry file `<key>.o`: a header (magic, the key's digest, payload length, payload SHA-256)
and the object file bytes, or for a module compiled in parts (runtime/jit.py) a bundle of
its parts' object files (`pack_objects`); nothing is pickled. Entries are written to a
temporary file in the same directory and renamed into place (os.replace), so readers never
see a partial entry; an entry whose header does not verify (truncated, corrupt, foreign) is
deleted and treated as a miss, so it is rebuilt. The cache is best effort: an unwritable
directory or a full disk costs a recompile, never an error.
"""
import collections
import hashlib
import os
import re
import struct
import tempfile
import threading
import time

FORMAT_VERSION = 1
MAGIC = b"GRAPHCO\x01"
BUNDLE_MAGIC = b"GRAPHCB\x01"  # a payload of several object files (pack_objects)
_HEADER = struct.Struct("<8s32sQ32s")  # magic, key digest, payload length, payload sha256
_SUFFIX = ".o"
_TMP_PREFIX = ".tmp-"
_STALE_TMP_SECONDS = 3600  # temp files older than this were left by a killed process
DEFAULT_MAX_MB = 512
MEMORY_MAX_BYTES = 64 * 2**20
_MODULE_ID = re.compile(r"\A; ModuleID = [^\n]*\n?")

# Counters for this process (tests and tools/compile_time.py read them).
stats = {"hits": 0, "misses": 0, "stores": 0, "rejected": 0, "errors": 0, "evicted": 0}
_stats_lock = threading.Lock()


class MemoryCache:
    """Object bytes this process keeps under their keys, the least recently used dropped
    first past a bound in bytes (given per store: tests narrow the module's bound)."""

    def __init__(self):
        self.stats = {"hits": 0, "misses": 0, "stores": 0, "evicted": 0}
        self._entries = collections.OrderedDict()  # key -> bytes, least recently used first
        self._bytes = 0
        self._lock = threading.Lock()

    def load(self, key):
        with self._lock:
            payload = self._entries.get(key)
            self.stats["misses" if payload is None else "hits"] += 1
            if payload is not None:
                self._entries.move_to_end(key)
            return payload

    def store(self, key, payload, max_bytes):
        payload = bytes(payload)
        with self._lock:
            if key in self._entries or len(payload) > max_bytes:
                return
            self._entries[key] = payload
            self._bytes += len(payload)
            self.stats["stores"] += 1
            while self._bytes > max_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= len(old)
                self.stats["evicted"] += 1

    def clear(self):
        with self._lock:
            self._entries.clear()
            self._bytes = 0


_memory = MemoryCache()
memory_stats = _memory.stats


def _count(name, n=1, counters=None):
    with _stats_lock:
        (stats if counters is None else counters)[name] += n


def cache_dir():
    """The cache directory this process uses now, or None when the cache is off."""
    env = os.environ.get("GRAPHC_CACHE_DIR")
    if env is not None:
        return None if env.strip() in ("", "off") else os.path.abspath(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "graphc")


def max_bytes():
    try:
        return int(float(os.environ.get("GRAPHC_CACHE_MAX_MB", DEFAULT_MAX_MB)) * 2**20)
    except ValueError:
        return DEFAULT_MAX_MB * 2**20


def make_key(llvm_ir, target, toolchain):
    """Hex SHA-256 of everything that determines the machine code.

    target: {"triple", "cpu", "features"} as the target machine was created;
    toolchain: a string naming the LLVM/llvmlite versions and optimization settings."""
    h = hashlib.sha256()
    for part in (f"graphc-object-cache {FORMAT_VERSION}", toolchain, target.get("triple", ""),
                 target.get("cpu", ""), target.get("features", "")):
        h.update(part.encode())
        h.update(b"\0")
    h.update(_MODULE_ID.sub("", llvm_ir, count=1).encode())
    return h.hexdigest()


def pack_objects(objects):
    """One payload holding several object files: BUNDLE_MAGIC, their count and lengths
    (u64 little-endian) and their bytes. An object file itself never starts with the
    magic (ELF, Mach-O and COFF headers do not)."""
    head = struct.pack(f"<8sQ{len(objects)}Q", BUNDLE_MAGIC, len(objects),
                       *(len(o) for o in objects))
    return head + b"".join(bytes(o) for o in objects)


def unpack_objects(payload):
    """The object files of a payload: [payload] for a single one."""
    payload = bytes(payload)
    if not payload.startswith(BUNDLE_MAGIC):
        return [payload]
    at = len(BUNDLE_MAGIC)
    (count,) = struct.unpack_from("<Q", payload, at)
    lengths = struct.unpack_from(f"<{count}Q", payload, at + 8)
    at += 8 + 8 * count
    if at + sum(lengths) != len(payload):
        raise ValueError("a bundle of object files whose lengths do not add up")
    objects = []
    for n in lengths:
        objects.append(payload[at:at + n])
        at += n
    return objects


def memory_load(key):
    """The object bytes this process compiled under `key`, or None."""
    return _memory.load(key)


def memory_store(key, payload):
    _memory.store(key, payload, MEMORY_MAX_BYTES)


# Per directory, in this process: [bytes of its entries at the last scan (evict) plus those
# this process stored since, stores since]. A store scans the directory only when that
# estimate passes the bound, or after RESCAN_STORES stores (other processes' entries count
# too): a scan after every store made a process's n-th compile stat n entries, quadratic
# over a long process (25 s of the 253 s a 500-test file spent, its cache ~2.8k entries).
_directory_bytes = {}
RESCAN_STORES = 64


def default_cache():
    """The ObjectCache configured by the environment, or None when disabled."""
    directory = cache_dir()
    return ObjectCache(directory, max_bytes()) if directory else None


class ObjectCache:
    def __init__(self, directory, max_bytes=DEFAULT_MAX_MB * 2**20, stats=None):
        """stats: the counters to add to (default: this module's `stats`; the library
        cache keeps its own, runtime/library_cache.py)."""
        self.directory = directory
        self.max_bytes = max_bytes
        self.stats = stats

    def path(self, key):
        return os.path.join(self.directory, key + _SUFFIX)

    # ------------------------------------------------------------------ read
    def load(self, key):
        """The object bytes stored under `key`, or None (missing or failing verification:
        a bad entry is deleted so the recompiled code replaces it)."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except OSError:
            _count("misses", counters=self.stats)
            return None
        payload = _unpack(blob, key)
        if payload is None:
            _count("rejected", counters=self.stats)
            _count("misses", counters=self.stats)
            _remove(path)
            return None
        try:
            os.utime(path)  # least recently used eviction goes by mtime
        except OSError:
            pass
        _count("hits", counters=self.stats)
        return payload

    # ----------------------------------------------------------------- write
    def store(self, key, payload):
        """Writes the entry atomically; returns True when it was stored."""
        tmp = None
        blob = _pack(payload, key)
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=self.directory)
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, self.path(key))
            tmp = None
        except OSError:
            _count("errors", counters=self.stats)
            return False
        finally:
            if tmp is not None:
                _remove(tmp)
        _count("stores", counters=self.stats)
        known = _directory_bytes.get(self.directory)
        if (known is None or known[1] >= RESCAN_STORES or
                known[0] + len(blob) > self.max_bytes):
            self.evict()
        else:
            known[0] += len(blob)
            known[1] += 1
        return True

    def evict(self):
        """Deletes the least recently used entries beyond max_bytes, and stale temp files;
        notes the bytes left (_directory_bytes)."""
        _directory_bytes.pop(self.directory, None)
        entries, total, now = [], 0, time.time()
        try:
            with os.scandir(self.directory) as it:
                for e in it:
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    if e.name.startswith(_TMP_PREFIX):
                        if now - st.st_mtime > _STALE_TMP_SECONDS:
                            _remove(e.path)
                    elif e.name.endswith(_SUFFIX):
                        entries.append((st.st_mtime, st.st_size, e.path))
                        total += st.st_size
        except OSError:
            return
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            if _remove(path):
                _count("evicted", counters=self.stats)
            total -= size
        _directory_bytes[self.directory] = [total, 0]

    def entries(self):
        """Names of the entry files now in the directory (tests and tools)."""
        try:
            return sorted(n for n in os.listdir(self.directory) if n.endswith(_SUFFIX))
        except OSError:
            return []


def _pack(payload, key):
    return _HEADER.pack(MAGIC, bytes.fromhex(key)[:32], len(payload),
                        hashlib.sha256(payload).digest()) + payload


def _unpack(blob, key):
    if len(blob) < _HEADER.size:
        return None
    magic, key_digest, length, checksum = _HEADER.unpack_from(blob)
    payload = blob[_HEADER.size:]
    if (magic != MAGIC or key_digest != bytes.fromhex(key)[:32] or length != len(payload)
            or hashlib.sha256(payload).digest() != checksum):
        return None
    return payload


def _remove(path):
    try:
        os.remove(path)
        return True
    except OSError:
        return False
