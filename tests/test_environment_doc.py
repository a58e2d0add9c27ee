"""docs/environment.md lists every GRAPHC_* environment variable the repository reads.

A variable is found by its name in the source (os.environ.get("GRAPHC_X"), env dicts in
tests, docstrings that tell users to set it); a name on the page that nothing reads any
more is also an error, so the page cannot drift either way."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = re.compile(r"\bGRAPHC_[A-Z][A-Z0-9_]*[A-Z0-9]\b")
SOURCES = ("graphc", "runtime", "kernels", "tools", "tests", "examples")


def _names_in_code():
    names = set()
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            if path.name != "test_environment_doc.py":
                names |= set(NAME.findall(path.read_text(encoding="utf-8")))
    return names


def _names_documented():
    page = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `(GRAPHC_[A-Z0-9_]+)` \|", page, re.M))


def test_every_variable_read_is_documented():
    missing = _names_in_code() - _names_documented()
    assert not missing, f"add these to docs/environment.md: {sorted(missing)}"


def test_every_documented_variable_is_read():
    stale = _names_documented() - _names_in_code()
    assert not stale, f"docs/environment.md lists variables nothing reads: {sorted(stale)}"


def test_the_readme_points_at_the_page():
    assert "docs/environment.md" in (ROOT / "README.md").read_text(encoding="utf-8")
