"""The follow-up studies' Welch tests (digest 002, A.2.3-4) against scipy on the pairs themselves."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.homogeneity.followup import welch_table
from harness.homogeneity.stage import cell_table

from homogeneity_fixtures import synthetic_corpus


def _pairs(x, texts, race):
    """Every within-prompt pair cosine of ``race``'s prompts, pooled over gender and format."""
    xu = x.astype(np.float64) / np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    out = []
    for _, rows in texts[texts.race == race].groupby("prompt_id").indices.items():
        idx = texts.index[texts.race == race][rows]
        c = xu[idx] @ xu[idx].T
        out.append(c[np.triu_indices(len(idx), 1)])
    return np.concatenate(out)


def test_welch_from_the_cell_sums_is_rs_t_test_on_the_pairs():
    """R's t.test(minority, white, alternative = "greater") on the pairs (the authors' chef follow-up): the same
    t, Welch df and one-sided p from the per-cell sums, unbalanced cells included."""
    x, texts = synthetic_corpus(lambda rng: int(rng.integers(3, 12)), n_formats=2, seed=4)
    cells, _, _ = cell_table(texts, x, backend="numpy")
    table = welch_table(cells).set_index("race")
    assert list(table.index) == ["African", "Asian", "Hispanic"] and (table.reference == "White").all()
    white = _pairs(x, texts, "White")
    for race in table.index:
        mine = _pairs(x, texts, race)
        want = stats.ttest_ind(mine, white, equal_var=False, alternative="greater")
        row = table.loc[race]
        assert row.n_pairs == mine.size and row.n_pairs_ref == white.size
        assert row.t == pytest.approx(want.statistic, rel=1e-9)
        assert row.df == pytest.approx(want.df, rel=1e-9)
        assert row.p_greater == pytest.approx(want.pvalue, rel=1e-7)
        assert row.difference == pytest.approx(mine.mean() - white.mean(), rel=1e-9)
        assert (row.mean_raw, row.mean_raw_ref) == pytest.approx((mine.mean(), white.mean()), rel=1e-9)
        assert (row.sd_raw, row.sd_raw_ref) == pytest.approx((mine.std(ddof=1), white.std(ddof=1)), rel=1e-7)
    assert table.loc["African"].p_greater < 0.05  # the fixture's minority prompts are more homogeneous


def test_a_race_with_one_pair_or_no_reference_has_no_test():
    x, texts = synthetic_corpus(2, n_formats=1, seed=0)  # one pair per prompt: two per race
    cells, _, _ = cell_table(texts, x, backend="numpy")
    assert welch_table(cells).t.notna().all()
    assert welch_table(cells[cells.race != "White"]).t.isna().all()
    assert welch_table(cells[cells.race.isin(["White", "Asian"]) & (cells.gender == "man")]).t.isna().all()


def test_another_reference_race_is_the_one_tested_against():
    """A suite whose reference race is not White: every other race, White included, against that reference."""
    x, texts = synthetic_corpus(5, n_formats=2, seed=2)
    cells, _, _ = cell_table(texts, x, backend="numpy")
    table = welch_table(cells, reference="Asian").set_index("race")
    assert list(table.index) == ["African", "Hispanic", "White"] and (table.reference == "Asian").all()
    asian, white = _pairs(x, texts, "Asian"), _pairs(x, texts, "White")
    want = stats.ttest_ind(white, asian, equal_var=False, alternative="greater")
    assert table.loc["White", "n_pairs_ref"] == asian.size
    assert table.loc["White", "t"] == pytest.approx(want.statistic, rel=1e-9)
    assert want.statistic < 0  # the fixture's White prompts spread more than the Asian ones
    assert table.loc["White", "p_greater"] == pytest.approx(want.pvalue, rel=1e-7)
