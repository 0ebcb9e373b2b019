"""Identity modelling: gender from references, race likelihoods from first names, baselines p*.

Submodules: ``gender`` (lexicon and inference), ``names`` (first-name parsing and the ``NameTable``),
``build`` (builds the name table from PyPI-shipped data), ``baselines`` (the p* registry), ``cli``.
Nothing heavy is imported here.
"""

RACES = ("aian", "nhpi", "mena", "latine", "asian", "black", "white")
RACE_DISPLAY = {"aian": "AI/AN", "nhpi": "NH/PI", "mena": "MENA", "latine": "Latine", "asian": "Asian",
                "black": "Black", "white": "White"}

__all__ = ["RACES", "RACE_DISPLAY"]
