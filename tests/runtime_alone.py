"""Runs a script in a new Python process where graphc, kernels and networkx cannot be
imported: what a deployment that ships only runtime/ has. Shared by the tests of files
(export, the runtime, the library cache, exported loops) that must load and run there."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCKED = ("graphc", "kernels", "networkx")

# an import finder ahead of every other one: an import of a blocked package fails as it
# would where the package is not installed, even though this checkout has it on the path
_BLOCK_IMPORTS = f"""\
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError("blocked: " + name)
        return None
sys.meta_path.insert(0, Block())
"""
# the finder refuses only imports made after it went in: one that site hooks or .pth files
# made at start-up would still be loaded
_NOTHING_BLOCKED_LOADED = f"""
assert not any(m.split(".")[0] in {BLOCKED!r} for m in sys.modules), \\
    sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r})
"""


def run_without_graphc(script, tmp_path, env=None, timeout=120):
    """Runs `script` (its indentation removed) where graphc, kernels and networkx cannot be
    imported, from `tmp_path`, with the environment plus `env`; fails the test with the
    process's stderr unless it exits 0 having imported none of them. -> its stdout."""
    path = tmp_path / "isolated.py"
    path.write_text(_BLOCK_IMPORTS + textwrap.dedent(script) + _NOTHING_BLOCKED_LOADED)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})), cwd=tmp_path,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout
