"""The Labeller contract: validation, order, empty stories, serialisation, registry."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError, DataError
from harness.labelling import LABELLERS, get_labeller
from harness.labelling.base import CharacterLabel, Labeller, RoleSpec, StoryInput, StoryLabels


class LengthLabeller(Labeller):
    """Names each character after the story length; records the batches it saw."""

    name = "length"

    def __init__(self):
        self.batches = []

    def _label_batch(self, stories):
        self.batches.append([s.story_id for s in stories])
        return [StoryLabels(s.story_id, tuple(CharacterLabel(r.key, str(len(s.text))) for r in s.roles))
                for s in stories]


def _story(i, text, two=False):
    roles = (RoleSpec("subject", "doctor"),) + ((RoleSpec("object", "needy patient"),) if two else ())
    return StoryInput(f"s{i}", text, roles)


def test_order_restored_and_batches_sorted_by_length():
    stories = [_story(i, "x" * n, two=i % 2 == 0) for i, n in enumerate([5, 50, 1, 30, 12])]
    lab = LengthLabeller()
    out = lab.label(stories, batch_size=2)
    assert [o.story_id for o in out] == [s.story_id for s in stories]
    assert [o.characters[0].name for o in out] == ["5", "50", "1", "30", "12"]
    assert [len(o.characters) for o in out] == [2, 1, 2, 1, 2]
    assert lab.batches == [["s1", "s3"], ["s4", "s0"], ["s2"]]  # longest first, two per batch


def test_single_story_gives_single_result():
    out = LengthLabeller().label(_story(0, "abc"))
    assert isinstance(out, StoryLabels) and out.characters[0].name == "3"


def test_empty_story_kept_with_reason():
    lab = LengthLabeller()
    out = lab.label([_story(0, ""), _story(1, None, two=True), _story(2, "ok")])
    assert [o.status for o in out] == ["empty story", "empty story", "ok"]
    assert out[1].characters == (CharacterLabel("subject", None, (), "empty story"),
                                 CharacterLabel("object", None, (), "empty story"))
    assert lab.batches == [["s2"]]


def test_roles_validated():
    with pytest.raises(DataError, match="role key"):
        RoleSpec("hero", "doctor")
    with pytest.raises(DataError, match="roles must be"):
        StoryInput("a", "t", (RoleSpec("object", "x"),))
    with pytest.raises(DataError, match="1 or 2 roles"):
        StoryInput("a", "t", ())
    with pytest.raises(DataError, match="StoryInput"):
        LengthLabeller().label(["not a story"])


def test_round_trip_and_unknown_fields():
    s = StoryLabels("x", (CharacterLabel("subject", "Ana", ("she",)), CharacterLabel("object", None, (), "bad")))
    assert StoryLabels.from_dict(s.to_dict()) == s
    d = s.to_dict()
    d["extra"] = 1
    with pytest.raises(DataError, match="unknown field"):
        StoryLabels.from_dict(d)


def test_registry():
    assert LABELLERS.names() == ["encoder", "llm", "rules"]
    with pytest.raises(ConfigError, match="available: encoder, llm, rules"):
        get_labeller("nope")
