"""The spec cache: a second compile of the same lowered module skips the Python compiler."""
import numpy as np

import graphc as gc
from graphc.compiler import spec_cache


def _run_once(scale):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 3])
        y = gc.reduce_sum(gc.nn.softmax(x * scale), axis=1) + gc.exp(x[:, 0])
        with gc.Session() as sess:
            return sess.run(y, {x: np.arange(12, dtype=np.float32).reshape(4, 3) / 10})


def test_second_compile_of_the_same_module_is_a_hit(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    before = dict(spec_cache.stats)
    first = _run_once(2.0)
    assert spec_cache.stats["stores"] == before["stores"] + 1
    second = _run_once(2.0)  # a new graph and Session: only the disk cache can help
    assert spec_cache.stats["hits"] == before["hits"] + 1
    np.testing.assert_array_equal(first, second)
    third = _run_once(3.0)  # another constant: another module, another entry
    assert spec_cache.stats["hits"] == before["hits"] + 1
    assert not np.array_equal(first, third)


def test_a_corrupt_entry_is_recompiled(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    expected = _run_once(2.0)
    for entry in tmp_path.iterdir():
        entry.write_bytes(entry.read_bytes()[:40])  # truncate every entry
    np.testing.assert_array_equal(_run_once(2.0), expected)


def test_off_disables_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    before = dict(spec_cache.stats)
    _run_once(2.0)
    _run_once(2.0)
    assert spec_cache.stats["hits"] == before["hits"]


def test_codegen_settings_are_part_of_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path))
    _run_once(2.0)
    before = dict(spec_cache.stats)
    monkeypatch.setenv("GRAPHC_PARALLEL_MIN_WORK", "0")  # codegen decides loop splitting
    _run_once(2.0)
    assert spec_cache.stats["hits"] == before["hits"]
