"""benchmarks/training_checkpoint.py: the per-epoch checkpoint's cost against its epoch, in one run."""

from __future__ import annotations

import pytest


def test_it_times_every_checkpoint_against_the_epochs_and_puts_the_writer_back(benchmark_module):
    import harness.labelling.training as training

    bench = benchmark_module("training_checkpoint")
    real = training._save_checkpoint
    out = bench.main(["--limit", "2", "--epochs", "3", "--threads", "1"])
    assert training._save_checkpoint is real
    assert out["stories"] == 2 and out["epochs"] == 3
    assert out["checkpoint_mib"] > 50  # MiniLM's weights and AdamW's two moments, not an empty file
    # both timed; which is longer is the machine's (on 2 stories an epoch and a 170 MB write are alike: 0.63 s each in
    # one clean-clone run, which failed a comparison of the two)
    assert out["checkpoint_s"] > 0 and out["epoch_s"] > 0
    assert out["checkpoint_share_of_epoch"] == pytest.approx(out["checkpoint_s"] / out["epoch_s"], rel=0.05)  # of rounded figures
    with pytest.raises(SystemExit):
        bench.main(["--epochs", "1"])  # the last epoch writes none: nothing to time
