"""Packaging promises: the kernels directory is only reachable as harness.kernels, and the
console command exists."""

import subprocess
import sys
from pathlib import Path


def test_kernels_only_importable_inside_the_harness_namespace(tmp_path):
    code = (
        "import importlib.util, harness.kernels\n"
        "assert importlib.util.find_spec('kernels') is None, 'bare kernels importable'\n"
        "from transformers.utils.import_utils import is_kernels_available\n"
        "assert not is_kernels_available()\n"
        "print(harness.kernels.__name__)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "harness.kernels"


def test_console_command_and_subcommands():
    exe = Path(sys.executable).parent / "harness"
    assert exe.exists(), "the harness console script is not installed beside this Python"
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for sub in ("prompts", "generate", "models", "run", "names"):
        assert sub in r.stdout
