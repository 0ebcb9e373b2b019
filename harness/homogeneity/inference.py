"""Text-level inference for the homogeneity models (beyond the paper).

Each text sits in n - 1 pairs of its cell, so the paper's pair-level standard errors treat
12.97 million dependent cosines as independent and are far too small (digest section 8.12).
Texts, not pairs, are the independent units. Three answers, reported beside the paper's:

- ``text_bootstrap``: Poisson(1) multiplicities per text (the kernel module's counter-based
  generator ``story_weights``, keyed by seed, replicate and row), per-cell weighted pair sums
  sum_{i<j} w_i w_j c_ij = (||sum_i w_i x_i||^2 - sum_i w_i^2 ||x_i||^2) / 2 from one
  (B x n) @ (n x d) GEMM per cell, so memory stays O(B d + N d); the fixed effects of every
  model are recomputed by GLS at the model's fitted variance ratio, on the z-scale of the
  full sample (the global mean and SD are held fixed: the bootstrap varies the means).
  Group means of the z-scored cosine get the same treatment.
- ``text_permutation``: race labels permuted among the texts of each gender x format stratum
  (null: no race effect), gender labels within race x format (null: no gender effect, overall
  and within each race); statistics = the GLS fixed effects; p = (1 + #{|T_b| >= |T|}) / (B + 1).
- ``cell_mean_models``: the four models refitted on the 104 cell means (one observation per
  prompt), an LMM whose residual df counts prompts, not pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import ConfigError, DataError
from harness.homogeneity.mixed import (
    PAPER_MODELS, LMMResult, ModelSuite, Standardization, design_matrix, fit_lmm, simple_effects,
)


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    nrm = np.linalg.norm(x, axis=1, keepdims=True)
    if (nrm == 0).any():
        raise DataError("inference: an embedding row is all zeros; drop it")
    return x / nrm


def weighted_cell_sums(x: np.ndarray, cell: np.ndarray, n_cells: int, weights_fn, n_rep: int) -> tuple[np.ndarray, np.ndarray]:
    """Replicate (B, C) pair counts sum_{i<j} w_i w_j and pair sums sum_{i<j} w_i w_j c_ij.

    ``weights_fn(rows) -> (B, len(rows))`` gives the weights of a cell's rows. ``x`` must be
    unit rows. Exact for any weights; never forms a pair.
    """
    npairs = np.zeros((n_rep, n_cells))
    sums = np.zeros((n_rep, n_cells))
    for c in range(n_cells):
        rows = np.flatnonzero(cell == c)
        if rows.size < 2:
            continue
        W = np.asarray(weights_fn(rows), dtype=np.float64)
        Xc = x[rows].astype(np.float64)
        T = W @ Xc  # (B, d)
        sq = (Xc * Xc).sum(1)
        W2 = W * W
        sums[:, c] = ((T * T).sum(1) - W2 @ sq) / 2
        tot = W.sum(1)
        npairs[:, c] = (tot * tot - W2.sum(1)) / 2
    return npairs, sums


class _GLS:
    """Fixed effects of one model at a fixed variance ratio, vectorised over replicates."""

    def __init__(self, cells: pd.DataFrame, model: LMMResult, levels=None, refs=None) -> None:
        d = design_matrix(cells, model.formula, coding=model.coding, levels=levels, refs=refs)
        self.X = d.X
        self.names = d.names
        codes, _ = pd.factorize(cells["format"], sort=True)
        self.onehot = np.zeros((codes.max() + 1, len(cells)))
        self.onehot[codes, np.arange(len(cells))] = 1.0
        self.gamma = model.sigma2_group / model.sigma2 if model.sigma2 > 0 else 0.0

    def __call__(self, n: np.ndarray, s: np.ndarray) -> np.ndarray:
        """n, s: (B, C) pair counts and z-scale pair sums -> (B, p) fixed effects."""
        X, H = self.X, self.onehot
        m = n @ H.T  # (B, F)
        w = self.gamma / (1 + self.gamma * m)
        a = np.einsum("fc,bc,cp->bfp", H, n, X)
        bsum = s @ H.T
        XtX = np.einsum("bc,cp,cq->bpq", n, X, X) - np.einsum("bf,bfp,bfq->bpq", w, a, a)
        Xty = s @ X - np.einsum("bf,bfp,bf->bp", w, a, bsum)
        # a replicate that leaves some level without pairs (small cells: every text of a
        # group drawn zero times) has no estimate: NaN, left out of the SE and quantiles
        ok = np.linalg.matrix_rank(XtX) == XtX.shape[-1]
        out = np.full(Xty.shape, np.nan)
        if ok.any():
            out[ok] = np.linalg.solve(XtX[ok], Xty[ok][..., None])[..., 0]
        return out


def _group_means(cells: pd.DataFrame, n: np.ndarray, s: np.ndarray, by_sets) -> pd.DataFrame:
    """(B, groups) mean z per grouping; returns long frames keyed by grouping and level."""
    out = []
    for by in by_sets:
        keys = cells[list(by)].astype(str).agg(" x ".join, axis=1)
        for lv in pd.unique(keys):
            m = (keys == lv).to_numpy()
            nm = n[:, m].sum(1)
            with np.errstate(invalid="ignore", divide="ignore"):
                out.append((" x ".join(by), lv, np.where(nm > 0, s[:, m].sum(1) / nm, np.nan)))
    return out


@dataclass(frozen=True)
class TextInference:
    """Text-level results: ``coefficients`` (model, term, estimate, pair-level SE, bootstrap
    SE, percentile CI, SE ratio, permutation p), ``group_means`` (mean z with bootstrap CI),
    ``permutation`` (omnibus tests) and ``cell_mean_models`` (coefficients of the LMMs on
    cell means)."""

    coefficients: pd.DataFrame
    group_means: pd.DataFrame
    permutation: pd.DataFrame
    cell_mean_models: pd.DataFrame
    n_boot: int
    n_perm: int
    seed: int
    alpha: float

    def to_dict(self) -> dict[str, Any]:
        return {k: (v.to_dict(orient="records") if isinstance(v, pd.DataFrame) else v)
                for k, v in self.__dict__.items()}


def text_bootstrap(x, cell, cells: pd.DataFrame, suite: ModelSuite, *, n_boot: int = 1000, seed: int = 0,
                   alpha: float = 0.05, levels=None, refs=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Poisson text bootstrap of every model's fixed effects and of the group means (z scale).

    ``x``: (N, d) embeddings of the texts, ``cell``: (N,) row of ``cells`` each text belongs
    to; ``suite``: the fitted paper models (variance ratios, standardisation).
    """
    from harness.kernels.sweep import story_weights

    if n_boot < 2:
        raise ConfigError(f"n_boot must be at least 2, got {n_boot}")
    xu = _unit(x)
    st: Standardization = suite.standardization or Standardization(0, 0.0, 1.0)
    reps = np.arange(1, n_boot + 1)
    n_b, s_b = weighted_cell_sums(xu, np.asarray(cell), len(cells), lambda rows: story_weights(seed, reps, rows), n_boot)
    # a cell a replicate leaves without pairs has no sum: the closed form's rounding residue over zero
    # pairs (||sum w x||^2 - sum w^2 ||x||^2, about 1e-16) would otherwise become an infinite mean
    z_b = np.where(n_b > 0, (s_b - st.mean * n_b) / st.sd, 0.0)
    lo, hi = alpha / 2, 1 - alpha / 2
    rows = []
    for name, model in suite.models.items():
        est_b = _GLS(cells, model, levels, refs)(n_b, z_b)
        valid = int(np.isfinite(est_b).all(1).sum())
        if valid < 2:
            raise DataError(f"text bootstrap of model {name}: {n_boot - valid} of {n_boot} replicates left a level "
                            "without pairs; generate more texts per prompt")
        bse = np.nanstd(est_b, axis=0, ddof=1)
        ql, qh = np.nanquantile(est_b, [lo, hi], axis=0)
        for j, term in enumerate(model.names):
            rows.append({"model": name, "term": term, "estimate": model.fe[j], "se_pair": model.se[j],
                         "se_text": bse[j], "ci_low_text": ql[j], "ci_high_text": qh[j],
                         "se_ratio": bse[j] / model.se[j], "n_boot_valid": valid})
    coefs = pd.DataFrame(rows)
    zs = (cells["sum"].to_numpy() - st.mean * cells["n_pairs"].to_numpy()) / st.sd
    full = _group_means(cells, cells["n_pairs"].to_numpy()[None, :], zs[None, :], _GROUPINGS)
    boot = _group_means(cells, n_b, z_b, _GROUPINGS)
    gm = []
    for (by, lv, est), (_, _, rep) in zip(full, boot):
        rep = rep[np.isfinite(rep)]  # replicates that leave the level without pairs have no mean
        ql, qh = np.quantile(rep, [lo, hi]) if rep.size else (np.nan, np.nan)
        gm.append({"grouping": by, "level": lv, "mean_z": float(est[0]),
                   "se_text": float(np.std(rep, ddof=1)) if rep.size >= 2 else np.nan,
                   "ci_low_text": ql, "ci_high_text": qh, "n_boot_valid": int(rep.size)})
    return coefs, pd.DataFrame(gm)


_GROUPINGS = (("race", "gender"), ("race",), ("gender",))


def text_permutation(x, cell, cells: pd.DataFrame, suite: ModelSuite, *, n_perm: int = 1000, seed: int = 0,
                     levels=None, refs=None, chunk: int = 64) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Permutation tests over texts. Returns (per-coefficient p-values, omnibus tests).

    Race: race labels permuted within gender x format (coefficients of the race model;
    omnibus = sum of squared race coefficients). Gender: gender labels permuted within race x
    format (the gender model's coefficient and the Women - Men simple effect in each race).
    """
    if n_perm < 1:
        raise ConfigError(f"n_perm must be positive, got {n_perm}")
    xu = _unit(x).astype(np.float64)
    cell = np.asarray(cell)
    st = suite.standardization or Standardization(0, 0.0, 1.0)
    rng = np.random.default_rng(seed)
    n_obs = cells["n_pairs"].to_numpy(np.float64)
    coef_rows, omni = [], []
    for factor, strata_by, model_name in (("race", ("gender", "format"), "race"), ("gender", ("race", "format"), "gender")):
        if model_name not in suite.models:
            continue
        S = np.zeros((n_perm, len(cells)))
        skey = cells[list(strata_by)].astype(str).agg("|".join, axis=1).to_numpy()
        for sk in pd.unique(skey):
            cidx = np.flatnonzero(skey == sk)  # cells of this stratum
            rows = np.flatnonzero(np.isin(cell, cidx))
            labels = cell[rows]
            Xs = xu[rows]
            sq = (Xs * Xs).sum(1)
            for b0 in range(0, n_perm, chunk):
                nb = min(chunk, n_perm - b0)
                perm = np.stack([labels[rng.permutation(rows.size)] for _ in range(nb)])  # (nb, m)
                for c in cidx:
                    W = (perm == c).astype(np.float64)  # (nb, m) 0/1
                    T = W @ Xs
                    S[b0 : b0 + nb, c] = ((T * T).sum(1) - W @ sq) / 2
        z_perm = (S - st.mean * n_obs) / st.sd
        z_obs = ((cells["sum"].to_numpy() - st.mean * n_obs) / st.sd)[None, :]
        n_rep = np.broadcast_to(n_obs, z_perm.shape)
        targets = [(model_name, suite.models[model_name])]
        inter = suite.models.get("interaction")
        if factor == "gender" and inter is not None:
            targets.append(("interaction", inter))
        for name, model in targets:
            gls = _GLS(cells, model, levels, refs)
            obs = gls(n_obs[None, :], z_obs)[0]
            rep = gls(n_rep, z_perm)
            if name == "interaction":  # Women - Men within each race
                se = simple_effects(model, levels=levels, refs=refs)
                idx = {n: i for i, n in enumerate(model.names)}
                for _, r in se.iterrows():
                    L = np.zeros(len(model.names))
                    L[idx[f"gender{r['contrast'].split(' - ')[0]}"]] = 1
                    ref_race = (refs or {}).get("race", "White")
                    if r["race"] != ref_race:
                        L[idx[f"race{r['race']}:gender{r['contrast'].split(' - ')[0]}"]] = 1
                    t_obs, t_rep = float(L @ obs), rep @ L
                    coef_rows.append({"model": "simple effect", "term": f"{r['race']}: {r['contrast']}", "estimate": t_obs,
                                      "p_perm": (1 + np.sum(np.abs(t_rep) >= abs(t_obs) - 1e-12)) / (n_perm + 1),
                                      "null": f"{factor} labels permuted within {' x '.join(strata_by)}"})
                continue
            cols = [j for j, t in enumerate(model.terms) if t == factor]
            for j in cols:
                coef_rows.append({"model": name, "term": model.names[j], "estimate": obs[j],
                                  "p_perm": (1 + np.sum(np.abs(rep[:, j]) >= abs(obs[j]) - 1e-12)) / (n_perm + 1),
                                  "null": f"{factor} labels permuted within {' x '.join(strata_by)}"})
            T_obs = float((obs[cols] ** 2).sum())
            T_rep = (rep[:, cols] ** 2).sum(1)
            omni.append({"test": factor, "statistic": "sum of squared coefficients", "value": T_obs,
                         "p_perm": (1 + np.sum(T_rep >= T_obs - 1e-12)) / (n_perm + 1), "n_perm": n_perm,
                         "null": f"{factor} labels permuted within {' x '.join(strata_by)}"})
    return pd.DataFrame(coef_rows), pd.DataFrame(omni)


def cell_mean_models(cells: pd.DataFrame, suite: ModelSuite, *, levels=None, refs=None, alpha: float = 0.05) -> pd.DataFrame:
    """The models refitted on per-cell mean z (one observation per prompt)."""
    st = suite.standardization or Standardization(0, 0.0, 1.0)
    n = cells["n_pairs"].to_numpy(np.float64)
    mean_z = ((cells["sum"].to_numpy() - st.mean * n) / st.sd) / n
    cm = cells.assign(n_pairs=1.0, sum=mean_z, sumsq=mean_z**2)
    out = []
    for name, model in suite.models.items():
        f = fit_lmm(cm, model.formula, levels=levels, refs=refs, alpha=alpha)
        out.append(f.coef_table().assign(model=name, sigma2_format=f.sigma2_group, sigma2_residual=f.sigma2,
                                         n_obs=f.n_obs, converged=f.converged))
    df = pd.concat(out, ignore_index=True)
    return df[["model"] + [c for c in df.columns if c != "model"]]


def text_inference(x, cell, cells: pd.DataFrame, suite: ModelSuite, *, n_boot: int = 1000, n_perm: int = 0,
                   seed: int = 0, alpha: float = 0.05, levels=None, refs=None) -> TextInference:
    """Bootstrap, optional permutation tests and cell-mean models, in tidy tables."""
    coefs, gm = text_bootstrap(x, cell, cells, suite, n_boot=n_boot, seed=seed, alpha=alpha, levels=levels, refs=refs)
    perm = pd.DataFrame()
    if n_perm:
        pc, perm = text_permutation(x, cell, cells, suite, n_perm=n_perm, seed=seed, levels=levels, refs=refs)
        if not pc.empty:
            coefs = coefs.merge(pc[pc["model"] != "simple effect"][["model", "term", "p_perm"]], on=["model", "term"], how="left")
            perm = pd.concat([perm, pc[pc["model"] == "simple effect"].rename(columns={"term": "test", "estimate": "value"})
                              .assign(statistic="Women - Men estimate", n_perm=n_perm).drop(columns="model")], ignore_index=True)
    cm = cell_mean_models(cells, suite, levels=levels, refs=refs, alpha=alpha)
    return TextInference(coefs, gm, perm, cm, n_boot, n_perm, seed, alpha)


__all__ = ["PAPER_MODELS", "TextInference", "cell_mean_models", "text_bootstrap", "text_inference",
           "text_permutation", "weighted_cell_sums"]
