"""The label stage's labeller: the encoder trained on first use takes extra files from the config."""

from __future__ import annotations

import pytest

from harness.audit.labels import make_labeller
from harness.config import parse_config
from harness.errors import ConfigError


def test_missing_extra_training_file_stops_before_training(tmp_path):
    cfg = parse_config({
        "model": {"backend": "transformers", "path": "smollm2-135m"},
        "output_dir": str(tmp_path / "run"),
        "label": {"labeller": "encoder", "model_dir": str(tmp_path / "enc"),
                  "train_extra": [str(tmp_path / "nope.jsonl")], "train_epochs": 2},
    })
    assert cfg.label.train_epochs == 2
    with pytest.raises(ConfigError, match=r"label\.train_extra: .*nope\.jsonl not found"):
        make_labeller(cfg, echo=lambda s: None)
    assert not (tmp_path / "enc").exists()  # nothing was trained or written
