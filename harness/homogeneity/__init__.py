"""Homogeneity audit (seed 002, Lee, Montgomery and Lai, FAccT 2024): do a model's texts about
socially subordinate groups vary less than its texts about dominant groups?

- ``refusal``: the authors' refusal filter (rows flagged, never dropped) and top-up planning;
- ``embed``: pluggable embedders, the paper's preprocessing variants, a resumable cache;
- ``mixed``: the four random-intercept LMMs, LRTs and simple effects, fitted exactly from
  per-prompt pair counts, sums and sums of squares;
- ``inference``: text-level bootstrap and permutation inference;
- ``stage``: ``generate_homogeneity`` (generation with top-up) and ``run_homogeneity``
  (generations -> embeddings -> tables in the run directory);
- ``cli``: the ``harness homogeneity`` Typer sub-app.
"""

__all__ = ["cli", "embed", "inference", "mixed", "refusal", "stage"]
