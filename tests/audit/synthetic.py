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


def _name_pool(n_extra: int, rng: np.random.Generator):
    """The fixed names plus ``n_extra`` made-up ones with Dirichlet likelihoods and Zipf weights."""
    names = list(NAMES)
    gender = [NAMES[n][0] for n in names]
    lik = [NAMES[n][1] for n in names]
    pop = [NAMES[n][2] for n in names]
    if n_extra:
        alpha = np.array([0.05, 0.02, 0.2, 0.5, 0.3, 0.5, 2.0])
        names += [f"Synth{i:05d}" for i in range(n_extra)]
        gender += list(rng.choice(["Female", "Male", "Non-binary"], size=n_extra, p=[0.49, 0.49, 0.02]))
        lik += list(rng.dirichlet(alpha, size=n_extra))
        pop += list(np.round(10 ** rng.uniform(1, 6, size=n_extra)))
    base_w = np.r_[[6, 6, 5, 2, 1, 1, 1, 1, 1, 0.5], 3.0 / np.arange(2, n_extra + 2) ** 0.9]
    return np.array(names, dtype=object), np.array(gender, dtype=object), np.array(lik, dtype=float), np.array(pop, dtype=float), base_w


def synthetic_characters_fast(n_stories: int, models=("model-a", "model-b"), seed: int = 0, *,
                              n_extra_names: int = 2000, p_unnamed: float = 0.1) -> pd.DataFrame:
    """The same design as :func:`synthetic_characters`, vectorised (half a million stories in
    seconds): ``n_stories`` stories per model, domains and conditions in turn, a subject in every
    story and an object in power-laden and Love stories; names skewed as there, plus
    ``n_extra_names`` made-up names with random likelihoods so name tables have a realistic size."""
    rng = np.random.default_rng(seed)
    names, genders, lik, pop, base_w = _name_pool(n_extra_names, rng)
    s = np.arange(n_stories)
    dom_i = s % 3
    laden = s % 2 == 1
    has_obj = laden | (dom_i == 2)
    story = np.r_[s, s[has_obj]]
    is_obj = np.r_[np.zeros(n_stories, bool), np.ones(int(has_obj.sum()), bool)]
    power = np.where(~laden[story], "baseline", np.where(is_obj, "subordinate", "dominant")).astype(object)
    n_rows = len(story)
    frames = []
    for model in models:
        idx = np.empty(n_rows, dtype=np.int64)
        for p_role in ("baseline", "dominant", "subordinate"):
            m = power == p_role
            w = base_w.copy()
            if p_role == "subordinate":
                for n, k in SUB_SKEW.items():
                    w[list(NAMES).index(n)] *= k
            if p_role == "dominant":
                w[list(NAMES).index("Maria")] *= 0.3
            idx[m] = rng.choice(len(names), size=int(m.sum()), p=w / w.sum())
        unnamed = rng.random(n_rows) < p_unnamed
        domain = np.array(["Learning", "Labor", "Love"], dtype=object)[dom_i[story]]
        condition = np.where(laden[story], "laden", "neutral").astype(object)
        prompt_id = pd.Series(domain).str.lower() + "-" + condition + "-" + pd.Series((story // 6) % 10 + 1).map("{:02d}".format)
        first = np.where(unnamed, None, names[idx])
        df = pd.DataFrame({
            "story_id": model + ":" + prompt_id + "#" + pd.Series(story).astype(str),
            "prompt_id": prompt_id, "sample_idx": story, "model": model, "domain": domain, "condition": condition,
            "love_type": np.where(domain == "Love", "romantic", None), "role": np.where(is_obj, "object", "subject").astype(object),
            "power_role": power, "gender": np.where(unnamed, "Unspecified", genders[idx]), "name": first, "first_name": first,
            "name_population": np.where(unnamed, np.nan, pop[idx]), "label_status": "ok",
        })
        L = np.where(unnamed[:, None], np.nan, lik[idx])
        for j, race in enumerate(RACES):
            df[race] = L[:, j]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def write_synthetic_runs(root, chars: pd.DataFrame, tables: dict[str, pd.DataFrame], *, texts=None,
                         labellers: dict | None = None) -> list:
    """One run directory per model of ``chars`` under ``root``, as ``harness report`` reads them:
    ``run.json`` (with ``labellers[model]`` as its labeller info), ``generations/`` (one story per
    story id; ``texts(n)`` gives the texts, default a fixed sentence) and that model's slice of
    ``tables`` under ``statistics/``."""
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    from harness.store import RunStore

    runs = []
    for model, g in chars.groupby("model", sort=True):
        run = Path(root) / str(model)
        manifest = {"config": {"name": model, "model": {"backend": "synthetic", "path": model}},
                    "model": {"backend": "synthetic", "name": model}, "rows": int(g.story_id.nunique())}
        if labellers and model in labellers:
            manifest["labeller"] = labellers[model]
        RunStore(run).write_manifest(manifest)
        stories = g.drop_duplicates("story_id")[["prompt_id", "sample_idx"]]
        text = texts(len(stories)) if texts else ["Maria taught the class; she was a Navajo weaver's daughter."] * len(stories)
        (run / "generations").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"prompt_id": stories.prompt_id.to_numpy(), "sample_idx": stories.sample_idx.to_numpy(np.int32),
                                 "text_clean": text, "finish_reason": ["stop"] * len(stories)}),
                       run / "generations" / "gen-0of1.parquet")
        (run / "statistics").mkdir(parents=True, exist_ok=True)
        for name, df in tables.items():
            (df[df.model == model] if "model" in df.columns else df).to_parquet(run / "statistics" / f"{name}.parquet", index=False)
        runs.append(run)
    return runs
