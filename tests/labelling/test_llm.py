"""The LLM labeller's prompt building, JSON parsing, repair and retries, with a scripted backend."""

from __future__ import annotations

import json
import re

import pytest

from harness.errors import BackendError
from harness.identity.names import name_lists
from harness.generation.base import Backend, BackendInfo, GenParams, GenResult
from harness.labelling.base import RoleSpec, StoryInput
from harness.labelling.llm import LLMLabeller, ParseError, parse_json_object, parse_response
from harness.labelling.prompts import build_prompt

STORY = StoryInput("s1", "Dr. Ana Ruiz met Tom, a needy patient. She helped him, and his cough eased.",
                   (RoleSpec("subject", "doctor"), RoleSpec("object", "needy patient")))
GOOD = json.dumps({"doctor name": "Dr. Ana Ruiz", "needy patient name": "Tom",
                   "doctor references": ["She"], "needy patient references": ["him", "his"]})


class ScriptedBackend(Backend):
    """Replies from a script: ``script[story prompt]`` is a list of replies, one per attempt."""

    name = "scripted"

    def __init__(self, script):
        self.script = script
        self.calls = []

    def generate(self, requests, params, *, progress=False):
        self.calls.append([(r.request_id, r.seed, params.temperature) for r in requests])
        for r in reversed(requests):  # any order is allowed; ids carry the match
            replies = self.script[r.prompt]
            attempt = int(r.request_id.split("#")[1])
            text = replies[min(attempt, len(replies) - 1)]
            if text is None:
                yield GenResult(r.request_id, "", "error", error="engine died")
            else:
                yield GenResult(r.request_id, text, "stop")

    def info(self):
        return BackendInfo("scripted", "canned")


class CannedBackend(Backend):
    """Replies from ``reply(call, request)`` (the call's number from 0); ``calls`` records each call's max_tokens."""

    name = "canned"

    def __init__(self, reply):
        self.reply = reply
        self.calls = []

    def generate(self, requests, params, *, progress=False):
        self.calls.append(params.max_tokens)
        call = len(self.calls) - 1
        for r in requests:
            yield self.reply(call, r)

    def info(self):
        return BackendInfo("canned", "canned")


@pytest.mark.parametrize("reply", [
    GOOD,
    "Sure! Here is the JSON:\n```json\n" + GOOD + "\n```\nHope it helps.",
    GOOD.replace('"', "'"),  # Python-style quotes
    GOOD[:-1] + ",}",  # trailing comma
    GOOD.replace('"Tom"', "\u201cTom\u201d"),  # smart quotes
    GOOD[:-3],  # truncated: closing '"]}' missing
    "{\n" + GOOD,  # a stray "{" that never closes, before the object
    "Use the format {name: ...\n" + GOOD,
])
def test_parse_repairs(reply):
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz"
    assert lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom"
    assert lab.character("object").references == ("him", "his")


def test_parse_post_processing():
    reply = json.dumps({"doctor name": ["Unspecified", "Dr. Ana Ruiz"], "needy patient name": "Jack",
                        "doctor references": "she, the doctor, Mrs.", "needy patient references": ["him", "HIM", "he"]})
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz"  # "Unspecified" dropped when a name exists
    assert lab.character("subject").references == ("she",)  # "the doctor"/"Mrs." are not in the story
    assert lab.character("object").name is None  # "Jack" is not in the story
    assert lab.character("object").references == ("him",)  # "he" absent; duplicates merged


def test_parse_key_fallback_by_order():
    reply = json.dumps({"Doctor Name": "Dr. Ana Ruiz", "Patient name": "Tom", "Doctor references": ["She"],
                        "Patient references": ["him"]})
    lab = parse_response(reply, STORY)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him",)
    # by key order only where the counts agree: a third reworded character ("nurse", written first) took the doctor's
    # place and the doctor the patient's; such a reply is missing the roles' keys, and sent again
    three = json.dumps({"nurse name": "Tom", "physician name": "Dr. Ana Ruiz", "sick man name": "Tom",
                        "nurse references": ["him"], "physician references": ["She"], "sick man references": ["his"]})
    with pytest.raises(ParseError, match="missing key"):
        parse_response(three, STORY)


@pytest.mark.parametrize("reply, msg", [("I cannot help with that.", "no JSON object"),
                                        ("{not json at all", "no parseable"),
                                        ('{"doctor name": "Ana"}', "missing key")])
def test_parse_errors(reply, msg):
    with pytest.raises(ParseError, match=msg):
        parse_response(reply, STORY)


def test_parse_json_object_prefers_fenced_block():
    assert parse_json_object('{"a": 1} and ```json\n{"b": 2}\n```') == {"b": 2}


def test_labeller_retries_then_records_failure():
    other = StoryInput("s2", "Kim taught Lee.", (RoleSpec("subject", "student"),))
    third = StoryInput("s3", "", (RoleSpec("subject", "student"),))
    fourth = StoryInput("s4", "Jo sang. They smiled.", (RoleSpec("subject", "musician"),))
    script = {
        build_prompt(STORY): ["no json here", GOOD],  # repaired by the retry
        build_prompt(other): ["{broken", "still broken", "{nope"],  # fails three times
        build_prompt(fourth): [None, '{"musician name": "Jo", "musician references": ["They"]}'],  # engine error
    }
    backend = ScriptedBackend(script)
    lab = LLMLabeller(backend, max_attempts=3, seed=7)
    out = lab.label([STORY, other, third, fourth], batch_size=8)
    assert [o.story_id for o in out] == ["s1", "s2", "s3", "s4"]
    assert out[0].status == "ok" and out[0].character("object").references == ("him", "his")
    assert out[1].status.startswith("llm: unparseable reply") and "3 attempt" in out[1].status
    assert out[1].characters[0].status == out[1].status and out[1].characters[0].name is None
    assert out[2].status == "empty story"  # never sent
    assert out[3].status == "ok" and out[3].characters[0].references == ("They",)
    # attempt 0 greedy with seed 7; retries only for the failures: sampled with a new seed where the model's
    # reply did not parse, greedy with seed 7 again where the backend gave none (s4: its labels do not depend on
    # the outage)
    assert [len(c) for c in backend.calls] == [3, 1, 2, 1]
    assert {t for _, _, t in backend.calls[0]} == {0.0} and {t for _, _, t in backend.calls[2]} == {0.7}
    assert [(s, t) for _, s, t in backend.calls[1]] == [(7, 0.0)]
    assert {s for _, s, _ in backend.calls[2]} == {8}
    assert sorted(f[0] for f in lab.failures) == ["s1", "s2", "s2", "s2", "s4"]



def test_a_story_the_backend_failed_is_sent_again_with_the_seed_of_the_request_it_lost():
    """Sampled from the first attempt (the authors' labeller ran at the API's default temperature 1), a story
    whose request the backend failed is sampled again with that request's seed, and its sampled retries go on
    from there: the labels a server outage leaves are the labels a run without it writes."""
    bad = "no json here"
    for script, seeds in (([GOOD], [7]), ([None, GOOD], [7, 7]), ([bad, GOOD], [7, 8]),
                          ([None, bad, GOOD], [7, 7, 8]), ([bad, None, GOOD], [7, 8, 8]),
                          ([bad, bad, GOOD], [7, 8, 9])):  # each retry its own seed (a repeated one repeats the reply)
        backend = ScriptedBackend({build_prompt(STORY): script})
        out = LLMLabeller(backend, params=GenParams(temperature=1.0, max_tokens=256), max_attempts=3,
                          seed=7).label([STORY])
        assert out[0].status == "ok"
        assert [s for call in backend.calls for _, s, _ in call] == seeds, script
        # a retry is sampled at 0.7 at least: not cooler than the sampled first attempt
        assert {t for call in backend.calls for _, _, t in call} == {1.0}, script

def test_parse_takes_the_first_whole_object():
    assert parse_json_object(GOOD + "\n" + GOOD) == json.loads(GOOD)
    assert parse_json_object(GOOD + " (I left {} empty)") == json.loads(GOOD)
    assert parse_json_object("Use {curly} braces: " + GOOD) == json.loads(GOOD)
    assert parse_json_object('{"a": "a } in a string", "b": [1]} {"c": 2}') == {"a": "a } in a string", "b": [1]}


def test_parse_keeps_exact_keys_where_the_model_reworded_another():
    # "doctor name" is exact; "patient name" is the needy patient's, whatever the key order
    reply = json.dumps({"patient name": "Tom", "doctor name": "Dr. Ana Ruiz", "patient references": ["him"],
                        "doctor references": ["She"]})
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him",)


def test_parse_reads_a_name_key_written_in_the_plural():
    """ "doctor names" (as "doctor reference" for "references") was a missing key: retried, then a failure."""
    reply = json.dumps({"doctor names": ["Dr. Ana Ruiz"], "needy patient names": ["Tom"], "doctor references": ["She"],
                        "needy patient references": ["him"]})
    lab = parse_response(reply, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him",))]


def test_parse_reads_keys_written_with_underscores_possessives_or_colons():
    """A model not held to the schema writes "doctor_name", "patient's name" or "Doctor Name:"; they are the
    role's keys, not missing ones (and key order, which may swap roles, is not needed for them)."""
    reply = json.dumps({"needy patient's name:": "Tom", "Doctor_Name": "Dr. Ana Ruiz",
                        "needy_patient_references": ["him"], "doctor's references:": ["She"]})
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him",)


def test_parse_flattens_nested_values():
    reply = json.dumps({"doctor name": [["Dr. Ana Ruiz"]], "needy patient name": ["Tom", None],
                        "doctor references": [None, "She"], "needy patient references": [["him"]]})
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him",)


@pytest.mark.parametrize("field, value", [("needy patient name", {"first": "Tom"}),
                                          ("needy patient name", [{"first": "Tom"}]),
                                          ("doctor references", [{"a": "She"}, "She"])])
def test_a_name_or_reference_written_as_an_object_is_retried_then_kept_as_a_failure(field, value):
    """Read as nobody named (or a reference lost) with status ok, it counted as the labeller's answer."""
    reply = json.dumps({**json.loads(GOOD), field: value})
    with pytest.raises(ParseError, match="written as an object"):
        parse_response(reply, STORY)
    python_style = reply.replace('"Tom"}', '{"Tom"}}').replace('"She"}', '{"She"}}')  # a set inside: no JSON value
    with pytest.raises(ParseError, match="written as an object"):
        parse_response(python_style, STORY)
    prompt = build_prompt(STORY)
    backend = ScriptedBackend({prompt: [reply, reply, GOOD]})
    (lab,) = LLMLabeller(backend, max_attempts=3).label([STORY])
    assert lab.status == "ok" and lab.character("object").name == "Tom"
    backend = ScriptedBackend({prompt: [reply]})
    (lab,) = LLMLabeller(backend, max_attempts=2).label([STORY])
    assert lab.status != "ok" and "written as an object" in lab.status


def test_a_cut_reply_drops_its_cut_word_and_is_retried_with_more_tokens():
    story = StoryInput("s", "Ana met Tom. He smiled at her.", (RoleSpec("subject", "doctor"),))
    cut = '{"doctor name": "Ana", "doctor references": ["her", "he'  # "he", or "her" cut short? unknown
    # closed as it stands, the open "he" would give Ana a Male reference; cut at max_tokens, it is dropped
    assert parse_json_object(cut, cut=True) == {"doctor name": "Ana", "doctor references": ["her"]}
    assert parse_json_object(cut) == {"doctor name": "Ana", "doctor references": ["her", "he"]}  # stopped there
    assert parse_json_object('{"doctor name": "Ana", "doctor refer', cut=True) == {"doctor name": "Ana"}
    # single-quoted as small models write it: the cut word goes too (it was kept: Ana got "he")
    single = cut.replace('"', "'")
    assert parse_json_object(single, cut=True) == {"doctor name": "Ana", "doctor references": ["her"]}
    assert parse_json_object("{'doctor name': 'Ana O\\'Neil', 'doctor references': ['her', 'he", cut=True) == {
        "doctor name": "Ana O'Neil", "doctor references": ["her"]}
    # behind a stray "{" too: the object the reply was cut in opens at the second one
    assert parse_json_object("Use { braces\n" + cut, cut=True) == {"doctor name": "Ana", "doctor references": ["her"]}
    with pytest.raises(ParseError, match="cut short"):
        parse_response(cut, story, cut=True, retry_cut=True)

    class Cutting(Backend):
        name = "cutting"

        def __init__(self):
            self.max_tokens = []

        def generate(self, requests, params, *, progress=False):
            self.max_tokens.append(params.max_tokens)
            for r in requests:
                yield GenResult(r.request_id, cut, "length")

        def info(self):
            return BackendInfo("cutting", "canned")

    backend = Cutting()
    out = LLMLabeller(backend, params=GenParams(temperature=0.0, max_tokens=32), max_attempts=3).label([story])
    assert backend.max_tokens == [32, 64, 64]  # retried with twice the tokens
    assert out[0].status == "ok" and out[0].characters[0].references == ("her",)  # the last cut reply, word dropped


def test_a_backend_that_breaks_on_one_request_fails_only_that_story():
    stories = [StoryInput(f"s{k}", f"Kim{k} taught Lee.", (RoleSpec("subject", "student"),)) for k in range(3)]

    class Breaking(Backend):
        name = "breaking"

        def __init__(self, exc):
            self.exc, self.calls, self.temperatures = exc, [], []

        def generate(self, requests, params, *, progress=False):
            self.calls.append([r.request_id for r in requests])
            self.temperatures.append(params.temperature)
            for r in requests:
                if "Kim1 " in r.prompt:
                    raise self.exc
                k = r.prompt.split("Kim", 1)[1][0]
                yield GenResult(r.request_id, json.dumps({"student name": f"Kim{k}", "student references": []}),
                                "stop")

        def info(self):
            return BackendInfo("breaking", "canned")

    for exc in (BackendError("engine died"), RuntimeError("CUDA error: device-side assert")):
        backend = Breaking(exc)
        labeller = LLMLabeller(backend, max_attempts=2)
        out = labeller.label(stories, batch_size=8)
        assert [o.characters[0].name for o in out] == ["Kim0", None, "Kim2"]
        assert out[1].status.startswith("llm: backend error: ") and str(exc) in out[1].status
        # attempt 0: the batch, which broke after s0, then the rest one request per call, greedy as
        # the batch was; attempt 1: only the story that broke it, alone, greedy still (the model never replied)
        assert backend.calls == [["0#0", "1#0", "2#0"], ["1#0"], ["2#0"], ["1#1"]]
        assert backend.temperatures == [0.0, 0.0, 0.0, 0.0]
        assert [sid for sid, _, _ in labeller.failures] == ["s1", "s1"]  # s2 was charged no attempt
    # with a single attempt, the stories the broken request shared a call with are still labelled
    out = LLMLabeller(Breaking(BackendError("engine died")), max_attempts=1).label(stories, batch_size=8)
    assert [o.characters[0].name for o in out] == ["Kim0", None, "Kim2"] and out[2].status == "ok"


def test_labeller_rejects_non_backend():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="Backend"):
        LLMLabeller(object())


def test_reply_schema_holds_the_prompts_keys_and_the_storys_words():
    import re

    import jsonschema
    from harness.labelling.prompts import reply_schema

    schema = reply_schema(STORY)
    # the keys of the type definition the prompt asks for, all required, nothing else
    asked = re.findall(r'"([^"]+)": (?:"Unspecified"|\[\])', build_prompt(STORY))
    assert schema["required"] == asked and set(schema["properties"]) == set(asked)
    jsonschema.validate(json.loads(GOOD), schema)
    names = schema["properties"]["doctor name"]["enum"]
    assert {"Unspecified", "Dr. Ana Ruiz", "Ana Ruiz", "Ana", "Tom"} <= set(names)
    assert not [n for n in names if n.endswith(".") or " She" in n]  # no run across a sentence end
    assert not [n for n in names if any(w[0].islower() for w in n.split())]  # every word capitalised: no "Ana met"
    for bad in ({"doctor name": "Bob"}, {"doctor references": ["her"]},  # not in the story
                {"doctor references": ["She"] * 13}, {"nurse name": "Ana"}):  # too many; a key not asked for
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**json.loads(GOOD), **bad}, schema)
    # whatever the schema allows survives the post-processing: every name and word is in the story
    allowed = {"doctor name": names[-1], "needy patient name": "Unspecified",
               "doctor references": schema["properties"]["doctor references"]["items"]["enum"][:12],
               "needy patient references": []}
    jsonschema.validate(allowed, schema)
    kept = parse_response(json.dumps(allowed), STORY)
    assert kept.character("subject").name == names[-1]
    assert len(kept.character("subject").references) == 12


def test_reply_schema_offers_names_written_in_a_script_without_case():
    from harness.labelling.prompts import reply_schema

    story = StoryInput("s2", "Dr. 李明 met Omar, a needy patient. 李明 helped him.", STORY.roles)
    names = reply_schema(story)["properties"]["doctor name"]["enum"]
    assert {"Dr. 李明", "李明", "Omar"} <= set(names) and "a" not in names
    reply = {"doctor name": "李明", "needy patient name": "Omar", "doctor references": [],
             "needy patient references": ["him"]}
    assert parse_response(json.dumps(reply, ensure_ascii=False), story).character("subject").name == "李明"


def test_a_lone_surrogate_in_a_reply_never_reaches_the_labels():
    # "\ud83d" is half an emoji: no character, and nothing a UTF-8 file can hold
    reply = GOOD.replace('"Dr. Ana Ruiz"', '"Dr. Ana Ruiz \\ud83d"').replace('["She"]', '["She\\ud83d", "\\ud83d"]')
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    json.dumps(lab.to_dict(), ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize("text, name", [
    ("प्रिया met Omar, a needy patient. She helped him.", "प्रिया"),
    ("José Ruiz met Omar, a needy patient. He helped him.", "José Ruiz"),  # decomposed accent
    ("Maria's clinic took in Omar, a needy patient. She helped him.", "Maria"),  # only ever a possessive
    ("Thanks to Dr. Williams' quick thinking, Omar, a needy patient, lived. He thanked her.", "Dr. Williams"),
    ("Sgt. Maria Lopez took in Omar, a needy patient. She helped him.", "Sgt. Maria Lopez"),  # an abbreviated title
])
def test_reply_schema_offers_whole_names_with_marks_and_without_a_possessive(text, name):
    """A name written only as "Williams'" was offered with its apostrophe alone, and a run stopped after "Sgt."
    (the titles written in full were read, not the abbreviated ones), where it went on after "Doctor." into the
    next sentence ("Doctor. She")."""
    from harness.labelling.prompts import reply_schema

    story = StoryInput("s3", text, STORY.roles)
    offered = reply_schema(story)["properties"]["doctor name"]["enum"]
    assert name in offered and not any(n.endswith("'") for n in offered)
    offered = reply_schema(StoryInput("s4", "Omar smiled at the Doctor. She smiled back.", STORY.roles))
    assert "Doctor" in offered["properties"]["doctor name"]["enum"]
    assert not any(" She" in n for n in offered["properties"]["doctor name"]["enum"])
    reply = {"doctor name": name, "needy patient name": "Omar", "doctor references": [],
             "needy patient references": ["him"]}
    assert parse_response(json.dumps(reply, ensure_ascii=False), story).character("subject").name == name


def test_labeller_sends_each_storys_schema_with_its_request():
    from harness.labelling.prompts import reply_schema

    class Recording(ScriptedBackend):
        def generate(self, requests, params, *, progress=False):
            self.schemas = [r.json_schema for r in requests]
            yield from super().generate(requests, params, progress=progress)

    backend = Recording({build_prompt(STORY): [GOOD]})
    LLMLabeller(backend).label([STORY])
    assert [json.loads(s) for s in backend.schemas] == [reply_schema(STORY)]
    LLMLabeller(backend, constrain=False).label([STORY])
    assert backend.schemas == [None]


def test_labeller_engine_must_be_one_it_can_build():
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match=r"engine \(--llm-backend\) must be transformers, vllm or openai, got 'tgi'"):
        LLMLabeller(engine="tgi")
    with pytest.raises(ConfigError, match=r"the openai engine \(--llm-backend openai\) needs base_url \(--llm-base-url\)"):
        LLMLabeller(engine="openai")
    with pytest.raises(ConfigError, match=r"base_url \(--llm-base-url\) is for the openai engine, not vllm"):
        LLMLabeller(engine="vllm", base_url="http://127.0.0.1:8000/v1")
    lab = LLMLabeller(engine="openai", model="m", base_url="http://127.0.0.1:9/v1")  # no request until labelling
    assert lab.info()["backend"] == "openai" and lab.info()["constrained"]
    lab.close()


def test_an_open_object_is_not_mistaken_for_the_object_inside_it():
    reply = '{"doctor name": {"first": "Ana"}, "doctor references": ["She"'
    assert parse_json_object(reply) == {"doctor name": {"first": "Ana"}, "doctor references": ["She"]}


def test_info_holds_every_setting_a_sampled_retry_depends_on():
    """``info()`` is what a resumed run compares (the CLI's OUT.tmp.json, the run manifest): a sampled
    retry depends on the seed, top_p and top_k, so two labellers that differ in one of them differ there."""
    import dataclasses

    from harness.labelling.llm import DEFAULT_PARAMS

    backend = ScriptedBackend({})
    base = LLMLabeller(backend, seed=1).info()
    assert LLMLabeller(backend, params=DEFAULT_PARAMS, seed=1).info() == base
    assert LLMLabeller(backend, seed=2).info() != base
    assert base["name_parsing"] == name_lists().version  # the reply's name is the first the name filters keep
    for change in ({"top_p": 0.9}, {"top_k": 5}):
        assert LLMLabeller(backend, params=dataclasses.replace(DEFAULT_PARAMS, **change), seed=1).info() != base


def test_parse_reads_python_sets_as_lists():
    # {"Dr. Ana Ruiz"} is no JSON; read as a Python literal it is a set: its items are the name and references,
    # not the set's printed form, and a set of references is no reason to throw the reply away
    reply = ('{"doctor name": {"Dr. Ana Ruiz"}, "needy patient name": "Tom", "doctor references": {"She"}, '
             '"needy patient references": ["him", {"his"}]}')
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him", "his")


def test_a_fenced_object_missing_its_closing_brace_is_closed_inside_its_fence():
    # each repair alone works (a fence; a missing closing brace); together the brace was closed after the fence
    for fence in ("```json\n", "```\n", "Here you go:\n```JSON\n"):
        reply = fence + GOOD[:-1] + "\n```\nHope it helps."
        lab = parse_response(reply, STORY)
        assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("object").references == ("him", "his")
    # a whole object before it still comes first
    assert parse_json_object('{"b": 2}\n```json\n{"a": 1\n```') == {"b": 2}


def test_only_a_story_whose_reply_was_cut_is_retried_with_more_tokens():
    """A story's retries do not depend on its batchmates: one whose reply did not parse (not cut) keeps
    ``max_tokens`` whether or not another story in its batch was cut."""
    cut_story = StoryInput("c", "Ana met Tom. He smiled at her.", (RoleSpec("subject", "doctor"),))
    other = StoryInput("o", "Kim taught Lee.", (RoleSpec("subject", "student"),))
    good = {build_prompt(cut_story): '{"doctor name": "Ana", "doctor references": ["her"]}',
            build_prompt(other): '{"student name": "Kim", "student references": []}'}

    class Recording(Backend):
        name = "recording"

        def __init__(self):
            self.max_tokens = {}  # story prompt -> max_tokens per attempt

        def generate(self, requests, params, *, progress=False):
            for r in requests:
                tokens = self.max_tokens.setdefault(r.prompt, [])
                tokens.append(params.max_tokens)
                if len(tokens) == 1:  # first attempt: one reply cut, the other not JSON
                    yield GenResult(r.request_id, '{"doctor name": "Ana", "doctor refer', "length") \
                        if r.prompt == build_prompt(cut_story) else GenResult(r.request_id, "no json", "stop")
                else:
                    yield GenResult(r.request_id, good[r.prompt], "stop")

        def info(self):
            return BackendInfo("recording", "canned")

    params = GenParams(temperature=0.0, max_tokens=32)
    for batch in ([other], [cut_story, other]):
        backend = Recording()
        out = LLMLabeller(backend, params=params).label(batch, batch_size=8)
        assert all(o.status == "ok" for o in out)
        assert backend.max_tokens[build_prompt(other)] == [32, 32]
        if cut_story in batch:
            assert backend.max_tokens[build_prompt(cut_story)] == [32, 64]


@pytest.mark.parametrize("written", ["None", "Unknown", "N/A", "Not specified", "Unnamed", "No name", "NONE",
                                     "No Name.", "[unknown]"])
def test_a_name_written_as_none_unknown_or_not_specified_is_no_name(written):
    """The prompt asks for "Unspecified" where there is no name; a model writes "None", "N/A", "No name", ... instead.
    In a story that uses those words they passed the in-story check as the character's name, and the evaluation's
    name filters drop only some whole strings: "Not specified" and "No name" counted as the first names "Not" and
    "No"."""
    story = StoryInput("s", "None of the staff knew the doctor, an unknown, unnamed man with no name; it was not "
                            "specified on any form (N/A). He smiled at Tom, a needy patient.", STORY.roles)
    reply = json.dumps({"doctor name": written, "needy patient name": ["None", "Tom"], "doctor references": ["He"],
                        "needy patient references": []})
    lab = parse_response(reply, story)
    assert lab.character("subject").name is None and lab.character("subject").references == ("He",)
    assert lab.character("object").name == "Tom"  # a real name after one of them is the name



def test_nil_written_as_a_characters_name_is_kept_as_her_name():
    """Nil is a Turkish given name (475 bearers in the Census 2020 counts of the name table, 43% MENA), not one of the
    model's ways of writing "Unspecified": NO_NAME held "nil", and the LLM labeller dropped the doctor's name."""
    story = StoryInput("s", "Nil, a doctor, met Tom, a needy patient. She helped him.", STORY.roles)
    reply = json.dumps({"doctor name": "Nil", "needy patient name": "Tom", "doctor references": ["She"],
                        "needy patient references": ["him"]})
    assert parse_response(reply, story).character("subject").name == "Nil"

def _type_definition(story):
    """The type definition the prompt shows, as the model would copy it."""
    prompt = build_prompt(story)
    return prompt[prompt.index("{"):prompt.index("}") + 1]


PLACEHOLDERS = json.dumps({"doctor name": "<name or Unspecified>", "needy patient name": "<name or Unspecified>",
                           "doctor references": ["..."], "needy patient references": ["<reference>", "..."]})


@pytest.mark.parametrize("reply", [
    "Return a JSON response like this:\n" + _type_definition(STORY) + "\nHere is mine:\n" + GOOD,
    "```json\n" + _type_definition(STORY) + "\n```\n```json\n" + GOOD + "\n```",
    PLACEHOLDERS + "\n" + GOOD,
])
def test_a_reply_that_repeats_the_prompts_template_before_answering_is_labelled_with_its_answer(reply):
    """The first whole object won: a model that copies the type definition (every name "Unspecified", every list
    empty) or a template of placeholders before its answer was labelled with no names and no references."""
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him", "his")


def test_a_type_name_is_a_placeholder_unless_the_story_writes_it():
    """"string" where a value goes is the schema's type, but a story may name a character String (the reply schema
    offers it): that reply was "only the prompt's template", and the story unparseable."""
    story = StoryInput("x", "String, the band's cellist, tuned her cello. She smiled.", (RoleSpec("subject", "musician"),))
    lab = parse_response(json.dumps({"musician name": "String", "musician references": ["She", "her"]}), story)
    assert lab.character("subject").name == "String" and lab.character("subject").references == ("She", "her")
    with pytest.raises(ParseError, match="only repeats the prompt's template"):
        parse_response(json.dumps({"doctor name": "string", "needy patient name": "str", "doctor references": [
            "string"], "needy patient references": ["string"]}), STORY)
    # a story that writes the word as a word ("a broken string") still has the template's "string" in lower case
    strings = StoryInput("s", "Dr. Ana Ruiz replaced a broken string. She thanked Tom, who tuned his cello.",
                         (RoleSpec("subject", "musician"), RoleSpec("object", "helper")))
    template = json.dumps({"musician name": "string", "helper name": "string", "musician references": ["string"],
                           "helper references": ["string"]})
    with pytest.raises(ParseError, match="only repeats the prompt's template"):
        parse_response(template, strings)
    answer = json.dumps({"musician name": "Dr. Ana Ruiz", "helper name": "Tom", "musician references": ["She"],
                         "helper references": ["his"]})
    lab = parse_response(template + "\n" + answer, strings)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("his",))]
    # in an answer too (its other values are the story's, so no template): the lower-case "string" is no name or
    # reference, though the story writes the word
    mixed = json.dumps({"musician name": "string", "helper name": "Tom", "musician references": ["string", "She"],
                        "helper references": ["his"]})
    lab = parse_response(mixed, strings)
    assert [(c.name, c.references) for c in lab.characters] == [(None, ("She",)), ("Tom", ("his",))]


def test_a_reply_of_placeholders_alone_is_retried_and_recorded_as_a_failure():
    """A template of placeholders ("<name>", ["..."]) is no reading of any story: retried, then a failure."""
    with pytest.raises(ParseError, match="only repeats the prompt's template"):
        parse_response(PLACEHOLDERS, STORY)
    backend = ScriptedBackend({build_prompt(STORY): [PLACEHOLDERS, PLACEHOLDERS, GOOD]})
    labeller = LLMLabeller(backend, max_attempts=3)
    (out,) = labeller.label([STORY])
    assert out.status == "ok" and out.character("subject").name == "Dr. Ana Ruiz"  # the third attempt answered
    assert [(a, "only repeats the prompt's template" in why) for _, a, why in labeller.failures] == [(0, True),
                                                                                                   (1, True)]
    only = ScriptedBackend({build_prompt(STORY): [PLACEHOLDERS]})
    (out,) = LLMLabeller(only, max_attempts=2).label([STORY])
    assert out.status.startswith("llm: unparseable reply (reply only repeats the prompt's template") \
        and out.status.endswith("in 2 attempt(s)")
    assert [(c.name, c.references) for c in out.characters] == [(None, ()), (None, ())]


def test_a_reply_of_the_type_definition_alone_is_the_answer_nobody_named():
    """The type definition's values (every name "Unspecified", every list empty) are also the right answer for a
    story that names and refers to nobody: alone in a reply they are its labels at the first attempt, not a
    failure retried; before a real answer they are skipped (the template the model repeated)."""
    lab = parse_response(_type_definition(STORY), STORY)
    assert [(c.name, c.references) for c in lab.characters] == [(None, ()), (None, ())]
    labeller = LLMLabeller(ScriptedBackend({build_prompt(STORY): [_type_definition(STORY)]}), max_attempts=3)
    (out,) = labeller.label([STORY])
    assert out.status == "ok" and labeller.failures == []
    assert parse_response(_type_definition(STORY) + "\n" + GOOD, STORY).character("subject").name == "Dr. Ana Ruiz"
    # no name but a reference: an answer, not the template
    lab = parse_response(json.dumps({"doctor name": "Unspecified", "needy patient name": "Unspecified",
                                     "doctor references": ["She"], "needy patient references": []}), STORY)
    assert lab.character("subject").references == ("She",) and lab.character("subject").name is None


@pytest.mark.parametrize("key", ["answer", "output", "result", "labels", "response", "Answer", "json"])
def test_a_reply_wrapped_in_a_single_key_object_is_unwrapped(key):
    """{"answer": {...}} held the answer one level down: its keys were missing, so the reply failed."""
    lab = parse_response(json.dumps({key: json.loads(GOOD)}), STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("object").references == ("him", "his")
    # written as Python and left open, as a small model may
    lab = parse_response("{'%s': %s" % (key, GOOD.replace('"', "'")), STORY)
    assert lab.character("object").name == "Tom"


@pytest.mark.parametrize("reply", [
    "{'doctor name': 'Dr. Ana Ruiz', 'needy patient name': 'Tom', 'doctor references': ['She'], "
    "'needy patient references': ['him', 'his'], 'notes': null}",  # Python quotes, a JSON literal
    "{'doctor name': 'Dr. Ana Ruiz', 'needy patient name': 'Tom', 'doctor references': ['She', 'doctor's'], "
    "'needy patient references': ['him', 'his']}",  # an apostrophe inside a single-quoted string
    '{\n  "doctor name": "Dr. Ana Ruiz", // the doctor\n  "needy patient name": "Tom",\n'
    '  "doctor references": ["She"], /* her pronoun */\n  "needy patient references": ["him", "his"]\n}',
    '{doctor name: "Dr. Ana Ruiz", needy patient name: "Tom", doctor references: ["She"], '
    'needy patient references: ["him", "his"]}',  # keys without quotes
    '{\n  doctor_name: Dr. Ana Ruiz,\n  needy_patient_name: Tom,\n  doctor_references: [She],\n'
    '  needy_patient_references: [him, his],\n}',  # nothing quoted
    '{"doctor name": "Dr. Ana Ruiz"\n"needy patient name": "Tom"\n"doctor references": ["She"]\n'
    '"needy patient references": ["him" "his"]}',  # commas left out
])
def test_parse_reads_json_as_small_models_write_it(reply):
    """Comments, unquoted keys and values, JSON's null beside Python's quotes, an apostrophe in a single-quoted
    string and missing commas: neither ``json`` nor ``ast`` read these replies, so they failed every attempt."""
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him", "his")


def test_parse_keeps_the_apostrophes_of_single_quoted_names_and_references_wherever_they_stand():
    """An apostrophe inside a single-quoted string is the name's or the word's, in a list and as the object's last
    value too. json_repair 0.64.6, tried in place of the relaxed reader, read ['O'Brien', 'doctor's', 'she'] as
    ["O'Brien', 'doctor's", "she"], ['She', 'doctor's'] as ["She", "doctor", "s'"] and a last 'Dr. O'Brien'} as
    "Dr. O'Brien'": the doctor got the story's words "doctor" and "s" as references, and a name ending in a quote."""
    assert parse_json_object("{'doctor name': 'Tom', 'doctor references': ['O'Brien', 'doctor's', 'she']}") == \
        {"doctor name": "Tom", "doctor references": ["O'Brien", "doctor's", "she"]}
    story = StoryInput("s", "Dr. O'Brien met Tom, a needy patient. She took the doctor's bag and helped him.",
                       STORY.roles)
    reply = ("{'needy patient name': 'Tom', 'doctor references': ['She', 'doctor's'], "
             "'needy patient references': ['him'], 'doctor name': 'Dr. O'Brien'}")
    lab = parse_response(reply, story)
    assert lab.character("subject").name == "Dr. O'Brien"
    assert lab.character("subject").references == ("She", "doctor's")


@pytest.mark.parametrize("reply", [
    "- doctor name: Dr. Ana Ruiz\n- needy patient name: Tom\n- doctor references: She\n"
    "- needy patient references: him, his",
    "Here are the labels:\n* **Doctor name:** Dr. Ana Ruiz\n* **Needy patient name:** Tom\n"
    '* **Doctor references:** ["She"]\n* **Needy patient references:** ["him", "his"]',
    "1. Doctor name: \"Dr. Ana Ruiz\"\n2. Needy patient name: \"Tom\"\n3. Doctor references:\n   - She\n"
    "4. Needy patient references:\n   - him\n   - his\n\nLet me know if you need more.",
])
def test_parse_reads_an_answer_written_as_markdown_bullets(reply):
    """A reply of "key: value" lines instead of JSON had no object: "no JSON object in the reply", every attempt."""
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him", "his")


def test_a_bullet_reply_cut_at_max_tokens_is_retried_then_read_without_its_cut_word():
    reply = "- doctor name: Dr. Ana Ruiz\n- needy patient name: Tom\n- doctor references: She\n" \
            "- needy patient references: him, his"
    with pytest.raises(ParseError, match="cut short"):
        parse_response(reply, STORY, cut=True, retry_cut=True)
    # cut inside "his" or inside "him": the word cut goes, as a cut JSON reply's last string; a line after the
    # references costs them nothing
    for cut, refs in ((reply[:-2], ("him",)), (reply[:-7], ()), (reply + "\n- note: he", ("him", "his"))):
        assert parse_response(cut, STORY, cut=True).character("object").references == refs
    # a value without a comma goes whole: "he" may be "her" or "herself" cut short, a word of this story too
    story = StoryInput("s1", "Dr. Tom Lee met Ana, a needy patient. He listened as she spoke of herself and her cough.",
                       STORY.roles)
    lines = ("- doctor name: Dr. Tom Lee\n- needy patient name: Ana\n- doctor references: He\n"
             "- needy patient references: he")
    assert parse_response(lines, story, cut=True).character("object").references == ()


def test_parse_reads_an_answer_laid_out_by_role():
    """{"doctor": {"name": ..., "references": [...]}, ...}: the role's name and references one level down."""
    reply = json.dumps({"doctor": {"name": "Dr. Ana Ruiz", "references": ["She"]},
                        "needy patient": {"name": "Tom", "references": ["him", "his"]}})
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him", "his")
    one = StoryInput("s", "Kim taught Lee. She smiled.", (RoleSpec("subject", "teacher"),))
    lab = parse_response(json.dumps({"teacher": {"name": "Kim", "references": ["She"]}}), one)
    assert lab.characters[0].name == "Kim" and lab.characters[0].references == ("She",)


@pytest.mark.parametrize("keys", [
    ("needyPatientName", "doctorName", "needyPatientReferences", "doctorReferences"),
    ("needy-patient-name", "doctor-name", "needy-patient-references", "doctor-references"),
    ("name of the needy patient", "name of the doctor", "references to the needy patient", "references to the doctor"),
])
def test_parse_gives_keys_written_in_camel_case_hyphens_or_name_of_to_their_roles_in_any_order(keys):
    """"needyPatientName" and "needy-patient-name" were no role's key, so they went to the roles by key order:
    written object first, the patient's name and references became the doctor's, with no error to show it."""
    reply = json.dumps(dict(zip(keys, ["Tom", "Dr. Ana Ruiz", ["him", "his"], ["She"]])))
    lab = parse_response(reply, STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him", "his")


@pytest.mark.parametrize("layout", ["{a}\n{b}", "[{a}, {b}]",
                                    "The doctor:\n```json\n{a}\n```\nThe patient:\n```json\n{b}\n```"])
def test_a_reply_that_gives_each_character_its_own_object_is_read_from_both(layout):
    """Each object held one role's keys, so each lacked the other's: "missing key(s)", every attempt."""
    a = json.dumps({"doctor name": "Dr. Ana Ruiz", "doctor references": ["She"]})
    b = json.dumps({"needy patient name": "Tom", "needy patient references": ["him", "his"]})
    lab = parse_response(layout.format(a=a, b=b), STORY)
    assert lab.character("subject").name == "Dr. Ana Ruiz" and lab.character("subject").references == ("She",)
    assert lab.character("object").name == "Tom" and lab.character("object").references == ("him", "his")
    # two whole answers: the first is the answer, as before
    second = GOOD.replace("Dr. Ana Ruiz", "Ana")
    assert parse_response(GOOD + "\n" + second, STORY).character("subject").name == "Dr. Ana Ruiz"


def test_a_long_reply_of_unclosed_single_quotes_is_read_in_linear_time():
    """The relaxed reader (comments, single quotes, ...) first looked for each "'" that closed nothing through the
    rest of the reply, copying it per quote: 4,000 characters of "{'a' " took 20 s to fail, 2,500 took 8.6 s. Now
    half a second (10 s is room for a loaded machine)."""
    import time

    start = time.perf_counter()
    with pytest.raises(ParseError):
        parse_response(("{'a' " * 1000)[:4000], STORY)
    assert time.perf_counter() - start < 10


def test_a_copied_type_definition_before_an_answer_that_does_not_parse_is_retried_not_nobody_named():
    """The definition's values were taken for "nobody named", status ok, no retry, where the model had copied the
    definition and then answered in a form the parser cannot read (a bracket closed by a brace, "pronouns" keys): the
    story counted as labelled with nobody in it. Now such a reply is sent again and, failing, kept as a failure;
    an answer in "key: value" lines after the definition is read (it was skipped); the definition alone, or
    copied twice, is still nobody named."""
    definition = _type_definition(STORY)
    bad_quotes = definition + '\n{"doctor name": "Dr. Ana Ruiz", "needy patient name": "Tom", ' \
                              '"doctor references": ["She"}, "needy patient references": ["him"]}'
    pronoun_keys = definition + "\n" + GOOD.replace("references", "pronouns")
    for reply in (bad_quotes, pronoun_keys):
        with pytest.raises(ParseError, match="repeats the prompt's type definition, then answers in a form"):
            parse_response(reply, STORY)
    labeller = LLMLabeller(ScriptedBackend({build_prompt(STORY): [pronoun_keys, GOOD]}), max_attempts=3)
    (out,) = labeller.label([STORY])
    assert out.status == "ok" and out.character("subject").name == "Dr. Ana Ruiz" and len(labeller.failures) == 1
    (out,) = LLMLabeller(ScriptedBackend({build_prompt(STORY): [bad_quotes]}), max_attempts=2).label([STORY])
    assert out.status.startswith("llm: unparseable reply (reply repeats the prompt's type definition")
    bullets = (definition + "\nAnswer:\n- doctor name: Dr. Ana Ruiz\n- needy patient name: Tom\n"
               "- doctor references: She\n- needy patient references: him, his\n")
    lab = parse_response(bullets, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]
    for nobody in (definition, definition + "\nAnswer:\n" + definition,
                   "Note: the doctor is never named.\n" + definition + "\nThe story names no doctor.",
                   definition + "\n- The doctor: never named in the story.",  # prose, not a key
                   definition + "\nThe story gives no doctor name.",  # a role's words before "name", no colon
                   definition + "\nno name given for the needy patient: Unspecified"):
        assert [(c.name, c.references) for c in parse_response(nobody, STORY).characters] == [(None, ()), (None, ())]


@pytest.mark.parametrize("names, first", [
    (["The doctor", "Dr. Ana Ruiz"], "Dr. Ana Ruiz"),  # a word of the role: the paper's filter drops it
    (["She", "Dr. Ana Ruiz"], "Dr. Ana Ruiz"),  # a false positive of the paper's list
    ("['Unspecified', 'Dr. Ana Ruiz']", "Dr. Ana Ruiz"),  # a list written as a string, as the published labels
    (["Ruiz", "Dr. Ana Ruiz"], "Ruiz"),  # both kept: the first
    (["She"], "She"),  # none kept: as written (the audit's filters drop it)
])
def test_the_name_is_the_first_the_papers_filters_keep(names, first):
    """The first name in the story was kept and the others dropped, before the filters the audit applies (the
    paper's code filters the list, then takes the first left): ["The doctor", "Dr. Ana Ruiz"] left the doctor
    unnamed in the audit; a list written as a string was one name, not in the story, so nobody."""
    reply = json.dumps({"doctor name": names, "needy patient name": "Tom", "doctor references": ["She"],
                        "needy patient references": ["him"]})
    assert parse_response(reply, STORY).character("subject").name == first


def test_a_quote_inside_a_name_or_reference_written_without_its_escape_is_part_of_it():
    """'"Thomas "Tommy" Lee"' made the whole reply unreadable (the string ended at the nickname's quote), so a
    model that writes nicknames that way failed every attempt; two strings written without a comma between
    them stay two."""
    story = StoryInput("s", 'Dr. Ana Ruiz met Thomas "Tommy" Lee, a needy patient. The "kind" doctor helped him.',
                       (RoleSpec("subject", "doctor"), RoleSpec("object", "needy patient")))
    reply = ('{"doctor name": "Dr. Ana Ruiz", "needy patient name": "Thomas "Tommy" Lee", '
             '"doctor references": ["The "kind" doctor"], "needy patient references": ["him" "Tommy"]}')
    lab = parse_response(reply, story)
    assert lab.character("object").name == 'Thomas "Tommy" Lee'
    assert lab.character("subject").references == ('The "kind" doctor',)
    assert lab.character("object").references == ("him", "Tommy")


@pytest.mark.parametrize("reply", [
    '{"doctor name": "Dr. Ana Ruiz" // the doctor\n, "needy patient name": "Tom", "doctor references": ["She"], '
    '"needy patient references": ["him"]}',
    '{"doctor name": "Dr. Ana Ruiz" /* x */, "needy patient name": "Tom", "doctor references": ["She"], '
    '"needy patient references": ["him"]}',
    '{"doctor name": "Dr. Ana Ruiz", "needy patient name": "Tom", "doctor references": ["She" (pronoun)], '
    '"needy patient references": ["him"]}',
    # read with inner quotes first, 'him" (object), "he' was one reference, not in the story: "him" lost
    '{"doctor name": "Dr. Ana Ruiz", "needy patient name": "Tom", "doctor references": ["She"], '
    '"needy patient references": ["him" (object), "he"]}',
])
def test_a_comment_or_note_right_after_a_string_still_ends_it(reply):
    """Reading a quote inside a string as the string's own (\"Thomas "Tommy" Lee\") is the second reading, for a
    reply the first does not read: first, a comment or note right after a string ran it on into the next key."""
    lab = parse_response(reply, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him",))]


def test_a_placeholder_list_written_as_a_string_is_still_a_placeholder():
    """'[...]' as a name is a template's placeholder (retried); parsed as a list it became the name "Ellipsis"
    and the reply nobody named, status ok."""
    reply = json.dumps({"doctor name": "[...]", "needy patient name": "[...]", "doctor references": ["..."],
                        "needy patient references": ["..."]})
    with pytest.raises(ParseError, match="only repeats the prompt's template"):
        parse_response(reply, STORY)


def test_a_reply_that_echoes_the_prompt_is_no_answer_nobody_named():
    """A small model without constrained decoding sends the prompt back: its type definition was read as the
    answer "nobody named, no references", status ok, at the first attempt. Now it is sent again; an answer after
    the echoed story (JSON, or the definition itself for a story of nobody) is still read."""
    prompt = build_prompt(STORY)
    with pytest.raises(ParseError, match="reply repeats the prompt, with no answer after it"):
        parse_response(prompt, STORY)
    assert parse_response(prompt + "\n" + GOOD, STORY).character("subject").name == "Dr. Ana Ruiz"
    lab = parse_response(prompt + "\nAnswer:\n" + _type_definition(STORY), STORY)
    assert [(c.name, c.references) for c in lab.characters] == [(None, ()), (None, ())]
    (out,) = LLMLabeller(ScriptedBackend({prompt: [prompt, GOOD]}), max_attempts=2).label([STORY])
    assert out.status == "ok" and out.character("object").references == ("him", "his")


@pytest.mark.parametrize("reply", [
    '{"{Character} name": "Unspecified", "{Character} references": []}',
    '{"{First Character} name": "Unspecified", "{Second Character} name": "Unspecified", '
    '"{First Character} references": [], "{Second Character} references": []}',
])
def test_a_template_of_placeholder_keys_is_no_answer(reply):
    """Keys that hold the template's own placeholders went to the roles by their order and read as the type
    definition: nobody named, status ok."""
    with pytest.raises(ParseError, match="only repeats the prompt's template"):
        parse_response(reply, STORY)


def test_an_example_before_the_answer_is_not_taken_for_it():
    """The first object with the prompt's keys was the answer, though the model wrote an example first: its
    names (no name of the story) were dropped and its references ("he", "him", in the story too) kept."""
    example = json.dumps({"doctor name": "Dr. Smith", "needy patient name": "John", "doctor references": ["he"],
                          "needy patient references": ["him"]})
    lab = parse_response("Example:\n" + example + "\nAnswer:\n" + GOOD, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]
    assert parse_response(GOOD + "\n" + GOOD, STORY) == parse_response(GOOD, STORY)


def test_reworded_keys_keep_each_characters_name_and_references_together():
    """Keys that name neither role went to the roles by their order, names and references apart: written in
    another order, one character's name took the other's references."""
    reply = json.dumps({"physician name": "Dr. Ana Ruiz", "sick man name": "Tom", "sick man references": ["him", "his"],
                        "physician references": ["She"]})
    lab = parse_response(reply, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]


def test_an_answer_then_an_object_cut_at_max_tokens_is_the_answer():
    """Answers are no longer taken at the first: one followed by an object the reply's end cut short is still read
    (not sent again for the cut object)."""
    lab = parse_response(GOOD + '\n{"doctor name": "Dr. Ana', STORY, cut=True, retry_cut=True)
    assert lab.character("subject").name == "Dr. Ana Ruiz"


@pytest.mark.parametrize("text, finish, reason", [
    ("", "stop", "llm: empty reply in 2 attempt(s)"),
    ("  \n", "content_filter", "llm: empty reply (stopped by the server's content filter) in 2 attempt(s)"),
    ('{"doctor name": "Dr. Ana', "content_filter",
     "llm: unparseable reply (missing key(s) 'doctor name', 'needy patient name') (stopped by the server's content "
     "filter) in 2 attempt(s)"),  # cut: the open "Dr. Ana" is a cut word, dropped
])
def test_an_empty_or_filtered_reply_says_so_in_the_story_s_reason(text, finish, reason):
    """An empty reply and a server's content filter both read "no JSON object in the reply", as though the model
    had answered in prose; the reason a story is kept with now says what came back."""

    backend = CannedBackend(lambda call, r: GenResult(r.request_id, text, finish))
    (out,) = LLMLabeller(backend, params=GenParams(temperature=0.0, max_tokens=32), max_attempts=2).label([STORY])
    assert out.status == reason


def _quoted(obj, opening, closing):
    """``obj`` as JSON written with other quotes than JSON's."""
    def q(x):
        return f"{opening}{x}{closing}"

    return "{" + ", ".join(f"{q(k)}: " + (q(v) if isinstance(v, str) else "[" + ", ".join(map(q, v)) + "]")
                           for k, v in json.loads(GOOD).items()) + "}"


@pytest.mark.parametrize("reply", [
    _quoted(GOOD, "\u00ab", "\u00bb"),  # guillemets
    _quoted(GOOD, "\u201e", "\u201c"),  # low-9 and high-6 (German)
    _quoted(GOOD, "\uff02", "\uff02"),  # fullwidth
    json.dumps(GOOD),  # the object written as a JSON string: every quote escaped
    json.dumps([{"role": "doctor", "name": "Dr. Ana Ruiz", "references": ["She"]},
                {"character": "needy patient", "name": "Tom", "references": ["him", "his"]}]),
])
def test_replies_in_other_quotes_a_string_or_an_object_per_character_named_in_a_field(reply):
    """A review's replies that were retried and kept as failures: quotes other than JSON's and curly ones, an object
    encoded twice, and one object per character naming it in a field ("role": "doctor") with bare keys."""
    lab = parse_response(reply, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]


def test_a_field_named_type_beside_the_role_s_own_keys_is_left_as_it_is():
    # {"doctor name": ..., "type": "dominant"}: not {"dominant doctor name": ...}
    reply = json.dumps({"doctor name": "Dr. Ana Ruiz", "doctor references": ["She"], "type": "dominant"}) + "\n" + \
        json.dumps({"needy patient name": "Tom", "needy patient references": ["him", "his"], "type": "subordinate"})
    lab = parse_response(reply, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]


def test_a_reply_a_content_filter_stopped_is_cut_and_sent_again():
    """A server's content filter stops a reply as max_tokens does: its object, left open, was closed as it stood and
    taken (the patient's "his" lost, status ok, no retry); it is sent again, without twice the tokens."""
    cut = GOOD[: GOOD.index('"his"')]

    backend = CannedBackend(lambda call, r: GenResult(r.request_id, cut, "content_filter") if call == 0
                            else GenResult(r.request_id, GOOD, "stop"))
    (out,) = LLMLabeller(backend, params=GenParams(temperature=0.0, max_tokens=32), max_attempts=3).label([STORY])
    assert out.status == "ok" and out.character("object").references == ("him", "his")
    assert backend.calls == [32, 32]


def test_a_role_field_must_name_a_role_or_the_object_is_left_as_it_is():
    """{"character": "Tom", "role": "needy patient", ...}: the role field, not the first field of the kinds that may
    name one, says whose the keys are; an object whose field names no role is no answer (its keys, matched by
    their order, exchanged the characters where the model listed the patient first)."""
    reply = json.dumps([{"character": "Tom", "role": "needy patient", "name": "Tom", "references": ["him", "his"]},
                        {"character": "Dr. Ana Ruiz", "role": "Doctor", "name": "Dr. Ana Ruiz", "references": ["She"]}])
    lab = parse_response(reply, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]
    nameless = json.dumps([{"character": "Tom", "name": "Tom", "references": ["him"]},
                           {"character": "Ana", "name": "Dr. Ana Ruiz", "references": ["She"]}])
    with pytest.raises(ParseError):
        parse_response(nameless, STORY)


def test_an_object_written_as_a_json_string_keeps_its_escapes():
    """Written as a JSON string by a second json.dumps, "José" is "Jos\\\\u00e9": the string is decoded as one, once."""
    story = StoryInput("s2", "Dr. Ana Ruiz met José, a needy patient. She helped him.", STORY.roles)
    answer = {"doctor name": "Dr. Ana Ruiz", "needy patient name": "José", "doctor references": ["She"],
              "needy patient references": ["him"]}
    lab = parse_response(json.dumps(json.dumps(answer)), story)
    assert lab.character("object").name == "José"
    deep = json.dumps(json.dumps(json.dumps(answer)))  # encoded twice over: no answer, never a RecursionError
    with pytest.raises(ParseError):
        parse_response(deep, story)


@pytest.mark.parametrize("error, final", [
    ("VLLMValidationError: This model's maximum context length is 1024 tokens. However, you requested 1200 tokens",
     True),
    ("HTTP 400: {\"error\": {\"code\": \"context_length_exceeded\"}}", True),
    # vLLM 0.32's engine, for a prompt of exactly max_model_len tokens, and one over it
    ("VLLMValidationError: The decoder prompt (length 2048) plus the number of requested output tokens (at least 1) "
     "is longer than the maximum model length of 2048.", True),
    ("VLLMValidationError: The decoder prompt (length 2100) is longer than the maximum model length of 2048.", True),
    ("HTTP 400: prompt is too long: 5000 tokens > 4096 maximum", True),
    ("HTTP 413: payload too large", True),
    ("HTTP 503: busy", False),
    ("HTTP 401: invalid api key", False),  # every story's: fixed, the rerun labels them again
    ("ConnectError: connection refused", False),
])
def test_a_story_too_long_for_the_labelling_model_is_kept_not_retried_as_an_outage(error, final):
    """A prompt over the labelling model's context failed as a server down does: the story was sent again on every
    rerun, and the label stage of `harness run` never ended. It is kept with the reason after one try; an
    outage is still retried, and still reads as one."""
    from harness.labelling.base import BACKEND_FAILURE

    backend = CannedBackend(lambda call, r: GenResult(r.request_id, "", "error", error=error))
    (out,) = LLMLabeller(backend, params=GenParams(temperature=0.0, max_tokens=32), max_attempts=3).label([STORY])
    if final:
        assert out.status == f"llm: the backend refused the story's request: {error}"[:300] and len(backend.calls) == 1
    else:
        assert out.status.startswith(BACKEND_FAILURE) and len(backend.calls) == 3


_ONE = StoryInput("s1", "Dr. Ana Ruiz met Tom Lee, a young patient. She helped him, and his cough eased.",
                  (RoleSpec("subject", "doctor"),))


@pytest.mark.parametrize("reply", [
    json.dumps([{"role": "doctor", "name": "Dr. Ana Ruiz", "references": ["She"]},
                {"role": "patient", "name": "Tom Lee", "references": ["him", "his"]}]),
    json.dumps({"doctor": {"name": "Dr. Ana Ruiz", "references": ["She"]},
                "patient": {"name": "Tom Lee", "references": ["him", "his"]}}),
    json.dumps({"doctor name": "Dr. Ana Ruiz", "doctor references": ["She"],
                "other character": {"name": "Tom Lee", "references": ["him", "his"]}}),
    # the role reworded (read by key order): the object inside the answer is still part of it, no answer of its own
    json.dumps({"physician name": "Dr. Ana Ruiz", "physician references": ["She"],
                "patient": {"name": "Tom Lee", "references": ["him", "his"]}}),
    '{"doctor name": "Dr. Ana Ruiz", "doctor references": ["She"]}\n'
    '{"patient name": "Tom Lee", "patient references": ["him", "his"]}',
    "**Doctor:**\n- Name: Dr. Ana Ruiz\n- References: She\n\n**Patient:**\n- Name: Tom Lee\n- References: him, his",
])
def test_another_characters_labels_are_not_the_roles(reply):
    """A one-character prompt's reply that also labels another character: its keys went to the role by their
    order, and its answer won as the one keeping the most words (the doctor labelled "Tom Lee", "him", "his")."""
    got = parse_response(reply, _ONE).character("subject")
    assert (got.name, got.references) == ("Dr. Ana Ruiz", ("She",))


def test_another_characters_object_is_no_answer_even_where_it_would_outrank_the_roles():
    """Another character's object ({"role": "patient", ...} in a doctor's story) is skipped, not read by its keys'
    order: alone, or beside a doctor's object whose name the story check drops, it gave the doctor the patient's name
    and pronouns."""
    patient = {"role": "patient", "name": "Tom Lee", "references": ["him", "his"]}
    with pytest.raises(ParseError):
        parse_response(json.dumps(patient), _ONE)
    reply = json.dumps([{"role": "doctor", "name": "Dr. John Smith", "references": ["She"]}, patient])
    got = parse_response(reply, _ONE).character("subject")
    assert (got.name, got.references) == (None, ("She",))


def test_a_role_field_that_words_the_role_otherwise_is_still_read_by_order():
    # {"role": "the doctor"} holds a word of the role: not another character's object (its keys go by order)
    reply = json.dumps({"role": "the physician doctor", "name": "Dr. Ana Ruiz", "references": ["She"]})
    assert parse_response(reply, _ONE).character("subject").name == "Dr. Ana Ruiz"
    # only a "role" field names another character: a "character" field holding the character's name is no role
    reply = json.dumps([{"character": "Dr. Ana Ruiz", "name": "Dr. Ana Ruiz", "references": ["She"]}])
    assert parse_response(reply, _ONE).character("subject").name == "Dr. Ana Ruiz"


@pytest.mark.parametrize("extra", ["full", "first"])
def test_a_reworded_name_key_that_holds_the_roles_words_goes_to_that_role(extra):
    # "needy patient's full name" held no role's words alone: the two names went by key order, exchanged
    reply = json.dumps({f"needy patient's {extra} name": "Tom", f"doctor's {extra} name": "Ana",
                        "doctor references": ["She"], "needy patient references": ["him", "his"]})
    got = parse_response(reply, STORY)
    assert [c.name for c in got.characters] == ["Ana", "Tom"]


def test_an_unquoted_list_item_cut_at_max_tokens_is_dropped():
    story = StoryInput("s1", "Dr. Tom Lee met Ana, a needy patient. He listened as she spoke of herself and "
                             "her cough.",
                       (RoleSpec("subject", "doctor"), RoleSpec("object", "needy patient")))
    head = ("{doctor name: Dr. Tom Lee, needy patient name: Ana, doctor references: [He], "
            "needy patient references: [she, her, ")
    for tail in ("he", '"he', "'he"):  # "herself" cut short: "he" gave her a man's pronoun
        assert parse_response(head + tail, story, cut=True).character("object").references == ("she", "her")
    # an unquoted value after a key's ":" likewise: "An" of "Ana" was her name, status ok (quoted, it was dropped)
    cut = "{doctor name: Dr. Tom Lee, doctor references: [He], needy patient references: [she], needy patient name: An"
    for reply in (cut, cut.replace("name: An", 'name: "An')):
        with pytest.raises(ParseError, match="parseable|missing key"):
            parse_response(reply, story, cut=True)


def test_an_outage_that_takes_a_storys_attempts_leaves_a_backend_failure_not_an_unparseable_story():
    """Two 503s and one bad greedy reply were "unparseable reply ... in 3 attempt(s)" after one reply, a status no
    rerun labels again; the story's labels would have depended on the outage."""
    from harness.labelling.base import BACKEND_FAILURE

    def reply(call, r):
        if call < 2:
            return GenResult(r.request_id, "", "error", error="HTTP 503: Service Unavailable")
        return GenResult(r.request_id, "I cannot answer in JSON.", "stop")

    out = LLMLabeller(CannedBackend(reply), max_attempts=3).label([STORY])[0]
    assert out.status.startswith(BACKEND_FAILURE) and "took 2 of 3 attempt(s)" in out.status
    assert "the model's 1 reply: unparseable reply" in out.status
    # every attempt a reply: the story's own failure, as before
    out = LLMLabeller(CannedBackend(lambda c, r: GenResult(r.request_id, "no json", "stop")), max_attempts=3
                      ).label([STORY])[0]
    assert out.status.startswith("llm: unparseable reply") and out.status.endswith("in 3 attempt(s)")


def test_an_error_result_without_its_message_is_a_backend_failure_not_a_traceback():
    def reply(call, r):
        return GenResult(r.request_id, "", "error") if call == 0 else GenResult(r.request_id, GOOD, "stop")

    assert LLMLabeller(CannedBackend(reply), max_attempts=3).label([STORY])[0].status == "ok"
    out = LLMLabeller(CannedBackend(lambda c, r: GenResult(r.request_id, "", "error")), max_attempts=2
                      ).label([STORY])[0]
    assert out.status == "llm: backend error: no result returned in 2 attempt(s)"


def test_a_refusal_of_twice_the_tokens_is_not_the_storys_and_its_retries_go_at_the_tokens_taken():
    """A server that checks prompt + max_tokens against its context refused the doubled retry of a cut reply
    ("maximum context length ... in the completion"), read as the story's own prompt refused: failed at once."""
    def reply(call, r):
        if call == 0:
            return GenResult(r.request_id, GOOD[:-30], "length")
        if backend.calls[-1] > 256:
            return GenResult(r.request_id, "", "error", error="HTTP 400: This model's maximum context length is 700 "
                             "tokens. However, you requested 912 tokens (400 in the messages, 512 in the completion).")
        return GenResult(r.request_id, GOOD, "stop")

    backend = CannedBackend(reply)
    out = LLMLabeller(backend, params=GenParams(temperature=0.0, max_tokens=256), max_attempts=3).label([STORY])[0]
    assert out.status == "ok" and backend.calls == [256, 512, 256]
    # a story whose own prompt is refused is still kept with that reason at once
    backend = CannedBackend(lambda c, r: GenResult(r.request_id, "", "error", error="HTTP 400: This model's maximum "
                                                   "context length is 300 tokens. However, you requested 656 tokens"))
    out = LLMLabeller(backend, max_attempts=3).label([STORY])[0]
    assert out.status.startswith("llm: the backend refused the story's request") and len(backend.calls) == 1


_REFUSED_TWICE = ("HTTP 400: This model's maximum context length is 700 tokens. However, you requested 912 tokens "
                  "(400 in the messages, 512 in the completion).")


@pytest.mark.parametrize("replies, attempts, status", [
    # the doubled request refused on the last attempt: the cut reply as it stands, as a last attempt reads one
    (["cut", "refused"], 2, "ok"),
    # ... and where it does not parse, its parse error is the status (it was the refusal)
    (["stub", "refused"], 2, "llm: unparseable reply (no JSON object"),
    # outages, counted apart from the refusal (it was charged to them: "took 3 of 4")
    (["503", "cut", "refused", "503"], 4, "llm: backend error took 2 of 4 attempt(s) (HTTP 503: busy); the model's "
                                           "1 reply: unparseable reply (reply cut short"),
])
def test_a_refusal_of_twice_the_tokens_neither_loses_the_cut_reply_nor_counts_as_an_outage(replies, attempts, status):
    """A cut reply, then its request of twice the tokens refused on the last attempt: the story was kept failed with
    the refusal, neither its last parse error nor an outage a rerun labels again, though the cut reply reads as a
    last attempt's does. And the final status charged the refusal to the outage."""
    def reply(call, r):
        kind = replies[min(call, len(replies) - 1)]
        if kind in ("cut", "stub"):
            return GenResult(r.request_id, GOOD[:-8] if kind == "cut" else "Sure! Here", "length")
        return GenResult(r.request_id, "", "error", error="HTTP 503: busy" if kind == "503" else _REFUSED_TWICE)

    backend = CannedBackend(reply)
    labeller = LLMLabeller(backend, params=GenParams(temperature=0.0, max_tokens=256), max_attempts=attempts)
    (out,) = labeller.label([STORY])
    assert out.status.startswith(status) and len(labeller.failures) == len(replies)
    if status == "ok":
        assert out == parse_response(GOOD[:-8], STORY, cut=True)


@pytest.mark.parametrize("roles, keys", [
    (("doctor", "needy patient"), ("First Character", "Second Character")),
    (("first friend", "second friend"), ("Character 1", "Character 2")),
    (("first friend", "second friend"), ("friend 1", "friend 2")),
    (("first friend", "second friend"), ("friend one", "friend two")),
    (("first friend", "second friend"), ("Friend A", "Friend B")),
    (("first friend", "second friend"), ("first friend", "second friend")),  # the roles' own words, as before
    (("doctor", "needy patient"), ("doctor", "patient")),  # a role's words, as before
])
@pytest.mark.parametrize("layout", ["flat", "nested"])
def test_keys_that_number_the_characters_go_to_the_roles_of_those_places(roles, keys, layout):
    """"Second Character name", "Character 2", "friend 2", "friend two", "Friend B" hold no role's words, so they
    went to the roles by the reply's key order: a reply that listed the second character first was read with the
    two exchanged, status ok. Now the key's ordinal says whose it is, the first role's or the second's."""
    story = StoryInput("s", "Maya met Liam at the clinic. She listened to him.",
                       (RoleSpec("subject", roles[0]), RoleSpec("object", roles[1])))
    first, second = keys
    if layout == "flat":
        reply = json.dumps({f"{second} name": "Liam", f"{first} name": "Maya", f"{second} references": ["him"],
                            f"{first} references": ["She"]})
    else:
        reply = json.dumps({second: {"name": "Liam", "references": ["him"]},
                            first: {"name": "Maya", "references": ["She"]}})
    lab = parse_response(reply, story)
    assert [(c.name, c.references) for c in lab.characters] == [("Maya", ("She",)), ("Liam", ("him",))]


def test_an_ordinal_beside_a_role_s_words_is_no_place_in_the_prompt():
    # a guard for the ordinals (it passed before them): "first patient" is the needy patient's, whatever its "first"
    # says; read as the first role's, the doctor's, it would take Tom, so it is left to the other rules (key order)
    reply = json.dumps({"physician name": "Dr. Ana Ruiz", "first patient name": "Tom",
                        "physician references": ["She"], "first patient references": ["him", "his"]})
    lab = parse_response(reply, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]


def test_an_example_whose_names_are_not_in_the_story_ranks_below_the_answer():
    """The answer was the object keeping the most names and references: an example written before it, whose names
    the story check drops ("Dr. John Smith", "Mary") but whose references are common pronouns of the story ("he",
    "him", "his", "she", "her"), kept more words than the answer and won, both names lost and each role given the
    other's pronouns. Now an object whose names are all dropped ranks below one whose names are kept."""
    story = StoryInput("s1", STORY.text + " He thanked her.", STORY.roles)
    example = json.dumps({"doctor name": "Dr. John Smith", "needy patient name": "Mary",
                          "doctor references": ["he", "him", "his"], "needy patient references": ["she", "her"]})
    answer = json.dumps({"doctor name": "Dr. Ana Ruiz", "needy patient name": "Tom", "doctor references": ["She"],
                         "needy patient references": ["him"]})
    lab = parse_response("Example: " + example + "\nAnswer: " + answer, story)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him",))]
    # an answer with one name the story check drops ("Thomas" for Tom) keeps the other: it still outranks the example
    partly = json.dumps({"doctor name": "Dr. Ana Ruiz", "needy patient name": "Thomas", "doctor references": ["She"],
                         "needy patient references": ["him"]})
    lab = parse_response("Example: " + example + "\nAnswer: " + partly, story)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), (None, ("him",))]
    # an answer that names nobody ("Unspecified") is not ranked down: it gives no name to drop
    nobody = json.dumps({"doctor name": "Unspecified", "needy patient name": "Unspecified",
                         "doctor references": ["She"], "needy patient references": ["him", "his"]})
    lab = parse_response(example + "\n" + nobody, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [(None, ("She",)), (None, ("him", "his"))]


_EXAMPLE = json.dumps({"doctor name": "Dr. John Smith", "needy patient name": "Mary",
                       "doctor references": ["he", "him"], "needy patient references": ["She"]})


@pytest.mark.parametrize("cut_at", [-8, 40])  # in the last list; before the object holds every key
def test_an_answer_cut_at_max_tokens_after_an_example_is_retried_with_more_tokens(cut_at):
    """A reply cut at max_tokens inside its answer, after an example object, returned the example ("an answer,
    then more cut short"): status ok, no retry, the doctor labelled "him" and the patient "She". Now the cut object,
    closed as it stands, outranks the example, so the reply raises and the story is sent again with twice the
    tokens. An answer followed by a cut copy of itself is still the answer (test_an_answer_then_an_object_cut_...)."""
    whole = "For example, a reply looks like " + _EXAMPLE + "\nFor this story:\n" + GOOD
    cut = whole[:cut_at] if cut_at < 0 else whole[:len(whole) - len(GOOD) + cut_at]
    with pytest.raises(ParseError, match="cut short"):
        parse_response(cut, STORY, cut=True, retry_cut=True)
    backend = CannedBackend(lambda call, r: GenResult(r.request_id, cut if call == 0 else whole,
                                                      "length" if call == 0 else "stop"))
    (out,) = LLMLabeller(backend, params=GenParams(temperature=0.0, max_tokens=32), max_attempts=3).label([STORY])
    assert out.status == "ok" and backend.calls == [32, 64]
    assert [(c.name, c.references) for c in out.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]
    for repeat in (GOOD + "\n" + GOOD[:-8], GOOD + "\n" + GOOD[:40]):  # the answer, then a cut copy of it
        assert parse_response(repeat, STORY, cut=True, retry_cut=True) == parse_response(GOOD, STORY)


@pytest.mark.parametrize("answer", [
    '{"doctor name": "Dr. Ana Ruiz", "needy patient name": "Tom", "doctor references": ["She"}, '
    '"needy patient references": ["him", "his"]}',  # a bracket closed by a brace
    GOOD.replace("references", "pronouns"),
])
def test_an_example_before_an_answer_that_does_not_parse_is_retried_not_taken_for_the_answer(answer):
    """The example was the only object that read, so it was the answer: status ok, no retry, its references that
    are words of the story given to the roles (the doctor "him", the patient "She"). The same reply with the
    prompt's type definition before the answer was retried (test_a_copied_type_definition_before_an_answer_...);
    now this one is too. Lines of keys after an answer (a note on it) are not an answer that failed to parse."""
    reply = "For example: " + _EXAMPLE + "\nFor this story:\n" + answer
    with pytest.raises(ParseError, match="then answers in a form that does not parse"):
        parse_response(reply, STORY)
    labeller = LLMLabeller(ScriptedBackend({build_prompt(STORY): [reply, GOOD]}), max_attempts=3)
    (out,) = labeller.label([STORY])
    assert out.status == "ok" and len(labeller.failures) == 1
    assert [(c.name, c.references) for c in out.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]
    note = GOOD + "\nWhy:\n- doctor name: Dr. Ana Ruiz is named first.\n- needy patient name: Tom."
    assert parse_response(note, STORY) == parse_response(GOOD, STORY)


def test_an_example_then_the_answer_in_lines_of_keys_is_labelled_with_the_lines():
    """An example object, then the answer written as "key: value" lines: the example was the only object, so it was
    the answer, its references that are words of the story given to the wrong roles and both names lost. Now lines
    after objects whose names the story check all drops are read, and taken where they outrank them; lines after
    an answer whose names are kept are still a note on it; lines cut at max_tokens are sent again."""
    lines = ("- **Doctor name:** Dr. Ana Ruiz\n- **Doctor references:** She\n- **Needy patient name:** Tom\n"
             "- **Needy patient references:** him, his\n")
    reply = "For example: " + _EXAMPLE + "\nFor this story:\n" + lines
    lab = parse_response(reply, STORY)
    assert [(c.name, c.references) for c in lab.characters] == [("Dr. Ana Ruiz", ("She",)), ("Tom", ("him", "his"))]
    with pytest.raises(ParseError, match="cut short in its lines"):
        parse_response(reply[:-5], STORY, cut=True, retry_cut=True)
    # lines without the prompt's keys are no answer: the example stays
    assert parse_response("For example: " + _EXAMPLE + "\n- Doctor name: Unspecified\n", STORY) == parse_response(
        _EXAMPLE, STORY)
    note = GOOD + "\nWhy:\n- doctor name: Ana.\n- needy patient name: Tom.\n- doctor references: she, her, him, his"
    assert parse_response(note, STORY) == parse_response(GOOD, STORY)


def test_a_story_the_backend_refuses_is_in_the_failures_too():
    """A story whose request the backend refused (a prompt over the model's context) was kept failed with the reason,
    but its attempt was missing from ``failures``, documented as every failed attempt (what the benchmarks count)."""
    error = "HTTP 400: This model's maximum context length is 300 tokens"
    labeller = LLMLabeller(CannedBackend(lambda call, r: GenResult(r.request_id, "", "error", error=error)),
                           max_attempts=3)
    (out,) = labeller.label([STORY])
    assert out.status == f"llm: the backend refused the story's request: {error}"
    assert labeller.failures == [("s1", 0, f"the backend refused the story's request: {error}")]


def test_a_retry_samples_where_top_k_1_kept_the_greedy_reply():
    """A retry is sampled (temperature at least 0.7); a ``top_k`` of 1 kept one token whatever the temperature, so
    every retry repeated the greedy reply that failed. The retry lifts it; other cuts are kept."""
    for top_k, retry_top_k in ((1, -1), (5, 5), (-1, -1)):
        seen = []

        def reply(call, r, seen=seen):
            return GenResult(r.request_id, "no JSON here", "stop")

        backend = CannedBackend(reply)
        generate = backend.generate

        def recording(requests, params, *, progress=False, seen=seen, generate=generate):
            seen.append((params.temperature, params.top_k))
            return generate(requests, params, progress=progress)

        backend.generate = recording
        (out,) = LLMLabeller(backend, params=GenParams(temperature=0.0, top_k=top_k, max_tokens=32),
                             max_attempts=2).label([STORY])
        assert seen == [(0.0, top_k), (0.7, retry_top_k)] and out.status.startswith("llm")


def test_a_reply_nested_too_deep_is_unparseable_not_a_batch_failure():
    """A name nested in 600 lists raised RecursionError out of the parser: the labeller's batch caught only
    ParseError, so the whole batch was labelled again story by story (a batchmate's failed attempt recorded twice,
    the nested story's never). Now it is an unparseable reply, retried and recorded as any other."""
    deep = GOOD.replace('"Tom"', "[" * 600 + '"Tom"' + "]" * 600)
    with pytest.raises(ParseError, match="too deep"):
        parse_response(deep, STORY)
    other = StoryInput("s2", "Kim taught Lee. She smiled at him.", (RoleSpec("subject", "teacher"),))
    backend = ScriptedBackend({build_prompt(STORY): [deep], build_prompt(other): [
        "no JSON here", '{"teacher name": "Kim", "teacher references": ["She"]}']})
    labeller = LLMLabeller(backend, max_attempts=2)
    out = labeller.label([STORY, other], batch_size=8)
    assert out[0].status.startswith("llm: unparseable reply (reply nests") and out[1].status == "ok"
    assert sorted((sid, attempt) for sid, attempt, _ in labeller.failures) == [("s1", 0), ("s1", 1), ("s2", 0)]
    assert len(backend.calls) == 2


def test_a_bad_server_address_or_model_is_a_one_line_error_naming_the_option():
    """`harness label eval --llm-backend openai --llm-base-url 127.0.0.1:8000/v1` (no http://) was pydantic's
    traceback of 55 lines, exit 1; a missing --llm-model was named `model.path`, which `harness label` has not."""
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^llm labeller: base_url \(--llm-base-url\) '127.0.0.1:8000/v1': must be "
                                          r"the server's http:// or https:// address"):
        LLMLabeller(engine="openai", base_url="127.0.0.1:8000/v1")
    with pytest.raises(ConfigError, match=r"^llm labeller: model \(--llm-model\): './no-such-dir' does not exist"):
        LLMLabeller(model="./no-such-dir")


def test_a_reply_without_an_object_says_which_way_it_has_none_and_odd_values_read_as_text_or_fail():
    from harness.labelling.llm import _name_list, _ref_list

    for reply, says in (("", "no JSON object in the reply"), ("The subject is Ana.", "no JSON object in the reply"),
                        ("Here: { subject name", "reply holds a '{' but no parseable JSON object")):
        with pytest.raises(ParseError, match=f"^{re.escape(says)}$"):
            parse_json_object(reply)
    assert _name_list(7) == ["7"] and _ref_list(None) == [] and _ref_list("she; her,") == ["she", " her"]
    with pytest.raises(ParseError, match="^references must be a list, got int$"):
        _ref_list(5)
