"""Packaging promises: the kernels directory is only reachable as harness.kernels, and the
console command exists."""

import subprocess
import sys
from pathlib import Path


def _python_prints(code: str, cwd: Path) -> str:
    """What ``code`` prints, run by this Python in a fresh process in ``cwd``; it must exit 0."""
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_kernels_only_importable_inside_the_harness_namespace(tmp_path):
    code = (
        "import importlib.util, harness.kernels\n"
        "assert importlib.util.find_spec('kernels') is None, 'bare kernels importable'\n"
        "from transformers.utils.import_utils import is_kernels_available\n"
        "assert not is_kernels_available()\n"
        "print(harness.kernels.__name__)\n"
    )
    assert _python_prints(code, tmp_path) == "harness.kernels"


def test_console_command_and_subcommands():
    exe = Path(sys.executable).parent / "harness"
    assert exe.exists(), "the harness console script is not installed beside this Python"
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for sub in ("prompts", "generate", "models", "run", "names"):
        assert sub in r.stdout


def test_a_benchmark_scripts_path_holds_no_module_named_kernels_but_the_repos_package(tmp_path):
    """A script under benchmarks/ runs with that folder first on sys.path; benchmarks/kernels.py was then the module
    ``kernels`` that transformers' probe for the PyPI package of that name imports, and it imports harness.kernels:
    without ``pip install -e .`` every encoder load failed ("could not import BertModel ... train one")."""
    root = Path(__file__).resolve().parents[1]
    code = (
        f"import sys; sys.path[:0] = [{str(root / 'benchmarks')!r}, {str(root)!r}]\n"
        "from transformers.utils.import_utils import is_kernels_available\n"
        "is_kernels_available()\n"
        "import kernels\n"
        "print(kernels.__file__)\n"
    )
    # the repo's package, which imports nothing
    assert _python_prints(code, tmp_path) == str(root / "kernels" / "__init__.py")
