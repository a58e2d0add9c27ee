"""Registers, spills and shared memory of the GPU kernels of a few representative graphs.

    python tools/ptxas_report.py [--arch sm_80 sm_90] [--ptxas PATH]

Compiles an MLP training step, a CNN training step, a softmax, a layer norm and row
argmax/sums in float64 and int64 (64-bit warp shuffles) and Cumsums (the scan template)
for the GPU target (graphc.compiler.backends.gpu), assembles their PTX with `ptxas -v` for each
arch, and prints one line per kernel: registers, spill stores/loads (bytes), shared
memory (bytes), flagging kernels that spill. Exit status 1 when ptxas fails or a kernel
spills."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import graphc as gc  # noqa: E402
from graphc.compiler.backends.gpu import generate_gpu  # noqa: E402
from graphc.compiler.driver import gpu_target, schedule_module  # noqa: E402
from graphc.compiler.lower import lower  # noqa: E402


def mlp_step():
    x = gc.placeholder(gc.float32, [None, 784])
    labels = gc.placeholder(gc.int32, [None])
    h = gc.layers.dense(x, 256, activation=gc.nn.relu)
    logits = gc.layers.dense(h, 10)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    return [x, labels], [loss], [gc.train.AdamOptimizer(1e-3).minimize(loss)], \
        [(64, 784), (64,)]


def cnn_step():
    x = gc.placeholder(gc.float32, [None, 28, 28, 1])
    labels = gc.placeholder(gc.int32, [None])
    h = gc.layers.conv2d(x, 32, 3, padding="same", activation=gc.nn.relu)
    h = gc.layers.max_pooling2d(h, 2, 2)
    h = gc.layers.conv2d(h, 64, 3, padding="same", activation=gc.nn.relu)
    h = gc.layers.max_pooling2d(h, 2, 2)
    logits = gc.layers.dense(gc.layers.flatten(h), 10)
    loss = gc.reduce_mean(gc.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    return [x, labels], [loss], [gc.train.GradientDescentOptimizer(0.1).minimize(loss)], \
        [(64, 28, 28, 1), (64,)]


def softmax():
    x = gc.placeholder(gc.float32, [None, 1000])
    return [x], [gc.nn.softmax(x)], [], [(128, 1000)]


def layer_norm():
    x = gc.placeholder(gc.float32, [None, 1024])
    mean, var = gc.nn.moments(x, axes=[1], keep_dims=True)
    return [x], [(x - mean) * gc.rsqrt(var + 1e-5)], [], [(128, 1024)]


def wide_rows():
    d = gc.placeholder(gc.float64, [None, 1000])
    i = gc.placeholder(gc.int64, [None, 1000])
    return [d, i], [gc.argmax(d, axis=1), gc.reduce_sum(d, axis=1), gc.argmin(i, axis=1)], \
        [], [(128, 1000), (128, 1000)]


def scans():
    x = gc.placeholder(gc.float32, [None, 1000])
    d = gc.placeholder(gc.float64, [None, 1000])
    i = gc.placeholder(gc.int32, [None, 1000])
    return [x, d, i], [gc.cumsum(x, axis=1), gc.cumsum(d, axis=0, exclusive=True, reverse=True),
                       gc.cumsum(i, axis=1, exclusive=True)], [], \
        [(128, 1000), (128, 1000), (128, 1000)]


GRAPHS = {"mlp_step": mlp_step, "cnn_step": cnn_step, "softmax": softmax,
          "layer_norm": layer_norm, "wide_rows": wide_rows, "scans": scans}


def gpu_module(build):
    g = gc.Graph()
    with g.as_default():
        feeds, fetches, targets, shapes = build()
        variable_shapes = {v.op.name: tuple(v.shape.as_list())
                           for v in gc.global_variables()}
        module = lower(feeds, fetches, targets, shapes, variable_shapes=variable_shapes)
    schedule_module(module, gpu_target())
    return generate_gpu(module)  # the GpuModule, not its spec: the report reads each kernel


_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\w+)'")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def ptxas_usage(ptxas, ptx, arch):
    """[(kernel, registers, spill stores, spill loads, shared bytes)] from ptxas -v."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        out = subprocess.run([ptxas, f"-arch={arch}", "-v", src, "-o",
                              os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"ptxas {arch} failed:\n{out.stderr}")
    rows, current, spills = [], None, (0, 0)
    for line in out.stderr.splitlines():
        if m := _ENTRY.search(line):
            current = m.group(1)
        elif m := _SPILL.search(line):
            spills = (int(m.group(1)), int(m.group(2)))
        elif (m := _USED.search(line)) and current:
            rows.append((current, int(m.group(1)), *spills, int(m.group(2) or 0)))
            current = None
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", nargs="+", default=["sm_80", "sm_90"])
    parser.add_argument("--ptxas", default=shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas")
    args = parser.parse_args(argv)
    if not os.path.exists(args.ptxas):
        print(f"ptxas not found ({args.ptxas}); pass --ptxas", file=sys.stderr)
        return 2
    spilled = 0
    print(f"{'graph':<11} {'arch':<6} {'kernel':<58} {'regs':>4} {'spill st/ld':>11} "
          f"{'smem':>6}")
    for name, build in GRAPHS.items():
        gpu = gpu_module(build)
        for arch in args.arch:
            for kernel, regs, st, ld, smem in ptxas_usage(args.ptxas, gpu.ptx(arch), arch):
                flag = "  SPILLS" if st or ld else ""
                spilled += bool(flag)
                print(f"{name:<11} {arch:<6} {kernel[:58]:<58} {regs:>4} {st:>5}/{ld:<5} "
                      f"{smem:>6}{flag}")
    print(f"{spilled} kernel(s) spill" if spilled else "no kernel spills")
    return 1 if spilled else 0


if __name__ == "__main__":
    sys.exit(main())
