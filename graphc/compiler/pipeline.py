"""The optimization pipeline: the ordered list of switchable passes run over a Module.

Each pass is `run(module) -> dict of counts` in its own file under passes/. A pass can be
switched off by name (the `disable` argument, or GRAPHC_DISABLE_PASSES=name1,name2); the
schedule stage that follows (graphc/compiler/schedule/) always runs, but takes its two
switches from the same list: "fusion" (off: one kernel per op) and "memory_planning" (off:
no buffer shares memory with another). The module is dumped as text after every pass and
schedule step that runs when a dump is asked for (ModuleDumps: a folder, the `dump_dir`
argument or GRAPHC_DUMP=dir in the spirit of XLA's --xla_dump_to, and/or the texts kept in
memory): the files are dir/<module name>/NN-<name>.txt, NN being the place in STAGE_NAMES
and 00-lowered.txt the module as lowered.
The module is verified once after the passes; with GRAPHC_VERIFY_PASSES=1 (the test suite
sets it) after every pass and schedule step instead, so that a broken rewrite fails at the
pass that made it. Each verification walks the whole module: ten of them per compile were a
tenth of a deep MLP's compile time.
"""
import os

from graphc.compiler.ir import verify_every_stage
from graphc.compiler.passes import algebraic_simplify, batch_gemms, constant_folding, cse, \
    hoist_loop_gemms, hoist_loop_invariants, prune, shared_transposes, sink_loop_gemms
from graphc.compiler.schedule import STEP_NAMES

PASSES = [
    ("prune", prune.run),
    ("constant_folding", constant_folding.run),
    ("algebraic_simplify", algebraic_simplify.run),
    ("batch_gemms", batch_gemms.run),
    ("hoist_loop_gemms", hoist_loop_gemms.run),
    ("sink_loop_gemms", sink_loop_gemms.run),
    ("hoist_loop_invariants", hoist_loop_invariants.run),
    ("cse", cse.run),
    ("shared_transposes", shared_transposes.run),
]
PASS_NAMES = [name for name, _ in PASSES]
# what a dump numbers and graphc-dump lists, in run order
STAGE_NAMES = PASS_NAMES + list(STEP_NAMES)


def disabled_passes(disable=None):
    """The switch names turned off by `disable` (a list or comma-separated string) and
    by GRAPHC_DISABLE_PASSES; unknown names are an error."""
    names = set(_names(os.environ.get("GRAPHC_DISABLE_PASSES", "")))
    names |= set(_names(disable) if isinstance(disable, str) else (disable or ()))
    unknown = names - set(STAGE_NAMES)
    if unknown:
        raise ValueError(f"Unknown compiler pass(es) {sorted(unknown)}; the passes are "
                         f"{STAGE_NAMES}")
    return names


def optimize(module, disable=None, dump_dir=None, dumps=None):
    """Runs the enabled optimization passes in order over `module` (in place); the
    schedule stage is not one of them (graphc/compiler/driver.py runs both).

    dumps: a ModuleDumps recording the module after each pass (default: one writing to
    `dump_dir` or GRAPHC_DUMP when either is set). Returns {pass name: its counts} for
    the passes that ran."""
    skip = disabled_passes(disable)
    if dumps is None:
        folder = dump_dir if dump_dir is not None else os.environ.get("GRAPHC_DUMP") or None
        dumps = ModuleDumps(module.name, folder)
    dumps.record("lowered", module)
    stats = {}
    each = verify_every_stage()
    for name, run in PASSES:
        if name in skip:
            continue
        stats[name] = run(module)
        if each:
            module.verify()
        dumps.record(name, module)
    if not each:
        module.verify()
    return stats


def _names(text):
    return [n.strip() for n in text.split(",") if n.strip()]


class ModuleDumps:
    """The module's text after each stage: written to `folder`/<module name>/ when a
    folder is given, kept in `texts` {stage name: text} when `keep`."""

    def __init__(self, module_name, folder=None, keep=False):
        self.folder = os.path.join(folder, module_name) if folder else None
        self.texts = {} if keep else None
        if self.folder:
            os.makedirs(self.folder, exist_ok=True)

    @property
    def active(self):
        return self.folder is not None or self.texts is not None

    def record(self, stage, module):
        if not self.active:
            return
        text = module.to_text()
        if self.texts is not None:
            self.texts[stage] = text
        if self.folder:
            number = 0 if stage == "lowered" else STAGE_NAMES.index(stage) + 1
            with open(os.path.join(self.folder, f"{number:02d}-{stage}.txt"), "w") as f:
                f.write(text)
