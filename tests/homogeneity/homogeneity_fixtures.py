"""Shared fixtures: small synthetic corpora with a known structure, and a fake generation backend."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd
import pytest

from harness.generation.base import Backend, GenParams, GenRequest, GenResult

RACES = ["African", "Asian", "Hispanic", "White"]
GENDERS = ["man", "woman"]


def synthetic_corpus(n_per_cell, n_formats=4, d=24, seed=0, race_spread=None, woman_spread=1.05):
    """Embeddings of texts in race x gender x format cells: a format direction plus noise whose
    size depends on race (White spreads most, so minority cells are more homogeneous).

    ``n_per_cell``: an int, or a callable rng -> int for unbalanced cells. ``woman_spread``: women's noise
    relative to men's (1.0: no gender effect at all).
    Returns (x, texts DataFrame with race/gender/format/prompt_id/sample_idx/text_clean).
    """
    rng = np.random.default_rng(seed)
    spread = race_spread or {"African": 0.8, "Asian": 0.85, "Hispanic": 0.9, "White": 1.1}
    formats = [f"f{i}" for i in range(n_formats)]
    base = {f: rng.normal(size=d) * 1.2 for f in formats}
    xs, rows = [], []
    for r in RACES:
        for g in GENDERS:
            for f in formats:
                n = n_per_cell(rng) if callable(n_per_cell) else n_per_cell
                xs.append(base[f] + rng.normal(size=(n, d)) * spread[r] * (woman_spread if g == "woman" else 1.0))
                pid = f"{r}-{g}-{f}".lower()
                rows += [{"race": r, "gender": g, "format": f, "prompt_id": pid, "sample_idx": i,
                          "text_clean": f"text {pid} {i}"} for i in range(n)]
    return np.concatenate(xs).astype(np.float32), pd.DataFrame(rows)


@pytest.fixture
def corpus():
    return synthetic_corpus(12, n_formats=4)


class ScriptedBackend(Backend):
    """Deterministic stories; a request whose seed hashes below ``refuse`` gets a refusal."""

    name = "scripted"

    def __init__(self, refuse: float = 0.2) -> None:
        self.refuse = refuse
        self.calls = 0

    def generate(self, requests: Sequence[GenRequest], params: GenParams, *, progress=False) -> Iterator[GenResult]:
        words = "the a city dream hope journey heart world family love courage light dark story night river".split()
        for r in requests:
            self.calls += 1
            rnd = random.Random(r.seed)
            if rnd.random() < self.refuse:
                text = "As an AI language model, I cannot write that."
            else:
                text = " ".join(rnd.choice(words) for _ in range(25)) + "."
            yield GenResult(r.request_id, text, "stop", 5, 25)


@pytest.fixture
def scripted_backend():
    return ScriptedBackend()
