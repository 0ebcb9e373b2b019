"""Labelling worker processes end with the process that started them, even one killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

PARENT = textwrap.dedent("""
    import multiprocessing as mp
    import time

    from harness.labelling.host_pool import exit_with_parent


    def child(q, watch):
        if watch:
            exit_with_parent()
        q.get()  # a worker waiting for its next batch


    if __name__ == "__main__":
        import sys

        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q, sys.argv[1] == "watch"))
        p.start()
        print(p.pid, flush=True)
        time.sleep(600)
""")


def _gone(pid: int) -> bool:
    """Whether a process has exited (a zombie nobody has reaped yet counts as exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def _child_after_parent_killed(tmp_path: Path, mode: str, wait_s: float) -> bool:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    # the harness this test imported (the checkout under test), not the one beside this file
    import harness

    parent = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(harness.__file__).resolve().parents[1])})
    child = int(parent.stdout.readline())
    try:
        os.kill(parent.pid, signal.SIGKILL)  # no cleanup runs in the parent
        parent.wait()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not _gone(child):
            time.sleep(0.1)
        return _gone(child)
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_worker_ends_when_its_parent_is_killed(tmp_path):
    assert _child_after_parent_killed(tmp_path, "watch", wait_s=30)
    # without the watch, the same worker outlives its parent: the test can tell
    assert not _child_after_parent_killed(tmp_path, "plain", wait_s=2)
