#!/usr/bin/env python3
"""Cold and warm compile time of the first Session.run, each in a fresh process.

For each model (mlp_train: the W3 benchmark step, 784-512-512-10 relu, batch 128, sparse
xent, one SGD step; flagship: examples/mnist_mlp.py's model, one Adam step on a batch of
64 digits) a child process builds the graph, runs the initializer, then times the first
`sess.run(train_op)` (lowering, passes, codegen, LLVM, one step) and a second run.
"cold": a new empty on-disk cache (runtime/compile_cache.py) per repeat;
"warm": the same process again over the cache the cold run filled (LLVM is skipped).
Prints the median over --repeats of each and the cache hits the warm child saw.

    python tools/compile_time.py [--models mlp_train,flagship] [--repeats 3]

--scale: the cold first run (compile + one step, on-disk caches off) of the scale
workloads of tools/workloads.py (peers_bench.py's): the MLP training step 256 wide at
each of --depths, the 32-step unrolled LSTM and the small CIFAR ResNet, each in a fresh
process, with the seconds spent in each compiler stage (key: the spec cache's key made
from the graph, on a warm run the only compiler stage before the spec is loaded; lower,
each pass, codegen of the LLVM IR, LLVM's optimization and machine code; "rest": the step
itself, the Session's pruning and caches) and the growth exponent of the first run, and
of each stage's CPU time, over depth (least squares of log time on log depth). --profile
WORKLOAD prints cProfile's top functions for one; --llvm-functions WORKLOAD splits the LLVM
time of its largest module by function family (kernel_N_loop_N, graphc_conv_direct_...):
each family alone in a copy of the module, the other functions declared, optimized and
emitted as the compile does, in CPU seconds, and the sums over the library functions (a
machine compiles them once: runtime/library_cache.py) and over the graph's own; then the
whole module's and the graph's part's seconds compiled as one (what a family's row
overstates), and the groups of functions that differ only in their integer literals.
--llvm-ir WORKLOAD FILE writes that module's IR; --compare-llvm A B ... times the graph
parts of such files in turn (--repeats times): a codegen change's LLVM time, before and
after, on the same IR of the same minutes:

    python tools/compile_time.py --llvm-ir resnet_train /tmp/after.ll   # (and in a
    #   checkout without the change: ... /tmp/before.ll)
    python tools/compile_time.py --compare-llvm /tmp/before.ll /tmp/after.ll --repeats 5

    python tools/compile_time.py --scale [--depths 8,16,32,64,128,256] [--extra lstm_train,...]

Each scale row also gives the process's peak memory (its maximum resident set, MB) and how
much the first run raised it (the compile's peak), and --warm runs each workload a second
time in a fresh process over the on-disk cache its cold run filled: the warm first run, its
share of the cold one, both runs' peak memory, and the warm first run less the next run
(the step alone: the part no cache removes) as a share of the cold one. --peers PYTHON
(a Python with TensorFlow and JAX, e.g. /tmp/peers-venv/bin/python) then times the same
workloads' first call in TF1, TF1+XLA and JAX with peers_bench.py, one process each, in
the same sitting, for the table of issue 11:

    python tools/compile_time.py --scale --warm --depths 8,64,256 --extra lstm_train,resnet_train \
        --peers /tmp/peers-venv/bin/python

--library adds a row "WORKLOAD lib" per workload: the first run in a fresh process over a
cache that holds only the library functions (runtime/library_cache.py: the conv
microkernels) its cold run compiled, the graph's own compiled modules and specs deleted, as
on a machine that compiled some conv graph before; the cold run then starts from an empty
on-disk cache (which it fills) instead of none. The CPU row says how many library groups
LLVM compiled and how many came from the cache.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS_MS = {"cold": 300.0, "warm": 30.0}  # issue 3's targets for W3


def build_mlp_train():
    import numpy as np
    import graphc as gc
    rng = np.random.default_rng(0)
    f32 = np.float32

    def he(i, o):
        return (rng.standard_normal((i, o), dtype=f32) * np.sqrt(2.0 / i)).astype(f32)

    x = gc.placeholder(gc.float32, [128, 784], name="x")
    y = gc.placeholder(gc.int32, [128], name="y")
    w1, b1 = gc.Variable(he(784, 512), name="W1"), gc.Variable(np.zeros(512, f32), name="b1")
    w2, b2 = gc.Variable(he(512, 512), name="W2"), gc.Variable(np.zeros(512, f32), name="b2")
    w3, b3 = gc.Variable(he(512, 10), name="W3"), gc.Variable(np.zeros(10, f32), name="b3")
    h = gc.nn.relu(gc.matmul(x, w1) + b1)
    h = gc.nn.relu(gc.matmul(h, w2) + b2)
    logits = gc.matmul(h, w3) + b3
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                         logits=logits))
    train_op = gc.train.GradientDescentOptimizer(0.01).minimize(loss)
    feed = {x: rng.standard_normal((128, 784), dtype=f32),
            y: rng.integers(0, 10, 128).astype(np.int32)}
    return train_op, feed


def build_flagship():
    import numpy as np
    import graphc as gc
    sys.path.insert(0, os.path.join(REPO, "examples"))
    import mnist_mlp
    gc.set_random_seed(0)  # as the example does; unseeded dropout differs per process
    x_train, y_train, _, _ = mnist_mlp.load_split()
    images, labels, training, loss, train_op = mnist_mlp.build_model(x_train.shape[1])[:5]
    feed = {images: x_train[:64], labels: y_train[:64], training: np.bool_(True)}
    return [train_op, loss], feed


MODELS = {"mlp_train": build_mlp_train, "flagship": build_flagship}


def child(model):
    """Runs in the fresh process: prints one JSON line of timings."""
    import time
    import warnings
    import graphc as gc
    from runtime import compile_cache
    fetches, feed = MODELS[model]()
    sess = gc.Session()
    sess.run(gc.global_variables_initializer())
    before = dict(compile_cache.stats)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        sess.run(fetches, feed)
        first = time.perf_counter() - t0
    fallback = [str(w.message).splitlines()[0] for w in caught
                if "could not compile" in str(w.message)]
    t0 = time.perf_counter()
    sess.run(fetches, feed)
    second = time.perf_counter() - t0
    hits = compile_cache.stats["hits"] - before["hits"]
    misses = compile_cache.stats["misses"] - before["misses"]
    print(json.dumps({"first_ms": first * 1e3, "second_ms": second * 1e3, "hits": hits,
                      "llvm_modules": hits + misses, "fallback": fallback}))


SCALE_DEPTHS = "8,16,32,64,128,256"
SCALE_EXTRA = "lstm_train,resnet_train,resnet50_train"


def _time_stages(times, cpu_times):
    """Wraps the compiler's stages so that each adds its seconds to times[stage] and its
    process CPU seconds to cpu_times[stage]: on a machine shared with other jobs the wall
    time waits for a core, the CPU time does not."""
    import time
    from graphc.compiler import driver, pipeline, spec_cache
    from graphc.compiler.backends import cpu as cpu_backend
    from graphc.compiler.schedule import fusion, memory_planning
    from runtime import jit

    def timed(stage, fn):
        def wrapper(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                times[stage] = times.get(stage, 0.0) + time.perf_counter() - t0
                cpu_times[stage] = cpu_times.get(stage, 0.0) + time.process_time() - c0
        return wrapper
    spec_cache.signature_key = timed("key", spec_cache.signature_key)
    driver.lower = timed("lower", driver.lower)
    pipeline.PASSES[:] = [(name, timed(name, run)) for name, run in pipeline.PASSES]
    fusion.run = timed("fusion", fusion.run)
    memory_planning.run = timed("memory_planning", memory_planning.run)
    cpu_backend.generate = timed("codegen", cpu_backend.generate)
    jit.CompiledModule.__init__ = timed("llvm", jit.CompiledModule.__init__)


def scale_child(workload, profile=False):
    """Runs in the fresh process: one JSON line, the first run's seconds per stage."""
    import time
    import graphc as tf
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import workloads
    t0, c0 = time.perf_counter(), time.process_time()
    sess, fetch, feed = workloads.build(workload, tf)
    build, build_cpu = time.perf_counter() - t0, time.process_time() - c0
    times, cpu_times = {}, {}
    _time_stages(times, cpu_times)
    if profile:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.runcall(sess.run, fetch, feed)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        return
    rss_before = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    sess.run(fetch, feed)
    first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _peak_rss_mb()
    # the next run: the step alone (code, arena and feeds bound), the part of the first
    # run a compile cache cannot remove
    t0, c0 = time.perf_counter(), time.process_time()
    sess.run(fetch, feed)
    step, step_cpu = time.perf_counter() - t0, time.process_time() - c0
    ops = len(sess.graph.get_operations())
    from runtime import jit
    jit._close_workers()  # a child's CPU time is counted once it has been waited for
    from runtime import library_cache
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"build": build, "first": first, "ops": ops, "stages": times,
                      "workers_cpu": workers.ru_utime + workers.ru_stime,
                      "build_cpu": build_cpu, "first_cpu": first_cpu,
                      "step": step, "step_cpu": step_cpu,
                      "stages_cpu": cpu_times, "peak_mb": peak,
                      "first_peak_rise_mb": max(0.0, peak - rss_before),
                      "library": library_cache.stats}))


def largest_module(workload):
    """The IR (thread-team runtime linked, as LLVM gets it) of the largest LLVM module the
    first run of `workload` compiles."""
    import graphc as tf
    from runtime import jit
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import workloads
    modules = []
    compile_module = jit.CompiledModule.__init__

    def keep(self, llvm_ir, *args, **kwargs):
        modules.append(jit.link_parallel_runtime(llvm_ir))
        return compile_module(self, llvm_ir, *args, **kwargs)
    jit.CompiledModule.__init__ = keep
    sess, fetch, feed = workloads.build(workload, tf)
    sess.run(fetch, feed)
    jit.CompiledModule.__init__ = compile_module
    return max(modules, key=len)


def llvm_functions_child(workload):
    """Runs in the fresh process: the first run of `workload`, keeping the IR of each LLVM
    module it compiles, then the LLVM CPU seconds of each function family of the largest."""
    text = largest_module(workload)
    functions = _defined_functions(text)
    families = {}
    for k, (_, _, name, _) in enumerate(functions):
        families.setdefault(_family(name), []).append(k)
    base = _llvm_seconds(_with_only(text, functions, ()))
    rows = []
    for family, members in families.items():
        opt, emit = _llvm_seconds(_with_only(text, functions, set(members)))
        rows.append((opt + emit - sum(base), opt - base[0], emit - base[1], len(members),
                     family))
    rows.sort(reverse=True)
    from runtime import library_cache
    print(f"{workload}: its largest LLVM module ({len(text) / 1e6:.1f} MB of IR, "
          f"{len(functions)} functions) by function family, each family alone (CPU-s); "
          "lib: library functions (runtime/library_cache.py: compiled once per machine)")
    print(f"{'total':>7s} {'optimize':>9s} {'emit':>6s} {'count':>6s}  family")
    for total, opt, emit, count, family in rows:
        mark = "  lib" if library_cache.is_library(family) else ""
        print(f"{total:7.3f} {opt:9.3f} {emit:6.3f} {count:6d}  {family}{mark}")
    print(f"{sum(r[0] for r in rows):7.3f} {sum(r[1] for r in rows):9.3f} "
          f"{sum(r[2] for r in rows):6.3f} {len(functions):6d}  (sum)")
    library = [r for r in rows if library_cache.is_library(r[4])]
    print(f"{sum(r[0] for r in library):7.3f} {sum(r[1] for r in library):9.3f} "
          f"{sum(r[2] for r in library):6.3f} {sum(r[3] for r in library):6d}  "
          "(library functions)")
    print(f"{sum(r[0] for r in rows if r not in library):7.3f} "
          f"{sum(r[1] for r in rows if r not in library):9.3f} "
          f"{sum(r[2] for r in rows if r not in library):6.3f} "
          f"{len(functions) - sum(r[3] for r in library):6d}  (the graph's own)")
    _print_in_context(text)
    _print_alike_but_literals(text, functions)


def _print_in_context(text):
    """The module's LLVM CPU seconds whole, and of the graph's part alone as runtime/jit.py
    compiles it: a family alone in a module carries costs (the module's, its callers'
    declarations) that the whole module pays once, so the families' sum above exceeds
    the whole, and a family's row overstates what removing it would save."""
    from runtime import library_cache
    whole = _llvm_seconds(text)
    separated = library_cache.separate(text)
    print(f"{sum(whole):7.3f} {whole[0]:9.3f} {whole[1]:6.3f} {'':6s}  "
          "(the whole module, compiled as one)")
    if separated is not None:
        graph = _llvm_seconds(separated[0])
        print(f"{sum(graph):7.3f} {graph[0]:9.3f} {graph[1]:6.3f} {'':6s}  "
              "(the graph's part alone, library groups taken out as runtime/jit.py does)")


def _print_alike_but_literals(text, functions):
    """The defined functions whose text is the same once every integer literal (sizes,
    strides, trip counts) and the numbers in names are blanked: what one size-generic
    function (sizes as arguments) could stand for. (A ResNet's stages repeat their batch
    norms at other sizes.) Fewer functions is not less LLVM work by itself: resnet_train's
    29 single-function loop kernels of 10 such groups, merged into 10 functions taking
    their differing i64 literals as arguments (19 of the module's 167 functions gone),
    took only 2.2% fewer instructions in LLVM (callgrind, issue 11): a generic form costs
    more than one sized copy, its trip counts and strides unknown."""
    import re
    groups = {}
    for start, end, name, _ in functions:
        shape = re.sub(r"\b-?\d+\b", "N", re.sub(r"\d+", "N", text[start:end]))
        groups.setdefault(shape, []).append(name)
    alike = sorted((g for g in groups.values() if len(g) > 1), key=len, reverse=True)
    print(f"\n{len(functions)} functions, {len(groups)} distinct once their integer "
          f"literals are blanked: {sum(len(g) - 1 for g in alike)} functions in "
          f"{len(alike)} groups differ only in sizes or constants")
    for names in alike:
        print(f"{len(names):6d}  {_family(names[0])}: {', '.join(names)}")


def llvm_ir_child(workload, path):
    """Runs in the fresh process: writes the largest module's IR of `workload` to `path`."""
    with open(path, "w") as f:
        f.write(largest_module(workload))


def compare_llvm(paths, repeats):
    """The LLVM CPU seconds of each module file's graph part (library groups taken out, as
    runtime/jit.py compiles it), the files taken in turn `repeats` times: two forms of one
    graph's code (--llvm-ir before and after a codegen change) side by side in the same
    minutes. On a loaded machine the spread is +-10%; min and median both printed."""
    from runtime import library_cache
    parts = []
    for path in paths:
        with open(path) as f:
            text = f.read()
        separated = library_cache.separate(text)
        parts.append(separated[0] if separated is not None else text)
    seconds = [[] for _ in paths]
    for _ in range(repeats):
        for part, s in zip(parts, seconds):
            s.append(sum(_llvm_seconds(part)))
    for path, part, s in zip(paths, parts, seconds):
        print(f"{path}: {len(_defined_functions(part))} functions, "
              f"{len(part) / 1e6:.2f} MB: min {min(s):.3f} median "
              f"{statistics.median(s):.3f} CPU-s of LLVM (" +
              " ".join(f"{x:.3f}" for x in s) + ")", flush=True)


_DEFINE = r'^define [^\n]*@("(?:[^"\\]|\\.)*"|[-\w$.]+)\([^\n]*\n?\{\n'


def _defined_functions(text):
    """(start, end, name, header) of each function definition of the module's text."""
    import re
    out = []
    for m in re.finditer(_DEFINE, text, re.M):
        end = text.index("\n}\n", m.end()) + 3
        out.append((m.start(), end, m.group(1).strip('"'), m.group(0)))
    return out


def _family(name):
    import re
    return re.sub(r"\d+", "N", name)


def _with_only(text, functions, keep):
    """The module with the functions numbered in `keep` defined (made external, so that
    nothing removes them unused) and every other one declared."""
    import re
    parts, at = [], 0
    for k, (start, end, _, header) in enumerate(functions):
        parts.append(text[at:start])
        if k in keep:
            parts.append(text[start:end].replace("define internal ", "define ", 1))
        else:
            signature = header[len("define "):].rstrip().rstrip("{").strip()
            parts.append("declare " + re.sub(r"^(internal|private)\s+", "", signature) + "\n")
        at = end
    return "".join(parts) + text[at:]


def _llvm_seconds(text):
    """CPU seconds of optimizing and of emitting the module, as CompiledModule does."""
    import time
    import llvmlite.binding as llvm
    from runtime import jit
    jit.initialize()
    tm = jit.target_machine()
    t0 = time.process_time()
    module = jit._parse(text)
    module.triple, module.data_layout = tm.triple, str(tm.target_data)
    jit._optimize(module, tm)
    t1 = time.process_time()
    engine = llvm.create_mcjit_compiler(module, tm)
    engine.finalize_object()
    return t1 - t0, time.process_time() - t1


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def spawn_scale(workload, profile=False, cache_dir="off"):
    env = dict(os.environ, GRAPHC_CACHE_DIR=cache_dir, PYTHONPATH=REPO)
    args = [sys.executable, __file__, "--scale-child", workload] + \
        (["--profile", workload] if profile else [])
    proc = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{workload} failed:\n{proc.stderr[-3000:]}")
    if profile:
        return proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


STAGES = ["key", "lower", "prune", "constant_folding", "algebraic_simplify", "batch_gemms",
          "cse", "fusion", "memory_planning", "codegen", "llvm"]


def growth_exponent(depths, seconds):
    """The slope of log(seconds) over log(depth): t ~ depth^slope."""
    import numpy as np
    return float(np.polyfit(np.log(depths), np.log(seconds), 1)[0])


def print_stage_rows(label, r):
    """The wall and CPU rows of one first run: its stages, the rest, memory or workers."""
    for clock, suffix in (("wall", ""), ("cpu", "_cpu")):
        st = r["stages" + suffix]
        rest = r["first" + suffix] - sum(st.get(s, 0.0) for s in STAGES)
        memory = f" {r['peak_mb']:5.0f}+{r['first_peak_rise_mb']:.0f}" if clock == "wall" \
            else f" workers {r.get('workers_cpu', 0.0):.2f}"
        if clock == "cpu" and "library" in r:
            memory += " library compiled {compiled} reused {disk_hits}".format(**r["library"])
        print(f"{label + ' ' + clock:24s} {r['ops']:6d} {r['build' + suffix]:6.2f} "
              f"{r['first' + suffix]:7.2f} " +
              " ".join(f"{st.get(s, 0.0):8.3f}" for s in STAGES) + f" {rest:6.2f}" +
              memory, flush=True)


def _forget_all_but_the_library(cache_dir):
    """Deletes the cache's entries (compiled modules, specs) but its library folder: the
    next run compiles the graph as never seen, on a machine that compiled a conv before."""
    for entry in os.scandir(cache_dir):
        if entry.is_file():
            os.remove(entry.path)


def scale(depths, extra, warm=False, peers=None, library=False):
    names = [f"compile_scale_{d}" for d in depths] + extra
    head = f"{'workload, clock':24s} {'ops':>6s} {'build':>6s} {'first':>7s} " + \
        " ".join(f"{s[:8]:>8s}" for s in STAGES) + f" {'rest':>6s} {'peak MB':>8s}"
    print("cold first run (s): graph build, first Session.run, its stages; wall time and "
          "this process's CPU time (workers: the LLVM worker processes' CPU time, beside "
          "it); peak MB: the process's peak resident memory (+ the first run's rise of it)",
          flush=True)
    if library:
        print("... lib: the first run again in a fresh process over an on-disk cache that "
              "holds only the library functions the cold run compiled (runtime/"
              "library_cache.py; the graph's own modules and specs deleted)", flush=True)
    print(head, flush=True)
    cold, warm_runs = {}, {}
    for name in names:
        with tempfile.TemporaryDirectory(prefix="graphc_cache_") as cache_dir:
            r = cold[name] = spawn_scale(name, cache_dir=cache_dir if warm or library
                                         else "off")
            if warm:
                warm_runs[name] = spawn_scale(name, cache_dir=cache_dir)
            print_stage_rows(name, r)
            if library:
                _forget_all_but_the_library(cache_dir)
                print_stage_rows(name + " lib", spawn_scale(name, cache_dir=cache_dir))
    if len(depths) > 1:
        secs = [cold[f"compile_scale_{d}"]["first"] for d in depths]
        cpus = [cold[f"compile_scale_{d}"]["first_cpu"] for d in depths]
        print(f"growth of the first run over depth: t ~ depth^"
              f"{growth_exponent(depths, secs):.2f} (all depths), "
              f"^{growth_exponent(depths[-3:], secs[-3:]):.2f} (last three); CPU time ~ "
              f"depth^{growth_exponent(depths, cpus):.2f}", flush=True)
        print_stage_growth(depths, cold)
    if warm:
        print("\nwarm first run (a fresh process over the on-disk cache the cold run filled)")
        for name in names:
            w, c = warm_runs[name], cold[name]
            print(f"{name:24s} warm {w['first']:6.3f} s wall {w['first_cpu']:6.3f} CPU-s = "
                  f"{100 * w['first'] / c['first']:4.1f}% / "
                  f"{100 * w['first_cpu'] / c['first_cpu']:4.1f}% of cold; peak memory "
                  f"{w['peak_mb']:.0f}+{w['first_peak_rise_mb']:.0f} MB (cold "
                  f"{c['peak_mb']:.0f}+{c['first_peak_rise_mb']:.0f}); less the next "
                  f"run (the step, {w['step_cpu']:.3f} CPU-s): "
                  f"{100 * (w['first_cpu'] - w['step_cpu']) / c['first_cpu']:4.1f}% CPU",
                  flush=True)
    if peers:
        print_peers_table(peers, names, cold, warm_runs)


def print_stage_growth(depths, cold):
    """Each stage's CPU-time growth exponent over depth (ops grow as depth): n log n
    shows as about 1.1-1.2 over these depths, a quadratic stage as 2."""
    words = []
    for stage in STAGES:
        cpus = [cold[f"compile_scale_{d}"]["stages_cpu"].get(stage, 0.0) for d in depths]
        if min(cpus) > 0:
            words.append(f"{stage} ^{growth_exponent(depths, cpus):.2f}")
    print("growth of each stage's CPU time over depth: " + ", ".join(words), flush=True)


PEER_SYSTEMS = ("tf1", "tf1_xla", "jax")


def peer_first_call(python, system, workload):
    """peers_bench.py's first-call seconds of one (system, workload), in its own process,
    or the reason there is none."""
    args = [python, os.path.join(REPO, "tools", "peers_bench.py"), "--system", system,
            "--workload", workload, "--min-iters", "3", "--min-time", "0",
            "--warmup-iters", "1", "--warmup-time", "0"]
    with tempfile.TemporaryDirectory(prefix="peer_cold_") as cold:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cold, TF_CPP_MIN_LOG_LEVEL="2")
        proc = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("first_call_ms") is not None:
                return r["first_call_ms"] / 1e3
            return r.get("error", "no first call")
    return f"rc={proc.returncode}"


def print_peers_table(python, names, cold, warm_runs):
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from peers_bench import WORKLOADS  # what it times (compile_scale_ at depths 8, 64, 256)
    print("\nfirst run (s), measured in this sitting: graphc cold (wall / process CPU), "
          "warm as % of cold (wall), peak MB; the peers' first call (wall, peers_bench.py)",
          flush=True)
    print("| workload | graphc cold | graphc warm | graphc peak MB | " +
          " | ".join(PEER_SYSTEMS) + " |", flush=True)
    print("| --- " * (4 + len(PEER_SYSTEMS)) + "|", flush=True)
    for name in names:
        c = cold[name]
        w = warm_runs.get(name)
        warm_cell = f"{100 * w['first'] / c['first']:.0f}%" if w else ""
        cells = []
        for system in PEER_SYSTEMS:
            t = peer_first_call(python, system, name) if name in WORKLOADS else "n/a"
            cells.append(f"{t:.2f}" if isinstance(t, float) else str(t)[:30])
        print(f"| {name} | {c['first']:.2f} / {c['first_cpu']:.2f} | {warm_cell} | "
              f"{c['peak_mb']:.0f} | " + " | ".join(cells) + " |", flush=True)


def spawn(model, cache_dir):
    env = dict(os.environ, GRAPHC_CACHE_DIR=cache_dir, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, __file__, "--child", model], env=env, cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", action="store_true",
                    help="time the scale workloads' cold first run per compiler stage")
    ap.add_argument("--depths", default=SCALE_DEPTHS)
    ap.add_argument("--extra", default=SCALE_EXTRA)
    ap.add_argument("--profile", help="cProfile the first run of this scale workload")
    ap.add_argument("--warm", action="store_true",
                    help="--scale: also the warm first run over the cold run's cache")
    ap.add_argument("--library", action="store_true",
                    help="--scale: also the first run over a cache holding only the library "
                         "functions (conv microkernels) the cold run compiled")
    ap.add_argument("--peers", metavar="PYTHON",
                    help="--scale: the peers' first calls, run by this Python")
    ap.add_argument("--llvm-functions", metavar="WORKLOAD",
                    help="the LLVM time of this scale workload's largest module by function "
                         "family")
    ap.add_argument("--llvm-ir", nargs=2, metavar=("WORKLOAD", "FILE"),
                    help="write the IR of this scale workload's largest module to FILE")
    ap.add_argument("--compare-llvm", nargs="+", metavar="FILE",
                    help="the LLVM CPU-s of these --llvm-ir files' graph parts, taken in "
                         "turn --repeats times")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--scale-child", help=argparse.SUPPRESS)
    ap.add_argument("--llvm-functions-child", help=argparse.SUPPRESS)
    ap.add_argument("--llvm-ir-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.scale_child:
        return scale_child(args.scale_child, profile=bool(args.profile))
    if args.llvm_functions:
        env = dict(os.environ, GRAPHC_CACHE_DIR="off", GRAPHC_COMPILE_WORKER="0",
                   PYTHONPATH=REPO)
        return subprocess.run([sys.executable, __file__, "--llvm-functions-child",
                               args.llvm_functions], env=env, cwd=REPO, check=True).returncode
    if args.llvm_functions_child:
        return llvm_functions_child(args.llvm_functions_child)
    if args.llvm_ir:
        env = dict(os.environ, GRAPHC_CACHE_DIR="off", GRAPHC_COMPILE_WORKER="0",
                   PYTHONPATH=REPO)
        return subprocess.run([sys.executable, __file__, "--llvm-ir-child", args.llvm_ir[0],
                               os.path.abspath(args.llvm_ir[1])], env=env, cwd=REPO,
                              check=True).returncode
    if args.llvm_ir_child:
        return llvm_ir_child(*args.llvm_ir_child)
    if args.compare_llvm:
        return compare_llvm(args.compare_llvm, args.repeats)
    if args.profile:
        print(spawn_scale(args.profile, profile=True))
        return None
    if args.scale:
        depths = [int(d) for d in args.depths.split(",") if d]
        return scale(depths, [w for w in args.extra.split(",") if w], warm=args.warm,
                     peers=args.peers, library=args.library)
    for model in args.models.split(","):
        cold, warm, hits = [], [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="graphc_cache_") as cache_dir:
                cold.append(spawn(model, cache_dir)["first_ms"])
                w = spawn(model, cache_dir)
                warm.append(w["first_ms"])
                hits.append(w["hits"])
        line = (f"{model:10s} first run cold {statistics.median(cold):7.1f} ms  "
                f"warm {statistics.median(warm):6.1f} ms  (warm: {min(hits)} of "
                f"{w['llvm_modules']} LLVM modules from the cache; targets for W3: "
                f"< {TARGETS_MS['cold']:.0f} / < {TARGETS_MS['warm']:.0f} ms)")
        print(line, flush=True)
        if w["fallback"]:
            print(f"{'':10s} NOT COMPILED: {w['fallback'][0]}", flush=True)


if __name__ == "__main__":
    main()
