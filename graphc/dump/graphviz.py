"""Graphviz output of graphc-dump: the graph with each fused kernel as a cluster."""
import shutil
import subprocess

from graphc.dump.model import DumpError
from graphc.dump.text import stage_ops


def _quote(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(d, stage=None):
    ops = stage_ops(d, stage)
    by_name = {op.name: op for op in ops}
    kernels = d.kernels if ops is d.stages.get("after") else []
    lines = ["digraph graphc {", "  rankdir=TB;", "  node [shape=box, fontsize=10, "
             "fontname=\"Helvetica\"];", "  edge [fontsize=8];"]
    placed = set()
    for i, k in enumerate(kernels):
        members = [op for op in ops if i in op.kernels and op.id not in placed]
        lines.append(f"  subgraph cluster_{i} {{")
        title = f"kernel {i}: {k['name']} ({k['kind']})"
        lines.append(f"    label={_quote(title)};")
        lines.append("    style=rounded; color=\"#3465a4\";")
        for op in members:
            lines.append(f"    {_node(op)}")
            placed.add(op.id)
        lines.append("  }")
    for op in ops:
        if op.id not in placed:
            lines.append(f"  {_node(op)}")
    for op in ops:
        for src in op.inputs:
            control = src.startswith("^")
            name = src[1:] if control else src
            source = by_name.get(name) or by_name.get(name.rsplit(":", 1)[0])
            if source is None:
                continue
            style = " [style=dashed]" if control else ""
            lines.append(f"  n{source.id} -> n{op.id}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node(op):
    label = f"{op.name}\n{op.type} {op.dtype}{op.shape}"
    return f"n{op.id} [label={_quote(label)}];"


def to_svg(dot_text):
    dot = shutil.which("dot")
    if dot is None:
        raise DumpError("--format svg needs Graphviz's `dot`, which is not installed "
                        "(e.g. apt-get install graphviz); --format dot writes the graph for "
                        "it, --format html needs nothing extra")
    done = subprocess.run([dot, "-Tsvg"], input=dot_text, capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise DumpError(f"dot failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout
