"""gc.export: compile the subgraph from some inputs to some outputs into one file.

    gc.export(sess, "model.gcx", inputs={"x": x}, outputs={"probs": probs})
    m = runtime.load("model.gcx"); m.run({"x": batch})["probs"]

The subgraph is lowered and compiled exactly as a Session run compiles it (through
graphc/compiler/driver.py: the passes, the schedule, codegen), after one rewrite: each
variable the subgraph only reads becomes a constant holding its current value in `sess`, so
the passes fold through the weights and the file needs no variable store. Variables the
subgraph assigns to stay variables; their current values are stored in the file as the
starting state the loaded Model carries between runs.

Unknown (None) input dims are compiled symbolically with a hint of _HINT. When the code was
compiled under guards on those dims (size 1 broadcasts differently, so the compiler may assume
a batch is not 1), a second executable with every unknown dim set to 1 is stored too; the
loaded Model runs the first one whose guards the inputs satisfy.

Loops export as they run in a Session's native stage: arrays a loop grows (raw_rnn's
emitted outputs, a dynamic_size TensorArray it appends to, the values a loop with no bound
on its trip count keeps for its gradient) have its trip count for rows, a run dim the
loop's code sets, and live on the heap of the one entry (graphc/compiler/regions.py).
Such an array cannot itself be an output, nor may a guard read its rows: the runtime
sizes outputs and checks guards before the run, before the trip count exists. A Session
then runs that loop on the host between native stages; export raises a ValueError naming
the loop and the op and line that take the rows out (fetch a reduction of them instead).

target="gpu" compiles the same pipeline with the GPU codegen: the file's executables are
GPU specs (PTX for `arch`, the kernels' CPU emulation, the launches), which runtime.load
runs on a GPU through pycuda, or on the host with runtime.load(path, device="emulated").

Besides the code, the file carries what graphc-dump shows: the graph before and after the
passes, each pass's counts and its text dump, the kernel clusters and the memory plan.
"""
from typing import TYPE_CHECKING, Mapping, Optional

import numpy as np

from graphc import errors
from graphc.compiler.driver import GPU_ARCH, compile_module, compile_options, gpu_target
from graphc.compiler.ir import VariableRef
from graphc.compiler.lower import RegionOnHost, lower
from graphc.compiler.pipeline import STAGE_NAMES
from graphc.framework.graph import Tensor
from graphc.framework.op_def import UPDATE_OPS
from graphc.framework.symbolic import SymDim
from runtime import file_format, jit

if TYPE_CHECKING:  # pragma: no cover - the Session imports the compiler, not the reverse
    from graphc.session import Session

__all__ = ["export"]

_HINT = 8            # size assumed for unknown dims while compiling (any size > 1 works)
_ELIDE_ELEMENTS = 16  # arrays bigger than this are summarized in the stored graphs
_UPDATE_OPS = UPDATE_OPS


def export(sess: "Session", path: str, inputs: Mapping[str, Tensor],
           outputs: Mapping[str, Tensor], target: str = "cpu", arch: Optional[str] = None,
           sign_with=None) -> str:
    """Compiles `outputs` as functions of `inputs` (dicts {name: Tensor}) with the current
    variable values of `sess` and writes one compiled file to `path`; returns `path`.
    target: "cpu" (this machine's CPU) or "gpu" (PTX for `arch`, default sm_80).
    sign_with: an Ed25519 private key (cryptography's Ed25519PrivateKey or its 32 raw
    bytes) to sign the file with, for runtime.load(path, trusted_keys=[public key])."""
    if target == "cpu":
        if arch is not None:
            raise ValueError("export: arch is a GPU setting; give target='gpu'")
        code_target = jit.host_target()
    elif target == "gpu":
        code_target = gpu_target(arch or GPU_ARCH)
    else:
        raise ValueError(f"export: unknown target {target!r}; 'cpu' or 'gpu'")
    in_names, feeds = _named_tensors(sess, inputs, "inputs")
    out_names, fetches = _named_tensors(sess, outputs, "outputs")
    if not fetches:
        raise ValueError("export: outputs is empty")
    shapes = [_hint_shape(t, _HINT) for t in feeds]
    main, state = _compile(sess, feeds, fetches, shapes, code_target, with_debug=True)
    specs = [main]
    if main["guards"] and any(None in t.shape.as_list() for t in feeds):
        ones = [_hint_shape(t, 1) for t in feeds]
        specs.append(_compile(sess, feeds, fetches, ones, code_target, with_debug=False)[0])
    signature = {
        "inputs": [{"name": n, "tensor": f["name"], "dtype": f["dtype"], "dims": f["dims"]}
                   for n, f in zip(in_names, main["feeds"])],
        "outputs": [{"name": n, "tensor": f["name"], "dtype": f["dtype"], "dims": f["dims"]}
                    for n, f in zip(out_names, main["fetches"])]}
    return file_format.write(path, signature, specs, state, code_target, sign_with=sign_with)


def _named_tensors(sess, named, what):
    if not isinstance(named, dict):
        raise TypeError(f"export: {what} must be a dict {{name: Tensor}}, got "
                        f"{type(named).__name__}")
    names, tensors = [], []
    for name, t in named.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"export: {what} names must be non-empty strings, got {name!r}")
        t = getattr(t, "_as_graph_element", lambda t=t: t)()
        if hasattr(t, "_snapshot"):   # a Variable fetched as its value
            t = t._snapshot
        if not isinstance(t, Tensor):
            raise TypeError(f"export: {what}[{name!r}] must be a Tensor, got {t!r}")
        if t.graph is not sess.graph:
            raise ValueError(f"export: {what}[{name!r}] ({t.name}) is not in the session's "
                             "graph")
        names.append(name)
        tensors.append(t)
    if what == "inputs" and len(set(tensors)) != len(tensors):
        raise ValueError("export: the same tensor is given for two inputs")
    return names, tensors


def _hint_shape(t, hint):
    dims = t.shape.as_tuple_or_none()
    if dims is None:
        raise ValueError(f"export: input {t.name} has unknown rank; give its placeholder a "
                         "shape (None for dims known only at run time)")
    return tuple(hint if d is None else d for d in dims)


def _compile(sess, feeds, fetches, shapes, target, with_debug):
    """(spec, state to store) of one executable for feed shapes `shapes`."""
    from graphc.compiler.backends.cpu import LoweringError  # llvmlite loads when first needed
    where = " for the GPU" if target.get("kind") == "gpu" else ""
    try:
        module = lower(feeds, fetches, [], shapes)
    except RegionOnHost as e:
        # a Session runs such a loop on the host between native stages; a file is one
        raise ValueError(f"export: the subgraph cannot be one native executable{where}: "
                         f"{e}; a Session runs that loop on the host, a file cannot") from None
    state = _freeze_read_only_variables(module, sess._state.variables)
    before = module.to_dict() if with_debug else None
    # never from the spec cache: the debug info describes the stages this compile ran
    options = compile_options(keep_dumps=with_debug, profile=False, cache=False)
    try:
        result = compile_module(module, target, options)
    except LoweringError as e:
        raise ValueError(f"export: the subgraph cannot be compiled{where} yet: {e}") from None
    spec = result.spec
    spec["debug"] = _debug_info(module, before, result.pass_stats, result.dumps or {},
                                with_debug)
    state.update(_random_states(sess, spec, state))
    return spec, state


def _random_states(sess, spec, state):
    """Starting states of the random ops whose state variables (key and run counter,
    graphc/framework/random_state.py) lowering declared: the Session's current ones, so
    the exported model goes on drawing where the Session is."""
    from graphc.compiler.regions import random_ops_within
    from graphc.framework.random_state import random_op_name, random_state
    out = {}
    randoms = None
    for v in spec["variables"]:
        name = v["name"]
        if name in state or random_op_name(name) is None:
            continue
        if randoms is None:  # a loop body's random ops are not the graph's
            randoms = {op.name: op for op in random_ops_within(sess.graph.get_operations())}
        op = randoms[random_op_name(name)]
        out[name] = np.array(random_state(sess._state, op.name, op.attrs.get("seed"),
                                          op.attrs.get("seed2")))
    return out


def _freeze_read_only_variables(module, values):
    """Turns every read of a variable the module never writes (and only reads through
    VariableV2 nodes) into a Const of its current value; returns {name: value} of the
    variables that stay."""
    written = {n.inputs[0].name for n in module.nodes
               if n.type in _UPDATE_OPS and isinstance(n.inputs[0], VariableRef)}
    ref_users = {v.name for n in module.nodes for v in n.inputs if isinstance(v, VariableRef)}
    for node in list(module.nodes):
        if node.type != "VariableV2" or node.name in written or node.name in ref_users:
            continue
        value = _current_value(values, node.name, node)
        const = module.add_constant(value, before=node, name=node.name, location=node.location)
        module.replace_all_uses(node.outputs[0], const)
        module.remove_nodes([node])
    used = module.variables_used()
    for name in list(module.variables):
        if name not in used:
            del module.variables[name]
    return {name: np.array(values[name]) for name in module.variables if name in values}


def _current_value(values, name, node):
    if name not in values:
        raise errors.FailedPreconditionError(
            None, None, f"export: attempting to use uninitialized value {name}; run the "
                        f"variables' initializer (or restore a checkpoint) before exporting\n"
                        f"\t [[{node.describe()}]]")
    return values[name]


# ------------------------------------------------------------------ debug info
def _debug_info(module, before, counts, pass_texts, full):
    info = {"pass_counts": counts, "pass_order": STAGE_NAMES,
            "kernels": [_kernel_info(i, k) for i, k in enumerate(getattr(module, "kernels", []))],
            "memory_plan": _memory_plan_info(getattr(module, "memory_plan", None)),
            "symbol_hints": _symbol_hints(module)}
    if full:
        info["graph_before"] = _elide_arrays(before)
        info["graph_after"] = _elide_arrays(module.to_dict())
        info["pass_texts"] = pass_texts
    return info


def _dim(d):
    return d.to_json() if isinstance(d, SymDim) else d


def _kernel_info(number, kernel):
    return {"name": kernel.name, "kind": kernel.kind, "function_prefix": f"kernel_{number}_",
            "nodes": [n.id for n in kernel.nodes],
            "inputs": [v.ref for v in kernel.inputs],
            "outputs": [v.ref for v in kernel.outputs],
            "updates": kernel.updated_variables,
            "dims": None if kernel.dims is None else [_dim(d) for d in kernel.dims]}


def _memory_plan_info(memory_plan):
    if memory_plan is None:
        return None
    return {"arena_bytes": _dim(memory_plan.arena_bytes),
            "stats": {k: _dim(v) for k, v in memory_plan.stats.items()},
            "buffers": [{"value": v.ref, "name": v.name, "dtype": v.dtype.name,
                         "dims": [_dim(d) for d in v.dims], "offset": _dim(b.offset),
                         "size": _dim(b.size), "live": list(b.live),
                         "inplace_of": None if b.inplace_of is None else b.inplace_of.ref}
                        for v, b in memory_plan.buffers.items()]}


def _symbol_hints(module):
    hints = {}
    for p in module.params:
        for d in p.outputs[0].dims:
            if isinstance(d, SymDim) and len(d.symbols()) == 1:
                (name,) = d.symbols()
                if d.to_json() == SymDim.symbol(name, 0).to_json():
                    hints[name] = d.hint
    return hints


def _elide_arrays(module_dict):
    """The module dict with big array attrs replaced by {"elided": {dtype, shape}}: the
    values are in the code's constants; the graph only needs to say what they were."""
    if module_dict is None:
        return None
    for node in module_dict["nodes"]:
        node["attrs"] = {k: _elide(v) for k, v in node["attrs"].items()}
    return module_dict


def _elide(value):
    if isinstance(value, list):
        return [_elide(v) for v in value]
    if isinstance(value, dict):
        if "ndarray" in value and int(np.prod(value["shape"])) > _ELIDE_ELEMENTS:
            return {"elided": {"dtype": np.dtype(value["dtype"]).name, "shape": value["shape"]}}
        return {k: _elide(v) for k, v in value.items()}
    return value
