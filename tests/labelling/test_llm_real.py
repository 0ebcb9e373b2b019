"""The LLM labeller with the real transformers backend and the embedded SmolLM2-135M."""

from __future__ import annotations

import pytest

from harness.generation.base import GenParams


@pytest.mark.slow
def test_llm_labeller_with_smollm2(gold):
    from harness.labelling.llm import LLMLabeller

    lab = LLMLabeller(params=GenParams(temperature=0.0, max_tokens=48), max_attempts=1)
    try:
        stories = [g.story for g in gold[:1]]
        out = lab.label(stories, batch_size=1)
    finally:
        lab.close()
    assert lab.info()["backend"] == "transformers"
    assert [o.story_id for o in out] == [s.story_id for s in stories]
    # greedy decoding of the Fiona Walsh story: SmolLM2 replies with JSON that parses, giving the subject
    # references that are words of the story (it gives "She"; her name is beyond this 135M model)
    (o,), (s,) = out, stories
    assert [c.role for c in o.characters] == [r.key for r in s.roles]
    assert o.status == "ok", o.status
    (c,) = o.characters
    words = set(s.text.replace(".", " ").replace(",", " ").split())
    assert c.references and set(c.references) <= words
    assert c.name is None or all(t in words for t in c.name.split())
