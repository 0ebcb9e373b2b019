"""Write one named section of benchmarks/RESULTS.md, leaving the other sections alone.

Each benchmark owns the text between ``<!-- begin NAME -->`` and ``<!-- end NAME -->``; a rerun
replaces its own section only. The file is replaced atomically.
"""

from __future__ import annotations

import os
import platform
import re
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADER = "# Benchmark results\n\nEach section is written by the benchmark named in it; ratios come from one run.\n"


def machine_description() -> str:
    """One line naming the CPU, core count, memory and GPU of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    gpu = "no GPU"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except Exception:  # torch absent: the description still stands
        pass
    cores = f"{os.cpu_count()} cores"
    try:  # the cores this process may use (its affinity and the cgroup's quota), where fewer than the machine's
        from harness.labelling.encoder import usable_cpus

        usable = usable_cpus()
        if usable < (os.cpu_count() or usable):
            cores = f"{usable} of {os.cpu_count()} cores usable"
    except Exception:  # harness absent: the machine's count
        pass
    return f"{cpu}, {cores}{mem}, {gpu}, Python {platform.python_version()}"


def write_section(name: str, markdown: str, path: Path = RESULTS) -> None:
    text = path.read_text() if path.exists() else HEADER
    block = f"<!-- begin {name} -->\n{markdown.rstrip()}\n<!-- end {name} -->"
    pattern = re.compile(rf"<!-- begin {re.escape(name)} -->.*?<!-- end {re.escape(name)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".RESULTS.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    # mkstemp's file is private (0600): keep the file's own mode, or a new file's usual one
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
    os.replace(tmp, path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def seed_list(ap, text: str) -> list[int]:
    """``--seeds`` ("0,1") as integers, or the parser's one-line error naming the option."""
    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        ap.error(f"--seeds: a comma list of whole numbers, got {text!r}")


def run_main(main, script: str) -> None:
    """Run a benchmark's ``main``: a harness error (a wrong option value, a missing file or GPU) is one line naming
    the script, not a traceback."""
    from harness.errors import HarnessError

    try:
        main()
    except HarnessError as e:
        raise SystemExit(f"{script}: {e}") from None
