"""graphc-dump --format html: one self-contained page (no network).

The layout is computed here (kernels in schedule order, each a box holding its ops; for a
graph without kernels, rows by depth) and written as inline SVG; a small script pans and
zooms it (drag, wheel) and shows a kernel's ops, shapes and generated code when it or its
entry in the kernel list is clicked. Names from the file reach the page only as escaped
text (html.escape, or JSON read with textContent), never as markup.
"""
import html
import json

from graphc.dump.text import stage_ops, stage_name, summary

NODE_W, NODE_H, GAP_X, GAP_Y, PER_ROW = 190, 40, 14, 18, 5
PAD, TITLE = 10, 20


def to_html(d, stage=None):
    ops = stage_ops(d, stage)
    kernels = d.kernels if stage_name(d, stage) == "after" else []
    boxes, clusters, width, height = _layout(ops, kernels)
    svg = _svg(ops, boxes, clusters, width, height)
    data = {"title": d.path, "summary": summary(d, stage),
            "ops": {str(op.id): op.to_dict() for op in ops},
            "kernels": [{"name": k["name"], "kind": k["kind"], "dims": k.get("dims_text", ""),
                         "ops": [n for n in k.get("nodes", [])], "code": k.get("code", ""),
                         "function": k.get("function")} for k in kernels],
            "target": d.target}
    payload = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e")
    return _PAGE.format(title=html.escape(f"graphc-dump: {d.path}"), svg=svg, data=payload,
                        script=_SCRIPT, style=_STYLE)


def _layout(ops, kernels):
    """{op id: (x, y)} of each drawn op (its first kernel's copy), the cluster boxes
    [(kernel index, x, y, w, h)], and the drawing's size."""
    boxes, clusters = {}, []
    y = PAD
    if kernels:
        outside = [op for op in ops if not op.kernels]
        groups = [(None, outside)] + [(i, [op for op in ops if i in op.kernels])
                                      for i in range(len(kernels))]
    else:
        groups = [(None, row) for row in _depth_rows(ops)]
    width = 0
    for index, members in groups:
        if not members:
            continue
        top = y
        if index is not None:
            y += TITLE
        rows = [members[i:i + PER_ROW] for i in range(0, len(members), PER_ROW)]
        for row in rows:
            for j, op in enumerate(row):
                boxes.setdefault(op.id, (PAD * 2 + j * (NODE_W + GAP_X), y))
            y += NODE_H + GAP_Y
        row_w = min(len(members), PER_ROW) * (NODE_W + GAP_X) - GAP_X
        if index is not None:
            clusters.append((index, PAD, top - 4, row_w + PAD * 2, y - top - GAP_Y + 10))
            y += GAP_Y
        width = max(width, row_w + PAD * 4)
    return boxes, clusters, max(width, 300), y + PAD


def _depth_rows(ops):
    by_name = {op.name: op for op in ops}
    depth = {}
    for op in ops:  # ops come in a topological order (graph or module order)
        deps = [by_name.get(s.lstrip("^")) or by_name.get(s.lstrip("^").rsplit(":", 1)[0])
                for s in op.inputs]
        depth[op.id] = 1 + max([depth.get(p.id, 0) for p in deps if p is not None] + [-1])
    rows = {}
    for op in ops:
        rows.setdefault(depth[op.id], []).append(op)
    return [rows[k] for k in sorted(rows)]


def _svg(ops, boxes, clusters, width, height):
    e = html.escape
    by_name = {op.name: op for op in ops}
    parts = [f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} '
             f'{height}"><g id="viewport">']
    for index, x, y, w, h in clusters:
        parts.append(f'<g class="kernel" data-kernel="{index}"><rect x="{x}" y="{y}" '
                     f'width="{w}" height="{h}" rx="8"/><text x="{x + 8}" y="{y + 15}">'
                     f'kernel {index}</text></g>')
    for op in ops:
        if op.id not in boxes:
            continue
        x2, y2 = boxes[op.id]
        for src in op.inputs:
            name = src.lstrip("^")
            p = by_name.get(name) or by_name.get(name.rsplit(":", 1)[0])
            if p is None or p.id not in boxes:
                continue
            x1, y1 = boxes[p.id]
            sx, sy, tx, ty = x1 + NODE_W / 2, y1 + NODE_H, x2 + NODE_W / 2, y2
            mid = (sy + ty) / 2
            parts.append(f'<path class="edge" d="M{sx},{sy} C{sx},{mid} {tx},{mid} {tx},{ty}"/>')
    for op in ops:
        if op.id not in boxes:
            continue
        x, y = boxes[op.id]
        label = op.name if len(op.name) <= 28 else "…" + op.name[-27:]
        detail = f"{op.type} {op.dtype}{op.shape}"
        detail = detail if len(detail) <= 32 else detail[:31] + "…"
        parts.append(f'<g class="op" data-op="{op.id}"><title>{e(op.name)}</title>'
                     f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="4"/>'
                     f'<text x="{x + 6}" y="{y + 16}">{e(label)}</text>'
                     f'<text class="detail" x="{x + 6}" y="{y + 31}">{e(detail)}</text></g>')
    parts.append("</g></svg>")
    return "".join(parts)


_STYLE = """
body { margin: 0; font: 13px Helvetica, Arial, sans-serif; display: flex; height: 100vh; }
#side { width: 34%; min-width: 280px; overflow: auto; border-right: 1px solid #ccc;
        padding: 8px; box-sizing: border-box; }
#main { flex: 1; overflow: hidden; position: relative; background: #fafafa; }
#graph { width: 100%; height: 100%; cursor: grab; }
.kernel rect { fill: #e8f0fb; stroke: #3465a4; stroke-width: 1.5; }
.kernel text { fill: #3465a4; font-weight: bold; font-size: 12px; }
.kernel.selected rect { fill: #fff3c4; stroke: #c4a000; }
.op rect { fill: #fff; stroke: #555; }
.op text { font-size: 11px; } .op text.detail { fill: #666; font-size: 10px; }
.op.selected rect { stroke: #c00; stroke-width: 2; }
.edge { fill: none; stroke: #999; stroke-width: 1; }
#kernel-list li { cursor: pointer; padding: 2px 0; } #kernel-list li:hover { color: #c00; }
pre { background: #f4f4f4; padding: 6px; overflow: auto; font-size: 11px; }
table { border-collapse: collapse; font-size: 11px; } td, th { padding: 1px 6px;
  border-bottom: 1px solid #eee; text-align: left; }
"""

_SCRIPT = r"""
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push(String(e.message)); document.body.setAttribute("data-errors", errors.join("; "));
  });
  var data = JSON.parse(document.getElementById("dump-data").textContent);
  function el(tag, text) { var n = document.createElement(tag);
    if (text !== undefined) n.textContent = text; return n; }
  var details = document.getElementById("details");
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function opTable(ids) {
    var t = el("table"), h = el("tr");
    ["name", "type", "dtype", "shape", "inputs"].forEach(function (c) { h.appendChild(el("th", c)); });
    t.appendChild(h);
    ids.forEach(function (id) {
      var op = data.ops[String(id)]; if (!op) return;
      var r = el("tr");
      [op.name, op.type, op.dtype, op.shape, op.inputs.join(", ")].forEach(function (c) {
        r.appendChild(el("td", c)); });
      t.appendChild(r);
    });
    return t;
  }
  function select(cls, attr, value) {
    document.querySelectorAll("." + cls).forEach(function (g) {
      g.classList.toggle("selected", g.getAttribute(attr) === String(value)); });
  }
  function showKernel(i) {
    var k = data.kernels[i]; clear(details);
    details.appendChild(el("h3", "kernel " + i + ": " + k.name + " (" + k.kind + " " + k.dims + ")"));
    details.appendChild(opTable(k.ops));
    details.appendChild(el("h4", "generated code" + (k.function ? " (" + k.function + ")" : "")));
    details.appendChild(el("pre", k.code || "(none)"));
    select("kernel", "data-kernel", i);
  }
  function showOp(id) {
    var op = data.ops[String(id)]; clear(details);
    details.appendChild(el("h3", op.name));
    details.appendChild(opTable([id]));
    if (op.attrs) details.appendChild(el("pre", op.attrs));
    if (op.kernels.length) details.appendChild(el("p", "in kernel(s) " + op.kernels.join(", ")));
    select("op", "data-op", id);
  }
  var list = document.getElementById("kernel-list");
  data.kernels.forEach(function (k, i) {
    var li = el("li", i + ": " + k.name + " (" + k.kind + ", " + k.ops.length + " ops)");
    li.setAttribute("data-kernel", i);
    li.addEventListener("click", function () { showKernel(i); });
    list.appendChild(li);
  });
  if (!data.kernels.length) list.appendChild(el("li", "(no kernels: an uncompiled graph)"));
  document.getElementById("summary").textContent = data.summary;
  document.querySelectorAll(".kernel").forEach(function (g) {
    g.addEventListener("click", function (e) { e.stopPropagation();
      showKernel(Number(g.getAttribute("data-kernel"))); });
  });
  document.querySelectorAll(".op").forEach(function (g) {
    g.addEventListener("click", function (e) { e.stopPropagation();
      showOp(g.getAttribute("data-op")); });
  });
  // pan (drag) and zoom (wheel, around the cursor)
  var svg = document.getElementById("graph"), vp = document.getElementById("viewport");
  var s = 1, tx = 0, ty = 0, drag = null;
  function apply() { vp.setAttribute("transform", "translate(" + tx + "," + ty + ") scale(" + s + ")"); }
  svg.addEventListener("mousedown", function (e) { drag = [e.clientX - tx, e.clientY - ty]; });
  window.addEventListener("mouseup", function () { drag = null; });
  window.addEventListener("mousemove", function (e) {
    if (drag) { tx = e.clientX - drag[0]; ty = e.clientY - drag[1]; apply(); } });
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = svg.getBoundingClientRect(), f = e.deltaY < 0 ? 1.15 : 1 / 1.15;
    var px = e.clientX - r.left, py = e.clientY - r.top;
    tx = px - (px - tx) * f; ty = py - (py - ty) * f; s *= f; apply();
  }, {passive: false});
  document.body.setAttribute("data-ready", "1");
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{style}</style></head>
<body><div id="side"><h2>{title}</h2>
<h3>kernels</h3><ul id="kernel-list"></ul>
<div id="details"><p>Click a kernel (or an op) to see its ops, shapes and code.
Drag to pan, wheel to zoom.</p></div>
<h3>summary</h3><pre id="summary"></pre></div>
<div id="main">{svg}</div>
<script type="application/json" id="dump-data">{data}</script>
<script>{script}</script>
</body></html>
"""
