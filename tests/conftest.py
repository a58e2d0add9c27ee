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
