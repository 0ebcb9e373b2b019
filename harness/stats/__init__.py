"""Statistics of the audit: representation, subordination and racialized subordination ratios.

Paper-compatible estimators reproduce Table S13 of the Laissez-Faire paper (digest sections 5
and 6); principled additions (exact p-values, story-level cluster bootstrap, Benjamini-Hochberg
FDR, smoothing / small-count flags) sit beside them. Submodules: ``intervals``,
``representation``, ``subordination``, ``rmrs``, ``sweep``, ``bootstrap``, ``fdr``, ``tables``,
``results``. Nothing heavy is imported here.
"""

#: The version of how the tables are computed, part of the statistics stage's fingerprint: a release that changes a
#: computation bumps it, so a run's tables are made again, not skipped as current (2: an exact percentage is not
#: above its own threshold in the R_mrs sweep; NH/PI unmeasured; no story bootstrap without sampling variation or
#: over a smoothed zero count; no Fisher test on likelihood sums; undefined cells out of the FDR family; Fig. 1c,d
#: bins (t, t+2]).
METHODS_VERSION = "2"

__all__ = ["METHODS_VERSION", "bootstrap", "fdr", "intervals", "representation", "results", "rmrs", "subordination", "sweep", "tables"]
