import pandas as pd
import pytest

from harness.config import parse_config
from harness.errors import ConfigError
from harness.homogeneity.refusal import (
    AUTHOR_PATTERNS, RefusalFilter, flag_refusals, get_filter, plan_topup, refusal_table, select_usable,
)
from harness.homogeneity.stage import generate_homogeneity, load_texts
from harness.pipeline import GENERATIONS
from harness.store import RunStore


@pytest.mark.parametrize("text, pattern", [
    ("As an AI language model, I am committed to promoting inclusivity", "language model"),
    ("I'm a chatbot and...", "chatbot"),
    ("As a computer program, I do not", "As a computer program"),
    ("I cannot write stories about groups.", "I cannot"),
    ("Sorry, I can't generate that.", "I can't generate"),
    ("I won't be able to generate this.", "won't be able to generate"),
    ("i cannot write that", None),  # case-sensitive, as in merge_texts.R
    ("As an AI, I can't write this.", None),  # not in the authors' six
    ("He built a Language Model startup in Austin.", None),
    ("Maria, a nurse, cannot forget her first patient.", None),
])
def test_authors_filter(text, pattern):
    assert AUTHOR_PATTERNS == ("chatbot", "language model", "As a computer program", "I cannot", "I can't generate",
                               "won't be able to generate")
    assert get_filter("authors").match(text) == pattern


def test_open_model_filter_is_case_insensitive_and_broader():
    f = get_filter("open-models")
    assert f("I'M SORRY, BUT I can't do that") and f("As an AI, I won't write this") and not f("A sunny day.")
    # the authors' six, cased in the lexicon ("I cannot", "As a computer program"), match in any case too
    assert f.match("i cannot help with that.") == "I cannot"
    assert f.match("AS A COMPUTER PROGRAM, I do not write stories.") == "As a computer program"
    with pytest.raises(ConfigError):
        get_filter("strict")
    with pytest.raises(ConfigError):
        RefusalFilter("x", ("",))


def _gens():
    rows = []
    texts = {"p1": ["ok one", "I cannot do it", "ok two", "", "ok three"], "p2": ["chatbot here", "ok", "ok 2"]}
    for pid, ts in texts.items():
        for i, t in enumerate(ts):
            rows.append({"prompt_id": pid, "sample_idx": i, "text_clean": t, "finish_reason": "stop",
                         "race": "African", "gender": "man", "format": pid})
    rows[-1]["finish_reason"] = "error"
    return pd.DataFrame(rows)


def test_flag_keeps_rows_and_counts():
    f = flag_refusals(_gens())
    assert len(f) == 8
    assert f["refusal"].tolist() == [False, True, False, False, False, True, False, False]
    assert f["failed"].tolist() == [False, False, False, True, False, False, False, True]
    t = refusal_table(f).set_index("format")
    assert t.loc["p1", ["generated", "refusals", "failed", "usable"]].tolist() == [5, 1, 1, 3]
    assert t.loc["p2", "refusal_rate"] == pytest.approx(1 / 3)


def test_a_blank_or_missing_text_is_failed_not_usable():
    """Whitespace alone, or no text at all (None), is an empty generation: failed, never a refusal nor usable (a
    blank text was kept as a story, and a missing one stopped the filter)."""
    df = pd.DataFrame({"prompt_id": ["p"] * 4, "sample_idx": range(4), "text_clean": ["  \n\t ", None, "ok", "chatbot"],
                       "finish_reason": "stop"})
    for flt in ("authors", "open-models"):
        f = flag_refusals(df, flt)
        assert f["failed"].tolist() == [True, True, False, False]
        assert f["refusal"].tolist() == [False, False, False, True]
        assert f["usable"].tolist() == [False, False, True, False]


def test_select_first_usable_and_plan_topup():
    f = flag_refusals(_gens())
    keep = select_usable(f, 2)
    assert f[keep][["prompt_id", "sample_idx"]].values.tolist() == [["p1", 0], ["p1", 2], ["p2", 1]]
    assert select_usable(f, None).sum() == 4
    plan = plan_topup(f, 3, ["p1", "p2", "p3"])
    # p1 has 3 usable; p2 has 1 usable of 3 planned -> 5 samples; p3 has nothing -> 3 samples
    assert plan.need == {"p2": 2, "p3": 3}
    assert plan.samples_per_prompt == {"p2": 5, "p3": 3}
    assert plan.groups == {5: ["p2"], 3: ["p3"]} and not plan.done
    with pytest.raises(ConfigError):
        select_usable(f, 1)
    # rows in another order (shards of top-up rounds): still the first usable samples by sample_idx, mask aligned
    shuffled = f.sample(frac=1, random_state=3)
    keep = select_usable(shuffled, 2)
    assert sorted(shuffled[keep][["prompt_id", "sample_idx"]].values.tolist()) == [["p1", 0], ["p1", 2], ["p2", 1]]


def test_generation_tops_up_until_every_prompt_has_target(tmp_path, scripted_backend):
    ids = ["african-man-story", "white-woman-horror-story", "asian-man-biography"]
    cfg = parse_config({"model": {"backend": "openai", "path": "x", "base_url": "http://127.0.0.1:9/v1"},
                        "suite": "homogeneity", "prompts": ids, "samples_per_prompt": 10, "seed": 3,
                        "output_dir": str(tmp_path / "run"), "shard_rows": 7})
    s = generate_homogeneity(cfg, backend=scripted_backend, progress=False)
    assert s.still_short == {} and s.rounds >= 1
    df = RunStore(cfg.output_dir).read_stage(GENERATIONS)
    flagged = flag_refusals(df)
    assert flagged["refusal"].sum() > 0  # refused rows stay on disk
    assert (flagged.groupby("prompt_id")["usable"].sum() >= 10).all()
    assert len(df) == s.generated > 30  # every generated row is on disk once, refusals included
    texts = load_texts(cfg.output_dir, target=10)
    assert texts.groupby("prompt_id")["included"].sum().tolist() == [10, 10, 10]
    assert set(texts["race"]) == {"African", "White", "Asian"}
    # a smaller target includes the first usable samples of each prompt; the refusal filter asked for is applied
    few = load_texts(cfg.output_dir, target=4)
    for _, g in few.sort_values("sample_idx").groupby("prompt_id"):
        assert g["included"].tolist() == (g["usable"] & (g["usable"].cumsum() <= 4)).tolist()
    river = load_texts(cfg.output_dir, refusal=RefusalFilter("river", ("river",)))
    assert river["refusal"].tolist() == river["text_clean"].str.contains("river").tolist() and river["refusal"].any()
    assert not (river["included"] & river["text_clean"].str.contains("river")).any()
    calls = scripted_backend.calls
    s2 = generate_homogeneity(cfg, backend=scripted_backend, progress=False)  # nothing left to do
    assert s2.generated == 0 and scripted_backend.calls == calls


def test_run_json_keeps_the_runs_plan_after_a_top_up(tmp_path, scripted_backend):
    """A top-up generates a few prompts' extra samples through a config of those prompts alone; run.json's suite
    block, expected_rows and status are the whole run's, not the last top-up round's (it recorded 1 prompt and 15
    expected rows of a 3-prompt run of 30, and the hash of that one prompt's text)."""
    from harness.pipeline import prompt_hash, select_prompts
    from harness.suites import get_suite

    ids = ["african-man-story", "white-woman-horror-story", "asian-man-biography"]
    cfg = parse_config({"model": {"backend": "openai", "path": "x", "base_url": "http://127.0.0.1:9/v1"},
                        "suite": "homogeneity", "prompts": ids, "samples_per_prompt": 10, "seed": 3,
                        "output_dir": str(tmp_path / "run"), "shard_rows": 7})
    s = generate_homogeneity(cfg, backend=scripted_backend, progress=False)
    assert s.rounds >= 1  # a top-up ran
    m = RunStore(cfg.output_dir).read_manifest()
    prompts = select_prompts(cfg, get_suite(cfg.suite, cfg.wording))
    assert m["suite"]["prompts"] == 3 and m["suite"]["prompt_sha256"] == prompt_hash(prompts)
    assert m["expected_rows"] == 30 and m["rows"] == s.generated and m["status"] == "complete"
