"""benchmarks/soup_training.py: a soup's members trained in turn against at once, in one run."""

from __future__ import annotations

import pytest


def test_both_layouts_train_the_same_members_and_the_section_gives_their_ratio(benchmark_module):
    from harness.labelling.data import builtin_training_files

    bench = benchmark_module("soup_training")
    files = list(builtin_training_files())
    alone = bench.run(files, [0, 1], 1, 1, 3)
    together = bench.run(files, [0, 1], 1, 2, 3)
    assert alone["jobs"] == 1 and together["jobs"] == 2 and alone["stories"] == together["stories"] == 3
    from harness.labelling.encoder import usable_cpus

    assert together["threads"] == max(1, usable_cpus() // 2) and alone["threads"] == usable_cpus()
    # one seed's member learns alike in either layout (thread counts differ: close, not bit-equal)
    assert all(abs(a - b) < 1e-3 for a, b in zip(alone["final_losses"], together["final_losses"]))
    assert alone["final_losses"][0] != alone["final_losses"][1]  # two seeds, two members
    text = bench.report({**alone, "seconds": 30.0}, {**together, "seconds": 20.0}, [0, 1], "a machine")
    assert "| 30.0 |" in text and "| 20.0 |" in text and "**1.50x** the speed (faster in this run)" in text
    assert "bfloat16" not in text
    bf16 = bench.run(files, [0, 1], 1, 2, 3, "bfloat16")
    assert bf16["precision"] == "bfloat16" and together["precision"] == "float32"
    assert bf16["final_losses"] != together["final_losses"]  # the other arithmetic: close, not equal
    assert all(abs(a - b) < 0.05 for a, b in zip(bf16["final_losses"], together["final_losses"]))
    text = bench.report({**alone, "seconds": 30.0}, {**together, "seconds": 20.0}, [0, 1], "a machine",
                        {**bf16, "seconds": 12.5})
    assert "bfloat16 (`--jobs 2 --precision bfloat16`) | 12.5 |" in text
    assert "bfloat16 vs float32, at once: **1.60x** the speed (faster in this run)" in text


@pytest.mark.parametrize("threads, seconds, said", [
    # the rows said "a process and a thread each" where members at once share out more cores (4 each on 8)
    ((8, 4, 1), (30.0, 20.0, 12.5), ["| at once, a process and 4 threads each, float32",
                                     "| at once, a process and a thread each, bfloat16"]),
    # each ratio's verdict follows the ratio: members at once slower than in turn, or bfloat16 slower than float32,
    # is written "not faster", not "faster"
    ((2, 1, 1), (20.0, 25.0, 50.0), ["At once vs in turn: **0.80x** the speed (not faster in this run).",
                                     "bfloat16 vs float32, at once: **0.50x** the speed (not faster in this run)."]),
])
def test_the_section_says_each_layouts_threads_and_whether_it_was_faster(benchmark_module, threads, seconds, said):
    bench = benchmark_module("soup_training")
    run = {"stories": 3, "epochs": 1, "final_losses": [0.5, 0.6]}
    alone, together, bf16 = ({**run, "jobs": j, "threads": t, "seconds": s}
                             for j, t, s in zip((1, 2, 2), threads, seconds))
    text = bench.report(alone, together, [0, 1], "a machine", bf16)
    assert all(line in text for line in said), text
