"""``harness label train|eval|label``: the labellers from the command line.

The lead mounts ``app`` into the main command (``app.add_typer(label_app, name="label")``).

    harness label train [--extra ../shared/data/laissez_faire_train150.jsonl] [--epochs 8]
    harness label eval --gold ../shared/data/laissez_faire_audit_dev.jsonl [--labeller encoder] [--json]
    harness label label STORIES.jsonl --out LABELS.jsonl [--labeller rules]
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Optional

import typer

from harness.errors import BackendError, ConfigError, DataError, HarnessError
from harness.labelling.base import BACKEND_FAILURE, INFO_NOT_LABELS

app = typer.Typer(help="Label characters (name and references) in stories; train and evaluate labellers.",
                  no_args_is_help=True)


def _fail(e: HarnessError) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(e.exit_code)


LLM_BACKEND = typer.Option("transformers", "--llm-backend",
                           help="Backend of the llm labeller: transformers, vllm, or openai (a server at "
                                "--llm-base-url serving --llm-model); each holds replies to the prompt's JSON schema "
                                "(a server where it enforces response_format, as vLLM's does).")
LLM_BASE_URL = typer.Option(None, "--llm-base-url", help="The llm labeller's server, for --llm-backend openai "
                                                         "(e.g. http://127.0.0.1:8000/v1).")
NAME_CHECK = typer.Option(True, "--name-check/--no-name-check",
                          help="Encoder: move pronouns between two named characters when their first names "
                               "say they belong to the other, or a lone name to the unnamed role whose pronouns fit "
                               "it (harness.labelling.name_gender); re-pair names that left a role unnamed only "
                               "where the first names then fit the pronouns.")


ACTION_CHECK = typer.Option(True, "--action-check/--no-action-check",
                            help="Encoder: exchange the two characters of a power-laden Love story when the "
                                 "grammar says the labelled object does the subject's action "
                                 "(harness.labelling.role_agent).")


PRONOUN_BINDING = typer.Option(True, "--pronoun-binding/--no-pronoun-binding",
                               help="Encoder: give a named character the tagger left without pronouns the "
                                    "he/his or she/her that its own sentences bind to it, or (with the name "
                                    "check) those of the gender nobody holds when its first name fits them, "
                                    "or the singular they/their/themself its sentences bind to it "
                                    "(harness.labelling.pronoun_binding).")


APPOSITION_CHECK = typer.Option(True, "--apposition-check/--no-apposition-check",
                                help="Encoder: exchange the two characters when the story ties them to each "
                                     "other's role nouns ('an actor, Ethan Michaels') "
                                     "(harness.labelling.role_apposition).")


PRECISION = typer.Option(None, "--precision",
                         help="Encoder: the model's arithmetic (CPU: bfloat16, int8 or float32; GPU: float16, "
                              "bfloat16 or float32). Default: float16 on a GPU; on a CPU bfloat16 where it has AMX, "
                              "else int8 (one story per forward pass, so a story's labels never depend on its "
                              "batch) for a base that survives it (MiniLM; not MPNet: bfloat16 where the CPU has "
                              "AVX512-BF16, else float32), as encoder.default_precision picks.")


def _labeller(name: str, model_dir: Path | None, llm_model: str, threads: int | None, name_check: bool = True,
              action_check: bool = True, pronoun_binding: bool = True, apposition_check: bool = True,
              llm_backend: str = "transformers", precision: str | None = None, llm_base_url: str | None = None):
    from harness.labelling import get_labeller

    kwargs: dict[str, Any] = {}
    if name == "encoder":
        kwargs = {"path": model_dir, "threads": threads, "name_check": name_check, "action_check": action_check,
                  "pronoun_binding": pronoun_binding, "apposition_check": apposition_check, "precision": precision}
    elif name == "llm":
        kwargs = {"model": llm_model, "engine": llm_backend, "base_url": llm_base_url}
    return get_labeller(name, **kwargs)


#: The fewest paired resamples --statistics-boot takes: the fewest whose bootstrap test can find a shift at .05
#: where up to a tenth of them are undefined (its p is never below 2 / (b + 1) over the b finite ones, and
#: b >= ceil(0.9 B): B = 44 leaves b >= 40, p >= .049; B = 40 left b = 36 and p >= .054, no shift ever found).
MIN_SHIFT_REPLICATES = 44

#: The options one labeller reads; given to another on the command line, they did nothing.
READ_BY = {"encoder": ("model_dir", "precision", "threads", "name_check", "action_check", "pronoun_binding",
                       "apposition_check"),
           "llm": ("llm_model", "llm_backend", "llm_base_url")}


def _path(value: str) -> Path:
    """A path option's value: "" (an unset shell variable, ``--out "$MODEL"``) was read as ".", the working
    directory, where `label train` saved a model and `label label` looked for its stories."""
    if not str(value).strip():
        raise typer.BadParameter("an empty path, which would be read as the working directory; give a path")
    return Path(value)


def _refuse_writing_over_encoders(path: Path, flag: str, what: str, written: Sequence[Path], labeller: str,
                                  model_dir: Path | None, against: Path | None = None, *,
                                  evaluation: bool = False) -> None:
    """A ConfigError where a file the command writes (``written``: ``path`` and the files kept beside it) is one of
    an encoder's that it reads: its meta.json (the training's record) was replaced, exit 0, and it no longer
    loaded. ``evaluation``: ``path`` is an evaluation of the labeller, which may replace the scored encoder's own
    ``evaluation.json`` (``EVALUATION_FILES``; the report reads it there, the encoder never does): the second scoring
    of an encoder was refused as "written over a file of the encoder"."""
    from harness.labelling.encoder import default_model_dir
    from harness.labelling.evaluate import EVALUATION_FILES

    encoders = ((model_dir or default_model_dir(), "--model-dir" if model_dir else "the default encoder")
                if labeller == "encoder" else (None, ""), (against, "--against"))
    target = path.resolve()  # a link named evaluation.json to the encoder's meta.json is meta.json
    for k, (folder, reader) in enumerate(encoders):
        if folder is None:
            continue
        own = evaluation and k == 0 and target.name in EVALUATION_FILES and target.parent == folder.resolve()
        if any(w.exists() and w.resolve().is_relative_to(folder.resolve()) and not (own and w.resolve() == target)
               for w in written):
            raise ConfigError(f"{flag} {path}: {what} would be written over a file of the encoder in {folder} "
                              f"({reader}); give a path outside that folder")


def _refuse_unread_options(ctx: typer.Context, labeller: str, against: Path | None = None) -> None:
    """A ConfigError for an option given to a labeller that does not read it (an fp7 precision, a model path or
    --no-name-check passed to the rules labeller unseen; --llm-model to the encoder). --against's encoder reads
    the encoder's options, --model-dir excepted. The labeller's name is checked first: a misspelt `--labeller
    encodr` with --model-dir was told that --model-dir is read by the encoder labeller only."""
    from harness.labelling import LABELLERS

    if labeller not in LABELLERS:
        raise ConfigError(f"labeller: unknown labeller {labeller!r}; available: {', '.join(LABELLERS.names())}")
    flags = _flags(ctx)
    for reader, names in READ_BY.items():
        if reader == labeller:
            continue
        for name in names:
            if reader == "encoder" and against is not None and name != "model_dir":
                continue
            if _given(ctx, name):
                raise ConfigError(f"{flags[name]} is read by the {reader} labeller only; drop it, or use "
                                  f"--labeller {reader}")


def _flags(ctx: typer.Context) -> dict[str, str]:
    """Each option's flag as typed: --no-name-check was named --name-check."""
    return {p.name: p.secondary_opts[0] if getattr(p, "secondary_opts", None) and ctx.params.get(p.name) is False
            else p.opts[0] for p in ctx.command.params}


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the option ``name`` was given, not left to its default."""
    source = ctx.get_parameter_source(name)  # by name: typer may carry its own copy of click's enum
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


#: What builds a labeller in `label eval`: with --run the run's config does.
BUILT_BY_RUN = ("labeller", *READ_BY["encoder"], *READ_BY["llm"])


def _refuse_options_beside_run(ctx: typer.Context) -> None:
    """A ConfigError for an option that builds a labeller given with --run, which builds the run's as its config
    does: the option was either the run's setting already or another labeller's (--threads: the config's torch
    threads, which change no label)."""
    for name in BUILT_BY_RUN:
        if _given(ctx, name):
            flag = _flags(ctx)[name]
            raise ConfigError(f"{flag} with --run: the run's config builds its labeller; drop {flag}, or drop --run "
                              f"to score the labeller the options build")


def _check_before_labelling(lexicon: str | None, against: Path | None) -> None:
    """A --lexicon that does not load and an --against directory that holds no trained encoder stopped ``label
    eval`` only after the labeller had read every story: refused before."""
    if lexicon is not None:
        from harness.identity.gender import load_lexicon

        try:
            load_lexicon(lexicon)
        except ConfigError as e:
            raise ConfigError(f"--lexicon {lexicon}: {e}") from None
    if against is not None:
        from harness.labelling.encoder import read_model_meta

        read_model_meta(against, "--against")


def _count_stories(path: Path) -> int:
    """How many stories ``path`` holds, every row read and checked (``iter_stories``) but none kept: a bad row or
    an id given twice stops ``label`` here, before the labeller loads and before OUT is touched."""
    from harness.labelling.data import iter_stories

    return sum(1 for _ in iter_stories(path))


def _refuse_changed_stories(path: Path, read: str, fingerprint: str, counted: int, labelled: int, tmp: Path) -> None:
    """A DataError where the stories the label pass ``read`` (``_Fingerprinting``'s digest of the whole file, as
    ``_run_fingerprint`` hashes it) are not those the run's ``fingerprint`` was taken of, or ``labelled`` stories
    where the first pass ``counted`` others: ``label`` reads the file pass by pass, so the labels in ``tmp`` may be
    of either version, under the fingerprint of one. The stories themselves are compared, not the file's size and
    time: a file touched, or copied over with the same rows, is the same stories."""
    if labelled != counted or read != fingerprint:
        raise DataError(f"{path}: changed while its stories were being labelled; the labels in {tmp} may be of "
                        f"either version: delete {tmp} and label the file again once it is written")


class _Fingerprinting:
    """``_run_fingerprint`` taken of the stories as a pass yields them (``stories``, an iterator to label from):
    ``digest`` once the pass has read them all."""

    def __init__(self, stories: Iterable, info: dict[str, Any]) -> None:
        labels_of = {k: v for k, v in info.items() if k not in INFO_NOT_LABELS}
        self._hash = hashlib.sha256(json.dumps(labels_of, sort_keys=True, default=str).encode())
        self.stories = self._read(stories)

    def _read(self, stories: Iterable) -> Iterator:
        for s in stories:
            self._hash.update(json.dumps([s.story_id, s.text, [[r.key, r.description] for r in s.roles]]).encode())
            yield s

    @property
    def digest(self) -> str:
        return self._hash.hexdigest()


def _run_fingerprint(stories: Iterable, info: dict[str, Any]) -> str:
    """What a ``harness label label`` run's labels depend on: every story (id, text, roles) and the
    labeller's settings (``Labeller.info()`` but where it runs and the path to its weights, as the run stage
    compares them: a run killed on a GPU node goes on on a CPU node with ``--precision`` pinned). The stories
    may be a stream (a pass over the file); the hash is the one earlier releases wrote, so their killed runs
    resume."""
    read = _Fingerprinting(stories, info)
    for _ in read.stories:
        pass
    return read.digest


def _resumable(meta: Path, fingerprint: str) -> bool:
    """Whether OUT.tmp was written by a run of the same stories and labeller (its sidecar ``meta`` says so)."""
    try:
        return json.loads(meta.read_text()).get("fingerprint") == fingerprint
    except (OSError, ValueError, AttributeError):
        return False


def _refuse_other_run(tmp: Path, meta: Path, info: dict[str, Any]) -> None:
    """A ConfigError naming what differs where OUT.tmp holds the labels of another run (other stories, or
    another labeller or its settings): rerun that command to finish it, or delete OUT.tmp to start over."""
    with open(tmp, "rb") as f:
        lines = sum(1 for _ in f)
    try:
        old = json.loads(meta.read_text())
    except (OSError, ValueError):
        old = None
    finish = "rerun that command to finish it"
    if not isinstance(old, dict):  # an earlier release's run, or a sidecar lost: this release cannot finish it
        why = f"no readable {meta.name} says whose they are"
        finish = "finish it with the release and command that wrote it"
    else:
        was = old.get("labeller") if isinstance(old.get("labeller"), dict) else {}
        now = json.loads(json.dumps(info, default=str))
        changed = [f"{k} {was.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(was) | set(now))
                   if k not in INFO_NOT_LABELS and was.get(k) != now.get(k)]
        # the same settings: the stories differ (another file, or this one edited since), or the run was of a
        # release that fingerprinted its device and path too
        why = (f"labeller settings {'; '.join(changed)}" if changed else
               f"the stories of {old.get('stories')} then, or a run of an earlier release")
    raise ConfigError(f"{tmp}: holds {lines} labels of another run ({why}); {finish}, or "
                      f"delete {tmp} to label these stories from the start")


def _hold_out(out: Path) -> Any:
    """An exclusive lock on ``OUT.tmp.lock`` for one ``harness label label`` into ``out`` (the open file; released
    by ``_release_out``). Two at once (a command run twice, a requeued job beside the first) both resumed
    ``OUT.tmp`` and appended to it, and OUT held stories twice. A lock file deleted by the job ending as another
    took it is taken again, so two jobs never hold locks on two files of one name."""
    import fcntl
    import os

    path = out.with_name(out.name + ".tmp.lock")
    while True:
        f = open(path, "a")  # noqa: SIM115 - held until _release_out
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise ConfigError(f"--out {out}: another `harness label label` is labelling into it ({path} is held); "
                              f"wait for it to end, or give another --out") from None
        try:
            if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                return f
        except FileNotFoundError:
            pass
        f.close()  # deleted by the job that held it as it ended: the next one of that name


def _release_out(lock: Any) -> None:
    """Delete and release ``_hold_out``'s lock file (deleted while held: a job that opened it meanwhile finds
    it gone once it has the lock, and takes a new one)."""
    if lock is None:
        return
    import os

    try:
        os.unlink(lock.name)
    except FileNotFoundError:
        pass
    lock.close()


@dataclass
class _Tally:
    """What ``label`` says of the labels it has in OUT.tmp, without holding them: how many, how many with a
    non-ok status, and how many whose backend failed, with the first of those for the error that names it."""

    done: int = 0
    bad: int = 0
    down: int = 0
    first_down: Any = None  # the StoryLabels of the first story whose backend failed

    def add(self, res: Any) -> None:
        """Count the labels ``res`` of the next story."""
        self.done += 1
        self.bad += res.status != "ok"
        if res.status.startswith(BACKEND_FAILURE):
            self.down += 1
            self.first_down = self.first_down or res


def _labelled_already(tmp: Path, stories: Iterable) -> tuple[_Tally, list[int]]:
    """The labels a killed ``harness label label`` wrote to ``tmp`` already, tallied: those of the first of
    ``stories`` (a pass over the file), in order (a rerun goes on after them); with them, the places in the file
    of the stories whose backend failed, which the rerun labels again. A torn last line is cut off, and so is
    everything from a line that labels another story than the next (a line cut by hand: the labels before it
    are kept, and said so); a line that is no label record is refused, naming it (the labels before it are
    this run's: not thrown away). The file is read line by line, split at "\\n" alone: a label may hold U+2028
    or U+0085, written as they are (``ensure_ascii=False``), which ``str.splitlines`` splits at, and every
    earlier label was lost to the half-lines."""
    if not tmp.is_file():
        return _Tally(), []
    from harness.labelling.base import StoryLabels

    ids = (s.story_id for s in stories)
    tally, again = _Tally(), []
    whole = 0  # bytes of the whole lines read
    with open(tmp, "rb") as f:
        for k, line in enumerate(f, 1):
            if not line.endswith(b"\n"):  # torn: the killed run was writing it
                break
            try:
                res = StoryLabels.from_dict(json.loads(line.decode("utf-8", errors="replace")))
            except (ValueError, KeyError, TypeError, HarnessError) as e:
                raise DataError(f"{tmp}, line {k}: not a label record ({' '.join(str(e).split())[:120]}); it holds "
                                f"this run's labels: mend that line, or cut it and the lines after it, to resume "
                                f"after the ones before it, or delete {tmp} to label these stories from the start"
                                ) from None
            expected = next(ids, None)
            if res.story_id != expected:  # a line cut or moved by hand, or more labels than stories: the labels
                # before it are this run's (its fingerprint matched), kept; from it on the stories are labelled again
                typer.echo(f"{tmp}, line {k}: labels story {res.story_id!r} where the file's next story is "
                           f"{expected!r}; the {tally.done} labels before it are kept, and the stories from there on "
                           f"are labelled again", err=True)
                break
            if res.status.startswith(BACKEND_FAILURE):
                again.append(tally.done)
            tally.add(res)
            whole += len(line)
    if whole < tmp.stat().st_size:
        with open(tmp, "r+b") as f:
            f.truncate(whole)
    return tally, again


def _retry_backend_failures(lab: Any, stories: Path, again: list[int], tally: _Tally, tmp: Path, fresh: Path,
                            batch_size: int | None, progress: bool) -> _Tally:
    """Label again the stories at the places ``again`` of the file ``stories``, whose backend failed in the
    killed run (an outage is no verdict on the story; ``harness run`` retries them too), and write ``tmp`` anew
    with their labels in place, by way of ``fresh``: the other lines are copied as they are, line by line, and
    ``fresh`` is synced to disk before it is renamed over ``tmp``. Gives ``tally``, the earlier labels', with
    the new labels counted in place of the failed ones."""
    from harness.labelling.data import iter_stories
    from harness.store import commit_file

    if not again:
        return tally
    typer.echo(f"retrying {len(again)} stories whose backend failed in the earlier run", err=True)
    wanted = set(again)
    picked = (s for i, s in enumerate(islice(iter_stories(stories, check_ids=False), again[-1] + 1)) if i in wanted)
    relabelled = lab.iter_label(picked, batch_size=batch_size, progress=progress, total=len(again))
    kept = _Tally(tally.done - len(again), tally.bad - len(again))  # each failed one counted non-ok
    with open(tmp, "rb") as old, open(fresh, "wb") as new:
        lines = enumerate(old)
        for k, res in zip(again, relabelled, strict=True):  # strict: the labelling runs to its end, not cut off
            for i, line in lines:  # the lines before the k-th as they are; the k-th replaced
                if i == k:
                    break
                new.write(line)
            new.write((json.dumps(res.to_dict(), ensure_ascii=False) + "\n").encode("utf-8"))
            kept.add(res)
        new.writelines(line for _, line in lines)
    commit_file(fresh, tmp)
    return kept


def _jsonable(x: Any) -> Any:
    """``x`` with every NaN or infinity, however deep in dicts and lists, as None: strict JSON has neither."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def _summary_json(shift: Any) -> dict[str, dict[str, Any]]:
    return {t: {k: _jsonable(v) for k, v in s.items()} for t, s in shift.summary.items()}


@app.command()
def train(
    data: list[Path] = typer.Option(None, "--data",
                                    parser=_path, help="Training JSONL (default: the project's own stories in "
                                                       "harness/data/labelling)."),
    extra: list[Path] = typer.Option(None, "--extra",
                                     parser=_path, help="More training JSONL, e.g. laissez_faire_train150.jsonl."),
    out: Optional[Path] = typer.Option(None, "--out",
                                       parser=_path, help="Model directory (default: $HARNESS_CACHE/labeller/"
                                                          "encoder-minilm, or encoder-<base>)."),
    epochs: int = typer.Option(8, "--epochs", min=1),
    batch_size: int = typer.Option(8, "--batch-size", min=1),
    lr: float = typer.Option(1e-4, "--lr"),
    layers: Optional[int] = typer.Option(None, "--layers", min=1, help="Keep only the first N layers."),
    base: Optional[str] = typer.Option(None, "--base", help="Pretrained encoder to fine-tune: minilm (default, "
                                       "fast) or mpnet (12 layers of width 768; needs its five weight packages, "
                                       "see harness/labelling/bases.py). With --init-from: that model's base."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use only the first N stories (quick checks)."),
    seed: list[int] = typer.Option([0], "--seed", min=0, max=2**32 - 1,
                                   help="Random seed (0 to 2**32 - 1); given more than once (--seed 0 --seed 1), one "
                                   "model per seed, saved as the average of their weights (a soup: one model's "
                                   "cost to label, each seed's to train; the members stay under OUT/members, so "
                                   "a rerun trains only those missing)."),
    augment: bool = typer.Option(True, "--augment/--no-augment", help="Each epoch, swap first names at random (70% of "
                                 "named characters) and flip every gendered word in half the stories."),
    occurrences: bool = typer.Option(False, "--occurrences/--word-types", help="Teach who owns each occurrence of "
                                     "a reference word both characters hold (the stories' reference_owners; not "
                                     "trained where a story has none), or (default) mark every occurrence for both."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch CPU threads (with --jobs: each "
                                          "job's; default the usable CPUs shared out among the jobs)."),
    jobs: int = typer.Option(1, "--jobs", min=1, help="With several --seed: train up to this many members at once "
                             "on the CPU, a process each (2 on 2 cores: faster than one after the other)."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)."),
    precision: Optional[str] = typer.Option(None, "--precision", help="The training's arithmetic: float32 "
                                            "(default) or bfloat16 (autocast; weights stay float32): about 1.5x faster "
                                            "on a CPU with AVX512-BF16 or AMX, up to 1.5 points less accurate on a "
                                            "figure or two."),
    init_from: Optional[Path] = typer.Option(None, "--init-from",
                                             parser=_path, help="Continue training a model directory "
                                                                "written by this command (give --out too; the same "
                                                                "directory continues it in place)."),
    as_json: bool = typer.Option(False, "--json", help="Print the training report as JSON."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="A bar of the training's steps "
                                            "(--progress), or nothing until the end (--no-progress); by default a line "
                                            "on stderr as each epoch ends, with the time left."),
) -> None:
    """Fine-tune the encoder labeller on hand-labelled stories. Cut short (Ctrl-C, killed), the same command goes on
    from the last epoch it finished."""
    from harness.labelling.data import builtin_training_files
    from harness.labelling.training import model_dir_for, train_soup

    try:
        files = list(data or builtin_training_files()) + list(extra or [])
        settings = dict(epochs=epochs, batch_size=batch_size, lr=lr, layers=layers, limit=limit, augment=augment,
                        threads=threads, init_from=init_from, progress="epochs" if progress is None else progress,
                        base=base, occurrences=occurrences,
                        device=device, precision=precision)
        target = model_dir_for(out, base)
        if (target / "meta.json").is_file() and init_from is None and progress is not False:
            # the user cache's model, retrained after `make demo`, went silently; the runs it labelled then stop
            typer.echo(f"note: {target} holds a trained encoder; this training's model replaces it when it ends (a "
                       f"run that encoder labelled then stops at its label stage until its labels folder is deleted)",
                       err=True)
        rep = train_soup(files, seed, out_dir=out, jobs=jobs, **settings)  # a second into OUT at once is refused
    except HarnessError as e:
        _fail(e)
    if as_json:  # strict JSON: a NaN was printed as NaN, which no JSON reader takes
        typer.echo(json.dumps(_jsonable(rep.to_dict()), allow_nan=False))
    else:
        typer.echo(rep.line())


@app.command("eval")
def eval_(
    ctx: typer.Context,
    gold: Path = typer.Option(..., "--gold",
                              parser=_path, help="JSONL with manual labels (laissez_faire_audit_dev.jsonl format)."),
    labeller: str = typer.Option("encoder", "--labeller", help="encoder, llm or rules."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir",
                                             parser=_path, help="Encoder weights directory."),
    llm_model: str = typer.Option("smollm2-135m", "--llm-model", help="Model for the llm labeller."),
    llm_backend: str = LLM_BACKEND,
    llm_base_url: Optional[str] = LLM_BASE_URL,
    lexicon: Optional[str] = typer.Option(None, "--lexicon", help="Gender lexicon: s6a (default), code, "
                                          "neopronouns or a YAML path."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Score only the first N stories."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="torch CPU threads (encoder)."),
    name_check: bool = NAME_CHECK,
    action_check: bool = ACTION_CHECK,
    pronoun_binding: bool = PRONOUN_BINDING,
    apposition_check: bool = APPOSITION_CHECK,
    precision: Optional[str] = PRECISION,
    as_json: bool = typer.Option(False, "--json", help="Print the overall figures as one JSON object."),
    details: Optional[Path] = typer.Option(None, "--details",
                                           parser=_path, help="Also write the full report as JSON here."),
    against: Optional[Path] = typer.Option(None, "--against",
                                           parser=_path, help="Also score the encoder in this directory and "
                                                              "report the differences with paired 95% intervals."),
    statistics: bool = typer.Option(False, "--statistics", help="Also compute the paper's ratios (R_rep, R_sub, "
                                    "R_mrs) from the manual labels and from the labeller's, and say how far the "
                                    "labeller moves them (harness.labelling.impact)."),
    name_table: Optional[Path] = typer.Option(None, "--name-table",
                                              parser=_path, help="First-name table for --statistics "
                                                                 "(default: the user cache's, built on first use)."),
    statistics_boot: int = typer.Option(0, "--statistics-boot", min=0, help="With --statistics: paired story "
                                        "resamples for each ratio's shift interval and test, uncorrected and after "
                                        "Benjamini-Hochberg (0: none; about 0.5 s each on 1,000 stories; a "
                                        "table of m cells needs about 2m / .05 to keep a single shift after "
                                        "the correction)."),
    progress: bool = typer.Option(False, "--progress/--no-progress"),
    run: Optional[Path] = typer.Option(None, "--run", parser=_path,
                                       help="Score the labeller that labelled this run (its folder): built from the "
                                            "config the run recorded (an encoder's folder, precision and checks; an "
                                            "LLM's backend, model, sampling and attempts) and held to the labeller "
                                            "it recorded; the run's gender lexicon unless --lexicon. Replaces "
                                            "--labeller and the options that build one."),
) -> None:
    """Gender and name precision/recall of a labeller against manual labels (Table S8).

    Precision and recall come with 95% story-bootstrap intervals.
    --against adds the differences from a second encoder.
    --statistics adds what the labeller's errors do to the paper's ratios."""
    from harness.labelling.data import load_gold
    from harness.labelling.evaluate import evaluate

    try:
        cfg = None
        if run is not None:  # the run's labeller, not one built from options that can miss a setting
            from harness.audit.labels import run_config
            from harness.labelling.encoder import default_model_dir

            _refuse_options_beside_run(ctx)
            cfg = run_config(run)
            labeller = cfg.label.labeller
            if labeller == "encoder":  # the folder whose files --details may not write over, and the settings
                model_dir = Path(cfg.label.model_dir).expanduser() if cfg.label.model_dir else default_model_dir()
                name_check, action_check = cfg.label.name_check, cfg.label.action_check  # --against's encoder reads
                pronoun_binding, apposition_check = cfg.label.pronoun_binding, cfg.label.apposition_check
                precision = cfg.label.precision
            lexicon = cfg.identity.lexicon if lexicon is None else lexicon
        if details is not None:
            from harness.store import check_output_file

            check_output_file(details, "--details")
            from harness.identity.gender import BUILTIN_LEXICONS

            # a --lexicon YAML file was written over by the report too
            lexicon_file = Path(lexicon) if lexicon is not None and lexicon not in BUILTIN_LEXICONS else None
            for given, flag in ((gold, "--gold"), (name_table, "--name-table"), (lexicon_file, "--lexicon")):
                if given is not None and details.resolve() == given.resolve():
                    raise ConfigError(f"--details {details}: the report would be written over the {flag} file "
                                      f"{given}; give another path for the details")
            _refuse_writing_over_encoders(details, "--details", "the report", [details], labeller, model_dir, against,
                                          evaluation=True)
        for given, flag in ((name_table is not None, "--name-table"), (statistics_boot > 0, "--statistics-boot")):
            if given and not statistics:
                raise ConfigError(f"{flag} is read by --statistics only; add --statistics or drop {flag}")
        if 0 < statistics_boot < MIN_SHIFT_REPLICATES:  # one resample's "95% interval" excluded 0 for any shift
            raise ConfigError(f"--statistics-boot {statistics_boot}: the paired bootstrap test needs at least "
                              f"{MIN_SHIFT_REPLICATES} resamples to find a shift at .05 (0 skips the intervals)")
        _refuse_unread_options(ctx, labeller, against)
        _check_before_labelling(lexicon, against)
        if statistics:  # the table is read before the labelling, so a bad path costs nothing
            from harness.identity.names import NameTable
            from harness.labelling.impact import statistics_shift

            names = NameTable.load(name_table)
        stories = load_gold(gold)
        if not stories:
            raise DataError(f"{gold}: no stories to score; pass a JSONL file with one labelled story per line")
        if limit:
            stories = stories[:limit]
        if statistics:  # a story without its condition, domain or love type stopped --statistics after the labelling
            from harness.labelling.impact import check_statistics_fields

            check_statistics_fields(stories)
        if cfg is not None:
            from harness.audit.labels import run_labeller

            lab = run_labeller(run, cfg, echo=lambda line: typer.echo(line, err=True))
        else:
            lab = _labeller(labeller, model_dir, llm_model, threads, name_check, action_check, pronoun_binding,
                            apposition_check, llm_backend, precision, llm_base_url)
        try:  # --against's encoder is built before the labelling: a precision or a model it refuses stopped the
            # command only after the first labeller had labelled every story
            other = None if against is None else _labeller("encoder", against, llm_model, threads, name_check,
                                                           action_check, pronoun_binding, apposition_check,
                                                           precision=precision)
        except BaseException:
            lab.close()
            raise
        try:
            try:
                scored = lab.info()  # beside the scores in --details: the report takes them for this labeller only
                rep = evaluate(lab, stories, lexicon=lexicon, batch_size=batch_size, progress=progress)
            finally:
                lab.close()
            base = None if other is None else evaluate(other, stories, lexicon=lexicon, batch_size=batch_size,
                                                       progress=progress)
        finally:
            if other is not None:
                other.close()
        shift = statistics_shift(rep, stories, names, n_boot=statistics_boot) if statistics else None
    except HarnessError as e:
        _fail(e)
    diff = rep.difference(base) if base is not None else None
    if details:
        full = {**rep.to_dict(), "labeller_info": scored}
        if diff is not None:  # --json's "against", which the details left out
            full["against"] = {k: list(v) for k, v in diff.items()}
        if shift is not None:
            full["statistics"] = _summary_json(shift)
            full["statistics_cells"] = json.loads(shift.cells.to_json(orient="records"))  # NaN -> null
        from harness.store import atomic_write_text

        atomic_write_text(details, json.dumps(_jsonable(full), indent=2, allow_nan=False))  # whole or not at all
    if as_json:
        out = {k: _jsonable(v) for k, v in rep.overall().items()}
        if diff is not None:
            out["against"] = {k: [_jsonable(x) for x in v] for k, v in diff.items()}
        if shift is not None:
            out["statistics"] = _summary_json(shift)
        typer.echo(json.dumps(out))
    else:
        typer.echo(rep.summary())
        if diff is not None:
            typer.echo(f"\nagainst {against} (figures {base.gender.precision:.1%}/{base.gender.recall:.1%} gender, "
                       f"{base.name.precision:.1%}/{base.name.recall:.1%} names), this labeller minus that one, "
                       "in points, with 95% paired story-bootstrap intervals:")
            for label, (d, lo, hi) in zip(("gender P", "gender R", "name P", "name R"), diff.values()):
                interval = "interval n/a" if lo != lo else f"{100 * lo:+.1f} to {100 * hi:+.1f}"
                shown = "n/a" if d != d else f"{100 * d:+.1f} ({interval})"
                typer.echo(f"  {label} {shown}")
        if shift is not None:
            typer.echo("\nthe paper's ratios from the manual labels and from this labeller's, per source model x domain "
                       "and pooled over the sources, with the tables' 95% intervals (Wilson, Katz):\n")
            typer.echo(shift.to_text())


@app.command("label")
def label_(
    ctx: typer.Context,
    stories: Path = typer.Argument(...,
                                   parser=_path, help="JSONL of stories (story_id, text, roles) or of published rows."),
    out: Path = typer.Option(..., "--out", "-o",
                             parser=_path, help="JSONL to write, one StoryLabels per line."),
    labeller: str = typer.Option("encoder", "--labeller", help="encoder, llm or rules."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir",
                                             parser=_path, help="Encoder weights directory."),
    llm_model: str = typer.Option("smollm2-135m", "--llm-model", help="Model for the llm labeller."),
    llm_backend: str = LLM_BACKEND,
    llm_base_url: Optional[str] = LLM_BASE_URL,
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1),
    threads: Optional[int] = typer.Option(None, "--threads", min=1),
    name_check: bool = NAME_CHECK,
    action_check: bool = ACTION_CHECK,
    pronoun_binding: bool = PRONOUN_BINDING,
    apposition_check: bool = APPOSITION_CHECK,
    precision: Optional[str] = PRECISION,
    progress: bool = typer.Option(False, "--progress/--no-progress"),
) -> None:
    """Label every story of a JSONL file; stories that cannot be labelled keep a reason in `status`.

    The labels go to OUT.tmp as they come and OUT at the end; a killed run's rerun goes on where it stopped
    (only a run of the same stories and labeller settings: OUT.tmp.json says whose they are), labelling again
    the stories whose backend failed in the killed run (by way of OUT.tmp.retried). Where the backend failed for
    some stories, OUT holds them with their reason, OUT.tmp stays and the command exits 4: the rerun labels only
    them. The stories are read a story at a time, in a few passes over the file, so memory does not grow with
    their number; the file must not change while they are labelled."""
    import shutil

    from harness.labelling.data import iter_stories
    from harness.store import atomic_write, atomic_write_text, check_output_file, commit_file

    lock = None
    try:
        check_output_file(out, "--out", (".tmp", ".tmp.json", ".tmp.retried", ".tmp.lock"))  # each written beside it
        tmp = out.with_name(out.name + ".tmp")
        meta = out.with_name(out.name + ".tmp.json")  # what tmp's labels are of: a rerun resumes only the same run
        retried = out.with_name(out.name + ".tmp.retried")  # tmp written anew with the retried stories' labels
        for side in (tmp, meta, retried, out.with_name(out.name + ".tmp.lock")):  # a folder there was a traceback
            if side.exists() and not side.is_file():
                raise ConfigError(f"--out {out}: {side} is a folder or no regular file, where labelling into {out} "
                                  f"keeps a file of its own; move it away, or give another --out")
        lock_file = out.with_name(out.name + ".tmp.lock")  # taken, then deleted as the command ends
        for written in (out, tmp, meta, retried, lock_file):  # each is written over (the lock deleted)
            if written.resolve() == stories.resolve():
                via = f" (as {written.name}, written while labelling)" if written != out else ""
                raise ConfigError(f"--out {out}: the labels would be written over the stories file {stories}{via}; "
                                  f"give another path for the labels")
        _refuse_writing_over_encoders(out, "--out", "the labels", (out, tmp, meta, retried, lock_file), labeller,
                                      model_dir)
        _refuse_unread_options(ctx, labeller)
        lock = _hold_out(out)
        # the stories are read pass by pass, never held whole (a lab labels hundreds of thousands): this first pass
        # checks every row, before the labeller loads and before an earlier OUT is written over with nothing
        count = _count_stories(stories)
        if not count:
            raise DataError(f"{stories}: no stories to label; pass a JSONL file with one story per line "
                            f"(id, text, roles)")
        lab = _labeller(labeller, model_dir, llm_model, threads, name_check, action_check, pronoun_binding,
                        apposition_check, llm_backend, precision, llm_base_url)
        try:
            fingerprint = _run_fingerprint(iter_stories(stories, check_ids=False), lab.info())
            tally, again = _Tally(), []
            if tmp.is_file() and tmp.stat().st_size:
                if not _resumable(meta, fingerprint):  # they were deleted ("starting over"): a rerun that forgot
                    _refuse_other_run(tmp, meta, lab.info())  # an option lost hours of labels
                tally, again = _labelled_already(tmp, iter_stories(stories, check_ids=False))
            done = tally.done
            if done:
                typer.echo(f"resuming: {done} stories already labelled in {tmp}", err=True)
                tally = _retry_backend_failures(lab, stories, again, tally, tmp, retried, batch_size, progress)
            else:
                # the other run's labels go before the sidecar names this run: killed in between, a rerun took them
                # for its own
                tmp.unlink(missing_ok=True)
                atomic_write_text(meta, json.dumps({"fingerprint": fingerprint, "stories": str(stories),
                                                    "labeller": lab.info()}, default=str))
            # the label pass reads the whole file (the stories labelled before too) and fingerprints it again:
            # a file written over since the first pass gave labels of two versions under the fingerprint of one
            labelling = _Fingerprinting(iter_stories(stories, check_ids=False), lab.info())
            rest = islice(labelling.stories, done, None)
            with open(tmp, "a" if done else "w", encoding="utf-8") as f:
                for res in lab.iter_label(rest, batch_size=batch_size, progress=progress, total=count - done):
                    tally.add(res)
                    f.write(json.dumps(res.to_dict(), ensure_ascii=False) + "\n")
                    f.flush()
        finally:
            lab.close()
        _refuse_changed_stories(stories, labelling.digest, fingerprint, count, tally.done, tmp)
        if tally.down:  # OUT holds every story, those with their reason; OUT.tmp stays, so a rerun labels only them
            atomic_write(out, lambda written: shutil.copyfile(tmp, written))
            first = tally.first_down
            raise BackendError(f"{tally.down} of {count} stories could not be labelled: the labeller's backend "
                               f"failed (the first, {first.story_id}: {' '.join(first.status.split())[:200]}); "
                               f"{out} holds them with that reason: fix the cause and rerun the same command, which "
                               f"labels only them again")
        commit_file(tmp, out)  # flushed line by line, synced to disk once, before the rename
        meta.unlink(missing_ok=True)
    except HarnessError as e:
        _fail(e)
    finally:
        _release_out(lock)
    earlier, again_now = done - len(again), (f", {len(again)} labelled again" if again else "")
    typer.echo(f"labelled {count} stories ({tally.bad} with a non-ok status)"
               f"{f', {earlier} of them by an earlier run' if earlier else ''}{again_now} -> {out}")


__all__ = ["app"]
