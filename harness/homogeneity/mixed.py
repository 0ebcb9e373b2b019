"""The digest's linear mixed models, fitted exactly from per-cell sufficient statistics.

Model (lme4 notation): ``cosine ~ fixed + (1 | format)``. Every fixed-effect regressor (race,
gender and their interaction) is constant within a cell (one race x gender x format prompt),
so with cells c, format f(c), pair count n_c, pair sum S_c and sum of squares Q_c, and
gamma = sigma2_format / sigma2, w_f = gamma / (1 + gamma m_f), m_f = sum_{c in f} n_c,
a_f = sum_{c in f} n_c x_c, b_f = sum_{c in f} S_c:

    X'V^-1 X = (sum_c n_c x_c x_c' - sum_f w_f a_f a_f') / sigma2
    X'V^-1 y = (sum_c S_c x_c     - sum_f w_f a_f b_f ) / sigma2
    y'V^-1 y = (sum_c Q_c         - sum_f w_f b_f^2   ) / sigma2
    log|V|   = N log sigma2 + sum_f log(1 + gamma m_f)

(V = sigma2 (I + gamma Z Z'), Sherman-Morrison per format block). The (RE)ML likelihood
therefore depends on the 12.97 million pair cosines of the paper only through 104 x 3
numbers: beta and sigma2 are profiled out in closed form and gamma is a 1-D optimisation.
Nothing here ever sees a pair.

Also here: the paper's global z-standardisation from the sums, R-style treatment and sum
contrasts, Satterthwaite degrees of freedom (lmerTest), the afex Type-3 likelihood-ratio
tests (ML, sum coding, each term's columns dropped from the full interaction model), and the
emmeans Women - Men contrasts within each race (asymptotic z).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats

from harness.errors import ConfigError, DataError

#: The four models of the paper (Table 3), by the name used in the output tables.
PAPER_MODELS: dict[str, str] = {
    "race": "race",
    "gender": "gender",
    "race+gender": "race + gender",
    "interaction": "race * gender",
}
DEFAULT_LEVELS = {"race": ["African", "Asian", "Hispanic", "White"], "gender": ["man", "woman"]}
DEFAULT_REFS = {"race": "White", "gender": "man"}


# ============================================================================ standardisation


@dataclass(frozen=True)
class Standardization:
    """Mean and SD (n - 1 denominator, R ``scale``) of all pair cosines, from the sums."""

    n: int
    mean: float
    sd: float

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean, "sd": self.sd}


def standardization(n, s, q) -> Standardization:
    """Global mean and SD over all pairs of all cells (the paper's z-scoring)."""
    n, s, q = (np.asarray(v, dtype=np.float64) for v in (n, s, q))
    N = float(n.sum())
    if N < 2:
        raise DataError("standardization: fewer than two pair cosines in total")
    mu = float(s.sum() / N)
    # centred per cell first: sum (y - mu)^2 = Q - 2 mu S + mu^2 n
    ss = float((q - 2 * mu * s + mu * mu * n).sum())
    sd = float(np.sqrt(max(ss, 0.0) / (N - 1)))
    if sd == 0:
        raise DataError("standardization: every pair cosine is identical; nothing to standardise")
    return Standardization(int(N), mu, sd)


def standardize_sums(n, s, q, st: Standardization) -> tuple[np.ndarray, np.ndarray]:
    """Per-cell (sum, sum of squares) of z = (y - mean) / sd."""
    n, s, q = (np.asarray(v, dtype=np.float64) for v in (n, s, q))
    zs = (s - st.mean * n) / st.sd
    zq = (q - 2 * st.mean * s + st.mean**2 * n) / st.sd**2
    return zs, zq


# ============================================================================ design


@dataclass(frozen=True)
class Design:
    """Cell-level design matrix with R-style column names and the term of each column."""

    X: np.ndarray
    names: tuple[str, ...]
    terms: tuple[str, ...]


def parse_formula(formula: str) -> list[str]:
    """Terms of ``"race"``, ``"race + gender"``, ``"race * gender"``, ``"race + gender + race:gender"``, ``"1"``."""
    f = formula.replace(" ", "")
    if f in ("", "1"):
        return []
    terms: list[str] = []
    for part in f.split("+"):
        if "*" in part:
            factors = part.split("*")
            if len(factors) != 2:
                raise ConfigError(f"formula {formula!r}: only two-way interactions are supported")
            a, b = factors
            terms += [a, b, f"{a}:{b}"]
        else:
            terms.append(part)
    out = []
    for t in terms:
        if t not in out:
            out.append(t)
    return out


def design_matrix(
    cells: pd.DataFrame, formula: str, *, coding: str = "treatment", levels: dict[str, list[str]] | None = None,
    refs: dict[str, str] | None = None,
) -> Design:
    """Intercept plus the columns of each term of ``formula`` for every row of ``cells``.

    ``coding="treatment"``: one 0/1 column per non-reference level (R ``contr.treatment``
    after ``relevel``); ``coding="sum"``: R ``contr.sum`` (level k: +1 in column k, the last
    level -1 everywhere). Interaction columns are products of the factors' columns.
    """
    if coding not in ("treatment", "sum"):
        raise ConfigError(f"coding must be 'treatment' or 'sum', got {coding!r}")
    levels = {**DEFAULT_LEVELS, **(levels or {})}
    refs = {**DEFAULT_REFS, **(refs or {})}
    cols: dict[str, tuple[list[str], np.ndarray]] = {}

    def factor(name: str) -> tuple[list[str], np.ndarray]:
        if name in cols:
            return cols[name]
        if name not in cells.columns:
            raise DataError(f"design: cells lack a {name!r} column (needed by the formula)")
        lv = list(levels.get(name) or sorted(cells[name].unique()))
        unknown = sorted(set(cells[name]) - set(lv))
        if unknown:
            raise DataError(f"design: {name} has levels {unknown} not in {lv}; pass levels=")
        present = set(cells[name])
        lv = [l for l in lv if l in present]  # levels with no cell have no column
        if len(lv) < 2:
            raise DataError(f"design: {name} has a single level {lv} in the data; drop it from the formula")
        v = cells[name].to_numpy()
        if coding == "treatment":
            ref = refs.get(name, lv[0])
            if ref not in lv:
                raise ConfigError(f"design: reference level {ref!r} of {name} is not one of {lv}")
            keep = [l for l in lv if l != ref]
            M = np.stack([(v == l).astype(float) for l in keep], axis=1)
            names = [f"{name}{l}" for l in keep]
        else:
            keep = lv[:-1]
            M = np.stack([(v == l).astype(float) - (v == lv[-1]).astype(float) for l in keep], axis=1)
            names = [f"{name}[S.{l}]" for l in keep]
        cols[name] = (names, M)
        return cols[name]

    X = [np.ones((len(cells), 1))]
    names, terms = ["(Intercept)"], ["(Intercept)"]
    for t in parse_formula(formula):
        if ":" in t:
            a, b = t.split(":")
            na, Ma = factor(a)
            nb, Mb = factor(b)
            for j, nj in enumerate(nb):
                for i, ni in enumerate(na):
                    X.append((Ma[:, i] * Mb[:, j])[:, None])
                    names.append(f"{ni}:{nj}")
                    terms.append(t)
        else:
            n_, M = factor(t)
            X.append(M)
            names += n_
            terms += [t] * len(n_)
    return Design(np.concatenate(X, axis=1), tuple(names), tuple(terms))


# ============================================================================ the fit


@dataclass(frozen=True)
class LMMResult:
    """One random-intercept LMM fitted from sufficient statistics.

    ``fe``: fixed effects (order ``names``); ``cov_fe``: their covariance; ``df``:
    Satterthwaite df per coefficient; ``sigma2`` / ``sigma2_group``: residual and random
    intercept variances; ``loglik``: the REML or ML log-likelihood (as ``logLik()`` in R);
    ``converged`` and ``message`` report the 1-D optimisation of gamma.
    """

    formula: str
    method: str
    coding: str
    names: tuple[str, ...]
    terms: tuple[str, ...]
    fe: np.ndarray
    cov_fe: np.ndarray
    df: np.ndarray
    sigma2: float
    sigma2_group: float
    loglik: float
    n_obs: int
    n_cells: int
    n_groups: int
    converged: bool
    message: str = ""
    alpha: float = 0.05
    _state: Any = field(default=None, repr=False, compare=False)

    @property
    def se(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov_fe))

    @property
    def t(self) -> np.ndarray:
        return self.fe / self.se

    @property
    def p(self) -> np.ndarray:
        return 2 * stats.t.sf(np.abs(self.t), self.df)

    def coef_table(self) -> pd.DataFrame:
        """Tidy coefficients: term, estimate, SE, Satterthwaite df, t, p and the (1 - alpha) CI."""
        q = stats.t.ppf(1 - self.alpha / 2, self.df)
        return pd.DataFrame({
            "term": self.names, "estimate": self.fe, "se": self.se, "df": self.df, "t": self.t, "p": self.p,
            "ci_low": self.fe - q * self.se, "ci_high": self.fe + q * self.se,
        })

    def contrast(self, L) -> tuple[float, float, float]:
        """Estimate, SE and Satterthwaite df of the linear combination ``L @ fe``."""
        L = np.asarray(L, dtype=np.float64)
        est = float(L @ self.fe)
        se = float(np.sqrt(L @ self.cov_fe @ L))
        return est, se, self._state.satterthwaite(L) if self._state is not None else np.nan

    def to_dict(self) -> dict[str, Any]:
        return {
            "formula": self.formula, "method": self.method, "coding": self.coding,
            "coefficients": self.coef_table().to_dict(orient="records"),
            "sigma2": self.sigma2, "sigma2_group": self.sigma2_group, "loglik": self.loglik,
            "n_obs": self.n_obs, "n_cells": self.n_cells, "n_groups": self.n_groups,
            "converged": self.converged, "message": self.message,
        }


class _Profile:
    """Cell-level sufficient statistics of one model and the (RE)ML criterion as a function of gamma."""

    def __init__(self, X, group, n, s, q, reml: bool) -> None:
        self.X, self.n, self.s, self.q, self.reml = X, n, s, q, reml
        self.N = float(n.sum())
        self.p = X.shape[1]
        G = int(group.max()) + 1
        H = np.zeros((G, len(n)))
        H[group, np.arange(len(n))] = 1.0
        self.m = H @ n  # pairs per group
        # Per group: weighted means of x and y, and the within-group (centred) cross products,
        # so that X'WX = sum_f [Cxx_f + r_f m_f xbar_f xbar_f'] with r_f = 1 / (1 + gamma m_f):
        # no cancellation at any gamma.
        self.xbar = (H @ (n[:, None] * X)) / self.m[:, None]  # (G, p)
        self.ybar = (H @ s) / self.m
        Xc = X - self.xbar[group]
        yc_sum = s - self.ybar[group] * n  # sum over the cell of (y - ybar_f)
        self.Cxx = Xc.T @ (n[:, None] * Xc)
        self.Cxy = Xc.T @ yc_sum
        yb = self.ybar[group]
        self.Cyy = float((q - 2 * yb * s + yb * yb * n).sum())
        self.G = G

    def parts(self, gamma: float):
        r = self.m / (1.0 + gamma * self.m)  # m_f r_f
        XWX = self.Cxx + (self.xbar * r[:, None]).T @ self.xbar
        XWy = self.Cxy + self.xbar.T @ (r * self.ybar)
        yWy = self.Cyy + float((r * self.ybar**2).sum())
        try:
            cf = np.linalg.cholesky(XWX)
        except np.linalg.LinAlgError:
            raise DataError("mixed model: the fixed-effect design is singular (a level with no pairs?)") from None
        beta = np.linalg.solve(XWX, XWy)
        rss = max(yWy - float(XWy @ beta), 0.0)
        logdet_xwx = 2.0 * float(np.log(np.diag(cf)).sum())
        logdet_v = float(np.log1p(gamma * self.m).sum())
        return beta, XWX, rss, logdet_xwx, logdet_v

    def dof(self) -> float:
        return self.N - self.p if self.reml else self.N

    def profiled_deviance(self, gamma: float) -> float:
        _, _, rss, ld_x, ld_v = self.parts(gamma)
        k = self.dof()
        if rss <= 0:
            return -np.inf
        dev = k * (np.log(2 * np.pi * rss / k) + 1.0) + ld_v
        return dev + ld_x if self.reml else dev

    def deviance(self, sigma2: float, sigma2_g: float) -> float:
        """Full -2 log-likelihood at variance parameters (sigma2, sigma2_group)."""
        gamma = sigma2_g / sigma2
        _, _, rss, ld_x, ld_v = self.parts(gamma)
        k = self.dof()
        dev = k * np.log(2 * np.pi * sigma2) + ld_v + rss / sigma2
        return dev + ld_x if self.reml else dev

    def vcov_at(self, sigma2: float, sigma2_g: float) -> np.ndarray:
        _, XWX, *_ = self.parts(sigma2_g / sigma2)
        return sigma2 * np.linalg.inv(XWX)

    def fit(self):
        if self.G < 2:  # one group: no random intercept can be estimated
            return 0.0, True, "one group: fitted without the random intercept"
        lo = np.log(1e-10 / self.m.max())
        hi = np.log(1e10)
        grid = np.linspace(lo, hi, 121)
        devs = np.array([self.profiled_deviance(np.exp(t)) for t in grid])
        i = int(np.nanargmin(devs))
        best_t, best = grid[i], devs[i]
        converged, msg = True, ""
        if 0 < i < len(grid) - 1:
            r = optimize.minimize_scalar(lambda t: self.profiled_deviance(np.exp(t)), bounds=(grid[i - 1], grid[i + 1]),
                                         method="bounded", options={"xatol": 1e-10})
            if r.fun <= best:
                best_t, best = float(r.x), float(r.fun)
            converged = bool(r.success)
            msg = str(r.message) if not r.success else ""
        elif i == len(grid) - 1:
            converged, msg = False, "variance ratio at the upper search bound (1e10)"
        gamma = float(np.exp(best_t))
        d0 = self.profiled_deviance(0.0)
        if d0 <= best:  # the boundary (no format variance) wins
            gamma, msg = 0.0, "random-intercept variance estimated at zero (boundary)"
        self.gamma_hat = gamma
        return gamma, converged, msg

    def satterthwaite(self, L: np.ndarray) -> float:
        """lmerTest's Satterthwaite df for L'beta: 2 v^2 / (g' A g), A = 2 H^-1 of the deviance
        in (log sigma2, log sigma2_group); numerical derivatives (the df does not depend on the
        parametrisation of the variance parameters)."""
        s2, s2g = self.sigma2_hat, self.sigma2g_hat
        boundary = s2g <= 0 or self.G < 2
        psi0 = np.array([np.log(s2)] if boundary else [np.log(s2), np.log(s2g)])

        def dev(psi):
            return self.deviance(np.exp(psi[0]), 0.0 if boundary else np.exp(psi[1]))

        def var(psi):
            return float(L @ self.vcov_at(np.exp(psi[0]), 0.0 if boundary else np.exp(psi[1])) @ L)

        k = psi0.size
        h = 1e-3
        H = np.zeros((k, k))
        g = np.zeros(k)
        f0 = dev(psi0)
        for i in range(k):
            ei = np.eye(k)[i] * h
            g[i] = (var(psi0 + ei) - var(psi0 - ei)) / (2 * h)
            H[i, i] = (dev(psi0 + ei) - 2 * f0 + dev(psi0 - ei)) / h**2
            for j in range(i + 1, k):
                ej = np.eye(k)[j] * h
                H[i, j] = H[j, i] = (dev(psi0 + ei + ej) - dev(psi0 + ei - ej) - dev(psi0 - ei + ej)
                                     + dev(psi0 - ei - ej)) / (4 * h * h)
        try:
            A = 2 * np.linalg.inv(H)
        except np.linalg.LinAlgError:
            return np.nan
        v = var(psi0)
        denom = float(g @ A @ g)
        return float(2 * v * v / denom) if denom > 0 else np.inf


def fit_lmm(
    cells: pd.DataFrame, formula: str, *, reml: bool = True, coding: str = "treatment", group: str = "format",
    n_col: str = "n_pairs", sum_col: str = "sum", sumsq_col: str = "sumsq", levels=None, refs=None,
    alpha: float = 0.05, drop_terms: tuple[str, ...] = (),
) -> LMMResult:
    """Fit ``y ~ formula + (1 | group)`` exactly from per-cell (n, sum, sum of squares).

    ``cells``: one row per cell with the factor columns, ``group`` and the three sums (on the
    scale to fit, e.g. z-standardised); ``drop_terms``: terms whose columns are removed
    after coding (afex Type-3 restricted models).
    """
    need = [n_col, sum_col, sumsq_col, group]
    missing = [c for c in need if c not in cells.columns]
    if missing:
        raise DataError(f"fit_lmm: cells lack column(s) {', '.join(missing)}")
    cells = cells[cells[n_col] > 0]
    if cells.empty:
        raise DataError("fit_lmm: no cell has any pair")
    d = design_matrix(cells, formula, coding=coding, levels=levels, refs=refs)
    keep = [i for i, t in enumerate(d.terms) if t not in drop_terms]
    X = d.X[:, keep]
    names = tuple(d.names[i] for i in keep)
    terms = tuple(d.terms[i] for i in keep)
    gcodes, guniq = pd.factorize(cells[group], sort=True)
    n = cells[n_col].to_numpy(np.float64)
    s = cells[sum_col].to_numpy(np.float64)
    q = cells[sumsq_col].to_numpy(np.float64)
    prof = _Profile(X, gcodes, n, s, q, reml)
    if prof.N <= prof.p + (1 if prof.G >= 2 else 0):
        raise DataError(f"fit_lmm: {int(prof.N)} observations cannot identify {prof.p} fixed effects and two variances")
    gamma, converged, msg = prof.fit()
    beta, XWX, rss, ld_x, ld_v = prof.parts(gamma)
    sigma2 = rss / prof.dof()
    prof.sigma2_hat, prof.sigma2g_hat = sigma2, gamma * sigma2
    cov = sigma2 * np.linalg.inv(XWX)
    df = np.array([prof.satterthwaite(np.eye(len(beta))[i]) for i in range(len(beta))])
    loglik = -0.5 * prof.profiled_deviance(gamma)
    return LMMResult(
        formula=formula, method="REML" if reml else "ML", coding=coding, names=names, terms=terms, fe=beta,
        cov_fe=cov, df=df, sigma2=float(sigma2), sigma2_group=float(gamma * sigma2), loglik=float(loglik),
        n_obs=int(prof.N), n_cells=len(cells), n_groups=prof.G, converged=converged, message=msg, alpha=alpha,
        _state=prof,
    )


# ============================================================================ the paper's battery


@dataclass(frozen=True)
class ModelSuite:
    """Everything section 3.6-3.8 of the digest reports for one embedder.

    ``models``: the four REML treatment-coded fits; ``coefficients``, ``variances``, ``lrt``,
    ``simple_effects``: tidy tables; ``standardization``: the global mean / SD used.
    """

    models: dict[str, LMMResult]
    coefficients: pd.DataFrame
    variances: pd.DataFrame
    lrt: pd.DataFrame
    simple_effects: pd.DataFrame
    standardization: Standardization | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": {k: v.to_dict() for k, v in self.models.items()},
            "lrt": self.lrt.to_dict(orient="records"),
            "simple_effects": self.simple_effects.to_dict(orient="records"),
            "standardization": self.standardization.to_dict() if self.standardization else None,
        }


def lrt_type3(cells: pd.DataFrame, formula: str = "race * gender", *, levels=None, **kw) -> pd.DataFrame:
    """afex ``mixed(..., method="LRT")``: ML fits with sum coding; each term's columns are
    dropped from the full model in turn; chi-square = 2 (logLik full - logLik restricted)."""
    full = fit_lmm(cells, formula, reml=False, coding="sum", levels=levels, **kw)
    rows = []
    for term in [t for t in dict.fromkeys(full.terms) if t != "(Intercept)"]:
        r = fit_lmm(cells, formula, reml=False, coding="sum", levels=levels, drop_terms=(term,), **kw)
        chisq = 2 * (full.loglik - r.loglik)
        dfree = len(full.names) - len(r.names)
        rows.append({"term": term, "chisq": chisq, "df": dfree, "p": float(stats.chi2.sf(max(chisq, 0.0), dfree)),
                     "loglik_full": full.loglik, "loglik_restricted": r.loglik,
                     "converged": full.converged and r.converged})
    return pd.DataFrame(rows)


def simple_effects(model: LMMResult, *, factor: str = "race", by: str = "gender", levels=None, refs=None,
                   alpha: float = 0.05) -> pd.DataFrame:
    """emmeans ``pairs(emm, simple=by, reverse=TRUE)`` on a treatment-coded interaction model:
    the non-reference minus reference level of ``by`` within each level of ``factor``, with
    asymptotic z inference (what emmeans uses above 3,000 observations)."""
    levels = {**DEFAULT_LEVELS, **(levels or {})}
    refs = {**DEFAULT_REFS, **(refs or {})}
    idx = {n: i for i, n in enumerate(model.names)}
    rows = []
    zq = stats.norm.ppf(1 - alpha / 2)
    for other in [l for l in levels[by] if l != refs[by]]:
        base = f"{by}{other}"
        if base not in idx:
            raise DataError(f"simple_effects: model has no column {base!r}; fit the interaction model")
        if not any(n.startswith(factor) and n.endswith(f":{base}") for n in idx):
            # a main-effects model: every level but the reference was skipped as "no data", one row out
            raise DataError(f"simple_effects: model has no {factor}:{by} columns; fit the interaction model")
        for lv in levels[factor]:
            L = np.zeros(len(model.names))
            L[idx[base]] = 1.0
            if lv != refs[factor]:
                if f"{factor}{lv}:{base}" not in idx:
                    continue  # a level with no data
                L[idx[f"{factor}{lv}:{base}"]] = 1.0
            est, se, _ = model.contrast(L)
            z = est / se
            rows.append({factor: lv, "contrast": f"{other} - {refs[by]}", "estimate": est, "se": se, "z": z,
                         "p": float(2 * stats.norm.sf(abs(z))), "ci_low": est - zq * se, "ci_high": est + zq * se})
    return pd.DataFrame(rows)


def fit_paper_models(
    cells: pd.DataFrame, *, standardize: bool = True, levels=None, refs=None, alpha: float = 0.05,
    models: dict[str, str] | None = None, lrt: bool = True,
) -> ModelSuite:
    """The four models of Table 3 (REML, treatment coding, White and men as references), the
    Type-3 LRTs of Table A3 and the Women - Men contrasts of Table A4, from cells with
    ``race``, ``gender``, ``format``, ``n_pairs``, ``sum``, ``sumsq`` (raw cosines).

    ``standardize=True`` z-scores over all pairs first (the paper); the test statistics are
    the same either way.
    """
    cells = cells.copy()
    st = None
    if standardize:
        st = standardization(cells["n_pairs"], cells["sum"], cells["sumsq"])
        cells["sum"], cells["sumsq"] = standardize_sums(cells["n_pairs"], cells["sum"], cells["sumsq"], st)
    models = models or PAPER_MODELS
    fits = {name: fit_lmm(cells, f, levels=levels, refs=refs, alpha=alpha) for name, f in models.items()}
    coefs = pd.concat([m.coef_table().assign(model=name) for name, m in fits.items()], ignore_index=True)
    coefs = coefs[["model"] + [c for c in coefs.columns if c != "model"]]
    var = pd.DataFrame([
        {"model": name, "sigma2_format": m.sigma2_group, "sigma2_residual": m.sigma2, "loglik_reml": m.loglik,
         "n_obs": m.n_obs, "n_cells": m.n_cells, "n_formats": m.n_groups, "converged": m.converged, "message": m.message}
        for name, m in fits.items()
    ])
    lrt_t = lrt_type3(cells, levels=levels) if lrt else pd.DataFrame()
    inter = next((m for m in fits.values() if ":" in "".join(m.names)), None)
    se_t = simple_effects(inter, levels=levels, refs=refs, alpha=alpha) if inter is not None else pd.DataFrame()
    return ModelSuite(fits, coefs, var, lrt_t, se_t, st)
