"""``harness homogeneity generate|analyse``: the homogeneity audit from the command line.

The lead mounts ``app`` into the main command (``app.add_typer(homogeneity_app, name="homogeneity")``).
"""

from __future__ import annotations

from pathlib import Path

import typer

from harness.errors import ConfigError, HarnessError

app = typer.Typer(help="Homogeneity audit: generation with refusal top-up, embeddings, mixed models.", no_args_is_help=True)


def _fail(e: HarnessError) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(getattr(e, "exit_code", 1))


@app.command()
def generate(
    config: Path = typer.Argument(..., help="Run config YAML with suite: homogeneity."),
    target: int = typer.Option(None, "--target", help="Usable texts per prompt (default: the config's "
                               "homogeneity.target, else samples_per_prompt)."),
    refusal: str = typer.Option(None, "--refusal", help="Refusal filter: authors | open-models (default: the "
                                "config's homogeneity.refusal)."),
    max_rounds: int = typer.Option(None, "--max-rounds", min=0, help="Top-up rounds at most (default: the config's "
                                   "homogeneity.max_topup_rounds)."),
) -> None:
    """Generate the suite, then top up refused or empty samples until each prompt has TARGET.

    An option given here replaces the config's field; one not given is the config's (the CLI's own defaults
    won over the config's before, so a config's target of 3 generated nothing, as `harness run` would)."""
    from harness.config import load_config
    from harness.homogeneity.stage import generate_homogeneity
    from harness.homogeneity.stages import target_of

    try:
        # a config of one sample per prompt passes its load check with the target given here
        cfg = load_config(config, {"homogeneity.target": target} if target is not None and target >= 2 else None)
        h = cfg.homogeneity
        s = generate_homogeneity(cfg, target=target if target is not None else target_of(cfg),
                                 refusal=refusal if refusal is not None else h.refusal,
                                 max_rounds=max_rounds if max_rounds is not None else h.max_topup_rounds)
    except HarnessError as e:
        _fail(e)
    typer.echo(f"generated {s.generated} texts in {s.rounds} top-up round(s); "
               + ("every prompt reached its target" if not s.still_short else f"still short: {s.still_short}"))


@app.command()
def analyse(
    run_dir: Path = typer.Argument(..., help="Run directory with generations/."),
    embedder: list[str] = typer.Option(["minilm-l6"], "--embedder", "-e", help="Embedder preset(s)."),
    model_path: str = typer.Option(None, "--model-path", help="Local model directory for a preset that needs one."),
    target: int = typer.Option(None, "--target", help="Texts per prompt (default: every usable text)."),
    refusal: str = typer.Option("authors", "--refusal", help="Refusal filter: authors | open-models."),
    n_boot: int = typer.Option(1000, "--bootstrap", min=0, help="Text-level bootstrap replicates (0 = skip)."),
    n_perm: int = typer.Option(0, "--permutations", min=0, help="Text-level permutation replicates (0 = skip)."),
    seed: int = typer.Option(0, "--seed", min=0),
    backend: str = typer.Option("auto", "--backend", help="Kernel backend: auto | numpy | triton | cupy."),
    device: str = typer.Option("auto", "--device", help="Embedding device: auto | cpu | cuda | cuda:N."),
    batch_size: int = typer.Option(64, "--batch-size", min=1),
    no_pairs: bool = typer.Option(False, "--no-pairs", help="Skip the extreme pairs and histograms."),
) -> None:
    """Embed the run's texts and write the homogeneity tables under RUN_DIR/homogeneity/."""
    from harness.config import check_kernel_backend
    from harness.homogeneity.embed import get_spec, resolve_path
    from harness.homogeneity.refusal import get_filter
    from harness.homogeneity.stage import run_homogeneity
    from harness.models import resolve_device
    from harness.stats.sweep import BACKENDS

    try:  # every option before the run is read or a model loads
        if len(set(embedder)) < len(embedder):
            twice = next(e for e in embedder if embedder.count(e) > 1)
            raise ConfigError(f"-e {twice}: given twice; give each embedder once")
        if model_path and len(embedder) > 1:  # it applied to each, a packaged preset's cached vectors too
            raise ConfigError("--model-path: one local model for one embedder; give a single -e with it, and analyse "
                              "the others in another call")
        if n_perm and not n_boot:
            raise ConfigError(f"--permutations {n_perm}: the permutations run within the text bootstrap, which "
                              f"--bootstrap 0 skips; give --bootstrap 2 or more, or drop --permutations")
        specs = [get_spec(e, **({"path": model_path} if model_path else {})) for e in embedder]
        for spec in specs:
            resolve_path(spec.path)
        get_filter(refusal)
        resolve_device(device, "--device")
        if backend not in BACKENDS:
            raise ConfigError(f"--backend {backend!r}: use one of {', '.join(BACKENDS)}")
        check_kernel_backend(backend, "--backend")  # before the embedding, not after it
        if n_boot == 1:
            raise ConfigError("--bootstrap 1: a text bootstrap needs at least 2 replicates (0 skips it)")
        if target is not None and target < 2:
            raise ConfigError(f"--target {target}: pairs need at least 2 texts per prompt")
        res = run_homogeneity(run_dir, embedders=specs, refusal=refusal, target=target, n_boot=n_boot, n_perm=n_perm,
                              seed=seed, backend=backend, device=device, batch_size=batch_size, pairs=not no_pairs)
    except HarnessError as e:
        _fail(e)
    for r in res:
        typer.echo(f"{r.embedder}: {r.n_texts} texts, {r.n_pairs} pairs -> {r.out_dir} ({len(r.files)} files)")
