"""Kernels for the two heavy computations of the audit (installed as ``harness.kernels``).

- ``harness.kernels.homogeneity``: within/between-group pairwise cosine statistics without
  forming pairs (segmented Gram), fused pair-level tiles (histograms, top-k, explicit pairs)
  and GEMM-batched bootstrap / permutation replicates.
- ``harness.kernels.sweep``: the R_mrs threshold sweep with an in-kernel Poisson story bootstrap.

Each module holds a NumPy reference, ``triton_*`` and ``cupy_*`` paths and a dispatcher with
``backend="auto"``. Importing never needs a GPU, triton or cupy: they load when a kernel runs.
"""

__all__ = ["homogeneity", "sweep"]
