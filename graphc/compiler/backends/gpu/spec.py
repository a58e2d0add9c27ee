"""The GPU executable spec (docs/gpu_contract.md): the fields every target has
(loops/program.py's Program.spec), the GPU "target", then "ptx", "emulation_ir" and
"launches" (kernel name, pointer args as JSON storage keys, grid, block, shared bytes),
in schedule order, with a region step in place of a While or If (control_flow.py).

The values whose rows are a loop's trip count (compiler/regions.py growable: the stacks a
loop without a bound keeps for its gradient, the arrays it appends to, what kernels after
it compute of them) cannot have a place in the arena, which is sized before the run: the
runtime owns a device buffer for each ("grown": the While grows its stacks row by row, any
other is allocated at its first use, its size known by then), and their keys are
["grown", g]. "run_dims" names the trip counts their dims read, in the syms slots after the
error details, which the runtime sets when each loop leaves."""
import weakref

from graphc.compiler.loops.program import dim_json
from graphc.compiler.regions import GROWABLE_FIRST_ROWS, growable, value_bytes


def gpu_spec(gpu, arch, ptx=True):
    program = gpu.program
    spec = program.spec({"kind": "gpu", "arch": arch}, {})
    spec["ptx"] = gpu.ptx(arch) if ptx else None
    spec["emulation_ir"] = gpu.emulation_ir
    spec["launches"] = steps_json(program, gpu.kernels)
    spec["grown"] = [{"bytes": [dim_json(value_bytes(v)) for v in values],
                      "first_rows": GROWABLE_FIRST_ROWS}
                     for values in _grown(program).values()]
    spec["run_dim_names"] = list(program.run_dims)
    return spec


def steps_json(program, kernels):
    """The spec's steps of `kernels` (of `program`'s schedule): each one's launches, or
    a While's or If's region step (control_flow.RegionKernel)."""
    steps = []
    for kernel in kernels:
        if hasattr(kernel, "bodies"):
            steps.append(kernel.to_json(steps_json))
        else:
            steps.extend(launch_json(program, launch) for launch in kernel.launches)
    return steps


def launch_json(program, launch):
    return {"kernel": launch.name,
            "args": [storage_json(program, key) for key in launch.storages],
            "grid": dim_json(launch.grid),
            "block": int(launch.block),
            "shared_bytes": int(launch.shared_bytes)}


def storage_json(program, key):
    """A Program storage key in the spec's JSON form: ["arena", offset dim], ["var",
    index into spec["variables"]], ["feed" | "fetch" | "const", index]."""
    kind, what = key
    grown = _grown(program)
    if key in grown:
        return ["grown", list(grown).index(key)]
    if kind == "arena":
        return ["arena", dim_json(program.arena_offset(what))]
    if kind == "var":
        return ["var", program.variable_index(what)]
    return [kind, int(what)]


# Program -> its grown values: asked for every storage key of every launch
_GROWN = weakref.WeakKeyDictionary()


def _grown(program):
    """{arena storage key (the value's header in the memory plan): [the growable values
    planned there]} of a program, in the spec's "grown" order. A body's values never
    grow (a loop keeping growing stacks in a body runs on the host, lower.py)."""
    grown = _GROWN.get(program)
    if grown is None:
        grown = {}
        for v in program.buffers:
            if growable(v):
                grown.setdefault(program.storage_of(v), []).append(v)
        _GROWN[program] = grown
    return grown


def grown_index(program, value):
    """The index into spec["grown"] of a growable value's buffer."""
    return list(_grown(program)).index(program.storage_of(value))
