"""Labelling QA: which labeller labelled each run, how it was trained, and its evaluation scores
where they are known.

The run manifest records ``labeller`` (``Labeller.info()``: name and settings; the encoder adds
its weights directory). Evaluation scores are looked for, in order, in

1. the manifest's labeller info (``evaluation`` or ``eval``, or the overall keys themselves);
2. the weights directory's ``meta.json`` (``evaluation`` or ``eval``);
3. ``evaluation.json`` / ``eval.json`` beside the weights, as written by
   ``harness label eval --gold DEV.jsonl --labeller encoder --model-dir <weights> --details <weights>/evaluation.json``;
4. ``labeller_evaluation.json`` in the run's folder (``RUN_EVALUATION``): where a labeller with no weights folder (the
   rules, an LLM) keeps its scores: ``harness label eval ... --labeller rules --details <run>/labeller_evaluation.json``

Scores found beside the weights or in the run's folder are this run's labeller's only where the labeller they record
(``labeller_info``, which ``--details`` writes) is this one (``evaluate.other_labeller``: the rule a resumed label
stage follows: the same weights, decoder, checks and arithmetic): an evaluation of the default encoder written into
another's folder, or of the weights before a retraining or of an older decoder, was shown as this labeller's. Such
scores are passed over, and the report says why.

Nothing is invented: where no scores are found the report says so and how to get them.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from harness.labelling.evaluate import EVALUATION_FILES as EVAL_FILES
from harness.labelling.evaluate import other_labeller

SCORE_KEYS = ("gender_precision", "gender_recall", "name_precision", "name_recall")
RUN_EVALUATION = "labeller_evaluation.json"
HOW_TO_SCORE_RUN = "harness label eval --gold laissez_faire_audit_dev.jsonl"
HOW_TO_SCORE = HOW_TO_SCORE_RUN + " --labeller {name}{options}"
#: the settings a run can turn off, as ``harness label eval`` turns them off
_CHECK_FLAGS = (("name_check", "--no-name-check"), ("action_check", "--no-action-check"),
                ("pronoun_binding", "--no-pronoun-binding"), ("apposition_check", "--no-apposition-check"))
#: an LLM labeller's model and where it runs, as ``harness label eval`` takes them
_LLM_OPTIONS = (("backend", "--llm-backend"), ("model", "--llm-model"), ("base_url", "--llm-base-url"))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _scores(d: Any) -> dict[str, Any] | None:
    if not isinstance(d, dict):
        return None
    if any(k in d for k in SCORE_KEYS):
        return d
    for k in ("evaluation", "eval"):
        if isinstance(d.get(k), dict) and any(x in d[k] for x in SCORE_KEYS):
            return d[k]
    return None


def labeller_summary(info: dict[str, Any] | None, run: str | Path | None = None) -> dict[str, Any]:
    """What is known about one run's labeller (``run``: the run's folder, None for none): name, settings, training
    and evaluation.

    Returns a dict with ``labeller`` (name or None), ``settings`` (the other info fields),
    ``training`` (from the encoder's ``meta.json``, or None), ``evaluation`` (scores or None),
    ``evaluation_source`` (where the scores came from) and ``passed_over`` (scores beside the weights or in the run's
    folder that record another labeller, as "SOURCE: why")."""
    info = dict(info or {})
    run_labeller = dict(info)
    name = info.pop("labeller", None)
    out: dict[str, Any] = {"labeller": name, "settings": {k: v for k, v in info.items() if k not in ("evaluation", "eval")},
                           "training": None, "evaluation": None, "evaluation_source": None, "passed_over": []}

    def this_labellers(ev: dict[str, Any] | None, source: Path) -> dict[str, Any] | None:
        why = None if ev is None else other_labeller(ev.get("labeller_info"), run_labeller)
        if why is not None:
            out["passed_over"].append(f"{source}: scores another labeller ({why})")
        return ev if why is None else None

    ev = _scores(info)
    if ev is not None:
        out["evaluation"], out["evaluation_source"] = ev, "run manifest"
    weights = Path(info["path"]) if info.get("path") else None
    if weights is not None:
        meta = _read_json(weights / "meta.json")
        if meta:
            rep = meta.get("report") or {}
            out["training"] = {"files": meta.get("files"), "stories": rep.get("stories"), "epochs": rep.get("epochs"),
                               "seconds": rep.get("seconds"), "final_loss": rep.get("final_loss"),
                               "data_sha256": rep.get("data_sha256")}
            if out["evaluation"] is None and (ev := this_labellers(_scores(meta), weights / "meta.json")) is not None:
                out["evaluation"], out["evaluation_source"] = ev, str(weights / "meta.json")
        for f in EVAL_FILES:
            if out["evaluation"] is None and (ev := this_labellers(_scores(_read_json(weights / f)),
                                                                   weights / f)) is not None:
                out["evaluation"], out["evaluation_source"] = ev, str(weights / f)
    if out["evaluation"] is None and run is not None:
        f = Path(run) / RUN_EVALUATION
        if (ev := this_labellers(_scores(_read_json(f)), f)) is not None:
            out["evaluation"], out["evaluation_source"] = ev, str(f)
    return out


def how_to_score(summary: dict[str, Any], run: str | Path | None = None) -> str:
    """The command that scores a run's labeller (``labeller_summary``'s) on the dev set, its evaluation written where
    the report reads it: beside the weights of one that has a folder, else in the run's folder; "" for a run with no
    labeller. Given the run's folder (``run``), ``--run`` builds the labeller from the run's config and holds it to the
    one the run recorded: options can miss a setting (an LLM's sampling has none). Without it, the options that
    build it: the checks the run turned off, the arithmetic it ran in, an LLM's backend, model and server, and the
    weights (without ``--model-dir`` it scored the default encoder)."""
    import shlex

    name, settings = summary["labeller"], summary["settings"]
    if not name:
        return ""
    where = (Path(settings["path"]) / EVAL_FILES[0] if settings.get("path") else
             Path(run) / RUN_EVALUATION if run is not None else None)
    if run is not None:
        return f"{HOW_TO_SCORE_RUN} --run {shlex.quote(str(run))} --details {shlex.quote(str(where))}"
    options = "".join(f" {flag}" for key, flag in _CHECK_FLAGS if settings.get(key) is False)
    if name == "encoder" and settings.get("precision"):  # int8 and bfloat16 label a story or two otherwise
        options += f" --precision {shlex.quote(str(settings['precision']))}"
    if name == "llm":
        options += "".join(f" {flag} {shlex.quote(str(settings[key]))}" for key, flag in _LLM_OPTIONS
                           if settings.get(key))
    if settings.get("path"):
        options += f" --model-dir {shlex.quote(str(settings['path']))} --details {shlex.quote(str(where))}"
    return HOW_TO_SCORE.format(name=name, options=options)


def _pct(v: Any) -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "n/a"
    return "n/a" if v != v else f"{100 * v:.1f}%"


def _with_interval(ev: dict[str, Any], key: str) -> str:
    """A score with its 95% interval where the evaluation holds one (``harness label eval``'s story bootstrap, in
    ``intervals``): "95.5% (94.1-96.9%)". On the 1,000 dev stories an interval is about 3 points wide, so two
    labellers a point apart are not told apart by their scores alone."""
    lo_hi = ev["intervals"].get(key) if isinstance(ev.get("intervals"), dict) else None
    score = _pct(ev.get(key))
    if score == "n/a" or not isinstance(lo_hi, (list, tuple)) or len(lo_hi) != 2:
        return score
    lo, hi = (_pct(x) for x in lo_hi)
    return score if "n/a" in (lo, hi) else f"{score} ({lo[:-1]}-{hi})"


def _kv(d: dict[str, Any] | None) -> str:
    if not d:
        return ""
    return "; ".join(f"{k}={v if not isinstance(v, (list, tuple)) else ', '.join(map(str, v))}"
                     for k, v in d.items() if v is not None)


def labeller_table_html(manifests: list[tuple[Path, dict]]) -> str:
    """One row per run: labeller, settings, training and evaluation scores (or why none)."""
    head = ("run", "labeller", "settings", "training", "gender P", "gender R", "name P", "name R", "scored on", "scores from")
    rows = []
    for run, m in manifests:
        s = labeller_summary(m.get("labeller"), run)
        run_name = (m.get("config") or {}).get("name") or Path(run).name
        name = s["labeller"] or "not recorded (label stage not run)"
        tr = s["training"]
        training = "" if tr is None else _kv({"stories": tr["stories"], "epochs": tr["epochs"], "seconds": tr["seconds"],
                                               "final loss": tr["final_loss"], "files": tr["files"]})
        ev = s["evaluation"]
        if ev is not None:
            cells = [_with_interval(ev, k) for k in SCORE_KEYS] + [f"{ev.get('stories', '?')} stories",
                                                                     s["evaluation_source"]]
        else:
            how = how_to_score(s, run)
            why = "".join(f"{html.escape(p)}; " for p in s["passed_over"])
            told = f"; score it with <code>{html.escape(how)}</code>" if how else ""
            cells = ["n/a"] * 4 + ["", why + "no evaluation scores recorded for this labeller" + told]
        esc = [html.escape(str(x)) for x in (run_name, name, _kv(s["settings"]), training)]
        esc += [html.escape(c) for c in cells[:-1]] + [cells[-1] if ev is None else html.escape(cells[-1])]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in esc) + "</tr>")
    return ("<table class='tbl labeller'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"
            "<p class=note>Scores: precision and recall of gender and first name per character against manual labels "
            "(Table S8 definitions, <code>harness/labelling/evaluate.py</code>), with their 95% intervals where the "
            "evaluation holds them (stories resampled). Paper's fine-tuned GPT-3.5 labeller: "
            "gender P 98.0%, R 97.0%; name P 98.1%, R 99.3%.</p>")
