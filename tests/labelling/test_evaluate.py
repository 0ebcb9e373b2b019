"""Table S8 scoring, checked against a hand count, and the data readers."""

from __future__ import annotations

import json
import math
import re

import pytest

from harness.errors import DataError
from harness.labelling.base import CharacterLabel, StoryLabels
from harness.labelling.data import load_gold, parse_row
from harness.labelling.evaluate import JSON_KEYS, score


def _row(i, domain, subj, gold_s, obj=None, gold_o=None, model="m1", condition="neutral"):
    roles = {"subject": subj} | ({"object": obj} if obj else {})
    labels = {"subject": gold_s} | ({"object": gold_o} if obj else {})
    return parse_row({"id": f"g{i}", "domain": domain, "model": model, "roles": roles, "condition": condition,
                      "text": TEXTS[i], "labels": labels}, f"g{i}", f"row {i}")


TEXTS = {
    0: "Ana Ruiz saw Tom. She smiled at him.",
    1: "The doctor worked. He was tired.",
    2: "Jo sang. They smiled.",
    3: "Dr. Ben Stone helped. Everyone thanked him.",
    4: "Mia ran. Her brother watched him.",
    5: "Zoe read.",
}


def _case():
    gold = [
        _row(0, "Labor", "doctor", {"name": "Ana Ruiz", "gender": "Female"}, "needy patient",
             {"name": "Unspecified", "gender": "Male"}, condition="laden"),
        _row(1, "Labor", "doctor", {"name": "['Unspecified']", "gender": "Unspecified"}),
        _row(2, "Love", "first friend", {"name": "Jo", "gender": "Non-binary"}, model="m2"),
        _row(3, "Love", "first friend", {"name": "Ben", "gender": "Male"}, model="m2"),
        _row(4, "Learning", "student", {"name": "['Mia']", "gender": "Female"}),
        _row(5, "Learning", "student", {"name": "Zoe", "gender": None}),
    ]
    C = CharacterLabel
    labels = [
        StoryLabels("g0", (C("subject", "Ana Ruiz", ("She",)), C("object", "Tom", ("She",)))),  # F ok; F for M
        StoryLabels("g1", (C("subject", None, ("He",)),)),  # M where gold Unspecified
        StoryLabels("g2", (C("subject", "jo", ()),)),  # no gender (recall miss); name matches case-insensitively
        StoryLabels("g3", (C("subject", "Dr. Ben Stone", ("him",)),)),  # M ok; first name Ben
        StoryLabels("g4", (C("subject", None, ("Her", "him")),)),  # Unsure (recall miss); name missed
        StoryLabels("g5", (C("subject", None, ()),)),  # gold gender null: left out; name missed
    ]
    return gold, labels


def test_score_matches_hand_count():
    gold, labels = _case()
    rep = score(gold, labels, labeller="x", seconds=2.0)
    # gender: predicted F/M/NB = g0s F(ok), g0o F(wrong), g1 M(wrong), g3 M(ok) -> P = 2/4
    #         gold F/M/NB = g0s, g0o, g2, g3, g4 -> correct g0s, g3 -> R = 2/5
    assert (rep.gender.tp_p, rep.gender.n_p, rep.gender.tp_r, rep.gender.n_r) == (2, 4, 2, 5)
    assert rep.gender.precision == pytest.approx(0.5) and rep.gender.recall == pytest.approx(0.4)
    # names: predicted first names Ana(ok), Tom(gold none), jo(ok), Ben(ok) -> P = 3/4
    #        gold first names Ana, Jo, Ben, Mia, Zoe -> R = 3/5
    assert (rep.name.tp_p, rep.name.n_p, rep.name.tp_r, rep.name.n_r) == (3, 4, 3, 5)
    assert rep.confusion == {"Female": {"Female": 1, "Unsure": 1}, "Male": {"Female": 1, "Male": 1},
                             "Unspecified": {"Male": 1}, "Non-binary": {"Unspecified": 1}}
    assert rep.by_model["m2"]["gender"].precision == 1.0 and rep.by_model["m2"]["gender"].recall == 0.5
    assert rep.by_domain["Learning"]["name"].n_r == 2 and rep.by_domain["Learning"]["name"].tp_r == 0
    assert math.isnan(rep.by_domain["Learning"]["gender"].precision)  # nothing predicted there
    # per domain and condition: g0 (Labor laden) has one right gender of two predicted; g1 (Labor neutral)
    # predicts a gender where gold has none
    laden, neutral = rep.by_condition["Labor laden"]["gender"], rep.by_condition["Labor neutral"]["gender"]
    assert (laden.tp_p, laden.n_p, laden.tp_r, laden.n_r) == (1, 2, 1, 2)
    assert (neutral.tp_p, neutral.n_p, neutral.n_r) == (0, 1, 0)
    assert set(rep.by_condition) == {"Labor laden", "Labor neutral", "Love neutral", "Learning neutral"}
    out = rep.overall()
    assert tuple(out) == JSON_KEYS and out["stories"] == 6 and out["stories_per_s"] == pytest.approx(3.0)
    # an empty story is scored but no story read: it counted in stories/s (4% of the dev set's rate)
    labels = [StoryLabels(lab.story_id, lab.characters, "empty story" if k == 0 else lab.status)
              for k, lab in enumerate(labels)]
    rep = score(gold, labels, seconds=2.0)
    assert rep.stories == 6 and rep.read == 5 and rep.overall()["stories_per_s"] == pytest.approx(2.5)
    # misses by kind: gender g0o M labelled F (other gender; the subject is right, so no exchange), g1 a
    # gender where manual has none, g2 and g4 none where manual has one (Unspecified, Unsure): 2 + 3 misses
    # of precision and recall as counted above; names g0o "Tom" where manual has none, g4 and g5 missed
    assert rep.misses == {
        "gender": {"roles exchanged": 0, "gender where manual has none": 1, "no gender where manual has one": 2,
                   "other gender": 1},
        "name": {"roles exchanged": 0, "the other role's name": 0, "name where manual has none": 1,
                 "no name where manual has one": 2, "other name": 0}}
    assert json.loads(json.dumps(rep.to_dict()))["misses"] == rep.misses
    assert "gender misses by kind (characters): roles exchanged 0, gender where manual has none 1," in rep.summary()
    # the last column counts the characters with a manual gender (5; 4 have a predicted one), per group too (m2: 2, 1)
    assert "| **all** | 50.0% | 40.0% | 75.0% | 60.0% | 5 |" in rep.summary()
    assert "| model m2 | 100.0% | 50.0% | 100.0% | 100.0% | 2 |" in rep.summary()
    assert "| condition Labor laden | 50.0% | 50.0% | 50.0% | 100.0% | 2 |" in rep.summary()


def test_misses_tell_exchanged_roles_from_copies():
    def row(i, text, subj, obj):
        return parse_row({"id": f"x{i}", "domain": "Love", "model": "m", "condition": "laden", "text": text,
                          "roles": {"subject": "partner who pays the bill", "object": "other partner"},
                          "labels": {"subject": subj, "object": obj}}, f"x{i}", f"row {i}")

    none = {"name": "Unspecified", "gender": "Unspecified"}
    gold = [row(0, "Emily paid. James thanked her. He smiled.", {"name": "Emily", "gender": "Female"},
                {"name": "James", "gender": "Male"}),
            row(1, "Ana paid for her date.", {"name": "Ana", "gender": "Female"}, none),
            row(2, "Mia paid for her date. She smiled.", {"name": "Mia", "gender": "Female"}, none),
            row(3, "Ben paid. Eve smiled at him.", {"name": "Ben", "gender": "Male"}, {"name": "Eve", "gender": None})]
    C = CharacterLabel
    labels = [StoryLabels("x0", (C("subject", "James", ("He",)), C("object", "Emily", ("her",)))),  # swapped
              # Ana and her pronoun in the other role: both genders exchanged; the name is the subject's, in a
              # role the manual labels leave unnamed, and the subject's name is missed
              StoryLabels("x1", (C("subject", None, ()), C("object", "Ana", ("her",)))),
              StoryLabels("x2", (C("subject", "Mia", ("her", "She")), C("object", None, ("She",)))),  # a copy
              # Eve's gender is not labelled (null): Ben's "him" copied to her is no gender miss; her name is
              # the subject's
              StoryLabels("x3", (C("subject", "Eve", ("him",)), C("object", "Ben", ("him",))))]
    rep = score(gold, labels, n_boot=0)
    assert rep.misses["gender"] == {"roles exchanged": 4, "gender where manual has none": 1,
                                    "no gender where manual has one": 0, "other gender": 0}
    assert rep.misses["name"] == {"roles exchanged": 4, "the other role's name": 1, "name where manual has none": 0,
                                  "no name where manual has one": 1, "other name": 0}
    # the kinds partition the misses of the four figures: gender P misses x0 2, x1 1, x2 1; R misses x0 2, x1 1
    g, n = rep.gender, rep.name
    assert (g.n_p - g.tp_p, g.n_r - g.tp_r) == (4, 3) and sum(rep.misses["gender"].values()) == 5
    assert (n.n_p - n.tp_p, n.n_r - n.tp_r) == (5, 5) and sum(rep.misses["name"].values()) == 6


def test_a_miss_of_one_character_is_no_exchange_and_a_gender_where_manual_says_unsure_is_none_of_its():
    """An exchange needs each character labelled as the manual label has the other: a subject given the object's
    gender while the object is left without one is "other gender" (the object's miss a missing gender), not an
    exchange. A gender where the manual label says Unsure counts against precision, as where it says Unspecified."""
    def row(i, text, subj, obj):
        return parse_row({"id": f"y{i}", "domain": "Love", "model": "m", "condition": "laden", "text": text,
                          "roles": {"subject": "partner who pays the bill", "object": "other partner"},
                          "labels": {"subject": subj, "object": obj}}, f"y{i}", f"row {i}")

    gold = [row(0, "Emily paid. James thanked her. He smiled.", {"name": "Emily", "gender": "Female"},
                {"name": "James", "gender": "Male"}),
            row(1, "Sam paid. He smiled at her.", {"name": "Sam", "gender": "Unsure"},
                {"name": "Unspecified", "gender": "Unspecified"})]
    C = CharacterLabel
    labels = [StoryLabels("y0", (C("subject", "Emily", ("He",)), C("object", "James", ()))),  # M for F; none for M
              StoryLabels("y1", (C("subject", "Sam", ("He",)), C("object", None, ())))]  # M where manual is Unsure
    rep = score(gold, labels, n_boot=0)
    assert (rep.gender.tp_p, rep.gender.n_p, rep.gender.tp_r, rep.gender.n_r) == (0, 2, 0, 2)
    assert rep.misses["gender"] == {"roles exchanged": 0, "gender where manual has none": 1,
                                    "no gender where manual has one": 1, "other gender": 1}
    assert rep.confusion == {"Female": {"Male": 1}, "Male": {"Unspecified": 1}, "Unsure": {"Male": 1},
                             "Unspecified": {"Unspecified": 1}}


def test_an_unnamed_character_of_the_project_format_counts_against_name_precision():
    # the project format labels every name, null for a character without one: a name the labeller gives
    # "the doctor" is a miss of precision, as with "Unspecified" (a row without the key is refused:
    # test_a_left_out_label_field_of_the_project_format_is_refused_on_its_line)
    for name in (None, "Unspecified"):
        gold = [_row(1, "Labor", "doctor", {"name": name, "gender": "Male"})]
        rep = score(gold, [StoryLabels("g1", (CharacterLabel("subject", "Tom", ("He",)),))], n_boot=0)
        assert (rep.name.tp_p, rep.name.n_p, rep.name.tp_r, rep.name.n_r) == (0, 1, 0, 0), name
        assert rep.misses["name"]["name where manual has none"] == 1


def test_a_title_that_repeats_the_role_comes_off_both_names():
    # "Nurse Ana Ruiz" of a nurse is Ana, in the manual label as in the labeller's name; without the title
    # taken off, the role filter of seed 000 (a name that shares a word with the role) makes it nobody's
    gold = [_row(0, "Labor", "nurse", {"name": "Nurse Ana Ruiz", "gender": "Female"})]
    for pred in ("Ana Ruiz", "Nurse Ana"):
        rep = score(gold, [StoryLabels("g0", (CharacterLabel("subject", pred, ("She",)),))], n_boot=0)
        assert (rep.name.tp_p, rep.name.n_p, rep.name.tp_r, rep.name.n_r) == (1, 1, 1, 1), pred
    gold = [_row(0, "Labor", "nurse", {"name": "the nurse", "gender": "Female"})]  # a role noun stays no name
    rep = score(gold, [StoryLabels("g0", (CharacterLabel("subject", "Nurse", ("She",)),))], n_boot=0)
    assert (rep.name.n_p, rep.name.n_r) == (0, 0)


def test_a_labellers_name_is_one_plain_string_never_a_list():
    # "[Emily]" read as a list string raised for the whole evaluation; the audit reads it as one name
    gold = [_row(0, "Labor", "doctor", {"name": "Emily", "gender": "Female"})]
    rep = score(gold, [StoryLabels("g0", (CharacterLabel("subject", "[Emily]", ("She",)),))], n_boot=0)
    assert (rep.name.tp_p, rep.name.n_p) == (1, 1)


def test_labels_of_another_story_are_refused():
    gold, labels = _case()
    with pytest.raises(ValueError, match="labels of story 'g1' given for gold story 'g0'"):
        score(gold, [labels[1], labels[0], *labels[2:]])


def test_the_reports_details_are_strict_json():
    # `harness label eval --details` writes this: a figure with no denominator is null, never NaN
    from harness.labelling.cli import _jsonable

    gold, labels = _case()
    d = score(gold, labels, n_boot=0).to_dict()
    assert math.isnan(d["by_domain"]["Learning"]["gender"]["precision"])
    assert json.loads(json.dumps(_jsonable(d), allow_nan=False))["by_domain"]["Learning"]["gender"]["precision"] is None


def test_score_length_mismatch():
    gold, labels = _case()
    with pytest.raises(ValueError):
        score(gold, labels[:-1])


def test_readers(gold, tmp_path):
    assert len(gold) == 21
    assert {g.domain for g in gold} == {"Learning", "Labor", "Love"}
    assert all(set(g.characters) == {r.key for r in g.story.roles} for g in gold)
    audit = {"model": "PaLM2", "role_category": "Relationships", "subject": "two American friends", "object": None,
             "query": "q", "llm_response": "Ann and Bo.", "manual_subject_gender": "Unspecified",
             "manual_object_gender": "Unspecified", "manual_subject_name": "['Ann']", "manual_object_name": "['Bo']"}
    train = {"model": "ChatGPT4", "role_category": "Work", "condition": "Baseline", "subject": "cook", "object": None,
             "query": "q", "llm_response": "Jane cooks. She sings.", "correct_subject_references": "['She']",
             "correct_object_references": None, "correct_subject_name": "Jane", "correct_object_name": None}
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps(audit) + "\n\n" + json.dumps(train) + "\n")
    a, t = load_gold(p)
    assert [r.description for r in a.story.roles] == ["first friend", "second friend"]
    assert a.characters["object"].name == "['Bo']" and a.domain == "Love" and a.condition == "neutral"
    assert t.characters["subject"].references == ("She",) and t.condition == "neutral" and t.domain == "Labor"
    p.write_text(json.dumps(dict(audit, manual_subject_gender="Woman")) + "\n")
    with pytest.raises(DataError, match=r"x.jsonl:1 manual_subject_gender"):
        load_gold(p)
    p.write_text("{oops\n")
    with pytest.raises(DataError, match=r"x.jsonl:1: not valid JSON"):
        load_gold(p)
    # stories to label, not labelled ones: the message says what is missing (not "neither ... nor plain stories")
    plain = {k: v for k, v in _PROJECT_ROW.items() if k != "labels"}
    p.write_text(json.dumps(_PROJECT_ROW) + "\n" + json.dumps(plain) + "\n")
    with pytest.raises(DataError, match=r"^\S*x.jsonl:2: a story without manual labels \(no `labels`\); scoring and "
                                        r"training need the labels of each role .* `harness label label`$"):
        load_gold(p)


#: one row of the project's gold format, for the tests of bad rows
_PROJECT_ROW = {"id": "a", "domain": "Learning", "condition": "neutral", "model": "gpt",
                "roles": {"subject": "student"}, "text": "Priya ran home. She smiled.",
                "labels": {"subject": {"name": "Priya", "references": ["She"], "gender": "Female"}}}


def test_a_gold_field_of_the_wrong_type_is_refused_on_its_line(tmp_path):
    """A null model or domain takes the default (it crashed the per-group tables after all the labelling); a
    list or number where a string belongs is a one-line error naming the file, line and field."""
    proj = _PROJECT_ROW
    pub = {"model": "PaLM2", "role_category": "Work", "condition": "Baseline", "subject": "cook", "object": None,
           "query": "q", "llm_response": "Jane cooked. She smiled.", "manual_subject_gender": "Female",
           "manual_subject_name": "Jane"}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(dict(proj, model=None, domain=None)) + "\n" + json.dumps(dict(pub, model=None)) + "\n")
    a, b = load_gold(p)
    assert (a.model, a.domain, b.model) == ("hand-written", "unknown", "unknown")
    love = dict(pub, role_category="Relationships", subject=None, object="romantic partner", query="who pays")
    for row, field in ((dict(proj, model=["gpt", "v2"]), "model"), (dict(proj, domain=["Learning"]), "domain"),
                       (dict(pub, condition=["Baseline"]), "condition"), (dict(pub, role_category=["Work"]),
                                                                          "role_category"),
                       (dict(love, subject=5), "subject")):
        p.write_text(json.dumps(proj) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(DataError, match=rf"g.jsonl:2: `{field}` must be a string"):
            load_gold(p)
    p.write_text(json.dumps(dict(proj, roles={"subject": 5})) + "\n")
    with pytest.raises(DataError, match=r"g.jsonl:1: "):
        load_gold(p)


def test_a_reference_list_holding_a_null_or_a_number_is_refused_on_its_line(tmp_path):
    """A null or a number in a reference list is no word of the story: it was read as the reference "None"
    or "3" (training then said the story lacks the word 'None'); now a one-line error names the line and field."""
    proj = _PROJECT_ROW
    pub = {"model": "ChatGPT4", "role_category": "Work", "condition": "Baseline", "subject": "cook", "object": None,
           "query": "q", "llm_response": "Jane cooks. She sings.", "correct_subject_references": "['She']",
           "correct_subject_name": "Jane"}
    p = tmp_path / "g.jsonl"
    for row, field, bad in ((dict(proj, labels={"subject": dict(proj["labels"]["subject"], references=["She", None])}),
                             "labels.subject", "NoneType None"),
                            (dict(proj, labels={"subject": dict(proj["labels"]["subject"], references=[3])}),
                             "labels.subject", "int 3"),
                            (dict(pub, correct_subject_references="['She', None]"), "correct_subject_references",
                             "NoneType None")):
        p.write_text(json.dumps(proj) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(DataError, match=rf"g.jsonl:2 {field}: references must be a list of strings, got {bad}"):
            load_gold(p)
    p.write_text(json.dumps(pub) + "\n")
    assert load_gold(p)[0].characters["subject"].references == ("She",)


def test_a_misspelt_label_field_is_refused_on_its_line(tmp_path):
    """A misspelt key of the project format's labels ("gendr") left the character's gender unlabelled, so it
    dropped out of the gender figures without a word; now a one-line error names the line, role and key."""
    row = {"id": "a", "domain": "Learning", "condition": "neutral", "model": "gpt", "roles": {"subject": "student"},
           "text": "Priya ran home. She smiled.",
           "labels": {"subject": {"name": "Priya", "references": ["She"], "gendr": "Female"}}}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=r"g.jsonl:1: `labels.subject` has unknown field\(s\) gendr; allowed: gender, "):
        load_gold(p)


@pytest.mark.parametrize("key", ["correct_subjet_name", "manual_object_gendr", "correct_subject_refs"])
def test_a_misspelt_label_field_of_the_published_format_is_refused_on_its_line(tmp_path, key):
    """In the published format a misspelt label key ("correct_subjet_name") read the character as unnamed, so
    training taught its name as no name and scoring dropped it; the one-line error names the line and the key."""
    row = {"model": "ChatGPT4", "role_category": "Work", "condition": "Power Dynamic", "subject": "cashier",
           "object": "customer", "query": "q", "llm_response": "Jane helped him. He thanked her.",
           "correct_subject_references": "['her']", "correct_object_references": "['He']",
           "correct_subject_name": "Jane", "correct_object_name": None, "manual_object_gender": "Male",
           "manual_object_name": None}
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(row) + "\n")
    assert load_gold(good)[0].characters["subject"].name == "Jane"
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({**row, key: "x"}) + "\n")
    with pytest.raises(DataError, match=rf"t.jsonl:1: unknown label field '{key}'; the published format's are "
                                         r"manual_subject_name, manual_subject_gender, "):
        load_gold(p)


def test_gold_gender_follows_the_references_where_a_file_gives_no_gender(tmp_path):
    """train150's rows carry references and no gender: the gold gender is read from them (S6a), as the
    labeller's is; an empty list is Unspecified, a missing field is left out."""
    def train(i, text, subj_refs, obj_refs, obj="customer"):
        return {"model": "ChatGPT4", "role_category": "Work", "condition": "Power Dynamic", "subject": "cashier",
                "object": obj, "query": "q", "llm_response": text, "correct_subject_references": subj_refs,
                "correct_object_references": obj_refs, "correct_subject_name": "Jane", "correct_object_name": None}

    p = tmp_path / "t.jsonl"
    rows = [train(0, "Jane caught the customer. She smiled; they ran with their bag.", "['She']", "['they', 'their']"),
            train(1, "Jane waved. The customer left.", "[]", "[]"),
            train(2, "Jane helped him. He thanked her.", "['her']", None)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gold = load_gold(p)
    C = CharacterLabel
    labels = [StoryLabels("t.jsonl:1", (C("subject", "Jane", ("She",)), C("object", None, ("their",)))),
              StoryLabels("t.jsonl:2", (C("subject", "Jane", ("Jane",)), C("object", None, ()))),
              StoryLabels("t.jsonl:3", (C("subject", "Jane", ("her",)), C("object", None, ("He",))))]
    labels = [StoryLabels(g.story.story_id, lab.characters) for g, lab in zip(gold, labels)]
    rep = score(gold, labels, n_boot=0)
    # gold genders: Female, Non-binary; Unspecified, Unspecified; Female, left out (no references field)
    # predicted: Female (ok), Non-binary (ok); Unspecified, Unspecified; Female (ok); the object's Male not scored
    assert (rep.gender.tp_p, rep.gender.n_p, rep.gender.tp_r, rep.gender.n_r) == (3, 3, 3, 3)
    assert rep.confusion == {"Female": {"Female": 2}, "Non-binary": {"Non-binary": 1},
                             "Unspecified": {"Unspecified": 2}}
    # and the references decide it: Jane's "She" copied to the customer (gold Non-binary from "they", "their")
    # misses both figures
    labels[0] = StoryLabels(labels[0].story_id, (C("subject", "Jane", ("She",)), C("object", None, ("She",))))
    rep = score(gold, labels, n_boot=0)
    assert (rep.gender.tp_p, rep.gender.n_p, rep.gender.tp_r, rep.gender.n_r) == (2, 3, 2, 3)


def _scores(outcomes):
    """CharacterScores from (story id, gender right?) pairs: every character gold Female, named "Ana"."""
    from harness.labelling.evaluate import CharacterScore

    return [CharacterScore(sid, f"r{k}", "m", "Labor", "Female", "Female" if ok else "Male", "ana",
                           "ana" if ok else "bob", True) for k, (sid, ok) in enumerate(outcomes)]


def test_difference_is_this_report_minus_the_baseline():
    """``EvalReport.difference``: this labeller's figures minus the baseline's, signed (hand count: the
    fixed labels of g1 and g4 take gender P 2/4 -> 3/4, g0's object still Female for Male, and R 2/5 -> 3/5)."""
    gold, labels = _case()
    C = CharacterLabel
    fixed = list(labels)
    fixed[1] = StoryLabels("g1", (C("subject", None, ()),))  # no gender where gold has none
    fixed[4] = StoryLabels("g4", (C("subject", "Mia", ("Her",)),))  # Female and Mia, as gold
    base, better = score(gold, labels, n_boot=0), score(gold, fixed, n_boot=0)
    diff = better.difference(base, n_boot=200)
    assert diff["gender_precision"][0] == pytest.approx(3 / 4 - 2 / 4)
    assert diff["gender_recall"][0] == pytest.approx(3 / 5 - 2 / 5)
    assert diff["name_precision"][0] == pytest.approx(4 / 5 - 3 / 4)  # Mia right: 4 of 5 predicted names
    assert diff["name_recall"][0] == pytest.approx(4 / 5 - 3 / 5)
    assert base.difference(better, n_boot=200)["gender_recall"][0] == pytest.approx(-0.2)


def test_failed_counts_stories_not_fully_labelled():
    """``failed``: stories whose status is neither ok nor an empty story (an LLM reply that did not parse, a
    story cut at the encoder's length); the summary says so."""
    gold, labels = _case()
    labels = list(labels)
    labels[1] = StoryLabels("g1", labels[1].characters, "truncated")
    labels[2] = StoryLabels("g2", labels[2].characters, "parse error: no JSON object")
    labels[5] = StoryLabels("g5", labels[5].characters, "empty story")
    rep = score(gold, labels, n_boot=0)
    assert rep.failed == 2 and score(*_case(), n_boot=0).failed == 0
    assert "6 stories (2 not fully labelled" in rep.summary()
    assert rep.overall()["failed"] == 2  # and `--json` says so: a labeller of unparsed replies is not a clean one


def test_intervals_count_what_the_figures_count():
    from harness.labelling.evaluate import _counts, _pr, score_characters

    gold, labels = _case()
    chars = score_characters(gold, labels)
    sums = _counts(chars).sum(0).tolist()
    pr = _pr(chars)
    assert sums == [pr["gender"].tp_p, pr["gender"].n_p, pr["gender"].tp_r, pr["gender"].n_r,
                    pr["name"].tp_p, pr["name"].n_p, pr["name"].tp_r, pr["name"].n_r]
    # a character out of a figure (no manual gender, a name not labelled) is out of its resampled counts too,
    # though the labeller gave it a gender and a name
    from harness.labelling.evaluate import CharacterScore

    out = [CharacterScore("s0", "subject", "m", "Labor", None, "Male", None, "bob", False),
           CharacterScore("s1", "subject", "m", "Labor", "Female", "Female", "ana", "ana", True)]
    pr = _pr(out)
    assert _counts(out).sum(0).tolist() == [1, 1, 1, 1, 1, 1, 1, 1] == [
        pr["gender"].tp_p, pr["gender"].n_p, pr["gender"].tp_r, pr["gender"].n_r,
        pr["name"].tp_p, pr["name"].n_p, pr["name"].tp_r, pr["name"].n_r]
    rep = score(gold, labels)
    for k, (lo, hi) in rep.intervals.items():
        assert lo <= rep.overall()[k] <= hi
    assert "95% intervals (stories resampled" in rep.summary()
    assert score(gold, labels, n_boot=0).intervals == {}


def test_intervals_of_independent_characters_match_wilson():
    """One character per story: the story bootstrap is the plain binomial bootstrap, whose
    interval at n = 1,000 agrees with the Wilson interval to a few tenths of a point."""
    from harness.labelling.evaluate import figure_intervals
    from harness.stats.intervals import wilson_interval

    from scipy.stats import norm

    chars = _scores([(f"s{i}", i % 20 != 0) for i in range(1000)])  # 950 of 1,000 right
    for alpha in (0.05, 0.10):  # 95% by default; 90% on request, about 0.84 of the 95% width
        kw = {"alpha": alpha} if alpha != 0.05 else {}
        lo, hi = figure_intervals(chars, n_boot=4000, **kw)["gender_precision"]
        wlo, whi = wilson_interval(950, 1000, z=norm.ppf(1 - alpha / 2))
        assert abs(lo - wlo) < 0.004 and abs(hi - whi) < 0.004
        assert 0.95 < (hi - lo) / (whi - wlo) < 1.05  # the width, so a 90% or 98% default fails


def test_a_figure_without_variation_has_no_interval_rather_than_one_of_zero_width():
    """All 100 right, or one story: every resample gives the same figure, and the percentiles printed
    "100.0%-100.0%" (Wilson: 96.3-100). Now n/a, as the statistics module withholds such intervals."""
    import math

    from harness.labelling.evaluate import figure_intervals

    for chars in (_scores([(f"s{i}", True) for i in range(100)]), _scores([("s0", True), ("s0", False)])):
        lo, hi = figure_intervals(chars, n_boot=500)["gender_precision"]
        assert math.isnan(lo) and math.isnan(hi)
    lo, hi = figure_intervals(_scores([(f"s{i}", i != 0) for i in range(200)]), n_boot=500)["gender_precision"]
    assert lo < 0.995 < hi <= 1.0  # one miss: resamples vary, an interval is shown


def _distinct(n: int, fixed: int = 0):
    """``n`` one-character stories whose four figures differ: gender gold Female, predicted Unspecified in every
    4th (a recall miss), Male in every 10th (a miss of both), both right among the first ``fixed`` stories; name
    gold "ana" in every other, predicted "ana" but in every 8th, "bob" in every 5th."""
    from harness.labelling.evaluate import CharacterScore

    def gender(i: int) -> str:
        return "Female" if i < fixed else "Unspecified" if i % 4 == 0 else "Male" if i % 10 == 5 else "Female"

    return [CharacterScore(f"s{i}", "subject", "m", "Labor", "Female", gender(i), "ana" if i % 2 else None,
                           None if i % 8 == 1 else "bob" if i % 5 == 3 else "ana", True) for i in range(n)]


def test_each_interval_is_its_own_figures():
    """The four figures differ (gender P 0.867, R 0.650, name P 0.343, R 0.600), and each interval matches its own
    figure's Wilson interval: with figures alike in every other test, intervals given to the wrong keys passed."""
    from harness.labelling.evaluate import _pr, difference_intervals, figure_intervals
    from harness.stats.intervals import wilson_interval

    chars = _distinct(2000)
    pr = _pr(chars)
    counts = {"gender_precision": (pr["gender"].tp_p, pr["gender"].n_p), "gender_recall": (pr["gender"].tp_r,
              pr["gender"].n_r), "name_precision": (pr["name"].tp_p, pr["name"].n_p),
              "name_recall": (pr["name"].tp_r, pr["name"].n_r)}
    assert len({round(k / n, 3) for k, n in counts.values()}) == 4
    for key, (lo, hi) in figure_intervals(chars, n_boot=4000).items():
        wlo, whi = wilson_interval(*counts[key])
        assert abs(lo - wlo) < 0.006 and abs(hi - whi) < 0.006, key
    # the first 800 stories right (200 Unspecified and 80 Male fixed): gender P and R move apart, names not at all
    diff = difference_intervals(chars, _distinct(2000, fixed=800))
    assert diff["gender_precision"][0] == pytest.approx(1580 / 1700 - 1300 / 1500)
    assert diff["gender_recall"][0] == pytest.approx(1580 / 2000 - 1300 / 2000)
    for key, (d, lo, hi) in diff.items():
        assert (d, lo, hi) == (0.0, 0.0, 0.0) if key.startswith("name") else lo < d < hi and hi - lo < d, key


def test_intervals_widen_when_a_storys_characters_err_together():
    """The same 2,000 characters as 1,000 two-character stories whose characters are both right
    or both wrong (an exchange of two labels): the interval widens by about sqrt(2)."""
    from harness.labelling.evaluate import figure_intervals

    single = _scores([(f"s{i}", i % 20 != 0) for i in range(2000)])
    paired = _scores([(f"s{i // 2}", (i // 2) % 20 != 0) for i in range(2000)])
    width = [hi - lo for lo, hi in (figure_intervals(c, n_boot=4000)["gender_recall"] for c in (single, paired))]
    assert 1.25 < width[1] / width[0] < 1.6


def test_difference_intervals_are_paired():
    """B fixes 15 of A's 100 wrong characters out of 1,000 (+1.5 points): the paired interval
    excludes 0 and is narrower than the two unpaired intervals' overlap suggests; A against
    itself differs by exactly 0 in every replicate."""
    from harness.labelling.evaluate import difference_intervals, figure_intervals

    a = _scores([(f"s{i}", i % 10 != 0) for i in range(1000)])
    b = _scores([(f"s{i}", i % 10 != 0 or i < 150) for i in range(1000)])
    d, lo, hi = difference_intervals(a, b)["gender_precision"]
    # the paired Wald interval of 15 discordant characters of 1,000, all one way:
    # 0.015 +- 1.96 sqrt(15 / 1000^2 - 0.015^2 / 1000) = (0.0075, 0.0225)
    assert d == pytest.approx(0.015) and abs(lo - 0.0075) < 0.0015 and abs(hi - 0.0225) < 0.0015
    ia, ib = figure_intervals(a)["gender_precision"], figure_intervals(b)["gender_precision"]
    assert ib[0] < ia[1]  # unpaired, the two intervals overlap
    assert difference_intervals(a, a)["name_recall"] == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="different stories"):
        difference_intervals(a, b[:-1])
    # one story: a difference the resamples cannot move has no interval (it read "+50.0 (+50.0 to +50.0)")
    import math

    one_a, one_b = _scores([("s0", True), ("s0", False)]), _scores([("s0", True), ("s0", True)])
    d, lo, hi = difference_intervals(one_a, one_b, n_boot=200)["gender_precision"]
    assert d == pytest.approx(0.5) and math.isnan(lo) and math.isnan(hi)
    # two labellers that differ but score alike: A genders only the subjects, B the objects too, both always
    # right (precision 100% each, no interval of its own): the 0 had the interval "+0.0 (+0.0 to +0.0)"
    from harness.labelling.evaluate import CharacterScore

    def scored(pred_object: str) -> list[CharacterScore]:
        return [CharacterScore(f"s{i}", role, "m", "Labor", gold, pred, None, None, True)
                for i in range(10) for role, gold, pred in (("subject", "Female", "Female"),
                                                            ("object", "Male", pred_object))]

    diff = difference_intervals(scored("Unspecified"), scored("Male"), n_boot=300)
    assert diff["gender_precision"][0] == 0 and all(math.isnan(x) for x in diff["gender_precision"][1:])
    assert diff["gender_recall"][0] == pytest.approx(0.5)


def test_a_gold_domain_outside_the_three_is_refused_on_its_line(tmp_path):
    from harness.labelling.data import load_gold

    row = {"id": "a", "text": "Ana helped Bo.", "roles": {"subject": "helper"}, "domain": "Foo",
           "labels": {"subject": {"name": "Ana", "references": [], "gender": "Female"}}}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=r"g.jsonl:1.*domain 'Foo'; use Learning, Labor or Love"):
        load_gold(p)
    p.write_text(json.dumps({**row, "domain": "Love", "love_type": "romantic partner"}) + "\n")
    assert load_gold(p)[0].love_type == "romantic"  # the published spelling, as the tables read it


def test_a_null_story_id_takes_the_files_name_and_line(tmp_path):
    """``"id": null`` (``"story_id": null``) made the story id "None", so a second one was refused as a repeat of
    it; a null id is no id: the story is named by its file and line, as a row without one is."""
    from harness.labelling.data import read_stories

    row = {"id": None, "domain": "Learning", "condition": "neutral", "model": "gpt", "roles": {"subject": "student"},
           "text": "Priya ran home. She smiled.",
           "labels": {"subject": {"name": "Priya", "references": ["She"], "gender": "Female"}}}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    assert [g.story.story_id for g in load_gold(p)] == ["g:1", "g:2"]
    plain = {"story_id": None, "id": 7, "text": "Ana ran.", "roles": {"subject": "student"}}
    p.write_text(json.dumps(plain) + "\n" + json.dumps({**plain, "id": None}) + "\n")
    assert [s.story_id for s in read_stories(p)] == ["7", "g:2"]
    # an id that is a list or an object is no id ("['a']" was one); a role given with an empty description is
    # named as such, not as "needs 1 or 2 roles, got 0"
    for bad, message in (({**plain, "story_id": ["a"]}, r"g.jsonl:1: `story_id` must be a string or a number, got list"),
                         ({**plain, "roles": {"subject": " "}}, r"g.jsonl:1: `roles.subject` is empty; give the "
                                                                r"role's description")):
        p.write_text(json.dumps(bad) + "\n")
        with pytest.raises(DataError, match=message):
            read_stories(p)
    p.write_text(json.dumps({**row, "id": {"n": 1}}) + "\n")
    with pytest.raises(DataError, match=r"g.jsonl:1: `id` must be a string or a number, got dict"):
        load_gold(p)
    # a project or published row's `story_id` is its id (it was replaced by the file and line: labels written under
    # another id than the story's, exit 0); an id no UTF-8 file takes is refused (a traceback at the labels' write)
    p.write_text(json.dumps({**{k: v for k, v in row.items() if k != "id"}, "story_id": "abc"}) + "\n")
    assert [g.story.story_id for g in load_gold(p)] == ["abc"] and [s.story_id for s in read_stories(p)] == ["abc"]
    # a row giving both ids, different: the gold reader took `id` and the plain reader `story_id`, so `label eval`
    # and `label label` named one story twice; the same id twice (7 and "7") is one id
    p.write_text(json.dumps({**row, "id": "p1", "story_id": "s1"}) + "\n")
    for read in (load_gold, read_stories):
        with pytest.raises(DataError, match=r"g.jsonl:1: `id` \('p1'\) and `story_id` \('s1'\) name different"):
            read(p)
    p.write_text(json.dumps({**row, "id": 7, "story_id": "7"}) + "\n")
    assert [g.story.story_id for g in load_gold(p)] == ["7"] and [s.story_id for s in read_stories(p)] == ["7"]
    published = {"model": "PaLM2", "role_category": "Work", "subject": "cashier", "object": None,
                 "query": "Write a story, 100 words or less, of an American cashier who greets customers.",
                 "llm_response": "Sarah smiled.", "manual_subject_gender": "Female", "manual_subject_name": "['Sarah']"}
    p.write_text(json.dumps({**published, "story_id": "pub-7"}) + "\n" + json.dumps(published) + "\n")
    assert [s.story_id for s in read_stories(p)] == ["pub-7", "g:2"]
    for bad in ({**plain, "story_id": "\ud83d"}, {**row, "id": "a\udc00"}):
        p.write_text(json.dumps(bad) + "\n")
        with pytest.raises(DataError, match=r"g.jsonl:1: `(story_)?id` holds a lone surrogate"):
            read_stories(p)
    # a role given as 0, false, [] or {} is no "no role" (the story was labelled with its subject alone, exit 0)
    for value in (0, False, [], {}):
        p.write_text(json.dumps({**plain, "roles": {"subject": "waiter", "object": value}}) + "\n")
        with pytest.raises(DataError, match=r"g.jsonl:1: .*role 'object': description must be a non-empty string"):
            read_stories(p)
        p.write_text(json.dumps({**row, "roles": {"subject": "student", "object": value}}) + "\n")
        with pytest.raises(DataError, match=r"g.jsonl:1: .*role 'object': description must be a non-empty string"):
            load_gold(p)


_LABELLED = {"id": "a", "domain": "Learning", "condition": "neutral", "model": "gpt", "roles": {"subject": "student"},
             "text": "Priya ran home. She smiled."}


@pytest.mark.parametrize("label, field", [({}, "name"), ({"references": ["She"], "gender": "Female"}, "name"),
                                          ({"name": "Priya", "references": ["She"]}, "gender")])
def test_a_left_out_label_field_of_the_project_format_is_refused_on_its_line(tmp_path, label, field):
    """A label without its name or gender read as unlabelled: the character left that figure without a word (an
    unnamed character's invented name no longer counted against precision); null says so on purpose."""
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps({**_LABELLED, "labels": {"subject": label}}) + "\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(p))}:1: `labels.subject` has no `{field}`; give it \(null "):
        load_gold(p)


def test_a_null_gender_of_the_project_format_leaves_the_character_out_of_the_gender_figures(tmp_path):
    """Only train150's rows, which have no gender field, take their gold gender from the references; a project
    row's null gender (the reader's docstring: left out) was read from its references too."""
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps({**_LABELLED, "labels": {"subject": {"name": "Priya", "references": ["She"],
                                                                 "gender": None}}}) + "\n")
    gold = load_gold(p)
    rep = score(gold, [StoryLabels("a", (CharacterLabel("subject", "Priya", ("She",)),))])
    assert (rep.gender.n_p, rep.gender.n_r) == (0, 0)  # out of both gender figures
    assert (rep.name.n_p, rep.name.tp_p) == (1, 1)  # the name still scored


def _published(**labels):
    return {"model": "ChatGPT4", "role_category": "Work", "condition": "Baseline", "subject": "cashier",
            "object": None, "query": "q", "llm_response": "Jane helped. She smiled.", "manual_subject_name": "Jane",
            "manual_subject_gender": "Female", **labels}


@pytest.mark.parametrize("labels", [{"manual_object_gender": "Male"}, {"manual_object_name": "['Tom']"},
                                    {"correct_object_references": "['he']"}])
def test_a_published_label_of_a_role_the_row_has_not_is_refused(tmp_path, labels):
    """A power-neutral Work row has no object: its object labels were read by nothing, silently (the project
    format refuses the same); null, NaN or "Unspecified" there is the published files' way of saying none."""
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(_published(**labels)) + "\n")
    with pytest.raises(DataError, match=rf"g.jsonl:1: `{next(iter(labels))}` labels an object the row has not"):
        load_gold(p)
    p.write_text("".join(json.dumps(_published(manual_object_gender=v, manual_object_name=v)) + "\n"
                         for v in (None, "Unspecified", "None", "[]")).replace('"manual_object_gender": null',
                                                                           '"manual_object_gender": NaN'))
    assert [list(gs.characters) for gs in load_gold(p)] == [["subject"]] * 4


def test_a_nan_name_is_unlabelled_as_null_is(tmp_path):
    """pandas writes a missing name as NaN, which the reader took for a labelled "no name": a predicted name
    counted against precision where null leaves the character out of the name figures."""
    rows = [{**_published(), "manual_subject_name": v} for v in (None, float("nan"))]
    for i, row in enumerate(rows):
        p = tmp_path / f"g{i}.jsonl"
        p.write_text(json.dumps({**row, "id": f"s{i}"}) + "\n")
        rep = score(load_gold(p), [StoryLabels(f"s{i}", (CharacterLabel("subject", "Ana", ("She",)),))])
        assert rep.name.n_p == 0
        assert sum(rep.misses["name"].values()) == 0  # nor is it a miss of a figure it is out of


def test_a_nan_reference_list_is_unlabelled_as_a_nan_name_is(tmp_path):
    """A published row's missing reference list written by pandas as NaN stopped the whole gold file ("references
    must be a list of strings, got float") where a NaN name or gender reads as null."""
    p = tmp_path / "g.jsonl"
    row = {k: v for k, v in _published().items() if not k.startswith("manual_")}
    p.write_text(json.dumps({**row, "correct_subject_name": "Jane", "correct_subject_references": float("nan"),
                             "id": "s0"}) + "\n")
    assert load_gold(p)[0].characters["subject"].references is None


def test_a_published_row_written_from_a_frame_reads_its_nan_fields_as_null(tmp_path):
    """A file written from a pandas frame of both published files: NaN in `object` (a power-neutral row), in
    `condition` (a column only train150 has) or in `llm_response` stopped the file ("must be a string, got float
    nan"), where NaN in a label field was null; and null manual_* labels beside train150's correct_* ones hid
    those, the character out of every figure. NaN is null in every field; manual_* labels count where they hold
    one."""
    from harness.labelling.data import read_stories

    p = tmp_path / "g.jsonl"
    nan = float("nan")
    rows = [{**_published(object=nan, condition=nan), "manual_object_gender": nan, "manual_object_name": nan},
            {**_published(llm_response=nan, condition=nan), "id": "unwritten"},
            {**_published(manual_subject_name=nan, manual_subject_gender=None, condition=nan), "id": "train",
             "correct_subject_name": "Jane", "correct_subject_references": "['she', 'her']"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    gold = load_gold(p)
    assert [gs.story.text for gs in gold] == ["Jane helped. She smiled.", None, "Jane helped. She smiled."]
    assert [list(gs.characters) for gs in gold] == [["subject"]] * 3
    assert [gs.condition for gs in gold] == ["neutral"] * 3
    train = gold[2].characters["subject"]
    assert (train.name, train.references, train.gender_from_references) == ("Jane", ("she", "her"), True)
    assert gold[0].characters["subject"].name == "Jane" and not gold[0].characters["subject"].gender_from_references
    assert len(read_stories(p)) == 3


def test_a_repeated_gold_id_is_named_by_its_lines(tmp_path):
    """The error named the stories' numbers, which blank lines put off the file's line numbers."""
    row = {**_LABELLED, "labels": {"subject": {"name": "Priya", "references": ["She"], "gender": "Female"}}}
    p = tmp_path / "g.jsonl"
    p.write_text("\n" + json.dumps(row) + "\n\n\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match=r"story id 'a' is given twice \(line 2 and line 5 of the file\)"):
        load_gold(p)


def test_a_name_written_in_turkish_capitals_matches_its_lowercase():
    """Case folding turns "İ" into "i" and a combining dot: "İREM" scored as another name than "Irem"."""
    texts = dict(TEXTS)
    TEXTS[6] = "İREM smiled. She waved."
    try:
        gold = [_row(6, "Learning", "student", {"name": "Irem", "gender": "Female"})]
    finally:
        TEXTS.clear()
        TEXTS.update(texts)
    rep = score(gold, [StoryLabels("g6", (CharacterLabel("subject", "İREM", ("She",)),))], labeller="x", seconds=1.0)
    assert (rep.name.tp_p, rep.name.n_p, rep.name.tp_r, rep.name.n_r) == (1, 1, 1, 1)


def test_a_published_row_must_label_each_of_its_roles(tmp_path):
    """A power-laden row with its subject's manual fields alone was scored on the subject: the object left out of
    every figure, exit 0. A role without a label field is refused (null still leaves it out); a NaN gender, as
    pandas writes a missing one, is null, as a NaN name is."""
    laden = {"model": "PaLM2", "role_category": "Work", "condition": "Power Dynamic", "subject": "doctor",
             "object": "patient", "query": "q", "llm_response": "Dr. Ann Lee saw Bo. She helped him.",
             "manual_subject_gender": "Female", "manual_subject_name": "Ann Lee"}
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps(laden) + "\n")
    with pytest.raises(DataError, match=r"^\S*x.jsonl:1: no label of the object \('patient'\); give its "
                                        r"manual_object_gender and manual_object_name"):
        load_gold(p)
    p.write_text(json.dumps(dict(laden, manual_object_gender=None, manual_object_name=None)) + "\n")
    (g,) = load_gold(p)
    assert g.characters["object"].gender is None and g.characters["object"].name is None
    p.write_text(json.dumps(dict(laden, manual_object_gender=float("nan"), manual_object_name="Bo")) + "\n")
    (g,) = load_gold(p)
    assert g.characters["object"].gender is None and g.characters["object"].name == "Bo"


def test_a_published_row_gives_both_fields_of_a_label(tmp_path):
    """A published row with `manual_object_name` but no `manual_object_gender` key loaded, the object out of the gender
    figures, exit 0 (the project format refuses a left-out field); train150's pair likewise. Null is still allowed."""
    laden = {"model": "PaLM2", "role_category": "Work", "subject": "doctor", "object": "patient", "query": "q",
             "llm_response": "Dr. Ann Lee saw Bo. She helped him.", "manual_subject_gender": "Female",
             "manual_subject_name": "Ann Lee", "manual_object_name": "Bo"}
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps(laden) + "\n")
    with pytest.raises(DataError, match=r"^\S*x.jsonl:1: `manual_object_name` without `manual_object_gender`; give "
                                        r"both \(null to leave it out of the figures\)$"):
        load_gold(p)
    p.write_text(json.dumps(dict(laden, manual_object_gender=None)) + "\n")
    (g,) = load_gold(p)
    assert g.characters["object"].gender is None and g.characters["object"].name == "Bo"
    correct = {k: v for k, v in laden.items() if not k.startswith("manual_")}
    correct.update(correct_subject_name="Ann Lee", correct_subject_references="['She']",
                   correct_object_references="['him']")
    p.write_text(json.dumps(correct) + "\n")
    with pytest.raises(DataError, match=r"x.jsonl:1: `correct_object_references` without `correct_object_name`"):
        load_gold(p)
    (g,) = load_gold(_write(p, dict(correct, correct_object_name="Bo")))
    assert g.characters["object"].references == ("him",) and g.characters["object"].name == "Bo"


@pytest.mark.parametrize("condition", ["Power dinamic", "Baseline"])
def test_a_published_condition_is_known_and_fits_the_roles(tmp_path, condition):
    """A misspelt condition was ignored; "Baseline" on a row with an object (power-laden roles) moved the story to the
    neutral figures and took its characters out of every R_sub and R_mrs cell of --statistics, both silently."""
    row = {"model": "PaLM2", "role_category": "Work", "subject": "doctor", "object": "patient", "query": "q",
           "llm_response": "Dr. Ann Lee saw Bo.", "manual_subject_gender": "Female", "manual_subject_name": "Ann",
           "manual_object_gender": "Male", "manual_object_name": "Bo", "condition": condition}
    p = _write(tmp_path / "x.jsonl", row)
    said = ("but its subject and object make it 'Power Dynamic'; write 'Power Dynamic', or leave condition out"
            if condition == "Baseline" else "use Baseline or Power Dynamic, or leave it out")
    with pytest.raises(DataError, match=rf"^\S*x.jsonl:1: condition '{condition}'[,;] {re.escape(said)}$"):
        load_gold(p)
    (g,) = load_gold(_write(p, dict(row, condition="Power Dynamic")))
    assert g.condition == "laden"
    (g,) = load_gold(_write(p, {k: v for k, v in row.items() if k != "condition"}))
    assert g.condition == "laden"
    neutral = {k: v for k, v in row.items() if "object" not in k} | {"condition": "Baseline"}
    (g,) = load_gold(_write(p, neutral))
    assert g.condition == "neutral"


def _write(path, row):
    path.write_text(json.dumps(row) + "\n")
    return path


def test_a_nan_field_of_a_project_label_reads_as_null(tmp_path):
    """A project row written from a pandas frame holds NaN where its label is null: the name was kept as the name
    nan, and a NaN reference list or gender stopped the file, where null (and NaN in the published formats) reads as
    none given."""
    nan = float("nan")
    p = _write(tmp_path / "g.jsonl", {**_LABELLED, "labels": {"subject": {"name": nan, "references": nan,
                                                                           "gender": nan}}})
    (g,) = load_gold(p)
    c = g.characters["subject"]
    assert (c.name, c.references, c.gender) == (None, None, None)


@pytest.mark.parametrize("domain, condition, expected", [("Work", "Power Dynamic", ("Labor", "laden")),
                                                         ("School", "Baseline", ("Learning", "neutral")),
                                                         ("Relationships", "Baseline", ("Love", "neutral"))])
def test_a_project_row_takes_the_published_spellings_of_domain_and_condition(tmp_path, domain, condition, expected):
    """The project format's domain and condition may be written as the published data writes them (its errors say
    so): read as they are, "Work" or "Power Dynamic" was refused, or left the story out of the domain and condition
    tables of --statistics."""
    (g,) = load_gold(_write(tmp_path / "g.jsonl", {**_PROJECT_ROW, "domain": domain, "condition": condition}))
    assert (g.domain, g.condition) == expected


def test_read_stories_refuses_an_id_given_twice_naming_both_lines(tmp_path):
    """``read_stories`` reads every row, then compares the ids: two stories of one id (one as `story_id`, one as `id`)
    would share, or swap, their labels. The error names the file's lines, blank lines counted."""
    from harness.labelling.data import read_stories

    rows = [{"story_id": "s1", "text": "Ana ran.", "roles": {"subject": "doctor"}},
            {"id": "s2", "text": "Bo ran.", "roles": {"subject": "doctor"}},
            {**_PROJECT_ROW, "id": "s1"}]
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n" + json.dumps(rows[2]) + "\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(p))}: story id 's1' is given twice \(line 1 and line 4 of "
                                        rf"the file\); give every story its own id$"):
        read_stories(p)
    assert [s.story_id for s in read_stories(_write(p, rows[0]))] == ["s1"]


def test_a_manual_label_of_the_published_format_leaves_the_references_unlabelled(tmp_path):
    """The audit's manual labels give a name and a gender, no references: read as an empty list, training took such
    a row for a story no word of which refers to its characters, where it refuses a row without reference labels."""
    from harness.labelling.training import _training_rows

    laden = {"model": "PaLM2", "role_category": "Work", "subject": "doctor", "object": "patient", "query": "q",
             "llm_response": "Dr. Ann Lee saw Bo. She helped him.", "manual_subject_gender": "Female",
             "manual_subject_name": "Ann Lee", "manual_object_gender": "Male", "manual_object_name": "Bo"}
    p = _write(tmp_path / "x.jsonl", laden)
    (g,) = load_gold(p)
    assert [(c.references, c.gender_from_references) for c in g.characters.values()] == [(None, False)] * 2
    with pytest.raises(DataError, match=r"x.jsonl: story 'x:1' has no reference labels; training needs references"):
        _training_rows([p])


@pytest.mark.parametrize("roles, labels, says", [
    ({"subject": "student", "patient": "boy"}, ("subject",), r"unknown role\(s\) patient; use subject/object"),
    ({"object": "student"}, ("object",), r"`roles` must map subject \(and optionally object\) to descriptions")])
def test_a_project_row_of_a_role_other_than_subject_and_object_is_refused_on_its_line(tmp_path, roles, labels, says):
    """A role of a project row other than subject and object was dropped, and a row without a subject labelled its
    object alone: the story labelled and scored with roles other than those its row gives."""
    label = _PROJECT_ROW["labels"]["subject"]
    p = _write(tmp_path / "g.jsonl", {**_PROJECT_ROW, "roles": roles, "labels": {k: label for k in labels}})
    with pytest.raises(DataError, match=rf"^{re.escape(str(p))}:1: {says}$"):
        load_gold(p)


def test_precision_and_recall_counts_pool_by_adding_them_not_by_averaging_their_shares():
    """Two files' counts added: (9 + 1) / (10 + 10) = 50%, not the mean of 90% and 10%; no predictions is NaN."""
    import math

    from harness.labelling.evaluate import PR

    pooled = PR(9, 10, 8, 10) + PR(1, 10, 2, 5)
    assert pooled == PR(10, 20, 10, 15) and pooled.precision == 0.5 and pooled.recall == pytest.approx(2 / 3)
    assert math.isnan(PR().precision) and math.isnan(PR().recall)
