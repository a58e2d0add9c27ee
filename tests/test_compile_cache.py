"""The on-disk compile cache (runtime/compile_cache.py) and its use by runtime/jit.py."""
import ctypes
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from runtime import compile_cache, jit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(d))
    return d


def add_ir(constant):
    """A module whose function adds `constant` (so each test compiles distinct IR)."""
    return textwrap.dedent(f"""
        define i64 @add_k(i64 %x) {{
          %y = add i64 %x, {constant}
          ret i64 %y
        }}
    """)


def call_add(compiled):
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compiled.address("add_k"))(5)


def entries(d):
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def delta(before):
    return {k: compile_cache.stats[k] - before[k] for k in before}


def test_second_compile_hits_and_skips_llvm(cache_dir):
    first = jit.CompiledModule(add_ir(11))
    assert not first.cache_hit and call_add(first) == 16
    assert len(entries(cache_dir)) == 1
    before = dict(compile_cache.stats)
    second = jit.CompiledModule(add_ir(11))
    assert second.cache_hit and call_add(second) == 16
    assert delta(before)["hits"] == 1 and delta(before)["stores"] == 0
    assert len(entries(cache_dir)) == 1
    # the optimized IR is still available on a hit (made on demand)
    assert "add_k" in second.optimized_ir()


_CHILD = """
import json, numpy as np, graphc as gc
from runtime import compile_cache
x = gc.placeholder(gc.float32, [None, 3])
w = gc.Variable(np.arange(6, dtype=np.float32).reshape(3, 2))
y = gc.nn.relu(gc.matmul(x, w) - 4.0) * 0.5
with gc.Session() as sess:
    sess.run(gc.global_variables_initializer())
    out = sess.run(y, {x: np.ones((5, 3), np.float32)})
print(json.dumps({"stats": compile_cache.stats, "out": out.tolist()}))
"""


def run_child(cache_dir):
    env = dict(os.environ, GRAPHC_CACHE_DIR=str(cache_dir), GRAPHC_BACKEND="compiled",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_second_process_gets_hits(cache_dir):
    cold = run_child(cache_dir)
    assert cold["stats"]["hits"] == 0 and cold["stats"]["stores"] >= 1
    files = entries(cache_dir)
    warm = run_child(cache_dir)
    assert warm["stats"]["misses"] == 0 and warm["stats"]["stores"] == 0
    assert warm["stats"]["hits"] == cold["stats"]["stores"]
    assert entries(cache_dir) == files  # nothing new written
    assert warm["out"] == cold["out"] == [[1.0, 2.5]] * 5


@pytest.mark.parametrize("damage", ["truncate", "flip_payload", "flip_header", "garbage",
                                    "empty"])
def test_corrupt_entry_is_rebuilt(cache_dir, damage):
    jit.CompiledModule(add_ir(23))
    (name,) = entries(cache_dir)
    path = cache_dir / name
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[:len(blob) // 2]
    elif damage == "flip_payload":
        blob[-10] ^= 0xFF
    elif damage == "flip_header":
        blob[3] ^= 0xFF
    elif damage == "garbage":
        blob = bytearray(os.urandom(len(blob)))
    else:
        blob = bytearray()
    path.write_bytes(bytes(blob))
    before = dict(compile_cache.stats)
    rebuilt = jit.CompiledModule(add_ir(23))
    assert not rebuilt.cache_hit and call_add(rebuilt) == 28
    assert delta(before)["rejected"] == 1 and delta(before)["stores"] == 1
    assert jit.CompiledModule(add_ir(23)).cache_hit  # the rebuilt entry is good


def test_entry_under_another_key_is_rejected(cache_dir):
    jit.CompiledModule(add_ir(31))
    (name,) = entries(cache_dir)
    cache = compile_cache.default_cache()
    other_key = "0" * 64
    os.replace(cache_dir / name, cache.path(other_key))  # a valid entry, wrong name
    assert cache.load(other_key) is None
    assert entries(cache_dir) == []  # it was deleted
    assert call_add(jit.CompiledModule(add_ir(31))) == 36


@pytest.mark.parametrize("value", ["", "off", " off "])
def test_disabled_by_env(tmp_path, monkeypatch, value):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.default_cache() is None
    before = dict(compile_cache.stats)
    for _ in range(2):
        compiled = jit.CompiledModule(add_ir(41))
        assert not compiled.cache_hit and call_add(compiled) == 46
    assert delta(before) == {k: 0 for k in before}
    assert list(tmp_path.iterdir()) == []


def test_default_location(tmp_path, monkeypatch):
    monkeypatch.delenv("GRAPHC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.cache_dir() == os.path.join(str(tmp_path), "graphc")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert compile_cache.cache_dir() == os.path.join(str(tmp_path), ".cache", "graphc")


@pytest.mark.parametrize("fail_at", ["write", "replace"])
def test_failed_write_leaves_no_partial_file(cache_dir, monkeypatch, fail_at):
    cache = compile_cache.ObjectCache(str(cache_dir))
    key = compile_cache.make_key("x", {}, "t")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    if fail_at == "write":  # some bytes reach the file, then the disk fills
        monkeypatch.setattr(os, "fdopen", _failing_fdopen(100))
    else:
        monkeypatch.setattr(os, "replace", disk_full)
    assert cache.store(key, b"\x7fELF" + b"x" * 1000) is False
    assert entries(cache_dir) == []  # neither the entry nor the temporary file
    monkeypatch.undo()
    assert cache.load(key) is None


def _failing_fdopen(limit):
    real_fdopen = os.fdopen

    class Failing:
        def __init__(self, fd, mode):
            self.f = real_fdopen(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[:limit])
            raise OSError(28, "No space left on device")

    return Failing


def test_unwritable_directory_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(blocker / "cache"))
    compiled = jit.CompiledModule(add_ir(51))
    assert call_add(compiled) == 56 and not compiled.cache_hit


def test_keys_differ_with_every_input():
    target = {"triple": "x86_64-unknown-linux-gnu", "cpu": "skylake", "features": "+avx2,+fma"}
    base = compile_cache.make_key("ir", target, "llvm 22")
    assert base == compile_cache.make_key("ir", dict(target), "llvm 22")
    variants = [compile_cache.make_key("ir ", target, "llvm 22"),
                compile_cache.make_key("ir", dict(target, features="+avx2,-fma"), "llvm 22"),
                compile_cache.make_key("ir", dict(target, cpu="znver3"), "llvm 22"),
                compile_cache.make_key("ir", dict(target, triple="aarch64-linux-gnu"),
                                       "llvm 22"),
                compile_cache.make_key("ir", target, "llvm 23")]
    assert len({base, *variants}) == 6


def test_jit_keys_on_features(cache_dir):
    host = jit.host_target()
    fewer = ",".join(f for f in host["features"].split(",") if f != "+avx2") + ",-avx2"
    first = jit.CompiledModule(add_ir(61))
    other = jit.CompiledModule(add_ir(61), dict(host, features=fewer))
    assert not other.cache_hit and call_add(other) == call_add(first) == 66
    assert len(entries(cache_dir)) == 2
    assert "llvm" in jit.toolchain_id() and "llvmlite" in jit.toolchain_id()


def test_lru_eviction(tmp_path):
    cache = compile_cache.ObjectCache(str(tmp_path), max_bytes=3 * 1100)
    keys = [compile_cache.make_key(str(i), {}, "t") for i in range(4)]
    for age, key in enumerate(keys[:3]):
        cache.store(key, bytes(1000))
        os.utime(cache.path(key), (1000 + age, 1000 + age))
    assert cache.load(keys[0]) is not None  # a hit makes key 0 the most recently used
    cache.store(keys[3], bytes(1000))
    assert not os.path.exists(cache.path(keys[1]))  # the least recently used went
    assert all(os.path.exists(cache.path(k)) for k in (keys[0], keys[2], keys[3]))


def test_stores_under_the_bound_do_not_read_the_directory_each_time(tmp_path, monkeypatch):
    scans = []
    real_scandir = os.scandir
    monkeypatch.setattr(compile_cache.os, "scandir",
                        lambda path: scans.append(path) or real_scandir(path))
    cache = compile_cache.ObjectCache(str(tmp_path), max_bytes=2**30)
    stores = 3 * compile_cache.RESCAN_STORES
    for i in range(stores):
        assert cache.store(compile_cache.make_key(str(i), {}, "t"), bytes(100))
    # the first store reads the directory, then one after each RESCAN_STORES more
    assert len(scans) == 1 + (stores - 1) // (compile_cache.RESCAN_STORES + 1)
    assert len(cache.entries()) == stores


def test_entries_another_process_wrote_are_evicted_within_the_rescan(tmp_path):
    cache = compile_cache.ObjectCache(str(tmp_path), max_bytes=20 * 1100)
    cache.store(compile_cache.make_key("first", {}, "t"), bytes(1000))
    other = compile_cache.ObjectCache(str(tmp_path), max_bytes=2**30)
    compile_cache._directory_bytes.pop(str(tmp_path))  # as if in another process
    for i in range(30):  # past the bound, unseen by the first cache's estimate
        other.store(compile_cache.make_key(f"other{i}", {}, "t"), bytes(1000))
    compile_cache._directory_bytes[str(tmp_path)] = [1100, 0]
    for i in range(compile_cache.RESCAN_STORES + 1):
        cache.store(compile_cache.make_key(f"mine{i}", {}, "t"), bytes(10))
    assert sum(os.path.getsize(os.path.join(tmp_path, n)) for n in cache.entries()) <= 20 * 1100


def test_kernels_with_loops_are_not_inlined(cache_dir):
    ir = textwrap.dedent("""
        define void @kernel_loop(ptr noalias %p, i64 %n) {
        entry:
          br label %loop
        loop:
          %i = phi i64 [0, %entry], [%i1, %loop]
          %a = getelementptr float, ptr %p, i64 %i
          %v = load float, ptr %a
          %w = fmul float %v, 2.0
          store float %w, ptr %a
          %i1 = add i64 %i, 1
          %c = icmp slt i64 %i1, %n
          br i1 %c, label %loop, label %done
        done:
          ret void
        }
        define float @helper(float %x) {
          %y = fadd float %x, 1.0
          ret float %y
        }
        define i32 @"graphc_main"(ptr %p, i64 %n) {
          call void @kernel_loop(ptr %p, i64 %n)
          ret i32 0
        }
    """)
    assert jit._branchy_functions(ir) == ["kernel_loop"]
    compiled = jit.CompiledModule(ir)
    optimized = compiled.optimized_ir()
    main = optimized[optimized.index("@graphc_main("):]
    assert "call void @kernel_loop" in main[:main.index("\n}")]
    data = np.arange(7, dtype=np.float32)
    fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64)(
        compiled.address("graphc_main"))
    assert fn(data.ctypes.data, 7) == 0
    assert data.tolist() == [2.0 * i for i in range(7)]


def test_module_name_is_not_part_of_the_key():
    # lower.py numbers every module; the number changes no code, so it must not make a
    # deep model's identical initializer modules compile once each
    target = {"triple": "x86_64-unknown-linux-gnu", "cpu": "skylake", "features": ""}
    body = add_ir(3)
    a = compile_cache.make_key('; ModuleID = "module_0001_W0_Assign"\n' + body, target, "t")
    b = compile_cache.make_key('; ModuleID = "module_0007_W3_Assign"\n' + body, target, "t")
    c = compile_cache.make_key('; ModuleID = "module_0001_W0_Assign"\n' + add_ir(4), target,
                               "t")
    assert a == b == compile_cache.make_key(body, target, "t") and c != a


COUNTER_IR = textwrap.dedent("""
    @count = global i64 0
    define i64 @add_k(i64 %x) {
      %c = load i64, ptr @count
      %c1 = add i64 %c, %x
      store i64 %c1, ptr @count
      ret i64 %c1
    }
""")


def test_repeat_in_process_skips_llvm_with_disk_cache_off(monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    before = dict(compile_cache.memory_stats)
    first = jit.CompiledModule('; ModuleID = "module_1"\n' + COUNTER_IR)
    second = jit.CompiledModule('; ModuleID = "module_2"\n' + COUNTER_IR)
    assert not first.memory_hit and second.memory_hit and not second.cache_hit
    assert compile_cache.memory_stats["stores"] - before["stores"] == 1
    # each module keeps its own globals: the code is shared, its state is not
    assert call_add(first) == 5 and call_add(first) == 10
    assert call_add(second) == 5


def test_memory_copy_renews_a_lost_disk_entry(cache_dir):
    jit.CompiledModule(add_ir(71))
    (name,) = entries(cache_dir)
    (cache_dir / name).unlink()
    again = jit.CompiledModule(add_ir(71))
    assert again.memory_hit and call_add(again) == 76
    assert entries(cache_dir) == [name]


def test_memory_copy_is_bounded(monkeypatch):
    monkeypatch.setattr(compile_cache, "MEMORY_MAX_BYTES", 2500)
    keys = [compile_cache.make_key(f"bounded {i}", {}, "t") for i in range(3)]
    for key in keys:
        compile_cache.memory_store(key, bytes(1000))
    assert compile_cache.memory_load(keys[0]) is None  # the least recently used went
    assert compile_cache.memory_load(keys[2]) == bytes(1000)
