"""The import layering of ../shared/ARCHITECTURE.md, read from the source with ast (nothing
is imported or run):

- graphc/compiler/** imports only graphc.compiler, graphc.framework, graphc.dtypes,
  graphc.errors, kernels and runtime, and so does every graphc module it reaches;
- what the compiler reaches has no import cycle;
- no module of graphc/compiler, kernels or runtime imports another module's underscore
  names;
- the backends (graphc/compiler/backends/cpu, .../gpu) never import each other, and the
  target-neutral loop layer (graphc/compiler/loops) imports no backend;
- kernels/ never imports graphc or runtime, runtime/ never imports graphc or kernels;
- imports inside functions only where INNER_IMPORTS lists them, with the reason.

Edges are the imports a module writes. A package's __init__ running before its
submodules is not an edge (graphc/__init__ is the public API: it imports everything).
"""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("graphc", "kernels", "runtime")
COMPILER_LAYERS = ("graphc.compiler", "graphc.framework", "graphc.dtypes", "graphc.errors",
                   "kernels", "runtime")

# importer -> (modules it may import inside functions, why they cannot be at the top)
INNER_IMPORTS = {
    "graphc.compiler.driver": (
        {"graphc.compiler.backends.cpu", "graphc.compiler.backends.gpu"},
        "a target's backend is imported when a compile first asks for that target: the "
        "backends are the largest part of the compiler, and the GPU one is rarely used"),
    "runtime.executable": (
        {"runtime.verify"},
        "a cycle: the verifier checks GPU specs through runtime.gpu, which builds on "
        "runtime.executable"),
    "runtime.signing": (
        {"cryptography.hazmat.primitives.asymmetric", "cryptography.exceptions"},
        "cryptography is an optional dependency (signed files only, graphc[signing])"),
    "graphc.compiler.backends.cpu.scratch": (
        {"graphc.compiler.backends.cpu.conv_kernel"},
        "a cycle at package import: the CPU backend's __init__ hands scratch_bytes to the "
        "memory planner, and the conv kernel it asks imports the rest of the backend"),
    "graphc.framework.graph": (
        {"graphc.graph_io"},
        "tf.Graph.as_graph_def is TF's method on Graph, and the GraphDef writer builds on "
        "Graph, Variable and the IR's attr encoding: a cycle, broken where a graph is "
        "written"),
    "runtime.gpu.cuda": (
        {"pycuda.driver"},
        "pycuda is an optional dependency (the GPU target only), imported when a GPU is "
        "opened"),
}


def _module_files():
    files = {}
    for package in PACKAGES:
        for folder, _, names in os.walk(os.path.join(ROOT, package)):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    files[module.removesuffix(".__init__")] = path
    return files


FILES = _module_files()


def _package_of(module):
    return module if FILES[module].endswith("__init__.py") else module.rpartition(".")[0]


def _targets(module, node):
    """(imported module, imported name or None) for each name of an import statement."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    base = node.module or ""
    if node.level:
        package = _package_of(module)
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append((sub, None) if sub in FILES else (base, alias.name))
    return out


def _imports(module):
    """[(imported module, name, line, inside a function)] of one module."""
    tree = ast.parse(open(FILES[module]).read(), FILES[module])
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((target, name, child.lineno, in_function)
                             for target, name in _targets(module, child))
            visit(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    visit(tree, False)
    return found


IMPORTS = {module: _imports(module) for module in FILES}


def _first_party(target):
    return target.split(".")[0] in PACKAGES


def _in(module, prefixes):
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _reached_from_compiler():
    """{module: the module whose top-level import reached it first} from graphc/compiler."""
    via = {m: None for m in FILES if _in(m, ("graphc.compiler",))}
    stack = list(via)
    while stack:
        module = stack.pop()
        for target, _, _, inner in IMPORTS[module]:
            if not inner and target in FILES and target not in via:
                via[target] = module
                stack.append(target)
    return via


def _chain(via, module):
    chain = [module]
    while via[chain[-1]] is not None:
        chain.append(via[chain[-1]])
    return " <- ".join(chain)


def test_the_compiler_reaches_only_its_layers():
    via = _reached_from_compiler()
    outside = [_chain(via, m) for m in via if not _in(m, COMPILER_LAYERS)]
    assert not outside, "graphc/compiler reaches modules outside its layers:\n" + \
        "\n".join(outside)
    assert "graphc.framework.op_def" in via and "kernels.scalar_ops" in via  # it walked


def test_what_the_compiler_reaches_has_no_import_cycle():
    reached = set(_reached_from_compiler())
    edges = {m: sorted({t for t, _, _, inner in IMPORTS[m] if not inner and t in reached})
             for m in reached}
    state, cycles = {}, []

    def visit(module, path):  # depth-first; a grey module met again closes a cycle
        state[module] = "grey"
        for target in edges[module]:
            if state.get(target) == "grey":
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = "black"
    for module in sorted(reached):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_imports_another_modules_underscore_names():
    private = [f"{FILES[m]}:{line}: {name} from {target}"
               for m in FILES if _in(m, ("graphc.compiler", "kernels", "runtime"))
               for target, name, line, _ in IMPORTS[m]
               if name is not None and name.startswith("_") and _first_party(target)
               and target != m]
    assert not private, "\n".join(private)


@pytest.mark.parametrize("package, never", [
    ("graphc.compiler.backends.cpu", ("graphc.compiler.backends.gpu",)),
    ("graphc.compiler.backends.gpu", ("graphc.compiler.backends.cpu",)),
    ("graphc.compiler.loops", ("graphc.compiler.backends",)),
])
def test_backends_import_the_loop_layer_never_each_other(package, never):
    assert any(_in(m, (package,)) for m in FILES)  # it walked
    wrong = [f"{FILES[m]}:{line}: {target}" for m in FILES if _in(m, (package,))
             for target, _, line, _ in IMPORTS[m] if _in(target, never)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package, never", [("kernels", ("graphc", "runtime")),
                                            ("runtime", ("graphc", "kernels"))])
def test_kernels_and_runtime_stay_below_graphc(package, never):
    wrong = [f"{FILES[m]}:{line}: {target}" for m in FILES if _in(m, (package,))
             for target, _, line, _ in IMPORTS[m] if _in(target, never)]
    assert not wrong, "\n".join(wrong)


def test_imports_inside_functions_are_listed_with_their_reason():
    checked = set(_reached_from_compiler()) | {m for m in FILES
                                               if _in(m, ("kernels", "runtime"))}
    unlisted = [f"{FILES[m]}:{line}: {target}" for m in sorted(checked)
                for target, _, line, inner in IMPORTS[m]
                if inner and target not in INNER_IMPORTS.get(m, ((), ""))[0]]
    assert not unlisted, "imports inside functions that INNER_IMPORTS does not list " \
        "(move them to the top, or list them with the reason):\n" + "\n".join(unlisted)
    assert all(reason for _, reason in INNER_IMPORTS.values())
