#!/usr/bin/env python3
"""Writes docs/api.md, the API reference, from the public namespaces' docstrings.

    python tools/api_reference.py [--check]

A namespace's public names are those without a leading underscore that graphc (or the
standalone runtime) defines; names re-exported from numpy or the standard library are not
graphc's API. Each entry shows the call signature and the docstring's first paragraph; a
function or class without a docstring has TF1's documented semantics
(`tf.compat.v1.<namespace>.<name>`), which the entry says; a method without one is listed
by its signature only. `--check` exits 1 when docs/api.md differs from what would be written
(tests/test_api_reference.py runs it, so the page cannot go stale).
"""
import argparse
import importlib
import inspect
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "api.md")
sys.path.insert(0, REPO)  # this checkout's graphc, not an installed one
# (module, the name TF1 users know it by); graphc's own namespaces have no TF1 name
NAMESPACES = [
    ("graphc", "tf"), ("graphc.nn", "tf.nn"), ("graphc.nn.rnn_cell", "tf.nn.rnn_cell"),
    ("graphc.layers", "tf.layers"), ("graphc.losses", "tf.losses"),
    ("graphc.train", "tf.train"), ("graphc.data", "tf.data"), ("graphc.metrics", "tf.metrics"),
    ("graphc.summary", "tf.summary"), ("graphc.errors", "tf.errors"),
    ("graphc.debugging", "tf.debugging"), ("graphc.contrib", "tf.contrib"),
    ("graphc.linalg", "tf.linalg"), ("graphc.io", "tf.io"), ("graphc.gfile", "tf.gfile"),
    ("graphc.python_io", "tf.python_io"), ("graphc.app", "tf.app"),
    ("graphc.flags", "tf.flags"), ("graphc.logging", "tf.logging"), ("graphc.test", "tf.test"),
    ("graphc.nest", "tf.nest"), ("graphc.compat", "tf.compat"), ("graphc.image", "tf.image"),
    ("graphc.distribute", None), ("runtime", None),
]
# absl: tf.flags is absl.flags in TF1 too (graphc/flags.py re-exports it)
OURS = ("graphc", "runtime", "kernels", "absl")


def public_names(module):
    for name in sorted(vars(module)):
        obj = getattr(module, name)
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        owner = getattr(obj, "__module__", None) or ""
        if callable(obj) and owner.split(".")[0] in OURS:
            yield name, obj


def signature(obj):
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    # a default that is an object prints its address, which changes from run to run
    return re.sub(r"<([\w.]+) object at 0x[0-9a-f]+>", r"<\1>", text)


def summary(obj, tf_name):
    doc = inspect.getdoc(obj)
    if doc and not (inspect.isclass(obj) and doc == inspect.getdoc(obj.__base__)):
        return doc.split("\n\n")[0].replace("\n", " ")
    return f"As `{tf_name}` in TF1." if tf_name else "(undocumented)"


def class_methods(cls):
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_") or not callable(member):
            continue
        yield name, member


def resolve(path):
    """gc.nn.rnn_cell is an attribute path: gc.nn is a module whose rnn_cell is another."""
    root, *rest = path.split(".")
    obj = importlib.import_module(root)
    for part in rest:
        obj = getattr(obj, part)
    return obj


def entries(module_name, tf_name):
    module = resolve(module_name)
    lines = [f"## `{module_name}`" + (f" (`{tf_name}`)" if tf_name else ""), ""]
    doc = inspect.getdoc(module)
    if doc:
        lines += [doc.split("\n\n")[0].replace("\n", " "), ""]
    for name, obj in public_names(module):
        tf_full = f"{tf_name}.{name}" if tf_name else None
        kind = "class " if inspect.isclass(obj) else ""
        lines.append(f"- **{kind}`{name}{signature(obj)}`**: {summary(obj, tf_full)}")
        if inspect.isclass(obj):
            for mname, member in class_methods(obj):
                # a method without a docstring gets no claim about TF1: classes carry
                # graphc's own helpers too
                text = summary(member, None)
                lines.append(f"  - `{mname}{signature(member)}`"
                             + ("" if text == "(undocumented)" else f": {text}"))
    return lines + [""]


def page():
    lines = ["# API reference", "",
             "Written by `python tools/api_reference.py` from the docstrings; do not edit by "
             "hand. `import graphc as tf` gives TF1's names with TF1's semantics: an entry "
             "without its own text behaves as the TF1 name it gives. "
             "`docs/migration.md` lists where graphc differs.", ""]
    for module_name, tf_name in NAMESPACES:
        lines += entries(module_name, tf_name)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    args = ap.parse_args(argv)
    text = page()
    if args.check:
        with open(PAGE, encoding="utf-8") as f:
            if f.read() != text:
                print("docs/api.md is stale: run python tools/api_reference.py", file=sys.stderr)
                return 1
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
