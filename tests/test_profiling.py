"""What graphc says about its own work: the progress line of slow compiles, the "graphc"
logger's verbosity, and GRAPHC_PROFILE=1's summary at exit. Each case runs a small
training script in a fresh process (the summary prints at exit; the logger's level is
read at import)."""
import os
import re
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import graphc.profiling
    graphc.profiling.PROGRESS_AFTER = float(sys.argv[1])
    import graphc as tf
    x = tf.placeholder(tf.float32, [None, 8], name="x")
    h = tf.layers.dense(x, 16, activation=tf.nn.relu)
    loss = tf.reduce_mean(tf.square(tf.layers.dense(h, 1)), name="loss")
    train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(5):
            sess.run([train, loss], {x: np.ones((4, 8), np.float32)})
    print("done")
""")


def _run(progress_after=1000.0, **env):
    full = dict(os.environ, GRAPHC_CACHE_DIR="off", PYTHONPATH=ROOT, **env)
    for name in ("GRAPHC_PROFILE", "GRAPHC_VERBOSITY"):
        if name not in env:
            full.pop(name, None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(progress_after)], env=full,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"  # nothing of graphc's goes to stdout
    return done.stderr


def test_quick_compiles_say_nothing():
    assert _run() == ""


def test_a_slow_compile_prints_a_progress_line_and_its_stages():
    err = _run(progress_after=0.0)
    assert "graphc: compiling the run of init (" in err
    # the training step: fetches named, kernels counted, every stage timed
    done = [line for line in err.splitlines() if "compiled the run of" in line
            and "loss:0" in line]
    assert len(done) == 1, err
    # cache: pruning and the spec cache's key and look-up, before lowering
    assert re.search(r"in \d+\.\d s \(\d+ ops, \d+ kernels: cache [\d.]+ s, lower [\d.]+ s, "
                     r"optimize [\d.]+ s, schedule [\d.]+ s, generate [\d.]+ s, jit [\d.]+ s\); "
                     r"peak memory \d+ MB \(\+\d+ MB in this compile\)$", done[0]), done[0]
    peak = int(re.search(r"peak memory (\d+) MB", done[0]).group(1))
    assert 10 < peak < 100_000  # the process's resident peak in MB, not in KiB or bytes


def test_verbosity_warning_silences_progress_and_debug_shows_every_compile():
    assert _run(progress_after=0.0, GRAPHC_VERBOSITY="warning") == ""
    err = _run(GRAPHC_VERBOSITY="debug")
    assert err.count("graphc: compiled the run of") == 2, err  # init and the step
    assert "compiling" not in err  # no progress line: nothing was slow


def test_profile_summary_at_exit():
    err = _run(GRAPHC_PROFILE="1")
    summary = err[err.index("graphc profile (GRAPHC_PROFILE=1)"):]
    assert re.search(r"compiles: 2 \(0 answered by the spec cache\), [\d.]+ s; peak memory "
                     r"\d+ MB, raised by at most \d+ MB in one compile$", summary, re.M), summary
    for stage in ("lower", "optimize", "schedule", "generate", "jit"):
        assert re.search(rf"^    {stage} +\d+\.\d{{3}} s$", summary, re.M), stage
    assert "Session.run: 6 runs" in summary
    assert re.search(r"5 runs .* ms/run  GradientDescent, loss:0$", summary, re.M), summary
    # the top kernels by their share of all kernels' cycles (rounded to 0.1% each)
    shares = [float(m) for m in re.findall(r"^ +(\d+\.\d)%  kernel_", summary, re.M)]
    assert shares == sorted(shares, reverse=True) and 50 < sum(shares), summary
    assert sum(shares) <= 100.0 + 0.05 * len(shares), summary


def test_profile_kernels_tool_profiles_this_checkout_from_any_cwd(tmp_path):
    # a script's sys.path starts at tools/: without the checkout put first, the graphc
    # imported was whichever one is installed (another checkout's), and that was profiled.
    # Its machine code is this checkout's too: the compile cache, shared by the machine's
    # checkouts, served lstm_train's profile code another pipeline had built (gate loops
    # 6x slower), so the tool neither loads from nor stores to it
    cache = tmp_path / "cache"
    env = dict(os.environ, GRAPHC_CACHE_DIR=str(cache))
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "profile_kernels.py"),
                           "tiny_overhead", "--runs", "3"], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"graphc: {ROOT}\n" in done.stdout, done.stdout
    assert re.search(r"^tiny_overhead: [\d.]+ ms per run .*, \d+ kernels", done.stdout, re.M)
    assert "machine code: compiled by this checkout (compile cache off)" in done.stdout
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))


def test_each_call_of_a_reused_kernel_has_a_row_of_its_own(monkeypatch):
    # kernel_reuse gives an unrolled chain's steps one function: the counters are per
    # call in the entry, so each step keeps its own row, none merged or left at zero,
    # and the rows add up to no more cycles than the runs took
    import ctypes

    import numpy as np

    import graphc as tf
    import runtime.executable as rx
    from runtime import jit
    from graphc import profiling
    monkeypatch.setenv("GRAPHC_PROFILE", "1")
    monkeypatch.setenv("GRAPHC_CACHE_DIR", "off")
    quiet = profiling._Profile()
    quiet._registered = True  # no summary at the exit of the test process
    monkeypatch.setattr(profiling, "PROFILE", quiet)
    created, init = [], rx.Executable.__init__

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        created.append(self)
    monkeypatch.setattr(rx.Executable, "__init__", recording_init)
    steps = 5
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [8, 16])
        w = tf.constant(np.eye(16, dtype=np.float32))
        h = x
        for _ in range(steps):
            h = tf.tanh(tf.matmul(h, w))
        with tf.Session() as sess:
            feed = {x: np.ones((8, 16), np.float32)}
            sess.run(h, feed)
            exe = created[-1]
            counter = jit.CompiledModule(  # kept: the function lives as long as it does
                "declare i64 @llvm.readcyclecounter()\ndefine i64 @tsc() {\n"
                "  %t = call i64 @llvm.readcyclecounter()\n  ret i64 %t\n}\n")
            clock = ctypes.CFUNCTYPE(ctypes.c_int64)(counter.address("tsc"))
            before, start = [c for _, c in exe.kernel_profile()], clock()
            for _ in range(3):
                sess.run(h, feed)
            spent = clock() - start
    rows = exe.kernel_profile()
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)) == len(exe.spec["profile_kernels"])
    tanh_rows = [k for k, name in enumerate(names) if "Tanh" in name]
    assert len(tanh_rows) == steps, names
    ran = [c - b for (_, c), b in zip(rows, before)]
    assert all(ran[k] > 0 for k in tanh_rows), ran
    assert 0 < sum(ran) <= spent
