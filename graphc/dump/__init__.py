"""graphc-dump: look inside a compiled file or a saved graph.

    graphc-dump model.gcx                      ops, kernels, memory plan, pass counts
    graphc-dump model.gcx --format html -o model.html
    graphc-dump model.gcx --code 0             a kernel's LLVM IR
    graphc-dump model.gcx --memory             the memory plan as a timeline
    graphc-dump graph.json                     a graph saved with gc.train.write_graph

model.py reads a file into a Dump (plain data); text.py, graphviz.py and html_page.py
render it; cli.py is the command line.
"""
from graphc.dump.cli import main  # noqa: F401
from graphc.dump.model import Dump, DumpError, read_dump  # noqa: F401
