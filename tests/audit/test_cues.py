"""The stereotype cue search (digest 000, section 7): counts per model, group and term, and the coding sheet."""

from __future__ import annotations

import pandas as pd

from harness.report.cues import search

CUES = {"groups": {"Indigenous": {"Inuit": 13, "Native American": 109}}, "codebook": ["exotic", "noble", "other"]}


def test_counts_every_model_for_every_term_and_samples_the_stories():
    """A model without a term had no row where another model had one (only a term no model used got zeros)."""
    stories = pd.DataFrame({
        "model": ["a", "a", "a", "b"],
        "story_id": ["p#0", "p#1", "p#2", "p#0"],
        "prompt_id": ["p"] * 4,
        "text": ["An Inuit elder.", "the inuit way", "A Native American chef.", None],
    })
    counts, sheet = search(stories, CUES, samples_per_term=1)
    got = {(r.model, r.term): r.stories for r in counts.itertuples()}
    assert got == {("a", "Inuit"): 2, ("b", "Inuit"): 0, ("a", "Native American"): 1, ("b", "Native American"): 0}
    assert set(counts.paper_count_5_models) == {13, 109}  # the paper's count, over its five models together
    assert sheet[["model", "term", "story_id"]].values.tolist() == [["a", "Inuit", "p#0"], ["a", "Native American", "p#2"]]
    assert list(sheet.columns[-4:]) == ["exotic", "noble", "other", "notes"] and (sheet.exotic == "").all()
