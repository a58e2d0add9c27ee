"""How much of the TF1 API a folder of TF1 scripts uses resolves in graphc.

    python tools/tf1_coverage.py CORPUS [--min-repos 2] [--names] [--files] [--json OUT]

CORPUS holds one folder per repository (CORPUS/<repo>/**/*.py). Each file is parsed (never
run) with ast; every dotted name rooted at TensorFlow is collected: `import tensorflow as
tf`, `import tensorflow.compat.v1 as tf`, `from tensorflow.compat import v1 as tf`,
`from tensorflow import X`, `import tensorflow.contrib.slim as slim` ... are resolved to
"tf.<path>" and a `tf.compat.v1.` prefix is dropped (it is the TF1 API itself). Names assigned such a dotted name
(`flags = tf.app.flags`, `slim = tf.contrib.slim`) stand for it too. A name is
cut after its first part that names a class or constant (CamelCase, or ALL_CAPS after a
module or class: tf.GraphKeys.UPDATE_OPS, tf.app.flags.FLAGS), since what follows is an
attribute of an object (FLAGS.batch_size), not API.

A name resolves when graphc has it: `graphc` with each part looked up as an attribute,
or imported as a submodule. Figures (the issue's):
  names  the distinct core names (not tf.contrib.*) used in >= --min-repos repositories,
         and how many resolve; and the uses of those names (occurrences) that resolve;
  files  the files every one of whose tf.* names (contrib included) resolves.
"""
import argparse
import ast
import collections
import importlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- parsing
def _tf_path(module):
    """'tensorflow.compat.v1.nn' -> 'tf.nn'; None for other modules."""
    parts = module.split(".")
    if parts[0] != "tensorflow":
        return None
    parts = ["tf"] + parts[1:]
    if parts[1:3] == ["compat", "v1"]:
        parts = ["tf"] + parts[3:]
    return ".".join(parts)


def _aliases(tree):
    """Local names bound to TensorFlow modules or objects -> their "tf.<path>"."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                path = _tf_path(alias.name)
                if path is None:
                    continue
                if alias.asname:
                    bound[alias.asname] = path
                else:  # `import tensorflow.x` binds `tensorflow`
                    bound[alias.name.split(".")[0]] = "tf"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = _tf_path(node.module)
            if base is None:
                continue
            for alias in node.names:
                if alias.name == "*":
                    continue
                path = _tf_path(f"{node.module}.{alias.name}")
                bound[alias.asname or alias.name] = path
    # `flags = tf.app.flags`, `slim = tf.contrib.slim`, `FLAGS = flags.FLAGS`: names
    # assigned a dotted TensorFlow name (in a chain of such assignments) stand for it too
    assigns = [node for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)]
    changed = True
    while changed:
        changed = False
        for node in assigns:
            found = _chain(node.value)
            target = node.targets[0].id
            if found and found[0] in bound and target not in bound:
                bound[target] = ".".join(bound[found[0]].split(".") + found[1])
                changed = True
    return bound


def _chain(node):
    """(root name, [attrs]) of a.b.c, or None."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return node.id, attrs[::-1]
    return None


def _cut(parts):
    """The API part of a dotted name (see the module docstring)."""
    for i, part in enumerate(parts[1:], 1):
        if part[:1].isupper():
            if part.isupper() or i + 1 >= len(parts):
                return parts[:i + 1]
            nxt = parts[i + 1]
            return parts[:i + 2] if nxt.isupper() else parts[:i + 1]
    return parts


def names_in_source(source):
    """[dotted tf name] for each use in the source (repeats kept)."""
    tree = ast.parse(source)
    bound = _aliases(tree)
    if not bound:
        return []
    inner = set()  # the value parts of a.b.c are a.b and a: only the outermost counts
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)) and id(node) not in inner:
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                continue
            found = _chain(node)
            if found is None or found[0] not in bound:
                continue
            root, attrs = found
            if not attrs and bound[root] == "tf":
                continue  # the bare module name
            parts = bound[root].split(".") + attrs
            if parts[1:3] == ["compat", "v1"]:
                parts = ["tf"] + parts[3:]
            if len(parts) > 1:
                uses.append(".".join(_cut(parts)))
    return uses


# ------------------------------------------------------------------------ resolving
def graphc_package():
    """The graphc package measured: this checkout's (its root comes first on sys.path)."""
    if ROOT not in sys.path[:1]:
        sys.path.insert(0, ROOT)
    return importlib.import_module("graphc")


def _submodule(module, part):
    """module.part imported, if this checkout has it (an editable install elsewhere must
    not answer for a module this checkout lacks)."""
    import importlib.util
    name = f"{module.__name__}.{part}"
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:
        return None
    package_dir = os.path.dirname(graphc_package().__file__)
    where = os.path.abspath(spec.origin or "") if spec is not None else ""
    if not where.startswith(package_dir + os.sep):
        return None
    return importlib.import_module(name)


def resolves(name, cache={}):
    """Whether graphc has the TF name "tf.a.b"."""
    if name in cache:
        return cache[name]
    obj = graphc_package()
    ok = True
    for part in name.split(".")[1:]:
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        obj = _submodule(obj, part) if isinstance(obj, type(sys)) else None
        if obj is None:
            ok = False
            break
    cache[name] = ok
    return ok


# -------------------------------------------------------------------------- figures
def scan(corpus):
    """{file path: [names]} and {file path: repository} of the .py files under corpus."""
    uses, repo_of = {}, {}
    for repo in sorted(os.listdir(corpus)):
        top = os.path.join(corpus, repo)
        if not os.path.isdir(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for filename in sorted(filenames):
                if filename.endswith(".py"):
                    path = os.path.join(dirpath, filename)
                    with open(path, encoding="utf-8") as f:
                        try:
                            names = names_in_source(f.read())
                        except SyntaxError as e:
                            print(f"skipped {path}: {e}", file=sys.stderr)
                            continue
                    uses[path] = names
                    repo_of[path] = repo
    return uses, repo_of


def figures(uses, repo_of, min_repos=2):
    repos = collections.defaultdict(set)
    counts = collections.Counter()
    for path, names in uses.items():
        for name in names:
            repos[name].add(repo_of[path])
            counts[name] += 1
    table = [{"name": n, "repos": len(repos[n]), "uses": counts[n], "core":
              not n.startswith("tf.contrib."), "resolves": resolves(n)}
             for n in sorted(counts)]
    common = [row for row in table if row["core"] and row["repos"] >= min_repos]
    tf_files = {p: names for p, names in uses.items() if names}
    files_ok = [p for p, names in tf_files.items() if all(resolves(n) for n in names)]
    return {
        "repositories": len(set(repo_of.values())), "files": len(uses),
        "files_using_tf": len(tf_files), "distinct_names": len(table),
        "common_core_names": len(common),
        "common_core_names_resolved": sum(r["resolves"] for r in common),
        "common_core_uses": sum(r["uses"] for r in common),
        "common_core_uses_resolved": sum(r["uses"] for r in common if r["resolves"]),
        "files_fully_resolved": len(files_ok),
        "names": table,
        "unresolved_by_file": {p: sorted({n for n in names if not resolves(n)})
                               for p, names in tf_files.items() if p not in files_ok},
    }


def _percent(part, whole):
    return f"{100.0 * part / whole:.1f}%" if whole else "n/a"


def report(result, min_repos, show_names, show_files, corpus):
    r = result
    print(f"graphc: {os.path.dirname(graphc_package().__file__)}")
    print(f"corpus: {r['repositories']} repositories, {r['files']} files "
          f"({r['files_using_tf']} using tf.*), {r['distinct_names']} distinct tf.* names")
    print(f"core names used in >= {min_repos} repositories: {r['common_core_names']}, resolved "
          f"in graphc: {r['common_core_names_resolved']} "
          f"({_percent(r['common_core_names_resolved'], r['common_core_names'])})")
    print(f"uses of those names: {r['common_core_uses']}, resolved: "
          f"{r['common_core_uses_resolved']} "
          f"({_percent(r['common_core_uses_resolved'], r['common_core_uses'])})")
    print(f"files with every tf.* name resolved: {r['files_fully_resolved']} of "
          f"{r['files_using_tf']} ({_percent(r['files_fully_resolved'], r['files_using_tf'])})")
    missing = [row for row in r["names"] if not row["resolves"]]
    if missing:
        print("\nunresolved names (repositories/uses):")
        for row in sorted(missing, key=lambda row: (-row["repos"], -row["uses"], row["name"])):
            print(f"  {row['name']:60s} {row['repos']}/{row['uses']}")
    if show_names:
        print("\nall names (repositories/uses, resolved):")
        for row in r["names"]:
            print(f"  {row['name']:60s} {row['repos']}/{row['uses']} "
                  f"{'yes' if row['resolves'] else 'NO'}")
    if show_files:
        print("\nfiles with unresolved names:")
        for path, names in r["unresolved_by_file"].items():
            print(f"  {os.path.relpath(path, corpus)}: {', '.join(names)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="a folder with one subfolder per repository")
    parser.add_argument("--min-repos", type=int, default=2,
                        help="a name counts as common when this many repositories use it")
    parser.add_argument("--names", action="store_true", help="list every name")
    parser.add_argument("--files", action="store_true", help="list files not fully resolved")
    parser.add_argument("--json", help="also write the figures and tables to this file")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.corpus):
        parser.error(f"{args.corpus} is not a folder")
    uses, repo_of = scan(args.corpus)
    result = figures(uses, repo_of, args.min_repos)
    report(result, args.min_repos, args.names, args.files, args.corpus)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
