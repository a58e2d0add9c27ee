"""fusion: group the module's nodes into kernels and order them (`module.kernels`).

A step of the schedule stage (schedule/__init__.py), always run: codegen needs the kernels.
With fuse=False every computed node is its own kernel (the same rules for what is computed).

The module's nodes are not changed; the pass sets `module.kernels`, the schedule: a list
of graphc.compiler.schedule.kernel.Kernel in execution order. What is not computed by any kernel:
Parameters, Consts and variable reads (kernels read the variable's buffer when they run),
NoOps, and pure nodes whose values are only read for their dims (Shape(x) does not need
x computed when x's dims are known).

Groups, in this order:
1. gemm/conv epilogues: a MatMul/BatchMatMulV2/Conv2D* node takes its first user if that
   is a BiasAdd, or an Add of a broadcast vector (dims [n] or [1,..,1,n], n its last
   dim), then that result's first user if it is an activation (Relu, Sigmoid, Tanh...).
2. loop kernels: producer/consumer pairs of loop groups (elementwise, index, reduction,
   random and update nodes) merge while the result is a valid loop nest (below), with
   no cycle in the kernel graph and the variable order kept. A cheap group
   (elementwise/index nodes only) used by several kernels is first offered to all of
   them: if each can compute it itself, it is duplicated into each and never written
   to memory; otherwise it merges into one of them like any other group. A consumer
   node copied into several kernels offers each of them to its producers (earliest
   first). Then loop groups reading the same stored value of their merged loop's dims
   merge ("siblings"): the value is read once.
2a. reshapes as aliases: a reshape (alone in its group, aliasable as in 4.) read both by
   loop groups and by other kernels (a product) is copied into each loop group (an index
   remap there) and stays a group of its own, never merged, that becomes an alias (4.):
   merged into one loop kernel it was written there, a copy of the whole tensor for the
   product (attention's dq, dk, dv reshaped for their weight and bias gradients).
2b. strided products (strided_products=True, a backend whose GEMM takes strided views:
   the CPU's): a Transpose keeping its last axis last (op_kinds.view_perm) whose
   value only batched products read (is_batched_product), with the reshapes feeding it
   (read by nothing else), is copied into each of those products' kernels and computed by
   none: they read its input with the transpose's strides (attention's heads split). A
   batched product whose only user is such a Transpose takes it: the product is written
   through the transpose's strides into its buffer (the heads merge). Both were a copy
   kernel moving the whole tensor (8 per transformer training step).
2c. recomputation in readers: a loop kernel reading an elementwise value that another loop
   kernel computes recomputes it instead, when that takes at most MAX_RECOMPUTE
   elementwise nodes of the reader's loop dims, all read by those two kernels only, from
   values the reader reads anyway or no kernel computes (constants, feeds, variables):
   the value is then never written, and the reader reads nothing new. A training step's
   backward recomputes GELU's tanh from the GELU input and layer norm's normalized input
   from x - mean and the rsqrt, which it reads anyway: each was a tensor written by the
   forward and read back. A node of the producer that only the reader read moves there.
3. scatter updates: a row scatter (ScatterUpdate/ScatterAdd/ScatterSub) takes the loop
   group producing its updates if that is cheap, read by nothing else and does not read
   the scattered variable: the scatter's loop computes each element as it stores it.
   Everything else is one node per kernel ("opaque", lone gemm/conv).
4. aliases: a reshape (Reshape, ExpandDims, Squeeze, Identity, StopGradient) left alone
   in its kernel (its users are gemm/conv/opaque kernels) moves no data in row-major
   order, so it gets no kernel: `module.aliases` maps its value to its input's, whose
   buffer its readers read (memory planning keeps that buffer alive for them). Not for
   fetched values (a fetch array of their own) nor for variable reads and updates (a
   later update of the variable would show through).

A valid loop nest over dims D (the kernel's `dims`):
- every reduction reads an input of dims D. A reduction whose result is used inside the
  kernel ("hoisted") reduces trailing axes k..rank-1 (the same k for all of them): the
  codegen computes it once per iteration of the outer k loops, before the inner loops
  that use it (softmax's row max and sum, layer norm's mean and variance). Softmax,
  LogSoftmax and the sparse cross entropy are hoisted row reductions by themselves. A
  reduction whose result is only written ("final") may reduce any axes (BiasAddGrad's
  column sums accumulate over the loop). A reduction over no axis is an identity.
- a window op (pooling, op_kinds) reads its inputs at many positions: in its kernel they
  are computed outside it, or by index remaps only (a reshape of the incoming gradient),
  never by arithmetic that each window would recompute.
- what is computed from a hoisted result must index it by outer loop indices only: only
  elementwise ops and BroadcastTo (right-aligned broadcasting) and reshapes that add or
  drop 1-dims, whose non-1 axes stay bound to the same loop axes ("aligned" values).
- no path of data edges inside the kernel is longer than MAX_CHAIN nodes.
- outputs: values of dims D, aligned values at an outer level (written once per outer
  iteration), or final reductions. Other nodes (e.g. a transpose or a broadcast operand
  of other dims) are computed on demand wherever they are read.
- variable order (TF1 refs: a variable is read when its reader runs): a kernel may update
  variable v and read v's old value only if everything it computes from that read (and
  from the update's own value) is elementwise over D without broadcasting that value, so
  that element i is read before element i is written; it never reads v after the update
  and holds at most one update of v. Between kernels the order of reads and updates of
  each variable is the module's (edges of the kernel graph).
Guarantees: every node needed for the outputs and roots is computed by a kernel scheduled
after the kernels computing its inputs; no gemm/conv/reduction/random/update node is
computed twice; the kernel graph is acyclic; each variable is read and written in the
module's order.
"""
import heapq

from graphc.compiler.ir import Value, VariableRef
from graphc.compiler.op_kinds import (ROW_NORMALIZERS, is_batched_product, kind_of,
                                      reduction_axes, shape_only_inputs, view_perm)
from graphc.compiler.regions import run_dim_loop, updated_in_regions
from graphc.compiler.schedule.kernel import Kernel, dim_is, dims_equal
from graphc.framework.op_def import ROW_WRITE_OPS, UPDATE_OPS, OpTypes
from graphc.framework.symbolic import set_during_run

# The op facts fusion reads, as views of the registry (declared where each op is defined)
ACTIVATIONS = OpTypes("epilogue")  # may follow a MatMul/Conv2D in its epilogue
RESHAPES = OpTypes("aliases_input")  # input 0's elements in order: alone, an alias
# ops reading a variable through a ref input without updating it
_REF_READERS = OpTypes(lambda d: bool(d.ref_inputs) and not d.updates_variable)
# row scatters into a variable, by the input slot their codegen (loops/scatter.py) reads
# once per element of its loop: their updates
SCATTER_UPDATES = {"ScatterUpdate": 2, "ScatterAdd": 2, "ScatterSub": 2}
LOOP_KINDS = frozenset({"elementwise", "index", "reduction", "window", "random", "state"})
CHEAP_KINDS = frozenset({"elementwise", "index"})
# The longest path of nodes a loop kernel computes. Codegen views a value through its
# inputs' views, recursively, so one kernel over an unrolled recurrence (static_rnn's
# cell state over 512 steps) would nest past Python's recursion limit; a cut costs
# one store and one load per element, nothing next to 64 ops of work.
MAX_CHAIN = 64
# The most nodes a loop kernel recomputes to avoid reading one value (step 2c): GELU's
# tanh from its input is 5; each saves a write and a read of a whole tensor, which in
# a memory-bound loop cost more than a few arithmetic ops per element.
MAX_RECOMPUTE = 8


def run(module, fuse=True, strided_products=False):
    """Sets module.kernels and module.aliases; fuse=False (the "fusion" switch off): one
    kernel per node, in module order, and no aliases. strided_products: the backend's
    batched products read and write strided views (step 2b)."""
    fusion = Fusion(module, fuse, strided_products)
    kernels = fusion.kernels()
    module.kernels = kernels
    module.aliases = fusion.aliases
    computed = {n for k in kernels for n in k.nodes}
    copies = sum(len(k.nodes) for k in kernels) - len(computed)
    return {"kernels": len(kernels),
            "nodes_fused": sum(len(k.nodes) for k in kernels if len(k.nodes) > 1) - copies,
            "duplicated": copies, "groups_searched": fusion.searched}


def data_inputs(node):
    """The (slot, Value) inputs whose data `node` reads."""
    skip = shape_only_inputs(node)
    return [(i, v) for i, v in enumerate(node.inputs) if isinstance(v, Value) and i not in skip]


class _Group:
    def __init__(self, gid, kind, nodes, main=None, facts=None):
        self.gid = gid
        self.kind = kind
        self.nodes = set(nodes)
        self.main = main
        self.facts = facts
        # outputs_of(nodes) while group_of holds, as a set; None: not known. Unlike the
        # facts it changes when a node's copies come or go (_forget_outputs)
        self.outputs = None


class _Facts:
    """What fusion asks of a group's nodes that combines on a merge without walking
    them: `chain`, an upper bound on the nodes of one path of data edges among them
    (None: unknown, the loop check measures it); `plain`, no reduction, window or
    variable update among them (nothing hoisted, aligned or ordered: the outputs alone
    fix the loop); `cheap`, elementwise and index nodes only, none fetched (offered for
    duplication). Walking the merged nodes per candidate merge made a 32-step LSTM's
    fusion quadratic in its step kernels' size (half of fusion's time)."""

    __slots__ = ("chain", "plain", "cheap")

    def __init__(self, chain, plain, cheap):
        self.chain = chain
        self.plain = plain
        self.cheap = cheap

    def joined(self, other, one_crossing):
        """The facts of both groups' nodes together. one_crossing: a path of data edges
        among them crosses from one group to the other at most once (then its nodes are
        a path in each, one after the other)."""
        chain = self.chain + other.chain if one_crossing and None not in (
            self.chain, other.chain) else None
        return _Facts(chain, self.plain and other.plain, self.cheap and other.cheap)


class Fusion:
    def __init__(self, module, fuse=True, strided_products=False):
        self.module = module
        self.fuse = fuse
        self.strided_products = strided_products
        self.pos = {n: i for i, n in enumerate(module.nodes)}
        self.fetched = set(module.outputs)
        # fusion asks a node's data inputs and kind in every check of every candidate
        # merge (80k times for a 32-step LSTM, most of fusion's time, each asking the op
        # registry and every input's dims); the nodes do not change while it runs
        self._data_inputs, self._kinds = {}, {}
        live = self._data_live()
        self.snapshots = self._snapshot_reads(live)
        self.compute = [n for n in module.nodes if n in live and self._is_compute(n)]
        computed = set(self.compute)
        self.users = {}  # Value -> compute nodes reading its data (once each)
        for n in self.compute:
            for _, v in self.data_in(n):
                us = self.users.setdefault(v, [])
                if n not in us:
                    us.append(n)
        self.edges, self.strict = self._node_edges(computed)
        self.groups = {}
        self.group_of = {}
        self.searched = 0  # groups visited by the searches for paths (its cost)


        self.pinned_aliases = set()  # step 2a's reshape groups: aliases, never merged
        for n in self.compute:
            kind = self.kind(n)
            gkind = kind if kind in ("gemm", "conv") else "loop" if kind in LOOP_KINDS \
                else "opaque"
            self._new_group(gkind, [n], n if gkind != "loop" else None)
        self._rebuild_edges()
        self._renumber()

    def data_in(self, node):
        """data_inputs(node), asked once per node."""
        found = self._data_inputs.get(node)
        if found is None:
            found = self._data_inputs[node] = data_inputs(node)
        return found

    def kind(self, node):
        """kind_of(node), asked once per node."""
        found = self._kinds.get(node)
        if found is None:
            found = self._kinds[node] = kind_of(node)
        return found

    # --------------------------------------------------------------- analysis
    def _is_compute(self, n):
        kind = self.kind(n)
        if kind in ("source", "control"):
            return False
        return n.type != "VariableV2" or n in self.snapshots

    def _data_live(self):
        m = self.module
        live = set()
        stack = [v.node for v in m.outputs] + list(m.roots)
        while stack:
            n = stack.pop()
            if n in live:
                continue
            live.add(n)
            stack.extend(v.node for _, v in self.data_in(n))
            stack.extend(n.control_deps)
        return live

    def _variable_events(self, live):
        """{variable name: [(position, 'read'|'update', node)]} in module order; reads
        are VariableV2 nodes and ref readers."""
        events = {}
        for n in self.module.nodes:
            if n not in live:
                continue
            if n.type == "VariableV2":
                events.setdefault(n.name, []).append((self.pos[n], "read", n))
            elif n.type == "UninitializedNames":
                for name in self.module.variables:
                    events.setdefault(name, []).append((self.pos[n], "read", n))
            region_updates = updated_in_regions(n) if n.regions else ()
            for v in n.inputs:
                if isinstance(v, VariableRef):
                    what = "update" if n.type in UPDATE_OPS or v.name in region_updates \
                        else "read"
                    events.setdefault(v.name, []).append((self.pos[n], what, n))
        return events

    def _snapshot_reads(self, live):
        """VariableV2 reads that must copy the variable: something uses the value after
        the variable's next update (or it is fetched and an update follows)."""
        snaps = set()
        for evs in self._variable_events(live).values():
            for i, (p, what, n) in enumerate(evs):
                if what != "read" or n.type != "VariableV2":
                    continue
                nxt = next((q for q, w, _ in evs[i + 1:] if w == "update"), None)
                if nxt is None:
                    continue
                v = n.outputs[0]
                late = v in self.fetched or any(
                    self.pos[u] > nxt for u in v.uses if u in live)
                if late:
                    snaps.add(n)
        return snaps

    def _node_edges(self, computed):
        """Ordering edges between compute nodes: [(a, b, is_data)] meaning a's kernel runs
        no later than b's; and strict pairs that may not share a kernel."""
        edges = []
        strict = {}

        def add(a, b, data=False, must_split=False):
            if a is b:
                return
            edges.append((a, b, data))
            if must_split:
                strict.setdefault(a, set()).add(b)
                strict.setdefault(b, set()).add(a)
        dep_sets = {}
        for n in self.compute:
            producers = [v.node for _, v in self.data_in(n) if v.node in computed]
            for p in producers:
                add(p, n, data=True)
            for d in self._control_deps(n):
                if d in computed and not self._implied(d, producers, dep_sets):
                    add(d, n)
        for loop, n in self._run_dim_readers(computed):
            add(loop, n)
        # other state (iterators, samplers): side effects keep their module order
        others = [n for n in self.compute if n.has_side_effect and
                  self.kind(n) not in ("random", "state")]
        for a, b in zip(others, others[1:]):
            add(a, b, must_split=True)
        live = computed | {n for n in self.module.nodes if n.type == "VariableV2"}
        for evs in self._variable_events(live).values():
            updates = [(p, n) for p, w, n in evs if w == "update"]
            for (_, u1), (_, u2) in zip(updates, updates[1:]):
                add(u1, u2, must_split=True)
            for p, what, n in evs:
                if what != "read":
                    continue
                prev = next((u for q, u in reversed(updates) if q < p), None)
                nxt = next((u for q, u in updates if q > p), None)
                if n in computed:     # a snapshot copy or a ref reader: its own node
                    readers, split = [n], True
                else:                 # the variable's buffer, read by the users' kernels
                    readers, split = self.users.get(n.outputs[0], []), False
                for r in readers:
                    if prev is not None:
                        add(prev, r, must_split=True)
                    if nxt is not None:
                        add(r, nxt, must_split=split)
        return edges, strict

    def _run_dim_readers(self, computed):
        """(While, node) for each node whose dims read the While's trip count (a run dim,
        regions.py) without reading its data: Shape or Range of a stack the loop grew, a
        OnesLike of it. The count exists only once the While's kernel has run, and no
        data edge says so."""
        loops = {n.name: n for n in self.compute if n.type == "While" and n in computed}
        if not loops or not self.module.run_dims:
            return []
        pairs = []
        for n in self.compute:
            values = [v for v in n.inputs if isinstance(v, Value)] + list(n.outputs)
            names = {run_dim_loop(d.to_json()) for v in values for d in v.dims
                     if set_during_run(d)}
            pairs += [(loops[name], n) for name in names
                      if name in loops and loops[name] is not n]
        return pairs

    def _implied(self, dep, producers, dep_sets):
        """Whether a computed producer of n's data is `dep` or waits for it itself: then
        n's own edge from dep orders nothing more. Every op of a gradient built under
        control_dependencies(update_ops) waits for every update; without this, those
        ops x updates edges made the kernel graph dense (ResNet-50: 380k edges)."""
        for p in producers:
            if p not in dep_sets:
                dep_sets[p] = set(self._control_deps(p))
            if p is dep or dep in dep_sets[p]:
                return True
        return False

    def _control_deps(self, n):
        """n's control deps, looking through NoOps (left when prune is disabled)."""
        out, stack = [], list(n.control_deps)
        while stack:
            d = stack.pop()
            if d.type == "NoOp":
                stack.extend(d.control_deps)
            elif d not in out:
                out.append(d)
        return out

    # ---------------------------------------------------------------- groups
    def _new_group(self, kind, nodes, main=None):
        gid = self._next_gid = getattr(self, "_next_gid", -1) + 1
        g = self.groups[gid] = _Group(gid, kind, nodes, main, self._facts_of(nodes))
        for n in nodes:
            self.group_of.setdefault(n, set()).add(gid)
        return g

    def _facts_of(self, nodes):
        # a path of data edges visits each node once: their number bounds its length
        return _Facts(len(nodes), all(self.plain_node(n) for n in nodes),
                      all(self.kind(n) in CHEAP_KINDS and
                          not any(v in self.fetched for v in n.outputs) for n in nodes))

    def plain_node(self, node):
        return self.kind(node) not in ("reduction", "window") and node.type not in UPDATE_OPS

    def _joined_facts(self, a, b):
        """The _Facts of groups a's and b's nodes together (b's bound those of any part
        of b). A path among them crosses between the groups once when they share no node
        and their kernel-graph edges go one way: a data edge from a node of one to a
        node of the other is an edge of the kernel graph."""
        ga, gb = self.groups[a], self.groups[b]
        one_way = not (b in self.succ[a] and a in self.succ[b])
        return ga.facts.joined(gb.facts, one_way and ga.nodes.isdisjoint(gb.nodes))

    def _rebuild_edges(self):
        """The kernel graph: ga -> gb for each node edge a -> b with a in ga, b in gb
        (not for a data edge whose producer gb computes itself, a duplicated node)."""
        self.succ = {g: set() for g in self.groups}
        self.pred = {g: set() for g in self.groups}
        self.out_edges, self.in_edges = {}, {}
        for a, b, data in self.edges:
            self.out_edges.setdefault(a, []).append((b, data))
            self.in_edges.setdefault(b, []).append((a, data))
        for gid in self.groups:
            self._add_group_edges(gid)

    def _update_edges(self, changed, removed=(), joined=False):
        """Recomputes the kernel graph's edges at the groups whose nodes changed, and
        drops removed groups: a merge touches its groups' node edges only, where
        rebuilding the whole graph per merge was quadratic in the graph. joined: the one
        removed group's nodes joined the one changed group, whose edges are then the
        union of theirs (_join_edges)."""
        if joined:
            (a,), (b,) = changed, removed
            self._join_edges(a, b)
            return
        for gid in list(changed) + list(removed):
            for s in self.succ.pop(gid, ()):
                self.pred[s].discard(gid)
            for p in self.pred.pop(gid, ()):
                self.succ[p].discard(gid)
        for gid in changed:
            self.succ[gid], self.pred[gid] = set(), set()
        for gid in changed:
            self._add_group_edges(gid)

    def _add_group_edges(self, gid):
        nodes = self.groups[gid].nodes
        succ, pred = self.succ[gid], self.pred[gid]
        for n in nodes:
            for b, data in self.out_edges.get(n, ()):
                for gb in self.group_of[b]:
                    if gb != gid and not (data and n in self.groups[gb].nodes):
                        succ.add(gb)
                        self.pred[gb].add(gid)
            for a, data in self.in_edges.get(n, ()):
                if data and a in nodes:
                    continue
                for ga in self.group_of[a]:
                    if ga != gid:
                        pred.add(ga)
                        self.succ[ga].add(gid)

    # A topological numbering of the groups (`self.order`: every edge goes to a higher
    # number) bounds the searches for paths: a path from u to v only visits groups
    # numbered below v's, so a merge explores the groups between its two, not all that
    # follow (which made fusion quadratic in a deep graph). Merges keep the numbering
    # valid as Pearce and Kelly's dynamic topological order does.
    def _renumber(self):
        self.order = {g: i for i, g in enumerate(self._topological_order())}

    def _between(self, start, step, inside, limit=None):
        """Groups reached from `start` along `step` (succ or pred) through groups for
        which inside(group number) holds; `start` not included. None once more than
        `limit` are reached."""
        seen, stack = set(), [start]
        while stack:
            for g in step[stack.pop()]:
                if g not in seen and inside(self.order[g]):
                    if limit is not None and len(seen) == limit:
                        return None
                    seen.add(g)
                    stack.append(g)
        return seen

    def _creates_cycle(self, a, b):
        """True when a path joins a and b other than their direct edge. Such a path runs
        through groups numbered between theirs; it is searched from both ends at once, a
        group a side at a time, and a side that runs out settles it: the cost is about
        twice the smaller side. A producer merging into a far consumer (a bias gradient
        into its update at the end of the step) reaches the whole rest of the backward
        pass forwards but few groups backwards; searching forwards alone made fusion
        quadratic in depth."""
        u, v = sorted((a, b), key=self.order.__getitem__)
        first, last = self.order[u], self.order[v]
        forward = _Search(self.succ, u, v, lambda g: self.order[g] < last)
        backward = _Search(self.pred, v, u, lambda g: self.order[g] > first)
        try:
            # the side with fewer neighbours first: it may run out before the other
            # lists a concatenation's many
            sides = sorted([(forward, backward), (backward, forward)],
                           key=lambda pair: len(pair[0].next[pair[0].start]))
            while True:
                for side, other in sides:
                    if not side.stack or not other.stack:
                        return False
                    if side.step(other):
                        return True
        finally:
            self.searched += len(forward.seen) + len(backward.seen)

    def _repair_numbering(self, groups):
        """Makes the numbering valid again after `groups` got new edges, or returns False
        (the numbering untouched) when those edges made a cycle. Edges against the
        numbering all touch `groups`; the groups numbered from the lowest head to the
        highest tail of those edges are sorted again among themselves, on their own
        numbers: an edge leaving that window goes up and one entering it comes from
        below, so the rest stays valid, and a cycle (through an edge against the
        numbering) cannot leave the window. Sorting all groups per duplication was a
        tenth of a ResNet-50 step's fusion."""
        order = self.order
        against = [(p, g) for g in groups for p in self.pred[g] if order[p] >= order[g]] + \
            [(g, s) for g in groups for s in self.succ[g] if order[g] >= order[s]]
        if not against:
            return True
        lo, hi = min(order[b] for _, b in against), max(order[a] for a, _ in against)
        window = {g for g in self.groups if lo <= order[g] <= hi}
        sequence = self._sorted_among(window, order)
        if len(sequence) < len(window):
            return False
        for g, number in zip(sequence, sorted(order[g] for g in window)):
            order[g] = number
        return True

    def _renumber_merged(self, a, b):
        """Numbers for a's and b's merged group (it keeps id a), as Pearce and Kelly's
        order does for a new edge: the merged group takes the earlier one's place, after
        the groups between them that reach the later one ("before") and before the
        groups reached from the earlier one that are numbered below the last of those
        ("after"); these are numbered again among themselves, on their own numbers and
        the earlier one's. Every other group keeps its number, and "after" stops at the
        last of "before": all the groups reached from the earlier one (the rest of a
        backward pass) were renumbered per merge before.

        Or the mirror image, the merged group in the later one's place, when fewer
        groups between them are reached from the earlier one than reach the later one:
        a group taking many pieces one merge at a time (a concatenation of n pieces,
        each piece reaching only it) had all the pieces not yet merged in "before" at
        each merge, n^2 in all. The two searches run to a doubling limit, so a merge
        costs about the smaller one."""
        u, v = sorted((a, b), key=self.order.__getitem__)
        lo, hi = self.order[u], self.order[v]
        limit = 8
        while True:
            before = self._between(v, self.pred, lambda o: lo < o < hi, limit)
            if before is not None:
                top = max((self.order[g] for g in before), default=lo)
                # none: u's successors all follow u (a concatenation's many, unlisted)
                after = self._between(u, self.succ, lambda o: o < top) if before else set()
                place = lo
                break
            after = self._between(u, self.succ, lambda o: lo < o < hi, limit)
            if after is not None:
                bottom = min((self.order[g] for g in after), default=hi)
                before = self._between(v, self.pred, lambda o: o > bottom) if after \
                    else set()
                place = hi
                break
            limit *= 2
        self.searched += len(before) + len(after)
        numbers = sorted([place] + [self.order[g] for g in after | before])
        sequence = sorted(before, key=self.order.__getitem__) + [a] + \
            sorted(after, key=self.order.__getitem__)
        del self.order[b]
        for g, number in zip(sequence, numbers):
            self.order[g] = number

    def _split_required(self, nodes_a, nodes_b):
        # strict pairs are few and symmetric: look only at the smaller side's nodes that
        # have one (every candidate merge walked the larger group's nodes)
        small, large = (nodes_a, nodes_b) if len(nodes_a) <= len(nodes_b) else \
            (nodes_b, nodes_a)
        return any(not self.strict[n].isdisjoint(large)
                   for n in self.strict.keys() & small)

    def _merge(self, a, b, facts=None, outputs=None):
        """Merges group b into group a; facts, outputs: the merged group's, if known."""
        facts = facts or self._joined_facts(a, b)
        self._renumber_merged(a, b)
        ga, gb = self.groups[a], self.groups.pop(b)
        # a node in both loses a copy: it may be an output's producer now
        shared = not ga.nodes.isdisjoint(gb.nodes)
        joinable = not shared and not self._exclusions_change(ga.nodes, gb.nodes)
        ga.nodes |= gb.nodes
        ga.facts = facts
        ga.outputs = None if shared or outputs is None else set(outputs)
        for n in gb.nodes:
            s = self.group_of[n]
            s.discard(b)
            s.add(a)
        self._update_edges([a], removed=[b], joined=joinable)

    def _exclusions_change(self, nodes_a, nodes_b):
        """Whether joining b's nodes to a's drops an edge that _add_group_edges would keep
        apart: a data edge between the two whose one end is also in a third group (a
        duplicated node), which then lies in the edge's target group. Walks b's edges."""
        for n in nodes_b:
            for m, data in self.out_edges.get(n, ()):
                if data and m in nodes_a and (len(self.group_of[n]) > 1
                                              or len(self.group_of[m]) > 1):
                    return True
            for m, data in self.in_edges.get(n, ()):
                if data and m in nodes_a and (len(self.group_of[n]) > 1
                                              or len(self.group_of[m]) > 1):
                    return True
        return False

    def _join_edges(self, a, b):
        """a's edges after b joined it: the union of theirs. Recomputing them from the
        merged group's nodes (_update_edges) cost its size per merge, quadratic for a
        group that takes its many inputs one merge at a time (a concatenation of n
        pieces)."""
        for step, back in ((self.succ, self.pred), (self.pred, self.succ)):
            moved = step.pop(b)
            for g in moved:
                back[g].discard(b)
                if g != a:
                    back[g].add(a)
            step[a] |= moved
            step[a] -= {a, b}

    def _sole_group(self, n):
        gs = self.group_of[n]
        return next(iter(gs)) if len(gs) == 1 else None

    def _try_merge(self, a, b):
        if a in self.pinned_aliases or b in self.pinned_aliases:
            return False
        ga, gb = self.groups[a], self.groups[b]
        if self._split_required(ga.nodes, gb.nodes) or self._creates_cycle(a, b):
            return False
        facts, outputs = self._joined_facts(a, b), None
        if ga.kind == "loop" and gb.kind == "loop":
            nodes = ga.nodes | gb.nodes
            outputs = self._outputs_together(a, b, nodes)
            if self.loop_dims(nodes, facts=facts, outputs=outputs) is None:
                return False
        self._merge(a, b, facts, outputs)
        return True

    # -------------------------------------------------------------- epilogues
    def _fuse_epilogues(self):
        for n in self.compute:
            if self.kind(n) not in ("gemm", "conv"):
                continue
            g = self._sole_group(n)
            cur = n.outputs[0]
            bias = next((u for u in self.users.get(cur, []) if _is_bias_add(u, cur)), None)
            if bias is not None and self._take(g, bias):
                cur = bias.outputs[0]
            act = next((u for u in self.users.get(cur, [])
                        if u.type in ACTIVATIONS and u.inputs[0] is cur), None)
            if act is not None:
                self._take(g, act)

    # -------------------------------------------------------- strided products
    def _fuse_product_views(self):
        for n in self.compute:
            if view_perm(n) is not None:
                self._view_as_operand(n)
        for n in self.compute:
            if is_batched_product(n):
                users = self.users.get(n.outputs[0], [])
                if len(users) == 1 and view_perm(users[0]) is not None and \
                        users[0].inputs[0] is n.outputs[0] and \
                        n.outputs[0] not in self.fetched:
                    self._take(self._sole_group(n), users[0])

    def _view_as_operand(self, t):
        """Copies Transpose t (and the reshapes feeding it) into the kernels of the batched
        products reading its value, when only they read it (step 2b)."""
        value = t.outputs[0]
        readers = self.users.get(value, [])
        if value in self.fetched or not readers or not self._alone(t) or any(
                not is_batched_product(r) or value not in r.inputs[:2] or
                self._sole_group(r) is None for r in readers):
            return
        chain = [t]
        x = t.inputs[0]
        while x.node in self.group_of and x.node.type in RESHAPES and \
                self._alone(x.node) and x not in self.fetched and \
                self.users.get(x, []) == [chain[-1]]:
            chain.append(x.node)
            x = x.node.inputs[0]
        old = {self._sole_group(n) for n in chain}
        targets = {self._sole_group(r) for r in readers}
        for n in chain:
            self.group_of[n] = set(targets)
        self._forget_outputs(chain)
        for gid in targets:
            g = self.groups[gid]
            g.nodes.update(chain)
            g.facts = g.facts.joined(self._facts_of(chain), one_crossing=False)
        for gid in old:
            del self.groups[gid]
            del self.order[gid]
        self._update_edges(targets, removed=old)
        assert self._repair_numbering(targets), "a strided view made a cycle of kernels"

    # ------------------------------------------------------- reshapes as aliases
    def _alias_reshapes_read_by_products(self):
        """Step 2a: a reshape read both by loop kernels and by other kernels (a product)
        stays an alias of its input for the latter and is computed (an index remap) by
        each of the former; merged into one loop kernel, it was written there, a copy of
        the whole tensor (the bias gradient's column sum of attention's dq, dk, dv
        wrote each [B*S, D] reshape for the weight gradient's product)."""
        for n in self.compute:
            g = self._sole_group(n)
            if g is None or not self._alone(n) or not self._aliasable(n):
                continue
            consumers = self._consumers(g)
            loops = [c for c in consumers if self.groups[c].kind == "loop"]
            facts = {c: self._joined_facts(c, g) for c in loops}
            if not loops or len(loops) == len(consumers) or any(
                    self._split_required({n}, self.groups[c].nodes) or
                    self.loop_dims(self.groups[c].nodes | {n}, copies={n}, facts=facts[c],
                                   outputs=self._outputs_together(
                                       c, g, self.groups[c].nodes | {n}, {n})) is None
                    for c in loops):
                continue
            saved = {c: self.groups[c].facts for c in loops}
            for c in loops:
                self.groups[c].nodes.add(n)
                self.groups[c].facts = facts[c]
                self.group_of[n].add(c)
            self._forget_outputs([n])
            self._update_edges(loops + [g])
            if self._repair_numbering(loops + [g]):
                self.pinned_aliases.add(g)
                continue
            for c in loops:
                self.groups[c].nodes.discard(n)
                self.groups[c].facts = saved[c]
            self._forget_outputs([n])
            self.group_of[n] = {g}
            self._update_edges(loops + [g])

    def _alone(self, n):
        """n is the one node of its group, a loop group."""
        gid = self._sole_group(n)
        return gid is not None and self.groups[gid].kind == "loop" and \
            len(self.groups[gid].nodes) == 1

    def _take(self, g, node):
        b = self._sole_group(node)
        if b is None or b == g or len(self.groups[b].nodes) != 1:
            return False
        return self._try_merge(g, b)

    # ------------------------------------------------------------ scatter updates
    def _fuse_scatter_updates(self):
        """A row scatter computes its updates itself when a cheap loop group that nothing
        else reads produces them (embedding training's mean gradient broadcast over the
        ids, times the learning rate): the scatter's loop visits each element of the
        updates once, so the group is computed there, never written."""
        for n in self.compute:
            slot = SCATTER_UPDATES.get(n.type)
            if slot is None or n.inputs[slot].node not in self.group_of:
                continue  # not a scatter, or its updates are fed
            s, p = self._sole_group(n), self._sole_group(n.inputs[slot].node)
            if s is None or p is None or s == p or not self._is_cheap(p) or \
                    self.groups[p].kind != "loop" or self._consumers(p) != {s}:
                continue
            producers = self.groups[p].nodes
            if any(v.node in producers for i, v in self.data_in(n) if i != slot):
                continue  # the indices too: each would be recomputed per element of a row
            if self._reads_variable(producers, n.inputs[0].name):
                continue  # with repeated ids, it would read rows it has already written
            if not self._split_required(producers, self.groups[s].nodes) and \
                    not self._creates_cycle(s, p):
                self._merge(s, p)

    def _reads_variable(self, nodes, name):
        return any(r.type == "VariableV2" and r.name == name or
                   r.type in _REF_READERS and r.inputs[0].name == name
                   for r in list(nodes) + [v.node for n in nodes for _, v in self.data_in(n)])

    # ------------------------------------------------------------ loop fusion
    def _merge_round(self, shared_cheap):
        changed = False
        for c in self.compute:
            for _, v in self.data_in(c):
                p = v.node
                if p not in self.group_of:
                    continue
                a = self._sole_group(p)
                if a is None or self.groups[a].kind != "loop":
                    continue
                if not shared_cheap and self._is_cheap(a) and self._several_consumers(a):
                    continue  # offered for duplication first
                if any(self._try_merge(b, a) for b in self._merge_targets(c, a)):
                    changed = True
        return changed

    def _merge_targets(self, c, a):
        """The loop groups computing consumer c that producer group a may merge into,
        earliest first. A c copied into several kernels offers each of them: GELU's h*cdf,
        copied into its gradient's kernel too, was otherwise no merge partner at all, and
        the tanh chain feeding it stayed a kernel of its own."""
        return sorted((b for b in self.group_of[c] if b != a and self.groups[b].kind == "loop"),
                      key=self.order.__getitem__)

    def _merge_siblings(self):
        """Loop groups that read the same stored value over their whole loop merge, so the
        value is read from memory once: a bias's or layer norm gamma's gradient (a column
        sum of the incoming gradient) then runs in the loop of the layer norm's input
        gradient, which reads that gradient too. Only values of the merged loop's dims
        count: sharing a scalar (an optimizer's learning rate) saves nothing, and merging
        every same-shaped variable's update would make one kernel of a deep model's many.
        The readers join the group gathered so far, earliest first; one that a path of
        kernels joins to that group starts the next: each layer of a deep stack reads the
        same zeros (ReluGrad's) and reaches the next layer's reader, and trying every reader
        against the first searched the whole graph between them, quadratic in depth."""
        for v, users in self.users.items():
            if not v.dims or all(dim_is(d, 1) for d in v.dims):
                continue
            readers = {g for u in users for g in self.group_of[u]
                       if self.groups[g].kind == "loop" and v.node not in self.groups[g].nodes}
            if len(readers) < 2:
                continue
            readers -= self.pinned_aliases  # aliases of a product's operand: never merged
            if len(readers) < 2:
                continue
            gathered, *rest = sorted(readers, key=self.order.__getitem__)
            for b in rest:
                merged = self.groups[gathered].nodes | self.groups[b].nodes
                facts = self._joined_facts(gathered, b)
                outputs = self._outputs_together(gathered, b, merged)
                if not dims_equal(self.loop_dims(merged, facts=facts, outputs=outputs),
                                  v.dims) or \
                        self._split_required(self.groups[gathered].nodes, self.groups[b].nodes):
                    continue
                if self._creates_cycle(gathered, b):
                    gathered = b
                else:
                    self._merge(gathered, b, facts, outputs)

    # ------------------------------------------------------------ recomputation
    def _recompute_in_readers(self):
        """Step 2c: a loop kernel recomputes an elementwise value of another loop kernel
        from what it reads anyway, instead of reading it from memory (see the module
        docstring)."""
        for b in sorted(self.groups, key=self.order.__getitem__):
            if b not in self.groups or self.groups[b].kind != "loop":
                continue
            dims = self.loop_dims(self.groups[b].nodes)
            if dims is None:
                continue
            for v in self._stored_reads(b):
                chain = self._recomputable(v, b, dims)
                if chain is not None:
                    self._recompute(chain, self._sole_group(v.node), b, dims)

    def _stored_reads(self, b):
        """The values group b's nodes read from other loop groups, in module order."""
        nodes = self.groups[b].nodes
        found = {v for n in nodes for _, v in self.data_in(n)
                 if v.node not in nodes and v.node in self.group_of}
        return sorted(found, key=lambda v: (self.pos[v.node], v.index))

    def _recomputable(self, v, b, dims):
        """The nodes of v's kernel that group b would compute to get v itself, or None:
        elementwise nodes over b's loop dims (each computed once per element, never a
        broadcast value recomputed along an axis), at most MAX_RECOMPUTE of them, read
        only by their own kernel and b (so no other kernel needs them written), and
        reading only values that b reads anyway, computes, or that no kernel computes
        (constants, feeds, variables): b reads nothing new from memory."""
        a = self._sole_group(v.node)
        if a is None or a == b or self.groups[a].kind != "loop" or v in self.fetched:
            return None
        group_b = self.groups[b].nodes
        read_by_b = {w for n in group_b for _, w in self.data_in(n)}
        chain, stack = set(), [v.node]
        while stack:
            n = stack.pop()
            if n in chain:
                continue
            if len(chain) == MAX_RECOMPUTE or self.kind(n) != "elementwise" or \
                    self._sole_group(n) != a or len(n.outputs) != 1 or \
                    not dims_equal(n.outputs[0].dims, dims) or \
                    n.outputs[0] in self.fetched or any(
                        not self.group_of[u] <= {a, b} for u in self.users.get(n.outputs[0], [])):
                return None
            chain.add(n)
            for _, w in self.data_in(n):
                if w.node in self.group_of and w not in read_by_b and \
                        w.node not in group_b:
                    stack.append(w.node)
        return chain

    def _recompute(self, chain, a, b, dims):
        """Copies `chain` into group b; a keeps the nodes it reads itself. Undone when the
        kernels would form a cycle or a loop nest would change."""
        ga, gb = self.groups[a], self.groups[b]
        a_dims = self.loop_dims(ga.nodes)
        if self._split_required(chain, gb.nodes) or \
                not _same_dims(self.loop_dims(gb.nodes | chain, copies=chain), dims):
            return False
        saved = (set(ga.nodes), set(gb.nodes), {n: set(self.group_of[n]) for n in chain})
        gb.nodes |= chain
        for n in chain:
            self.group_of[n].add(b)
        # users first: a node stays in a while a node left there reads it
        for n in sorted(chain, key=self.pos.__getitem__, reverse=True):
            if not any(a in self.group_of[u] for u in self.users.get(n.outputs[0], [])):
                ga.nodes.discard(n)
                self.group_of[n].discard(a)
        self._update_edges([a, b])
        if ga.nodes and _same_dims(self.loop_dims(ga.nodes), a_dims) and \
                self._repair_numbering([a, b]):
            return True
        ga.nodes, gb.nodes = saved[0], saved[1]
        self.group_of.update(saved[2])
        self._update_edges([a, b])
        return False

    def _is_cheap(self, gid):
        return self.groups[gid].facts.cheap

    def _consumers(self, gid):
        g = self.groups[gid]
        out = set()
        for n in g.nodes:
            for v in n.outputs:
                for u in self.users.get(v, []):
                    out |= self.group_of[u] - {gid}
        return out

    def _several_consumers(self, gid):
        """len(self._consumers(gid)) > 1, stopping at the second consumer: asked of a
        producer per input of each of its readers in every merge round."""
        first = None
        for n in self.groups[gid].nodes:
            for v in n.outputs:
                for u in self.users.get(v, ()):
                    for c in self.group_of[u]:
                        if c == gid or c == first:
                            continue
                        if first is not None:
                            return True
                        first = c
        return False

    def _duplicate_round(self):
        changed = False
        for gid in sorted(self.groups):
            if gid not in self.groups or not self._is_cheap(gid):
                continue
            # a group holding a node already copied elsewhere stays as it is: duplicating it
            # too cascades down a recurrence (an unrolled LSTM's steps each copied the
            # last's copies: a 32-step training step's compile went from 1.6 to 115 CPU-s)
            if any(len(self.group_of[n]) > 1 for n in self.groups[gid].nodes):
                continue
            consumers = self._consumers(gid)
            if len(consumers) < 2 or any(self.groups[c].kind != "loop" for c in consumers):
                continue
            duplication = self._duplication(gid, consumers)
            if duplication is not None and self._apply_duplication(gid, duplication):
                changed = True
        return changed

    def _duplication(self, gid, consumers):
        """{consumer: (the nodes of group gid it needs, the _Facts of its nodes with
        them)}, or None if some consumer cannot compute them itself."""
        g = self.groups[gid]
        duplication = {}
        for c in consumers:
            cn = self.groups[c].nodes
            needed = self._needed_from(g.nodes, cn)
            if self._split_required(needed, cn):
                return None
            facts = self._joined_facts(c, gid)
            outputs = self._outputs_together(c, gid, cn | needed, needed)
            if self.loop_dims(cn | needed, copies=needed, facts=facts, outputs=outputs) is None:
                return None
            duplication[c] = (needed, facts)
        return duplication

    def _needed_from(self, source, consumer_nodes):
        """The nodes of `source` whose values consumer_nodes read, with their ancestors in
        `source`."""
        stack = [v.node for n in consumer_nodes for _, v in self.data_in(n) if v.node in source]
        needed = set()
        while stack:
            n = stack.pop()
            if n in needed:
                continue
            needed.add(n)
            stack.extend(v.node for _, v in self.data_in(n) if v.node in source)
        return needed

    def _apply_duplication(self, gid, duplication):
        """Moves group gid's nodes into its consumers; undone (returns False) if that
        would make a cycle of kernels (a copy inherits the group's ordering edges)."""
        g = self.groups.pop(gid)
        saved = {c: (set(self.groups[c].nodes), self.groups[c].facts) for c in duplication}
        # a node of g may already have copies in other kernels (GELU's x*x, which both its
        # tanh chain and its gradient read): those stay
        saved_of = {n: set(self.group_of[n]) for n in g.nodes}
        for n in g.nodes:
            self.group_of[n].discard(gid)
        for c, (needed, facts) in duplication.items():
            self.groups[c].nodes |= needed
            self.groups[c].facts = facts
            for n in needed:
                self.group_of[n].add(c)
        self._forget_outputs(g.nodes)
        self._update_edges(list(duplication), removed=[gid])
        if self._repair_numbering(duplication):
            del self.order[gid]
            return True
        for c, (nodes, facts) in saved.items():
            self.groups[c].nodes, self.groups[c].facts = nodes, facts
        self._forget_outputs(g.nodes)
        self.groups[gid] = g
        for n in g.nodes:
            self.group_of[n] = saved_of[n]
        self._forget_outputs(g.nodes)
        self._update_edges(list(duplication) + [gid])
        return False

    # --------------------------------------------------------------- loop nest
    def outputs_of(self, nodes, copies=()):
        """Values computed by `nodes` that are needed outside them, in module order."""
        return [v for n in sorted(nodes, key=self.pos.__getitem__) for v in n.outputs
                if self._needed_outside(v, nodes, copies)]

    def _group_outputs(self, gid):
        g = self.groups[gid]
        if g.outputs is None:
            g.outputs = set(self.outputs_of(g.nodes))
        return g.outputs

    def _forget_outputs(self, nodes):
        """Drops the known outputs of the groups holding `nodes`, whose copies changed:
        a copied node's values are no group's outputs, and a value read by a copied
        node is one of each group computing both."""
        for n in nodes:
            for gid in self.group_of.get(n, ()):
                self.groups[gid].outputs = None

    def _outputs_together(self, a, b, nodes, copies=()):
        """outputs_of(nodes, copies) for `nodes` within groups a's and b's: a value needed
        outside them is needed outside its own group, so it is one of theirs (a walk of
        their outputs, not of every node: fusion's most repeated question)."""
        candidates = self._group_outputs(a) | self._group_outputs(b)
        out = [v for v in candidates if self._needed_outside(v, nodes, copies)]
        return sorted(out, key=lambda v: (self.pos[v.node], v.index))

    def _needed_outside(self, v, nodes, copies=()):
        """Whether value v, computed in `nodes`, is an output of them (outputs_of)."""
        n = v.node
        if n in copies or len(self.group_of.get(n, ())) > 1:
            return False  # a duplicated node: every user computes it itself
        # a user outside, or a duplicated user whose copies in other kernels read v
        return v in self.fetched or any(u not in nodes or len(self.group_of.get(u, ())) > 1
                                        for u in self.users.get(v, []))

    def loop_dims(self, nodes, copies=(), facts=None, outputs=None):
        """The loop dims of a valid loop nest computing `nodes`, or None (see the module
        docstring for the rules). facts: the _Facts of `nodes`, if known (a chain the
        check measures is kept there); outputs: outputs_of(nodes, copies), if known."""
        return _LoopCheck(self, nodes, copies, facts, outputs).dims()

    # ---------------------------------------------------------------- result
    def kernels(self):
        self.aliases = {}
        if self.fuse:
            self._fuse_epilogues()
            if self.strided_products:
                self._fuse_product_views()
            self._alias_reshapes_read_by_products()
            changed = True
            while changed:
                changed = self._merge_round(shared_cheap=False)
                changed = self._duplicate_round() or changed
            while self._merge_round(shared_cheap=True):
                pass
            self._merge_siblings()
            self._recompute_in_readers()
            self._fuse_scatter_updates()
        out = []
        for gid in self._schedule():
            g = self.groups[gid]
            if self.fuse and self._alias(g):
                continue
            nodes = sorted(g.nodes, key=self.pos.__getitem__)
            if g.kind == "loop":
                dims = self.loop_dims(g.nodes, facts=g.facts)
                assert dims is not None, f"fusion made an invalid loop kernel of {nodes}"
            else:
                dims = g.main.outputs[0].dims
            inputs = []
            for n in nodes:
                for _, v in self.data_in(n):
                    if v.node not in g.nodes and v not in inputs:
                        inputs.append(v)
            out.append(Kernel(g.kind, nodes, inputs, self.outputs_of(g.nodes), dims,
                              f"{g.kind}_{len(out)}", g.main))
        return out

    def _alias(self, g):
        """Records g's one reshape node as an alias of its input, if it can be (see the
        module docstring); True when it did."""
        if g.kind != "loop" or len(g.nodes) != 1:
            return False
        (n,) = g.nodes
        if not self._aliasable(n):
            return False
        x = n.inputs[0]
        self.aliases[n.outputs[0]] = self.aliases.get(x, x)
        return True

    def _aliasable(self, n):
        if n.type not in RESHAPES or len(n.outputs) != 1:
            return False
        x = n.inputs[0]
        return n.outputs[0] not in self.fetched and isinstance(x, Value) and \
            x.node.type != "VariableV2" and x.node.type not in UPDATE_OPS

    def _schedule(self):
        order = self._topological_order()
        assert order is not None, "fusion made a cycle of kernels"
        return order

    def _topological_order(self):
        """The groups in dependency order, earliest module position first, except that a
        row write (ROW_WRITE_OPS) waits for every other ready group: the readers of the
        value it overwrites run before it, so that it may write in place (a native loop's
        TensorArray flows); and that a ready group whose values nothing reads (a variable
        update) runs before the others, as TF1's executor applies a gradient once it is
        computed: in module order every update of a training step ran at its end, with
        every weight gradient live until then (a deep MLP's arena was all of them). None
        if the kernel graph has a cycle."""
        first = {gid: (any(n.type in ROW_WRITE_OPS for n in g.nodes),
                       self._read_elsewhere(g),
                       min(self.pos[n] for n in g.nodes)) for gid, g in self.groups.items()}
        order = self._sorted_among(self.groups, first)
        return order if len(order) == len(self.groups) else None

    def _read_elsewhere(self, g):
        """Whether a value group g computes is fetched or read by another group."""
        return any(v in self.fetched or any(u not in g.nodes for u in self.users.get(v, ()))
                   for n in g.nodes for v in n.outputs)

    def _sorted_among(self, groups, key):
        """`groups` (a set or dict of group ids) in dependency order among themselves
        (Kahn's), the ready group of the smallest key first; shorter than `groups` when
        their edges make a cycle."""
        indeg = {g: sum(1 for p in self.pred[g] if p in groups) for g in groups}
        ready = [(key[g], g) for g, d in indeg.items() if d == 0]
        heapq.heapify(ready)
        sequence = []
        while ready:
            _, g = heapq.heappop(ready)
            sequence.append(g)
            for s in self.succ[g]:
                if s in groups:
                    indeg[s] -= 1
                    if indeg[s] == 0:
                        heapq.heappush(ready, (key[s], s))
        return sequence


def _same_dims(a, b):
    """Both loop dims exist (a valid loop nest) and are equal."""
    return a is not None and b is not None and dims_equal(a, b)


def _is_bias_add(node, value):
    """BiasAdd(value, b), or Add of value and a vector broadcast along its last dim."""
    if node.type == "BiasAdd":
        return node.inputs[0] is value
    if node.type != "Add" or value.dims is None or not value.dims:
        return False
    a, b = node.inputs
    other = b if a is value else a if b is value else None
    if other is None or other is value or other.dims is None:
        return False
    od = other.dims
    return (len(od) >= 1 and len(od) <= len(value.dims) and
            all(dim_is(d, 1) for d in od[:-1]) and dims_equal(od[-1:], value.dims[-1:]) and
            dims_equal(node.outputs[0].dims, value.dims))


class _Search:
    """One side of _creates_cycle's search: the groups reached from `start` along `step`
    (succ or pred) through groups for which inside(group) holds. A group counts as
    reached when it is first pushed, so that a side that runs out has reached every group
    it can. `start` is expanded like any group, its direct edge to the other side's
    start (`end`) left out: listing a start's neighbours up front cost a concatenation's
    in-degree at each merge into it, n^2 for n pieces merged one by one, where the piece's
    side runs out at once."""

    def __init__(self, step, start, end, inside):
        self.next, self.inside = step, inside
        self.start, self.end = start, end
        self.stack = [start]
        self.seen = set()

    def step(self, other):
        """Expands one group; True when it reaches the other side's start, other than by
        the direct edge, or a group the other side has reached."""
        g = self.stack.pop()
        for n in self.next[g]:
            if n == self.end:
                if g != self.start:
                    return True
            elif n not in self.seen and self.inside(n):
                if n in other.seen:
                    return True
                self.seen.add(n)
                self.stack.append(n)
        return False


class _LoopCheck:
    """Checks one candidate loop kernel. Each value computed from a hoisted reduction gets
    an alignment: per axis, the loop axis that indexes it, or None for a size-1 axis."""

    def __init__(self, fusion, nodes, copies, facts=None, outputs=None):
        self.f = fusion
        self.outputs = outputs
        self.set = set(nodes)
        self.copies = copies
        self.facts = facts or _Facts(None, all(fusion.plain_node(n) for n in self.set), None)

    @property
    def nodes(self):
        """The nodes in module order, sorted once and only for the rules that walk them
        (a plain candidate's check does not)."""
        if not hasattr(self, "_ordered"):
            self._ordered = sorted(self.set, key=self.f.pos.__getitem__)
        return self._ordered

    def dims(self):
        if len(self.set) == 1:
            (n,) = self.set
            info = reduction_axes(n) if self.f.kind(n) == "reduction" else None
            reduces = info is not None and (info[1] or n.type in ROW_NORMALIZERS or
                                            n.type == "SparseSoftmaxCrossEntropyWithLogits")
            return n.inputs[info[0]].dims if reduces else n.outputs[0].dims
        if not self._chain_within_bound():
            return None
        outputs = self.outputs
        if outputs is None:
            outputs = self.f.outputs_of(self.set, self.copies)
        if self.facts.plain:  # what the rules below come to without hoisting or updates
            D = outputs[0].dims if outputs else None
            if D is None or not all(dims_equal(v.dims, D) for v in outputs):
                return None
            return D
        nodes = self.nodes
        reds = [(n, reduction_axes(n)) for n in nodes if self.f.kind(n) == "reduction"]
        reds = [(n, info) for n, info in reds if info[1] or n.type in ROW_NORMALIZERS or
                n.type == "SparseSoftmaxCrossEntropyWithLogits"]
        updates = [n for n in nodes if n.type in UPDATE_OPS]
        cands = [n.inputs[info[0]].dims for n, info in reds]
        if not cands:
            cands = [u.outputs[0].dims for u in updates] + [v.dims for v in outputs]
        if not cands or cands[0] is None:
            return None
        D = cands[0]
        if reds and not all(dims_equal(c, D) for c in cands):
            return None
        if not self._windows_read_stored_inputs():
            return None
        self.D, self.rank = D, len(D)
        self.identity = tuple(None if dim_is(d, 1) else a for a, d in enumerate(D))
        hoisted = {n: info for n, info in reds if self._hoisted(n)}
        final = {n for n, _ in reds if n not in hoisted}
        levels = set()
        for n, (_, axes, _) in hoisted.items():
            k = self.rank - len(axes)
            if axes != tuple(range(k, self.rank)):
                return None
            levels.add(k)
        if len(levels) > 1:
            return None
        k = levels.pop() if levels else self.rank
        amap = {}
        for n in nodes:
            ins = [v for _, v in self.f.data_in(n) if v in amap]
            if (n in hoisted or n in final) and ins:
                if ins != [n.inputs[0]] or amap[ins[0]] != self.identity:
                    return None
            if n in hoisted:
                for v, m in zip(n.outputs, self._reduction_alignment(n, hoisted[n], k)):
                    amap[v] = m
                continue
            if not ins:
                continue
            if n in final:
                continue
            m = self._alignment(n, amap)
            if m is None:
                return None
            amap[n.outputs[0]] = m
        for v in outputs:
            if v.node not in final and v not in amap and not dims_equal(v.dims, D):
                return None
        if any(not dims_equal(u.outputs[0].dims, D) for u in updates):
            return None
        if not self._state_safe(updates):
            return None
        return D

    def _chain_within_bound(self):
        """No path of data edges longer than MAX_CHAIN, measured only when the facts'
        bound (or the number of nodes) does not settle it; a measured chain is kept."""
        facts = self.facts
        if len(self.set) <= MAX_CHAIN or (facts.chain is not None and
                                            facts.chain <= MAX_CHAIN):
            return True
        facts.chain = self._chain_length()
        return facts.chain <= MAX_CHAIN

    def _chain_length(self):
        """The most nodes on one path of data edges inside the kernel."""
        length = {}
        for n in self.nodes:  # in module order: inputs first
            length[n] = 1 + max((length.get(v.node, 0) for _, v in self.f.data_in(n)), default=0)
        return max(length.values())

    def _windows_read_stored_inputs(self):
        """Each window op's inputs are computed outside the kernel or by index remaps
        (of values computed outside) only."""
        stack = [v.node for n in self.nodes if self.f.kind(n) == "window"
                 for _, v in self.f.data_in(n) if v.node in self.set]
        seen = set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if self.f.kind(n) != "index":
                return False
            stack.extend(v.node for _, v in self.f.data_in(n) if v.node in self.set)
        return True

    def _hoisted(self, n):
        if n.type in ROW_NORMALIZERS or n.type == "SparseSoftmaxCrossEntropyWithLogits":
            return True
        return any(u in self.set for v in n.outputs for u in self.f.users.get(v, []))

    def _reduction_alignment(self, n, info, k):
        _, axes, keep = info
        D, ident = self.D, self.identity
        if n.type in ROW_NORMALIZERS:
            return [ident]
        if n.type == "SparseSoftmaxCrossEntropyWithLogits":
            return [ident[:k], ident]
        out = n.outputs[0].dims
        if keep:
            off = self.rank - len(out)
            return [tuple(ident[t + off] if t + off < k else None for t in range(len(out)))]
        return [ident[:k]]

    def _alignment(self, n, amap):
        """The alignment of n's output, computed from aligned inputs, or None when n
        would read a hoisted value at an index that is not an outer loop index."""
        kind = self.f.kind(n)
        od = n.outputs[0].dims
        if od is None or len(n.outputs) != 1:
            return None
        full = dims_equal(od, self.D)
        if n.type in RESHAPES:
            x = n.inputs[0]
            xm = amap[x]
            src = [(d, xm[s]) for s, d in enumerate(x.dims) if not dim_is(d, 1)]
            dst = [t for t, d in enumerate(od) if not dim_is(d, 1)]
            if len(src) != len(dst) or any(not dims_equal((d,), (od[t],))
                                           for (d, _), t in zip(src, dst)):
                return None
            m = [None] * len(od)
            for (_, la), t in zip(src, dst):
                m[t] = la
        elif kind == "elementwise" or n.type in UPDATE_OPS or n.type == "BroadcastTo" or \
                (kind == "reduction" and not reduction_axes(n)[1]):
            if n.type == "BiasAdd" and n.attrs.get("data_format") == "NCHW" and len(od) > 2:
                return None
            m = list(self.identity) if full else [None] * len(od)
            for _, v in self.f.data_in(n):
                if v not in amap:
                    continue
                off = len(od) - len(v.dims)
                if off < 0:
                    return None
                for s, la in enumerate(amap[v]):
                    if la is None:
                        continue
                    t = s + off
                    if m[t] is None and not full:
                        m[t] = la
                    elif m[t] != la:
                        return None
            if not full and any(m[t] is None and not dim_is(d, 1) for t, d in enumerate(od)):
                return None
        else:
            return None
        bound = [a for a in m if a is not None]
        if len(bound) != len(set(bound)) or (full and tuple(m) != self.identity):
            return None
        return tuple(m)

    def _state_safe(self, updates):
        names = [u.inputs[0].name for u in updates]
        if len(names) != len(set(names)):
            return False
        for u, name in zip(updates, names):
            start = [u] if u.type != "Assign" else []
            for n in self.nodes:
                if n.type == "VariableV2" and n.name == name:
                    return False  # a snapshot copy of the variable being written
                if n.type in _REF_READERS and n.inputs[0].name == name:
                    return False
                for _, v in self.f.data_in(n):
                    r = v.node
                    if r.type != "VariableV2" or r.name != name or r in self.set:
                        continue
                    if self.f.pos[r] > self.f.pos[u] or not dims_equal(v.dims, self.D):
                        return False
                    start.append(n)
            if not self._elementwise_closure(start):
                return False
        return True

    def _elementwise_closure(self, start):
        """True when every node computed in the kernel from `start` is elementwise (or an
        update) over the loop dims: each reads the variable at its own index only."""
        stack, seen = list(start), set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if not (self.f.kind(n) == "elementwise" or n.type in UPDATE_OPS):
                return False
            if len(n.outputs) != 1 or not dims_equal(n.outputs[0].dims, self.D):
                return False
            stack.extend(u for u in self.f.users.get(n.outputs[0], []) if u in self.set)
        return True
