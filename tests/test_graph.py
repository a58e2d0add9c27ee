"""Graph construction: names, scopes, collections, control dependencies, lookups."""
import pytest

import graphc as gc


def test_name_uniquing_follows_tf():
    a = gc.constant(1.0)
    b = gc.constant(2.0)
    assert a.name == "Const:0" and b.name == "Const_1:0"
    with gc.name_scope("dense"):
        m1 = gc.identity(a, name="MatMul")
        m2 = gc.identity(a, name="MatMul")
    assert (m1.name, m2.name) == ("dense/MatMul:0", "dense/MatMul_1:0")
    with gc.name_scope("dense"):
        m3 = gc.identity(a, name="MatMul")
    assert m3.name == "dense_1/MatMul:0"


def test_name_scope_reentry_and_root():
    with gc.name_scope("outer") as scope:
        assert scope == "outer/"
        with gc.name_scope(None):
            assert gc.identity(1.0).op.name == "Identity"
    with gc.name_scope("outer/"):
        assert gc.identity(1.0).op.name == "outer/Identity"


def test_tensor_properties_and_lookup():
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 4], name="x")
        y = gc.identity(x, name="y")
    assert gc.get_default_graph() is not g
    assert y.graph is g and y.op.type == "Identity" and y.op.inputs[0] is x
    assert y.get_shape().as_list() == [None, 4] and y.dtype == gc.float32
    assert y.op.outputs == [y]
    assert g.get_tensor_by_name("y:0") is y
    assert g.get_operation_by_name("x") is x.op
    assert [op.name for op in g.get_operations()] == ["x", "y"]
    with pytest.raises(KeyError):
        g.get_tensor_by_name("nope:0")
    with pytest.raises(ValueError):
        g.get_tensor_by_name("x")


def test_tensor_shape_unknowns_and_arithmetic():
    s = gc.TensorShape([None, 3])
    assert s.ndims == 2 and not s.is_fully_defined() and s.as_list() == [None, 3]
    assert s.is_compatible_with([5, 3]) and not s.is_compatible_with([5, 4])
    assert s.merge_with([5, None]).as_list() == [5, 3]
    assert gc.TensorShape(None).ndims is None
    assert (s[1] * 2).value == 6 and (s[0] + 1).value is None
    assert (gc.TensorShape([2]) + gc.TensorShape([3])).as_list() == [2, 3]


def test_collections_and_scoped_lookup():
    with gc.variable_scope("a"):
        va = gc.get_variable("w", [2], initializer=gc.zeros_initializer())
    with gc.variable_scope("b"):
        vb = gc.get_variable("w", [2], trainable=False, initializer=gc.zeros_initializer())
    assert gc.global_variables() == [va, vb]
    assert gc.trainable_variables() == [va]
    assert gc.get_collection(gc.GraphKeys.GLOBAL_VARIABLES, scope="b") == [vb]
    gc.add_to_collection("mine", 3)
    assert gc.get_collection("mine") == [3]


def test_control_dependencies_attach_and_clear():
    a = gc.no_op(name="a")
    one = gc.constant(1.0)
    with gc.control_dependencies([a]):
        b = gc.identity(one)
        with gc.control_dependencies(None):
            c = gc.identity(one)
    assert b.op.control_inputs == [a] and c.op.control_inputs == []
    grp = gc.group(b, c)
    assert set(grp.control_inputs) == {b.op, c.op} and grp.type == "NoOp"


def test_finalize_forbids_new_ops():
    g = gc.Graph()
    with g.as_default():
        gc.constant(1)
        g.finalize()
        with pytest.raises(RuntimeError, match="finalized"):
            gc.constant(2)


def test_tensor_bool_and_cross_graph_errors():
    x = gc.constant(1.0)
    with pytest.raises(TypeError):
        bool(x)
    g = gc.Graph()
    with g.as_default():
        y = gc.constant(2.0)
    with pytest.raises(ValueError, match="same graph"):
        gc.get_default_graph().create_op("Identity", [y])


def test_construction_error_names_op_and_shapes():
    a = gc.placeholder(gc.float32, [3, 4])
    b = gc.placeholder(gc.float32, [5, 6])
    with pytest.raises(ValueError) as e:
        gc.matmul(a, b)
    msg = str(e.value)
    assert "MatMul" in msg and "[3,4], [5,6]" in msg


def test_op_records_user_line():
    x = gc.constant(1.0)
    assert x.op.location[0] == __file__


def test_dtypes():
    assert gc.as_dtype("float") == gc.float32
    assert gc.as_dtype("float64") is gc.float64
    assert gc.as_dtype(int) == gc.int32 and gc.as_dtype(bool) == gc.bool
    assert gc.float32.is_floating and gc.int64.is_integer and not gc.bool.is_integer
    with pytest.raises(TypeError):
        gc.as_dtype("complex256")


def test_default_graph_stack_is_per_thread():
    """As in TF1: a thread's `with g.as_default()` is not another thread's default graph;
    the global default graph is shared."""
    import threading
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def builder():
        g = gc.Graph()
        with g.as_default():
            gc.constant(1.0, name="mine")
            seen["builder"] = gc.get_default_graph() is g
            inside.set()
            done.wait(5)

    t = threading.Thread(target=builder)
    t.start()
    inside.wait(5)
    seen["main"] = gc.get_default_graph()
    done.set()
    t.join()
    assert seen["builder"]
    assert seen["main"] is gc.get_default_graph()
    assert not any(op.name == "mine" for op in seen["main"].get_operations())


def test_lookup_errors_follow_tf():
    """Graph.get_tensor_by_name / get_operation_by_name raise TF's classes: KeyError for a
    name not in the graph, ValueError for a malformed or wrong-kind name, TypeError for a
    non-string."""
    x = gc.constant(1.0, name="x")
    g = gc.get_default_graph()
    assert g.get_tensor_by_name("x:0") is x and g.get_operation_by_name("x") is x.op
    cases = [
        (g.get_tensor_by_name, "nope:0", KeyError,
         "The name 'nope:0' refers to a Tensor which does not exist. The operation, 'nope', "
         "does not exist in the graph."),
        (g.get_tensor_by_name, "x:1", KeyError, "exists but only has 1 outputs"),
        (g.get_tensor_by_name, "x", ValueError,
         "The name 'x' refers to an Operation, not a Tensor. Tensor names must be of the form"),
        (g.get_tensor_by_name, "nope", ValueError,
         "The name 'nope' looks like an \\(invalid\\) Operation name, not a Tensor"),
        (g.get_tensor_by_name, "x:a", ValueError, "looks a like a Tensor name, but is not a valid"),
        (g.get_tensor_by_name, 3, TypeError, "Tensor names are strings \\(or similar\\), not int"),
        (g.get_operation_by_name, "nope", KeyError,
         "The name 'nope' refers to an Operation not in the graph."),
        (g.get_operation_by_name, "x:0", ValueError,
         "Name 'x:0' appears to refer to a Tensor, not a Operation."),
        (g.get_operation_by_name, None, TypeError, "Operation names are strings"),
    ]
    for lookup, name, cls, text in cases:
        with pytest.raises(cls, match=text):
            lookup(name)
