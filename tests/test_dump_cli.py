"""graphc-dump: golden text and JSON on small known files, every view on a real export,
one-line errors, and the HTML page in headless chromium."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import graphc as gc
from graphc import graph_io
from graphc.dump import main
from graphc.dump_cli import main as console_main
from graphc.export import export
from runtime import file_format
from tests.test_runtime import add_spec, sym

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = {"triple": "x86_64-unknown-linux-gnu", "cpu": "generic", "features": ""}
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium"
                                        if os.path.exists("/usr/bin/chromium") else None)


def dump(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------ small known files
@pytest.fixture
def graph_file(tmp_path, monkeypatch):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 2], name="x")
        w = gc.constant([[1.0, 2.0], [3.0, 4.0]], name="w")
        y = gc.matmul(x, w, name="y")
        gc.add(y, 1.0, name="z")
    monkeypatch.chdir(tmp_path)
    graph_io.write_graph(g, ".", "graph.json")
    return "graph.json"


GRAPH_TEXT = """\
saved graph graph.json (format 1)
graph: 5 ops
  name   type         dtype    shape  inputs
  x      Placeholder  float32  [?,2]  -
  w      Const        float32  [2,2]  -
  y      MatMul       float32  [?,2]  x:0, w:0
  Const  Const        float32  []     -
  z      Add          float32  [?,2]  y:0, Const:0
"""


def test_golden_text_of_saved_graph(capsys, graph_file):
    rc, out, err = dump(capsys, graph_file)
    assert rc == 0 and err == ""
    assert out == GRAPH_TEXT


def test_golden_json_of_saved_graph(capsys, graph_file):
    rc, out, _ = dump(capsys, graph_file, "--format", "json")
    assert rc == 0
    data = json.loads(out)
    assert data["kind"] == "graph" and data["path"] == "graph.json"
    ops = data["stages"]["graph"]
    assert [(o["name"], o["type"], o["dtype"], o["shape"], o["inputs"]) for o in ops] == [
        ("x", "Placeholder", "float32", "[?,2]", []),
        ("w", "Const", "float32", "[2,2]", []),
        ("y", "MatMul", "float32", "[?,2]", ["x:0", "w:0"]),
        ("Const", "Const", "float32", "[]", []),
        ("z", "Add", "float32", "[?,2]", ["y:0", "Const:0"])]
    assert "transpose_a=false" in ops[2]["attrs"]


def _parameter(id, name, dims):
    return {"id": id, "type": "Parameter", "name": name, "attrs": {"index": id}, "inputs": [],
            "outputs": [{"dtype": "float32", "dims": dims}], "control_deps": [],
            "location": None, "gradient_of": None}


@pytest.fixture
def compiled_file(tmp_path, monkeypatch):
    """The hand-written add executable with hand-written compiler records."""
    n = {"expr": sym("x.0"), "hint": 8}
    graph = {"name": "m", "variables": [], "params": [0, 1], "outputs": [[2, 0]], "roots": [],
             "symbols": [["x.0", 0, 0]], "guards": [],
             "nodes": [_parameter(0, "x:0", [n]), _parameter(1, "y:0", [n]),
                       {"id": 2, "type": "Add", "name": "add", "attrs": {},
                        "inputs": [[0, 0], [1, 0]],
                        "outputs": [{"dtype": "float32", "dims": [n]}], "control_deps": [],
                        "location": None, "gradient_of": None}]}
    spec = add_spec()
    spec["target"] = TARGET
    spec["debug"] = {
        "pass_counts": {"cse": {"merged": 0}, "fusion": {"kernels": 1, "nodes_fused": 1}},
        "pass_order": ["cse", "fusion"], "symbol_hints": {"x.0": 8},
        "kernels": [{"name": "loop_0", "kind": "loop", "function_prefix": "graphc_main",
                     "nodes": [2], "inputs": ["%0", "%1"], "outputs": ["%2"], "updates": [],
                     "dims": [sym("x.0")]}],
        "memory_plan": {"arena_bytes": sym("x.0", 64),
                        "stats": {"arena": sym("x.0", 64), "sum_of_buffers": sym("x.0", 128),
                                  "lower_bound": sym("x.0", 64)},
                        "buffers": [{"value": "%9", "name": "tmp:0", "dtype": "float32",
                                     "dims": [sym("x.0")], "offset": 0,
                                     "size": sym("x.0", 64), "live": [0, 0],
                                     "inplace_of": None}]},
        "graph_before": graph, "graph_after": graph,
        "pass_texts": {"lowered": "module m(...)\n", "fusion": "after fusion\n"}}
    dims = [sym("x.0")]
    signature = {"inputs": [{"name": "x", "tensor": "x:0", "dtype": "float32", "dims": dims},
                            {"name": "y", "tensor": "y:0", "dtype": "float32", "dims": dims}],
                 "outputs": [{"name": "z", "tensor": "add:0", "dtype": "float32",
                              "dims": dims}]}
    monkeypatch.chdir(tmp_path)
    return file_format.write("add.gcx", signature, [spec], target=TARGET)


COMPILED_TEXT = """\
compiled graph add.gcx (format 2)
target: x86_64-unknown-linux-gnu cpu=generic
  input  x: float32 [x.0]  (x:0)
  input  y: float32 [x.0]  (y:0)
  output z: float32 [x.0]  (add:0)
  executable 0: guards none

graph after passes: 3 ops
  name  type       dtype    shape  inputs    kernel
  x:0   Parameter  float32  [x.0]  -         -
  y:0   Parameter  float32  [x.0]  -         -
  add   Add        float32  [x.0]  x:0, y:0  0

kernels: 1
  0 loop_0 (loop [x.0]): add

memory plan: arena 64*x.0 (512) bytes, sum of buffers 128*x.0 (1024), peak live 64*x.0 (512)  (values in parentheses at x.0=8)
  buffer  dtype    shape  size          offset  live  in place of
  tmp:0   float32  [x.0]  64*x.0 (512)  0       0..0  -

pass counts:
  cse: merged=0
  fusion: kernels=1, nodes_fused=1
"""


def test_golden_text_of_compiled_file(capsys, compiled_file):
    rc, out, err = dump(capsys, compiled_file)
    assert rc == 0 and err == ""
    assert out == COMPILED_TEXT


def test_golden_json_of_compiled_file(capsys, compiled_file):
    rc, out, _ = dump(capsys, compiled_file, "--format", "json")
    data = json.loads(out)
    assert data["target"] == TARGET and data["kind"] == "compiled"
    (kernel,) = data["kernels"]
    assert kernel["function"] == "graphc_main"
    assert kernel["code"].startswith("define i32 @graphc_main(")
    assert kernel["code"].rstrip().endswith("}")
    assert data["memory_plan"]["buffers"][0]["name"] == "tmp:0"
    assert [o["name"] for o in data["stages"]["after"]] == ["x:0", "y:0", "add"]
    assert data["stages"]["after"][2]["kernels"] == [0]
    assert data["passes_recorded"] == ["lowered", "fusion"]
    assert data["signature"]["outputs"][0]["name"] == "z"


def test_views_of_compiled_file(capsys, compiled_file):
    rc, out, _ = dump(capsys, compiled_file, "--memory")
    assert rc == 0 and "timeline" in out
    assert re.search(r"tmp:0 +# +64\*x\.0 \(512\) B @ 0", out)
    rc, out, _ = dump(capsys, compiled_file, "--code", "loop_0")
    assert rc == 0 and out.startswith("define i32 @graphc_main(")
    rc, out, _ = dump(capsys, compiled_file, "--after-pass", "fusion")
    assert out == "after fusion\n"
    rc, out, _ = dump(capsys, compiled_file, "--format", "dot", "--stage", "before")
    assert rc == 0 and "cluster" not in out and "n0 -> n2;" in out
    rc, out, _ = dump(capsys, compiled_file, "--format", "dot")
    assert "subgraph cluster_0" in out and 'label="kernel 0: loop_0 (loop)"' in out


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("argv, pattern, code", [
    (["missing.gcx"], "cannot read missing.gcx", 1),
    (["junk.bin"], "not a graphc compiled file or saved graph", 1),
    (["add.gcx", "--format", "pdf"], "invalid choice: 'pdf'", 2),
    (["add.gcx", "--bogus"], "unrecognized arguments: --bogus", 2),
    (["add.gcx", "--code", "7"], "no kernel '7'; kernels: 0 \\(loop_0\\)", 1),
    (["add.gcx", "--after-pass", "nope"], "no dump after pass 'nope'; recorded: lowered", 1),
    (["add.gcx", "--memory", "--code", "0"], "separate views", 1),
    (["add.gcx", "--code", "0", "--format", "json"], "does not combine", 1),
    (["graph.json", "--stage", "after"], "saved graph: it has no 'after' stage", 1),
    (["graph.json", "--memory"], "saved graph: it has no memory plan", 1),
    (["truncated.gcx"], "truncated", 1),
    ([], "the following arguments are required: file", 2),
])
def test_errors_are_one_clear_line(capsys, compiled_file, graph_file, argv, pattern, code):
    with open("junk.bin", "wb") as f:
        f.write(b"\x00\x01garbage")
    with open(compiled_file, "rb") as f:
        data = f.read()
    with open("truncated.gcx", "wb") as f:
        f.write(data[:len(data) // 2])
    rc, out, err = dump(capsys, *argv)
    assert rc == code and out == ""
    assert err.count("\n") == 1 and err.startswith("graphc-dump: ")
    assert re.search(pattern, err), err
    assert "Traceback" not in err


def test_console_script_runs_without_traceback(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", "import sys; from graphc.dump_cli import main;"
                           " sys.exit(main())", str(tmp_path / "nope.gcx")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("graphc-dump: cannot read")
    assert console_main is main


def test_svg_needs_dot(capsys, compiled_file):
    rc, out, err = dump(capsys, compiled_file, "--format", "svg")
    if shutil.which("dot"):
        assert rc == 0 and "<svg" in out
    else:
        assert rc == 1 and "needs Graphviz's `dot`, which is not installed" in err


# ------------------------------------------------------------------ a real export
@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 8], name="x")
        w = gc.Variable(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), name="w")
        b = gc.Variable(np.arange(4, dtype=np.float32), name="b")
        h = gc.nn.relu(gc.matmul(x, w) + b)
        probs = gc.nn.softmax(h * 2.0 - 1.0, name="probs")
        init = gc.global_variables_initializer()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        path = str(tmp_path_factory.mktemp("dump") / "mlp.gcx")
        export(sess, path, {"x": x}, {"probs": probs})
    return path


def test_every_view_of_an_export(capsys, exported, tmp_path):
    rc, out, _ = dump(capsys, exported)
    assert rc == 0
    for part in ("target: ", "input  x: float32 [x.0, 8]", "graph after passes:", "kernels:",
                 "memory plan: arena", "pass counts:", "fusion: kernels="):
        assert part in out
    rc, before, _ = dump(capsys, exported, "--stage", "before")
    assert "graph before passes:" in before and "MatMul" in before
    rc, out, _ = dump(capsys, exported, "--format", "json")
    data = json.loads(out)
    assert data["kernels"] and all(k["code"].startswith("define") for k in data["kernels"])
    assert data["target"]["triple"]
    rc, out, _ = dump(capsys, exported, "--code", "0")
    assert out.startswith("define")
    rc, out, _ = dump(capsys, exported, "--code", "all")
    assert "graphc_main" in out
    rc, out, _ = dump(capsys, exported, "--after-pass", "constant_folding")
    assert out.startswith("module ")
    rc, out, _ = dump(capsys, exported, "--memory")
    assert rc == 0 and "memory plan" in out
    rc, out, _ = dump(capsys, exported, "--format", "dot")
    assert "subgraph cluster_0" in out
    html_path = str(tmp_path / "page.html")
    rc, out, _ = dump(capsys, exported, "--format", "html", "-o", html_path)
    page = open(html_path).read()
    assert rc == 0 and out == "" and 'id="kernel-list"' in page
    # the SVG namespace is a name, not a fetch
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page  # self-contained: nothing fetched


def test_html_script_is_valid_javascript(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the browser test below covers the script")
    from graphc.dump.html_page import _SCRIPT
    script = tmp_path / "page.js"
    script.write_text(_SCRIPT)
    done = subprocess.run([node, "--check", str(script)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def test_html_in_headless_chromium(capsys, exported, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); CI "
                    "installs it and runs this test")
    html_path = tmp_path / "page.html"
    assert main([exported, "--format", "html", "-o", str(html_path)]) == 0
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--no-first-run",
         "--disable-sync", "--user-data-dir=" + str(tmp_path / "profile"),
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
         html_path.as_uri()], capture_output=True, text=True, timeout=120)
    dom = done.stdout
    assert 'data-ready="1"' in dom, done.stderr[-2000:]
    assert not re.search(r'<body[^>]*data-errors=', dom), "the page's script caught errors"
    console_errors = [line for line in done.stderr.splitlines()
                      if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    assert not console_errors, console_errors
    items = re.findall(r'<li data-kernel="(\d+)">', dom)
    assert items and items[0] == "0"


def _debug_leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _debug_leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            yield from _debug_leaves(v, path + (i,))
    yield path


def test_damaged_files_end_in_one_line(capsys, exported, tmp_path):
    """A re-checksummed file whose display data (the debug section, the signature) is
    damaged: every view answers with one line on stderr, never a traceback."""
    import random
    from tests.test_verify import edited
    with open(exported, "rb") as f:
        original = f.read()
    header = json.loads(original[file_format.PREFIX.size:file_format.PREFIX.size +
                                 file_format.PREFIX.unpack_from(original, 0)[3]])
    paths = [p for p in _debug_leaves(header["executables"][0]["debug"]) if p]
    rng = random.Random(7)
    damaged = str(tmp_path / "damaged.gcx")
    edits = [lambda h: h["signature"]["inputs"][0].pop("tensor"),
             lambda h: h["executables"][0]["debug"].update(kernels=[5]),
             lambda h: h["executables"][0]["debug"].update(memory_plan={"buffers": 3})]
    for _ in range(120):
        path = rng.choice(paths)
        value = rng.choice([None, 5, "x", [], {}, [[1]], {"nodes": 1}])

        def edit(h, path=path, value=value):
            parent = h["executables"][0]["debug"]
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = value
        edits.append(edit)
    views = [[], ["--format", "json"], ["--memory"], ["--code", "all"], ["--code", "0"],
             ["--format", "dot"], ["--stage", "before"], ["--after-pass", "constant_folding"]]
    failures = 0
    for i, edit in enumerate(edits):
        with open(damaged, "wb") as f:
            f.write(edited(original, edit))
        argv = [damaged] + views[i % len(views)]
        rc, out, err = dump(capsys, *argv)
        if rc != 0:
            failures += 1
            assert rc == 1 and err.startswith("graphc-dump: ") and err.count("\n") == 1, err
            assert "Traceback" not in err
    assert failures >= 3  # the three fixed edits at least


@pytest.fixture(scope="module")
def exported_gpu(tmp_path_factory):
    """A GPU file: PTX for sm_80 (built without a GPU) plus its CPU emulation IR."""
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 8], name="x")
        w = gc.Variable(np.ones((8, 4), np.float32), name="w")
        probs = gc.nn.softmax(gc.matmul(x, w), name="probs")
        init = gc.global_variables_initializer()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        path = str(tmp_path_factory.mktemp("dump_gpu") / "mlp_gpu.gcx")
        export(sess, path, {"x": x}, {"probs": probs}, target="gpu", arch="sm_80")
    return path


def test_code_of_a_gpu_file_is_its_ptx(capsys, exported_gpu):
    ptx = file_format.read(exported_gpu).header["executables"][0]["ptx"]
    rc, out, _ = dump(capsys, exported_gpu, "--code", "all")
    assert rc == 0 and out == ptx
    rc, out, _ = dump(capsys, exported_gpu, "--code", "0")
    assert rc == 0 and out.startswith(".visible .entry kernel_0_")
    assert "define " not in out and out.rstrip().endswith("}") and out in ptx
    rc, out, _ = dump(capsys, exported_gpu, "--format", "json")
    data = json.loads(out)
    # every kernel's code is its PTX entries (a gemm has a main and an epilogue entry)
    assert all(".entry kernel_" in k["code"] and ".emulate" not in k["code"]
               for k in data["kernels"])


def test_json_names_the_users_creation_line(capsys, exported):
    rc, out, _ = dump(capsys, exported, "--format", "json")
    ops = {o["name"]: o for o in json.loads(out)["stages"]["after"]}
    (softmax,) = [o for name, o in ops.items() if name.startswith("probs")]
    assert re.fullmatch(r".*test_dump_cli\.py:\d+ \(exported\)", softmax["location"])


def _function_text(llvm_ir, name):
    start = llvm_ir.rindex("\ndefine", 0, llvm_ir.index(f'@"{name}"('))
    return llvm_ir[start:llvm_ir.index("\n}\n", start)]


def test_a_reused_kernel_shows_the_code_that_runs_it(capsys, tmp_path):
    """Identical layers share one kernel function (kernel_reuse.py): each kernel's code is
    the function graphc_main calls at its place in the schedule."""
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 8], name="x")
        h = x
        for i in range(4):
            h = gc.layers.dense(h, 8, activation=gc.nn.relu, name=f"dense_{i}")
        init = gc.global_variables_initializer()
    with gc.Session(graph=g) as sess:
        sess.run(init)
        path = export(sess, str(tmp_path / "deep.gcx"), {"x": x}, {"h": h})
    rc, out, _ = dump(capsys, path, "--format", "json")
    kernels = json.loads(out)["kernels"]
    assert all(k["code"] for k in kernels)
    shared = [k for k in kernels if k.get("shares_code_of")]
    assert shared, "four identical layers: some kernels reuse a function"
    main_ir = file_format.read(path).header["executables"][0]["llvm_ir"]
    entry = main_ir[main_ir.index("define i32 @\"graphc_main\"")
                    if "define i32 @\"graphc_main\"" in main_ir
                    else main_ir.index("define i32 @graphc_main"):]
    segments = re.findall(r'call [^@]*@"(graphc_main\.segment\d+)"\(', entry)
    if segments:  # a long entry calls its kernels through segments (cpu/entry.py), in order
        entry = "".join(_function_text(main_ir, name) for name in segments)
    calls = re.findall(r'call [^@]*@"?(kernel_\d+_[\w.]*?)"?\(', entry)
    for i, k in enumerate(kernels):
        assert k["function"].startswith(re.match(r"kernel_\d+_", calls[i]).group(0))
        assert f"@\"{calls[i]}\"(" in k["code"] \
            or f"@{calls[i]}(" in k["code"]
    i = kernels.index(shared[0])
    rc, out, _ = dump(capsys, path, "--code", str(i))
    assert rc == 0 and out == shared[0]["code"]


def test_dot_labels_are_short_and_the_full_name_is_the_tooltip(capsys, tmp_path,
                                                               monkeypatch):
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 3], name="x")
        with gc.name_scope("a_rather_long_model_scope_name/encoder_block_number_seven"):
            y = gc.nn.relu(gc.matmul(x, gc.ones([3, 3])), name="activation_after_matmul_x")
    monkeypatch.chdir(tmp_path)
    graph_io.write_graph(g, ".", "graph.json")
    rc, out, _ = dump(capsys, "graph.json", "--format", "dot")
    assert rc == 0
    nodes = re.findall(r'^  n\d+ \[label="((?:[^"\\]|\\.)*)", tooltip="((?:[^"\\]|\\.)*)"\];$',
                       out, re.M)
    assert len(nodes) == len(g.get_operations())
    for label, tooltip in nodes:
        lines = label.split("\\n")
        assert len(lines) == 3 and all(len(line) <= 30 for line in lines), label
    (label, tooltip), = [n for n in nodes if y.op.name in n[1]]
    assert label.split("\\n")[:2] == ["activation_after_matmul_x", "Relu"]
    assert tooltip.split("\\n") == [y.op.name, "Relu float32[?,3]"]


def test_a_tensorflow_graph_def_is_shown_like_graphcs_own(tmp_path, capsys):
    """graphc-dump on a TF GraphDef (.pb, .pbtxt) or MetaGraphDef (.meta): imported, so the
    ops carry their inferred dtypes and shapes as in graphc's own files."""
    g = gc.Graph()
    with g.as_default():
        x = gc.placeholder(gc.float32, [None, 3], name="x")
        gc.nn.relu(gc.matmul(x, gc.constant(np.ones((3, 2), np.float32))), name="y")
    for name, text in (("g.pb", False), ("g.pbtxt", True)):
        gc.train.write_graph(g, str(tmp_path), name, as_text=text)
        assert main([str(tmp_path / name)]) == 0
        out = capsys.readouterr().out
        assert re.search(r"\by\s+Relu\s+float32\s+\[\?,2\]", out), out
    with g.as_default():
        gc.train.export_meta_graph(str(tmp_path / "g.meta"))
    assert main([str(tmp_path / "g.meta")]) == 0
    assert re.search(r"\bx\s+Placeholder\s+float32\s+\[\?,3\]", capsys.readouterr().out)
