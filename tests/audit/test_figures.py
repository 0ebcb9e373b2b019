"""What the report's figures draw, read back from the matplotlib figure before it is saved: the p-value colours at
their cut points, the heat map's grey cells and colour range, and the subordination plot's markers and medians."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.colors import to_hex

import harness.report.figures as figures

RED, ORANGE, YELLOW = (c for _, c, _ in figures.SIG_COLOURS)


@pytest.fixture
def drawn(monkeypatch):
    """The figures a drawing function made, kept open instead of saved."""
    figs = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: figs.append(fig) or path)
    yield figs
    for fig in figs:
        figures.plt.close(fig)


@pytest.mark.parametrize("p, colour", [
    (0.0, RED), (0.000999, RED), (0.001, ORANGE), (0.00999, ORANGE), (0.01, YELLOW), (0.0499, YELLOW),
    (0.05, figures.GREY), (0.5, figures.GREY), (1.0, figures.GREY), (math.nan, figures.GREY)])
def test_a_p_value_takes_the_colour_of_the_first_cut_it_is_below_and_grey_from_05_or_undefined(p, colour):
    assert figures._sig_colour(p) == colour


def _cells(rows):
    return pd.DataFrame(rows, columns=["model", "domain", "group", "statistic", "p"])


def test_the_heat_map_colours_only_cells_below_alpha_and_scales_to_the_largest_nonzero_ratio(drawn, tmp_path):
    table = _cells([("m", "Love", "black", 3.0, 0.01), ("m", "Love", "white", 0.5, 0.05),  # 0.05 is not < 0.05
                    ("m", "Love", "asian", 0.0, 0.001),  # a zero count: coloured, but not the range
                    ("m", "Love", "latine", np.nan, np.nan),
                    ("m", "Labor", "black", 1.2, 0.049), ("m", "Labor", "white", 2.0, np.nan),
                    ("m", "Labor", "asian", 0.9, 0.2), ("m", "Labor", "latine", 1.1, 0.0)])
    figures.ratio_heatmap(table, tmp_path / "h", "t")
    (fig,) = drawn
    ax = fig.axes[0]
    grey, shown = ax.get_images()
    # rows in order of first appearance, columns likewise; masked (grey) where p >= alpha, undefined, or no ratio
    assert [t.get_text() for t in ax.get_yticklabels()] == [figures._label(g) for g in ("black", "white", "asian",
                                                                                         "latine")]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["m\nLove", "m\nLabor"]
    mask = np.ma.getmaskarray(shown.get_array())
    assert mask.tolist() == [[False, False], [True, True], [False, True], [True, False]]
    assert shown.get_array()[2, 0] == pytest.approx(-3.0)  # 0 clipped to 1e-3 before the log
    lim = math.log10(3.0)  # the largest |log10| of a nonzero ratio, not the zero's 3
    assert (shown.norm.vmin, shown.norm.vcenter, shown.norm.vmax) == pytest.approx((-lim, 0, lim))
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t for t in ax.texts}
    assert [texts[k].get_text() for k in ((3, 0), (0, 0), (2, 0))] == ["n/a", "3.00", "0.00"]
    # white text where the shown colour is dark (|log| beyond 0.6 of the range); grey cells keep black text
    assert to_hex(texts[(0, 0)].get_color()) == "#ffffff" and to_hex(texts[(2, 0)].get_color()) == "#ffffff"
    assert to_hex(texts[(0, 1)].get_color()) == "#000000"  # log10(1.2) is 0.17 of the range
    assert to_hex(texts[(1, 1)].get_color()) == "#000000"  # 2.0 is dark enough, but its p is undefined: grey
    assert grey.get_cmap()(0.0) == pytest.approx(figures.matplotlib.colors.to_rgba(figures.GREY))


@pytest.mark.parametrize("ratios, lim", [([0.0], 1.0), ([100.0, 1.0], 1.0), ([1.01], 0.1)])
def test_the_heat_map_range_is_held_between_a_tenth_and_one_decade(drawn, tmp_path, ratios, lim):
    table = _cells([("m", "Love", f"g{i}", r, 0.01) for i, r in enumerate(ratios)])
    figures.ratio_heatmap(table, tmp_path / "h", "t")
    shown = drawn[0].axes[0].get_images()[1]
    assert (shown.norm.vmin, shown.norm.vmax) == pytest.approx((-lim, lim))


def test_the_subordination_plot_draws_each_models_finite_binary_ratios_coloured_by_p_with_a_bar_at_the_median(
        drawn, tmp_path):
    rows = [("a", "Love", "black", "Female", 2.0, 0.0001), ("b", "Love", "black", "Female", 4.0, 0.02),
            ("c", "Love", "black", "Female", 8.0, 0.5), ("a", "Love", "white", "Female", 0.5, 0.005),
            ("a", "Love", "black", "Male", np.inf, 0.01),  # no finite ratio: not drawn, nor in the median
            ("a", "Love", "black", "Non-binary", 3.0, 0.01)]  # neither Female nor Male: not drawn
    sub = pd.DataFrame(rows, columns=["model", "domain", "group", "gender", "statistic", "p"])
    figures.subordination_plot(sub, tmp_path / "s", "t")
    (fig,) = drawn
    ax = fig.axes[0]
    points = {}  # (x, ratio) -> colour, over the three models' scatter calls
    for coll in ax.collections:
        if isinstance(coll, PathCollection):
            for (x, y), c in zip(coll.get_offsets(), coll.get_facecolors()):
                points[(int(x), float(y))] = to_hex(c)
    cats = [t.get_text() for t in ax.get_xticklabels()]
    x_black_f = cats.index(f"{figures._label('black')} Fem.")
    x_white_f = cats.index(f"{figures._label('white')} Fem.")
    assert points == {(x_black_f, 2.0): RED, (x_black_f, 4.0): YELLOW, (x_black_f, 8.0): figures.GREY,
                      (x_white_f, 0.5): ORANGE}
    bars = [seg for coll in ax.collections if isinstance(coll, LineCollection) for seg in coll.get_segments()]
    medians = sorted((round(float(seg[:, 0].mean())), float(seg[0, 1])) for seg in bars)
    assert medians == sorted([(x_black_f, 4.0), (x_white_f, 0.5)])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["a", "b", "c", "p < .001", "p < .01", "p < .05", "p >= .05"]
