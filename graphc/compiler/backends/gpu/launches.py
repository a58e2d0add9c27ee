"""The launch layout of a kernel: which loop nests each GPU launch runs, and its grid.

A kernel's values are viewed exactly as the CPU loop kernel views them (KernelViews over
loops.LOOP_RULES, expressions emitted by kernels.scalar_ops), and its store targets come
from loops.emitter.kernel_targets. Two things differ from the CPU's nests:
- every nest holds the targets of one dims only (`gpu_nests`): a keep-dims row result
  and a scalar total get nests of their own, so a nest's parallel loops are never
  limited by a small target sharing it; column sums are not turned into accumulating
  folds (the CPU's cache-friendly form): each output element reduces its own column;
- nests are grouped into launches (`launch_groups`): a nest that reads or writes what
  an earlier nest of the same group writes (or writes what it reads) starts a new
  launch, since no barrier spans the whole grid inside a launch.
"""
from graphc.compiler.loops.emitter import Nest, place_target, targets_by_level
from graphc.compiler.loops.expr import dims_key, loaded_storages
from graphc.compiler.loops.views import LoweringError

MAX_BLOCKS = 4096      # grid-stride loops: more blocks than this only add scheduling


class GpuCodegenNotImplemented(LoweringError):
    """A kernel the GPU codegen cannot lower (what it is is in the message)."""


class LaunchLayout:
    """One launch: its nests (or template), storages (pointer args), grid and block."""

    def __init__(self, name, template, views, nests, storages, grid, block):
        self.name = name
        self.template = template   # callable(t, program, layout, scalar_ops): emits the body
        self.views = views
        self.nests = nests
        self.storages = storages
        self.grid = grid           # int | SymDim
        self.block = block
        self.shared_bytes = 0
        self.details = {}          # template-specific data


def gpu_nests(views, targets):
    """One nest per distinct target dims (placed targets, folds and scatters: per loop
    dims)."""
    nests = {}
    for t in targets:
        placed = t.place is not None
        dims = t.loop_dims if placed else t.dims
        key = (placed, dims_key(dims))
        nest = nests.get(key)
        if nest is None:
            nest = nests[key] = Nest(views, list(dims))
        if placed:
            place_target(t, nest.index)
        else:
            t.index = list(nest.index)
            t.expr = t.value_of(t.index)
            t.position = views.x.linear(t.index, t.dims)
        nest.targets.append(t)
    # largest first, as on the CPU: stores of one value into several buffers stay in order
    return sorted(nests.values(), key=lambda n: -len(n.dims))


def walk(roots):
    """Every expr under `roots`, each once."""
    seen, stack = set(), list(roots)
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack.extend(e.args)


def nest_roots(nest):
    return [e for t in nest.targets for e in (t.expr, t.position)]


def loads(nest):
    out = {t.storage for t in nest.targets if t.accumulate}
    out |= {s for e in walk(nest_roots(nest)) for s in loaded_storages(e)}
    return out


def stores(nest):
    return {t.storage for t in nest.targets}


def launch_groups(nests):
    """Consecutive nests grouped so that no nest depends on another of its group."""
    groups, reads, writes = [], set(), set()
    for nest in nests:
        r, w = loads(nest), stores(nest)
        if groups and not ((r | w) & writes or w & reads):
            groups[-1].append(nest)
        else:
            groups.append([nest])
            reads, writes = set(), set()
        reads |= r
        writes |= w
    return groups


def flat_depth(nest):
    """The loop level down to which the nest's loops are run in parallel (flattened into
    one grid-stride loop), or -1 when nothing is stored below the top: the shallowest
    level where a target is stored or a reduction is hoisted (one thread computes a row
    statistic once and then the row's elements)."""
    levels = {v.id: i for i, v in enumerate(nest.vars) if v is not None}
    candidates = list(targets_by_level(nest))
    for e in walk(nest_roots(nest)):
        if e.kind in ("reduce", "argreduce") and e.free and e.free <= set(levels):
            candidates.append(max(levels[v] for v in e.free))
    return min(candidates, default=-1)


def loaded_elsewhere(nest):
    """Whether a buffer the nest stores is loaded at a position other than the one stored
    in the same iteration (a scan reading its previous row): then its iterations depend
    on each other and one thread runs the nest."""
    stored = {}
    for t in nest.targets:
        if not t.accumulate:
            stored.setdefault(t.storage, set()).add(id(t.position))
    return any(s in stored and id(e.args[0]) not in stored[s]
               for e in walk(nest_roots(nest)) for s in loaded_storages(e))


def parallel_elements(nest):
    """The number of parallel iterations of a nest (a dim: int or SymDim); 1 if serial."""
    depth = flat_depth(nest)
    if depth < 0 or loaded_elsewhere(nest):
        return 1
    total = 1
    for v, d in zip(nest.vars[:depth + 1], nest.dims):
        if v is not None:
            total = total * d
    return total


def blocks_for(elements, block, cap=MAX_BLOCKS):
    """ceil(elements / block) blocks, at least 1 and at most `cap` (grid-stride loops
    cover the rest)."""
    blocks = (elements + (block - 1)) // block
    if isinstance(blocks, int):
        return max(1, min(blocks, cap))
    return dim_min(blocks.maximum(1), cap)


def dim_max(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    return a.maximum(b) if not isinstance(a, int) else b.maximum(a)


def dim_min(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return a + b - dim_max(a, b)
