"""While and If on the GPU: launches of each body's kernels driven from the host, on device
buffers.

The bodies of a native While or If (graphc/compiler/regions.py) are modules scheduled and
planned by the driver like any other; their kernels become launches here as the enclosing
module's do (their names prefixed by the node's kernel), emitted into the same PTX and
emulation modules, with the enclosing Program's symbols, variables, constants and error
sites. The spec gets one *region step* in place of the node's launches (docs/gpu_contract.md):

  {"while": name, ...}: the loop variables live in two device buffers each that swap roles
    every iteration (the body reads one and writes the other; no copy), but for a
    TensorArray flow the body writes one row of in place (written_in_place); the cond writes its
    predicate next to the run's status word, and the runtime reads those 8 bytes back once
    per iteration: the only device->host copy of the loop. Stacks kept for the gradient
    (sized by maximum_iterations, lower.py) get row k written by iteration k; those a
    product after the loop reads (regions.zeroed_past_trips) get the rows past the trip
    count zeroed by the runtime ("zeroed_past_trips"). A loop
    whose stacks would grow during the run (regions.py: no bound on its trip count) runs
    on the host: growing device buffers between launches is not built; so does one whose
    loop variables' dims change between iterations (regions.carried_axes), which the
    CPU target compiles, with its ragged stacks and its backward loop (regions.py).
    A While whose cond and body allow it also carries a "device_loop": one kernel that
    runs the whole loop on the device, chosen by the runtime per binding (device_loop.py).
  {"if": name, ...}: the runtime reads the predicate's byte back and runs one branch's
    launches, which write the node's outputs and that branch's saved intermediates; the
    other branch's saved ones are zeroed on the device.

A body's launches name their buffers in the body's own frame: ["feed", i] its parameter i,
["fetch", j] its output j, ["arena", offset] its arena (a part of the node's scratch);
variables and constants are the enclosing executable's. The node's scratch (memory planning
asks scratch_bytes) holds each body's arena, the two buffers per loop variable and a row
per stack no kernel reads (While), or a slot per output no kernel reads (If).
"""

from graphc.compiler.backends.gpu.device_loop import device_loop
from graphc.compiler.backends.gpu.spec import grown_index, storage_json
from graphc.compiler.lower import LoweringError, RegionOnHost
from graphc.compiler.regions import branch_outputs, carried_axes, growable, heap_loop_vars, \
    row_bytes, scratch_parts, trips_symbol, value_bytes, written_in_place, zeroed_past_trips
from graphc.compiler.loops.program import Program, dim_json
from graphc.framework.op_def import RAGGED_SAVED

_ALIGN = 256  # bytes: cudaMalloc's alignment, which every buffer of a launch may assume


class RegionKernel:
    """A While or If kernel: its node, where its inputs and outputs live, and each body's
    Program with its kernels (GpuKernel or RegionKernel, in schedule order)."""

    launches = ()  # its bodies' launches are theirs (all_launches)

    def __init__(self, program, kernel, name, kernels_of):
        """kernels_of(body Program, prefix, in_place) -> the body's kernels; in_place: the
        loop variables the body writes in the buffer it reads them from."""
        self.name = name
        self.kind = kernel.main.type
        self.node = node = kernel.main
        if node.type == "While" and (carried_axes(node) or heap_loop_vars(node) or
                                     node.attrs.get(RAGGED_SAVED)):
            raise RegionOnHost(f"{node.describe()} has loop variables whose dims change "
                               "between iterations, keeps values of those ragged or is the "
                               "gradient of such a loop (device buffers growing between "
                               "launches are not built): it runs on the host", node.name)
        _check_growable_stacks(program, node)
        self.program = program
        self.in_place = written_in_place(node.regions["body"], node.attrs["num_loop_vars"]) \
            if node.type == "While" else set()
        self.bodies = {}
        try:
            for key, region in node.regions.items():
                body = Program(region, enclosing=program)
                in_place = self.in_place if key == "body" else frozenset()
                self.bodies[key] = (body, kernels_of(body, f"{name}_{key}_", in_place))
        except LoweringError as e:  # a body's kernel without GPU code: the node on the host
            raise RegionOnHost(str(e), node.name) from None
        self.inputs = [program.storage_of(v) for v in node.value_inputs]
        self.stores = {v: program.stores_of(v) for v in kernel.outputs}
        self.scratch = program.scratch_of(kernel)
        self.device_loop = device_loop(self)

    def scratch_offsets(self):
        """{part: its offset into the node's scratch} (regions.scratch_parts)."""
        return part_offsets(self.node)

    def all_launches(self):
        for _, kernels in self.bodies.values():
            for k in kernels:
                yield from all_launches(k)
        if self.device_loop is not None:
            yield self.device_loop

    def to_json(self, steps_json):
        """The region step (module docstring); steps_json(program, kernels) -> steps."""
        program, node = self.program, self.node
        offsets = part_offsets(node)
        step = {"inputs": [storage_json(program, k) for k in self.inputs],
                "outputs": [[storage_json(program, k) for k in self.stores.get(v, ())]
                            for v in node.outputs],
                "scratch": None if self.scratch is None else storage_json(program,
                                                                          self.scratch),
                "scratch_bytes": dim_json(region_scratch_bytes(node))}
        for key, (body, kernels) in self.bodies.items():
            step[key] = {"arena": dim_json(offsets[("arena", key)]),
                         "arena_bytes": dim_json(body.arena_bytes),
                         "params": len(body.module.params),
                         "fetches": [_body_fetch(body, j, v)
                                     for j, v in enumerate(body.module.outputs)],
                         "steps": steps_json(body, kernels)}
        if node.type == "While":
            n = node.attrs["num_loop_vars"]
            step["while"] = self.name
            step["vars"] = [{"bytes": dim_json(value_bytes(v)), "a": dim_json(offsets[("a", i)]),
                             "b": dim_json(offsets[("b", i)]), "in_place": i in self.in_place}
                            for i, v in enumerate(node.outputs[:n])]
            zeroed = zeroed_past_trips(node)
            step["stacks"] = [self._stack_json(v, offsets, v in zeroed)
                              for v in node.outputs[n + 1:]]
            if any(growable(v) for v in node.outputs):
                step["trips_dim"] = program.run_dims.index(trips_symbol(node.name))
            if self.device_loop is not None:
                step["device_loop"] = self.device_loop.to_json()
        else:
            step["if"] = self.name
            step["slots"] = [dim_json(offsets[("slot", i)]) for i in range(len(node.outputs))]
            step["bytes"] = [dim_json(value_bytes(v)) for v in node.outputs]
            for key, outputs in branch_outputs(node).items():
                step[key]["outputs"] = outputs
        return step


    def _stack_json(self, stack, offsets, zeroed):
        """A stack's sizes and where its rows are: sized before the run ("bytes"), or
        grown by the runtime ("grown": its buffer's index, spec.py; null when no kernel
        reads the stack: iteration k writes the scratch row)."""
        out = {"row_bytes": dim_json(row_bytes(stack)),
               "row": dim_json(offsets[("row", stack.index)]),
               "zeroed_past_trips": zeroed}
        if growable(stack):
            out["bytes"] = None
            out["grown"] = grown_index(self.program, stack) if self.stores.get(stack) \
                else None
        else:
            out["bytes"] = dim_json(value_bytes(stack))
        return out


def _check_growable_stacks(program, node):
    """RegionOnHost unless each stack `node` grows (regions.py) is stored in the one
    buffer the runtime grows (spec.py "grown"), or nowhere: a second storage (a fetch, a
    copy) would be sized before the run."""
    for v in node.outputs:
        keys = program.stores_of(v) if growable(v) else ()
        if len(keys) > 1 or any(key[0] != "arena" for key in keys):
            raise RegionOnHost(f"{node.describe()} keeps values for its gradient or the "
                               "arrays it appends to where the runtime would read them: "
                               "it runs on the host", node.name)


def all_launches(kernel):
    """The launches of a kernel, a region kernel's bodies' included, in emission order."""
    if isinstance(kernel, RegionKernel):
        yield from kernel.all_launches()
    else:
        yield from kernel.launches


def _body_fetch(body, j, value):
    """Where the runtime finds body output j after the body's launches: its kernel wrote
    it (source "kernel", index j), or a copy of nbytes from another output, a parameter,
    a variable or a constant (the CPU's copy_fetch)."""
    source = body.fetch_source(value)
    return {"source": source["source"], "index": int(source["index"]),
            "bytes": dim_json(value_bytes(value))}


def region_scratch_bytes(node):
    """The scratch bytes of a While or If kernel: the sum of its parts (regions.scratch_parts)."""
    return sum((size for _, size in scratch_parts(node, _ALIGN)), 0)


def part_offsets(node):
    """{part: its offset into the node's scratch}."""
    out, offset = {}, 0
    for what, size in scratch_parts(node, _ALIGN):
        out[what] = offset
        offset = offset + size
    return out
