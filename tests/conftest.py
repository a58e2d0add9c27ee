import pytest

import graphc as gc


@pytest.fixture(autouse=True)
def fresh_default_graph():
    """Each test starts with an empty default graph."""
    gc.reset_default_graph()
    yield


@pytest.fixture(scope="session", autouse=True)
def private_compile_cache(tmp_path_factory):
    """The on-disk compile cache (runtime/compile_cache.py) of a test run is a new temporary
    directory: tests never read entries an earlier run left, and never write into the
    user's ~/.cache. Subprocesses started by tests inherit it through the environment."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPHC_CACHE_DIR", str(tmp_path_factory.mktemp("graphc_cache")))
        yield


# The op and gradient suites of the core issue run on both backends: the default compiled
# one and the NumPy reference executor (the oracle itself is checked against the NumPy
# expectations written in these tests).
BOTH_BACKENDS = {"test_math_ops", "test_array_ops", "test_reduction_ops", "test_matmul_ops",
                 "test_nn_ops", "test_conv_ops", "test_gradients", "test_rnn"}


def pytest_generate_tests(metafunc):
    if metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_BACKENDS:
        metafunc.fixturenames.append("backend")
        metafunc.parametrize("backend", ["compiled", "reference"], indirect=True)


@pytest.fixture
def backend(request, monkeypatch):
    monkeypatch.setenv("GRAPHC_BACKEND", request.param)
    return request.param
