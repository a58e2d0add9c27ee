"""Scratch memory of kernels: temporary buffers a kernel needs only while it runs (the
im2col columns of a convolution), placed by the memory planner in the arena like any
intermediate, live during their kernel only.

    scratch_bytes(kernel) -> int | SymDim    the CPU backend's answer to the memory
                                             planner (schedule/memory_planning.py, handed
                                             in by the driver) for each kernel of the
                                             schedule (0: no scratch)
A collective whose result nothing reads receives it there (collectives.py).
A native While or If keeps its bodies' arenas and its loop variables there
(control_flow.py). Codegen asks the Program where a kernel's scratch is
(loops/program.py scratch_of).
The plan keeps them apart from its Value buffers: `memory_plan.scratch` =
{kernel index: Buffer}.
"""

from graphc.compiler.backends.cpu.collectives import COLLECTIVE_LOWERINGS
from graphc.compiler.backends.cpu.collectives import scratch_bytes as collective_scratch
from graphc.compiler.backends.cpu.control_flow import region_scratch_bytes


def scratch_bytes(kernel):
    if kernel.main is not None and kernel.main.regions:  # a While's or If's bodies
        return region_scratch_bytes(kernel)
    if kernel.main is not None and kernel.main.type in COLLECTIVE_LOWERINGS:
        return collective_scratch(kernel)
    if kernel.kind == "conv":
        from graphc.compiler.backends.cpu.conv_kernel import scratch_bytes as conv_scratch
        return conv_scratch(kernel)
    return 0
