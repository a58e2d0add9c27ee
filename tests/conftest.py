import os
import shutil
import tempfile

import pytest

import graphc as gc
from graphc.framework.op_def import get_op_def

# the suite verifies the module after every compiler pass and schedule step (a broken
# rewrite fails at the pass that made it); a plain compile verifies it once (pipeline.py).
# Subprocesses started by tests inherit it.
os.environ.setdefault("GRAPHC_VERIFY_PASSES", "1")


@pytest.fixture(autouse=True)
def fresh_default_graph():
    """Each test starts with an empty default graph."""
    gc.reset_default_graph()
    yield


@pytest.fixture(scope="session", autouse=True)
def private_compile_cache(tmp_path_factory):
    """The on-disk compile cache (runtime/compile_cache.py) of a test run is a new temporary
    directory: tests never read entries an earlier run left, and never write into the
    user's ~/.cache. Subprocesses started by tests inherit it through the environment.
    Module- and session-scoped fixtures compile into it; each test has its own below."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPHC_CACHE_DIR", str(tmp_path_factory.mktemp("graphc_cache")))
        yield


@pytest.fixture(autouse=True)
def compile_cache_of_the_test(private_compile_cache, tmp_path_factory, monkeypatch):
    """Each test compiles into a new, empty cache directory, deleted after it: a test never
    reads what an earlier one left, so none depends on the order xdist gives it. The
    cache reads every entry of its directory after each store (to evict past
    GRAPHC_CACHE_MAX_MB): in one directory for the whole run, each compile was slower than
    the last (thousands of entries per worker by the end of the suite)."""
    directory = tempfile.mkdtemp(prefix="graphc_cache_test", dir=tmp_path_factory.getbasetemp())
    monkeypatch.setenv("GRAPHC_CACHE_DIR", directory)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


# The op and gradient suites of the core issue run on every backend: the default compiled
# one, the NumPy reference executor (the oracle itself is checked against the NumPy
# expectations written in these tests) and the GPU target with its kernels run by the
# emulated device (runtime.gpu.EmulatedDevice: the GPU specs, launches, arena and
# device-resident variables, on the host).
BOTH_BACKENDS = {"test_math_ops", "test_array_ops", "test_reduction_ops", "test_matmul_ops",
                 "test_nn_ops", "test_conv_ops", "test_gradients", "test_rnn",
                 "test_control_dependencies", "test_variable_reshape", "test_sparse_gradients",
                 "test_empty_sizes", "test_control_flow", "test_dynamic_rnn", "test_batch_gemms",
                 "test_graph_files_control_flow", "test_tf_control_flow_files",
                 "test_strided_products", "test_loop_gemms"}
# GRAPHC_TEST_BACKENDS=compiled,reference picks a subset (the emulated GPU backend roughly
# doubles the op suites' time: each of its run signatures is compiled to PTX and to its
# CPU emulation).
BACKENDS = [b.strip() for b in os.environ.get(
    "GRAPHC_TEST_BACKENDS", "compiled,reference,gpu_emulated").split(",") if b.strip()]
# A run signature the GPU codegen cannot lower yet runs CPU compiled code with a one-time
# GpuFallbackWarning (graphc/compiled_executor.py counts them; the summary below lists
# them). GRAPHC_GPU_STRICT=1 in the environment makes each such run an error instead.


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "backends(*names): the test runs on each of these of the selected "
                   "backends (GRAPHC_TEST_BACKENDS), in a module not in BOTH_BACKENDS")
    # pytest-xdist registers it too; without xdist the marks are inert
    config.addinivalue_line("markers", "xdist_group(name): under xdist, run on one worker")
    # `-n auto` distributes tests as xdist's `load` does, except that the tests of one
    # xdist_group go to one worker (_group_module_fixture_users), the biggest groups first
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
    if getattr(config, "workerinput", {}).get("loadgroup"):
        config.option.loadgroup = True  # a worker names each test with its group


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """A worker reads --dist from its own command line, not the `loadgroup` chosen above."""
    node.workerinput["loadgroup"] = node.config.getvalue("dist") == "loadgroup"


def pytest_generate_tests(metafunc):
    if metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_BACKENDS:
        metafunc.fixturenames.append("backend")
        metafunc.parametrize("backend", BACKENDS)
        return
    marker = metafunc.definition.get_closest_marker("backends")
    if marker is not None:
        metafunc.fixturenames.append("backend")
        metafunc.parametrize("backend", [b for b in BACKENDS if b in marker.args])


@pytest.hookimpl(tryfirst=True)  # before xdist's worker names tests by their group
def pytest_collection_modifyitems(config, items):
    """A module may leave out some parameter combinations of its cases with
    NOT_ON = [{"param": value, ...}, ...] (each entry saying why): they are deselected,
    so the run's summary counts them."""
    _group_module_fixture_users(items)
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        rules = getattr(item.module, "NOT_ON", ()) if callspec is not None else ()
        if any(all(callspec.params.get(k) == v for k, v in rule.items()) for rule in rules):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _group_module_fixture_users(items):
    """Under xdist, the tests of a module that use a module-scoped fixture of it (an
    exported file, a compiled spec, test_empty_sizes's batch of cases in a child process)
    go to one worker: the fixture is made once, not once per worker given one of them."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is not None and any(d.scope == "module" for defs in
                                    info.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture
def native(monkeypatch):
    """The host kernels of While and If fail but on the reference executor
    (GRAPHC_BACKEND=reference, the oracle a test may compare with): what passes on
    another backend ran in compiled code (the CPU's, or the GPU's kernels launched from
    the host)."""
    for op_type in ("While", "If"):
        op_def = get_op_def(op_type)
        monkeypatch.setattr(op_def, "kernel", _reference_only(op_def.kernel))


def _reference_only(kernel):
    def host_kernel(*args, **kwargs):
        if os.environ.get("GRAPHC_BACKEND") == "reference":
            return kernel(*args, **kwargs)
        raise AssertionError("a While or If ran on the host")
    return host_kernel


@pytest.fixture(autouse=True)
def backend_environment(request, monkeypatch):
    """Sessions of a test parametrized by backend use that backend (GRAPHC_BACKEND).

    Autouse and read from the call's parameters: a fixture named "backend" that
    pytest_generate_tests adds to the fixture names is never set up (the fixture closure
    is computed before that hook runs), so the parametrized runs all used the default
    backend."""
    callspec = getattr(request.node, "callspec", None)
    backend = callspec.params.get("backend") if callspec is not None else None
    if backend is not None:
        monkeypatch.setenv("GRAPHC_BACKEND", backend)
    yield backend


def pytest_terminal_summary(terminalreporter):
    """How many run signatures of the GPU target ran CPU code instead, by kernel kind."""
    from graphc.compiled_executor import GPU_FALLBACKS
    if GPU_FALLBACKS:
        terminalreporter.section("GPU codegen fallbacks to CPU code")
        for kind, count in GPU_FALLBACKS.most_common():
            terminalreporter.write_line(f"{count:5d}  {kind}")
