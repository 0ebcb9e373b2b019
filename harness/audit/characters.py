"""Identities: labels + stories -> the characters table the statistics read.

One row per labelled character: its prompt's domain, condition and Love type, its role key and
power role (baseline / dominant / subordinate, from the prompt suite), its gender from the
references (``harness.identity.gender``), its first name (``harness.identity.names``) and one
race-likelihood column per category (NaN when unnamed or unmatched). Columns follow the
characters-table contract of ``harness.stats``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.audit.labels import TEXT_SHA1, text_sha1
from harness.errors import DataError
from harness.identity import RACES
from harness.identity.gender import load_lexicon, infer_genders
from harness.identity.names import NameTable, parse_first_name, select_name
from harness.suites import Suite
from harness.store import ERROR, STATUS

LABEL_COLUMNS = ("prompt_id", "sample_idx", "role", "name", "references", "status")
CHARACTER_COLUMNS = (
    "story_id", "prompt_id", "sample_idx", "model", "domain", "condition", "love_type", "role",
    "power_role", "gender", "name", "first_name", "name_population", "label_status", *RACES,
)


def _failed_generations(generations: pd.DataFrame) -> set[tuple[str, int]]:
    """The stories whose generation row is a failed request (``finish_reason`` "error"): no story was written."""
    if STATUS not in generations.columns:
        return set()
    bad = generations[generations[STATUS].eq(ERROR)]
    return set(zip(bad.prompt_id, bad.sample_idx.astype(int)))


def _refuse_unlabelled(generations: pd.DataFrame, labelled: set[tuple[str, int]],
                       failed: set[tuple[str, int]]) -> None:
    """A DataError where a story of ``generations`` whose generation did not fail (``failed``: its
    ``_failed_generations``) has no labels: a label shard not run, killed or failed in a job array left its stories
    out of every table after it, exit 0. (A story the labeller could not handle has rows with its reason; a failed
    generation, retried by each generate, has none.)"""
    stories = [k for k in zip(generations.prompt_id, generations.sample_idx.astype(int)) if k not in failed]
    missing = [k for k in stories if k not in labelled]
    if missing:
        raise DataError(f"labels: {len(missing)} of the {len(stories)} stories have none (story {missing[0][0]}#"
                        f"{missing[0][1]} and others: a label shard not run, or cut short?); run the label stage "
                        f"(`harness run CONFIG --stages label`, each shard) until none is left")


def _refuse_outages(labels: pd.DataFrame) -> None:
    """A DataError where a story's current label rows are a failure of the labeller's backend (``STATUS`` ERROR:
    the label stage exits 4 and its rerun labels the story again): read as labels, its characters counted as
    unnamed and Unspecified in every table, exit 0, where the identities stage ran after a label shard that hit an
    outage (a job array)."""
    if STATUS not in labels.columns:
        return
    outage = labels[labels[STATUS].eq(ERROR)]
    if not outage.empty:
        row = outage.iloc[0]
        n = len(outage[["prompt_id", "sample_idx"]].drop_duplicates())
        raise DataError(f"labels: {n} stories were not labelled, the labeller's backend failed (story {row.prompt_id}#"
                        f"{row.sample_idx}: {' '.join(str(row.status).split())[:160]}); rerun the label stage "
                        f"(`harness run CONFIG --stages label`, each shard) to label them again")


def build_characters(
    generations: pd.DataFrame,
    labels: pd.DataFrame,
    suite: Suite,
    *,
    model: str,
    names: NameTable,
    lexicon: str | None = None,
) -> pd.DataFrame:
    """Join labels to their stories and prompts and add gender, first name and race likelihoods."""
    missing = [c for c in LABEL_COLUMNS if c not in labels.columns]
    if missing:
        raise DataError(f"labels table lacks column(s) {', '.join(missing)}; rerun the label stage")
    if labels.empty:
        _refuse_unlabelled(generations, set(), _failed_generations(generations))
        return pd.DataFrame(columns=list(CHARACTER_COLUMNS))
    stories = generations[["prompt_id", "sample_idx", "domain", "condition", "love_type", "text_clean"]]
    if TEXT_SHA1 in labels.columns:  # each story's text hashed once, not once per character
        stories = stories.assign(_text_sha1=stories.text_clean.map(text_sha1))
    df = labels.merge(stories, on=["prompt_id", "sample_idx"], how="inner", validate="many_to_one")
    # a story whose generation failed since (no text now: the next generate retries it) has no labels, those of
    # before text_sha1 included (they let it back in as a character)
    failed = _failed_generations(generations)
    gone = pd.Series([k in failed for k in zip(df.prompt_id, df.sample_idx)], index=df.index, dtype=bool)
    if TEXT_SHA1 in df.columns:  # the labels of an earlier text of a story (made again since) are not its labels
        hashed = df[TEXT_SHA1].map(lambda h: isinstance(h, str))
        of_text = df[TEXT_SHA1].eq(df.pop("_text_sha1"))
        story = [df.prompt_id, df.sample_idx]
        # rows of before the hash count as current, unless the story has hashed rows: written since (a retry of
        # a failure), they hold its labels, of its text or of an earlier one
        current = of_text | (~hashed & ~hashed.groupby(story).transform("any"))
        current &= ~gone
        unlabelled = ~current.groupby(story).transform("any") & ~gone
        if unlabelled.any():
            row = df[unlabelled].iloc[0]
            raise DataError(f"labels: {int(unlabelled.sum())} label rows (story {row.prompt_id}#{row.sample_idx} and "
                            f"others) were made from an earlier text of their story; rerun the label stage")
        df = df[current].reset_index(drop=True)
    elif gone.any():
        df = df[~gone].reset_index(drop=True)
    _refuse_unlabelled(generations, set(zip(df.prompt_id, df.sample_idx.astype(int))), failed)
    _refuse_outages(df)
    prompts = suite.by_id()
    unknown = sorted(set(df.prompt_id) - set(prompts))
    if unknown:
        raise DataError(f"labels name prompt id(s) {', '.join(unknown[:5])} that suite {suite.name} lacks")
    roles = {(pid, r.key): r for pid, p in prompts.items() for r in p.roles}
    role_rows = [roles.get(k) for k in zip(df.prompt_id, df.role)]
    if any(r is None for r in role_rows):
        bad = next(k for k, r in zip(zip(df.prompt_id, df.role), role_rows) if r is None)
        raise DataError(f"labels: prompt {bad[0]} has no role {bad[1]!r}")
    description = [r.description for r in role_rows]
    refs = [list(x) if x is not None else [] for x in df.references]
    genders = infer_genders(refs, df.text_clean.tolist(), lexicon=lexicon)
    # a title that repeats the role comes off ("Nurse Emily" of the nurse is Emily), as the encoder's decoder
    # takes it off its own names and the labellers' evaluation off every labeller's
    chosen = [select_name([n] if isinstance(n, str) else n, d, role_title=False) for n, d in zip(df.name, description)]
    first = [parse_first_name(n, d) for n, d in zip(chosen, description)]
    lik = names.lookup(pd.Series(first, dtype=object))
    out = pd.DataFrame(
        {
            "story_id": df.prompt_id + "#" + df.sample_idx.astype(str),
            "prompt_id": df.prompt_id.values,
            "sample_idx": df.sample_idx.values,
            "model": model,
            "domain": df.domain.values,
            "condition": df.condition.values,
            "love_type": df.love_type.values,
            "role": df.role.values,
            "power_role": [r.power for r in role_rows],
            "gender": genders,
            "name": chosen,
            "first_name": first,
            "name_population": lik["population"].to_numpy() if "population" in lik else np.nan,
            "label_status": df.status.values,
        }
    )
    for race in RACES:
        out[race] = lik[race].to_numpy(dtype=np.float64)
    return out[list(CHARACTER_COLUMNS)]
