"""Stereotype cue search (digest 000, section 7): keyword counts per group and a coding sheet.

The judgement itself is human: this finds the stories, counts them, and exports a sheet with
one row per (story, term) and empty columns for the three codebook stereotypes.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pandas as pd
import yaml


def load_cues(path: Path | None = None) -> dict:
    path = path or Path(str(resources.files("harness") / "data" / "stereotype_cues.yaml"))
    return yaml.safe_load(path.read_text())


def search(stories: pd.DataFrame, cues: dict | None = None, *, samples_per_term: int = 20) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Counts per model x group x term, and a coding sheet of up to ``samples_per_term`` stories
    per model and term. ``stories`` needs columns model, story_id, prompt_id, text."""
    cues = cues or load_cues()
    counts, sheet = [], []
    text = stories.text.fillna("")
    models = list(dict.fromkeys(stories.model))
    for group, terms in cues["groups"].items():
        for term, paper_count in terms.items():  # the paper's count is over its five models together
            hit = text.str.contains(re.escape(term), case=False, regex=True)
            found = dict(list(stories[hit].groupby("model")))
            for model in models:  # a model without the term counts 0 (it had no row where another model had one)
                g = found.get(model, stories.iloc[:0])
                counts.append({"model": model, "group": group, "term": term, "stories": len(g),
                               "paper_count_5_models": paper_count})
                for _, row in g.head(samples_per_term).iterrows():
                    sheet.append({"model": model, "group": group, "term": term, "story_id": row.story_id,
                                  "prompt_id": row.prompt_id, "text": row.text,
                                  **{code: "" for code in cues["codebook"]}, "notes": ""})
    cols = ["model", "group", "term", "story_id", "prompt_id", "text", *cues["codebook"], "notes"]
    return pd.DataFrame(counts, columns=["model", "group", "term", "stories", "paper_count_5_models"]), pd.DataFrame(sheet, columns=cols)
