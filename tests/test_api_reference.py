"""docs/api.md is what tools/api_reference.py writes from the docstrings of today's code."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_api_reference_page_is_current():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "api_reference.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_api_reference_covers_the_names_tf1_scripts_use_first():
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    for name in ("`placeholder(", "`Session(", "`gradients(", "`global_variables_initializer(",
                 "`AdamOptimizer(", "`dense(", "`softmax_cross_entropy_with_logits_v2(",
                 "`load(path"):
        assert name in page, name
