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
