"""Scratch memory of kernels: temporary buffers a kernel needs only while it runs (the
im2col columns of a convolution), placed by the memory planner in the arena like any
intermediate, live during their kernel only.

    scratch_bytes(kernel) -> int | SymDim    the CPU backend's answer to the memory
                                             planner (schedule/memory_planning.py, handed
                                             in by the driver) for each kernel of the
                                             schedule (0: no scratch)
    scratch_storage(program, kernel)         the storage key ("arena", offset) codegen
                                             passes to the kernel, or None when the plan
                                             has no scratch for it (then the kernel
                                             allocates its own)
The plan keeps them apart from its Value buffers: `memory_plan.scratch` =
{kernel index: Buffer}.
"""


def scratch_bytes(kernel):
    if kernel.kind == "conv":
        from graphc.compiler.backends.cpu.conv_kernel import scratch_bytes as conv_scratch
        return conv_scratch(kernel)
    return 0


def scratch_storage(program, kernel):
    plan = getattr(program.module, "memory_plan", None)
    scratch = getattr(plan, "scratch", None)
    if not scratch:
        return None
    index = next((t for t, k in enumerate(program.module.kernels) if k is kernel), None)
    buffer = scratch.get(index)
    if buffer is None:
        return None
    return ("arena", program.arena_key(buffer.offset))
