"""Training the encoder: the rows ``_training_rows`` accepts, and the stories and labels the augmentation makes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from harness.errors import ConfigError, DataError
from harness.labelling.training import _training_rows

ROW = {"id": "a", "domain": "Learning", "condition": "laden", "model": "m",
       "roles": {"subject": "teacher", "object": "struggling student"},
       "text": "Priya tutored Ethan. He thanked her.",
       "labels": {"subject": {"name": "Priya", "references": ["her"], "gender": "Female"},
                  "object": {"name": "Ethan", "references": ["He"], "gender": "Male"}}}


def _write(path, *rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_role_without_reference_labels_is_refused(tmp_path):
    """One role of a story without references (the key left out or misspelt) was trained with no reference anywhere
    in the story, so its "He" was taught as no word of Ethan's; an empty list (no references) is kept."""
    labels = {**ROW["labels"], "object": {"name": "Ethan", "gender": "Male"}}
    p = _write(tmp_path / "t.jsonl", {**ROW, "labels": labels})
    with pytest.raises(DataError, match=r"t.jsonl: story 'a': object has no reference labels; give its `references`"):
        _training_rows([p])
    none = {**ROW, "text": "Priya tutored Ethan. Ethan thanked Priya.",
            "labels": {**ROW["labels"], "subject": {"name": "Priya", "references": [], "gender": "Unspecified"},
                       "object": {"name": "Ethan", "references": [], "gender": "Unspecified"}}}
    assert [gs.story.story_id for gs in _training_rows([_write(p, none)])] == ["a"]


def test_a_story_given_twice_is_refused(tmp_path):
    """The same file in --data and --extra (or a story copied into a second file) was trained on twice, weighing
    double; a one-line error names both places."""
    p = _write(tmp_path / "t.jsonl", ROW)
    copy = _write(tmp_path / "copy.jsonl", {**ROW, "id": "b"})
    with pytest.raises(DataError, match=r"t.jsonl: story 'a' repeats the text of itself: the file is given twice; "):
        _training_rows([p, p])
    with pytest.raises(DataError, match=r"copy.jsonl: story 'b' repeats the text of \S*t.jsonl: story 'a'; give each "):
        _training_rows([p, copy])
    other = _write(tmp_path / "other.jsonl", {**ROW, "id": "b", "text": ROW["text"] + " They left."})
    assert len(_training_rows([p, other])) == 2


def test_a_training_file_without_stories_is_refused(tmp_path):
    """An empty --extra (a file not yet written, or the wrong one) trained on the other files as if it were read."""
    p = _write(tmp_path / "t.jsonl", ROW)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match=r"^\S*empty.jsonl: no stories in it; give a file of labelled stories or leave it out$"):
        _training_rows([p, empty])


def test_a_titled_name_follows_the_gender_flip():
    """The flip wrote "Mr. Reyes" in the text but kept the label "Mrs. Dolores Reyes", so the title was a name
    word of the story as written and none of the flipped one: in flipped epochs the name's whole phrase was
    never found, and the title was taught as no part of the name."""
    import random

    from harness.labelling.data import parse_row
    from harness.labelling.training import _augmented, project_labels
    from harness.labelling.words import split_words

    gs = parse_row({**ROW, "text": "Mrs. Dolores Reyes tutored Ethan. He thanked her.",
                    "labels": {**ROW["labels"], "subject": {"name": "Mrs. Dolores Reyes", "references": ["Mrs.", "her"],
                                                            "gender": "Female"}}}, "a", "row 1")
    flipped = 0
    for seed in range(40):
        text, refs, names = _augmented(gs, random.Random(seed), flip_prob=0.5)
        title = text.split()[0]
        flipped += title == "Mr."
        assert names["subject"].split()[0] == title and names["subject"].endswith(" Reyes"), (seed, text, names)
        words = [w for w, _, _ in split_words(text)]
        targets = project_labels(words, names, refs)
        assert words[:4] == [title.rstrip("."), ".", names["subject"].split()[1], "Reyes"]
        assert [targets[i][0] for i in (0, 2, 3, 4)] == [1.0, 1.0, 1.0, 0.0], (seed, text)  # the title is a name word
    assert 10 < flipped < 30


def test_a_name_labelled_in_another_case_than_the_storys_is_not_swapped_in_the_label_alone():
    """The swap replaced the first name case-sensitively: "emily carter" of "Emily Carter" became "Zainab carter"
    in the label while the text kept "Emily Carter", so Emily was taught as no name in that epoch."""
    import random

    from harness.labelling.data import parse_row
    from harness.labelling.training import _swap_names

    gs = parse_row({**ROW, "roles": {"subject": "teacher"}, "text": "Emily Carter taught. She smiled.",
                    "labels": {"subject": {"name": "emily carter", "references": ["She"], "gender": "Female"}}},
                   "a", "row 1")
    swapped = 0
    for seed in range(20):
        text, names = _swap_names(gs, random.Random(seed))
        first = text.split()[0]
        assert names["subject"].casefold() == f"{first} carter".casefold(), seed  # the label's case is folded
        assert text == f"{first} Carter taught. She smiled.", seed
        swapped += first != "Emily"
    assert swapped > 5


@pytest.mark.parametrize("text, written", [
    # the swap matched the label's spelling alone: "GREG" (or "Min-jun" of a "Min-Jun") stayed in the text while the
    # label held the new name, so that word was taught as no one's name; a lowercase word ("grace") is no name
    ("Grace taught. GREAT, GRACE! She said grace.", "{new} taught. GREAT, {upper}! She said grace."),
    # ``\\b`` read "_Grace_" as one word: the swap left it while the tagger reads "Grace" between the underscores
    ("_Grace_ stayed. __GRACE__ won. Grace2 and Gracelyn did not. Grace smiled.",
     "_{new}_ stayed. __{upper}__ won. Grace2 and Gracelyn did not. {new} smiled."),
])
def test_a_name_is_swapped_in_each_spelling_the_tagger_reads(text, written):
    import random

    from harness.labelling.data import parse_row
    from harness.labelling.training import _swap_names

    gs = parse_row({**ROW, "roles": {"subject": "teacher"}, "text": text,
                    "labels": {"subject": {"name": "Grace", "references": ["She"], "gender": "Female"}}},
                   "a", "row 1")
    seen = set()
    for seed in range(20):
        new_text, names = _swap_names(gs, random.Random(seed))
        new = names["subject"]
        assert new_text == written.format(new=new, upper=new.upper()), seed
        seen.add(new)
    assert len(seen) > 3


@pytest.mark.parametrize("text, subject, obj", [
    ("Jamie paid. My sibling Jamie smiled at me. He laughed.", "Jamie", "Jamie"),
    ("Jordan Lee coached Sam Jordan. Sam Jordan thanked him.", "Jordan Lee", "Sam Jordan"),
])
def test_a_name_two_labels_write_is_swapped_in_both(text, subject, obj):
    """The swap wrote the new name into the swapped character's label alone: where the other label writes the same
    word (two characters named "Jamie", a first name that is the other's surname), that label named a word the
    augmented text no longer holds, and the epoch taught that character's name at no word."""
    import random

    from harness.labelling.data import parse_row
    from harness.labelling.training import _swap_names

    gs = parse_row({**ROW, "roles": {"subject": "coach", "object": "player"}, "text": text,
                    "labels": {"subject": {"name": subject, "references": [], "gender": None},
                               "object": {"name": obj, "references": [], "gender": None}}}, "a", "row 1")
    swapped = 0
    for seed in range(20):
        new_text, names = _swap_names(gs, random.Random(seed))
        words = set(re.findall(r"\w+", new_text))
        assert all(set(n.split()) <= words for n in names.values()), (seed, new_text, names)
        swapped += new_text != text
    assert swapped > 5


def test_a_name_is_never_swapped_for_a_word_the_story_holds():
    """A new name that the story already writes ("Zainab", another character's) gave two characters one name in the
    augmented text, and ``project_labels`` marked it as the name of both."""
    import random

    from harness.labelling.data import parse_row
    from harness.labelling.training import _AUG_NAMES, _swap_names

    held = [n for n in _AUG_NAMES if n != "Grace"]
    gs = parse_row({**ROW, "roles": {"subject": "teacher"}, "text": "Grace met " + ", ".join(held[:-1]) + ". She "
                    "smiled.", "labels": {"subject": {"name": "Grace", "references": ["She"], "gender": "Female"}}},
                   "a", "row 1")
    for seed in range(20):
        text, names = _swap_names(gs, random.Random(seed))
        assert names["subject"] in ("Grace", held[-1]) and text.startswith(names["subject"] + " met "), seed
    assert any(_swap_names(gs, random.Random(seed))[1]["subject"] == held[-1] for seed in range(20))


def test_a_reference_of_several_words_is_flipped_as_the_text_is():
    """A phrase was flipped word by word: its "her" stayed "her" where the text's possessive became "his", and a last
    "his" became "her" where the text wrote "hers", so in flipped epochs the phrase was found nowhere."""
    from harness.labelling.training import flip_gender
    from harness.labelling.words import her_is_possessive

    text, refs = flip_gender("Tom hugged her brother Ben, a friend of his. Ben, her brother, smiled.",
                             {"object": ["her brother", "a friend of his", "Ben"]}, her_is_possessive)
    assert text == "Tom hugged his sister Ben, a friend of hers. Ben, his sister, smiled."
    assert refs == {"object": ["his sister", "a friend of hers", "Ben"]}


@pytest.mark.parametrize("text, refs, flipped, flipped_refs", [
    # words the flip did not know kept the old gender in the labels (sm-1092's "male" beside her/she)
    ("The male nurse said he was ready.", ["male", "he"], "The female nurse said she was ready.", ["female", "she"]),
    ("Auntie smiled at the cowboy; he waved.", ["cowboy", "he"], "Uncle smiled at the cowgirl; she waved.",
     ["cowgirl", "she"]),
    ("The Englishwoman said she was late.", ["Englishwoman", "she"], "The Englishman said he was late.",
     ["Englishman", "he"]),
    # a "his" standing alone before a verb or "to" is the woman's "hers" (pt-364, sm-1345), not "her"
    ("Tom offered his to Ana. His was a gift.", ["Tom", "his", "His"], "Tom offered hers to Ana. Hers was a gift.",
     ["Tom", "hers", "Hers"]),
    # "her" after a preposition before "home", before a bare verb (sm-1251, pt-1672)
    ("Ana walked to her home and helped her find it.", ["her", "her"], "Ana walked to his home and helped him find "
     "it.", ["his", "him"]),
    # an ellipsis character ends the sentence as "..." does: the object's "him", not "his" (targets version 6)
    ("Tom held her close\u2026 She smiled.", ["her", "She"], "Tom held him close\u2026 He smiled.", ["him", "He"]),
    # the verb "miss" is no title (targets version 2): only the capitalised "Miss" flips
    ("Miss Ana said she would miss him.", ["Miss", "she"], "Mr Ana said he would miss her.", ["Mr", "he"]),
    # a pronoun's clitic flips with it in the references ("He'd" -> "She'd"), or it named the other one's pronoun
    ("He'd said he was late.", ["He'd", "he"], "She'd said she was late.", ["She", "She'd", "she", "she'd"]),
    # a possessive before an emphasised word is "her", not the standalone "hers" (past markdown's marks)
    ("Tom lost his *favorite* pen.", ["Tom", "his"], "Tom lost her *favorite* pen.", ["Tom", "her"]),
])
def test_the_flip_knows_more_gendered_words_and_standalone_possessives(text, refs, flipped, flipped_refs):
    from harness.labelling.training import flip_gender
    from harness.labelling.words import her_is_possessive

    new_text, new_refs = flip_gender(text, {"subject": refs}, her_is_possessive)
    assert new_text == flipped and sorted(new_refs["subject"]) == sorted(flipped_refs)


def test_a_limit_below_one_is_refused_before_any_work(tmp_path):
    """limit=0 divided by zero in the schedule (a traceback, after the model was built); limit=-1 trained on every
    story but the last, silently."""
    from harness.errors import ConfigError
    from harness.labelling.training import train_encoder, train_soup

    p = _write(tmp_path / "t.jsonl", ROW)
    for limit in (0, -1):
        with pytest.raises(ConfigError, match=rf"^limit must be a whole number >= 1 \(the first stories to train "
                                              rf"on\), got {limit}$"):
            train_encoder([p], out_dir=tmp_path / "one", epochs=1, layers=1, limit=limit)
        with pytest.raises(ConfigError, match="limit must be a whole number >= 1"):
            train_soup([p], [0, 1], out_dir=tmp_path / "soup", epochs=1, layers=1, limit=limit)
    assert not (tmp_path / "one").exists() and not (tmp_path / "soup").exists()


def test_a_learning_rate_that_is_not_a_positive_number_is_refused_before_any_work(tmp_path):
    """AdamW checks only its default rate, not those of parameter groups: `--lr -1` trained away from the labels
    and `--lr nan` made every weight NaN, each saved as a model with exit status 0."""
    from harness.errors import ConfigError
    from harness.labelling.training import train_encoder

    p = _write(tmp_path / "t.jsonl", ROW)
    for kwargs, what in (({"lr": -1e-4}, "lr must be a positive number, got -0.0001"),
                         ({"lr": float("nan")}, "lr must be a positive number, got nan"), ({"lr": 0.0}, "got 0.0"),
                         ({"head_lr_mult": -10.0}, "head_lr_mult must be a positive number"),
                         ({"flip_prob": 1.5}, "flip_prob is a probability, from 0 to 1; got 1.5")):
        with pytest.raises(ConfigError, match=what):
            train_encoder([p], out_dir=tmp_path / "m", epochs=1, layers=1, **kwargs)
    assert not (tmp_path / "m").exists()


def test_a_training_whose_loss_is_not_finite_is_refused_before_anything_is_saved(tmp_path):
    """A rate the optimiser takes but the training cannot (`--lr 1e30`) made the loss NaN: the training exited 0,
    its --json held NaN (no JSON) and it saved a model that labels nothing. Each epoch's loss is checked first."""
    from harness.labelling.training import train_encoder

    p = _write(tmp_path / "t.jsonl", ROW)
    with pytest.raises(ConfigError, match=r"^training diverged at epoch 2 \(loss nan\); lower --lr \(lr 1e\+30\)$"):
        train_encoder([p], out_dir=tmp_path / "m", epochs=3, layers=1, batch_size=1, lr=1e30, seed=0)
    assert not (tmp_path / "m" / "meta.json").exists() and not (tmp_path / "m" / "head.pt").exists()


def test_more_layers_than_the_encoder_has_are_refused(tmp_path):
    """`--layers 99` trained all 6 of MiniLM's layers without a word (the run's meta.json said 6)."""
    from harness.errors import ConfigError
    from harness.labelling.training import train_encoder

    p = _write(tmp_path / "t.jsonl", ROW)
    with pytest.raises(ConfigError, match=r"--layers 99: the encoder at .* has 6 layers; give at most that many"):
        train_encoder([p], out_dir=tmp_path / "m", epochs=1, layers=99)
    assert not (tmp_path / "m" / "meta.json").exists()


def test_a_save_cut_short_over_an_earlier_model_leaves_that_model_whole(tmp_path, monkeypatch):
    """Training into a directory that holds a model (the default one, or --init-from's own) wrote the new encoder,
    then head.pt, then meta.json over the old ones: a save cut short between them (killed, a full disk) left the
    new encoder beside the old head and meta.json, which loaded without a word, and later no model at all. The new
    files are now written in a folder of their own first: the old model stays whole until they are."""
    import torch
    from safetensors.torch import load_file

    from harness.labelling.encoder import read_model_meta
    from harness.labelling.training import REPLACED, SAVING, train_encoder

    p = _write(tmp_path / "t.jsonl", ROW)
    out = tmp_path / "m"
    train_encoder([p], out_dir=out, epochs=1, layers=1, seed=0)
    before = load_file(out / "encoder" / "model.safetensors")
    head = torch.load(out / "head.pt")
    real = torch.save

    def disk_full(obj, f, *args, **kwargs):
        if str(f).endswith("head.pt"):
            raise OSError(28, "No space left on device")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError):
        train_encoder([p], out_dir=out, epochs=1, layers=1, seed=1)
    monkeypatch.undo()
    assert read_model_meta(out)["train"]["seed"] == 0
    after = load_file(out / "encoder" / "model.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(torch.equal(v, torch.load(out / "head.pt")[k]) for k, v in head.items())
    train_encoder([p], out_dir=out, epochs=1, layers=1, seed=1)  # a rerun writes a whole model again
    assert read_model_meta(out)["train"]["seed"] == 1 and not (out / "meta.json.part").exists()
    assert not (out / SAVING).exists() and not (out / REPLACED).exists()


def test_a_model_continued_in_place_and_cut_short_while_saving_goes_on_at_the_rerun(tmp_path, monkeypatch):
    """``--init-from X --out X``: the final save took X's meta.json off and wrote over its weights, so a save cut
    short there (a full disk) left a rerun nothing to start from ("meta.json missing"), the checkpoint unusable and
    X lost. Now X stays whole and the rerun goes on from the checkpoint."""
    import torch

    from harness.labelling.encoder import read_model_meta
    from harness.labelling.training import CHECKPOINT, train_encoder

    p = _write(tmp_path / "t.jsonl", ROW, {**ROW, "id": "b", "text": "Priya helped Ethan. He smiled at her."})
    x = tmp_path / "x"
    threads = torch.get_num_threads()
    try:
        train_encoder([p], out_dir=x, epochs=1, layers=1, seed=0, threads=1)
        real = torch.save

        def disk_full(obj, f, *args, **kwargs):
            if str(f).endswith("head.pt"):
                raise OSError(28, "No space left on device")
            return real(obj, f, *args, **kwargs)

        kw = dict(epochs=2, layers=1, seed=0, batch_size=1, threads=1, init_from=x)
        monkeypatch.setattr(torch, "save", disk_full)
        with pytest.raises(OSError):
            train_encoder([p], out_dir=x, **kw)
        monkeypatch.undo()
        assert read_model_meta(x)["init_from"] is None and (x / CHECKPOINT).is_file()  # X as it was
        rep = train_encoder([p], out_dir=x, **kw)
    finally:
        torch.set_num_threads(threads)
    assert rep.resumed_epochs == 1 and read_model_meta(x)["init_from"] == str(x)
    assert not (x / CHECKPOINT).exists()


def _model_files(folder, tag):
    (folder / "encoder").mkdir(parents=True)
    (folder / "encoder" / "model.safetensors").write_text(tag)
    (folder / "head.pt").write_text(tag)


def _tags(folder):
    return [(folder / f).read_text() for f in ("encoder/model.safetensors", "head.pt")]


def test_installing_a_model_moves_the_old_one_back_where_a_move_fails(tmp_path, monkeypatch):
    """The old model was moved aside with nothing to put it back: a failed move left no meta.json and no encoder."""
    import json

    import harness.labelling.training as training

    out = tmp_path / "x"
    _model_files(out, "old")
    (out / "meta.json").write_text(json.dumps({"tag": "old"}))
    (out / training.REPLACED).write_text("a stray file, not a folder")  # left by hand, or by something else
    real = os.replace

    def fails_on_the_new_head(src, dst):
        if str(src).endswith(f"{training.SAVING}/head.pt"):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(training.os, "replace", fails_on_the_new_head)
    with pytest.raises(OSError):
        training._install_model(out, lambda stage: _model_files(stage, "new"), {"tag": "new"})
    monkeypatch.undo()
    assert _tags(out) == ["old", "old"] and json.loads((out / "meta.json").read_text()) == {"tag": "old"}
    training._install_model(out, lambda stage: _model_files(stage, "new"), {"tag": "new"})
    assert _tags(out) == ["new", "new"] and json.loads((out / "meta.json").read_text()) == {"tag": "new"}
    assert sorted(p.name for p in out.iterdir()) == ["encoder", "head.pt", "meta.json"]


def test_a_save_killed_between_its_moves_keeps_the_old_model_through_the_next_save_that_fails(tmp_path):
    import json

    import harness.labelling.training as training

    out = tmp_path / "x"
    _model_files(out, "old")
    (out / "meta.json").write_text(json.dumps({"tag": "old"}))
    aside = out / training.REPLACED
    aside.mkdir()
    for name in ("meta.json", "encoder"):  # killed after moving the encoder aside
        os.replace(out / name, aside / name)

    def disk_full(stage):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        training._install_model(out, disk_full, {"tag": "new"})
    assert _tags(out) == ["old", "old"] and json.loads((out / "meta.json").read_text()) == {"tag": "old"}


def test_a_model_whose_save_was_killed_between_its_moves_is_moved_back_before_it_is_continued(tmp_path):
    """A save killed between its moves leaves no meta.json and the old model aside: ``--init-from X`` put it back."""
    import harness.labelling.training as training
    from harness.labelling.encoder import read_model_meta
    from harness.labelling.training import train_encoder

    p = _write(tmp_path / "t.jsonl", ROW)
    x = tmp_path / "x"
    train_encoder([p], out_dir=x, epochs=1, layers=1, seed=0)
    aside = x / training.REPLACED
    aside.mkdir()
    for name in ("meta.json", "encoder"):  # killed after moving the encoder aside, before the new one came
        os.replace(x / name, aside / name)
    rep = train_encoder([p], out_dir=tmp_path / "more", epochs=1, layers=1, seed=0, init_from=x)
    assert read_model_meta(x)["train"]["seed"] == 0 and not aside.exists()
    assert read_model_meta(tmp_path / "more")["init_from"] == str(x) and rep.epochs == 1


def test_a_training_cut_short_goes_on_from_its_last_epoch_to_the_weights_of_one_never_stopped(tmp_path, monkeypatch):
    """A training killed in its last epochs lost every epoch before (the shipped soup: ~88 min on 2 cores). Each
    epoch but the last leaves a checkpoint; a rerun with the same settings goes on from it to bit-equal weights, and
    the finished model removes it. Other settings start over."""
    import torch
    from safetensors.torch import load_file

    import harness.labelling.training as training
    from harness.labelling.encoder import read_model_meta
    from harness.labelling.training import CHECKPOINT, train_encoder

    p = _write(tmp_path / "t.jsonl", ROW, {**ROW, "id": "b", "text": "Priya helped Ethan. He smiled at her."})
    kw = dict(epochs=3, layers=1, seed=0, batch_size=1, threads=1)
    threads = torch.get_num_threads()
    monkeypatch.setattr(training, "TARGETS_VERSION", 1)  # the version a release before it recorded none taught
    try:
        whole = train_encoder([p], out_dir=tmp_path / "whole", **kw)
        real, steps = training._token_targets, []

        def killed_in_epoch_3(*a, **k):  # two stories, one a batch: steps 5 and 6 are the third epoch's
            steps.append(1)
            if len(steps) == 6:
                raise KeyboardInterrupt
            return real(*a, **k)

        monkeypatch.setattr(training, "_token_targets", killed_in_epoch_3)
        out = tmp_path / "cut"
        with pytest.raises(KeyboardInterrupt):
            train_encoder([p], out_dir=out, **kw)
        monkeypatch.undo()
        monkeypatch.setattr(training, "TARGETS_VERSION", 1)
        assert (out / CHECKPOINT).is_file() and not (out / "meta.json").exists()
        state = torch.load(out / CHECKPOINT, weights_only=True)  # as a release before the targets version wrote it
        assert state["key"].pop("targets_version") == 1 and state["key"].pop("roles_sha256")
        torch.save(state, out / CHECKPOINT)
        again = train_encoder([p], out_dir=out, **kw)
    finally:
        torch.set_num_threads(threads)
    assert again.resumed_epochs == 2 and whole.resumed_epochs == 0
    assert again.epoch_losses == whole.epoch_losses and again.words == whole.words
    a, b = (load_file(str(d / "encoder" / "model.safetensors")) for d in (tmp_path / "whole", out))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(torch.load(out / "head.pt")["weight"], torch.load(tmp_path / "whole" / "head.pt")["weight"])
    assert not (out / CHECKPOINT).exists() and read_model_meta(out)["report"]["resumed_epochs"] == 2

    # a checkpoint of other settings is not gone on from
    monkeypatch.setattr(training, "_token_targets", killed_in_epoch_3)
    steps.clear()
    with pytest.raises(KeyboardInterrupt):
        train_encoder([p], out_dir=out, **kw)
    monkeypatch.undo()
    try:
        with pytest.warns(UserWarning, match="other settings or data; this one starts over"):
            other = train_encoder([p], out_dir=out, **{**kw, "lr": 5e-5})
    finally:
        torch.set_num_threads(threads)
    assert other.resumed_epochs == 0 and not (out / CHECKPOINT).exists()

    # a checkpoint that cannot be written is said and skipped; the training goes on to its model. torch's writer
    # raises RuntimeError, not OSError, where a write fails (a full disk; here a folder where the file goes)
    (tmp_path / "full" / (CHECKPOINT + ".part")).mkdir(parents=True)
    try:
        with pytest.warns(UserWarning, match="checkpoint not written .*; the training goes on"):
            done = train_encoder([p], out_dir=tmp_path / "full", **kw)
    finally:
        torch.set_num_threads(threads)
    assert done.epoch_losses == whole.epoch_losses and (tmp_path / "full" / "meta.json").is_file()
    real_save = torch.save

    def full_disk(obj, f, *a, **k):
        if str(f).endswith(".part"):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 768 vs 662")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", full_disk)
    try:
        with pytest.warns(UserWarning, match="checkpoint not written .*unexpected pos.*; the training goes on"):
            train_encoder([p], out_dir=tmp_path / "full2", **kw)
    finally:
        monkeypatch.undo()
        torch.set_num_threads(threads)
    assert (tmp_path / "full2" / "meta.json").is_file() and not list((tmp_path / "full2").glob(".train-checkpoint*"))


def test_a_checkpoint_of_a_continuation_is_not_gone_on_from_once_its_start_was_trained_again(tmp_path, monkeypatch):
    """--init-from was keyed by its path alone: a model trained again there between a cut-short continuation and its
    rerun would have been continued from the old start's checkpoint."""
    import torch

    import harness.labelling.training as training
    from harness.labelling.training import CHECKPOINT, train_encoder

    p = _write(tmp_path / "t.jsonl", ROW, {**ROW, "id": "b", "text": "Priya helped Ethan. He smiled at her."})
    start, out = tmp_path / "start", tmp_path / "more"
    threads = torch.get_num_threads()
    try:
        train_encoder([p], out_dir=start, epochs=1, layers=1, seed=0, threads=1)
        real, steps = training._token_targets, []

        def killed_in_epoch_2(*a, **k):
            steps.append(1)
            if len(steps) == 4:
                raise KeyboardInterrupt
            return real(*a, **k)

        monkeypatch.setattr(training, "_token_targets", killed_in_epoch_2)
        kw = dict(epochs=2, layers=1, seed=0, batch_size=1, threads=1, init_from=start)
        with pytest.raises(KeyboardInterrupt):
            train_encoder([p], out_dir=out, **kw)
        monkeypatch.undo()
        assert (out / CHECKPOINT).is_file()
        train_encoder([p], out_dir=start, epochs=1, layers=1, seed=1, threads=1)  # the start, trained again
        with pytest.warns(UserWarning, match="other settings or data; this one starts over"):
            rep = train_encoder([p], out_dir=out, **kw)
    finally:
        torch.set_num_threads(threads)
    assert rep.resumed_epochs == 0


def test_head_seed_draws_the_head_apart_from_the_seed_of_the_batches(tmp_path):
    """Members of a soup need one head start: with ``head_seed`` the new head's first weights come from it, and the
    seed alone orders the batches and draws the dropout. A negligible learning rate leaves each head where it began."""
    import torch

    from harness.labelling.training import train_encoder

    p = _write(tmp_path / "t.jsonl", ROW)

    def head(seed, head_seed=None):
        out = tmp_path / f"m{seed}-{head_seed}"
        train_encoder([p], out_dir=out, epochs=1, layers=1, seed=seed, head_seed=head_seed, lr=1e-12)
        return torch.load(out / "head.pt")["weight"]

    plain0, shared1, plain1 = head(0), head(1, head_seed=0), head(1)
    assert torch.allclose(plain0, shared1, atol=1e-6)
    assert not torch.allclose(plain0, plain1, atol=1e-3)


def test_a_soup_is_the_mean_of_its_members_and_a_rerun_trains_only_the_missing_ones(tmp_path, monkeypatch):
    """``train_soup`` trains a member per seed under OUT/members and saves the mean of their weights as one model
    that loads like any other; a rerun reuses the members trained alike, and trains a new seed or setting afresh."""
    import torch
    from safetensors.torch import load_file

    import harness.labelling.training as training
    from harness.labelling.data import load_gold
    from harness.labelling.encoder import EncoderLabeller, read_model_meta
    from harness.labelling.training import train_soup

    p = _write(tmp_path / "t.jsonl", ROW, {**ROW, "id": "b", "text": "Priya helped Ethan. He smiled at her."})
    out = tmp_path / "soup"
    installed = []  # the meta.json each model's install writes
    real_install = training._install_model
    monkeypatch.setattr(training, "_install_model", lambda o, w, m: installed.append((o, m)) or real_install(o, w, m))
    report = train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1)
    # the soup's meta.json is written once, whole: a second write of seeds and report left, killed between the two,
    # a soup whose meta.json held the first member's seed alone
    assert [m["train"]["seeds"] for o, m in installed if o == out] == [[0, 1]]
    assert (out / "meta.json").read_text().count('"seeds"') == 3  # train's, soup's and the report's
    members = [out / "members" / "seed-0", out / "members" / "seed-1"]
    soup, parts = load_file(str(out / "encoder" / "model.safetensors")), [
        load_file(str(m / "encoder" / "model.safetensors")) for m in members]
    moved = [k for k in soup if not torch.equal(parts[0][k], parts[1][k])]
    assert moved  # the members differ, so the mean is no copy of either
    for k in soup:
        assert torch.allclose(soup[k], (parts[0][k] + parts[1][k]) / 2, atol=1e-6), k
    heads = [torch.load(m / "head.pt") for m in members]
    assert torch.allclose(torch.load(out / "head.pt")["weight"], (heads[0]["weight"] + heads[1]["weight"]) / 2)
    meta = read_model_meta(out)
    assert meta["train"]["seeds"] == [0, 1] and meta["soup"]["seeds"] == [0, 1]
    assert meta["soup"]["members"] == ["members/seed-0", "members/seed-1"]  # relative: the model can move
    assert report.seeds == (0, 1) and report.trained_seeds == (0, 1) and "trained_seeds" not in meta["report"]
    assert report.seconds == pytest.approx(sum(read_model_meta(m)["report"]["seconds"] for m in members), abs=0.02)
    labels = EncoderLabeller(out, workers=0).label([load_gold(p)[0].story])
    assert labels[0].characters[0].role == "subject"

    trained = []
    real = training.train_encoder
    monkeypatch.setattr(training, "train_encoder", lambda files, **kw: trained.append(kw["seed"]) or real(files, **kw))
    again = train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1)
    assert trained == [] and again.trained_seeds == () and again.seconds == report.seconds
    assert all(torch.equal(v, load_file(str(out / "encoder" / "model.safetensors"))[k]) for k, v in soup.items())
    train_soup([p], [0, 2], out_dir=out, epochs=1, layers=1)
    assert trained == [2]
    train_soup([p], [0, 2], out_dir=out, epochs=2, layers=1)  # another setting: every member again
    assert trained == [2, 0, 2]
    single = tmp_path / "single"
    with pytest.raises(ConfigError, match=r"^seed 5 is given twice; give each seed once"):
        train_soup([p], [5, 1, 5], out_dir=single, epochs=1, layers=1)  # it was read as [5, 1], silently
    train_soup([p], [5], out_dir=single, epochs=1, layers=1)  # one seed: train_encoder's model, no members
    assert trained == [2, 0, 2, 5] and not (single / "members").exists()
    assert read_model_meta(single)["train"]["seed"] == 5 and "soup" not in read_model_meta(single)


def test_a_soup_trains_a_member_again_for_other_role_descriptions_or_targets(tmp_path, monkeypatch):
    """The data hash leaves out the role descriptions, and nothing recorded how the targets were built: a member
    taught on other descriptions, or by a release that teaches words otherwise, was reused. A member of an earlier
    release (neither recorded) is taken as taught version 1's targets on these descriptions."""
    import harness.labelling.training as training
    from harness.labelling.training import train_soup

    monkeypatch.setattr(training, "TARGETS_VERSION", 1)  # the version a release before it recorded none taught
    p = _write(tmp_path / "t.jsonl", ROW)
    out = tmp_path / "soup"
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1)
    trained = []
    real = training.train_encoder
    monkeypatch.setattr(training, "train_encoder", lambda files, **kw: trained.append(kw["seed"]) or real(files, **kw))
    other = _write(tmp_path / "o.jsonl", {**ROW, "roles": {"subject": "teacher", "object": "eager student"}})
    train_soup([other], [0, 1], out_dir=out, epochs=1, layers=1)
    assert trained == [0, 1]
    with monkeypatch.context() as m:
        m.setattr(training, "TARGETS_VERSION", 2)
        train_soup([other], [0, 1], out_dir=out, epochs=1, layers=1)
        assert trained == [0, 1, 0, 1]
        train_soup([other], [0, 1], out_dir=out, epochs=1, layers=1)
        assert trained == [0, 1, 0, 1]
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1)
    assert trained == [0, 1, 0, 1, 0, 1]
    for member in ("seed-0", "seed-1"):  # as an earlier release wrote them
        meta_path = out / "members" / member / "meta.json"
        meta = json.loads(meta_path.read_text())
        assert meta["train"].pop("roles_sha256") and meta["train"].pop("targets_version") == 1
        meta_path.write_text(json.dumps(meta))
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1)
    assert trained == [0, 1, 0, 1, 0, 1]


def test_members_trained_at_once_in_processes_equal_those_trained_one_after_the_other(tmp_path):
    """``jobs=2`` trains the members in two spawned processes; with one thread each, as here, their weights are
    those of the members trained in turn, to the bit. A failure in a job reaches the caller as the same error."""
    import torch
    from safetensors.torch import load_file

    from harness.errors import ConfigError
    from harness.labelling.encoder import read_model_meta
    from harness.labelling.training import train_soup

    p = _write(tmp_path / "t.jsonl", ROW, {**ROW, "id": "b", "text": "Priya helped Ethan. He smiled at her."})
    threads = torch.get_num_threads()
    try:
        alone = train_soup([p], [0, 1], out_dir=tmp_path / "alone", epochs=1, layers=1, threads=1)
        both = train_soup([p], [0, 1], out_dir=tmp_path / "both", epochs=1, layers=1, threads=1, jobs=2)
    finally:
        torch.set_num_threads(threads)
    assert both.trained_seeds == alone.trained_seeds == (0, 1)
    for name in ("members/seed-0", "members/seed-1", "."):
        a, b = (load_file(str(tmp_path / d / name / "encoder" / "model.safetensors")) for d in ("alone", "both"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert read_model_meta(tmp_path / "both" / "members" / "seed-1")["train"]["head_seed"] == 0
    with pytest.raises(ConfigError, match="lr must be a positive number"):
        train_soup([p], [0, 1], out_dir=tmp_path / "bad", epochs=1, layers=1, lr=-1.0, jobs=2)
    with pytest.raises(ConfigError, match="jobs must be >= 1"):
        train_soup([p], [0, 1], out_dir=tmp_path / "bad", epochs=1, layers=1, jobs=0)


def test_members_trained_at_once_say_their_epochs_in_lines_not_bars(tmp_path, capfd):
    """Two members' bars in two processes overwrote each other's line: trained at once, a soup asked for
    progress prints a line per member and epoch; a progress it does not know is refused before any work."""
    from harness.errors import ConfigError
    from harness.labelling.training import train_soup

    p = _write(tmp_path / "t.jsonl", ROW, {**ROW, "id": "b", "text": "Priya helped Ethan. He smiled at her."})
    train_soup([p], [0, 1], out_dir=tmp_path / "m", epochs=2, layers=1, threads=1, jobs=2, progress=True)
    err = capfd.readouterr().err
    # found anywhere in a line: one process's line can follow the other's loading bar (transformers', no newline)
    said = sorted(re.findall(r"\[train seed \d\] epoch \d/\d", err))
    assert said == [f"[train seed {s}] epoch {e}/2" for s in (0, 1) for e in (1, 2)], err
    assert "train encoder" not in err, err  # no bar of steps
    with pytest.raises(ConfigError, match="progress='epoch': give False, True, 'bar' or 'epochs'"):
        train_soup([p], [0, 1], out_dir=tmp_path / "bad", epochs=1, layers=1, jobs=2, progress="epoch")
    assert not (tmp_path / "bad").exists()


def test_encoders_of_different_shapes_are_not_averaged(tmp_path):
    from harness.errors import ConfigError
    from harness.labelling.training import average_encoders, train_encoder

    p = _write(tmp_path / "t.jsonl", ROW)
    train_encoder([p], out_dir=tmp_path / "one", epochs=1, layers=1)
    train_encoder([p], out_dir=tmp_path / "two", epochs=1, layers=2)
    with pytest.raises(ConfigError, match=r"soup member .*two: its layers is 2, the first member's 1; average only"):
        average_encoders([tmp_path / "one", tmp_path / "two"], tmp_path / "avg")
    assert not (tmp_path / "avg" / "meta.json").exists()


@pytest.mark.parametrize("field, value, says", [
    ("head_seed", 7, r"its head start \(head_seed, else seed\) is 7, the first member's 0"),
    ("occurrences", True, "its occurrences is True, the first member's False"),
    ("max_length", 128, "its max_length is 128, the first member's 384"),
])
def test_encoders_with_other_heads_or_readings_are_not_averaged(tmp_path, field, value, says):
    """Heads drawn apart were averaged into no head, and members of another occurrences or max_length (which the
    labeller reads from the soup's meta.json, the first member's) were averaged, all without a word."""
    from harness.errors import ConfigError
    from harness.labelling.training import average_encoders, train_encoder

    p = _write(tmp_path / "t.jsonl", ROW)
    train_encoder([p], out_dir=tmp_path / "one", epochs=1, layers=1, seed=0)
    train_encoder([p], out_dir=tmp_path / "two", epochs=1, layers=1, seed=1, head_seed=0)
    average_encoders([tmp_path / "one", tmp_path / "two"], tmp_path / "avg")  # seed 0's head, drawn alike
    meta = json.loads((tmp_path / "two" / "meta.json").read_text())
    if field == "max_length":
        meta["max_length"] = value
    else:
        meta["train"][field] = value
    (tmp_path / "two" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=rf"soup member .*two: {says}; average only encoders trained alike"):
        average_encoders([tmp_path / "one", tmp_path / "two"], tmp_path / "avg2")
    assert not (tmp_path / "avg2" / "meta.json").exists()


def test_encoders_taught_with_other_targets_are_not_averaged(tmp_path, monkeypatch):
    """A soup's meta.json is its first member's: members taught with other targets would be recorded as one."""
    from harness.errors import ConfigError
    from harness.labelling import training
    from harness.labelling.training import average_encoders, train_encoder

    p = _write(tmp_path / "t.jsonl", ROW)
    monkeypatch.setattr(training, "TARGETS_VERSION", 1)  # the version a release before it recorded none taught
    train_encoder([p], out_dir=tmp_path / "one", epochs=1, layers=1)
    monkeypatch.setattr(training, "TARGETS_VERSION", 2)
    train_encoder([p], out_dir=tmp_path / "two", epochs=1, layers=1)
    with pytest.raises(ConfigError, match=r"soup member .*two: taught with targets version 2, the first member 1"):
        average_encoders([tmp_path / "one", tmp_path / "two"], tmp_path / "avg")
    meta = json.loads((tmp_path / "one" / "meta.json").read_text())
    del meta["train"]["targets_version"]  # as a release before it wrote it: version 1
    (tmp_path / "one" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="targets version 2, the first member 1"):
        average_encoders([tmp_path / "one", tmp_path / "two"], tmp_path / "avg")
    average_encoders([tmp_path / "one", tmp_path / "one"], tmp_path / "avg")


@pytest.mark.parametrize("text, name, refs, says", [
    ("Jean-Luc smiled at the class. She waved.", "Jean", ["she"], "name 'Jean' is not written in the story as its "
     "own capitalised words (the tagger reads 'Jean-Luc' as one word)"),
    ("Mary-Anne smiled at the class. She waved.", "Mary Anne", ["she"], "name 'Mary Anne' is not written"),
    ("Ana smiled. The self-taught painter waved.", "Ana", ["painter", "self"], "references hold 'self', which the "
     "story writes only inside another word (the tagger reads 'self-taught' as one word)"),
])
def test_a_label_that_occurs_only_inside_another_word_is_refused(tmp_path, text, name, refs, says):
    """The check that a label occurs in the story split words at a hyphen, the targets do not: "Jean" of "Jean-Luc"
    passed and was taught on no word, while "Jean-Luc" was taught as no one's."""
    row = {"id": "u", "roles": {"subject": "student"}, "text": text,
           "labels": {"subject": {"name": name, "references": refs, "gender": "Female"}}}
    with pytest.raises(DataError, match=r"t.jsonl: story 'u': subject " + re.escape(says)):
        _training_rows([_write(tmp_path / "t.jsonl", row)])


@pytest.mark.parametrize("refs, says", [
    (["her", "."], "references hold '.', which holds no word; drop it"),
    (["her", "Tom"], "references hold 'Tom', which does not occur in the story; correct the label or the text"),
])
def test_a_label_that_is_no_word_of_the_story_is_refused_saying_why(tmp_path, refs, says):
    """A reference of no word ("." matched nowhere, "" anywhere) or one the story does not hold is refused in one
    line that says which, not as a word the tagger reads inside another."""
    row = {**ROW, "labels": {**ROW["labels"], "subject": {"name": "Priya", "references": refs, "gender": "Female"}}}
    with pytest.raises(DataError, match=r"t.jsonl: story 'a': subject " + re.escape(says)):
        _training_rows([_write(tmp_path / "t.jsonl", row)])


def test_a_name_is_taught_only_where_the_story_writes_it_with_a_capital():
    """The whole name was matched case-folded: the verb of "she rose" was taught as Rose's name."""
    from harness.labelling.training import project_labels
    from harness.labelling.words import split_words

    words = [w for w, _, _ in split_words("Rose smiled. She rose from her chair. ROSE was on the cake.")]
    targets = project_labels(words, {"subject": "Rose"}, {"subject": ["she", "her"]})
    assert [w for w, row in zip(words, targets) if row[0]] == ["Rose", "ROSE"]


def test_a_title_of_the_name_is_taught_only_within_the_whole_name():
    """A name's title is no name word of its own: "Mrs" of "Mrs. Dolores Reyes" is marked in the full name, not at
    another woman's "Mrs. Kim" (taught as Dolores's name)."""
    from harness.labelling.training import project_labels
    from harness.labelling.words import split_words

    words = [w for w, _, _ in split_words("Mrs. Dolores Reyes met Mrs. Kim. Dolores smiled.")]
    targets = project_labels(words, {"subject": "Mrs. Dolores Reyes"}, {})
    assert [(i, w) for i, (w, row) in enumerate(zip(words, targets)) if row[0]] == [
        (0, "Mrs"), (2, "Dolores"), (3, "Reyes"), (9, "Dolores")]


def test_a_name_with_an_apostrophe_is_taught_where_the_story_writes_it_alone():
    """A surname's pieces ("O'Brien" is o, 'brien) fell under the two-letter test of its first piece, so a later
    "O'Brien smiled" was taught as no one's name. Its "O" is marked, as in the full name, and "O'Neil" is not it."""
    from harness.labelling.training import project_labels
    from harness.labelling.words import split_words

    def marked(text: str, name: str) -> list[tuple[int, str]]:
        words = [w for w, _, _ in split_words(text)]
        return [(i, w) for i, (w, row) in enumerate(zip(words, project_labels(words, {"subject": name}, {}))) if row[0]]

    assert marked("Megan O'Brien met O'Neil. Later O'Brien smiled. O'Brien’s car.", "Megan O'Brien") == [
        (0, "Megan"), (1, "O"), (8, "O"), (12, "O")]
    assert marked("D'Andre Harris waved. Later D’Andre smiled.", "D'Andre Harris") == [
        (0, "D"), (1, "'Andre"), (2, "Harris"), (6, "D")]
    assert marked("Li waved at O. Li smiled.", "Li") == [(0, "Li"), (5, "Li")]  # two letters still count


def test_a_reference_written_with_the_other_apostrophe_is_accepted(tmp_path):
    """The check that a label occurs in the story compared "he'd" with the story's "he’d" as other words and
    refused the row ("does not occur in the story"), though the targets mark it as fold_word compares them."""
    for text, ref in (("Priya tutored Ethan. He’d thanked her.", "He'd"), ("Priya tutored Ethan. He'd thanked her.",
                                                                              "He’d")):
        row = {**ROW, "text": text, "labels": {**ROW["labels"], "object": {"name": "Ethan", "references": [ref],
                                                                          "gender": "Male"}}}
        assert len(_training_rows([_write(tmp_path / "t.jsonl", row)])) == 1


def test_the_shipped_training_stories_pass_the_checks_and_are_taught_as_before():
    """Reference: every labelled story of the project's files (training and held out) and train150 passes the
    checks above, and a name written in lower case as another word occurs in none of them, so their targets did not
    change (the training targets' version stays). A lower-case particle that the name itself writes so ("bin" of
    "Muhammad bin Tawfeeq", "de" of "Ladri de Charcelot", project_train_8.jsonl) is the name's own word."""
    import glob

    from harness.identity.names import select_name
    from harness.labelling.data import builtin_training_files
    from harness.labelling.training import project_labels
    from harness.labelling.words import is_word, split_words

    files = builtin_training_files() + sorted(glob.glob(str(Path(builtin_training_files()[0]).parent / "heldout" /
                                                            "*.jsonl")))
    rows = _training_rows(files)
    assert len(rows) >= 1000
    for gs in rows:
        words = [w for w, _, _ in split_words(gs.story.text)]
        names = {k: (select_name(c.name) if c.name is not None else None) for k, c in gs.characters.items()}
        targets = project_labels(words, names, {k: c.references for k, c in gs.characters.items()})
        particles = {p for n in names.values() if n for p in n.split() if p[:1].islower()}
        assert not any((row[0] or row[2]) and is_word(w) and w[:1].islower() and w not in particles
                       for w, row in zip(words, targets))


def test_a_soup_trains_a_member_again_for_another_max_length(tmp_path, monkeypatch):
    """The members' settings left out the longest window: a soup trained at max_length 32 was reused at 384."""
    import harness.labelling.training as training
    from harness.labelling.encoder import read_model_meta
    from harness.labelling.training import train_soup

    p = _write(tmp_path / "t.jsonl", ROW)
    out = tmp_path / "soup"
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1, max_length=32)
    trained = []
    real = training.train_encoder
    monkeypatch.setattr(training, "train_encoder", lambda files, **kw: trained.append(kw["seed"]) or real(files, **kw))
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1, max_length=64)
    assert trained == [0, 1] and read_model_meta(out)["max_length"] == 64
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1, max_length=64)
    assert trained == [0, 1]


def test_seeds_outside_torchs_range_are_refused_in_one_line(tmp_path):
    from harness.labelling.training import train_soup

    p = _write(tmp_path / "t.jsonl", ROW)
    with pytest.raises(ConfigError, match=r"^seed 99999999999999999999: give seeds from 0 to 2\*\*32 - 1$"):
        train_soup([p], [0, 99999999999999999999], out_dir=tmp_path / "m", epochs=1)
    with pytest.raises(ConfigError, match=r"^seed -1: give seeds"):
        train_soup([p], [-1], out_dir=tmp_path / "m", epochs=1)


def test_a_second_training_into_one_directory_is_refused_while_the_first_runs(tmp_path):
    """Two trainings into one --out (a command run twice, a requeued job beside the first) each said "saved" while
    one's model, checkpoint and half-written save were the other's to overwrite or delete."""
    import fcntl
    import threading

    from typer.testing import CliRunner

    from harness.cli import app
    from harness.labelling.training import train_soup, training_lock

    p = _write(tmp_path / "t.jsonl", ROW)
    out = tmp_path / "m"
    with open(tmp_path / ".m.train.lock", "a") as other:  # another process's training holds it
        fcntl.flock(other, fcntl.LOCK_EX)
        for seeds in (["--seed", "0"], ["--seed", "0", "--seed", "1"]):
            r = CliRunner().invoke(app, ["label", "train", "--data", str(p), "--out", str(out), "--epochs", "1",
                                         "--layers", "1", *seeds])
            assert r.exit_code == 2 and not (out / "meta.json").exists()
            assert f"{out}: another training is writing this model now" in " ".join(r.output.split())
    with training_lock(out):  # this thread's own lock does not refuse its training (`harness run` holds it)
        train_soup([p], [0], out_dir=out, epochs=1, layers=1)
    assert (out / "meta.json").exists()
    waited = []
    with training_lock(out):
        def second() -> None:
            with training_lock(out, waiting=lambda: waited.append(1)):
                waited.append(2)

        t = threading.Thread(target=second)
        t.start()
        t.join(0.5)
        assert waited == [1]  # a job of `harness run` waits for the training on first use
    t.join(10)
    assert waited == [1, 2]


def test_stopping_a_soup_trained_at_once_ends_its_members_processes(tmp_path, monkeypatch):
    """Stopped while its members trained (SIGTERM to the harness process alone is a KeyboardInterrupt there), it
    waited for every member to train all its epochs; now it ends their processes, which keep their checkpoints."""
    import harness.labelling.training as training

    ended = []

    class Pool:
        def __init__(self, *a, **kw):
            self._processes = {1: Process(), 2: Process()}

        def submit(self, *a, **kw):
            raise KeyboardInterrupt

        def shutdown(self, wait=True, cancel_futures=False):
            ended.append(("shutdown", cancel_futures))

    class Process:
        def terminate(self):
            ended.append("terminate")

        def join(self, timeout=None):
            ended.append("join")

    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", Pool)
    with pytest.raises(KeyboardInterrupt):
        training._train_members_at_once([], {0: tmp_path / "a", 1: tmp_path / "b"}, 0, 2, {})
    assert ended == ["terminate", "terminate", ("shutdown", True), "join", "join"]


def test_a_member_process_the_system_kills_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    """A member's process killed (out of memory) broke the pool: BrokenProcessPool's traceback, exit 1."""
    from concurrent.futures.process import BrokenProcessPool

    import harness.labelling.training as training
    from harness.errors import BackendError

    class Future:
        def exception(self):
            return BrokenProcessPool("A process in the process pool was terminated abruptly")

    class Pool:
        def __init__(self, *a, **kw):
            self._processes = {}

        def submit(self, *a, **kw):
            return Future()

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", Pool)
    members = {0: tmp_path / "soup" / "members" / "seed-0", 1: tmp_path / "soup" / "members" / "seed-1"}
    with pytest.raises(BackendError, match=re.escape(f"{tmp_path / 'soup' / 'members'}: a process training a member "
                                                     f"of the soup ended abruptly (killed by the system: out of "
                                                     f"memory?)")):
        training._train_members_at_once([], members, 0, 2, {})


@pytest.mark.parametrize("text, name, refs", [
    ("Dr. Ana Ruiz met him. She smiled.", "Dr. Ana Ruiz", ["She"]),
    ("Ana Ruiz met him. She smiled.", "Dr. Ana Ruiz", ["She", "her sister"]),
    ("Coach waved at him. His sister smiled.", "Coach", ["His sister"]),
    ("she rose from her chair.", "Rose", ["she"]),
    ("Sean O'Brien smiled. He waved.", "O'Brien", ["He"]),
    ("Mary-Anne smiled. She waved.", "Mary-Anne", ["She"]),
    ("Mary-Anne smiled. She waved.", "Anne", ["She"]),
    ("The self-taught painter waved.", None, ["painter", "self"]),
    ("Li smiled at Bo. He waved.", "Li", ["He"]),
])
def test_the_label_check_accepts_what_the_targets_teach(text, name, refs):
    """``_check_taught`` matches as ``project_labels`` does: a label passes exactly where it marks a word."""
    from harness.labelling.training import _check_taught, project_labels
    from harness.labelling.words import split_words

    words = [w for w, _, _ in split_words(text)]
    for ref in refs:
        marks = any(row[1] for row in project_labels(words, {}, {"subject": [ref]}))
        try:
            _check_taught("f", "subject", words, None, [ref])
            passed = True
        except DataError:
            passed = False
        assert passed == marks, ref
    if name:
        marks = any(row[0] for row in project_labels(words, {"subject": name}, {}))
        try:
            _check_taught("f", "subject", words, name, [])
            passed = True
        except DataError:
            passed = False
        assert passed == marks, name


def test_the_training_precision_is_float32_unless_told_and_checked():
    """bfloat16 trains faster on a CPU with AVX512-BF16 but labelled the held-out stories less well (session 70):
    float32 stays the default."""
    from harness.labelling.training import train_precision

    assert train_precision(None) == "float32" and train_precision("bfloat16") == "bfloat16"
    with pytest.raises(ConfigError, match=r"^precision 'fp16' \(--precision, label.train_precision\): train in "
                                          r"float32 or bfloat16$"):
        train_precision("fp16")


def test_a_bfloat16_training_saves_float32_weights_and_a_soup_trains_again_for_another_precision(tmp_path, monkeypatch):
    """The forward pass runs in bfloat16 (the weights differ from a float32 training of the same seed), the saved
    weights stay float32, and a member trained in one precision is not reused for the other; a member of an
    earlier release (no precision recorded) was trained in float32."""
    import torch
    from safetensors.torch import load_file

    import harness.labelling.training as training
    from harness.labelling.encoder import read_model_meta
    from harness.labelling.training import train_soup

    p = _write(tmp_path / "t.jsonl", ROW)
    out = tmp_path / "soup"
    member = out / "members" / "seed-0"
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1, precision="bfloat16")
    assert read_model_meta(member)["train"]["precision"] == "bfloat16"
    in_bf16 = load_file(str(member / "encoder" / "model.safetensors"))
    assert {v.dtype for v in load_file(str(out / "encoder" / "model.safetensors")).values()} == {torch.float32}
    trained = []
    real = training.train_encoder
    monkeypatch.setattr(training, "train_encoder", lambda files, **kw: trained.append(kw["seed"]) or real(files, **kw))
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1, precision="bfloat16")
    assert trained == []
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1, precision="float32")
    assert trained == [0, 1] and read_model_meta(member)["train"]["precision"] == "float32"
    in_fp32 = load_file(str(member / "encoder" / "model.safetensors"))
    assert any(not torch.equal(in_bf16[k], in_fp32[k]) for k in in_fp32)
    for seed in (0, 1):  # as an earlier release wrote them
        meta_path = out / "members" / f"seed-{seed}" / "meta.json"
        meta = json.loads(meta_path.read_text())
        assert meta["train"].pop("precision") == "float32"
        meta_path.write_text(json.dumps(meta))
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1, precision="float32")
    train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1)  # the default
    assert trained == [0, 1]
    with pytest.raises(ConfigError, match=r"^precision 'half' \(--precision"):
        train_soup([p], [0, 1], out_dir=out, epochs=1, layers=1, precision="half")


def test_a_soup_that_cannot_be_trained_or_averaged_is_refused_before_any_training(tmp_path, monkeypatch):
    import harness.labelling.training as T
    from harness.labelling.data import builtin_training_files

    monkeypatch.setattr(T, "train_encoder", lambda *a, **k: pytest.fail("trained"))
    p = builtin_training_files()[:1]
    with pytest.raises(ConfigError, match=r"^train_soup needs at least one seed$"):
        T.train_soup(p, [], out_dir=tmp_path / "soup")
    with pytest.raises(ConfigError, match=r"^a soup starts every member from the base; leave out init_from"):
        T.train_soup(p, [0, 1], out_dir=tmp_path / "soup", init_from=tmp_path / "other")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"^out_dir .*file: a file is there, and a trained model is a directory"):
        T.train_soup(p, [0, 1], out_dir=tmp_path / "file")
    with pytest.raises(ConfigError, match=r"^average_encoders needs at least one trained encoder directory$"):
        T.average_encoders([], tmp_path / "avg")


def test_a_damaged_checkpoint_is_said_and_the_training_starts_over(tmp_path):
    import harness.labelling.training as T

    path = tmp_path / T.CHECKPOINT
    path.write_bytes(b"not a torch file")
    with pytest.warns(UserWarning) as said:
        assert T._load_checkpoint(path, {}) is None
    (w,) = said  # one line (torch's error ran to a dozen), naming the file and the error's kind
    assert re.fullmatch(r".*\.train-checkpoint\.pt: not read \(UnpicklingError: [^\n]{1,110}\); training starts over",
                        str(w.message))
    assert T._load_checkpoint(tmp_path / "none.pt", {}) is None  # no checkpoint: nothing said


def test_a_model_directory_whose_meta_json_is_no_object_is_named_with_the_command_that_trains_one(tmp_path):
    from harness.labelling.encoder import read_model_meta

    (tmp_path / "meta.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"^model directory .*: meta\.json holds no object; train one with "
                                          r"`harness label train --out "):
        read_model_meta(tmp_path, "model directory")
