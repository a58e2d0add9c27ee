import pytest

import graphc as gc


@pytest.fixture(autouse=True)
def fresh_default_graph():
    """Each test starts with an empty default graph."""
    gc.reset_default_graph()
    yield
