"""The pass pipeline: an ordered list of passes run over a Module.

Each pass is `run(module) -> dict of counts` in its own file under passes/. A pass can be
switched off by name (the `disable` argument, or GRAPHC_DISABLE_PASSES=name1,name2), and
the module is dumped as text after every pass that runs when a dump folder is given (the `dump_dir`
argument, or GRAPHC_DUMP=dir, in the spirit of XLA's --xla_dump_to): the files are
dir/<module name>/NN-<pass>.txt, NN being the pass's place in PASSES and
00-lowered.txt the module as lowered.
The module is verified after every pass, so a broken rewrite fails at the pass that made it.
"""
import os

from graphc.compiler.passes import (algebraic_simplify, constant_folding, cse, fusion,
                                    memory_planning, prune)

PASSES = [
    ("prune", prune.run),
    ("constant_folding", constant_folding.run),
    ("algebraic_simplify", algebraic_simplify.run),
    ("cse", cse.run),
    ("fusion", fusion.run),
    ("memory_planning", memory_planning.run),
]
PASS_NAMES = [name for name, _ in PASSES]


def disabled_passes(disable=None):
    """The pass names switched off by `disable` (a list or comma-separated string) and
    by GRAPHC_DISABLE_PASSES; unknown names are an error."""
    names = set(_names(os.environ.get("GRAPHC_DISABLE_PASSES", "")))
    names |= set(_names(disable) if isinstance(disable, str) else (disable or ()))
    unknown = names - set(PASS_NAMES)
    if unknown:
        raise ValueError(f"Unknown compiler pass(es) {sorted(unknown)}; the passes are "
                         f"{PASS_NAMES}")
    return names


def optimize(module, disable=None, dump_dir=None):
    """Runs the enabled passes in order over `module` (in place).

    Returns {pass name: its counts} for the passes that ran."""
    skip = disabled_passes(disable)
    dump_dir = dump_dir if dump_dir is not None else os.environ.get("GRAPHC_DUMP") or None
    dump = _Dump(dump_dir, module.name) if dump_dir else None
    if dump:
        dump.write(0, "lowered", module)
    stats = {}
    for number, (name, run) in enumerate(PASSES, 1):
        if name in skip:
            continue
        stats[name] = run(module)
        module.verify()
        if dump:
            dump.write(number, name, module)
    return stats


def _names(text):
    return [n.strip() for n in text.split(",") if n.strip()]


class _Dump:
    def __init__(self, root, module_name):
        self.folder = os.path.join(root, module_name)
        os.makedirs(self.folder, exist_ok=True)

    def write(self, number, pass_name, module):
        path = os.path.join(self.folder, f"{number:02d}-{pass_name}.txt")
        with open(path, "w") as f:
            f.write(module.to_text())
