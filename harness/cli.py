"""The ``harness`` command.

    harness prompts list --suite laissez-faire [--json]
    harness models list | prepare ALIAS
    harness generate CONFIG [--shard i/N] [--set key=value ...]
    harness run CONFIG        (every stage the config names)
    harness bench generate

Errors the user can fix print one line on stderr and exit non-zero.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import yaml

from harness.errors import ConfigError, DataError, HarnessError

app = typer.Typer(
    help="Offline audit harness: generate stories with open-weight LMs, label the characters, "
    "and measure representation and subordination bias.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
prompts_app = typer.Typer(help="Prompt suites.", no_args_is_help=True)
models_app = typer.Typer(help="Models: the embedded default and presets.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks.", no_args_is_help=True)
app.add_typer(prompts_app, name="prompts")
app.add_typer(models_app, name="models")
app.add_typer(bench_app, name="bench")


def _mount_stage_apps() -> None:
    """Sub-commands owned by the stage packages (their heavy imports happen inside commands)."""
    from harness.homogeneity.cli import app as homogeneity_app
    from harness.identity.cli import app as names_app
    from harness.labelling.cli import app as label_app

    app.add_typer(names_app, name="names")
    app.add_typer(label_app, name="label")
    app.add_typer(homogeneity_app, name="homogeneity")


_mount_stage_apps()

ConfigArg = Annotated[Path, typer.Argument(help="run config (YAML)", show_default=False)]
ShardOpt = Annotated[Optional[str], typer.Option("--shard", help="i/N: do only shard i of N (job arrays)")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="override a config field: key.sub=value")]
OutOpt = Annotated[Optional[str], typer.Option("--output-dir", "-o", help="override output_dir")]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="show a progress bar")]


def _overrides(sets: list[str] | None, output_dir: str | None) -> dict[str, Any]:
    """The ``--set key=value`` options (values read as YAML) and ``-o``, as ``load_config``'s overrides."""
    out: dict[str, Any] = {}
    for s in sets or []:
        if "=" not in s:
            raise ConfigError(f"--set {s!r}: expected key=value, e.g. --set samples_per_prompt=2")
        k, v = (part.strip() for part in s.split("=", 1))
        if not k:
            raise ConfigError(f"--set {s!r}: no key before '='; e.g. --set samples_per_prompt=2")
        if k in out:
            raise ConfigError(f"--set {k}: given twice; give each key once")
        try:
            out[k] = yaml.safe_load(v)
        except yaml.YAMLError:
            raise ConfigError(f"--set {s!r}: the value is not valid YAML; close its brackets and quotes, or quote "
                              f"it as a YAML string") from None
    if output_dir is not None:
        if "output_dir" in out:
            raise ConfigError("--set output_dir and -o both give the run's folder; give one of them")
        if not output_dir.strip():  # a Path option reads "" as ".", the working directory
            raise ConfigError("-o '': an empty path; give the run's folder, e.g. -o runs/run")
        out["output_dir"] = output_dir
    return out


@prompts_app.command("list")
def prompts_list(
    suite: Annotated[str, typer.Option(help="suite name")] = "laissez-faire",
    wording: Annotated[Optional[str], typer.Option(help="released (default) or paper; the homogeneity suite also no-hardship or chef")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON array")] = False,
) -> None:
    """List the prompts of a suite."""
    from harness.suites import get_suite

    s = get_suite(suite, wording)
    if as_json:
        rows = [
            {
                "id": p.id,
                "domain": p.domain,
                "condition": p.condition,
                "love_type": p.love_type,
                "scenario": p.scenario,
                "text": p.text,
                "roles": [{"key": r.key, "description": r.description, "power": r.power} for r in p.roles],
            }
            for p in s
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{s.name} v{s.version} ({s.wording} wording): {len(s)} prompts")
    for col in ("id", "domain", "condition", "roles", "text"):
        t.add_column(col)
    for p in s:
        roles = ", ".join(f"{r.power}: {r.description}" for r in p.roles)
        t.add_row(p.id, p.domain, p.condition, roles, p.text.removeprefix("Write a story, 100 words or less, of "))
    Console(width=200).print(t)


@models_app.command("list")
def models_list() -> None:
    """Embedded models and the presets shipped in configs/models."""
    from harness.models import EMBEDDED

    for m in EMBEDDED.values():
        prepared = m.prepared_dir()
        state = f"prepared at {prepared}" if (prepared / "config.json").exists() else "not prepared for vLLM yet"
        typer.echo(f"{m.alias}\t{m.description}\t({state})")
    presets = Path(__file__).resolve().parent.parent / "configs" / "models"
    for p in sorted(presets.glob("*.yaml")) if presets.is_dir() else []:
        doc = yaml.safe_load(p.read_text()) or {}
        model = doc.get("model", {})
        typer.echo(f"{p.stem}\tpreset: backend={model.get('backend')} path={model.get('path')}\t({p})")


@models_app.command("prepare")
def models_prepare(
    alias: Annotated[str, typer.Argument(help="embedded model alias, e.g. smollm2-135m")],
    force: Annotated[bool, typer.Option(help="convert again even if prepared")] = False,
) -> None:
    """Convert an embedded GGUF model to a safetensors directory (what vLLM needs)."""
    from harness.models import prepare

    typer.echo(str(prepare(alias, force=force)))


def _generate(config: Path, shard: str | None, sets: list[str] | None, output_dir: str | None, progress: bool):
    from harness.config import load_config
    from harness.pipeline import generate_run, raise_for_failed
    from harness.store import parse_shard

    cfg = load_config(config, _overrides(sets, output_dir))
    summary = generate_run(cfg, shard=parse_shard(shard), progress=progress)
    typer.echo(
        f"generated {summary.stories} stories ({summary.already_done} already on disk, "
        f"{summary.errors} requests failed) in {summary.seconds:.1f}s: {summary.stories_per_s:.2f} stories/s, "
        f"{summary.tokens_per_s:.1f} output tokens/s"
    )
    typer.echo(f"run directory: {summary.run_dir} ({summary.total_rows} stories)")
    raise_for_failed(summary)
    return cfg, summary


@app.command()
def generate(config: ConfigArg, shard: ShardOpt = None, set_: SetOpt = None, output_dir: OutOpt = None, progress: ProgressOpt = True) -> None:
    """Generate the stories a config asks for (resumes what is on disk)."""
    _generate(config, shard, set_, output_dir, progress)


StagesOpt = Annotated[
    Optional[str],
    typer.Option("--stages", help="comma-separated subset of generate,label,identities,statistics,report"),
]


@app.command()
def run(
    config: ConfigArg,
    stages: StagesOpt = None,
    shard: ShardOpt = None,
    set_: SetOpt = None,
    output_dir: OutOpt = None,
    progress: ProgressOpt = True,
) -> None:
    """Run the audit: generate -> label -> identities -> statistics -> report.

    Each stage resumes what is on disk and is skipped when its outputs are current."""
    from harness.audit.stages import REPORT, run_stages
    from harness.config import load_config
    from harness.store import parse_shard

    cfg = load_config(config, _overrides(set_, output_dir))
    wanted = None if stages is None else [s.strip() for s in stages.split(",") if s.strip()]
    if wanted == []:  # `--stages ""` (an unset variable in a script) ran every stage
        raise ConfigError("--stages: empty; name the stages to run, e.g. --stages statistics,report, or drop the "
                          "option to run every stage the config names")
    results = run_stages(cfg, wanted, shard=parse_shard(shard), progress=progress, echo=typer.echo)
    typer.echo(f"run directory: {cfg.output_dir}")
    if any(r.stage == REPORT for r in results):
        typer.echo(f"report: {Path(cfg.output_dir) / REPORT / 'index.html'}")


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="run directories (one per model)", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="report directory")] = Path("report"),
    title: Annotated[str, typer.Option(help="report title")] = "Laissez-faire audit",
) -> None:
    """Build one report over several runs (e.g. several models), as the paper compares five.

    Homogeneity runs (a homogeneity/ folder, no laissez-faire statistics) get the homogeneity report."""
    from harness.report import build_report

    homogeneity = [(Path(r) / "homogeneity").is_dir() and not (Path(r) / "statistics").is_dir() for r in runs]
    if all(homogeneity):
        from harness.report.homogeneity import build_homogeneity_report

        title = "Homogeneity audit" if title == "Laissez-faire audit" else title
        typer.echo(f"report: {build_homogeneity_report(runs, out, title=title)}")
        return
    if any(homogeneity):
        kinds = {"homogeneity": [str(r) for r, h in zip(runs, homogeneity) if h],
                 "laissez-faire": [str(r) for r, h in zip(runs, homogeneity) if not h]}
        raise DataError(f"{kinds['homogeneity'][0]} is a homogeneity run and {kinds['laissez-faire'][0]} is not; "
                        "build one report per kind of audit (`harness report` over the runs of one kind)")
    typer.echo(f"report: {build_report(runs, out, title=title)}")


@bench_app.command("generate")
def bench_generate(
    samples: Annotated[int, typer.Option(min=1, help="stories per measured configuration")] = 32,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="tokens per story")] = 64,
    backends: Annotated[str, typer.Option(help="comma-separated: vllm,transformers")] = "vllm,transformers",
    model: Annotated[str, typer.Option(help="embedded alias or local model directory")] = "smollm2-135m",
    repeats: Annotated[int, typer.Option(min=1, help="alternating raw/pipeline repeats (median reported)")] = 3,
    write: Annotated[bool, typer.Option(help="also write its section of the checkout's benchmarks/RESULTS.md")] = False,
) -> None:
    """Stories/s and tokens/s: raw backend vs the harness pipeline, vLLM vs transformers. Printed; ``--write`` (or
    ``python benchmarks/generation.py``) also writes the project's RESULTS.md, which a benchmark on a cluster node
    rewrote in the checkout by default."""
    from harness.bench import LOCAL_BACKENDS, check_samples, run_generation_benchmark

    check_samples(samples)  # before any engine loads
    names = [b.strip() for b in backends.split(",") if b.strip()]
    if not names or (unknown := [b for b in names if b not in LOCAL_BACKENDS]):
        raise ConfigError(f"--backends {backends!r}: name one or more of {', '.join(LOCAL_BACKENDS)}, comma-separated "
                          "(the benchmark loads each engine here; an openai server is timed by its own tools)")
    if not model.strip():  # read as the working directory
        raise ConfigError("--model '': give a model folder or an embedded model's alias (smollm2-135m)")
    try:
        run_generation_benchmark(samples=samples, max_new_tokens=max_new_tokens, backends=names,
                                 model_path=model, repeats=repeats, write=write)
    except ConfigError as e:  # the model's errors name the config field the option fills
        if str(e).startswith("model.path:"):
            raise ConfigError("--model" + str(e).removeprefix("model.path")) from None
        raise


#: The errors of writing to storage that the user, not the code, mends (a traceback of 50 lines says no more).
STORAGE_ERRNOS = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT", "EACCES", "EPERM", "EROFS")
                           if hasattr(errno, n))


#: Set when SIGTERM stopped the command (``stop_on_sigterm``): it exits 143, as a process that signal ends does.
_TERMINATED: list[int] = []


def stop_on_sigterm() -> None:
    """Make SIGTERM (``scancel``, a batch system's time limit or preemption, ``timeout``, ``kill``) stop this
    process as Ctrl-C does: a KeyboardInterrupt, so the stages keep what they hold (the label stage's buffered
    rows, up to ``shard_rows``: an hour of an LLM labeller); its default ended the process on the spot. Only in
    this process: a child forked from it (a worker) that gets SIGTERM ends as it would have."""
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    pid = os.getpid()

    def terminated(signum: int, frame: object) -> None:
        if os.getpid() != pid:  # a forked child: the default, ending it
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        _TERMINATED.append(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminated)


def main() -> None:
    """The ``harness`` command. Every error is one line on stderr and a non-zero exit: harness's own (exit 2 for a
    config, 3 for data, 4 for a backend) and the command line's usage errors (a missing argument, an unknown
    option: exit 2), which Typer draws as a box of several lines."""
    from typer.exceptions import TyperException

    from harness.models import offline_env

    offline_env()
    stop_on_sigterm()
    try:
        code = app(prog_name="harness", standalone_mode=False)
    except HarnessError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    except OSError as e:  # a full disk, a quota, a folder made read-only under a running command: one line
        where = f": {e.filename}" if e.filename else ""
        if e.errno == errno.ENAMETOOLONG:  # a file written beside an output, its name longer still: a traceback
            typer.echo(f"error: {e.strerror or e}{where}; give the output a shorter file name, then rerun the same "
                       f"command", err=True)
            sys.exit(2)
        if e.errno not in STORAGE_ERRNOS:
            raise
        typer.echo(f"error: {e.strerror or e}{where}; free space or fix the permissions there, then rerun the same "
                   f"command", err=True)
        sys.exit(1)
    except typer.Abort:  # Ctrl-C at a prompt, as Click's own main says it
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except TyperException as e:  # Click's usage errors
        if type(e).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
            ctx = getattr(e, "ctx", None)
            see = f"; see `{ctx.command_path} --help`" if ctx is not None else "; see --help"
            typer.echo(f"error: {e.format_message().rstrip('.')}{see}", err=True)
        sys.exit(getattr(e, "exit_code", 2))
    if _TERMINATED:  # Typer returns 130 for the KeyboardInterrupt that stop_on_sigterm raised
        typer.echo("error: stopped by SIGTERM; the work done so far is kept: rerun the same command to go on", err=True)
        sys.exit(128 + _TERMINATED[0])
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
