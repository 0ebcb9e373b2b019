"""harness.provenance: installed package versions, the source tree's commit, the host."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np

from harness import provenance


def test_package_versions_skips_packages_not_installed():
    assert provenance.package_versions(("numpy", "no-such-package-harness-xyz")) == {"numpy": np.__version__}
    assert "harness" in provenance.package_versions()


def test_git_commit_marks_a_dirty_tree_and_is_none_outside_git(monkeypatch):
    """The commit of the source tree, '-dirty' with uncommitted changes; None when git fails or is missing."""
    def fake(head_rc, status_out):
        def run(cmd, **kw):
            if "rev-parse" in cmd:
                return SimpleNamespace(returncode=head_rc, stdout="abc123\n" if head_rc == 0 else "", stderr="")
            return SimpleNamespace(returncode=0, stdout=status_out, stderr="")
        return run

    monkeypatch.setattr(subprocess, "run", fake(0, ""))
    assert provenance.git_commit() == "abc123"
    monkeypatch.setattr(subprocess, "run", fake(0, " M harness/x.py\n"))
    assert provenance.git_commit() == "abc123-dirty"
    monkeypatch.setattr(subprocess, "run", fake(128, ""))
    assert provenance.git_commit() is None

    def missing(cmd, **kw):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", missing)
    assert provenance.git_commit() is None


def test_host_info_fields():
    info = provenance.host_info()
    assert set(info) == {"hostname", "platform", "python", "cpu", "cpu_count", "gpus"}
    assert info["python"] == ".".join(map(str, sys.version_info[:3])) and isinstance(info["gpus"], list)
    assert isinstance(info["cpu"], str) and info["cpu"]
