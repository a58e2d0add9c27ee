"""graphc-dump's HTML page: the compound layout (layout.py) checked in Python, and the page
driven in headless Chromium over the DevTools protocol on a 2,000-op training graph (real
mouse clicks and typing; screenshots into the test's directory and $GRAPHC_TEST_ARTEFACTS)."""
import base64
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import numpy as np
import pytest

import graphc as gc
from graphc import graph_io
from graphc.dump import html_page, layout, read_dump
from graphc.export import export

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
VIEW_W, VIEW_H = 1600, 1000


# ------------------------------------------------------------------ graphs
def _training_graph(depth, width=16):
    """An MLP of `depth` dense layers trained by Adam, its train step fetched through a
    control dependency; returns (graph, feeds, fetches, init)."""
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, width], name="x")
        y = gc.placeholder(gc.float32, [None, 4], name="y")
        h = x
        for i in range(depth):
            h = gc.layers.dense(h, width, activation=gc.nn.relu, name=f"dense_{i}")
        logits = gc.layers.dense(h, 4, name="logits")
        loss = gc.reduce_mean(gc.nn.softmax_cross_entropy_with_logits_v2(
            labels=y, logits=logits), name="loss")
        train = gc.train.AdamOptimizer(1e-3).minimize(loss)
        with gc.control_dependencies([train]):
            step = gc.identity(loss, name="step_loss")
        init = gc.global_variables_initializer()
    return g, {"x": x, "y": y}, {"loss": step}, init


@pytest.fixture(scope="module")
def big_export(tmp_path_factory):
    """A depth-45 MLP with Adam: about 2,000 ops after the passes."""
    g, feeds, fetches, init = _training_graph(45)
    with gc.Session(graph=g) as sess:
        sess.run(init)
        path = str(tmp_path_factory.mktemp("dump_big") / "mlp45.gcx")
        export(sess, path, feeds, fetches)
    return path


def _overlaps(layout_, sizes):
    boxes = [(cx - sizes[k][0] / 2, cy - sizes[k][1] / 2, cx + sizes[k][0] / 2,
              cy + sizes[k][1] / 2, k) for k, (cx, cy) in layout_["at"].items()]
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 \
                    and b[1] < a[3] - 0.5:
                out.append((a[4], b[4]))
    return out


# ------------------------------------------------------------------ the compound graph
@pytest.mark.parametrize("engine", ["dot", "fallback"])
def test_compound_groups_and_layout(big_export, engine):
    if engine == "dot" and shutil.which("dot") is None:
        pytest.skip("Graphviz `dot` is not installed (CI installs it)")
    d = read_dump(big_export)
    ops = d.stages["after"]
    assert len(ops) >= 2000
    c = layout.compound(ops, d.kernels, dot=None if engine == "dot" else False)
    assert c.engine.startswith("Graphviz dot" if engine == "dot" else
                               "simple layered layout (Graphviz `dot` is not installed)")
    # every op is in the tree exactly once, under its kernel or a scope its name is in (a
    # scope holding only one thing gives its place to that thing)
    op_nodes = [n for n in c.nodes.values() if n.kind == "op"]
    assert sorted(n.op for n in op_nodes) == list(range(len(ops)))
    for n in op_nodes:
        parent = c.nodes[n.parent]
        op = ops[n.op]
        if op.kernels:
            assert parent.kind == "kernel" and parent.kernel == op.kernels[0]
        else:
            assert parent.kind in ("scope", "root")
            scope = layout.scope_of(op.name)
            assert parent.scope == "/".join(scope[:len(parent.scope.split("/"))]) \
                or parent.kind == "root"
    # every kernel is a group, its ops drawn in it unless an earlier kernel computes them too
    assert {n.kernel for n in c.nodes.values() if n.kind == "kernel"} == \
        {i for i, k in enumerate(d.kernels) if k["nodes"]}
    for n in c.nodes.values():
        if n.kind == "kernel":
            members = [ops[c.nodes[ch].op].name for ch in n.children]
            assert all(name.startswith(n.scope + "/") for name in members) or n.scope == ""
    # the 45 layers are one series, the first view a dozen boxes
    root = [c.nodes[k].label for k in c.nodes["root"].children]
    assert "dense_[0..44]" in root and len(root) < 30, root
    # each group's interior: every child placed, no two boxes overlapping
    for key, lay in c.layouts.items():
        children = c.nodes[key].children
        assert set(lay["at"]) == set(children)
        sizes = {k: layout.box_size(c, k) for k in children}
        assert not _overlaps(lay, sizes), (key, _overlaps(lay, sizes)[:3])
        assert all(0 <= x <= lay["w"] + 1 and 0 <= y <= lay["h"] + 1
                   for x, y in lay["at"].values())
    # edges: one per (producer, consumer) pair, control inputs marked
    names = {op.name: i for i, op in enumerate(ops)}
    some = next(op for op in ops if op.type == "MatMul" and len(op.inputs) == 2)
    j = names[some.name]
    assert {(names[s.rsplit(":", 1)[0]] if s not in names else names[s]) for s in some.inputs} \
        <= {i for i, t, _ in c.edges if t == j}


def test_default_layer_names_form_one_series(tmp_path, monkeypatch):
    """TF's unnamed layers are dense, dense_1, dense_2, ...: one series with all of them."""
    g = gc.Graph()
    with g.as_default():
        h = gc.placeholder(gc.float32, [None, 3], name="x")
        for _ in range(6):
            h = gc.layers.dense(h, 3)
    monkeypatch.chdir(tmp_path)
    graph_io.write_graph(g, ".", "graph.json")
    ops = read_dump("graph.json").stages["graph"]
    c = layout.compound(ops, [])
    (series,) = [n for n in c.nodes.values() if n.kind == "series"]
    assert series.parent == "root" and series.label == "dense, dense_[1..5]"
    assert [c.nodes[k].label for k in series.children] == \
        ["dense"] + [f"dense_{i}" for i in range(1, 6)]
    assert [c.nodes[k].label for k in c.nodes["root"].children] == ["x", "dense, dense_[1..5]"]


def test_layered_fallback_breaks_cycles_between_groups():
    children = ["oa", "ob", "oc"]
    lay = layout._layered((children, {(0, 1), (1, 2), (2, 0)}),
                          [(layout.OP_W, layout.OP_H)] * 3)
    ys = [lay["at"][k][1] for k in children]
    assert ys[0] < ys[1] < ys[2]        # the cycle is broken at its first child


def test_page_says_which_layout_it_used(big_export):
    d = read_dump(big_export)
    page = html_page.to_html(d, dot=False)
    data = _page_data(page)
    assert data["engine"] == "simple layered layout (Graphviz `dot` is not installed)"
    assert data["expand_all"] is False and len(data["ops"]) == len(d.stages["after"])


def _page_data(page):
    m = re.search(r'<script type="application/json" id="dump-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


def test_page_of_a_gpu_file_shows_ptx(tmp_path):
    g, feeds, fetches, init = _training_graph(2)
    with gc.Session(graph=g) as sess:
        sess.run(init)
        path = export(sess, str(tmp_path / "gpu.gcx"), feeds, fetches, target="gpu")
    d = read_dump(path)
    data = _page_data(html_page.to_html(d))
    assert data["code_language"] == "PTX" and data["target"] == "GPU sm_80"
    for k in data["kernels"]:
        code = data["kernels"][k["code_from"]]["code"]
        assert code.startswith(".visible .entry kernel_") and ".emulate" not in code


def test_memory_chart_data_at_the_symbol_hints(big_export):
    d = read_dump(big_export)
    data = _page_data(html_page.to_html(d))
    hints = d.symbol_hints
    plan = d.memory_plan["buffers"]
    bars = {b["name"]: b for b in data["memory"]["buffers"]}
    assert len(bars) == len(plan)
    from runtime import shapes
    for b in plan:
        bar = bars[b["name"]]
        assert bar["offset"] == shapes.evaluate(b["offset"], hints)
        assert bar["size"] == shapes.evaluate(b["size"], hints)
        assert (bar["first"], bar["last"]) == tuple(b["live"])
        op = data["ops"][bar["op"]]
        assert op["name"] == b["name"].rsplit(":", 1)[0]
    assert data["memory"]["steps"] == len(d.kernels)


# ------------------------------------------------------------------ headless Chromium
class Browser:
    """Headless Chromium driven over the DevTools protocol (websocket-client)."""

    def __init__(self, profile):
        websocket = pytest.importorskip("websocket")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--disable-background-networking", "--disable-component-update", "--no-first-run",
             "--disable-sync", "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--window-size={VIEW_W},{VIEW_H}", f"--user-data-dir={profile}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list",
                                                 timeout=30))
        url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
        self.ws = websocket.create_connection(url, timeout=120, suppress_origin=True)
        self.next_id = 0
        self.console_errors = []
        self.call("Runtime.enable")
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=VIEW_W, height=VIEW_H,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("method") == "Runtime.exceptionThrown":
                self.console_errors.append(msg["params"]["exceptionDetails"].get("text"))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def open(self, url):
        self.call("Page.navigate", url=url)
        for _ in range(600):
            if self.js("document.body && document.body.getAttribute('data-ready')") == "1":
                return
            if self.js("document.body && document.body.getAttribute('data-errors')"):
                break
            time.sleep(0.1)
        raise AssertionError(f"page not ready: {self.js('document.body.outerHTML.slice(0, 500)')}")

    def js(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def centre(self, selector):
        rect = self.js(f"(function () {{ var e = document.querySelector({json.dumps(selector)});"
                       " if (!e) return null; var r = e.getBoundingClientRect();"
                       " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        assert rect is not None, f"nothing matches {selector}"
        return rect

    def click(self, selector, count=1):
        x, y = self.centre(selector)
        assert 0 <= x < VIEW_W and 0 <= y < VIEW_H, (selector, x, y)
        for n in range(1, count + 1):
            for kind in ("mousePressed", "mouseReleased"):
                self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                          clickCount=n)

    def type(self, text):
        self.call("Input.insertText", text=text)

    def enter(self):
        for kind in ("rawKeyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                      windowsVirtualKeyCode=13)

    def screenshot(self, path):
        png = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        with open(path, "wb") as f:
            f.write(png)
        return len(png)

    def close(self):
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def browser(tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); CI "
                    "installs it and runs this test")
    b = Browser(str(tmp_path / "profile"))
    yield b
    b.close()


class Shots:
    """Screenshots into the test's directory, copied to $GRAPHC_TEST_ARTEFACTS if set."""

    def __init__(self, browser, directory):
        self.browser, self.directory = browser, directory
        self.extra = os.environ.get("GRAPHC_TEST_ARTEFACTS")

    def take(self, name):
        path = os.path.join(self.directory, name + ".png")
        assert self.browser.screenshot(path) > 10_000   # a drawn page, not a blank one
        if self.extra:
            os.makedirs(self.extra, exist_ok=True)
            shutil.copy(path, os.path.join(self.extra, name + ".png"))


def _visible_keys(b):
    return set(b.js("Array.from(document.querySelectorAll('#viewport .node'))"
                    ".map(function (g) { return g.getAttribute('data-key'); })"))


def _in_view(b, key):
    x, y = b.centre(f'#viewport .node[data-key="{key}"]')
    return 500 < x < VIEW_W and 0 < y < VIEW_H


def test_page_on_a_2000_op_training_graph(browser, big_export, tmp_path):
    d = read_dump(big_export)
    ops = d.stages["after"]
    page = tmp_path / "mlp45.html"
    from graphc.dump import main
    assert main([big_export, "--format", "html", "-o", str(page)]) == 0
    b, shots = browser, Shots(browser, str(tmp_path))
    b.open(page.as_uri())
    assert b.js("document.body.getAttribute('data-errors')") is None
    # the page counts the file's ops, and opens on a few dozen boxes
    assert int(b.js("document.body.getAttribute('data-ops')")) == len(ops) >= 2000
    visible = _visible_keys(b)
    assert 5 <= len(visible) <= 40, len(visible)
    assert int(b.js("document.body.getAttribute('data-visible-nodes')")) == len(visible)
    assert b.js("document.querySelectorAll('#viewport path.edge[marker-end]').length") > 5
    assert "Graphviz dot" in b.js("document.getElementById('engine').textContent") \
        or shutil.which("dot") is None
    shots.take("01_overview_collapsed")

    # a click on a kernel group's + shows its ops inside it
    kernel = next(i for i, k in enumerate(d.kernels)
                  if f"k{i}" in visible and len(k["nodes"]) >= 3)
    b.click(f'#viewport [data-toggle="k{kernel}"]')
    assert b.js(f"window.graphcDump.isOpen('k{kernel}')") is True
    shown = b.js("Array.from(document.querySelectorAll('#viewport .node.op title'))"
                 ".map(function (t) { return t.textContent; })")
    members = [op.name for op in ops if op.kernels and op.kernels[0] == kernel]
    assert members and set(members) <= set(shown)
    assert "kernel" in b.js("document.querySelector('#panel h3').textContent")
    assert "define" in b.js("document.querySelector('#panel pre.code').textContent")
    # and a scope group's + shows its children (the layers' series inside 'gradients')
    b.click("#fit")
    b.click('#viewport [data-toggle="s/gradients"]')
    assert "s/gradients/dense_[]" in _visible_keys(b)
    b.click('#fit')
    shots.take("02_kernel_and_gradients_expanded")

    # search by name: typed into the box, Enter reveals, highlights and centres the op
    target = next(op for op in ops if op.name.startswith("Adam/update_dense_30/kernel/")
                  and not op.kernels) if any(
        op.name.startswith("Adam/update_dense_30/kernel/") and not op.kernels for op in ops) \
        else next(op for op in ops if op.name.startswith("Adam/update_dense_30/"))
    key = f"o{ops.index(target)}"
    assert key not in _visible_keys(b)
    b.click("#search")
    b.type(target.name)
    expected = [op for op in ops if target.name.lower() in op.name.lower()]
    count = b.js("document.getElementById('match-count').textContent")
    assert count == f"{len(expected)} match" + ("" if len(expected) == 1 else "es")
    b.enter()
    assert key in _visible_keys(b)
    assert b.js(f"document.querySelector('#viewport .node[data-key=\"{key}\"]')"
                ".classList.contains('match')") is True
    assert _in_view(b, key)
    assert b.js("document.querySelector('#panel h3').textContent") == target.name
    shots.take("03_search_found_adam_update")

    # Enter again goes to the next match
    b.js("document.getElementById('search').value = ''")
    b.click("#search")
    prefix = target.name.rsplit("/", 1)[0] + "/"
    b.type(prefix)
    in_order = [op.name for op in ops if prefix.lower() in op.name.lower()]
    assert len(in_order) >= 2
    b.enter()
    assert b.js("document.querySelector('#panel h3').textContent") == in_order[0]
    b.enter()
    assert b.js("document.querySelector('#panel h3').textContent") == in_order[1]
    assert b.js("document.getElementById('match-count').textContent") == \
        f"2 of {len(in_order)}"

    # search by op type
    b.js("document.getElementById('search').value = ''")
    b.click("#search")
    b.type("ApplyAdam" if any(op.type == "ApplyAdam" for op in ops) else "MatMul")
    n_type = int(b.js("document.getElementById('match-count').textContent").split()[0])
    typed = b.js("document.getElementById('search').value")
    assert n_type == sum(typed.lower() in op.name.lower() or typed.lower() in op.type.lower()
                         for op in ops) > 0

    # a click on an op opens the panel: name, shapes, dtype, creation line, code, buffers
    clicked = next(op for op in ops if op.name == "dense_3/Relu")
    ckey = f"o{ops.index(clicked)}"
    b.js(f"window.graphcDump.reveal('{ckey}')")
    b.js("window.graphcDump.search('')")
    b.click("#panel")   # the panel is not the graph: a click there changes nothing
    b.click(f'#viewport .node[data-key="{ckey}"] rect')
    panel = b.js("document.getElementById('panel').innerText")
    assert b.js("document.querySelector('#panel h3').textContent") == "dense_3/Relu"
    assert clicked.shape in panel and "float32" in panel and "Relu" in panel
    assert re.search(r"test_dump_html\.py:\d+ \(_training_graph\)", panel), panel
    code = b.js("document.querySelector('#panel pre.code').textContent")
    assert code.startswith("define") and d.kernels[clicked.kernels[0]]["code"] == code
    sel = b.js("Array.from(document.querySelectorAll('#memory-chart .bar.sel'))"
               ".map(function (r) { return r.querySelector('title').textContent; })")
    planned = [buf["name"] for buf in d.memory_plan["buffers"]
               if buf["name"].rsplit(":", 1)[0] == "dense_3/Relu"]
    assert planned and [t.split(": ")[0] for t in sel] == planned
    b.js("document.getElementById('memory').scrollIntoView()")
    shots.take("05_memory_chart_dense_3_relu_buffer")
    b.js("document.getElementById('side').scrollTop = 0")
    shots.take("04_panel_of_dense_3_relu")

    # the wheel zooms around the cursor, a drag pans
    before = b.js("window.graphcDump.view()")
    b.call("Input.dispatchMouseEvent", type="mouseWheel", x=1000, y=500, deltaX=0, deltaY=-300)
    zoomed = b.js("window.graphcDump.view()")
    assert zoomed[0] == pytest.approx(before[0] * 1.15)
    px = 1000 - b.js("document.getElementById('graph').getBoundingClientRect().left")
    assert zoomed[1] == pytest.approx(px - (px - before[1]) * 1.15)
    for kind, x in (("mousePressed", 900), ("mouseMoved", 950), ("mouseMoved", 1000),
                    ("mouseReleased", 1000)):
        b.call("Input.dispatchMouseEvent", type=kind, x=x, y=300, button="left",
               buttons=1 if kind != "mouseReleased" else 0)
    panned = b.js("window.graphcDump.view()")
    assert panned[0] == zoomed[0] and panned[1] == pytest.approx(zoomed[1] + 100)

    # a kernel that recomputes ops drawn in an earlier kernel lists them in its panel
    recomputing = next(i for i, k in enumerate(d.kernels)
                       if any(ops[j].kernels[0] != i for j, op in enumerate(ops)
                              if op.id in k["nodes"]))
    b.js(f"window.graphcDump.reveal('k{recomputing}')")
    panel = b.js("document.getElementById('panel').innerText")
    elsewhere = [op.name for op in ops
                 if op.id in d.kernels[recomputing]["nodes"] and op.kernels[0] != recomputing]
    assert "recomputes" in panel and elsewhere[0] + " (drawn in kernel" in panel

    # everything open: every op drawn once
    b.click("#expand-all")
    assert len([k for k in _visible_keys(b) if k.startswith("o")]) == len(ops)
    shots.take("06_everything_expanded_fit")
    # fit-to-screen after collapsing everything: the whole graph inside the view
    b.click("#collapse-all")
    b.click("#fit")
    r = b.js("(function () { var r = document.getElementById('viewport').getBBox();"
             " var m = document.getElementById('viewport').getScreenCTM();"
             " return [r.x * m.a + m.e, r.y * m.d + m.f, (r.x + r.width) * m.a + m.e,"
             " (r.y + r.height) * m.d + m.f]; })()")
    left = b.js("document.getElementById('graph').getBoundingClientRect().left")
    assert r[0] >= left - 1 and r[2] <= VIEW_W + 1 and r[1] >= 0 and r[3] <= VIEW_H + 1
    assert not b.console_errors, b.console_errors


def test_hostile_names_stay_text(browser, tmp_path, monkeypatch):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 2], name="x")
        gc.add(x, 1.0, name="z")
    monkeypatch.chdir(tmp_path)
    graph_io.write_graph(g, ".", "graph.json")
    hostile = "scope/</script><img src=x onerror=window.pwned=1>"
    raw = open("graph.json").read().replace('"z"', json.dumps(hostile))
    assert raw.count(json.dumps(hostile)) == 1
    open("graph.json", "w").write(raw)
    d = read_dump("graph.json")
    assert any(op.name == hostile for op in d.stages["graph"])
    page = html_page.to_html(d)
    assert "</script><img" not in page and "<img" not in page
    (tmp_path / "hostile.html").write_text(page)
    browser.open((tmp_path / "hostile.html").as_uri())
    assert browser.js("document.querySelectorAll('img').length") == 0
    assert browser.js("window.pwned === undefined") is True
    titles = browser.js("Array.from(document.querySelectorAll('#viewport .node title'))"
                        ".map(function (t) { return t.textContent; })")
    assert hostile in titles
    key = next(k for k, n in _page_data(page)["nodes"].items()
               if n["kind"] == "op" and _page_data(page)["ops"][n["op"]]["name"] == hostile)
    browser.click(f'#viewport .node[data-key="{key}"] rect')
    assert browser.js("document.querySelector('#panel h3').textContent") == hostile
    assert browser.js("document.querySelectorAll('img').length") == 0
    assert browser.js("window.pwned === undefined") is True


def test_page_carries_each_function_once(big_export):
    d = read_dump(big_export)
    page = html_page.to_html(d)
    kernels = _page_data(page)["kernels"]
    assert len(kernels) == len(d.kernels)
    for i, k in enumerate(kernels):
        source = kernels[k["code_from"]]
        assert source["code"] == d.kernels[i]["code"] and source["code_from"] == k["code_from"]
        assert (k["code"] is None) == (k["code_from"] != i)
    with_text = [k for k in kernels if k["code"] is not None]
    assert len({k["function"] for k in with_text}) == len(with_text) < len(kernels)
    assert len(page) < 3_000_000      # 45 layers: the repeated kernels' code is not repeated


@pytest.mark.parametrize("n_ops", [0, 1])
def test_empty_and_one_op_graphs(browser, tmp_path, monkeypatch, n_ops):
    g = gc.Graph()
    with g.as_default():
        for i in range(n_ops):
            gc.placeholder(gc.float32, [2], name=f"only_{i}")
    monkeypatch.chdir(tmp_path)
    graph_io.write_graph(g, ".", "graph.json")
    page = html_page.to_html(read_dump("graph.json"))
    (tmp_path / "page.html").write_text(page)
    browser.open((tmp_path / "page.html").as_uri())
    assert browser.js("document.body.getAttribute('data-errors')") is None
    assert browser.js("document.body.getAttribute('data-visible-nodes')") == str(n_ops)
    assert not browser.console_errors
