"""The authors' refusal filter, applied without dropping rows, and top-up planning.

The released code (``Data/merge_texts.R``) drops a text when it contains, case-sensitively,
any of six substrings; the 50 dropped texts of 52,000 were replaced by new generations from
the same prompt until no refusal remained. Here a text is *flagged* (``refusal`` column, and
the pattern that matched), never deleted: the refusal counts by race, gender and format are a
result in their own right (A.4). ``select_usable`` then takes the first ``target`` usable
samples of each prompt in sample order, and ``plan_topup`` says how many more samples each
short prompt needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.errors import ConfigError, DataError

#: The six case-sensitive substrings of the authors' ``merge_texts.R``.
AUTHOR_PATTERNS: tuple[str, ...] = (
    "chatbot",
    "language model",
    "As a computer program",
    "I cannot",
    "I can't generate",
    "won't be able to generate",
)

#: A broader, case-insensitive lexicon for open-weight chat models (beyond the paper).
OPEN_MODEL_PATTERNS: tuple[str, ...] = AUTHOR_PATTERNS + (
    "as an ai",
    "i'm sorry, but",
    "i am sorry, but",
    "i can't write",
    "i cannot write",
    "i won't write",
    "i'm not able to",
    "i am not able to",
    "i'm unable to",
    "i am unable to",
    "not appropriate to",
    "perpetuate stereotypes",
)


@dataclass(frozen=True)
class RefusalFilter:
    """Substring refusal detector.

    ``patterns``: substrings; ``case_sensitive``: the authors' filter is; ``name`` is recorded
    in the outputs. Empty texts and generation errors are never usable (flagged separately).
    """

    name: str = "authors"
    patterns: tuple[str, ...] = AUTHOR_PATTERNS
    case_sensitive: bool = True

    def __post_init__(self) -> None:
        if not self.patterns or not all(isinstance(p, str) and p for p in self.patterns):
            raise ConfigError(f"refusal filter {self.name!r}: patterns must be non-empty strings")

    def match(self, text: str | None) -> str | None:
        """The first pattern found in ``text`` (None when none is)."""
        if text is None:
            return None
        hay = text if self.case_sensitive else text.lower()
        for p in self.patterns:
            if (p if self.case_sensitive else p.lower()) in hay:
                return p
        return None

    def __call__(self, text: str | None) -> bool:
        return self.match(text) is not None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "patterns": list(self.patterns), "case_sensitive": self.case_sensitive}


FILTERS = {
    "authors": RefusalFilter(),
    "open-models": RefusalFilter("open-models", OPEN_MODEL_PATTERNS, case_sensitive=False),
}


def get_filter(spec: str | RefusalFilter) -> RefusalFilter:
    """A filter by name ("authors", "open-models") or as given."""
    if isinstance(spec, RefusalFilter):
        return spec
    try:
        return FILTERS[spec]
    except KeyError:
        raise ConfigError(f"refusal filter must be one of {', '.join(FILTERS)}, got {spec!r}") from None


def flag_refusals(df: pd.DataFrame, flt: str | RefusalFilter = "authors", *, text_col: str = "text_clean") -> pd.DataFrame:
    """A copy of ``df`` with ``refusal`` (bool), ``refusal_pattern``, ``failed`` (empty text or
    generation error) and ``usable`` (neither) columns. No row is removed."""
    flt = get_filter(flt)
    if text_col not in df.columns:
        raise DataError(f"generations: column {text_col!r} missing; is this a harness run directory?")
    out = df.copy()
    texts = out[text_col].astype(object).where(out[text_col].notna(), None)
    out["refusal_pattern"] = [flt.match(t) for t in texts]
    out["refusal"] = out["refusal_pattern"].notna()
    failed = texts.isna() | (texts.fillna("").str.strip() == "")
    if "finish_reason" in out.columns:
        failed |= out["finish_reason"].eq("error")
    out["failed"] = failed.to_numpy()
    out["usable"] = ~(out["refusal"] | out["failed"])
    out["refusal_filter"] = flt.name
    return out


def select_usable(flagged: pd.DataFrame, target: int | None) -> pd.Series:
    """Boolean mask: the first ``target`` usable samples of each prompt by ``sample_idx``
    (every usable sample when ``target`` is None). Deterministic, like replacing each
    refusal with the next generation of the same prompt."""
    if target is not None and target < 2:
        raise ConfigError(f"target must be at least 2 texts per prompt (pairs need two), got {target}")
    order = flagged.sort_values(["prompt_id", "sample_idx"])
    rank = order["usable"].astype(int).groupby(order["prompt_id"]).cumsum()
    keep = order["usable"] & ((rank <= target) if target is not None else True)
    return keep.reindex(flagged.index)


def refusal_table(flagged: pd.DataFrame, by: tuple[str, ...] = ("race", "gender", "format")) -> pd.DataFrame:
    """Counts per cell: generated, refusals, failed, usable, refusal rate (a tidy table)."""
    by = [b for b in by if b in flagged.columns]
    g = flagged.groupby(by, sort=False, observed=True)
    t = g.agg(generated=("usable", "size"), refusals=("refusal", "sum"), failed=("failed", "sum"), usable=("usable", "sum")).reset_index()
    t["refusal_rate"] = t["refusals"] / t["generated"]
    return t


@dataclass(frozen=True)
class TopUpPlan:
    """What a top-up round must generate.

    ``need[prompt_id]``: usable texts still missing; ``samples_per_prompt[prompt_id]``: the new
    planned sample count of that prompt (its current count plus what is missing), so that
    the run store generates exactly the missing keys. ``groups`` maps each distinct new count
    to its prompt ids (one ``generate_run`` call per group).
    """

    target: int
    need: dict[str, int]
    samples_per_prompt: dict[str, int]
    groups: dict[int, list[str]] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return not self.need

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "need": dict(self.need), "samples_per_prompt": dict(self.samples_per_prompt),
                "groups": {str(k): v for k, v in self.groups.items()}}


def plan_topup(flagged: pd.DataFrame, target: int, prompt_ids: list[str] | None = None) -> TopUpPlan:
    """Which prompts have fewer than ``target`` usable texts, and how far to extend each.

    ``prompt_ids``: every prompt of the run (prompts with no row at all count as empty).
    """
    if target < 1:
        raise ConfigError(f"target must be a positive number of texts per prompt, got {target}")
    usable = flagged.groupby("prompt_id")["usable"].sum()
    planned = flagged.groupby("prompt_id")["sample_idx"].max() + 1
    ids = list(prompt_ids) if prompt_ids is not None else list(usable.index)
    need, new_n = {}, {}
    for pid in ids:
        have = int(usable.get(pid, 0))
        if have < target:
            need[pid] = target - have
            new_n[pid] = int(planned.get(pid, 0)) + target - have
    groups: dict[int, list[str]] = {}
    for pid, n in new_n.items():
        groups.setdefault(n, []).append(pid)
    return TopUpPlan(target, need, new_n, groups)
