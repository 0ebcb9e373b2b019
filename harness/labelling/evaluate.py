"""Scoring a labeller against hand labels, as Table S8 does.

Unit: one character (subject and object scored separately). Gender comes from the labeller's
references through ``harness.identity.gender.infer_gender`` (story given, so references absent from
the story are dropped); the gold gender is the manual label (or its references' gender, below).

* gender precision = correct / characters the labeller gives a gender (Female, Male, Non-binary);
  a predicted gender where the manual label is Unspecified or Unsure counts against it.
* gender recall = correct / characters the manual label gives a gender (F, M, NB); a predicted
  Unspecified or Unsure there counts against it.
* names likewise, on first names: both the labeller's name and the gold name field go through
  ``harness.identity.names.first_name_of`` (the paper's name filters and parsing, with the role
  description as the role string; a leading title that repeats the role, "Nurse Emily" for a nurse,
  comes off first on both sides, as the encoder's decoder takes it off its own names), then compare
  case-insensitively with punctuation removed.
  precision = matching / characters with a predicted first name; recall = matching / characters
  with a gold first name.

Where a gold file gives a character's references but no gender (the published train150 format), the gold
gender is read from those references the same way, as the paper derives gender (an empty list:
Unspecified). Characters whose gold field is missing (null) are left out of that metric. ``stories_per_s`` is
the labelling throughput measured during the evaluation (model loading and the start of worker
processes excluded), of the stories with a text: an empty one (42 of the dev set's 1,000) is no story labelled,
and counted it raised the rate by 4%.

Each overall figure comes with a 95% interval from a story-level bootstrap
(``harness.stats.bootstrap``): the two characters of a story are not independent (a labeller that
exchanges two labels gets both wrong), so stories, not characters, are resampled. On the 1,000 dev
stories the gender intervals are about +-1.2 points wide: figures of two labellers a point apart
are not told apart by one run.
"""

from __future__ import annotations

import math
import time
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.errors import BackendError
from harness.labelling.base import BACKEND_FAILURE, EMPTY_STORY, INFO_NOT_LABELS, Labeller, StoryLabels
from harness.labelling.data import GENDER_LABELS, GoldStory

GENDERED = ("Female", "Male", "Non-binary")
#: ``harness label eval --json``'s keys: the issue's six, then ``failed`` (stories not fully labelled, so a labeller
#: whose replies do not parse cannot look like one that labelled everything)
JSON_KEYS = ("gender_precision", "gender_recall", "name_precision", "name_recall", "stories", "stories_per_s",
             "failed")
#: the names under which an encoder's scores are kept beside its weights (``harness label eval --details``); the
#: encoder never reads them, so a new evaluation may replace one there
EVALUATION_FILES = ("evaluation.json", "eval.json")
def other_labeller(scored: dict[str, Any] | None, labeller: dict[str, Any]) -> str | None:
    """Why an evaluation of the labeller ``scored`` (its ``info()``, as ``harness label eval --details`` records it)
    is no evaluation of ``labeller`` (a run's ``info()``): the first field both record that differs, by the rule a
    resumed label stage follows (``labels.check_labeller``: all but ``base.INFO_NOT_LABELS``, where it runs and
    where its weights lie), as "decoder_version 21, not 22"; None where none differs or ``scored`` is None (an
    evaluation written before the labeller was recorded beside it)."""
    for k, v in (scored or {}).items():
        if k not in INFO_NOT_LABELS and k in labeller and v != labeller[k]:
            return f"{k} {v}, not {labeller[k]}"
    return None


def fmt_rate(per_s: float) -> str:
    """A throughput for a table: one decimal, or two significant digits below 1/s (never "0.0").

    >>> fmt_rate(65.649), fmt_rate(3178.2), fmt_rate(0.04476)
    ('65.6', '3178.2', '0.045')
    """
    return f"{per_s:.1f}" if per_s >= 1 else f"{per_s:.2g}"


@dataclass(frozen=True)
class PR:
    """Counts behind one precision/recall pair."""

    tp_p: int = 0  # correct among predicted
    n_p: int = 0  # predicted (denominator of precision)
    tp_r: int = 0  # correct among gold
    n_r: int = 0  # gold (denominator of recall)

    @property
    def precision(self) -> float:
        """Share of predictions that match; NaN with no predictions."""
        return self.tp_p / self.n_p if self.n_p else float("nan")

    @property
    def recall(self) -> float:
        """Share of gold labels recovered; NaN with no gold labels."""
        return self.tp_r / self.n_r if self.n_r else float("nan")

    def __add__(self, o: PR) -> PR:
        return PR(self.tp_p + o.tp_p, self.n_p + o.n_p, self.tp_r + o.tp_r, self.n_r + o.n_r)

    def to_dict(self) -> dict[str, Any]:
        """Counts plus precision and recall."""
        return {**asdict(self), "precision": self.precision, "recall": self.recall}


@dataclass(frozen=True)
class CharacterScore:
    """One scored character."""

    story_id: str
    role: str
    model: str
    domain: str
    gold_gender: str | None
    pred_gender: str
    gold_first: str | None
    pred_first: str | None
    gold_name_known: bool
    condition: str = "unknown"

    @property
    def gender_missed(self) -> bool:
        """Whether this character counts against gender precision, recall or both."""
        return self.gold_gender is not None and self.pred_gender != self.gold_gender and (
            self.pred_gender in GENDERED or self.gold_gender in GENDERED)

    @property
    def name_missed(self) -> bool:
        """Whether this character counts against name precision, recall or both."""
        return self.gold_name_known and self.pred_first != self.gold_first


@dataclass(frozen=True)
class EvalReport:
    """Table S8 figures for one labeller on one gold set.

    Attributes:
        labeller: labeller name; lexicon: the gender lexicon id used.
        stories: stories scored; failed: stories the labeller returned with a status other than ok or
            an empty story (a reply that did not parse, a story cut at the model's length).
        seconds: labelling wall time; read: the stories with a text (-1: not counted, every story);
            stories_per_s: stories read / seconds.
        gender, name: overall counts; by_model, by_domain: the same per group; by_condition: per
            domain and power condition ("Love laden", "Love neutral", ...).
        confusion: gold gender -> predicted gender -> characters.
        misses: ``miss_kinds``: the characters each figure misses, by kind ("roles exchanged", ...).
        intervals: the four overall figures' 95% story-bootstrap intervals (``figure_intervals``),
            keyed like ``overall()``; empty when scored with ``n_boot=0``.
        characters: the scored characters (``difference`` compares two reports through them).
    """

    labeller: str
    lexicon: str
    stories: int
    failed: int
    seconds: float
    gender: PR
    name: PR
    by_model: dict[str, dict[str, PR]] = field(default_factory=dict)
    by_domain: dict[str, dict[str, PR]] = field(default_factory=dict)
    by_condition: dict[str, dict[str, PR]] = field(default_factory=dict)
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    misses: dict[str, dict[str, int]] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    characters: tuple[CharacterScore, ...] = field(default=(), repr=False)
    read: int = -1

    @property
    def stories_per_s(self) -> float:
        """Labelling throughput: the stories with a text, a second."""
        n = self.stories if self.read < 0 else self.read
        return n / self.seconds if self.seconds > 0 else float("nan")

    def overall(self) -> dict[str, Any]:
        """The figures of ``harness label eval --json`` (``JSON_KEYS``)."""
        return {"gender_precision": self.gender.precision, "gender_recall": self.gender.recall,
                "name_precision": self.name.precision, "name_recall": self.name.recall,
                "stories": self.stories, "stories_per_s": self.stories_per_s, "failed": self.failed}

    def difference(self, baseline: EvalReport, *, n_boot: int = 2000, seed: int = 0
                   ) -> dict[str, tuple[float, float, float]]:
        """This report's four figures minus ``baseline``'s (scored on the same stories), each with a
        95% paired story-bootstrap interval (``difference_intervals``)."""
        return difference_intervals(baseline.characters, self.characters, n_boot=n_boot, seed=seed)

    def to_dict(self) -> dict[str, Any]:
        """Everything but the per-character scores, as plain Python."""
        grp = lambda g: {k: {m: pr.to_dict() for m, pr in v.items()} for k, v in g.items()}  # noqa: E731
        return {"labeller": self.labeller, "lexicon": self.lexicon, "seconds": self.seconds,
                **self.overall(), "gender": self.gender.to_dict(), "name": self.name.to_dict(),
                "by_model": grp(self.by_model), "by_domain": grp(self.by_domain),
                "by_condition": grp(self.by_condition), "confusion": self.confusion, "misses": self.misses,
                "intervals": {k: list(v) for k, v in self.intervals.items()}}

    def summary(self) -> str:
        """Markdown tables: overall and per group, then the gender confusion matrix."""
        pct = lambda x: "n/a" if x != x else f"{100 * x:.1f}%"  # noqa: E731
        lines = [f"labeller `{self.labeller}`, lexicon `{self.lexicon}`: {self.stories} stories "
                 f"({self.failed} not fully labelled: their status says why), {fmt_rate(self.stories_per_s)} stories/s", "",
                 "| group | gender P | gender R | name P | name R | characters (gender gold) |",
                 "|---|---|---|---|---|---|",
                 f"| **all** | {pct(self.gender.precision)} | {pct(self.gender.recall)} | {pct(self.name.precision)} "
                 f"| {pct(self.name.recall)} | {self.gender.n_r} |"]
        for title, groups in (("model", self.by_model), ("domain", self.by_domain),
                              ("condition", self.by_condition)):
            for g in sorted(groups):
                d = groups[g]
                lines.append(f"| {title} {g} | {pct(d['gender'].precision)} | {pct(d['gender'].recall)} | "
                             f"{pct(d['name'].precision)} | {pct(d['name'].recall)} | {d['gender'].n_r} |")
        if self.intervals:
            iv = self.intervals
            lines += ["", "95% intervals (stories resampled, Poisson bootstrap): " + ", ".join(
                f"{label} " + ("n/a" if math.isnan(iv[k][0]) else f"{pct(iv[k][0])}-{pct(iv[k][1])}") for label, k in (
                    ("gender P", "gender_precision"), ("gender R", "gender_recall"),
                    ("name P", "name_precision"), ("name R", "name_recall")))]
        for what, kinds in self.misses.items():
            if any(kinds.values()):
                lines += ["", f"{what} misses by kind (characters): " + ", ".join(f"{k} {n}" for k, n in kinds.items())]
        cols = list(GENDER_LABELS)
        lines += ["", "gender confusion (rows: manual label, columns: labeller)", "",
                  "| manual \\ labeller | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for g in cols:
            row = self.confusion.get(g, {})
            lines.append(f"| {g} | " + " | ".join(str(row.get(c, 0)) for c in cols) + " |")
        return "\n".join(lines)


def _name_key(first: str | None) -> str | None:
    """A first name as compared: case-folded, its letters, marks and digits only. Marks are kept: a vowel sign is
    part of the name (Hindi's "राम" and "रमा", Ram and Rama, differ only in theirs; ``\\W`` dropped them).

    Case folding turns Turkish's dotted capital "İ" into "i" and a combining dot, which "i" has not: that dot goes,
    so "İrem" is "irem" (a case difference, as the issue's comparison ignores).

    >>> _name_key("Anne-Marie."), _name_key("राम") == _name_key("रमा"), _name_key("İREM") == _name_key("irem")
    ('annemarie', False, True)
    """
    if first is None:
        return None
    folded = unicodedata.normalize("NFKC", first).casefold().replace("i\u0307", "i")
    k = "".join(c for c in folded if unicodedata.category(c)[0] in "LMN")
    return k or None


def score_characters(gold: Sequence[GoldStory], labels: Sequence[StoryLabels], lexicon: Any = None
                     ) -> list[CharacterScore]:
    """One ``CharacterScore`` per gold character (same order as ``gold``)."""
    from harness.identity.gender import infer_gender
    from harness.identity.names import first_name_of

    if len(gold) != len(labels):
        raise ValueError(f"{len(gold)} gold stories but {len(labels)} label sets")
    def gender_of(refs: Sequence[str], text: str) -> str:
        return infer_gender(list(refs), text, lexicon) if refs else "Unspecified"

    out = []
    for gs, lab in zip(gold, labels):
        if lab.story_id != gs.story.story_id:
            raise ValueError(f"labels of story {lab.story_id!r} given for gold story {gs.story.story_id!r}: "
                             "labels must come in the gold stories' order")
        text = gs.story.text or ""
        for role in gs.story.roles:
            gch = gs.characters.get(role.key)
            if gch is None:
                continue
            pch = lab.character(role.key)
            pred_gender = gender_of(pch.references if pch is not None else (), text)
            # a labeller's name is one plain string ("[Emily]" is no list of names), as the audit reads it
            # a leading title that repeats the role comes off both names ("Nurse Darnell Washington" of a nurse is
            # Darnell), as the decoder takes it off its own; seed 000's role filter would make it nobody's
            pred_first = (first_name_of([pch.name], role.description, role_title=False)
                          if pch is not None and pch.name else None)
            gold_first = first_name_of(gch.name, role.description, role_title=False) if gch.name is not None else None
            gold_gender = gch.gender
            if gold_gender is None and gch.gender_from_references and gch.references is not None:
                # train150: references, no gender field (a missing list is unlabelled)
                gold_gender = gender_of(gch.references, text)
            out.append(CharacterScore(gs.story.story_id, role.key, gs.model, gs.domain, gold_gender, pred_gender,
                                      _name_key(gold_first), _name_key(pred_first), gch.name_known,
                                      gs.condition))
    return out


GENDER_MISSES = ("roles exchanged", "gender where manual has none", "no gender where manual has one",
                 "other gender")
NAME_MISSES = ("roles exchanged", "the other role's name", "name where manual has none", "no name where manual has one",
               "other name")


def miss_kinds(chars: Sequence[CharacterScore]) -> dict[str, dict[str, int]]:
    """The characters that count against a figure, by kind of miss: ``{"gender": {kind: n}, "name": {kind: n}}``.

    A miss counts against precision, recall or both; the kinds partition the misses, first match wins:

    * "roles exchanged": a story of two characters that both miss, each labelled as the manual label
      has the other (a power-laden story's dominant and subordinate character swapped: the error that
      moves characters between the counts of a subordination ratio);
    * gender: "gender where manual has none" (manual Unspecified or Unsure; precision only; often a copy
      of the other character's pronouns), "no gender where manual has one" (labelled Unspecified or
      Unsure; recall only), "other gender" (both);
    * names: "the other role's name" (the other character's manual first name), "name where manual has
      none" (precision only), "no name where manual has one" (recall only), "other name" (both).
    """
    stories: dict[str, list[CharacterScore]] = defaultdict(list)
    for c in chars:
        stories[c.story_id].append(c)
    gender = dict.fromkeys(GENDER_MISSES, 0)
    name = dict.fromkeys(NAME_MISSES, 0)
    for cs in stories.values():
        a, b = cs if len(cs) == 2 else (None, None)
        for c in cs:
            other = (b if c is a else a) if a is not None else None
            if c.gender_missed:
                gender[_gender_miss(c, other)] += 1
            if c.name_missed:
                name[_name_miss(c, other)] += 1
    return {"gender": gender, "name": name}


def _gender_miss(c: CharacterScore, other: CharacterScore | None) -> str:
    if (other is not None and other.gender_missed and c.pred_gender == other.gold_gender
            and other.pred_gender == c.gold_gender):
        return "roles exchanged"
    if c.gold_gender not in GENDERED:
        return "gender where manual has none"
    return "no gender where manual has one" if c.pred_gender not in GENDERED else "other gender"


def _name_miss(c: CharacterScore, other: CharacterScore | None) -> str:
    if other is not None and c.pred_first is not None and c.pred_first == other.gold_first:
        exchanged = other.name_missed and c.gold_first is not None and other.pred_first == c.gold_first
        return "roles exchanged" if exchanged else "the other role's name"
    if c.gold_first is None:
        return "name where manual has none"
    return "no name where manual has one" if c.pred_first is None else "other name"


def _pr(chars: Sequence[CharacterScore]) -> dict[str, PR]:
    g = [c for c in chars if c.gold_gender is not None]
    gender = PR(sum(c.pred_gender in GENDERED and c.pred_gender == c.gold_gender for c in g),
                sum(c.pred_gender in GENDERED for c in g),
                sum(c.gold_gender in GENDERED and c.pred_gender == c.gold_gender for c in g),
                sum(c.gold_gender in GENDERED for c in g))
    n = [c for c in chars if c.gold_name_known]
    name = PR(sum(c.pred_first is not None and c.pred_first == c.gold_first for c in n),
              sum(c.pred_first is not None for c in n),
              sum(c.gold_first is not None and c.pred_first == c.gold_first for c in n),
              sum(c.gold_first is not None for c in n))
    return {"gender": gender, "name": name}


def _counts(chars: Sequence[CharacterScore]):
    """(characters, 8) indicators whose column sums are ``_pr``'s counts: gender tp_p, n_p, tp_r,
    n_r, then the same for names."""
    import numpy as np

    rows = []
    for c in chars:
        g = c.gold_gender is not None
        pg, gg, hit = c.pred_gender in GENDERED, c.gold_gender in GENDERED, c.pred_gender == c.gold_gender
        n = c.gold_name_known
        pn, gn, nhit = c.pred_first is not None, c.gold_first is not None, c.pred_first == c.gold_first
        rows.append((g and pg and hit, g and pg, g and gg and hit, g and gg,
                     n and pn and nhit, n and pn, n and gn and nhit, n and gn))
    return np.asarray(rows, dtype=float).reshape(-1, 8)


def _figure_replicates(chars: Sequence[CharacterScore], stories: Sequence[str], n_boot: int, seed: int):
    """(n_boot + 1, 4) gender and name precision and recall; row 0 observed, then one row per
    story-bootstrap replicate (``harness.stats.bootstrap.cluster_sums``: Poisson weights keyed by
    seed, replicate and the story's index in ``stories``, so two labellers scored on the same
    stories get the same resamples)."""
    import numpy as np

    from harness.stats.bootstrap import cluster_sums

    index = {sid: i for i, sid in enumerate(stories)}
    story = np.asarray([index[c.story_id] for c in chars], dtype=np.int64)
    # a story of ``stories`` without characters still takes its weight: pad it with zeros
    values = np.vstack([_counts(chars), np.zeros((len(stories), 8))])
    story = np.concatenate([story, np.arange(len(stories))])
    sums = cluster_sums(values, story, n_boot=n_boot, seed=seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums[:, 0::2] / sums[:, 1::2]


def figure_intervals(chars: Sequence[CharacterScore], *, n_boot: int = 2000, seed: int = 0, alpha: float = 0.05
                     ) -> dict[str, tuple[float, float]]:
    """Percentile intervals of gender and name precision and recall, resampling stories. A figure whose resamples
    all give one value (every character right, or one story) has no interval to show: NaN, printed "n/a", where
    the percentiles gave a zero-width "100.0%-100.0%" (as ``harness.stats.bootstrap.boot_summary`` withholds it)."""
    from harness.stats.bootstrap import percentile_interval

    if not chars:
        return {}
    stories = sorted({c.story_id for c in chars})
    reps = _figure_replicates(chars, stories, n_boot, seed)[1:]
    low, high = percentile_interval(reps, alpha)
    return {k: (math.nan, math.nan) if same else (float(lo), float(hi))
            for k, lo, hi, same in zip(JSON_KEYS[:4], low, high, _unmoved(reps))}


def _unmoved(reps: Any) -> list[bool]:
    """For each column of bootstrap replicates, whether the resamples all give one value (or none): there is no
    interval to show."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        return [bool(np.nanmin(col) == np.nanmax(col)) if np.isfinite(col).any() else True for col in reps.T]


def difference_intervals(a: Sequence[CharacterScore], b: Sequence[CharacterScore], *, n_boot: int = 2000,
                         seed: int = 0, alpha: float = 0.05) -> dict[str, tuple[float, float, float]]:
    """Labeller B's figures minus labeller A's on the same gold stories: (difference, low, high),
    the interval from paired story resamples (every replicate weights a story alike for both), so
    what the two get right together cancels. An interval that holds 0 does not tell them apart."""
    from harness.stats.bootstrap import percentile_interval

    stories = sorted({c.story_id for c in a})
    if stories != sorted({c.story_id for c in b}):
        raise ValueError("difference_intervals: the two labellers were scored on different stories")
    diff = _figure_replicates(b, stories, n_boot, seed) - _figure_replicates(a, stories, n_boot, seed)
    low, high = percentile_interval(diff[1:], alpha)
    # a difference the resamples cannot move (one story, or every story alike) has no interval, as a figure's has
    # none (``figure_intervals``): its zero-width "+50.0 (+50.0 to +50.0)" read as certain; two labellers whose
    # counts agree in every story keep (0, 0, 0), but not two that differ and score alike (both 100% precision, one
    # gendering more characters), whose 0 was shown as "+0.0 (+0.0 to +0.0)"
    agree = _story_counts(a, stories) == _story_counts(b, stories)
    return {k: (float(d), math.nan, math.nan) if same and not agree[:, 2 * j:2 * j + 2].all()
            else (float(d), float(lo), float(hi))
            for j, (k, d, lo, hi, same) in enumerate(zip(JSON_KEYS[:4], diff[0], low, high, _unmoved(diff[1:])))}


def _story_counts(chars: Sequence[CharacterScore], stories: Sequence[str]):
    """(stories, 8): ``_counts`` summed over each story's characters."""
    import numpy as np

    index = {sid: i for i, sid in enumerate(stories)}
    out = np.zeros((len(stories), 8))
    np.add.at(out, np.asarray([index[c.story_id] for c in chars], dtype=np.int64), _counts(chars))
    return out


def score(gold: Sequence[GoldStory], labels: Sequence[StoryLabels], *, labeller: str = "?", lexicon: Any = None,
          seconds: float = 0.0, n_boot: int = 2000) -> EvalReport:
    """Table S8 figures from gold stories and the labels produced for them (same order), with
    ``n_boot`` story-bootstrap replicates for the overall figures' intervals (0: none)."""
    from harness.identity.gender import load_lexicon

    chars = score_characters(gold, labels, lexicon)
    overall = _pr(chars)
    groups: dict[str, dict[str, list[CharacterScore]]] = {
        g: defaultdict(list) for g in ("model", "domain", "condition")}
    confusion: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for c in chars:
        groups["model"][c.model].append(c)
        groups["domain"][c.domain].append(c)
        groups["condition"][f"{c.domain} {c.condition}"].append(c)
        if c.gold_gender is not None:
            confusion[c.gold_gender][c.pred_gender] += 1
    return EvalReport(
        labeller=labeller, lexicon=load_lexicon(lexicon).id, stories=len(gold),
        failed=sum(lab.status != "ok" and lab.status != EMPTY_STORY for lab in labels), seconds=seconds,
        read=sum(lab.status != EMPTY_STORY for lab in labels),
        gender=overall["gender"], name=overall["name"],
        by_model={k: _pr(v) for k, v in groups["model"].items()},
        by_domain={k: _pr(v) for k, v in groups["domain"].items()},
        by_condition={k: _pr(v) for k, v in groups["condition"].items()},
        confusion={g: dict(v) for g, v in confusion.items()}, misses=miss_kinds(chars),
        intervals=figure_intervals(chars, n_boot=n_boot) if n_boot else {}, characters=tuple(chars))


def evaluate(labeller: Labeller, gold: Sequence[GoldStory], *, lexicon: Any = None, batch_size: int | None = None,
             progress: bool = False) -> EvalReport:
    """Label the gold stories with ``labeller`` (timed) and score them."""
    labeller.start_workers(len(gold))  # a one-off cost, like loading the model: not in stories/s
    t0 = time.perf_counter()
    labels = labeller.label([g.story for g in gold], batch_size=batch_size, progress=progress)
    seconds = time.perf_counter() - t0
    if failed := [lab for lab in labels if lab.status.startswith(BACKEND_FAILURE)]:
        # an outage is no verdict on a story: scored, it read as the labeller's misses (recall 0 with a server down)
        raise BackendError(f"{len(failed)} of {len(labels)} stories could not be labelled: the labeller's backend "
                           f"failed (the first, {failed[0].story_id}: {' '.join(failed[0].status.split())[:200]}); "
                           f"the figures would score them as misses: fix the cause (a server down?) and rerun")
    return score(gold, labels, labeller=labeller.name, lexicon=lexicon, seconds=seconds)


__all__ = ["CharacterScore", "EVALUATION_FILES", "EvalReport", "GENDERED", "JSON_KEYS", "PR", "difference_intervals",
           "evaluate", "figure_intervals", "miss_kinds", "other_labeller", "score", "score_characters"]
