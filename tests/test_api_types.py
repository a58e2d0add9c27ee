"""The entry points every TF1 script calls carry type hints that resolve (PEP 561: the
packages ship py.typed), so an editor or type checker can read them."""
import pathlib
import typing

import pytest

import graphc as gc
import runtime
from graphc.dtypes import DType
from graphc.framework.graph import Graph, Operation, Tensor
from graphc.framework.indexed_slices import IndexedSlices
from graphc.framework.tensor_shape import TensorShape
from graphc.variables import Variable
from runtime import file_format

ENTRY_POINTS = [gc.constant, gc.placeholder, gc.placeholder_with_default, gc.gradients,
                gc.Session.__init__, gc.Session.run, gc.Session.close,
                gc.train.Optimizer.minimize, gc.train.Optimizer.compute_gradients,
                gc.train.Optimizer.apply_gradients, gc.export, runtime.load,
                file_format.Model.run, file_format.Model.get_inputs,
                file_format.Model.get_outputs]
NAMES = dict(Variable=Variable, Operation=Operation, Graph=Graph, Tensor=Tensor,
             IndexedSlices=IndexedSlices, DType=DType, TensorShape=TensorShape,
             Session=gc.Session, Model=file_format.Model, TensorInfo=file_format.TensorInfo)
UNTYPED = {"aggregation_method", "device", "sign_with"}  # TF1 takes anything there


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=lambda f: f.__qualname__)
def test_entry_point_is_annotated(fn):
    hints = typing.get_type_hints(fn, localns=NAMES)  # raises if an annotation is broken
    import inspect
    params = [p for p in inspect.signature(fn).parameters if p != "self"]
    missing = [p for p in params if p not in hints and p not in UNTYPED]
    assert not missing, f"{fn.__qualname__}: parameters without a type: {missing}"
    assert "return" in hints or fn.__name__ == "__init__"


def test_packages_ship_py_typed():
    for package in (gc, runtime):
        assert (pathlib.Path(package.__file__).parent / "py.typed").exists()
