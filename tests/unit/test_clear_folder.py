"""What a reset's wipe (:func:`deskpod.agentd.workspace.confined.clear_folder`) does with a tree its
owner made hard to remove: folders with no permission for their owner (``chmod 0``, ``0500``),
nested, and a tree deeper than Python's recursion limit. The agent makes such trees in
``/workspace`` from the workspace or the desktop applications' zone (both as uid 1001); on main
before this test the wipe stopped at the first (``Permission denied``, ``RecursionError``), the
reset failed and the files stayed for the next run.

The tree is made and wiped by a subprocess of the test's uid; as root, with no capability (its
bounding set emptied by ``setpriv``), so that permission bits hold for it as for the agent.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import deskpod

pytestmark = pytest.mark.process  # a subprocess of its own, without capabilities

RUNTIME = str(Path(deskpod.__file__).resolve().parent.parent)

WIPE = r"""
import json, os, sys
from deskpod.agentd.workspace.confined import clear_folder
root = sys.argv[1]
os.makedirs(f"{root}/locked/inner")
for folder in ("locked", "locked/inner"):
    with open(f"{root}/{folder}/secret", "w") as f:
        f.write("left for the next run")
os.chmod(f"{root}/locked/inner", 0o500)
os.chmod(f"{root}/locked", 0)
os.makedirs(f"{root}/readonly")
open(f"{root}/readonly/file", "w").close()
os.chmod(f"{root}/readonly", 0o500)
os.symlink("/etc", f"{root}/link")
os.mkdir(f"{root}/deep")
os.chdir(f"{root}/deep")
for _ in range(1500):
    os.mkdir("d")
    os.chdir("d")
os.chdir(root)
error = None
try:
    clear_folder(root, frozenset({"kept"}))
except BaseException as exc:
    error = type(exc).__name__
print(json.dumps({"error": error, "left": sorted(os.listdir(root))}))
"""


def _run_unprivileged(script: str, root: str) -> dict[str, object]:
    """Run ``script`` (it prints one JSON object) on ``root`` without any capability."""
    prefix = ["setpriv", "--bounding-set=-all", "--"] if os.geteuid() == 0 else []
    done = subprocess.run([*prefix, sys.executable, "-c", script, root], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": RUNTIME, "PATH": os.environ.get("PATH", "")})
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_reset_wipe_removes_folders_their_owner_locked_and_a_tree_deeper_than_recursion() -> None:
    with tempfile.TemporaryDirectory() as parent:
        root = os.path.join(parent, "workspace")
        os.mkdir(root)
        open(os.path.join(root, "kept"), "w").close()
        result = _run_unprivileged(WIPE, root)
        # Only the kept name stays; the symlink went, never its target.
        assert result == {"error": None, "left": ["kept"]}, result
        assert os.path.isdir("/etc")


def test_an_entry_that_cannot_go_does_not_keep_the_others() -> None:
    # A folder of another uid needs root to make: the whole suite runs as root (CI does), and
    # this test fails rather than skips without it.
    assert os.geteuid() == 0, "this test makes a folder of another uid: run the suite as root"
    script = r"""
import json, os, sys
from deskpod.agentd.workspace.confined import clear_folder
root = sys.argv[1]
for name in "abcdefgh":
    open(f"{root}/{name}", "w").close()
error = None
try:
    clear_folder(root)
except OSError as exc:
    error = exc.errno
print(json.dumps({"error": error, "left": sorted(os.listdir(root))}))
"""
    with tempfile.TemporaryDirectory() as parent:
        root = os.path.join(parent, "workspace")
        os.mkdir(root)
        # A folder of another uid that the wiping one cannot enter: it stays, and says so.
        stuck = os.path.join(root, "other")
        os.mkdir(stuck, 0o700)
        open(os.path.join(stuck, "f"), "w").close()
        os.chown(stuck, 65534, 65534)
        result = _run_unprivileged(script, root)
        assert result["left"] == ["other"] and result["error"] == errno.EACCES, result
