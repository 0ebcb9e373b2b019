"""The project's own labelled stories (``harness/data/labelling/*.jsonl`` for training and
``heldout/*.jsonl``, never trained on) are consistent:
every row parses, ids are unique, names and references occur in the story, the references give
the stated gender under the neopronoun lexicon (the conventions of that folder's README), and the
hand-labelled owners of shared reference words (``reference_owners``) give one owner per occurrence."""

from __future__ import annotations

import re

import pytest

from harness.identity.gender import infer_gender
from harness.identity.names import select_name
from harness.labelling.data import builtin_training_files, load_gold
from harness.labelling.training import _owner_ranks

HELD_OUT = sorted((builtin_training_files()[0].parent / "heldout").glob("*.jsonl"))
ROWS = [(f.name, gs) for f in builtin_training_files() + HELD_OUT for gs in load_gold(f)]


def test_there_are_training_files_and_ids_are_unique():
    assert len(ROWS) >= 100 and HELD_OUT
    assert not set(HELD_OUT) & set(builtin_training_files()), "held-out stories must not be trained on"
    ids = [gs.story.story_id for _, gs in ROWS]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    assert not dup, f"duplicate ids: {dup}"


@pytest.mark.parametrize("fname,gs", ROWS, ids=[gs.story.story_id for _, gs in ROWS])
def test_row_is_consistent(fname, gs):
    text = gs.story.text
    assert text and gs.characters, f"{fname} {gs.story.story_id}: no text or labels"
    assert set(gs.characters) == {r.key for r in gs.story.roles}
    for key, ch in gs.characters.items():
        where = f"{fname} {gs.story.story_id} {key}"
        name = select_name(ch.name) if ch.name is not None else None
        if name:
            assert name in text, f"{where}: name {name!r} does not occur in the story"
        assert ch.references is not None, f"{where}: references missing"
        for ref in ch.references:
            assert re.search(rf"(?<!\w){re.escape(ref)}(?!\w)", text, re.IGNORECASE), \
                f"{where}: reference {ref!r} does not occur in the story"
        assert ch.gender is not None, f"{where}: gender missing"
        got = infer_gender(list(ch.references), text, lexicon="neopronouns")
        assert got == ch.gender, f"{where}: references {list(ch.references)} give {got}, labelled {ch.gender}"
    _owner_ranks(gs)  # a DataError names the word whose owners do not match its occurrences


def test_every_pronoun_family_the_decoder_knows_is_taught():
    """Each pronoun family of the decoder (he, she, they, xe, ze/zie, ey, fae) is among the references of at least
    ten characters of the training files: a family the tagger never saw gets no references at all (the Spivak
    ey/em/eir set before project_train_5.jsonl, where "Ey" was even taken for a name)."""
    from harness.labelling.decoder import PRONOUN_FAMILIES

    names = {f.name for f in builtin_training_files()}
    training = [gs for fname, gs in ROWS if fname in names]
    for family in PRONOUN_FAMILIES:
        taught = sum(any(r.lower() in family for r in ch.references or ())
                     for gs in training for ch in gs.characters.values())
        assert taught >= 10, f"{family[0]}/{family[1]}: only {taught} training characters use this family"


_ROW = {"id": "r1", "domain": "Learning", "condition": "laden", "model": "m",
        "roles": {"subject": "teacher", "object": "student"}, "text": "Ana taught Mia. She smiled at her.",
        "labels": {"subject": {"name": "Ana", "references": ["She"], "gender": "Female"},
                   "object": {"name": "Mia", "references": ["her"], "gender": "Female"}}}


def _with_subject(**lab):
    return {**_ROW, "labels": {**_ROW["labels"], "subject": {**_ROW["labels"]["subject"], **lab}}}


@pytest.mark.parametrize("row, says", [
    (["a", "list"], "f.jsonl:3: expected a JSON object"),
    ({**_ROW, "labels": {"object": _ROW["labels"]["object"]}},
     "f.jsonl:3: `labels.subject` is missing; label every role"),
    (_with_subject(references="She, her"), "f.jsonl:3 labels.subject: 'She, her' is not a list; write references as"),
    (_with_subject(references=7), "f.jsonl:3 labels.subject: references must be a list of strings, got int"),
    ({**_ROW, "reference_owners": ["subject"]}, "f.jsonl:3: `reference_owners` must map a word to a list of owners"),
    ({"id": "r1", "story": "Ana ran."}, "f.jsonl:3: neither the project format (roles, labels), the published one"),
])
def test_a_labelled_row_of_the_wrong_shape_is_named_by_file_line_and_field(row, says):
    from harness.errors import DataError
    from harness.labelling.data import parse_row

    with pytest.raises(DataError) as e:
        parse_row(row, "f:3", "f.jsonl:3")
    assert str(e.value).startswith(says) and "\n" not in str(e.value)


def test_references_written_as_an_empty_string_are_none_and_as_a_list_in_text_are_read(tmp_path):
    from harness.labelling.data import parse_row

    assert parse_row(_with_subject(references=""), "f:1", "f.jsonl:1").characters["subject"].references == ()
    got = parse_row(_with_subject(references='["She"]'), "f:1", "f.jsonl:1").characters["subject"].references
    assert got == ("She",)


def test_a_plain_story_whose_roles_lack_key_or_description_is_named_by_line(tmp_path):
    from harness.errors import DataError
    from harness.labelling.data import read_stories

    path = tmp_path / "s.jsonl"
    path.write_text('{"story_id": "a", "text": "Ana ran.", "roles": [{"key": "subject", "description": "runner"}]}\n'
                    '{"story_id": "b", "text": "Bo ran.", "roles": [{"key": "subject"}]}\n')
    with pytest.raises(DataError, match=r"s\.jsonl:2: each role needs `key` and `description`$"):
        read_stories(path)
