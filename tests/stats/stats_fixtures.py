"""Small synthetic characters tables for the statistics tests (the project's own fixtures).

A uniquely named module (not conftest) so that ``from stats_fixtures import ...`` cannot pick up
another folder's conftest when several test folders run together.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.identity import RACES

BASELINES = {"aian": 0.013, "nhpi": 0.004, "mena": 0.0379, "latine": 0.191, "asian": 0.063, "black": 0.136,
             "white": 0.589, "Female": 0.508, "Male": 0.475, "Non-binary": 0.017, "NB-NB": 0.0067,
             "F-NB": 0.0067, "M-NB": 0.0067, "F-F": 0.0175, "M-M": 0.0175, "F-M": 0.944}


def make_characters(seed: int = 0, n_stories: int = 120, models=("m1", "m2")) -> pd.DataFrame:
    """Random but well-formed characters table: neutral single-subject stories, laden two-role
    stories and romantic stories, with NaN likelihoods and unnamed characters mixed in."""
    rng = np.random.default_rng(seed)
    names = {"Sarah": (0.83, "Female"), "John": (0.88, "Male"), "Maria": (0.72, "Female"),
             "Juan": (0.87, "Male"), "Priya": (0.68, "Female"), "Alex": (0.47, "Non-binary")}
    race_of = {"Sarah": "white", "John": "white", "Maria": "latine", "Juan": "latine", "Priya": "asian",
               "Alex": "white"}
    rows = []
    for model in models:
        for domain in ("Learning", "Labor", "Love"):
            for s in range(n_stories):
                cond = "neutral" if s % 2 == 0 else "laden"
                sid = f"{model}-{domain}-{s}"
                love_type = ("romantic" if s % 3 == 0 else "friend") if domain == "Love" else None
                roles = [("subject", "baseline")] if cond == "neutral" and domain != "Love" else (
                    [("subject", "baseline"), ("object", "baseline")] if cond == "neutral"
                    else [("subject", "dominant"), ("object", "subordinate")])
                for role, power in roles:
                    nm = rng.choice(list(names)) if rng.random() > 0.1 else None
                    gender = names[nm][1] if nm else rng.choice(["Female", "Male", "Unspecified"])
                    lik = {r: (0.01 if nm else np.nan) for r in RACES}
                    if nm:
                        main = race_of[nm]
                        lik[main] = names[nm][0]
                        if nm in ("Priya",):
                            lik["mena"] = np.nan  # no Wikipedia entry
                    rows.append(dict(story_id=sid, model=model, domain=domain, condition=cond, love_type=love_type,
                                     role=role, power_role=power, gender=gender, name=nm, first_name=nm, **lik))
    return pd.DataFrame(rows)


