#!/usr/bin/env python3
"""What the op-fact tables cost as live views of the op registry (graphc.framework.op_def.
OpTypes): the optimize pipeline (fusion included) on compile_scale_128's training step,
alternating the views the passes read with frozen snapshots of the same sets.

    python tools/op_fact_view_cost.py [--repeats 6]
"""
import argparse
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, "tools")]

import numpy as np  # noqa: E402
import workloads  # noqa: E402

import graphc as tf  # noqa: E402
from graphc.compiler import ir, lower, optimize  # noqa: E402
from graphc.compiler.loops import program as entry  # noqa: E402
from graphc.compiler.passes import algebraic_simplify  # noqa: E402
from graphc.compiler.schedule import fusion, kernel  # noqa: E402

# the tables the passes and codegen consult per node: (module, names)
TABLES = [(fusion, ["ACTIVATIONS", "RESHAPES", "_REF_READERS", "UPDATE_OPS"]),
          (kernel, ["UPDATE_OPS"]), (ir, ["READ_ONLY_STATE_OPS"]),
          (algebraic_simplify, ["IDENTITY_OPS", "BROADCASTING_BINARY"]),
          (entry, ["UPDATE_OPS", "READING_UPDATE_OPS"])]
VIEWS = {(m.__name__, n): getattr(m, n) for m, names in TABLES for n in names}


def use_tables(frozen):
    for module, names in TABLES:
        for name in names:
            view = VIEWS[(module.__name__, name)]
            setattr(module, name, frozenset(view) if frozen else view)


def optimize_seconds(signature):
    module = lower(*signature)
    start = time.perf_counter()
    optimize(module)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=6)
    args = ap.parse_args()
    sess, fetch, feed = workloads.build("compile_scale_128", tf)
    fetches = fetch if isinstance(fetch, list) else [fetch]
    signature = (list(feed), [f for f in fetches if not isinstance(f, tf.Operation)],
                 [f for f in fetches if isinstance(f, tf.Operation)],
                 [np.shape(feed[t]) for t in feed])
    seconds = {True: [], False: []}
    for _ in range(args.repeats):  # alternating, so that the machine's load hits both
        for frozen in (False, True):
            use_tables(frozen)
            seconds[frozen].append(optimize_seconds(signature))
    use_tables(False)
    print(f"nodes: {len(lower(*signature).nodes)}")
    print(f"optimize (s), median of {args.repeats}: views "
          f"{statistics.median(seconds[False]):.3f}, frozen snapshots "
          f"{statistics.median(seconds[True]):.3f}")


if __name__ == "__main__":
    main()
