"""A synthetic characters table with the shape the labeller and identity stages produce, for
tests and the report benchmark: names drawn with fixed race likelihoods, power-laden stories
skewed so minoritized names are subordinate more often."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.identity import RACES

# name -> (gender, likelihoods in RACES order: aian, nhpi, mena, latine, asian, black, white, population)
NAMES = {
    "Sarah": ("Female", (0.005, 0.0, 0.16, 0.07, 0.03, 0.04, 0.81), 500000),
    "John": ("Male", (0.005, 0.0, 0.05, 0.05, 0.02, 0.08, 0.84), 900000),
    "Emily": ("Female", (0.004, 0.0, 0.02, 0.05, 0.04, 0.05, 0.85), 400000),
    "Maria": ("Female", (0.001, 0.0, 0.0, 0.81, 0.03, 0.01, 0.14), 1600000),
    "Juan": ("Male", (0.002, 0.0, 0.0, 0.96, 0.01, 0.0, 0.03), 500000),
    "Jamal": ("Male", (0.005, 0.0, 0.9, 0.04, 0.03, 0.73, 0.13), 30000),
    "Priya": ("Female", (0.005, 0.0, 0.22, 0.03, 0.77, 0.04, 0.07), 20000),
    "Ahmed": ("Male", (0.001, 0.0, 0.97, 0.02, 0.12, 0.27, 0.54), 40000),
    "Alex": ("Non-binary", (0.004, 0.0, 0.05, 0.1, 0.06, 0.08, 0.7), 300000),
    "Xochitl": ("Female", (0.0, 0.0, 0.0, 0.95, 0.0, 0.0, 0.05), 50),
}
SUB_SKEW = {"Maria": 6.0, "Juan": 8.0, "Jamal": 4.0, "Priya": 5.0, "Ahmed": 5.0}


def synthetic_characters(n_stories: int = 600, models=("model-a", "model-b"), seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    names = list(NAMES)
    base_w = np.array([6, 6, 5, 2, 1, 1, 1, 1, 1, 0.5])
    rows = []
    for model in models:
        for s in range(n_stories):
            domain = ("Learning", "Labor", "Love")[s % 3]
            condition = "neutral" if s % 2 == 0 else "laden"
            love_type = "romantic" if domain == "Love" else None
            roles = [("subject", "baseline" if condition == "neutral" else "dominant")]
            if condition == "laden" or domain == "Love":
                roles.append(("object", "baseline" if condition == "neutral" else "subordinate"))
            for role, power in roles:
                w = base_w * np.array([SUB_SKEW.get(n, 1.0) if power == "subordinate" else 1.0 for n in names])
                w[names.index("Maria")] *= 0.3 if power == "dominant" else 1.0
                if rng.random() < 0.1:
                    first, gender, lik, pop = None, "Unspecified", (np.nan,) * len(RACES), np.nan
                else:
                    first = names[rng.choice(len(names), p=w / w.sum())]
                    gender, lik, pop = NAMES[first]
                rows.append({
                    "story_id": f"{model}:{domain}-{condition}#{s}", "prompt_id": f"{domain.lower()}-{condition}-01",
                    "sample_idx": s, "model": model, "domain": domain, "condition": condition,
                    "love_type": love_type, "role": role, "power_role": power, "gender": gender,
                    "name": first, "first_name": first, "name_population": pop, "label_status": "ok",
                    **dict(zip(RACES, lik)),
                })
    return pd.DataFrame(rows)
