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


def test_results_come_out_a_window_at_a_time():
    """``iter_label`` holds labels back until their window is done: a slow labeller's small windows
    (the LLM labeller's 4 batches) let a killed run keep what it labelled."""
    from harness.labelling.llm import LLMLabeller

    class Small(LengthLabeller):
        window_batches = 2

    stories = [_story(i, "x" * (i + 1)) for i in range(6)]
    for lab, batches_before_first in ((LengthLabeller(), 6), (Small(), 2)):
        it = lab.iter_label(stories, batch_size=1)
        assert next(it).story_id == "s0" and len(lab.batches) == batches_before_first
        assert [o.story_id for o in it] == [f"s{i}" for i in range(1, 6)]
    assert LLMLabeller.window_batches * LLMLabeller.default_batch_size <= 64


def test_single_story_gives_single_result():
    out = LengthLabeller().label(_story(0, "abc"))
    assert isinstance(out, StoryLabels) and out.characters[0].name == "3"


def test_iter_label_takes_a_generator_as_label_does():
    stories = [_story(i, "x" * n) for i, n in enumerate([5, 50, 1])]
    want = LengthLabeller().label(stories)
    assert list(LengthLabeller().iter_label(s for s in stories)) == want
    assert LengthLabeller().label(s for s in stories) == want


def test_empty_story_kept_with_reason():
    lab = LengthLabeller()
    out = lab.label([_story(0, ""), _story(1, None, two=True), _story(2, "ok"), _story(3, " \n\t ")])
    assert [o.status for o in out] == ["empty story", "empty story", "ok", "empty story"]  # blanks are no text
    assert out[1].characters == (CharacterLabel("subject", None, (), "empty story"),
                                 CharacterLabel("object", None, (), "empty story"))
    assert lab.batches == [["s2"]]


def test_roles_validated():
    with pytest.raises(DataError, match="role key"):
        RoleSpec("hero", "doctor")
    for description in ("", "  \n", None, 3):  # the {Character} of the labelling prompt: nothing to ask for
        with pytest.raises(DataError, match="description must be a non-empty string"):
            RoleSpec("subject", description)
    with pytest.raises(DataError, match="roles must be"):
        StoryInput("a", "t", (RoleSpec("object", "x"),))
    with pytest.raises(DataError, match="roles must be"):  # subject first
        StoryInput("a", "t", (RoleSpec("object", "x"), RoleSpec("subject", "y")))
    with pytest.raises(DataError, match="text must be a string, got int"):
        StoryInput("a", 7, (RoleSpec("subject", "x"),))
    with pytest.raises(DataError, match="1 or 2 roles"):
        StoryInput("a", "t", ())
    with pytest.raises(DataError, match="StoryInput"):
        LengthLabeller().label(["not a story"])
    for sid in (7, None, ("a",)):  # the labels came back with that id, joined to no story
        with pytest.raises(DataError, match=r"^story id .*: must be a string, got "):
            StoryInput(sid, "t", (RoleSpec("subject", "x"),))


def test_a_batch_size_below_one_is_refused():
    """A negative batch size gave windows of a negative size: every story of a list was dropped, without an error;
    and 0, which the message refuses, was read as the default. Only None is the default."""
    for bs in (-1, 0):
        with pytest.raises(DataError, match=rf"^batch_size must be >= 1, got {bs}$"):
            LengthLabeller().label([_story(0, "ab"), _story(1, "abc")], batch_size=bs)
    assert len(LengthLabeller().label([_story(0, "ab")], batch_size=None)) == 1


def test_round_trip_and_unknown_fields():
    s = StoryLabels("x", (CharacterLabel("subject", "Ana", ("she",)), CharacterLabel("object", None, (), "bad")))
    assert StoryLabels.from_dict(s.to_dict()) == s
    d = s.to_dict()
    d["extra"] = 1
    with pytest.raises(DataError, match="unknown field"):
        StoryLabels.from_dict(d)
    # a field of another type: a null status was an AttributeError later, references as one string its letters
    for where, key, value, says in ((None, "status", None, "`status` must be a string"),
                                    (None, "story_id", 7, "`story_id` must be a string"),
                                    (0, "role", 7, "`role` must be a string"),
                                    # a dict's keys were read as its labels: none, the story's roles gone
                                    (None, "characters", {}, "`characters` must be a list"),
                                    (0, "references", "she", "`references` must be a list of strings"),
                                    # falsy ones were read as no references
                                    (0, "references", 0, "`references` must be a list of strings"),
                                    (0, "references", "", "`references` must be a list of strings"),
                                    (0, "references", {}, "`references` must be a list of strings"),
                                    (0, "name", ["Ana"], "`name` must be a string or null")):
        d = s.to_dict()
        (d if where is None else d["characters"][where])[key] = value
        with pytest.raises(DataError, match=says):
            StoryLabels.from_dict(d)
    # a record that is no object ("[]" on a line of `label label`'s OUT.tmp) raised AttributeError: a traceback
    with pytest.raises(DataError, match=r"^StoryLabels: expected a JSON object, got list$"):
        StoryLabels.from_dict([])
    with pytest.raises(DataError, match=r"^CharacterLabel: expected a JSON object, got list$"):
        StoryLabels.from_dict({"story_id": "x", "characters": [[]]})


def test_labels_come_in_the_storys_role_order():
    class Reversed(LengthLabeller):
        def _label_batch(self, stories):
            return [StoryLabels(lab.story_id, lab.characters[::-1]) for lab in super()._label_batch(stories)]

    got = Reversed().label(_story(0, "Ana met Bo.", two=True))
    assert [c.role for c in got.characters] == ["subject", "object"] and got.status == "ok"


def test_registry():
    assert LABELLERS.names() == ["encoder", "llm", "rules"]
    with pytest.raises(ConfigError, match="available: encoder, llm, rules"):
        get_labeller("nope")


class AheadLabeller(LengthLabeller):
    """Takes up to ``ahead`` batches before returning the first one's labels, as a pipelined labeller does;
    records how many batches it had taken when each result was yielded."""

    def __init__(self, ahead):
        super().__init__()
        self.ahead, self.taken_at_yield = ahead, []

    def _label_batches(self, batches, stories):
        from collections import deque

        held, taken = deque(), 0
        for b in batches:
            held.append(b)
            taken += 1
            if len(held) > self.ahead:
                self.taken_at_yield.append(taken)
                yield self._label_batch(held.popleft())
        while held:
            self.taken_at_yield.append(taken)
            yield self._label_batch(held.popleft())


@pytest.mark.parametrize("ahead", [0, 1, 5, 200])
def test_batches_stream_across_windows_and_results_keep_the_callers_order(ahead):
    # batch_size 1: windows of 64 stories; window 2 (stories 64-127) holds only empty stories
    texts = ["x" * (1 + i % 7) if not 64 <= i < 128 and i % 9 else "" for i in range(200)]
    stories = [_story(i, t, two=i % 3 == 0) for i, t in enumerate(texts)]
    lab = AheadLabeller(ahead)
    got = list(lab.iter_label(stories, batch_size=1))
    assert [o.story_id for o in got] == [s.story_id for s in stories]
    assert [o.status for o in got] == ["ok" if t else "empty story" for t in texts]
    assert [o.characters[0].name for o in got if o.status == "ok"] == [str(len(t)) for t in texts if t]
    assert lab.taken_at_yield[0] == min(ahead + 1, sum(1 for t in texts if t))  # lazy: only what it asked for
    windows = [[s.story_id for s in stories[k:k + 64] if s.text] for k in range(0, 200, 64)]
    assert [b[0] for b in lab.batches] == [i for w in windows for i in sorted(w, key=lambda i: -len(texts[int(i[1:])]))]


def test_labels_that_are_not_the_storys_roles_keep_the_story_failed_with_what_differs():
    """A labeller that left a role out dropped that character from every table (exit 0), one that added a role
    stopped the label stage with a KeyError, one that answered for another story mislabelled this one."""

    class Sloppy(LengthLabeller):
        def _label_batch(self, stories):
            out = []
            for lab in super()._label_batch(stories):
                if lab.story_id == "s0":  # the object left out
                    lab = StoryLabels("s0", lab.characters[:1])
                elif lab.story_id == "s1":  # a role the prompt does not have
                    lab = StoryLabels("s1", (*lab.characters, CharacterLabel("witness", "Bo")))
                elif lab.story_id == "s2":
                    lab = StoryLabels("s9", lab.characters)
                elif lab.story_id == "s3":  # a role twice: the same roles, but one character labelled twice
                    lab = StoryLabels("s3", (*lab.characters, CharacterLabel("object", "Bo")))
                out.append(lab)
            return out

    stories = [_story(i, "x" * (i + 1), two=True) for i in range(5)]
    got = Sloppy().label(stories)
    assert [g.story_id for g in got] == ["s0", "s1", "s2", "s3", "s4"]
    assert [g.status for g in got] == [
        "labeller error: the labeller returned roles subject for subject, object",
        "labeller error: the labeller returned roles subject, object, witness for subject, object",
        "labeller error: the labeller returned the labels of story 's9'",
        "labeller error: the labeller returned roles subject, object, object for subject, object", "ok"]
    assert all(c.name is None for g in got[:4] for c in g.characters) and [c.role for c in got[1].characters] == [
        "subject", "object"]
    assert [c.role for c in got[3].characters] == ["subject", "object"]
    assert [c.name for c in got[4].characters] == ["5", "5"]


def test_a_labeller_that_stops_early_is_an_error():
    class Short(LengthLabeller):
        def _label_batches(self, batches, stories):
            yield self._label_batch(next(iter(batches)))

    with pytest.raises(RuntimeError, match="stopped before labelling every batch"):
        Short().label([_story(i, "ab") for i in range(3)], batch_size=1)

    class Fewer(LengthLabeller):  # stops within a batch: the story left out came back as None, not as labels
        def _label_batch(self, stories):
            return super()._label_batch(stories)[:-1]

    with pytest.raises(RuntimeError, match="^length labeller returned 1 results for 2 stories$"):
        Fewer().label([_story(i, "ab") for i in range(2)], batch_size=2)


def test_only_empty_stories_need_no_batch():
    lab = AheadLabeller(3)
    assert [o.status for o in lab.label([_story(i, "") for i in range(130)], batch_size=1)] == ["empty story"] * 130
    assert lab.batches == []


def test_labels_and_stories_pickle_as_their_constructor_calls():
    import pickle

    story = StoryInput("s1", "Ana met Bo.", (RoleSpec("subject", "doctor"), RoleSpec("object", "needy patient")))
    ana, nobody = CharacterLabel("subject", "Ana", ("she", "her")), CharacterLabel("object", None, (), "bad")
    labels = StoryLabels("s1", (ana, nobody), "ok")
    for x in (story, labels, story.roles[0], labels.characters[1]):
        assert pickle.loads(pickle.dumps(x, pickle.HIGHEST_PROTOCOL)) == x
        assert type(x).__reduce__(x)[0] is type(x)  # rebuilt through __init__, so its checks run again
    assert pickle.loads(pickle.dumps(story)).roles[1].description == "needy patient"


def test_a_failed_batch_is_retried_story_by_story_after_its_memory_is_released():
    # a batch that runs a GPU out of memory often passes one story at a time, but only once the failed
    # pass's tensors are freed: the error's traceback holds them while its except block runs
    import gc
    import weakref

    from harness.labelling.base import label_or_keep

    gc.disable()  # freed by reference counting alone, as a GPU needs it before the retry
    try:
        alive = []

        class Activations:
            pass

        def label(stories):
            if len(stories) > 1:
                activations = Activations()
                alive.append(weakref.ref(activations))
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
            alive.append(alive[0]() is not None)
            if stories[0].story_id == "s1":
                raise ValueError("no story here")
            return LengthLabeller()._label_batch(stories)

        stories = [_story(i, "x" * (i + 1)) for i in range(3)]
        got = label_or_keep(label, stories)
    finally:
        gc.enable()
    assert alive[1:] == [False, False, False]
    assert [g.status for g in got] == ["ok", "labeller error: ValueError: no story here", "ok"]
    assert [g.characters[0].name for g in got] == ["1", None, "3"]


def test_a_labeller_that_fails_every_story_of_a_batch_alone_too_raises_rather_than_labels_them_all_failed():
    """A model that does not load, a GPU another job fills: every story kept "labeller error" became the run's final
    labels (the label stage retries only backend failures), the stage exited 0 and the statistics counted them
    as unnamed. As ``host_pool.forward_or_keep`` does, the error is raised where no story of the batch passes."""
    from harness.labelling.base import label_or_keep

    calls = []

    def broken(stories):
        calls.append(len(stories))
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    stories = [_story(i, "x" * (i + 1)) for i in range(3)]
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="illegal memory access"):
        label_or_keep(broken, stories)
    assert calls == [3, 1, 1, 1]
    # one story that fails among others that pass is the story's: kept with its reason
    got = label_or_keep(lambda b: LengthLabeller()._label_batch(b) if len(b) == 1 and b[0].story_id != "s0"
                        else broken(b), stories)
    assert [g.status.split(":")[0] for g in got] == ["labeller error", "ok", "ok"]
    # the first and the last failing, the one between passing: still the stories', kept (the last is not raised)
    got = label_or_keep(lambda b: LengthLabeller()._label_batch(b) if b == stories[1:2] else broken(b), stories)
    assert [g.status.split(":")[0] for g in got] == ["labeller error", "ok", "labeller error"]
    # and a batch of one story alone cannot tell: kept
    assert label_or_keep(broken, stories[:1])[0].status.startswith("labeller error: RuntimeError")


def test_bad_stories_that_fill_a_batch_are_kept_where_the_labeller_labels_a_plain_story():
    """Two stories that fail, put side by side by the length sort in a batch of two, read as a broken labeller:
    the run raised at that batch on every rerun and never finished. A probe story (``probe_story``) tells the
    two apart: labelled, the stories are kept with their reasons; not labelled, the error is raised as before."""
    from harness.labelling.base import label_or_keep, probe_story

    stories = [_story(i, "x" * (i + 1)) for i in range(2)]
    probe = probe_story(stories[0].roles)

    def refuses_these(batch):
        if any(s.story_id in ("s0", "s1") for s in batch):
            raise ValueError("no story here")
        return LengthLabeller()._label_batch(batch)

    with pytest.warns(RuntimeWarning):
        got = label_or_keep(refuses_these, stories, probe=probe)
    assert [g.status for g in got] == ["labeller error: ValueError: no story here"] * 2
    with pytest.warns(RuntimeWarning), pytest.raises(ValueError, match="no story here"):
        label_or_keep(refuses_these, stories)  # no probe: the batch's error, as before

    def broken(batch):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="illegal memory access"):
        label_or_keep(broken, stories, probe=probe)

    def down(batch):  # the probe comes back, but failed (a backend down): no plain story labelled, so raised
        if batch == [probe]:
            return [StoryLabels("probe", (CharacterLabel("subject", None, (), "llm: backend error"),),
                                "llm: backend error")]
        raise RuntimeError("connection refused")

    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="connection refused"):
        label_or_keep(down, stories, probe=probe)
    with pytest.raises(RuntimeError, match="connection refused"):
        label_or_keep(down, stories[:1], probe=probe)
    # a batch of one (--batch-size 1) is told apart alike: every story was kept as "labeller error", exit 0
    with pytest.raises(RuntimeError, match="illegal memory access"):
        label_or_keep(broken, stories[:1], probe=probe)
    assert label_or_keep(refuses_these, stories[:1], probe=probe)[0].status.startswith("labeller error")
    # a labeller's own guard passes the probe: its batches keep such stories
    lab = LengthLabeller()
    lab._label_batch = refuses_these
    with pytest.warns(RuntimeWarning):
        assert [g.status.split(":")[0] for g in lab._label_or_keep(stories)] == ["labeller error"] * 2


def test_a_batch_retried_story_by_story_is_warned_about():
    # every batch out of GPU memory is retried one story at a time, many times slower: the labels alone
    # would not show it, so a warning says so and what avoids it
    import warnings

    import numpy as np

    from harness.labelling.base import label_or_keep
    from harness.labelling.host_pool import forward_or_keep

    def label(stories):
        if len(stories) > 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return LengthLabeller()._label_batch(stories)

    stories = [_story(i, "x" * (i + 1)) for i in range(3)]
    with pytest.warns(RuntimeWarning, match=r"failed \(RuntimeError\); its stories are labelled one at a time: "
                                            r"a smaller --batch-size"):
        assert [g.status for g in label_or_keep(label, stories)] == ["ok", "ok", "ok"]

    def refuses(stories):
        if len(stories) > 1 or stories[0].story_id == "s0":
            raise ValueError("no story here")
        return LengthLabeller()._label_batch(stories)

    with pytest.warns(RuntimeWarning, match="a story that fails alone too is kept with the error"):
        assert [g.status for g in label_or_keep(refuses, stories)][1:] == ["ok", "ok"]

    def forward(ids, am, tt):
        if len(ids) > 1:
            raise RuntimeError("CUDA out of memory")
        return np.ones((*ids.shape, 4), dtype=np.float32)

    ids = np.ones((2, 3), dtype=np.int64)
    with pytest.warns(RuntimeWarning, match="smaller --batch-size"):
        probs, errors = forward_or_keep(forward, ids, ids, ids)
    assert errors == {} and probs.shape == (2, 3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a batch that works, or a story alone, warns of nothing
        label_or_keep(label, stories[:1])
        forward_or_keep(forward, ids[:1], ids[:1], ids[:1])

    def fails(ids, am, tt):
        raise RuntimeError("story-specific failure")

    # every row failing alone: the model's fault where the rows are two stories', the story's where they are the
    # windows of one story (that stopped the run, as the story of one window never did)
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="story-specific"):
        forward_or_keep(fails, ids, ids, ids)
    with pytest.warns(RuntimeWarning):
        probs, errors = forward_or_keep(fails, ids, ids, ids, [0, 0])
    assert probs is None and errors == {0: "labeller error: RuntimeError: story-specific failure"} | {
        1: "labeller error: RuntimeError: story-specific failure"}
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="story-specific"):
        forward_or_keep(fails, ids, ids, ids, [0, 1])


def test_a_generator_is_taken_one_window_at_a_time():
    """``iter_label`` listed a generator whole first (117 MB of stories for a 99 MB file, in ``harness label
    label``): it now pulls one window at a time, in the caller's order, checking each story as it comes."""

    class Small(LengthLabeller):
        window_batches = 2

    stories = [_story(i, "x" * (1 + i % 5)) for i in range(40)]
    pulled = []

    def stream(items):
        for s in items:
            pulled.append(s)
            yield s

    lab = Small()
    it = lab.iter_label(stream(stories), batch_size=2)
    assert next(it).story_id == "s0"
    assert len(pulled) == 4  # the first window (2 batches of 2), not the 40 stories
    assert [o.story_id for o in it] == [f"s{i}" for i in range(1, 40)] and len(pulled) == 40
    assert list(Small().iter_label(stream(stories), batch_size=2)) == Small().label(stories, batch_size=2)
    # a story that is no StoryInput is named by its place in the whole stream, when its window comes
    it = Small().iter_label(stream([*stories[:5], "not a story"]), batch_size=2)
    assert next(it).story_id == "s0"
    with pytest.raises(DataError, match=r"^story #5: expected a StoryInput, got str$"):
        list(it)


@pytest.mark.parametrize(("n", "total", "counted"), [(3, None, 3), (10, None, None), (10, 10, 8)])
def test_a_pipelined_labeller_is_told_how_many_stories_a_stream_holds_where_it_can_be(n, total, counted):
    """``_label_batches`` decides on the story count whether worker processes pay (the encoder's); a stream's
    is exact where it ends within its first window, else from the caller's ``total`` (None without one)."""

    class Counting(LengthLabeller):
        window_batches = 2

        def _label_batches(self, batches, stories):
            self.told = stories
            return super()._label_batches(batches, stories)

    texts = ["ab" if i not in (0, 1) or n == 3 else "" for i in range(n)]  # two empty stories in the first window
    lab = Counting()
    got = list(lab.iter_label((_story(i, t) for i, t in enumerate(texts)), batch_size=2, total=total))
    assert len(got) == n and lab.told == counted


def test_a_streams_progress_bar_counts_to_the_total_its_caller_gives(capsys):
    """A stream has no length for the bar: its caller may give its ``total`` (``harness label label`` does)."""
    stories = [_story(i, "ab" if i % 2 else "") for i in range(5)]
    assert len(list(LengthLabeller().iter_label(iter(stories), progress=True, total=5))) == 5
    assert "5/5" in capsys.readouterr().err
    assert len(list(LengthLabeller().iter_label(iter(stories), progress=True))) == 5  # no total: counted alone
    assert "5story [" in capsys.readouterr().err


def test_an_error_status_names_the_error_and_is_held_to_300_characters():
    from harness.labelling.base import ERROR_PREFIX, error_status

    assert error_status(ValueError("no roles")) == f"{ERROR_PREFIX}ValueError: no roles"
    long = error_status(RuntimeError("x" * 1000))
    assert len(long) == 300 and long.startswith(f"{ERROR_PREFIX}RuntimeError: xxx")
