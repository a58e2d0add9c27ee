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
    lines = ["digraph graphc {", "  rankdir=TB; nodesep=0.15; ranksep=0.3;",
             "  node [shape=box, fontsize=10, fontname=\"Helvetica\", margin=\"0.05,0.02\"];",
             "  edge [fontsize=8, arrowsize=0.6];"]
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


LABEL_CHARS = 30


def _short(text):
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def _node(op):
    """A short label (the name's last part, the type, dtype and shape cut to one line);
    the full name and shapes are the tooltip: a long scoped name or a many-output shape in
    the label makes every box of its rank that wide."""
    label = f"{_short(op.name.rsplit('/', 1)[-1])}\n{_short(op.type)}\n" \
            f"{_short(op.dtype + op.shape)}"
    tooltip = f"{op.name}\n{op.type} {op.dtype}{op.shape}"
    return f"n{op.id} [label={_quote(label)}, tooltip={_quote(tooltip)}];"


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
