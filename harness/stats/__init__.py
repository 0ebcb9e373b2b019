"""Statistics of the audit: representation, subordination and racialized subordination ratios.

Paper-compatible estimators reproduce Table S13 of the Laissez-Faire paper (digest sections 5
and 6); principled additions (exact p-values, story-level cluster bootstrap, Benjamini-Hochberg
FDR, smoothing / small-count flags) sit beside them. Submodules: ``intervals``,
``representation``, ``subordination``, ``rmrs``, ``sweep``, ``bootstrap``, ``fdr``, ``tables``,
``results``. Nothing heavy is imported here.
"""

__all__ = ["bootstrap", "fdr", "intervals", "representation", "results", "rmrs", "subordination", "sweep", "tables"]
