"""graphc.distribute over MPI: jobs of 2 and 3 processes started with mpiexec.

Each multi-process test writes a worker script, runs it with `mpiexec -n N` in a
subprocess (with a timeout: a hang is a failure, never a stuck suite), and checks what
the ranks wrote against NumPy references computed here. The inputs of rank r come from
`rank_input`, which the workers import from this module, so both sides see the same
values. Without mpiexec on PATH the multi-process tests skip (.ci/run installs MPICH).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import time

import numpy as np
import pytest

import graphc as gc
import graphc.distribute as hvd
from graphc.distribute.optimizer import fusion_buckets
from tests.conftest import BACKENDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _find_mpiexec():
    """mpiexec on PATH, else the one pip put beside this Python (the mpich wheel's)."""
    beside = os.path.join(sysconfig.get_path("scripts"), "mpiexec")
    return shutil.which("mpiexec") or (beside if os.access(beside, os.X_OK) else None)


MPIEXEC = _find_mpiexec()
if MPIEXEC is None and os.environ.get("GRAPHC_REQUIRE_MPI") == "1":  # .ci/run sets it
    raise RuntimeError("GRAPHC_REQUIRE_MPI=1 but mpiexec is not installed")
needs_mpi = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec is not installed "
                               "(pip install 'graphc[distribute]' installs MPICH's)")
JOB_TIMEOUT = 240  # seconds a whole job may take (compiles included) before it is a hang
SHAPES = ((0,), (1,), (1023,), (), (3, 0, 2), (5, 7))


def rank_input(rank, n, dtype, shape):
    """Rank `rank`'s input: distinct per rank, dtype and shape."""
    r = np.random.default_rng([rank, n, len(shape), int(np.prod(shape))])
    return r.uniform(-2, 2, shape).astype(dtype)


def shape_inputs(rank, n, dtype):
    """For each of SHAPES: its name in the workers' keys, a placeholder, rank's input."""
    for shape in SHAPES:
        yield "x".join(map(str, shape)), gc.placeholder(dtype, shape), \
            rank_input(rank, n, dtype, shape)


def run_job(tmp_path, n, body, timeout=JOB_TIMEOUT, env=None):
    """Runs `body` (the text of a script) on n ranks; returns the CompletedProcess."""
    script = tmp_path / "worker.py"
    script.write_text(textwrap.dedent(body))
    environ = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   OUT=str(tmp_path), **(env or {}))
    return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, str(script)], cwd=ROOT,
                          env=environ, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(params=["1", "0"], ids=["native", "host"])
def collectives_path(request):
    """run_job's environment for each path of a job's collectives: calls from the compiled
    code into MPI, and host stages between native ones (GRAPHC_MPI_NATIVE=0)."""
    return {"GRAPHC_MPI_NATIVE": request.param}


def check_ok(proc):
    assert proc.returncode == 0, f"job failed:\n{proc.stdout}\n{proc.stderr}"


# ------------------------------------------------------------------ collectives
COLLECTIVES_WORKER = """
    import os
    import sys
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    from tests.test_distribute import rank_input, shape_inputs
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    results = {}
    for backend in sys.argv[1:] or os.environ["BACKENDS"].split(","):
        for dtype in ("float32", "float64", "int32"):
            gc.reset_default_graph()
            fetches, feeds = {}, {}
            for size, x, value in shape_inputs(r, n, dtype):
                feeds[x] = value
                fetches[f"sum{size}"] = hvd.allreduce(x, op=hvd.Sum)
                if dtype != "int32":
                    fetches[f"avg{size}"] = hvd.allreduce(x)
                fetches[f"bcast{size}"] = hvd.broadcast(x, n - 1)
            # allgather: rank r has r rows (rank 0 none), each of 3 columns
            rows = gc.placeholder(dtype, [None, 3])
            feeds[rows] = rank_input(r, n, dtype, (r, 3))
            fetches["gather"] = hvd.allgather(rows)
            with gc.Session(config=gc.ConfigProto(backend=backend)) as sess:
                for k, v in sess.run(fetches, feeds).items():
                    results[f"{backend}/{dtype}/{k}"] = v
    np.savez(os.path.join(os.environ["OUT"], f"rank{r}.npz"), **results)
"""


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_collectives_match_numpy(tmp_path, n):
    check_ok(run_job(tmp_path, n, COLLECTIVES_WORKER, env={"BACKENDS": ",".join(BACKENDS)}))
    for r in range(n):
        got = np.load(tmp_path / f"rank{r}.npz")
        for backend in BACKENDS:
            for dtype in ("float32", "float64", "int32"):
                key = f"{backend}/{dtype}/"
                tol = 1e-6 if dtype == "float32" else 1e-13
                for shape in SHAPES:
                    size = "x".join(map(str, shape))
                    xs = [rank_input(k, n, dtype, shape) for k in range(n)]
                    total = np.sum([x.astype(np.float64) for x in xs], axis=0)
                    assert got[key + f"sum{size}"].dtype == np.dtype(dtype)
                    assert got[key + f"sum{size}"].shape == shape
                    np.testing.assert_allclose(got[key + f"sum{size}"], total, rtol=tol,
                                               atol=tol)
                    if dtype != "int32":
                        np.testing.assert_allclose(got[key + f"avg{size}"], total / n,
                                                   rtol=tol, atol=tol)
                    np.testing.assert_array_equal(got[key + f"bcast{size}"], xs[n - 1])
                gathered = np.concatenate([rank_input(k, n, dtype, (k, 3)) for k in range(n)])
                np.testing.assert_array_equal(got[key + "gather"], gathered)


NATIVE_WORKER = """
    import os
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    from graphc.distribute.world import world
    from tests.test_distribute import batches, model, shape_inputs
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    out = {}

    def stages(sess, target):
        exe = next(e for e in sess._cache.values() if target in e.targets)
        return [type(s).__name__ for s in exe.stages]

    for dtype in ("float32", "float64", "int32", "int64"):
        gc.reset_default_graph()
        fetches, feeds = {}, {}
        for size, x, value in shape_inputs(r, n, dtype):
            feeds[x] = value
            fetches[f"{dtype}/sum{size}"] = hvd.allreduce(x, op=hvd.Sum)
            if dtype.startswith("float"):
                fetches[f"{dtype}/avg{size}"] = hvd.allreduce(x * 3)
            fetches[f"{dtype}/bcast{size}"] = hvd.broadcast(x - 1, n - 1)
        with gc.Session() as sess:
            for _ in range(2):  # the second run follows the agreed sequence
                out.update(sess.run(fetches, feeds))
        # the GPU target's collectives stage through the host (MPICH is not CUDA-aware)
        with gc.Session(config=gc.ConfigProto(backend="gpu_emulated")) as sess:
            out.update({"gpu/" + k: v for k, v in sess.run(fetches, feeds).items()})
            host_ops = {op.type for s in sess._cache[next(iter(sess._cache))].stages
                        if type(s).__name__ == "HostStage" for op in s.ops}
            out[f"gpu/{dtype}/host_ops"] = np.array(sorted(host_ops))
    gc.reset_default_graph()
    gc.set_random_seed(100 + r)
    (ids, x, labels), loss = model("float32")
    opt = hvd.DistributedOptimizer(gc.train.AdamOptimizer(0.05), fusion_threshold_bytes=100,
                                   sparse_as_dense=True)
    train = opt.minimize(loss)
    sync = hvd.broadcast_global_variables(0)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        sess.run(sync)
        exchanges = []
        for i_, x_, l_ in batches(n, 3, 5):
            part = slice(r * 3, (r + 1) * 3)
            before = world().agreement.exchanges
            sess.run(train, {ids: i_[part], x: x_[part], labels: l_[part]})
            exchanges.append(world().agreement.exchanges - before)
        for k, v in enumerate(sess.run(gc.trainable_variables())):
            out[f"end{k}"] = v
        out["train_stages"] = np.array(stages(sess, train))
        out["train_exchanges"] = np.array(exchanges)
    np.savez(os.path.join(os.environ["OUT"], f"rank{r}.npz"), **out)
"""


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_native_collectives_equal_the_host_path_bit_for_bit(tmp_path, n):
    """On the CPU in a job of several ranks, allreduce and broadcast are calls from the
    compiled code into MPI: a DistributedOptimizer step is one native stage, which
    agrees with the other ranks once (its first run) and then runs without exchanging
    headers. Every result equals, bit for bit, the host path's (GRAPHC_MPI_NATIVE=0:
    the collectives as host stages between native ones) and NumPy's sums."""
    got = {}
    for native in ("1", "0"):
        out = tmp_path / native
        out.mkdir()
        check_ok(run_job(out, n, NATIVE_WORKER, env={"GRAPHC_MPI_NATIVE": native}))
        got[native] = [dict(np.load(out / f"rank{r}.npz")) for r in range(n)]
    for r in range(n):
        native, host = got["1"][r], got["0"][r]
        assert list(native["train_stages"]) == ["NativeStage"]
        assert list(host["train_stages"]) == ["NativeStage", "HostStage", "NativeStage"]
        # the step departs from the sequence (broadcast, step) twice, then repeats it
        assert list(native["train_exchanges"]) == [1, 1, 0, 0, 0]
        assert native.keys() == host.keys()
        for key in native:
            if key not in ("train_stages", "train_exchanges"):
                assert native[key].dtype == host[key].dtype, key
                np.testing.assert_array_equal(native[key], host[key], err_msg=key)
            if key.startswith("gpu/") and not key.endswith("host_ops"):
                np.testing.assert_array_equal(native[key], native[key[4:]], err_msg=key)
        for dtype in ("float32", "float64", "int32", "int64"):
            assert set(native[f"gpu/{dtype}/host_ops"]) == {"MpiAllreduce", "MpiBroadcast"}
        for dtype in ("float32", "float64", "int32", "int64"):
            for shape in SHAPES:
                size = "x".join(map(str, shape))
                xs = [rank_input(k, n, dtype, shape) for k in range(n)]
                total = np.sum([x.astype(np.float64) for x in xs], axis=0)
                tol = 1e-6 if dtype == "float32" else 1e-13
                np.testing.assert_allclose(native[f"{dtype}/sum{size}"], total, rtol=tol,
                                           atol=tol)
                if dtype.startswith("float"):
                    np.testing.assert_allclose(native[f"{dtype}/avg{size}"], 3 * total / n,
                                               rtol=tol, atol=tol)
                np.testing.assert_array_equal(native[f"{dtype}/bcast{size}"], xs[n - 1] - 1)
        for key in native:  # every rank ends with the same variables
            np.testing.assert_array_equal(native[key], got["1"][0][key], err_msg=key)


GRADIENT_WORKER = """
    import os
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    from tests.test_distribute import rank_input
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    x = gc.placeholder(gc.float64, [4])
    rows = gc.placeholder(gc.float64, [None, 2])
    c = gc.constant(rank_input(r, n, "float64", (4,)))
    crows = gc.constant(rank_input(r, n, "float64", (n * (n + 1) // 2, 2)))
    loss = gc.reduce_sum(hvd.allreduce(x * x, op=hvd.Sum) * c) + \\
        gc.reduce_sum(hvd.allgather(rows) * crows) + gc.reduce_sum(hvd.broadcast(x, 1) * c)
    grads = gc.gradients(loss, [x, rows])
    with gc.Session() as sess:
        gx, grows = sess.run(grads, {x: rank_input(r, n, "float64", (4,)) + 3,
                                     rows: rank_input(r, n, "float64", (r + 1, 2))})
    np.savez(os.path.join(os.environ["OUT"], f"rank{r}.npz"), x=gx, rows=grows)
"""


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_collective_gradients(tmp_path, n):
    """Horovod's rules: an allreduce passes on the reduced gradients; an allgather gives
    each rank its rows of the summed gradients; a broadcast gives the root the summed
    gradients and the other ranks zero."""
    check_ok(run_job(tmp_path, n, GRADIENT_WORKER))
    cs = [rank_input(k, n, "float64", (4,)) for k in range(n)]
    crows = sum(rank_input(k, n, "float64", (n * (n + 1) // 2, 2)) for k in range(n))
    starts = np.cumsum([0] + [k + 1 for k in range(n)])
    for r in range(n):
        got = np.load(tmp_path / f"rank{r}.npz")
        x = rank_input(r, n, "float64", (4,)) + 3
        expected = 2 * x * sum(cs) + (sum(cs) if r == 1 else 0)
        np.testing.assert_allclose(got["x"], expected, rtol=1e-13)
        np.testing.assert_allclose(got["rows"], crows[starts[r]:starts[r + 1]], rtol=1e-13)


# ------------------------------------------------------- DistributedOptimizer
def model(dtype, n_classes=3):
    """A small MLP with an embedding (its gradient is an IndexedSlices): logits of
    (ids, x) -> mean cross entropy. Variables made from fixed seeds."""
    ids = gc.placeholder(gc.int32, [None], name="ids")
    x = gc.placeholder(dtype, [None, 5], name="x")
    labels = gc.placeholder(gc.int32, [None], name="labels")
    emb = gc.Variable(gc.random_normal([7, 4], dtype=dtype, seed=1), name="emb")
    w1 = gc.Variable(gc.random_normal([9, 6], dtype=dtype, seed=2), name="w1")
    b1 = gc.Variable(gc.zeros([6], dtype=dtype), name="b1")
    w2 = gc.Variable(gc.random_normal([6, n_classes], dtype=dtype, seed=3), name="w2")
    h = gc.nn.tanh(gc.matmul(gc.concat([gc.gather(emb, ids), x], 1), w1) + b1)
    logits = gc.matmul(h, w2)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    return (ids, x, labels), loss


def batches(n_ranks, per_rank, steps):
    r = np.random.default_rng(7)
    total = n_ranks * per_rank
    return [(r.integers(0, 7, total).astype(np.int32), r.normal(size=(total, 5)),
             r.integers(0, 3, total).astype(np.int32)) for _ in range(steps)]


def make_optimizer(name):
    return {"momentum": lambda: gc.train.MomentumOptimizer(0.1, 0.9),
            "adam": lambda: gc.train.AdamOptimizer(0.05)}[name]()


OPTIMIZER_WORKER = """
    import json
    import os
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    from tests.test_distribute import batches, make_optimizer, model
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    cfg = json.loads(os.environ["CFG"])
    gc.set_random_seed(100 + r)  # each rank draws other initial values: broadcast fixes it
    (ids, x, labels), loss = model(cfg["dtype"])
    opt = hvd.DistributedOptimizer(make_optimizer(cfg["optimizer"]),
                                   fusion_threshold_bytes=cfg["fusion"],
                                   sparse_as_dense=cfg["sparse_as_dense"])
    train = opt.minimize(loss)
    sync = hvd.broadcast_global_variables(0)
    variables = gc.trainable_variables()
    types = [o.type for o in gc.get_default_graph().get_operations()]
    with gc.Session(config=gc.ConfigProto(backend=cfg["backend"])) as sess:
        sess.run(gc.global_variables_initializer())
        before = sess.run(variables)
        sess.run(sync)
        start = sess.run(variables)
        B = cfg["per_rank"]
        for i_, x_, l_ in batches(n, B, cfg["steps"]):
            part = slice(r * B, (r + 1) * B)
            sess.run(train, {ids: i_[part], x: x_[part], labels: l_[part]})
        end = sess.run(variables)
    out = {f"before{i}": v for i, v in enumerate(before)}
    out.update({f"start{i}": v for i, v in enumerate(start)})
    out.update({f"end{i}": v for i, v in enumerate(end)})
    np.savez(os.path.join(os.environ["OUT"], f"rank{r}.npz"), **out,
             allreduces=types.count("MpiAllreduce"), allgathers=types.count("MpiAllgather"))
"""


def one_process_training(dtype, optimizer, start, n_ranks, per_rank, steps,
                         sparse_as_dense=False):
    """The plain optimizer on the whole batch of every step, from `start` (with the
    embedding's gradient made dense: Momentum's and Adam's dense updates decay the slots
    of every row, their sparse ones only of the rows in the batch, as TF1's)."""
    gc.reset_default_graph()
    (ids, x, labels), loss = model(dtype)
    opt = make_optimizer(optimizer)
    grads_and_vars = opt.compute_gradients(loss)
    if sparse_as_dense:
        grads_and_vars = [(gc.convert_to_tensor(g), v) for g, v in grads_and_vars]
    train = opt.apply_gradients(grads_and_vars)
    variables = gc.trainable_variables()
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        for v, value in zip(variables, start):
            v.load(value, sess)
        for i_, x_, l_ in batches(n_ranks, per_rank, steps):
            sess.run(train, {ids: i_, x: x_, labels: l_})
        return sess.run(variables)


@needs_mpi
@pytest.mark.parametrize("n,dtype,optimizer,backend,sparse_as_dense", [
    (2, "float64", "momentum", "compiled", False), (3, "float64", "adam", "compiled", False),
    (2, "float32", "adam", "compiled", False), (3, "float32", "momentum", "reference", False),
    (2, "float64", "adam", "gpu_emulated", False), (3, "float64", "momentum", "compiled", True)])
def test_distributed_optimizer_equals_one_process_on_the_whole_batch(
        tmp_path, n, dtype, optimizer, backend, sparse_as_dense):
    """N ranks, each on its B examples of a step, end where one process training on the
    N*B examples ends (to summation order); the ranks start from rank 0's initial values
    (broadcast_global_variables), which differ from their own. The embedding's sparse
    gradient is allgathered, or densified and allreduced (sparse_as_dense)."""
    if backend not in BACKENDS:
        pytest.skip(f"backend {backend} not in GRAPHC_TEST_BACKENDS")
    cfg = {"dtype": dtype, "optimizer": optimizer, "backend": backend, "per_rank": 3,
           "steps": 6, "fusion": 100,  # 100 bytes: the dense gradients take 3+ buffers
           "sparse_as_dense": sparse_as_dense}
    check_ok(run_job(tmp_path, n, OPTIMIZER_WORKER, env={"CFG": json.dumps(cfg)}))
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(n)]
    n_vars = 4
    assert not np.allclose(ranks[0]["before0"], ranks[1]["before0"])  # seeds differ
    for got in ranks:
        for i in range(n_vars):
            np.testing.assert_array_equal(got[f"start{i}"], ranks[0][f"before{i}"])
        # 100-byte fusion buffers: in float32 w1 (216 bytes) alone, b1 + w2 (24 + 72)
        # fused; in float64 w1, b1, w2 (432, 48, 144) and the densified emb each alone
        expected = {"float32": 2, "float64": 3}[dtype] + sparse_as_dense
        assert (int(got["allreduces"]), int(got["allgathers"])) == \
            (expected, 0 if sparse_as_dense else 2)
    expected = one_process_training(dtype, optimizer, [ranks[0][f"before{i}"]
                                                       for i in range(n_vars)],
                                    n, cfg["per_rank"], cfg["steps"], sparse_as_dense)
    tol = 2e-5 if dtype == "float32" else 1e-11
    for got in ranks:
        for i in range(n_vars):
            np.testing.assert_allclose(got[f"end{i}"], expected[i], rtol=tol, atol=tol)
        # every rank holds the same variables
        for i in range(n_vars):
            np.testing.assert_array_equal(got[f"end{i}"], ranks[0][f"end{i}"])


def test_fusion_buckets_pack_consecutive_gradients_per_dtype_within_the_threshold():
    a = gc.zeros([10], gc.float32)         # 40 bytes
    b = gc.zeros([5], gc.float64)          # 40 bytes
    c = gc.zeros([20], gc.float32)         # 80 bytes
    d = gc.zeros([30], gc.float32)         # 120 bytes: over the threshold, alone
    e = gc.placeholder(gc.float32, [None])  # unknown size: alone
    f = gc.zeros([2], gc.float64)
    sparse = gc.IndexedSlices(gc.zeros([1, 2]), gc.constant([0]))
    grads = [a, None, b, c, d, e, sparse, f, gc.zeros([1], gc.float32)]
    assert fusion_buckets(grads, 100) == [[0], [3], [4], [5], [8], [2, 7]]
    assert fusion_buckets(grads, 1000) == [[0, 3, 4], [5], [8], [2, 7]]


def test_one_process_job_runs_the_same_script():
    """A process no MPI launcher started is a job of one: DistributedOptimizer adds no
    collective (Horovod's rule) and trains as the plain optimizer; reduce_gradients (what
    it does on several ranks) runs its collectives and leaves the gradients as they are."""
    hvd.init()
    assert (hvd.size(), hvd.rank(), hvd.local_size(), hvd.local_rank()) == (1, 0, 1, 0)
    start = _initial_values("float64")
    results = []
    for through_collectives in (False, True):
        gc.reset_default_graph()
        (ids, x, labels), loss = model("float64")
        opt = make_optimizer("adam")
        if through_collectives:  # what DistributedOptimizer builds on several ranks
            grads_and_vars = opt.compute_gradients(loss)
            reduced = hvd.reduce_gradients([g for g, _ in grads_and_vars])
            train = opt.apply_gradients(zip(reduced, [v for _, v in grads_and_vars]))
        else:
            train = hvd.DistributedOptimizer(opt).minimize(loss)
        variables = gc.trainable_variables()
        types = [o.type for o in gc.get_default_graph().get_operations()]
        assert (types.count("MpiAllreduce"), types.count("MpiAllgather")) == \
            ((1, 2) if through_collectives else (0, 0))  # dense fused; the sparse gathered
        with gc.Session() as sess:
            sess.run(gc.global_variables_initializer())
            for v, value in zip(variables, start):
                v.load(value, sess)
            for i_, x_, l_ in batches(1, 4, 3):
                sess.run(train, {ids: i_, x: x_, labels: l_})
            results.append(sess.run(variables))
    for unreduced, reduced in zip(*results):
        np.testing.assert_allclose(reduced, unreduced, rtol=1e-13, atol=1e-15)



def test_an_average_of_gradients_is_divided_by_the_compiled_update():
    """reduce_gradients' average is its allreduce's sum divided by size() in graph ops
    after the unpacking, so the native update stage divides as it reads (no pass over the
    whole buffer on the host); integers are still refused an average."""
    hvd.init()
    a, b = gc.constant([1.0, 2.0]), gc.constant([[3.0]])
    reduced = hvd.reduce_gradients([a, b])
    fused = [o for o in gc.get_default_graph().get_operations() if o.type == "MpiAllreduce"]
    assert [o.attrs["reduction"] for o in fused] == [hvd.Sum]
    assert [r.op.type for r in reduced] == ["RealDiv", "RealDiv"]
    with gc.Session() as sess:
        got = sess.run(reduced)
    np.testing.assert_array_equal(got[0], [1.0, 2.0])
    np.testing.assert_array_equal(got[1], [[3.0]])
    with pytest.raises(TypeError, match="would be truncated; use op=Sum"):
        hvd.reduce_gradients([gc.constant([1, 2])])

def _initial_values(dtype):
    gc.reset_default_graph()
    model(dtype)
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        return sess.run(gc.trainable_variables())


def test_collective_errors_name_the_op():
    hvd.init()
    with pytest.raises(TypeError, match="MpiAllreduce takes float32, float64, int32, int64"):
        hvd.allreduce(gc.zeros([2], gc.float16))
    with pytest.raises(ValueError, match="MpiAllgather needs a tensor of rank >= 1"):
        hvd.allgather(gc.constant(1.0))
    with pytest.raises(TypeError, match="average of int32 tensors"):
        hvd.allreduce(gc.constant([1, 2]))
    with pytest.raises(ValueError, match="op must be graphc.distribute.Average or .Sum"):
        hvd.allreduce(gc.constant([1.0]), op="max")
    with pytest.raises(TypeError, match="root_rank must be an int"):
        hvd.broadcast(gc.constant([1.0]), "0")
    with pytest.raises(TypeError, match="wraps a graphc optimizer"):
        hvd.DistributedOptimizer(object())
    b = hvd.broadcast(gc.constant([1.0]), 1, name="from_rank_1")
    expected = "(?s)root_rank 1 is not a rank of this job of 1 processes.*from_rank_1.*test_distr"
    with gc.Session() as sess, pytest.raises(gc.errors.InvalidArgumentError, match=expected):
        sess.run(b)


def test_init_is_required_before_size_and_before_running_a_collective(tmp_path):
    """In a fresh process: a clear error, not a KeyError from inside."""
    script = tmp_path / "no_init.py"
    script.write_text(textwrap.dedent("""
        import graphc as gc
        import graphc.distribute as hvd
        try:
            hvd.size()
        except ValueError as e:
            print("size:", e)
        y = hvd.allreduce(gc.constant([1.0, 2.0]), name="early")
        try:
            gc.Session().run(y)
        except gc.errors.FailedPreconditionError as e:
            print("run:", e)
    """))
    env = dict(os.environ, PYTHONPATH=ROOT)
    for v in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "GRAPHC_MPI"):
        env.pop(v, None)
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120).stdout
    assert "size: size() needs graphc.distribute.init() to be called first" in out
    assert "run: MpiAllreduce 'early' needs graphc.distribute.init()" in out


# ----------------------------------------------------------------------- failures
FAILING_WORKER = """
    import time
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    hvd.init()
    x = gc.placeholder(gc.float32, [3])
    y = hvd.allreduce(x)
    with gc.Session() as sess:
        sess.run(y, {x: np.ones(3)})
        if hvd.rank() == 1:
            raise RuntimeError("rank 1 gives up here")
        for _ in range(1000):  # the others wait in the next allreduce
            sess.run(y, {x: np.ones(3)})
    print("finished", hvd.rank())
"""


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_a_failing_rank_ends_every_rank_with_its_error(tmp_path, n):
    start = time.monotonic()
    proc = run_job(tmp_path, n, FAILING_WORKER, timeout=120)
    assert proc.returncode != 0
    assert "rank 1 gives up here" in proc.stderr
    assert f"graphc.distribute: rank 1 of {n} failed; aborting all ranks" in proc.stderr
    assert "finished" not in proc.stdout
    assert time.monotonic() - start < 120


MISMATCH_WORKER = """
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    hvd.init()
    size = 4 if hvd.rank() == 0 else 5  # rank 0 was given another graph
    x = gc.placeholder(gc.float32, [size])
    y = hvd.allreduce(x, name="grad")
    with gc.Session() as sess:
        sess.run(y, {x: np.ones(size)})
    print("finished", hvd.rank())
"""


def check_mismatch_report(proc, shapes):
    """The job failed, no rank finished, and the report names each rank's allreduce 'grad'
    with its shape ({rank: "float32[4]"})."""
    assert proc.returncode != 0
    assert "the ranks run different collectives" in proc.stderr
    for rank, shape in shapes.items():
        assert f"rank {rank}: MpiAllreduce 'grad' {shape}" in proc.stderr
    assert "finished" not in proc.stdout


@needs_mpi
def test_ranks_running_different_graphs_fail_with_a_report(tmp_path, collectives_path):
    """In the compiled code's collectives (the whole run's collectives agreed at once,
    before any data moves) as on the host path."""
    proc = run_job(tmp_path, 3, MISMATCH_WORKER, timeout=120, env=collectives_path)
    check_mismatch_report(proc, {0: "float32[4]", 2: "float32[5]"})


STALLING_WORKER = """
    import time
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    hvd.init()
    x = gc.placeholder(gc.float32, [3])
    y = hvd.allreduce(x, name="grad")
    with gc.Session() as sess:
        sess.run(y, {x: np.ones(3)})
        if hvd.rank() == 1:
            time.sleep(100)  # stuck elsewhere, without raising
        sess.run(y, {x: np.ones(3)})
"""


@needs_mpi
def test_a_stalled_rank_makes_the_others_fail_after_the_timeout(tmp_path, collectives_path):
    """In compiled code the watchdog reads which collective the code waits in."""
    start = time.monotonic()
    proc = run_job(tmp_path, 2, STALLING_WORKER, timeout=90,
                   env=dict(collectives_path, GRAPHC_MPI_TIMEOUT="3",
                            GRAPHC_MPI_STALL_WARNING="1"))
    assert proc.returncode != 0
    assert "rank 0 has waited 1 s for the other ranks at collective MpiAllreduce 'grad'; " \
        "it fails after 3 s" in proc.stderr
    assert "rank 0: the other ranks did not reach collective MpiAllreduce 'grad' within 3 s" \
        in proc.stderr
    assert time.monotonic() - start < 60


# ------------------------------------------------------- the agreed sequence
SEQUENCE_WORKER = """
    import json
    import os
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    from graphc.distribute.world import world
    hvd.init()
    r = hvd.rank()
    agreement = world().agreement
    out = {}
    for backend in os.environ["BACKENDS"].split(","):
        gc.reset_default_graph()
        x = gc.placeholder(gc.float64, [None])
        total = hvd.allreduce(x, op=hvd.Sum, name="total")
        root = hvd.broadcast(x * 2.0, 0, name="root")
        exchanges, values = [], []
        with gc.Session(config=gc.ConfigProto(backend=backend)) as sess:
            for step in range(8):
                size = 3 if step < 5 else 4  # every rank's batch grows at step 5
                before = agreement.exchanges
                got = sess.run([total, root], {x: np.arange(size) + 10.0 * r + step})
                exchanges.append(agreement.exchanges - before)
                values.append([v.tolist() for v in got])
        out[backend] = {"exchanges": exchanges, "values": values}
    with open(os.path.join(os.environ["OUT"], f"rank{r}.json"), "w") as f:
        json.dump(out, f)
"""


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_ranks_exchange_headers_only_where_their_collectives_change(tmp_path, n):
    """A run repeating the collectives the ranks agreed on moves data at once: headers are
    exchanged in the first run (one per collective) and where the shapes change, and
    the sums and broadcasts are right throughout."""
    check_ok(run_job(tmp_path, n, SEQUENCE_WORKER, env={"BACKENDS": ",".join(BACKENDS)}))
    for r in range(n):
        with open(tmp_path / f"rank{r}.json") as f:
            got = json.load(f)
        for i, backend in enumerate(BACKENDS):
            exchanges, values = got[backend]["exchanges"], got[backend]["values"]
            # one exchange per collective in the first run; where the shapes change (and
            # where a session follows another one's collectives), the second run closes
            # the cycle of the new keys with one more exchange; then none
            assert exchanges == [2, 1 if i else 0, 0, 0, 0, 2, 1, 0], f"{backend}: {exchanges}"
            for step, (total, root) in enumerate(values):
                base = np.arange(3 if step < 5 else 4) + step
                np.testing.assert_array_equal(total, n * base + 10.0 * sum(range(n)))
                np.testing.assert_array_equal(root, 2 * base)


DEPARTING_WORKER = """
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    hvd.init()
    x = gc.placeholder(gc.float32, [None])
    y = hvd.allreduce(x, name="grad")
    with gc.Session() as sess:
        for step in range(4):
            size = 3 if step < 3 else (4 if hvd.rank() == 0 else 5)  # rank 0's batch differs
            sess.run(y, {x: np.ones(size)})
    print("finished", hvd.rank())
"""


@needs_mpi
def test_ranks_changing_shapes_differently_fail_with_a_report(tmp_path):
    """After steps the ranks agreed on, every rank's shape changes, but not alike: the
    header exchange of the change reports what each rank runs."""
    proc = run_job(tmp_path, 3, DEPARTING_WORKER, timeout=120)
    check_mismatch_report(proc, {0: "float32[4]", 1: "float32[5]"})


SKIPPING_WORKER = """
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    hvd.init()
    x = gc.placeholder(gc.float32, [3])
    a, b = hvd.allreduce(x, name="a"), hvd.allreduce(x, name="b")  # the same shape
    with gc.Session() as sess:
        for _ in range(3):  # the ranks agree on the sequence a, b
            sess.run(a, {x: np.ones(3)})
            sess.run(b, {x: np.ones(3)})
        # rank 0 runs a (the sequence's next), the others b: nothing may pair them up
        print("result", sess.run(a if hvd.rank() == 0 else b, {x: np.ones(3)}))
    print("finished", hvd.rank())
"""


@needs_mpi
def test_a_rank_leaving_the_agreed_sequence_alone_ends_the_job(tmp_path):
    """Rank 0 follows the agreed sequence, rank 1 runs another collective of the same
    shape: rank 1 waits in a header exchange, rank 0 in the data's allreduce, and the
    watchdog ends the job (no result mixing a with b)."""
    start = time.monotonic()
    proc = run_job(tmp_path, 2, SKIPPING_WORKER, timeout=90,
                   env={"GRAPHC_MPI_TIMEOUT": "3", "GRAPHC_MPI_STALL_WARNING": "1"})
    assert proc.returncode != 0
    assert "result" not in proc.stdout and "finished" not in proc.stdout
    assert re.search(r"rank [01]: the other ranks did not reach collective MpiAllreduce "
                     r"'[ab]' within 3 s", proc.stderr), proc.stderr
    assert time.monotonic() - start < 60



@needs_mpi
def test_a_bad_timeout_fails_init_naming_the_variable(tmp_path):
    proc = run_job(tmp_path, 2, "import graphc.distribute as hvd\nhvd.init()\n", timeout=120,
                   env={"GRAPHC_MPI_TIMEOUT": "0"})
    assert proc.returncode != 0
    assert "GRAPHC_MPI_TIMEOUT must be a number of seconds > 0, got '0'" in proc.stderr

class _OneRankComm:
    """The check communicator of Agreement's unit tests: every rank sends what this one
    does (or, from `lying_rank` on, another header's identity)."""

    def __init__(self, size, lying_rank=None):
        self.size, self.lying_rank = size, lying_rank

    def Allgather(self, mine, every):  # noqa: N802 - mpi4py's name
        every[:] = mine
        if self.lying_rank is not None and every.dtype == np.int64:
            every[self.lying_rank:, 0] += 1


@pytest.mark.parametrize("pattern, exchanges", [
    ("ab" * 6, 2),                 # learned in the first pass, then followed
    ("abc" * 3 + "d" + "abc" * 3, 3 + 1 + 1),  # d extends it; a instead of d: abc again
    ("a" * 10, 1),
    ("ab" * 3 + "b" + "ab" * 3, 2 + 1 + 1),    # b instead of a: the cycle b; then b, a
])
def test_agreement_exchanges_where_the_sequence_departs(pattern, exchanges):
    from graphc.distribute.schedule import Agreement
    ops = {c: hvd.allreduce(gc.placeholder(gc.float32, [2]), name=c).op for c in set(pattern)}
    agreement = Agreement(_OneRankComm(2), 0, 2)
    for c in pattern:
        key = (hash(c), (2,))
        if not agreement.follows(key):
            agreement.depart(ops[c], key, (2,))
    assert agreement.exchanges == exchanges


def test_code_calling_mpi_is_refused_while_no_mpi_library_is_bound():
    """A compiled file holding native collectives, loaded where graphc.distribute never
    bound an MPI library (nor wrote the handles the code passes), does not run."""
    from runtime import mpi_library
    from runtime.verify import check_code

    def fail(where, message):
        raise ValueError(message)
    assert mpi_library.bound() is None  # a test process is not an MPI job
    with pytest.raises(ValueError, match="declares function 'MPI_Allreduce', which the "
                                         "runtime does not provide"):
        check_code("declare i32 @MPI_Allreduce(ptr, ptr, i32, i64, i64, i64)\n", fail, "code")
    with pytest.raises(ValueError, match="declares external global 'graphc_mpi'"):
        check_code("@graphc_mpi = external global [9 x i64]\n", fail, "code")


def test_the_watchdog_reads_which_collective_native_code_waits_in():
    """What the compiled code writes (the op's tag while it waits, a count of its calls)
    is what the watchdog reads: one wait per call, however long, and none between calls."""
    from graphc.distribute.schedule import NativeWait
    from runtime import mpi_library
    words = mpi_library.WORDS
    a, b = gc.constant(1.0, name="a").op, gc.constant(2.0, name="b").op
    wait = NativeWait({mpi_library.tag("a"): a, mpi_library.tag("b"): b})
    saved = list(words)
    try:
        words[mpi_library.IN_COLLECTIVE], words[mpi_library.CALLS] = 0, 7
        assert wait.waiting() is None
        words[mpi_library.IN_COLLECTIVE], words[mpi_library.CALLS] = mpi_library.tag("a"), 8
        first = wait.waiting()
        assert first[0] is a and wait.waiting() is first  # the same call: the same wait
        words[mpi_library.CALLS] = 9  # the next call of the same op: a new wait
        again = wait.waiting()
        assert again[0] is a and again is not first and again[1] >= first[1]
        words[mpi_library.IN_COLLECTIVE] = mpi_library.tag("b")
        assert wait.waiting()[0] is b
        words[mpi_library.IN_COLLECTIVE] = 0
        assert wait.waiting() is None
    finally:
        for k, v in enumerate(saved):
            words[k] = v


def test_host_works_of_several_kinds_wrap_a_native_run_in_order():
    """A native stage holding host-only ops of two native_on_cpu kinds enters their host
    works in order around each run and leaves them in reverse, also when the run raises."""
    from graphc.compiled_executor import _host_work
    from graphc.framework.graph import create_op
    from graphc.framework.op_def import OP_DEFS, register_op
    log = []

    class Work:
        def __init__(self, name, ops):
            self.name, self.ops = name, ops

        def __enter__(self):
            log.append(("enter", self.name, [op.name for op in self.ops]))

        def __exit__(self, *exc):
            log.append(("exit", self.name, exc[0] is not None))

    class Kind:
        def __init__(self, name):
            self.name = name

        def compiles(self, op):
            return True

        def host_work(self, ops):
            return Work(self.name, ops)

    for t, kind in (("TestNativeA", Kind("a")), ("TestNativeB", Kind("b"))):
        register_op(t, infer=lambda i, a: (i[0].shape, i[0].dtype), kernel=None, kind="opaque",
                    host_only=True, native_on_cpu=kind)
    try:
        c = gc.constant([1.0])
        ops = [create_op(t, [c], {}, n) for t, n in
               (("TestNativeA", "a1"), ("TestNativeB", "b1"), ("TestNativeA", "a2"))]
        work = _host_work(ops + [c.op])
        with work:
            pass
        with pytest.raises(RuntimeError):
            with work:
                raise RuntimeError("the run failed")
        assert log == [("enter", "a", ["a1", "a2"]), ("enter", "b", ["b1"]),
                       ("exit", "b", False), ("exit", "a", False),
                       ("enter", "a", ["a1", "a2"]), ("enter", "b", ["b1"]),
                       ("exit", "b", True), ("exit", "a", True)]
    finally:
        del OP_DEFS["TestNativeA"], OP_DEFS["TestNativeB"]


def test_agreement_reports_ranks_that_depart_differently():
    from graphc.distribute.schedule import Agreement
    op = hvd.allreduce(gc.placeholder(gc.float32, [2]), name="grad").op
    agreement = Agreement(_OneRankComm(3, lying_rank=2), 0, 3)
    with pytest.raises(gc.errors.FailedPreconditionError, match=r"different collectives"
                       r"(.|\n)*rank 0: MpiAllreduce 'grad' float32\[2\]"):
        agreement.depart(op, (1, (2,)), (2,))
    gather = hvd.allgather(gc.placeholder(gc.float32, [None, 3]), name="rows").op
    with pytest.raises(gc.errors.FailedPreconditionError,  # the whole shape, rows first
                       match=r"rank 2: MpiAllgather 'rows' float32\[5, 3\]"):
        agreement.exchange(gather, 1, (3,), 5)


SAVER_WORKER = """
    import os
    import graphc as gc
    import graphc.distribute as hvd
    hvd.init()
    v = gc.Variable([1.0, 2.0], name="v")
    saver = gc.train.Saver()
    with gc.Session() as sess:
        sess.run(gc.global_variables_initializer())
        directory = os.path.join(os.environ["OUT"], f"r{hvd.rank()}")
        os.mkdir(directory)
        prefix = saver.save(sess, os.path.join(directory, "model"), global_step=3)
        print(hvd.rank(), os.path.basename(prefix))
"""


@needs_mpi
def test_only_rank_0_writes_checkpoints(tmp_path):
    proc = run_job(tmp_path, 2, SAVER_WORKER)
    check_ok(proc)
    assert sorted(proc.stdout.split("\n")[:2]) == ["0 model-3", "1 model-3"]
    assert "checkpoint" in os.listdir(tmp_path / "r0")
    assert gc.train.latest_checkpoint(str(tmp_path / "r0")).endswith("model-3")
    assert os.listdir(tmp_path / "r1") == []


KILLED_WORKER = """
    import os
    import signal
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    hvd.init()
    x = gc.placeholder(gc.float32, [3])
    y = hvd.allreduce(x)
    with gc.Session() as sess:
        sess.run(y, {x: np.ones(3)})
        if hvd.rank() == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # no Python left to report anything
        for _ in range(1000):
            sess.run(y, {x: np.ones(3)})
    print("finished", hvd.rank())
"""


@needs_mpi
def test_a_killed_rank_ends_the_job(tmp_path, collectives_path):
    start = time.monotonic()
    proc = run_job(tmp_path, 3, KILLED_WORKER, timeout=120, env=collectives_path)
    assert proc.returncode != 0
    assert "finished" not in proc.stdout
    assert time.monotonic() - start < 120


def test_graphc_dump_lists_the_collectives(tmp_path, capsys):
    """The fusion buffer, its allreduce and the gathers of a sparse gradient are ops of
    the graph file (with 2 ranks' reduce_gradients, what DistributedOptimizer builds)."""
    from graphc.dump import main as dump_main
    hvd.init()
    (ids, x, labels), loss = model("float32")
    opt = make_optimizer("momentum")
    grads_and_vars = opt.compute_gradients(loss)
    reduced = hvd.reduce_gradients([g for g, _ in grads_and_vars])
    opt.apply_gradients(zip(reduced, [v for _, v in grads_and_vars]))
    gc.train.export_meta_graph(str(tmp_path / "model.meta"))
    assert dump_main([str(tmp_path / "model.meta")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"FusedAllreduce\s+MpiAllreduce\s+float32\s+\[78\]", out), out
    assert re.search(r"Allreduce_values\s+MpiAllgather\s+float32\s+\[\?,4\]", out), out


@pytest.mark.parametrize("backend", BACKENDS)
def test_reused_output_buffers_never_change_a_value_someone_holds(backend):
    """An allreduce writes into its last output array only when nothing holds it: a
    fetched result and a variable assigned from the output keep their values."""
    hvd.init()
    x = gc.placeholder(gc.float64, [3])
    y = hvd.allreduce(x, op=hvd.Sum)
    v = gc.Variable(np.zeros(3), name="v")
    keep = gc.assign(v, y)
    with gc.Session(config=gc.ConfigProto(backend=backend)) as sess:
        sess.run(gc.global_variables_initializer())
        first = sess.run(y, {x: [1.0, 2.0, 3.0]})
        sess.run(keep, {x: [4.0, 5.0, 6.0]})
        for k in range(3):
            second = sess.run(y, {x: [7.0 + k, 8.0, 9.0]})
        np.testing.assert_array_equal(first, [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(second, [9.0, 8.0, 9.0])
        np.testing.assert_array_equal(sess.run(v), [4.0, 5.0, 6.0])


@needs_mpi
def test_distributed_mnist_example_reaches_the_one_process_accuracy(tmp_path):
    """examples/mnist_mlp_distributed.py on 2 processes and on 1: the same accuracy (up to
    the dropout masks each process draws), rank 0's checkpoint alone."""
    example = os.path.join(ROOT, "examples", "mnist_mlp_distributed.py")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    accuracies = []
    for launcher in ([MPIEXEC, "-n", "2"], []):
        out_dir = tmp_path / f"out{len(launcher)}"
        proc = subprocess.run(launcher + [sys.executable, example, "--epochs", "5", "--out",
                                          str(out_dir)], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=JOB_TIMEOUT)
        check_ok(proc)
        processes = 2 if launcher else 1
        assert f"on {processes} processes" in proc.stdout
        assert proc.stdout.count("test accuracy") == 1  # printed by rank 0 only
        accuracies.append(float(re.search(r"^test accuracy: ([\d.]+)", proc.stdout,
                                          re.M).group(1)))
        assert "checkpoint" in os.listdir(out_dir)
    assert min(accuracies) > 0.85
    assert abs(accuracies[0] - accuracies[1]) < 0.03, accuracies


HOOK_WORKER = """
    import numpy as np
    import graphc as gc
    import graphc.distribute as hvd
    hvd.init()
    v = gc.Variable(np.full(3, 10.0 * hvd.rank() + 1.0), name="v")   # differs per rank
    step = gc.train.get_or_create_global_step()
    bump = gc.assign_add(step, 1)
    hooks = [hvd.BroadcastGlobalVariablesHook(0)]
    with gc.train.MonitoredTrainingSession(hooks=hooks) as sess:
        # one string, flushed: one write, which two ranks sharing the pipe cannot interleave
        print(f"{hvd.rank()} {sess.run(v).tolist()} {sess.run(bump)}", flush=True)
"""


@needs_mpi
def test_broadcast_hook_gives_every_rank_rank_0s_variables(tmp_path):
    """Horovod's BroadcastGlobalVariablesHook in a MonitoredTrainingSession: after the
    Session is created, every rank holds rank 0's initial values."""
    proc = run_job(tmp_path, 2, HOOK_WORKER)
    check_ok(proc)
    lines = sorted(line for line in proc.stdout.splitlines() if line[:2] in ("0 ", "1 "))
    assert lines == ["0 [1.0, 1.0, 1.0] 1", "1 [1.0, 1.0, 1.0] 1"], proc.stdout


def test_broadcast_hook_in_a_job_of_one_process():
    hvd.init()
    v = gc.Variable(np.array([2.0, 3.0]), name="v")
    with gc.train.MonitoredTrainingSession(
            hooks=[hvd.BroadcastGlobalVariablesHook(0)]) as sess:
        np.testing.assert_array_equal(sess.run(v), [2.0, 3.0])
