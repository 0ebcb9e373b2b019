"""Fixtures for the labelling tests: the project's own gold stories and a tiny trained encoder."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def gold_path() -> Path:
    """21 hand-written, hand-labelled stories (never used for training)."""
    return DATA / "gold.jsonl"


@pytest.fixture(scope="session")
def gold(gold_path):
    from harness.labelling.data import load_gold

    return load_gold(gold_path)


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory):
    """An encoder trained for three short epochs on 12 project stories with 2 layers (seconds). Its learning
    rate is high enough that it labels at the default threshold (about half the gold characters get a name
    or references), so tests that compare two ways of running it compare labels, not empty lists."""
    import torch

    from harness.labelling.data import builtin_training_files
    from harness.labelling.training import train_encoder

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("encoder")
    report = train_encoder(builtin_training_files(), out_dir=out, epochs=3, batch_size=4, lr=1e-3, layers=2,
                           limit=12, seed=0)
    return out, report


@pytest.fixture(scope="session")
def labelled():
    """``labelled(labels)`` -> how many characters of a list of StoryLabels have a name or references: a
    comparison of two labellings means something only where this is well above 0."""
    return lambda labels: sum(1 for s in labels for c in s.characters if c.name or c.references)


@pytest.fixture(scope="session")
def tagged():
    """``tagged(text, [(word, slot), ...])`` -> (encoding, probabilities) of a story whose words get
    probability 0.9 in the given slots (0 subject name, 1 subject reference, 2 object name, 3 object
    reference) at their first occurrence, and 0 elsewhere: the tagger's output, written by hand."""
    import numpy as np

    from harness.labelling.encoder import _Encoded
    from harness.labelling.words import split_words

    def make(text, tags):
        words = split_words(text)
        enc = _Encoded([], [], list(range(len(words))), words, False)
        p = np.zeros((len(words), 4))
        first = {w: i for i, (w, _, _) in reversed(list(enumerate(words)))}
        for w, slot in tags:
            p[first[w], slot] = 0.9
        return enc, p

    return make


@pytest.fixture
def drain_in_thread():
    """A function that reads an iterator to its end in a thread, waiting ``seconds`` at most (a call that waits for
    ever fails the test instead of hanging it): ``{"got": [...]}``, or ``{"error": exception}``."""
    import threading

    def drain(iterator, seconds: float = 60) -> dict:
        out: dict = {}

        def read():
            try:
                out["got"] = list(iterator)
            except BaseException as e:  # noqa: BLE001 - the caller compares it
                out["error"] = e

        waiting = threading.Thread(target=read, daemon=True)
        waiting.start()
        waiting.join(seconds)
        assert not waiting.is_alive(), "the call still waits"
        return out

    return drain
