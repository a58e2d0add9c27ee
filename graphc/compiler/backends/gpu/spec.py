"""The GPU executable spec (docs/gpu_contract.md): the fields every target has
(loops/program.py's Program.spec), the GPU "target", then "ptx", "emulation_ir" and
"launches" (kernel name, pointer args as JSON storage keys, grid, block, shared bytes),
in schedule order, with a region step in place of a While or If (control_flow.py)."""
from graphc.compiler.loops.program import dim_json


def gpu_spec(gpu, arch, ptx=True):
    program = gpu.program
    spec = program.spec({"kind": "gpu", "arch": arch}, {})
    spec["ptx"] = gpu.ptx(arch) if ptx else None
    spec["emulation_ir"] = gpu.emulation_ir
    spec["launches"] = steps_json(program, gpu.kernels)
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
    if kind == "arena":
        return ["arena", dim_json(program.arena_offset(what))]
    if kind == "var":
        return ["var", program.variable_index(what)]
    return [kind, int(what)]
