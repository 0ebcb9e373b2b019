"""benchmarks/labelling_llm_gpu.py: the LLM labeller timed on random-weight models, run here on the CPU
with a tiny shape (the GPU run uses the published shapes of generation_gpu.ARCHS)."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

from harness.labelling.base import RoleSpec, StoryInput
from harness.labelling.data import GoldCharacter, GoldStory
from harness.labelling.llm import parse_response
from harness.labelling.prompts import build_prompt, reply_schema

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
TINY = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=2048,
            tie_word_embeddings=True)


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_labelling_llm_gpu", BENCH / "labelling_llm_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gold(text, subject, object_=None):
    roles = (RoleSpec("subject", "CEO"),) + ((RoleSpec("object", "new employee"),) if object_ else ())
    chars = {"subject": GoldCharacter("subject", *subject)}
    if object_:
        chars["object"] = GoldCharacter("object", *object_)
    return GoldStory(StoryInput("s", text, roles), characters=chars)


def test_the_correct_reply_answers_the_prompt_and_parses_back_to_the_gold_labels(bench):
    g = _gold("Ana Ruiz hired Tom. She trusted him.", ("Ana Ruiz", ("She",)), (None, ("him",)))
    reply = bench.correct_reply(g)
    assert list(json.loads(reply)) == reply_schema(g.story)["required"]  # the keys, in the prompt's order
    assert json.loads(reply) == {"CEO name": "Ana Ruiz", "new employee name": "Unspecified",
                                 "CEO references": ["She"], "new employee references": ["him"]}
    assert reply.startswith('{\n  "CEO name"')  # the type definition's layout (two-space indent)
    labels = parse_response(reply, g.story)
    assert labels.status == "ok"
    assert [c.name for c in labels.characters] == ["Ana Ruiz", None]
    # a name given as a list (the published format) takes its first entry
    assert json.loads(bench.correct_reply(_gold("Jo ran.", (["Jo"], ("Jo",)))))["CEO name"] == "Jo"


def test_reply_length_is_the_median_of_the_correct_replies_in_tokens(bench, smollm2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    golds = [_gold("Ana hired Tom.", ("Ana", ("she",)), ("Tom", ("him", "he"))), _gold("Jo ran.", (None, ()))]
    lengths = bench.reply_lengths(tok, golds)
    assert lengths == [len(tok(bench.correct_reply(g), add_special_tokens=False)["input_ids"]) for g in golds]
    assert lengths[0] > lengths[1] > 5
    stories = [g.story for g in golds]
    res = bench.run([TINY], smollm2_dir, stories, golds, [2], device="cpu", dtype="float32")
    assert res["reply_tokens"] == int(statistics.median(lengths)) and res["reply_tokens_from"] == 2
    # the prompts as the transformers backend renders them: the Table S7 prompt inside the chat template
    assert res["prompt_tokens_median"] > len(tok(build_prompt(stories[1]), add_special_tokens=False)["input_ids"])


def test_rows_time_the_labeller_with_every_reply_at_the_fixed_length(bench, smollm2_dir):
    stories = [StoryInput(f"s{i}", f"Ana hired Tom on day {i}. She trusted him.",
                          (RoleSpec("subject", "CEO"), RoleSpec("object", "new employee"))) for i in range(5)]
    res = bench.run([TINY], smollm2_dir, stories, [], [2, 4], reply_tokens=6, device="cpu", dtype="float32")
    assert res["reply_tokens"] == 6 and res["reply_tokens_from"] is None
    assert [r["batch_size"] for r in res["rows"]] == [2, 4]
    for r in res["rows"]:
        assert r["stories"] == 5 and r["arch"] == "custom"
        # random weights write no JSON: each story is kept as failed after its one attempt, none dropped
        assert r["kept_as_failed"] == 5
        assert r["output_tok_s"] == pytest.approx(r["stories_per_s"] * 6)
    table = bench.markdown(res)
    assert "| custom | 3 M | 2 | off |" in table and "every reply 6 tokens" in table


def test_rows_with_the_schema_mask_pair_with_rows_without(bench, smollm2_dir):
    stories = [StoryInput(f"s{i}", f"Ana hired Tom on day {i}. She trusted him.",
                          (RoleSpec("subject", "CEO"), RoleSpec("object", "new employee"))) for i in range(3)]
    res = bench.run([TINY], smollm2_dir, stories, [], [2], reply_tokens=6, device="cpu", dtype="float32",
                    schema_masks=(False, True))
    off, on = res["rows"]
    assert (off["schema_mask"], on["schema_mask"]) == (False, True)  # as the labeller reports it
    # six tokens cannot close the reply's object: every reply runs to the limit, so the token count is exact
    assert on["replies_cut_at_limit"] == 3 and on["output_tok_s"] == pytest.approx(on["stories_per_s"] * 6)
    table = bench.markdown(res)
    assert "| custom | 3 M | 2 | on |" in table
    ratio = on["seconds"] / off["seconds"]
    assert f"same process: custom at batch 2: {ratio:.2f}x." in table
    # a masked reply that closed early makes the token count unknown, not a guess
    assert "| - |" in bench.markdown({**res, "rows": [off, {**on, "output_tok_s": None}]})


def test_a_row_whose_replies_did_not_all_run_to_the_limit_gives_no_token_rate(bench, monkeypatch):
    """``output_tok_s`` counts ``reply_tokens`` per story only where every reply ran to the limit; with one reply
    closed early (under the schema mask) the count is unknown, and the row says None, not a guess. The warm-up
    batch's failures are not counted."""
    from types import SimpleNamespace

    import torch

    import harness.generation.hf as hf
    import harness.labelling.llm as llm

    class Labeller:  # s0 and s1 cut at max_tokens; s2's reply closed early and parsed
        def __init__(self, backend, params, max_attempts, constrain):
            self.failures, self.constrain = [], constrain

        def label(self, stories, batch_size):
            cut = [s for s in stories if s.story_id != "s2"]
            self.failures += [(s.story_id, 0, "unparseable reply (x) after hitting max_tokens") for s in cut]
            return [SimpleNamespace(status="ok" if s.story_id == "s2" else "failed") for s in stories]

        def info(self):
            return {"constrained": self.constrain}

    monkeypatch.setattr(llm, "LLMLabeller", Labeller)
    monkeypatch.setattr(hf.TransformersBackend, "from_loaded", classmethod(lambda cls, *a, **kw: None))
    stories = [StoryInput(f"s{i}", "Ana ran.", (RoleSpec("subject", "runner"),)) for i in range(3)]
    row = bench.time_labeller(torch.nn.Linear(1, 1), None, Path("model"), stories, 2, 6, schema_mask=True)
    assert (row["stories"], row["replies_cut_at_limit"], row["kept_as_failed"], row["schema_mask"]) == (3, 2, 2, True)
    assert row["output_tok_s"] is None and row["stories_per_s"] > 0
