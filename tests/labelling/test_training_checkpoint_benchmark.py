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


def test_the_share_is_the_mean_checkpoint_over_the_mean_epoch(benchmark_module, monkeypatch):
    """The figures are those of the run, by hand: a training of 3 epochs in 12 s (4 s each, checkpoints included)
    whose two checkpoints took 0.5 s and 1.5 s (1 s each) spent a quarter of an epoch on each checkpoint."""
    from pathlib import Path
    from types import SimpleNamespace

    import harness.labelling.training as training

    bench = benchmark_module("training_checkpoint")
    now = [0.0]
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    took = iter([0.5, 1.5])

    def save(path, state):  # the checkpoint writer: 2 MiB, in the time given
        Path(path).write_bytes(b"x" * 2**21)
        now[0] += next(took)

    def train(files, *, out_dir, epochs, **kw):  # every epoch but the last writes a checkpoint
        for e in range(epochs - 1):
            training._save_checkpoint(Path(out_dir) / f"checkpoint-{e}", {})
        return SimpleNamespace(stories=2, epochs=epochs, seconds=12.0)

    monkeypatch.setattr(training, "_save_checkpoint", save)
    monkeypatch.setattr(training, "train_encoder", train)
    out = bench.main(["--epochs", "3"])
    assert out == {"stories": 2, "epochs": 3, "epoch_s": 4.0, "checkpoint_s": 1.0, "checkpoint_mib": 2.0,
                   "checkpoint_share_of_epoch": 0.25}
    assert training._save_checkpoint is save


def test_a_checkpoint_the_writer_could_not_write_stops_the_benchmark_with_the_path(benchmark_module, monkeypatch):
    """The writer warns and goes on when a write fails (a full disk): the benchmark says so in one line rather than
    time a file that is not there (a clean-clone CI run whose disk was full raised FileNotFoundError here)."""
    from pathlib import Path
    from types import SimpleNamespace

    import harness.labelling.training as training

    bench = benchmark_module("training_checkpoint")

    def train(files, *, out_dir, epochs, **kw):
        training._save_checkpoint(Path(out_dir) / training.CHECKPOINT, {})
        return SimpleNamespace(stories=2, epochs=epochs, seconds=1.0)

    monkeypatch.setattr(training, "_save_checkpoint", lambda path, state: None)  # written nowhere, as on a full disk
    monkeypatch.setattr(training, "train_encoder", train)
    with pytest.raises(SystemExit, match=r"\.train-checkpoint\.pt: the checkpoint was not written .*TMPDIR"):
        bench.main(["--epochs", "2"])
