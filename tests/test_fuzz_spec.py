"""A deterministic slice of tools/fuzz_spec.py: structured, re-checksummed edits of a real
exported file, each loaded and run in its own process, must be refused cleanly or run:
no crash, hang, foreign exception or allocation past the file's needs."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_fuzz_slice_has_no_crash_hang_foreign_exception_or_oversized_allocation():
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "fuzz_spec.py"),
                           "--cases", "60", "--seed", "0", "--verbose"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    summary = proc.stdout
    assert "60 cases, seed 0:" in summary, proc.stdout + proc.stderr
    for outcome in ("foreign 0", "crash 0", "hang 0", "oversized 0"):
        assert outcome in summary, summary
    assert proc.returncode == 0, summary + proc.stderr
    # every category was exercised (60 cases over 14 categories)
    assert summary.count("refused=") >= 14, summary
