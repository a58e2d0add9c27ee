"""The GPU executable spec (docs/gpu_contract.md): the fields every target has
(loops/program.py's Program.spec), the GPU "target", then "ptx", "emulation_ir" and
"launches" (kernel name, pointer args as JSON storage keys, grid, block, shared bytes),
in schedule order."""
from graphc.compiler.loops.program import dim_json


def gpu_spec(gpu, arch, ptx=True):
    program = gpu.program
    spec = program.spec({"kind": "gpu", "arch": arch}, {})
    spec["ptx"] = gpu.ptx(arch) if ptx else None
    spec["emulation_ir"] = gpu.emulation_ir
    spec["launches"] = [launch_json(program, launch) for launch in gpu.launches]
    return spec


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
