"""The HTML page's compound graph: ops grouped by name scope, each fused kernel a group of
its ops, and every group's interior laid out once by Graphviz's `dot`.

`compound(ops, kernels)` -> a Compound: the nodes (ops and groups) with their parents, the
op edges, and for each group the centres of its children in the group's own coordinates
and the interior's size. Every group is laid out on its own, with its children as boxes
of the size they have collapsed, so the whole graph costs one `dot` run over many small
graphs (a 2,000-op graph's groups are a few dozen nodes each) instead of one run over
thousands of nodes. The page places an expanded group's children inside its box and moves
the other nodes aside (html_page.py); it never lays anything out itself.

Without `dot` (or when it fails) a simple layered layout stands in, and `engine` says so.
"""
import re
import shutil
import subprocess

OP_W, OP_H = 150, 36            # an op's box, in points (the page's px)
GROUP_W, GROUP_H = 170, 44      # a collapsed group's box
PAD, TITLE = 12, 22             # an expanded group's margin and title bar
_DOT_TIMEOUT_S = 120


class Node:
    __slots__ = ("key", "kind", "label", "parent", "children", "op", "kernel", "scope")

    def __init__(self, key, kind, label, parent, op=None, kernel=None, scope=""):
        self.key, self.kind, self.label, self.parent = key, kind, label, parent
        self.children = []
        self.op, self.kernel, self.scope = op, kernel, scope


class Compound:
    def __init__(self):
        self.nodes = {}          # key -> Node; "root" is the whole graph
        self.edges = []          # (source op index, target op index, is control)
        self.layouts = {}        # group key -> {"w", "h", "at": {child key: [cx, cy]}}
        self.engine = ""


def compound(ops, kernels, dot=None):
    """dot: the `dot` executable, None to look it up, False for the fallback layout."""
    c = Compound()
    _group(c, ops, kernels)
    _flatten_single_children(c)
    _group_series(c)
    c.edges = _op_edges(ops)
    graphs = _group_graphs(c)
    sizes = {key: [box_size(c, ch) for ch in children] for key, (children, _) in graphs.items()}
    dot = shutil.which("dot") if dot is None else dot
    layouts, why_not = (_dot_layouts(dot, graphs, sizes) if dot else
                        (None, "Graphviz `dot` is not installed"))
    if layouts is None:
        layouts = {key: _layered(g, sizes[key]) for key, g in graphs.items()}
        c.engine = f"simple layered layout ({why_not})"
    else:
        c.engine = f"Graphviz dot ({_dot_version(dot)})"
    c.layouts = layouts
    return c


def scope_of(name):
    """'gradients/dense_1/MatMul_grad/MatMul' -> ['gradients', 'dense_1', 'MatMul_grad']"""
    return name.split(":")[0].split("/")[:-1]


# ------------------------------------------------------------------ grouping
def _group(c, ops, kernels):
    root = c.nodes["root"] = Node("root", "root", "", None)
    # fusion recomputes a cheap op in each kernel that reads it: it is drawn once, in its
    # first kernel; a kernel made only of such ops is an empty group
    drawn, computed = {}, {}
    for i, op in enumerate(ops):
        if op.kernels:
            drawn.setdefault(op.kernels[0], []).append(i)
        for k in op.kernels:
            computed.setdefault(k, []).append(i)
    for k in sorted(computed):
        scope = _common_prefix([scope_of(ops[i].name) for i in drawn.get(k) or computed[k]])
        key = f"k{k}"
        c.nodes[key] = Node(key, "kernel", f"kernel {k} · {kernels[k]['kind']}",
                            _scope_node(c, scope).key, kernel=k, scope="/".join(scope))
        _scope_node(c, scope).children.append(key)
        for i in drawn.get(k, []):
            _add_op(c, key, i, ops[i])
    for i, op in enumerate(ops):
        if not op.kernels:
            _add_op(c, _scope_node(c, scope_of(op.name)).key, i, op)
    return root


def _add_op(c, parent, index, op):
    key = f"o{index}"
    c.nodes[key] = Node(key, "op", op.name.split("/")[-1], parent, op=index)
    c.nodes[parent].children.append(key)


def _scope_node(c, scope):
    if not scope:
        return c.nodes["root"]
    key = "s/" + "/".join(scope)
    node = c.nodes.get(key)
    if node is None:
        parent = _scope_node(c, scope[:-1])
        node = c.nodes[key] = Node(key, "scope", scope[-1], parent.key, scope="/".join(scope))
        parent.children.append(key)
    return node


def _common_prefix(scopes):
    first = scopes[0]
    n = min(len(s) for s in scopes)
    for j in range(n):
        if any(s[j] != first[j] for s in scopes):
            return first[:j]
    return first[:n]


def _flatten_single_children(c):
    """A scope holding one thing is one click for nothing: its child takes its place."""
    for key in list(c.nodes):
        node = c.nodes.get(key)
        if node is None or node.kind != "scope" or len(node.children) != 1:
            continue
        (child,) = node.children
        parent = c.nodes[node.parent]
        parent.children[parent.children.index(key)] = child
        c.nodes[child].parent = node.parent
        del c.nodes[key]


_NUMBERED = re.compile(r"^(.*?)(\d+)$")
SERIES_MIN = 5


def _group_series(c):
    """Scopes named like dense_0 ... dense_59 under one parent become one series group (as
    TensorBoard does): a deep model's first view is a few boxes, not one per layer."""
    for key in [k for k, n in c.nodes.items() if n.kind != "op"]:
        node = c.nodes[key]
        runs = {}
        scopes = {c.nodes[ch].label: ch for ch in node.children if c.nodes[ch].kind == "scope"}
        for label, child in scopes.items():
            m = _NUMBERED.match(label)
            if m:
                runs.setdefault(m.group(1), []).append((int(m.group(2)), child))
        for prefix, members in runs.items():
            if len(members) < SERIES_MIN:
                continue
            members.sort()
            first, last = members[0][0], members[-1][0]
            label = f"{prefix}[{first}..{last}]"
            # TF names unnamed layers dense, dense_1, dense_2, ...: the first joins its run
            base = scopes.get(prefix[:-1]) if prefix.endswith("_") else None
            if base is not None:
                members.insert(0, (-1, base))
                label = f"{prefix[:-1]}, {label}"
            series = f"{key}/{prefix}[]"
            c.nodes[series] = Node(series, "series", label, key, scope=node.scope)
            keys = {child for _, child in members}
            at = node.children.index(members[0][1])
            node.children = [ch for ch in node.children if ch not in keys]
            node.children.insert(min(at, len(node.children)), series)
            for _, child in members:
                c.nodes[child].parent = series
                c.nodes[series].children.append(child)


def _op_edges(ops):
    index = {op.name: i for i, op in enumerate(ops)}
    edges = set()
    for j, op in enumerate(ops):
        for src in op.inputs:
            control = src.startswith("^")
            name = src.lstrip("^&")
            i = index.get(name)
            if i is None:
                i = index.get(name.rsplit(":", 1)[0])
            if i is not None and i != j:
                edges.add((i, j, control))
    return sorted(edges)


# ------------------------------------------------------------------ per-group graphs
def _chain(c, key):
    out = []
    while key is not None:
        out.append(key)
        key = c.nodes[key].parent
    return out[::-1]


def _group_graphs(c):
    """{group key: (children, {(i, j)} edges between them by child position)}: an op edge
    is an edge of the group where the two ops' ancestor chains part."""
    graphs = {k: (n.children, set()) for k, n in c.nodes.items() if n.kind != "op"}
    chains = {}
    for s, t, _ in c.edges:
        a = chains.get(s) or chains.setdefault(s, _chain(c, f"o{s}"))
        b = chains.get(t) or chains.setdefault(t, _chain(c, f"o{t}"))
        k = 0
        while a[k] == b[k]:
            k += 1
        children, edges = graphs[a[k - 1]]
        edges.add((a[k], b[k]))
    positions = {k: {ch: i for i, ch in enumerate(children)}
                 for k, (children, _) in graphs.items()}
    return {k: (children, {(positions[k][u], positions[k][v]) for u, v in edges})
            for k, (children, edges) in graphs.items()}


def box_size(c, key):
    return (OP_W, OP_H) if c.nodes[key].kind == "op" else (GROUP_W, GROUP_H)


# ------------------------------------------------------------------ dot
_PLAIN_NODE = re.compile(r"^node (\S+) (\S+) (\S+) ")


def _dot_layouts(dot, graphs, sizes):
    """All groups in one `dot -Tplain` run: ({group key: layout}, None) or (None, why)."""
    keys = list(graphs)
    text = []
    for g, key in enumerate(keys):
        children, edges = graphs[key]
        text.append(f"digraph g{g} {{ rankdir=TB; nodesep=0.3; ranksep=0.45; "
                    "node [shape=box, fixedsize=true, label=\"\"];")
        for i, (w, h) in enumerate(sizes[key]):
            text.append(f" n{i} [width={w / 72:.3f}, height={h / 72:.3f}];")
        text.extend(f" n{u} -> n{v};" for u, v in sorted(edges))
        text.append("}")
    try:
        done = subprocess.run([dot, "-Tplain"], input="\n".join(text), capture_output=True,
                              text=True, timeout=_DOT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"`dot` did not run: {e}"
    if done.returncode != 0:
        return None, f"`dot` failed: {done.stderr.strip()[-200:]}"
    blocks = done.stdout.split("\nstop")
    layouts = {}
    for key, block in zip(keys, blocks):
        children = graphs[key][0]
        lines = block.strip().splitlines()
        _, _, width, height = lines[0].split()[:4]
        h = float(height) * 72
        at = {}
        for line in lines[1:]:
            m = _PLAIN_NODE.match(line)
            if m:
                at[children[int(m.group(1)[1:])]] = [round(float(m.group(2)) * 72, 1),
                                                     round(h - float(m.group(3)) * 72, 1)]
        layouts[key] = {"w": round(float(width) * 72, 1), "h": round(h, 1), "at": at}
    if len(layouts) != len(keys) or any(len(layouts[k]["at"]) != len(graphs[k][0])
                                        for k in keys):
        return None, "`dot` gave no position for some nodes"
    return layouts, None


def _dot_version(dot):
    try:
        done = subprocess.run([dot, "-V"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "version unknown"
    m = re.search(r"version (\S+)", done.stderr + done.stdout)
    return m.group(1) if m else "version unknown"


# ------------------------------------------------------------------ fallback
_GAP_X, _GAP_Y = 22, 32


def _layered(graph, sizes):
    """Ranks by longest path (a cycle between groups is broken at its first child in
    graph order), each rank one row in child order, rows centred."""
    children, edges = graph
    preds = {i: set() for i in range(len(children))}
    for u, v in edges:
        preds[v].add(u)
    rank, left = {}, set(range(len(children)))
    while left:
        ready = [i for i in sorted(left) if preds[i] <= rank.keys()] or [min(left)]
        for i in ready:
            rank[i] = 1 + max([rank[p] for p in preds[i] if p in rank] + [-1])
            left.discard(i)
    rows = {}
    for i in range(len(children)):
        rows.setdefault(rank[i], []).append(i)
    row_w = {r: sum(sizes[i][0] for i in row) + _GAP_X * (len(row) - 1)
             for r, row in rows.items()}
    width = max(row_w.values(), default=0)
    at, y = {}, 0.0
    for r in sorted(rows):
        x = (width - row_w[r]) / 2
        row_h = max(sizes[i][1] for i in rows[r])
        for i in rows[r]:
            at[children[i]] = [x + sizes[i][0] / 2, y + row_h / 2]
            x += sizes[i][0] + _GAP_X
        y += row_h + _GAP_Y
    return {"w": width, "h": max(y - _GAP_Y, 0), "at": at}
