"""The label stage: stories of a run -> one row per character in ``<run>/labels/``.

Rows: prompt_id, sample_idx, role ("subject"/"object"), role_description, name, references,
status ("ok" or why the character could not be labelled), labeller, finish_reason, text_sha1. Stories are labelled in
chunks and each chunk is committed as a Parquet shard, so a killed stage resumes where it
stopped. The generations are read a shard at a time, twice: once for each story's text hash and row, once for the
texts to label, handed to the labeller as a stream; so the stage holds no run's texts whole, under 1 KB a
story for resuming (``benchmarks/label_stage_memory.py``). A story the labeller cannot handle keeps its rows,
with the reason in ``status``.
A failed generation (``finish_reason`` "error": no story was written) is not labelled: the
stage counts it, and once a rerun of generate has retried it, the next label stage labels it.
Likewise a story whose labelling failed in the LLM labeller's backend (a server down) keeps its
reason in ``status`` and ``finish_reason`` "error" in its rows, and the next run labels it again
(the store reads a good row over an error row of the same key).
Each row records the SHA-1 of the text it was made from (``text_sha1``): a story whose text is no longer
that one (its generations shard did not read, was deleted and made again) is labelled again, and the
identities stage reads the labels of the story's current text only.
The manifest records the label settings (``LABEL_SETTINGS``) and the labeller as resolved (its
``info()``: the encoder's precision and weights); a rerun with other settings over a run's labels, or beside
a job labelling the run now, stops with an error instead of mixing two labellings.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import defaultdict, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from pydantic import ValidationError

from harness.config import RunConfig, unread_field
from harness.errors import BackendError, ConfigError, DataError
from harness.labelling.base import BACKEND_FAILURE, INFO_NOT_LABELS
from harness.pipeline import GENERATIONS, one_line
from harness.store import ERROR, KEY, STATUS, RunStore, shard_of

LABELS = "labels"
TEXT_SHA1 = "text_sha1"  # of the story text a label row was made from
LABEL_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("sample_idx", pa.int32()),
        ("role", pa.string()),
        ("role_description", pa.string()),
        ("name", pa.string()),
        ("references", pa.list_(pa.string())),
        ("status", pa.string()),
        ("labeller", pa.string()),
        (STATUS, pa.string()),  # ERROR where the labeller's backend failed: the next run labels the story again
        (TEXT_SHA1, pa.string()),
    ]
)


def text_sha1(text: str | None) -> str:
    """The hash label rows record of the story text they were made from (None: the empty story)."""
    return hashlib.sha1((text if isinstance(text, str) else "").encode()).hexdigest()


def labelled_keys(store: RunStore, hashes: dict[tuple[str, int], str]) -> set[tuple[str, int]]:
    """The stories labelled from their current text (``hashes``: key -> ``text_sha1`` of its text_clean), not
    counting a backend failure's rows; rows written before ``TEXT_SHA1`` was recorded count whatever the text. Read
    a shard at a time: a story is labelled where any of its rows is a good row of its text, which is what the rows
    ``RunStore.read_stage`` keeps say (of one key, a good row beats a failed one)."""
    done: set[tuple[str, int]] = set()
    for rows in store.read_shards(LABELS, [*KEY, TEXT_SHA1, STATUS]):
        sha = rows[TEXT_SHA1] if TEXT_SHA1 in rows.columns else pd.Series(None, index=rows.index, dtype=object)
        good = rows[STATUS].ne(ERROR) if STATUS in rows.columns else pd.Series(True, index=rows.index)
        done.update(k for k, h, ok in zip(zip(rows.prompt_id, rows.sample_idx.astype(int)), sha, good)
                    if ok and (not isinstance(h, str) or hashes.get(k, h) == h))
    return done


def _generations(store: RunStore, paths: list[Path]) -> tuple[dict[tuple[str, int], str],
                                                               dict[tuple[str, int], tuple[int, int, str | None]]]:
    """The run's stories read a shard at a time (their texts hashed, not kept): each key's ``text_sha1`` and where
    its row is, as (shard number in ``paths``, row, None; for a failed generation its error, "" where it gave
    none). Each key's row is the one ``RunStore.read_stage`` reads: the first written, except that a good row beats
    a failed one."""
    hashes: dict[tuple[str, int], str] = {}
    at: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    names: dict[str, str] = {}  # one string per prompt id, not one per row
    for s, df in enumerate(store.read_shards(GENERATIONS, [*KEY, "text_clean", STATUS, "error"], paths,
                                             required=[*KEY, "text_clean"])):
        failed = df[STATUS].eq(ERROR) if STATUS in df.columns else pd.Series(False, index=df.index)
        errors = df["error"] if "error" in df.columns else pd.Series(None, index=df.index, dtype=object)
        for r, (pid, idx, text, bad, error) in enumerate(zip(df.prompt_id, df.sample_idx, df.text_clean, failed,
                                                             errors)):
            if not isinstance(pid, str) or pd.isna(idx):  # else a ValueError or TypeError traceback further on
                raise DataError(f"{paths[s]}: row {r}: prompt_id {pid!r}, sample_idx {idx!r}; every story needs both: "
                                f"mend the row, or delete the shard (a rerun of generate writes its stories again)")
            key = (names.setdefault(pid, pid), int(idx))
            held = at.get(key)
            if held is None or (held[2] is not None and not bad):
                at[key] = (s, r, (error if isinstance(error, str) else "") if bad else None)
                hashes[key] = text_sha1(text)
    return hashes, at


def encoder_dir(cfg: RunConfig) -> Path:
    """The encoder's directory for this config: ``label.model_dir`` or the user cache. A ConfigError,
    before any stage runs, where it holds no trained encoder and may not be trained there on first use
    (``label.train_if_missing``, default: only the user cache): a mistyped ``model_dir`` should stop the
    run, not train a new model in its place."""
    from harness.labelling.encoder import default_model_dir

    path = Path(cfg.label.model_dir) if cfg.label.model_dir else default_model_dir()
    train = cfg.label.train_if_missing
    if train is None:
        train = cfg.label.model_dir is None
    if not train and not (path / "meta.json").is_file():
        where = "label.model_dir" if cfg.label.model_dir else "label.train_if_missing is false and the user cache"
        raise ConfigError(f"{where}: {path} holds no trained encoder (meta.json missing); correct the path, train "
                          f"one there with `harness label train --out {path}`, or set label.train_if_missing: true "
                          f"to train it on first use")
    check_training_settings(cfg, path)
    return path


#: How the encoder is trained on first use (``check_training_settings``).
TRAIN_SETTINGS = ("train_epochs", "train_seeds", "train_extra", "train_precision")


def check_training_settings(cfg: RunConfig, path: Path) -> None:
    """A ConfigError where the config sets how the encoder is trained on first use (``label.train_epochs``,
    ``train_seeds``, ``train_extra``, ``train_precision``) and the encoder already at ``path`` was trained otherwise:
    it is used as it is, so those settings did nothing, silently."""
    from harness.labelling.encoder import read_model_meta
    from harness.labelling.training import recorded_precision

    asked = cfg.label.model_fields_set & set(TRAIN_SETTINGS)
    if not asked or not (path / "meta.json").is_file():
        return
    meta = read_model_meta(path, "label.model_dir" if cfg.label.model_dir else "the user cache's encoder")
    train = meta.get("train", {})
    had = {"train_epochs": train.get("epochs"), "train_seeds": train.get("seeds", [train.get("seed")]),
           "train_extra": sorted(set(meta.get("files", []))),
           "train_precision": recorded_precision(train)}
    want = {"train_epochs": cfg.label.train_epochs, "train_seeds": list(cfg.label.train_seeds),
            "train_extra": [Path(f).name for f in cfg.label.train_extra],
            "train_precision": cfg.label.train_precision}
    for field in sorted(asked - ({"train_precision"} if cfg.label.train_precision is None else set())):
        differs = (not set(want[field]) <= set(had[field])) if field == "train_extra" else want[field] != had[field]
        if differs:
            shown = had[field] if field != "train_extra" else f"the files {', '.join(had[field])}"
            raise ConfigError(f"label.{field}: the encoder at {path} was trained with {shown}, not {want[field]}, and "
                              f"a trained encoder is used as it is; delete it (or set label.model_dir to a new folder) "
                              f"to train one with these settings, or drop label.{field}")


def check_llm(cfg: RunConfig) -> None:
    """A ConfigError naming the ``label.llm`` field at fault, before any stage runs, where the llm labeller has no
    model block, names a model that cannot be found, is an openai backend without its server's URL, gives a
    server's URL to a local engine (which would start in its place) or sets a field its backend does not read
    (``config.unread_field``): found by ``load_backend`` only when the label stage starts, after generation, and
    reported as the run's ``model.path`` or ``model.base_url``, or not at all."""
    from harness import models

    llm = cfg.label.llm
    if llm is None:
        raise ConfigError("label.llm: the llm labeller needs a model block (backend, path) under label.llm")
    if llm.backend == "openai":
        if not llm.base_url:
            raise ConfigError("label.llm.base_url: the openai backend needs the server's URL, e.g. "
                              "http://127.0.0.1:8000/v1; add it, or use backend transformers or vllm")
    elif llm.base_url:
        raise ConfigError(f"label.llm.base_url: a server's URL is for the openai backend, not {llm.backend}; set "
                          f"label.llm.backend: openai to label through that server, or remove base_url")
    if (unread := unread_field(llm, "label.llm")) is not None:
        raise ConfigError(unread)
    if llm.backend != "openai":
        models.resolve(llm.backend, llm.path, llm.gguf_file, where="label.llm.path", prepare_missing=False)


def make_labeller(cfg: RunConfig, *, echo=print, progress: bool = False):
    """The labeller the config names; the encoder is trained on first use from the project's own
    labelled stories when its directory holds no trained weights and ``encoder_dir`` allows it (with a
    progress bar where ``progress``: on 2 CPU cores it takes minutes to tens of minutes)."""
    from harness.labelling import get_labeller

    name = cfg.label.labeller
    kwargs: dict[str, Any] = {}
    if name == "encoder":
        from harness.labelling.data import builtin_training_files
        from harness.labelling.training import train_soup, training_lock

        path = encoder_dir(cfg)
        if not (path / "meta.json").is_file():
            missing = [f for f in cfg.label.train_extra if not Path(f).is_file()]
            if missing:
                raise ConfigError(f"label.train_extra: {missing[0]} not found; give a labelled JSONL file that exists "
                                  f"(paths are relative to the working directory)")
            def waiting() -> None:
                echo(f"[label] another job is training the encoder at {path}; waiting for it")

            with training_lock(path, waiting):  # the jobs of an array sharing the cache train it once
                if not (path / "meta.json").is_file():
                    echo(f"[label] no trained encoder at {path}: training it on the project's labelled stories"
                         f"{' and ' + ', '.join(cfg.label.train_extra) if cfg.label.train_extra else ''} (minutes "
                         f"on CPU; cut short, a rerun goes on from its last finished epoch)")
                    files = builtin_training_files() + [Path(f) for f in cfg.label.train_extra]
                    rep = train_soup(files, cfg.label.train_seeds, out_dir=path, epochs=cfg.label.train_epochs,
                                     jobs=cfg.label.train_jobs, precision=cfg.label.train_precision,
                                     progress=progress)
                    echo(f"[label] {rep.line()}")
                else:  # another job trained it while this one waited: its settings, checked as at the run's start
                    check_training_settings(cfg, path)
        kwargs["path"] = path
        kwargs["name_check"] = cfg.label.name_check
        kwargs["action_check"] = cfg.label.action_check
        kwargs["pronoun_binding"] = cfg.label.pronoun_binding
        kwargs["apposition_check"] = cfg.label.apposition_check
        kwargs["precision"] = cfg.label.precision
    elif name == "llm":
        from harness.generation import load_backend

        check_llm(cfg)
        # started for the labeller alone: its close() releases the engine (GPU memory, workers, HTTP client)
        kwargs["backend"] = load_backend(cfg.label.llm, seed=cfg.seed)
        kwargs["owns_backend"] = True
        kwargs["max_attempts"] = cfg.label.llm_attempts
        kwargs["params"] = llm_label_params(cfg)
    try:
        labeller = get_labeller(name, **kwargs)
    except ConfigError as e:  # name the config block the setting came from
        if "backend" in kwargs:
            kwargs["backend"].close()
        raise ConfigError(f"label ({name} labeller): {e}") from None
    if name == "llm" and cfg.label.batch_size is None:
        # the engine's batch (vLLM's max_num_seqs) is filled only by as many stories at once: with the labeller's
        # 16, a label.llm.batch_size of 256 left the engine running 16 sequences
        labeller.default_batch_size = cfg.label.llm.batch_size
    return labeller


def llm_label_params(cfg: RunConfig) -> Any:
    """The sampling an LLM labeller of this config uses: ``label.llm_sampling``'s fields given, over the labeller's
    own (greedy, 256 tokens), not over the stories' defaults."""
    from dataclasses import replace

    from harness.labelling.llm import DEFAULT_PARAMS

    sampling = cfg.label.llm_sampling
    if sampling is None:
        return DEFAULT_PARAMS
    given = {"max_tokens" if k == "max_new_tokens" else k: tuple(v) if k == "stop" else v
             for k, v in sampling.model_dump(include=sampling.model_fields_set).items()}
    return replace(DEFAULT_PARAMS, **given)


#: The label settings that decide what the labels say (not batch or shard sizes, nor first-use training).
LABEL_SETTINGS = ("labeller", "model_dir", "llm", "name_check", "action_check", "pronoun_binding", "apposition_check",
                  "precision", "llm_sampling", "llm_attempts")
#: Of ``LABEL_SETTINGS``, those each labeller reads (besides "labeller"): the others, changed, change none of its
#: labels ("name_check" of an LLM-labelled run, a ``label.llm`` block left in an encoder run's config).
LABELLER_SETTINGS = {"encoder": ("model_dir", "name_check", "action_check", "pronoun_binding", "apposition_check",
                                 "precision"),
                     "llm": ("llm", "llm_sampling", "llm_attempts"), "rules": ()}
#: Of ``LABEL_SETTINGS``, those a manifest of an earlier release does not record: compared only where it does (the
#: labeller's ``info()`` holds them too, which the label stage compares whenever it has stories to label).
LATER_SETTINGS = ("llm_sampling", "llm_attempts")
#: The fields of ``label.llm`` that decide what an LLM labeller writes: not its key, batching, timeouts or retries
#: (a run resumed after a server outage may change those). Where the model is served is no setting here, but the
#: labeller's ``info()`` holds it (``base_url``): a run resumed against another server is refused by
#: ``check_labeller``, as the same model name there may be other weights.
LLM_LABEL_FIELDS = ("backend", "path", "gguf_file", "dtype", "chat_template", "max_model_len", "engine_kwargs")


def label_settings(cfg: RunConfig) -> dict[str, Any]:
    """The config's ``LABEL_SETTINGS``, as the run's manifest records them (of ``label.llm``, only
    ``LLM_LABEL_FIELDS``: never the API key)."""
    out = cfg.label.model_dump(include=set(LABEL_SETTINGS) - {"llm"}, mode="json")
    out["llm"] = cfg.label.llm.model_dump(include=set(LLM_LABEL_FIELDS), mode="json") if cfg.label.llm else None
    # the sampling the labeller uses (GenParams' fields), not the block with the stories' defaults filled in, which
    # recorded {top_p: 0.9} (greedy, 256 tokens) as temperature 1 and 200 tokens: a real change passed, a null one
    # was refused
    out["llm_sampling"] = _params_json(llm_label_params(cfg))
    return out


def _params_json(params: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return json.loads(json.dumps(asdict(params)))


def _refuse(store: RunStore, labelled: int, changed: list[str], fix: str) -> None:
    what = f"these {labelled} stories were labelled" if labelled else "another job is labelling these stories"
    stop = "" if labelled else "stop that job and "
    raise ConfigError(f"{store.stage_dir(LABELS)}: {what} with other label settings ({'; '.join(changed)}); {fix}"
                      f"{stop}delete that folder to label the run again with the new ones")


def check_label_settings(store: RunStore, cfg: RunConfig, labelled: int, running: bool = False) -> None:
    """Refuse to add labels of other settings (another labeller, encoder or check) to a run's labels, or to
    call labels current that other settings made: one run's characters come from one labelling. ``running``:
    another job labels the run now (with the settings recorded), which binds as its labels on disk do."""
    old = store.read_manifest().get("label_settings")
    if not (labelled or running) or not isinstance(old, dict):
        return
    new = label_settings(cfg)
    if isinstance(old.get("llm"), dict):  # a manifest of before LLM_LABEL_FIELDS recorded the whole block
        old = {**old, "llm": {k: v for k, v in old["llm"].items() if k in LLM_LABEL_FIELDS}}
    if "llm_sampling" in old and old["llm_sampling"] is None:  # a manifest of before: no block, the labeller's own
        from harness.labelling.llm import DEFAULT_PARAMS

        old = {**old, "llm_sampling": _params_json(DEFAULT_PARAMS)}
    elif isinstance(old.get("llm_sampling"), dict) and "max_new_tokens" in old["llm_sampling"]:
        # a manifest of before recorded the block with the stories' defaults filled in, which does not say what the
        # labeller used: left to check_labeller, whose info() holds it
        old = {k: v for k, v in old.items() if k != "llm_sampling"}
    read = {"labeller"} | {k for lab in (old.get("labeller"), new["labeller"])
                           for k in LABELLER_SETTINGS.get(lab, LABEL_SETTINGS)}
    as_used = _as_used(store)
    changed = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in LABEL_SETTINGS
               if k in read and (k in old or k not in LATER_SETTINGS)
               and as_used(k, old.get(k)) != as_used(k, new.get(k))
               and not (k == "model_dir" and _same_weights(store, old.get(k), new.get(k)))]
    if changed:
        _refuse(store, labelled, changed, "restore them, or ")


def _as_used(store: RunStore) -> Any:
    """A label setting as the run used it, for ``check_label_settings``: ``precision`` unset is the one the run's
    labeller resolved and recorded (so pinning it, as the refusal of another device advises, changes nothing), and
    ``model_dir`` is the folder it names, however spelled ("m/" and "m"). Other settings as written."""
    recorded = store.read_manifest().get("labeller")
    precision = recorded.get("precision") if isinstance(recorded, dict) else None

    def as_used(key: str, value: Any) -> Any:
        if key == "precision" and value is None:
            return precision
        if key == "model_dir" and isinstance(value, str):
            return str(Path(value).expanduser().resolve())
        return value

    return as_used


def _same_weights(store: RunStore, old: Any, new: Any) -> bool:
    """Whether the encoder folder ``new`` (None: the user cache) holds the weights that labelled the run from ``old``:
    the hashes of its head and encoder against those the manifest's labeller recorded (a copy of the model on a
    node's local disk, or the cache named by its path, was refused as another model; the labeller's own check
    already ignored the path)."""
    from harness.labelling.encoder import default_model_dir

    recorded = store.read_manifest().get("labeller")
    if not isinstance(recorded, dict) or not recorded.get("head_sha256") or not recorded.get("encoder_sha256"):
        return False
    # no model there (yet): another folder
    return _weights_in(Path(new).expanduser() if isinstance(new, str) else default_model_dir()) == (
        recorded["head_sha256"], recorded["encoder_sha256"])


def _weights_in(folder: Path) -> tuple[str, str] | None:
    """The hashes of the head and of the encoder weights in an encoder folder, as its labeller's ``info()`` records
    them; None where it holds no model."""
    from harness.labelling.encoder import _weights_sha256

    try:
        return hashlib.sha256((folder / "head.pt").read_bytes()).hexdigest(), _weights_sha256(folder / "encoder")
    except OSError:
        return None


def check_labeller(store: RunStore, labeller: Any, labelled: int, running: bool = False) -> None:
    """``check_label_settings`` for what the config leaves to the machine: the labeller as resolved
    (``info()``: the encoder's precision, chosen per device when ``label.precision`` is unset, and its
    weights) against the one that labelled the run's stories, so a run labelled on a GPU and resumed on a
    CPU does not mix float16 and int8 labels."""
    old = store.read_manifest().get("labeller")
    if not (labelled or running) or not isinstance(old, dict):
        return
    new = json.loads(json.dumps(labeller.info(), default=str))
    changed = [f"{k} {old[k]!r} -> {new[k]!r}" for k in new if k in old and k not in INFO_NOT_LABELS
               and old[k] != new[k]]
    if changed:
        pin = f"set label.precision: {old['precision']} to resume, or " if "precision" in old and any(
            c.startswith("precision ") for c in changed) else ""
        _refuse(store, labelled, changed, pin)


def release_versions(labeller: str | None) -> dict[str, Any]:
    """The versions in a labeller's ``info()`` that the release fixes, read without loading the labeller: how its
    code decodes, parses or reads a story (a release that labels a story differently bumps one), and the name
    lists' version, which every labeller records as ``name_parsing``."""
    from harness.identity.names import name_lists

    out: dict[str, Any] = {"name_parsing": name_lists().version}
    if labeller == "encoder":
        from harness.labelling.decoder import DECODER_VERSION

        out["decoder_version"] = DECODER_VERSION
    elif labeller == "llm":
        from harness.labelling.llm import PARSER_VERSION

        out["parser_version"] = PARSER_VERSION
    elif labeller == "rules":
        from harness.labelling.rules import RULES_VERSION

        out["rules_version"] = RULES_VERSION
    return out


def check_release(store: RunStore, labelled: int) -> None:
    """Refuse to call current the labels an earlier release made (``release_versions``) where no story is left to
    label: ``check_labeller`` compares them only when there is, so an upgraded harness went on over a whole run's
    old labels ("skipped (current)") and refused the same run as soon as one story was left to label."""
    old = store.read_manifest().get("labeller")
    if not labelled or not isinstance(old, dict):
        return
    new = release_versions(old.get("labeller"))
    changed = [f"{k} {old[k]!r} -> {new[k]!r}" for k in new if k in old and old[k] != new[k]]
    if changed:
        _refuse(store, labelled, changed, "")


def check_weights(store: RunStore, cfg: RunConfig, labelled: int) -> None:
    """Refuse to call current the labels of other encoder weights where no story is left to label: the folder the
    config names (the user cache where it names none), trained again since (`make demo`'s first-use model replaced
    by the README's recipe), went on "skipped (current)" over the first model's labels, and refused the same run as
    soon as one story was left (``check_labeller``). A folder that holds no trained encoder now says nothing."""
    from harness.labelling.encoder import default_model_dir

    old = store.read_manifest().get("labeller")
    if (not labelled or cfg.label.labeller != "encoder" or not isinstance(old, dict)
            or not old.get("head_sha256") or not old.get("encoder_sha256")):
        return
    folder = Path(cfg.label.model_dir).expanduser() if cfg.label.model_dir else default_model_dir()
    now, then = _weights_in(folder), (old["head_sha256"], old["encoder_sha256"])
    if now is not None and now != then:
        changed = [f"{k} {a[:12]!r} -> {b[:12]!r}" for k, a, b in zip(("head_sha256", "encoder_sha256"), then, now)
                   if a != b]
        why = f"the encoder in {folder} is not the one that labelled them: {'; '.join(changed)}"
        _refuse(store, labelled, [why], "restore its weights, or ")


def run_config(run: Path) -> RunConfig:
    """The config of the run in the folder ``run`` (its manifest's), for ``harness label eval --run``, which scores
    the labeller that labelled it (``run_labeller``) so that the run's report can show the scores: options given by
    hand scored another labeller where they missed one setting (an LLM's sampling had no option at all). A
    ConfigError, before anything loads, for a folder that holds no run, a config this version cannot read, a run
    whose label stage has not run, and an encoder folder that holds no model (``make_labeller`` would train one)."""
    from harness.labelling.encoder import default_model_dir

    store = RunStore(run)
    manifest = store.read_manifest()
    if not isinstance(manifest.get("config"), dict):
        raise ConfigError(f"--run {run}: no run here ({store.manifest_path} holds no config); give the folder of a "
                          f"run that `harness run` made")
    doc = json.loads(json.dumps(manifest["config"]))
    doc["label"] = _label_block_as_used(doc.get("label"), manifest.get("label_settings"), manifest.get("labeller"))
    try:
        cfg = RunConfig.model_validate(doc)
    except ValidationError as err:  # written by another version of harness, or edited by hand
        e = err.errors()[0]
        field = ".".join(str(p) for p in e["loc"]) or "(top level)"
        raise ConfigError(f"--run {run}: its config does not read as this version's (field '{field}': {e['msg']}); "
                          f"score its labeller with the options it ran with instead") from None
    if not isinstance(manifest.get("labeller"), dict):
        raise ConfigError(f"--run {run}: its label stage has not run (no labeller recorded in {store.manifest_path}); "
                          f"run it first (`harness run`), or name the labeller with --labeller and its options")
    if cfg.label.labeller == "encoder":
        folder = Path(cfg.label.model_dir).expanduser() if cfg.label.model_dir else default_model_dir()
        if not (folder / "meta.json").is_file():
            raise ConfigError(f"--run {run}: the encoder folder of its config, {folder}, holds no trained encoder "
                              f"(meta.json missing); restore the model that labelled the run there")
    return cfg


def _label_block_as_used(block: Any, settings: Any, recorded: Any) -> dict[str, Any]:
    """A run's ``label`` block as its labels were made: the manifest's config is the one that started the run, and a
    later `harness run --set label.labeller=rules` labelled it with what ``label_settings`` records (``LABEL_SETTINGS``;
    of ``label.llm`` only ``LLM_LABEL_FIELDS``, over the config's block, which holds its key and batching, and the
    server the labeller recorded; ``llm_sampling`` as the labeller's ``GenParams``). Without how a missing encoder is
    trained (``TRAIN_SETTINGS``): the config records every default, which ``check_training_settings`` held to the
    trained model as if set."""
    label = {k: v for k, v in (block if isinstance(block, dict) else {}).items() if k not in TRAIN_SETTINGS}
    if not isinstance(settings, dict):
        return label
    label.update({k: settings[k] for k in LABEL_SETTINGS if k in settings and k not in ("llm", "llm_sampling")})
    if isinstance(settings.get("llm"), dict):
        llm = {**(label.get("llm") or {}), **settings["llm"]}
        if isinstance(recorded, dict) and recorded.get("base_url") and not llm.get("base_url"):
            llm["base_url"] = recorded["base_url"]
        label["llm"] = llm
    sampling = settings.get("llm_sampling")
    if isinstance(sampling, dict) and "max_tokens" in sampling:  # GenParams' names
        label["llm_sampling"] = {"max_new_tokens" if k == "max_tokens" else k: v for k, v in sampling.items()}
    return label


def run_labeller(run: Path, cfg: RunConfig, *, echo=print) -> Any:
    """The labeller of ``run``'s config (``run_config``), as ``make_labeller`` builds it, held to the one its manifest
    records by the rule a resumed label stage follows (every ``info()`` field but ``INFO_NOT_LABELS``): a
    ConfigError, the labeller closed, where it is another (other weights in the encoder folder, another release)."""
    from harness.labelling.evaluate import other_labeller

    labeller = make_labeller(cfg, echo=echo)
    recorded = RunStore(run).read_manifest()["labeller"]
    why = other_labeller(json.loads(json.dumps(labeller.info(), default=str)), recorded)
    if why is not None:
        labeller.close()
        raise ConfigError(f"--run {run}: the labeller its config builds now is not the one that labelled it ({why}); "
                          f"restore that one to score it")
    return labeller


def label_run(cfg: RunConfig, store: RunStore, *, shard: tuple[int, int] = (0, 1), progress: bool = True,
              echo=print) -> tuple[int, int, int, int]:
    """Label every story of this shard that has no labels yet. Returns (labelled now, stories
    labelled in all, stories with a character of a failure status in this call, failed generations of this
    shard left unlabelled until generate retries them)."""
    from harness.labelling import RoleSpec, StoryInput
    from harness.suites import get_suite

    i, n = shard
    paths = store.shard_paths(GENERATIONS)
    if not paths:
        raise DataError(f"{store.stage_dir(GENERATIONS)}: no generated stories to label; run the generate stage "
                        f"first (harness run CONFIG --stages generate)")
    hashes, stories_at = _generations(store, paths)
    done = labelled_keys(store, hashes)
    check_label_settings(store, cfg, len(done))
    prompts = get_suite(cfg.suite, cfg.wording).by_id()
    todo_at: dict[int, list[tuple[int, tuple[str, int]]]] = defaultdict(list)  # shard -> (row, key) to label
    todo, unretried, done_here, first, pids = 0, 0, 0, None, set()
    for key, (s, r, error) in stories_at.items():
        if not (n == 1 or shard_of(key[0], key[1], n) == i):
            continue
        if key in done:
            done_here += 1
        elif error is not None:
            unretried += 1
            if error and (first is None or key < first[0]):  # the first reason in the stories' order
                first = (key, error)
        else:
            todo_at[s].append((r, key))
            pids.add(key[0])
            todo += 1
    del stories_at
    first = first and first[1]
    if not todo and not done_here and unretried:  # this job's stories: another shard's labels are not its
        whose = f"every one of its {unretried} generations" if n == 1 else \
            f"every one of the {unretried} generations of shard {i}/{n}"
        raise BackendError(f"{store.stage_dir(GENERATIONS)}: {whose} failed (the first: "
                           f"{one_line(first or 'no reason given')}), so there is nothing to label; fix the cause "
                           f"and rerun, which generates them again")
    if not todo:
        check_release(store, len(done))
        check_weights(store, cfg, len(done))
        return 0, len(done), 0, unretried
    unknown = sorted(pids - set(prompts))
    if unknown:  # before the labeller loads and the claim records it (a KeyError, with a traceback, after both)
        suite = get_suite(cfg.suite, cfg.wording)
        raise DataError(f"{store.stage_dir(GENERATIONS)}: stories of prompt id(s) {', '.join(unknown[:5])}, which "
                        f"suite {suite.name} {suite.version} has not (renamed or dropped in another version?); label "
                        f"them with the suite version that generated them, or delete their generations")
    store.check_share(LABELS, shard)  # before the labeller loads (or trains): under the lock below, it counts
    labeller = make_labeller(cfg, echo=echo, progress=progress)
    failed = 0
    outage: list[str] = []  # the first status of each story whose labelling failed in an LLM backend

    def claim(manifest: dict[str, Any], alone: bool) -> None:
        # again under the run's lock, before recording them: since the check above, which the labeller's start (or
        # its training) can leave minutes behind, another job may have labelled stories or be labelling them
        labelled = len(labelled_keys(store, hashes))
        check_label_settings(store, cfg, labelled, running=not alone)
        check_labeller(store, labeller, labelled, running=not alone)
        manifest.update(labeller=labeller.info(), label_settings=label_settings(cfg))

    try:
        with store.writing(LABELS, claim, shard=shard):
            # the key and text hash of each story handed to the labeller, in order
            order: deque[tuple[str, int, str]] = deque()

            def stories() -> Iterator[StoryInput]:  # a shard's texts at a time: memory does not grow with the run
                shards = sorted(todo_at)
                texts = store.read_shards(GENERATIONS, [*KEY, "text_clean"], [paths[s] for s in shards],
                                          required=[*KEY, "text_clean"])
                for s, df in zip(shards, texts):
                    for row, key in sorted(todo_at[s]):
                        pid, idx, text = (df[c].iat[row] if row < len(df) else None for c in (*KEY, "text_clean"))
                        if (pid, idx) != key:  # not the story the first pass read there
                            raise DataError(f"{paths[s]}: changed while the label stage read it; rerun, which labels "
                                            f"what is left")
                        text = text if isinstance(text, str) else ""
                        order.append((pid, int(idx), text_sha1(text)))  # the rows say which text they were made from
                        yield StoryInput(f"{pid}#{idx}", text,
                                         tuple(RoleSpec(r.key, r.description) for r in prompts[pid].roles))

            rows: list[dict[str, Any]] = []
            desc = {(pid, r.key): r.description for pid, p in prompts.items() for r in p.roles}
            try:
                for labels in labeller.iter_label(stories(), batch_size=cfg.label.batch_size, progress=progress,
                                                  total=todo):
                    pid, idx, sha = order.popleft()
                    if down := [c.status for c in labels.characters if c.status.startswith(BACKEND_FAILURE)]:
                        outage.append(down[0])
                    # stories, as the stage's line counts them (characters: an empty story of two roles was two)
                    failed += any(c.status != "ok" for c in labels.characters)
                    for c in labels.characters:  # whole stories only: a shard never holds half of one
                        rows.append({
                            "prompt_id": pid, "sample_idx": idx, "role": c.role,
                            "role_description": desc[(pid, c.role)], "name": c.name,
                            "references": list(c.references), "status": c.status, "labeller": labeller.name,
                            STATUS: ERROR if c.status.startswith(BACKEND_FAILURE) else "ok",
                            TEXT_SHA1: sha,
                        })
                    if len(rows) >= cfg.label.shard_rows:
                        store.write_shard(LABELS, rows, f"labels-{i}of{n}", LABEL_SCHEMA)
                        rows = []  # only once written: a write that fails (a full disk) leaves them to the one below
            except BaseException:  # Ctrl-C, a kill the process sees, a labeller's crash: the stories labelled
                if rows:  # so far are kept (up to shard_rows of them, an hour of an LLM labeller), as generate's
                    with contextlib.suppress(Exception):
                        store.write_shard(LABELS, rows, f"labels-{i}of{n}", LABEL_SCHEMA)
                raise
            if rows:
                store.write_shard(LABELS, rows, f"labels-{i}of{n}", LABEL_SCHEMA)
    finally:
        labeller.close()
    if outage:  # as generate's: exit 4, so a job array's scheduler or a script sees the shard as not done, and
        # `harness run` goes no further than the stories that were labelled (they would count as unnamed)
        raise BackendError(f"{store.stage_dir(LABELS)}: the labelling of {len(outage)} of {todo} stories failed "
                           f"in the LLM backend (the first: {one_line(outage[0])}); the labels that came are on disk: "
                           f"fix the cause and rerun the same command, which labels only those stories again")
    return todo, len(labelled_keys(store, hashes)), failed, unretried
