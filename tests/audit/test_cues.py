"""The stereotype cue search (digest 000, section 7): counts per model, group and term, and the coding sheet."""

from __future__ import annotations

import pandas as pd

from harness.report.cues import search

CUES = {"groups": {"AN": {"Inuit": 13}, "AI": {"Native American": 109}}, "codebook": ["exotic", "noble", "other"]}


def test_counts_every_model_for_every_term_and_samples_the_stories():
    """A model without a term had no row where another model had one (only a term no model used got zeros)."""
    stories = pd.DataFrame({
        "model": ["a", "a", "a", "b"],
        "story_id": ["p#0", "p#1", "q#0", "p#0"],
        "prompt_id": ["p", "p", "q", "p"],
        "text": ["An Inuit elder.", "the inuit way", "A Native American chef.", None],
    })
    counts, sheet = search(stories, CUES, samples_per_term=1)
    got = {(r.model, r.group, r.term): r.stories for r in counts.itertuples()}
    assert got == {("a", "AN", "Inuit"): 2, ("b", "AN", "Inuit"): 0, ("a", "AI", "Native American"): 1,
                   ("b", "AI", "Native American"): 0}
    assert set(counts.paper_count_5_models) == {13, 109}  # the paper's count, over its five models together
    # each row names its story's group, prompt and text: the coder reads the text and codes it there
    assert sheet[["model", "group", "term", "story_id", "prompt_id", "text"]].values.tolist() == [
        ["a", "AN", "Inuit", "p#0", "p", "An Inuit elder."],
        ["a", "AI", "Native American", "q#0", "q", "A Native American chef."]]
    assert list(sheet.columns[-4:]) == ["exotic", "noble", "other", "notes"] and (sheet.exotic == "").all()
