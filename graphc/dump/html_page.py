"""graphc-dump --format html: one self-contained page (no network).

The graph is a compound graph (layout.py): ops grouped by name scope, numbered scopes
(dense_0 ... dense_59) as one series, each fused kernel a coloured group of its ops, each
group's interior laid out by Graphviz's `dot` when the page is written. The page's script
draws the groups that are open: an expanded group's children go inside its box, which
grows, and the nodes around it move aside (up/down/left/right of its centre), so the
layout of every level stays dot's. Big graphs open with their groups collapsed.

Search (name or op type), fit, zoom and pan; a click shows the op's shapes, dtype,
creation line, its kernel's code (LLVM IR, or PTX for a GPU file) and its buffers in the
memory plan's timeline chart. Names from the file reach the page only as escaped text
(JSON with `<` and `>` escaped, read by the script and written with textContent or
setAttribute), never as markup.
"""
import html
import json

from runtime import shapes

from graphc.dump import layout
from graphc.dump.text import overview, stage_name, stage_ops

EXPAND_ALL_UP_TO = 60           # ops; a bigger graph opens with its groups collapsed
_KIND_COLOURS = ("#f6c48f", "#a8d5a2", "#b9a8e0", "#8fc1e8", "#f0a3a3", "#e8d97a",
                 "#9fd8d1", "#d9b38c")


def to_html(d, stage=None, dot=None):
    """dot: as layout.compound's (None: look `dot` up; False: the fallback layout)."""
    ops = stage_ops(d, stage)
    kernels = d.kernels if stage_name(d, stage) == "after" else []
    c = layout.compound(ops, kernels, dot)
    data = {"title": d.path, "summary": overview(d, stage), "engine": c.engine,
            "code_language": d.code_language, "target": _target_text(d),
            "expand_all": len(ops) <= EXPAND_ALL_UP_TO,
            "sizes": {"op": [layout.OP_W, layout.OP_H], "group": [layout.GROUP_W,
                      layout.GROUP_H], "pad": layout.PAD, "title": layout.TITLE},
            "ops": [_op_json(op) for op in ops],
            "nodes": {k: _node_json(n) for k, n in c.nodes.items()},
            "layouts": c.layouts, "edges": c.edges,
            "kernels": _kernels_json(kernels),
            "memory": _memory_json(d, ops) if kernels else None}
    payload = json.dumps(data, separators=(",", ":"))
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _PAGE.format(title=html.escape(f"graphc-dump: {d.path}"), data=payload,
                        script=_SCRIPT, style=_STYLE)


def _target_text(d):
    t = d.target
    if not t:
        return "saved graph (not compiled)"
    return f"GPU {t['arch']}" if t.get("kind") == "gpu" else f"{t['triple']} cpu={t['cpu']}"


def _op_json(op):
    return {"id": op.id, "name": op.name, "type": op.type, "dtype": op.dtype, "shape": op.shape,
            "inputs": op.inputs, "attrs": op.attrs, "location": op.location,
            "kernels": op.kernels}


def _node_json(n):
    return {"kind": n.kind, "label": n.label, "parent": n.parent, "children": n.children,
            "op": n.op, "kernel": n.kernel, "scope": n.scope}


def _kernels_json(kernels):
    colours = {}
    for k in kernels:
        colours.setdefault(k["kind"], _KIND_COLOURS[len(colours) % len(_KIND_COLOURS)])
    # a deep model's repeated layers run a few functions many times: each text once
    owner = {}
    for i, k in enumerate(kernels):
        if not k.get("shares_code_of"):
            owner.setdefault(k.get("function"), i)
    out = []
    for i, k in enumerate(kernels):
        source = owner.get(k.get("function"), i) if k.get("shares_code_of") else i
        out.append({"name": k["name"], "kind": k["kind"], "dims": k.get("dims_text", ""),
                    "ops": list(k.get("nodes", [])), "function": k.get("function"),
                    "code": k.get("code", "") if source == i else None, "code_from": source,
                    "shares": k.get("shares_code_of"), "colour": colours[k["kind"]]})
    return out


def _memory_json(d, ops):
    """The plan's buffers with offset and size at the file's symbol hints (the sizes the
    graph was compiled for), for the chart: x is the schedule (kernel index), y the
    offset."""
    plan = d.memory_plan
    if plan is None:
        return {"buffers": [], "steps": len(d.kernels), "arena": 0, "note": "no plan"}
    index = {op.name: i for i, op in enumerate(ops)}
    hints = ", ".join(f"{k}={v}" for k, v in sorted(d.symbol_hints.items()))
    buffers, unsized = [], 0
    for b in plan["buffers"]:
        try:
            offset = shapes.evaluate(b["offset"], d.symbol_hints)
            size = shapes.evaluate(b["size"], d.symbol_hints)
        except (KeyError, ValueError, ArithmeticError, TypeError):
            unsized += 1
            continue
        op = index.get(b["name"].rsplit(":", 1)[0])
        buffers.append({"name": b["name"], "op": op, "first": b["live"][0],
                        "last": b["live"][1], "offset": offset, "size": size,
                        "dtype": b["dtype"], "inplace_of": b["inplace_of"]})
    arena = max([b["offset"] + b["size"] for b in buffers], default=0)
    note = f"bytes at {hints}" if hints else "bytes"
    if unsized:
        note += f"; {unsized} buffer(s) without a size at these hints are not drawn"
    return {"buffers": buffers, "steps": len(d.kernels), "arena": arena, "note": note}


_STYLE = """
body { margin: 0; font: 13px Helvetica, Arial, sans-serif; display: flex; height: 100vh;
       overflow: hidden; }
#side { width: 36%; min-width: 300px; max-width: 640px; overflow: auto; padding: 8px 10px;
        box-sizing: border-box; border-right: 1px solid #ccc; }
#side h2 { font-size: 15px; margin: 4px 0; word-break: break-all; }
#main { flex: 1; position: relative; background: #fbfbfb; overflow: hidden; }
#toolbar { position: absolute; top: 6px; left: 6px; right: 6px; display: flex; gap: 4px;
           align-items: center; z-index: 2; }
#toolbar input { width: 260px; padding: 3px 6px; }
#toolbar button { padding: 3px 8px; }
#match-count { color: #555; margin-left: 4px; }
#engine { position: absolute; bottom: 4px; left: 8px; color: #777; font-size: 11px; }
#graph { width: 100%; height: 100%; cursor: grab; user-select: none; }
.node text { font-size: 11px; pointer-events: none; }
.node text.sub { fill: #555; font-size: 10px; }
.op > rect { fill: #fff; stroke: #666; }
.group > rect { stroke: #777; stroke-width: 1.2; }
.group.scope > rect, .group.series > rect { fill: #e9eef5; }
.group.series > rect { stroke-dasharray: 5 2; }
.group.open > rect { fill-opacity: 0.35; }
.group.open.scope > rect, .group.open.series > rect { fill: #f1f4f8; fill-opacity: 1; }
.group text.title { font-weight: bold; }
.toggle { cursor: pointer; } .toggle rect { fill: #fff; stroke: #777; }
.toggle text { font-size: 12px; font-weight: bold; }
.node.selected > rect { stroke: #d00; stroke-width: 2.5; }
.node.match > rect { stroke: #e68a00; stroke-width: 3; }
.node.match-inside > rect { stroke: #e68a00; stroke-width: 2; stroke-dasharray: 3 2; }
.edge { fill: none; stroke: #8a8a8a; stroke-width: 1.1; }
.edge.control { stroke-dasharray: 4 3; stroke: #b0b0b0; }
.edge.faint { stroke-opacity: 0.18; }
.edge.hot { stroke: #d00; stroke-width: 2; stroke-opacity: 1; }
#panel table { border-collapse: collapse; font-size: 12px; width: 100%; }
#panel td, #panel th { padding: 2px 6px; border-bottom: 1px solid #eee; text-align: left;
                       vertical-align: top; word-break: break-all; }
#panel th { width: 90px; color: #555; font-weight: normal; }
a.ref { color: #2a5db0; cursor: pointer; text-decoration: underline; }
pre { background: #f4f4f4; padding: 6px; overflow: auto; font-size: 11px; max-height: 420px; }
#memory-chart .bar { fill: #9db8dc; stroke: #5476a8; stroke-width: 0.5; cursor: pointer; }
#memory-chart .bar.sel { fill: #f08c5a; stroke: #b03a00; }
#memory-chart text { font-size: 10px; fill: #444; }
#results li, #kernel-list li { cursor: pointer; } #results li:hover, #kernel-list li:hover
{ color: #c00; }
.legend span { display: inline-block; padding: 1px 6px; margin: 1px; border-radius: 3px;
               font-size: 11px; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push(String(e.message)); document.body.setAttribute("data-errors", errors.join("; "));
  });
  var data = JSON.parse(document.getElementById("dump-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  var OP = data.sizes.op, GROUP = data.sizes.group, PAD = data.sizes.pad, TITLE = data.sizes.title;
  var nodes = data.nodes, ops = data.ops, layouts = data.layouts;
  var expanded = {root: true}, selected = null, boxes = {};
  var matches = [], matchAt = -1, searched = null;

  function el(tag, text, cls) { var n = document.createElement(tag);
    if (text !== undefined && text !== null) n.textContent = String(text);
    if (cls) n.className = cls; return n; }
  function svg(tag, attrs, parent) { var n = document.createElementNS(SVGNS, tag);
    for (var a in attrs) n.setAttribute(a, attrs[a]); if (parent) parent.appendChild(n); return n; }
  function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); }
  function short(text, n) {
    text = String(text); return text.length <= n ? text : text.slice(0, n - 1) + "\u2026"; }
  function isGroup(k) { return nodes[k].kind !== "op"; }
  function isOpen(k) { return k === "root" || !!expanded[k]; }

  // op count and ancestors, once
  var opCount = {};
  (function count(k) { var n = nodes[k];
    opCount[k] = n.kind === "op" ? 1 :
        n.children.reduce(function (s, c) { return s + count(c); }, 0);
    return opCount[k]; })("root");
  var opKey = ops.map(function (_, i) { return "o" + i; });
  function ancestors(k) { var out = []; k = nodes[k].parent;
    while (k !== null) { out.unshift(k); k = nodes[k].parent; } return out; }
  function expandAll() {
    Object.keys(nodes).forEach(function (k) { if (isGroup(k)) expanded[k] = true; }); }
  if (data.expand_all) expandAll();

  // ---------------------------------------------------------------- placement
  // An open group's children sit where dot put them; each open child grows around its
  // centre and pushes every sibling on the far side of that centre away by half the growth
  // (a monotone stretch: boxes that did not overlap still do not).
  function baseSize(k) { return isGroup(k) ? GROUP : OP; }
  function place(k) {
    var L = layouts[k];
    var items = nodes[k].children.map(function (c) {
      var inner = isGroup(c) && isOpen(c) ? place(c) : null, b = baseSize(c);
      return {key: c, cx: L.at[c][0], cy: L.at[c][1], bw: b[0], bh: b[1],
              w: inner ? inner.w : b[0], h: inner ? inner.h : b[1], inner: inner};
    });
    items.forEach(function (e) {
      var dw = (e.w - e.bw) / 2, dh = (e.h - e.bh) / 2;
      if (!dw && !dh) return;
      items.forEach(function (o) { if (o === e) return;
        o.cx += o.cx > e.cx ? dw : o.cx < e.cx ? -dw : 0;
        o.cy += o.cy > e.cy ? dh : o.cy < e.cy ? -dh : 0; });
    });
    var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    items.forEach(function (e) {
      x0 = Math.min(x0, e.cx - e.w / 2); x1 = Math.max(x1, e.cx + e.w / 2);
      y0 = Math.min(y0, e.cy - e.h / 2); y1 = Math.max(y1, e.cy + e.h / 2); });
    if (!items.length) { x0 = y0 = 0; x1 = y1 = 0; }
    var top = k === "root" ? PAD : PAD + TITLE;
    items.forEach(function (e) {
      e.x = e.cx - e.w / 2 - x0 + PAD; e.y = e.cy - e.h / 2 - y0 + top; });
    return {w: Math.max(x1 - x0 + 2 * PAD, GROUP[0]), h: y1 - y0 + top + PAD, items: items};
  }
  function absolute(inner, ox, oy) {
    inner.items.forEach(function (e) {
      boxes[e.key] = {x: ox + e.x, y: oy + e.y, w: e.w, h: e.h, open: !!e.inner};
      if (e.inner) absolute(e.inner, ox + e.x, oy + e.y);
    });
  }

  // ---------------------------------------------------------------- drawing
  var svgRoot = document.getElementById("graph"), vp = document.getElementById("viewport");
  var rootSize = {w: 0, h: 0};
  function visibleOf(i) {   // the op itself, or its outermost collapsed group
    var chain = ancestors(opKey[i]);
    for (var j = 1; j < chain.length; j++) if (!isOpen(chain[j])) return chain[j];
    return opKey[i];
  }
  function kernelColour(k) { var n = nodes[k];
    return n.kind === "kernel" ? data.kernels[n.kernel].colour : null; }
  function render() {
    boxes = {};
    var top = place("root"); rootSize = {w: top.w, h: top.h};
    absolute(top, 0, 0);
    clear(vp);
    var groupsLayer = svg("g", {}, vp), edgeLayer = svg("g", {}, vp), nodeLayer = svg("g", {}, vp);
    Object.keys(boxes).forEach(function (k) {
      if (boxes[k].open) drawGroup(groupsLayer, k, true); });
    var seen = {}, drawn = [], outDeg = {}, inDeg = {};
    data.edges.forEach(function (e) {
      var a = visibleOf(e[0]), b = visibleOf(e[1]), key = a + ">" + b;
      if (a === b || seen[key] || !boxes[a] || !boxes[b]) return;
      if (boxes[a].open || boxes[b].open) return;
      seen[key] = true; drawn.push([a, b, e[2]]);
      outDeg[a] = (outDeg[a] || 0) + 1; inDeg[b] = (inDeg[b] || 0) + 1;
    });
    // a constant or hyperparameter read by every layer would draw a fan of long edges
    // over the whole graph: such fans are faint until their end is selected
    drawn.forEach(function (e) {
      drawEdge(edgeLayer, e[0], e[1], e[2], outDeg[e[0]] > FAN || inDeg[e[1]] > 2 * FAN); });
    Object.keys(boxes).forEach(function (k) {
      if (boxes[k].open) return;
      if (isGroup(k)) drawGroup(nodeLayer, k, false); else drawOp(nodeLayer, k); });
    document.body.setAttribute("data-visible-nodes", String(Object.keys(boxes).length));
    markMatches(); markSelected();
  }
  function nodeGroup(layer, k, cls) {
    var g = svg("g", {"class": "node " + cls, "data-key": k}, layer);
    var t = svg("title", {}, g); t.textContent = fullName(k);
    g.addEventListener("click", function (ev) { ev.stopPropagation(); select(k); });
    return g;
  }
  function drawOp(layer, k) {
    var b = boxes[k], op = ops[nodes[k].op];
    var g = nodeGroup(layer, k, "op");
    svg("rect", {x: b.x, y: b.y, width: b.w, height: b.h, rx: 4}, g);
    svg("text", {x: b.x + 6, y: b.y + 15}, g).textContent = short(nodes[k].label, 23);
    svg("text", {x: b.x + 6, y: b.y + 29, "class": "sub"}, g).textContent = short(op.type, 24);
  }
  function drawGroup(layer, k, open) {
    var b = boxes[k], n = nodes[k];
    var g = nodeGroup(layer, k, "group " + n.kind + (open ? " open" : ""));
    var r = svg("rect", {x: b.x, y: b.y, width: b.w, height: b.h, rx: 8}, g);
    var colour = kernelColour(k);
    if (colour) { r.setAttribute("fill", colour); r.setAttribute("stroke", colour); }
    svg("text", {x: b.x + 8, y: b.y + 15, "class": "title"}, g).textContent =
        short(n.label, open ? 60 : 21);
    if (!open) svg("text", {x: b.x + 8, y: b.y + 31, "class": "sub"}, g).textContent =
        opCount[k] + " op" + (opCount[k] === 1 ? "" : "s") + recomputedText(k);
    var tg = svg("g", {"class": "toggle", "data-toggle": k}, g);
    svg("rect", {x: b.x + b.w - 20, y: b.y + 4, width: 15, height: 15, rx: 3}, tg);
    svg("text", {x: b.x + b.w - 16.5, y: b.y + 16}, tg).textContent = open ? "\u2212" : "+";
    tg.addEventListener("click", function (ev) { ev.stopPropagation(); toggle(k); });
    g.addEventListener("dblclick", function (ev) { ev.stopPropagation(); toggle(k); });
  }
  var FAN = 6;
  function drawEdge(layer, a, b, control, faint) {
    var s = boxes[a], t = boxes[b];
    var sx = s.x + s.w / 2, sy = s.y + s.h, tx = t.x + t.w / 2, ty = t.y;
    var d, bend = Math.max(16, (ty - sy) / 2);
    if (ty >= sy) d = curve(sx, sy, sx, sy + bend, tx, ty - bend, tx, ty);
    else {  // an edge up the page (a cycle between groups) goes round the right-hand sides
      sx = s.x + s.w; sy = s.y + s.h / 2; tx = t.x + t.w; ty = t.y + t.h / 2;
      d = curve(sx, sy, sx + 60, sy, tx + 60, ty, tx, ty);
    }
    svg("path", {d: d, "class": "edge" + (control ? " control" : "") + (faint ? " faint" : ""),
                 "marker-end": "url(#arrow)", "data-from": a, "data-to": b}, layer);
  }
  function recomputedText(k) {
    if (nodes[k].kind !== "kernel") return "";
    var n = data.kernels[nodes[k].kernel].ops.length - opCount[k];
    return n > 0 ? " (+" + n + " recomputed)" : "";
  }
  function curve(x0, y0, x1, y1, x2, y2, x3, y3) {
    return "M" + x0 + "," + y0 + " C" + x1 + "," + y1 + " " + x2 + "," + y2 + " " + x3 + "," + y3; }
  function fullName(k) { var n = nodes[k];
    if (n.kind === "op") return ops[n.op].name;
    if (n.kind === "kernel")
      return n.label + " (" + data.kernels[n.kernel].name + ") in " + (n.scope || "/");
    if (n.kind === "series") return (n.scope ? n.scope + "/" : "") + n.label;
    return n.kind === "root" ? data.title : n.scope; }

  // ---------------------------------------------------------------- view
  var s = 1, tx = 0, ty = 0, drag = null;
  function apply() {
    vp.setAttribute("transform", "translate(" + tx + "," + ty + ") scale(" + s + ")"); }
  function viewSize() { var r = svgRoot.getBoundingClientRect(); return {w: r.width, h: r.height}; }
  function fit() { var v = viewSize(), top = 40;
    s = Math.min((v.w - 20) / rootSize.w, (v.h - top - 20) / rootSize.h, 2);
    tx = (v.w - rootSize.w * s) / 2; ty = top + (v.h - top - rootSize.h * s) / 2; apply(); }
  function zoom(f, px, py) {
    var v = viewSize(); if (px === undefined) { px = v.w / 2; py = v.h / 2; }
    tx = px - (px - tx) * f; ty = py - (py - ty) * f; s *= f; apply(); }
  function centreOn(k) { var b = boxes[k], v = viewSize(); if (!b) return;
    s = Math.max(s, Math.min(1, (v.w - 40) / b.w, (v.h - 80) / b.h));
    tx = v.w / 2 - (b.x + b.w / 2) * s; ty = v.h / 2 - (b.y + b.h / 2) * s; apply(); }
  svgRoot.addEventListener("mousedown", function (e) { drag = [e.clientX - tx, e.clientY - ty]; });
  window.addEventListener("mouseup", function () { drag = null; });
  window.addEventListener("mousemove", function (e) {
    if (drag) { tx = e.clientX - drag[0]; ty = e.clientY - drag[1]; apply(); } });
  svgRoot.addEventListener("wheel", function (e) {
    e.preventDefault(); var r = svgRoot.getBoundingClientRect();
    zoom(e.deltaY < 0 ? 1.15 : 1 / 1.15, e.clientX - r.left, e.clientY - r.top);
  }, {passive: false});

  function toggle(k) { if (k === "root") return; expanded[k] = !expanded[k]; render();
    select(k); centreOn(k); }
  function reveal(k) {
    if (!nodes[k]) return;
    ancestors(k).forEach(function (a) { expanded[a] = true; });
    render(); select(k); centreOn(k); }

  // ---------------------------------------------------------------- search
  var searchBox = document.getElementById("search");
  var matchCount = document.getElementById("match-count");
  function runSearch(q) {
    q = q.trim().toLowerCase(); matches = []; matchAt = -1; searched = q;
    if (q) ops.forEach(function (op, i) {
      if (op.name.toLowerCase().indexOf(q) >= 0 || op.type.toLowerCase() === q ||
          op.type.toLowerCase().indexOf(q) >= 0) matches.push(i); });
    matchCount.textContent = !q ? "" :
        matches.length + " match" + (matches.length === 1 ? "" : "es");
    var list = document.getElementById("results"); clear(list);
    document.getElementById("results-box").open = matches.length > 0;
    matches.slice(0, 100).forEach(function (i) {
      var li = el("li", ops[i].name + "  (" + ops[i].type + ")");
      li.addEventListener("click", function () { reveal(opKey[i]); }); list.appendChild(li); });
    if (matches.length > 100)
      list.appendChild(el("li", "\u2026 " + (matches.length - 100) + " more"));
    markMatches();
  }
  function nextMatch() { if (!matches.length) return; matchAt = (matchAt + 1) % matches.length;
    reveal(opKey[matches[matchAt]]);
    matchCount.textContent = (matchAt + 1) + " of " + matches.length; }
  function markMatches() {
    var inside = {}, hit = {};
    matches.forEach(function (i) { hit[opKey[i]] = true;
      ancestors(opKey[i]).forEach(function (a) { inside[a] = true; }); });
    document.querySelectorAll(".node").forEach(function (g) { var k = g.getAttribute("data-key");
      g.classList.toggle("match", !!hit[k]);
      g.classList.toggle("match-inside", !!inside[k] && !isOpen(k)); });
  }
  searchBox.addEventListener("input", function () { runSearch(searchBox.value); });
  searchBox.addEventListener("keydown", function (e) {
    if (e.key !== "Enter") return;
    if (searchBox.value.trim().toLowerCase() !== searched) runSearch(searchBox.value);
    nextMatch(); });

  // ---------------------------------------------------------------- side panel
  var panel = document.getElementById("panel");
  function row(t, name, value) { var r = el("tr"); r.appendChild(el("th", name));
    var td = el("td");
    if (value instanceof Node) td.appendChild(value); else td.textContent = value;
    r.appendChild(td); t.appendChild(r); }
  function ref(text, k) { var a = el("a", text, "ref");
    a.addEventListener("click", function () { reveal(k); }); return a; }
  function refs(list) { var span = el("span");
    list.forEach(function (x, j) { if (j) span.appendChild(document.createTextNode(", "));
      span.appendChild(x); }); return span; }
  var CODE_BLOCKS = 3, LISTED = 12;
  var opOfId = {};
  ops.forEach(function (op, i) { opOfId[op.id] = i; });
  function capped(items) {
    var span = refs(items.slice(0, LISTED));
    if (items.length > LISTED)
      span.appendChild(document.createTextNode(" \u2026 and " + (items.length - LISTED) + " more"));
    return span;
  }
  function opByName(name) { name = name.replace(/^[\^&]/, "");
    for (var i = 0; i < ops.length; i++) if (ops[i].name === name) return i;
    name = name.replace(/:\d+$/, "");
    for (i = 0; i < ops.length; i++) if (ops[i].name === name) return i;
    return -1; }
  function codeBlock(kernelIndex) {
    var k = data.kernels[kernelIndex], box = el("div");
    box.appendChild(el("h4", "kernel " + kernelIndex + " " + k.name + " (" + k.kind + " " +
        k.dims + "): " + data.code_language + (k.function ? " of " + k.function : "") +
        (k.shares ? " (an identical earlier kernel's code, run on this kernel's buffers)" : "")));
    box.appendChild(el("pre", data.kernels[k.code_from].code ||
        "(the file has no code for this kernel)", "code"));
    return box;
  }
  function select(k) {
    selected = k; markSelected(); clear(panel);
    var n = nodes[k], t = el("table");
    if (n.kind === "op") {
      var op = ops[n.op];
      panel.appendChild(el("h3", op.name, "panel-name"));
      row(t, "type", op.type); row(t, "dtype", op.dtype); row(t, "shape", op.shape);
      row(t, "created at", op.location || "(not recorded)");
      row(t, "inputs", op.inputs.length ? refs(op.inputs.map(function (x) {
        var i = opByName(x);
        return i < 0 ? document.createTextNode(x) : ref(x, opKey[i]); })) : "-");
      if (op.attrs) row(t, "attrs", op.attrs);
      // fusion recomputes a cheap op in every kernel that reads it: drawn in the first
      if (op.kernels.length) row(t, op.kernels.length > 1 ? "kernels" : "kernel",
        capped(op.kernels.map(function (i) {
          return ref(i + " " + data.kernels[i].name, "k" + i); })));
      bufferRows(t, n.op);
      panel.appendChild(t);
      op.kernels.slice(0, CODE_BLOCKS).forEach(function (i) { panel.appendChild(codeBlock(i)); });
      if (op.kernels.length > CODE_BLOCKS) panel.appendChild(el("p", "(the code of the other " +
          (op.kernels.length - CODE_BLOCKS) + " kernels: click them above)"));
      highlightBuffers(n.op);
    } else {
      panel.appendChild(el("h3", fullName(k), "panel-name"));
      row(t, "contains", opCount[k] + " ops");
      var types = {};
      (function walk(c) { if (nodes[c].kind === "op") { var ty = ops[nodes[c].op].type;
        types[ty] = (types[ty] || 0) + 1; } else nodes[c].children.forEach(walk); })(k);
      row(t, "op types", Object.keys(types).sort(function (a, b) { return types[b] - types[a]; })
          .slice(0, 12).map(function (ty) { return ty + " \u00d7" + types[ty]; }).join(", "));
      panel.appendChild(t);
      if (k !== "root") { var bt = el("button", isOpen(k) ? "collapse" : "expand");
        bt.addEventListener("click", function () { toggle(k); }); panel.appendChild(bt); }
      if (n.kind === "kernel") {
        var elsewhere = data.kernels[n.kernel].ops.map(function (id) { return opOfId[id]; })
            .filter(function (i) { return i !== undefined && ops[i].kernels[0] !== n.kernel; });
        if (elsewhere.length) row(t, "recomputes", capped(elsewhere.map(function (i) {
          return ref(ops[i].name + " (drawn in kernel " + ops[i].kernels[0] + ")", opKey[i]); })));
        panel.appendChild(codeBlock(n.kernel));
      }
      highlightBuffers(-1);
    }
  }
  function markSelected() {
    document.querySelectorAll(".node").forEach(function (g) {
      g.classList.toggle("selected", g.getAttribute("data-key") === selected); });
    document.querySelectorAll(".edge").forEach(function (p) {
      p.classList.toggle("hot", p.getAttribute("data-from") === selected ||
                                p.getAttribute("data-to") === selected); });
  }

  // ---------------------------------------------------------------- memory chart
  function drawMemory() {
    var m = data.memory, box = document.getElementById("memory");
    if (!m) { box.appendChild(el("p", "(no memory plan: an uncompiled graph or stage)")); return; }
    box.appendChild(el("p", "Buffers as bars over the schedule (x: kernel index), offset in " +
        "the arena on the y axis; " + m.buffers.length + " buffers, arena " + m.arena + " " +
        m.note + "."));
    var W = 560, H = 240, L = 62, B = 22;
    var steps = Math.max(m.steps, 1), arena = Math.max(m.arena, 1);
    var chart = svg("svg", {id: "memory-chart", viewBox: "0 0 " + W + " " + H, width: "100%"}, box);
    var sx = (W - L - 8) / steps, sy = (H - B - 8) / arena;
    svg("rect", {x: L, y: 4, width: W - L - 8, height: H - B - 8, fill: "#fff", stroke: "#bbb"},
        chart);
    [0, 0.5, 1].forEach(function (f) { var y = 4 + f * (H - B - 8);
      svg("text", {x: L - 4, y: y + 3, "text-anchor": "end"}, chart).textContent =
          String(Math.round(f * arena)); });
    svg("text", {x: 10, y: (H - B) / 2, transform: "rotate(-90 10 " + (H - B) / 2 + ")",
                  "text-anchor": "middle"}, chart).textContent = "offset (bytes)";
    svg("text", {x: W - 8, y: H - 8, "text-anchor": "end"}, chart).textContent = "kernel \u2192";
    var tick = Math.max(1, Math.ceil(steps / 10));
    for (var i = 0; i < steps; i += tick)
      svg("text", {x: L + (i + 0.5) * sx, y: H - 8, "text-anchor": "middle"}, chart)
          .textContent = String(i);
    m.buffers.forEach(function (b) {
      var r = svg("rect", {"class": "bar", x: L + b.first * sx, y: 4 + b.offset * sy,
                           width: Math.max((b.last - b.first + 1) * sx, 1),
                           height: Math.max(b.size * sy, 1),
                           "data-op": b.op === null ? "" : String(b.op)}, chart);
      svg("title", {}, r).textContent = b.name + ": " + b.size + " B at " + b.offset +
          ", kernels " +
          b.first + ".." + b.last + (b.inplace_of ? ", in place of " + b.inplace_of : "");
      if (b.op !== null) r.addEventListener("click", function () { reveal(opKey[b.op]); });
    });
  }
  // a buffer can be a fraction of a pixel high: the selected op's are redrawn on top,
  // at least a few pixels high, with their names
  function highlightBuffers(opIndex) {
    var chart = document.getElementById("memory-chart"); if (!chart) return;
    var old = document.getElementById("memory-sel"); if (old) old.parentNode.removeChild(old);
    var layer = svg("g", {id: "memory-sel"}, chart);
    document.querySelectorAll("#memory-chart .bar").forEach(function (r) {
      var on = r.getAttribute("data-op") === String(opIndex);
      r.classList.toggle("sel", on);
      if (!on) return;
      var x = Number(r.getAttribute("x")), y = Number(r.getAttribute("y"));
      var w = Number(r.getAttribute("width")), h = Math.max(Number(r.getAttribute("height")), 4);
      svg("rect", {x: x, y: y - (h - Number(r.getAttribute("height"))) / 2, width: Math.max(w, 3),
                   height: h, fill: "#f08c5a", stroke: "#b03a00", "stroke-width": 1.5}, layer);
      svg("text", {x: Math.min(x + w + 3, 470), y: y + 3, fill: "#b03a00"}, layer).textContent =
          r.querySelector("title").textContent.split(":").slice(0, 2).join(":");
    });
  }
  function bufferRows(t, opIndex) {
    if (!data.memory) return;
    data.memory.buffers.forEach(function (b) { if (b.op !== opIndex) return;
      row(t, "buffer", b.name + ": " + b.size + " B at offset " + b.offset + ", live kernels " +
          b.first + ".." + b.last + (b.inplace_of ? ", in place of " + b.inplace_of : "")); });
  }

  // ---------------------------------------------------------------- start
  document.getElementById("target").textContent = data.target;
  document.getElementById("engine").textContent = "layout: " + data.engine +
      "; expanding a group places its children (laid out by dot inside the group) in its " +
      "box and moves the rest aside";
  document.getElementById("summary").textContent = data.summary;
  var kl = document.getElementById("kernel-list");
  data.kernels.forEach(function (k, i) {
    var li = el("li", i + ": " + k.name + " (" + k.kind + ", " + k.ops.length + " ops)");
    li.setAttribute("data-kernel", i);
    li.addEventListener("click", function () { reveal("k" + i); }); kl.appendChild(li); });
  if (!data.kernels.length) kl.appendChild(el("li", "(no kernels: an uncompiled graph)"));
  var legend = document.getElementById("legend"), kinds = {};
  data.kernels.forEach(function (k) { kinds[k.kind] = k.colour; });
  Object.keys(kinds).forEach(function (kind) { var sp = el("span", "kernel: " + kind);
    sp.style.background = kinds[kind]; legend.appendChild(sp); });
  document.getElementById("fit").addEventListener("click", fit);
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(1.25); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(0.8); });
  document.getElementById("collapse-all").addEventListener("click", function () {
    expanded = {root: true}; render(); fit(); });
  document.getElementById("expand-all").addEventListener("click", function () {
    expandAll(); render(); fit(); });
  drawMemory();
  render(); fit();
  window.graphcDump = {opCount: ops.length, render: render, fit: fit, reveal: reveal,
                       search: runSearch, nextMatch: nextMatch, toggle: toggle,
                       boxOf: function (k) { return boxes[k] || null; },
                       isOpen: isOpen, nodes: nodes, view: function () { return [s, tx, ty]; }};
  document.body.setAttribute("data-ops", String(ops.length));
  document.body.setAttribute("data-ready", "1");
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{style}</style></head>
<body><div id="side"><h2>{title}</h2>
<div>target: <span id="target"></span></div>
<div id="legend" class="legend"></div>
<div id="panel"><p>Click a box to see its op, shapes, creation line and code; + or a
double-click opens a group. Search finds ops by name or type (Enter goes to the next
match). Drag to pan, wheel to zoom.</p></div>
<h3>memory plan</h3><div id="memory"></div>
<details id="results-box"><summary>search results</summary><ul id="results"></ul></details>
<details><summary>kernels</summary><ul id="kernel-list"></ul></details>
<details><summary>summary</summary><pre id="summary"></pre></details></div>
<div id="main"><div id="toolbar"><input id="search" type="search"
placeholder="search op name or type" autocomplete="off"><span id="match-count"></span>
<button id="fit">fit</button><button id="zoom-in">+</button><button id="zoom-out">&minus;</button>
<button id="expand-all">expand all</button><button id="collapse-all">collapse all</button></div>
<svg id="graph" xmlns="http://www.w3.org/2000/svg"><defs><marker id="arrow" viewBox="0 0 10 10"
refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path
d="M0,0 L10,5 L0,10 z" fill="#777"/></marker></defs><g id="viewport"></g></svg>
<div id="engine"></div></div>
<script type="application/json" id="dump-data">{data}</script>
<script>{script}</script>
</body></html>
"""
