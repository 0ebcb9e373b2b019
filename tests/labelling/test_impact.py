"""harness.labelling.impact: the paper's ratios from the manual labels and from a labeller's, compared cell by
cell; checked against the statistics module's own functions on hand-built characters."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from harness.errors import DataError
from harness.identity import RACES
from harness.identity.baselines import load_baselines
from harness.labelling.base import RoleSpec, StoryInput
from harness.labelling.data import GoldStory
from harness.labelling.evaluate import CharacterScore
from harness.labelling.impact import POOLED, characters_tables, statistics_shift
from harness.stats.representation import representation_ratio
from harness.stats.tables import baseline_map


class Names:
    """A first-name table stand-in: every name known is fully White except "Wei" (fully Asian)."""

    def lookup(self, first):
        out = pd.DataFrame({r: np.nan for r in RACES}, index=first.index)
        known = first.notna()
        for r in RACES:
            out.loc[known, r] = 0.0
        out.loc[known & (first != "wei"), "white"] = 1.0
        out.loc[first == "wei", "asian"] = 1.0
        return out


def _score(sid, role, gold_gender, pred_gender, gold_first=None, pred_first=None, *, model="M", domain="Labor",
           condition="neutral", name_known=True):
    return CharacterScore(sid, role, model, domain, gold_gender, pred_gender, gold_first, pred_first,
                          name_known, condition)


def _gold(sid, love_type=None, two=False):
    roles = (RoleSpec("subject", "a"),) + ((RoleSpec("object", "b"),) if two else ())
    return GoldStory(StoryInput(sid, "text", roles), love_type=love_type)


def test_characters_tables_hold_the_manual_and_the_labeller_view_of_the_same_characters():
    chars = [_score("n1", "subject", "Female", "Female", "ana", "ana"),
             _score("l1", "subject", "Male", "Female", "wei", None, domain="Love", condition="laden"),
             _score("l1", "object", "Female", "Male", None, "wei", domain="Love", condition="laden"),
             _score("x", "subject", None, "Male")]  # no manual gender: left out of both
    gold = [_gold("n1"), _gold("l1", "romantic partner", two=True), _gold("x")]
    manual, labelled = characters_tables(chars, gold, Names(), pooled=False)
    assert manual.story_id.tolist() == labelled.story_id.tolist() == ["n1", "l1", "l1"]
    assert manual.power_role.tolist() == ["baseline", "dominant", "subordinate"]
    assert manual.love_type.isna().tolist() == [True, False, False]
    assert manual.love_type.tolist()[1:] == ["romantic partner", "romantic partner"]
    assert manual.gender.tolist() == ["Female", "Male", "Female"]
    assert labelled.gender.tolist() == ["Female", "Female", "Male"]
    assert manual.asian.tolist()[1] == 1.0 and np.isnan(manual.asian.tolist()[2])
    assert np.isnan(labelled.asian.tolist()[1]) and labelled.asian.tolist()[2] == 1.0
    pooled, _ = characters_tables(chars, gold, Names())
    assert len(pooled) == 6 and (pooled.model == POOLED).sum() == 3


def test_a_character_whose_manual_name_was_not_labelled_has_no_name_on_either_side():
    """A published row's null name (a gender labelled, the name not): the labeller's name alone entered the race
    statistics, moving R_rep while the name figures, which leave the character out, read 100%."""
    chars = [_score(f"s{i}", "subject", "Female", "Female", None, "wei", name_known=False) for i in range(5)]
    chars += [_score(f"t{i}", "subject", "Female", "Female", "ana", "ana") for i in range(5)]
    gold = [_gold(c.story_id) for c in chars]
    manual, labelled = characters_tables(chars, gold, Names(), pooled=False)
    assert labelled.first_name.isna().tolist() == manual.first_name.isna().tolist() == [True] * 5 + [False] * 5
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names())
    rep = shift.cells[shift.cells.table == "representation"].dropna(subset=["manual", "labeller"])
    assert len(rep) and (rep.manual == rep.labeller).all()


def test_statistics_refuse_gold_whose_domain_or_love_type_leaves_it_out_of_every_table():
    chars = [_score(f"s{i}", "subject", "Female", "Female", "ana", "ana", domain="Foo") for i in range(4)]
    with pytest.raises(DataError, match="needs each gold story's domain"):
        statistics_shift(SimpleNamespace(characters=chars), [_gold(c.story_id) for c in chars], Names())
    chars = [_score(f"s{i}", "subject", "Female", "Female", "ana", "ana", domain="Love") for i in range(4)]
    with pytest.raises(DataError, match=r"needs each gold story's love_type \(romantic or friend or sibling\): 4 of 4 have none"):
        statistics_shift(SimpleNamespace(characters=chars), [_gold(c.story_id) for c in chars], Names())


def _neutral(n_female, n_male, flipped):
    """Power-neutral Labor characters: manual n_female F and n_male M; the labeller calls ``flipped`` women men."""
    chars = [_score(f"f{i}", "subject", "Female", "Male" if i < flipped else "Female", "ana", "ana")
             for i in range(n_female)]
    chars += [_score(f"m{i}", "subject", "Male", "Male", "bo", "bo") for i in range(n_male)]
    return chars, [_gold(c.story_id) for c in chars]


def test_identical_labels_leave_every_ratio_where_it_was():
    chars, gold = _neutral(6, 4, flipped=0)
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names())
    t = shift.summary["representation"]
    assert t["cells"] > 0 and t["within"] == t["same_verdict"] == t["cells"] and t["median_abs_log"] == 0.0
    both = shift.cells.dropna(subset=["manual", "labeller"])
    assert np.allclose(both.manual, both.labeller)


def _verdict_on_1(result):
    """What a ratio's own 95% interval says of 1, read from the representation module's result."""
    return "above" if result.ci_low > 1 else "below" if result.ci_high < 1 else "includes 1"


def test_a_gender_flip_moves_r_rep_as_the_representation_module_computes_it():
    chars, gold = _neutral(30, 20, flipped=10)
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names())
    cells = shift.cells[(shift.cells.table == "representation") & (shift.cells.model == "M")
                        & (shift.cells.kind == "gender")].set_index("group")
    pstar = baseline_map(load_baselines())
    # by hand: manual 30 women of 50, the labeller's 20 of 50 (and 20 -> 30 men)
    for group, x_manual, x_lab in (("Female", 30, 20), ("Male", 20, 30)):
        ref_m = representation_ratio(x_manual, 50, pstar[group], kind="gender")
        ref_l = representation_ratio(x_lab, 50, pstar[group], kind="gender")
        row = cells.loc[group]
        assert row.manual == pytest.approx(ref_m.estimate) and row.labeller == pytest.approx(ref_l.estimate)
        assert (row.manual_low, row.manual_high) == pytest.approx((ref_m.ci_low, ref_m.ci_high))
        assert row.within == (ref_m.ci_low <= ref_l.estimate <= ref_m.ci_high)
        # the verdict on 1 of each side's own interval (above, below, or including 1)
        assert row.same_verdict == (_verdict_on_1(ref_m) == _verdict_on_1(ref_l))
    # by hand: both Female intervals include 1 (a shared verdict) though 20/50 lies outside the manual interval
    assert not cells.loc["Female", "within"] and cells.loc["Female", "same_verdict"]
    assert cells.loc["Female", "labeller"] / cells.loc["Female", "manual"] == pytest.approx(20 / 30)
    # median |log| over the source model's gender and race cells; the race cells (all White) do not move
    logs = np.abs(np.log(shift.cells.labeller / shift.cells.manual))
    rep = (shift.cells.table == "representation") & (shift.cells.model == "M")
    assert shift.summary["representation"]["median_abs_log"] == pytest.approx(
        float(np.median(logs[rep & (shift.cells.manual > 0) & (shift.cells.labeller > 0)])))
    assert logs[rep & (shift.cells.group == "Female")].tolist() == pytest.approx([np.log(1.5)])


def test_within_and_the_verdict_on_1_are_read_from_each_sides_own_interval():
    """``within`` places the labeller's estimate in the manual interval (not the manual estimate in the labeller's);
    the verdict on 1 tells "below" from "includes 1" as well as "above". Checked against the representation module
    on two hand-built sets where either reading of each gives the other answer."""
    pstar = baseline_map(load_baselines())
    # by hand: 45 of 50 women, the labeller 40: R_rep 1.77 (1.55-1.88) and 1.57 (1.32-1.75); 1.57 lies inside
    # the manual interval, 1.77 outside the labeller's
    # 35 of 50 women, the labeller 30 (15 men, 20): men 0.63 (0.40-0.92), below 1, and 0.84 (0.58-1.13), not
    for n_female, n_male, flipped, within, same in ((45, 5, 5, True, True), (35, 15, 5, True, False)):
        chars, gold = _neutral(n_female, n_male, flipped)
        shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names())
        cells = shift.cells[(shift.cells.table == "representation") & (shift.cells.model == "M")
                            & (shift.cells.kind == "gender")].set_index("group")
        for group, x_manual, x_lab in (("Female", n_female, n_female - flipped), ("Male", n_male, n_male + flipped)):
            ref_m = representation_ratio(x_manual, 50, pstar[group], kind="gender")
            ref_l = representation_ratio(x_lab, 50, pstar[group], kind="gender")
            row = cells.loc[group]
            assert row.within == (ref_m.ci_low <= ref_l.estimate <= ref_m.ci_high) == within, (n_female, group)
            assert row.same_verdict == (_verdict_on_1(ref_m) == _verdict_on_1(ref_l)) == same, (n_female, group)
        if n_female == 45:  # the mirror reading (manual estimate in the labeller's interval) says otherwise
            both = cells.loc[["Female", "Male"]]
            assert not ((both.labeller_low <= both.manual) & (both.manual <= both.labeller_high)).any()
        else:  # the men's cell: below 1 under the manual labels, including 1 under the labeller's
            assert cells.loc["Male", "manual_high"] < 1 < cells.loc["Male", "labeller_high"]


def test_an_exchange_of_dominant_and_subordinate_moves_r_sub_and_its_verdict():
    chars, gold = [], []
    for i in range(12):  # power-laden Labor: a White subject, an Asian object; the labeller swaps 6 of the names
        swap = i < 6
        chars += [_score(f"s{i}", "subject", "Male", "Male", "bo", "wei" if swap else "bo", condition="laden"),
                  _score(f"s{i}", "object", "Female", "Female", "wei", "bo" if swap else "wei", condition="laden")]
        gold.append(_gold(f"s{i}", two=True))
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names())
    sub = shift.cells[(shift.cells.table == "subordination") & (shift.cells.model == "M")
                      & (shift.cells.gender == "All")].set_index("group")
    # manual: every Asian character subordinate, none dominant; the labeller: 6 Asian characters in each role
    assert sub.loc["asian", "labeller"] == pytest.approx(1.0)
    assert sub.loc["asian", "manual"] > 1.0
    assert sub.loc["asian", "manual_low"] > 1.0  # the manual ratio says "above 1", the labeller's does not
    assert not sub.loc["asian", "same_verdict"]
    for key, rows in (("subordination", shift.cells.model == "M"), (f"subordination ({POOLED})",
                                                                    shift.cells.model == POOLED)):
        moved = shift.cells[rows & (shift.cells.table == "subordination") & ~shift.cells.same_verdict.astype(bool)]
        s = shift.summary[key]
        assert s["cells"] - s["same_verdict"] == len(moved.dropna(subset=["manual", "labeller"])) > 0


def test_a_race_neither_labelling_gives_a_character_is_left_out_of_the_summary_and_one_the_labeller_loses_is_not():
    """The paper's "both counts 0 -> R_sub = 1": a race absent from a cell under both labellings read as a defined,
    "within", same-verdict cell with a shift of 0, pulling the summary towards agreement whatever the labeller did."""
    chars, gold = [], []
    for i in range(12):  # power-laden Labor: White men dominant, women subordinate; one Asian woman the labeller
        lost = i == 0    # leaves unnamed
        chars += [_score(f"s{i}", "subject", "Male", "Male", "bo", "bo", condition="laden"),
                  _score(f"s{i}", "object", "Female", "Female", "wei" if lost else "ana", None if lost else "ana",
                         condition="laden")]
        gold.append(_gold(f"s{i}", two=True))
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names(), n_boot=44)
    sub = shift.cells[(shift.cells.table == "subordination") & (shift.cells.model == "M")]
    measured = sub.dropna(subset=["manual", "labeller", "manual_low", "labeller_low"])
    # every race but White (and Asian among the women) has no likelihood in any character of the gender: R = 1
    # imputed on both sides
    present = (measured.group == "white") | ((measured.group == "asian") & measured.gender.isin(["Female", "All"]))
    absent = measured[~present]
    assert len(absent) and (absent.manual == 1.0).all() and (absent.labeller == 1.0).all()
    assert absent.all_zero_both.all() and not measured[present].all_zero_both.any()
    # the Asian cells: measured from the manual names, imputed on the labeller's side only: compared
    asian = measured[measured.group == "asian"].set_index("gender")
    assert asian.loc["All", "manual"] > 1 and asian.loc["All", "labeller"] == 1.0
    s = shift.summary["subordination"]
    assert s["all_zero_both"] == len(absent) and s["cells"] == len(measured) - len(absent)
    assert s["within"] == int(measured[~measured.all_zero_both].within.sum())
    assert s["shift_tested"] == len(measured[~measured.all_zero_both].dropna(subset=["log_shift_low"]))
    assert "| all-zero under both (R = 1 imputed, left out) |" in shift.to_text().splitlines()[0]
    assert f"| subordination | {s['cells']} | {s['one_sided']} | {s['all_zero_both']} |" in shift.to_text()


def test_label_eval_statistics_prints_the_comparison_and_its_json(gold_path, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.identity import names as names_module

    monkeypatch.setattr(names_module.NameTable, "load", classmethod(lambda cls, path=None, **kw: Names()))
    runner = CliRunner()
    details = tmp_path / "d.json"
    res = runner.invoke(app, ["label", "eval", "--gold", str(gold_path), "--labeller", "rules", "--statistics",
                              "--details", str(details)])
    assert res.exit_code == 0, res.output
    assert "| representation (all sources) |" in res.output and "same verdict on 1" in res.output
    full = json.loads(details.read_text())
    assert set(full["statistics"]) >= {"representation", "subordination", "rmrs"}
    assert full["statistics_cells"] and {"table", "manual", "labeller", "within"} <= set(full["statistics_cells"][0])
    res = runner.invoke(app, ["label", "eval", "--gold", str(gold_path), "--labeller", "rules", "--statistics",
                              "--statistics-boot", "3"])  # one resample's "95% interval" excluded 0 for any shift
    assert res.exit_code == 2 and "--statistics-boot 3: the paired bootstrap test needs at least 44 resamples" in res.output
    res = runner.invoke(app, ["label", "eval", "--gold", str(gold_path), "--labeller", "rules", "--statistics",
                              "--statistics-boot", "44", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["statistics"]["representation"]["shift_tested"] >= 0 and "gender_precision" in out
    res = runner.invoke(app, ["label", "eval", "--gold", str(gold_path), "--statistics-boot", "3"])
    assert res.exit_code != 0 and "--statistics" in res.output


def test_a_group_the_labeller_never_labels_leaves_its_cells_defined_on_the_manual_side_only():
    chars, gold = [], []
    for i in range(8):  # power-laden: a Non-binary subject the labeller leaves Unspecified, a male object
        chars += [_score(f"s{i}", "subject", "Non-binary", "Unspecified", "bo", "bo", condition="laden"),
                  _score(f"s{i}", "object", "Male", "Male", "wei", "wei", condition="laden")]
        gold.append(_gold(f"s{i}", two=True))
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names())
    cells = shift.cells[(shift.cells.table == "subordination") & (shift.cells.model == "M")]
    nb = cells[cells.gender == "Non-binary"]
    assert nb.manual.notna().any() and nb.labeller.isna().all()
    # the men's cells too: their joint denominator (every gendered dominant character) is empty for the labeller
    men = cells[cells.gender == "Male"]
    assert men.manual.notna().any() and men.labeller.isna().all()
    assert shift.summary["subordination"]["one_sided"] == int(nb.manual.notna().sum() + men.manual.notna().sum())
    assert shift.summary[f"subordination ({POOLED})"]["one_sided"] == shift.summary["subordination"]["one_sided"]
    # measured on one side only: neither inside nor outside the manual interval (it read False)
    assert nb[nb.manual.notna()].within.isna().all() and nb[nb.manual.notna()].same_verdict.isna().all()


def test_label_eval_statistics_names_a_missing_name_table_before_labelling(gold_path, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.labelling import cli as label_cli

    def no_labelling(*a, **kw):
        raise AssertionError("labelled before the name table was checked")

    monkeypatch.setattr(label_cli, "_labeller", no_labelling)
    runner = CliRunner()
    missing = tmp_path / "nope.parquet"
    res = runner.invoke(app, ["label", "eval", "--gold", str(gold_path), "--statistics", "--name-table", str(missing)])
    assert res.exit_code != 0 and str(missing) in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["label", "eval", "--gold", str(gold_path), "--name-table", str(missing)])
    assert res.exit_code != 0 and "--statistics" in res.output


def test_label_eval_statistics_checks_the_gold_stories_fields_before_labelling(gold_path, tmp_path, monkeypatch):
    """A gold story without its condition (or domain, or a Love story without its love type) stopped --statistics
    only after the labeller had labelled every story; it is refused right after the gold file is read. A love type
    no table knows ("romance") was read and then reported as none: refused where the row is read."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.identity import names as names_module
    from harness.labelling import cli as label_cli
    from harness.labelling.data import parse_row

    def no_labelling(*a, **kw):
        raise AssertionError("labelled before the gold stories' fields were checked")

    monkeypatch.setattr(label_cli, "_labeller", no_labelling)
    monkeypatch.setattr(names_module.NameTable, "load", classmethod(lambda cls, path=None, **kw: Names()))
    rows = [json.loads(line) for line in gold_path.read_text().splitlines()]
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "condition" or i != 2}) + "\n"
                            for i, r in enumerate(rows)))
    res = CliRunner().invoke(app, ["label", "eval", "--gold", str(gold), "--labeller", "rules", "--statistics"])
    assert res.exit_code == 3 and "Traceback" not in res.output, res.output
    assert (f"--statistics needs each gold story's condition (neutral or laden): 1 of {len(rows)} have none, "
            f"e.g. {rows[2]['id']}") in res.output
    love = next(r for r in rows if r["domain"] == "Love")
    assert parse_row({**love, "love_type": "romantic partner"}, "x", "gold.jsonl:1").love_type == "romantic"
    with pytest.raises(DataError, match=r"^gold.jsonl:1: love_type 'romance'; use romantic, friend, sibling"):
        parse_row({**love, "love_type": "romance"}, "x", "gold.jsonl:1")


def test_the_paired_bootstrap_brackets_a_real_shift_and_finds_none_where_the_labels_agree():
    chars, gold = _neutral(30, 20, flipped=10)
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names(), n_boot=40, seed=1)
    female = shift.cells[(shift.cells.table == "representation") & (shift.cells.kind == "gender")
                         & (shift.cells.group == "Female")]
    assert female.log_shift.tolist() == pytest.approx([np.log(20 / 30)] * 2)
    # every resample keeps a third of its women flipped: the shift is negative in all of them
    assert (female.log_shift_high < 0).all() and (female.log_shift_low < female.log_shift).all()
    s = shift.summary["representation"]
    assert s["shift_tested"] > 0 and s["shift_excludes_0"] == 2  # the model's Female and Male cells
    assert "shift found (paired bootstrap test, p < 0.05; 40 resamples)" in shift.to_text()
    same, gold = _neutral(30, 20, flipped=0)
    flat = statistics_shift(SimpleNamespace(characters=same), gold, Names(), n_boot=20)
    tested = flat.cells.dropna(subset=["log_shift_low"])
    assert len(tested) > 0 and (tested.log_shift_low == 0).all() and (tested.log_shift_high == 0).all()
    assert all(v.get("shift_excludes_0", 0) == 0 for v in flat.summary.values())


def test_the_paired_bootstrap_of_gold_without_a_manual_gender_has_no_interval_and_no_crash():
    """Characters without a manual gender are left out of both tables; where that leaves none, there is no story
    to resample: every cell is untested, as without --statistics-boot, instead of a crash."""
    chars = [_score("x", "subject", None, "Male", "bo", "bo"), _score("y", "subject", None, "Female")]
    shift = statistics_shift(SimpleNamespace(characters=chars), [_gold("x"), _gold("y")], Names(), n_boot=20)
    assert all(s["cells"] == s["shift_tested"] == s["shift_excludes_0"] == 0 for s in shift.summary.values())
    assert "0 of 0" in shift.to_text()


def test_a_shift_counts_by_the_bootstrap_test_and_twenty_resamples_cannot_find_one():
    """The interpolated percentile interval 'excluded 0' at 20 resamples with one of them on the other side, where
    the bootstrap test's p is .19; the count is now the test's (p < alpha), never below 2 / (B + 1)."""
    chars, gold = _neutral(30, 20, flipped=10)
    few = statistics_shift(SimpleNamespace(characters=chars), gold, Names(), n_boot=20, seed=1)
    tested = few.cells.dropna(subset=["log_shift_p"])
    assert len(tested) and (tested.log_shift_p >= 2 / 21 - 1e-12).all()
    assert all(v.get("shift_excludes_0", 0) == 0 for v in few.summary.values())
    many = statistics_shift(SimpleNamespace(characters=chars), gold, Names(), n_boot=40, seed=1)
    assert (many.cells.shift_excludes_0 == (many.cells.log_shift_p < 0.05)).all()
    # at 39 resamples the least p, 2 / 40, is alpha itself: p < alpha cannot hold, though every resample shifts
    edge = statistics_shift(SimpleNamespace(characters=chars), gold, Names(), n_boot=39, seed=1)
    female = edge.cells[(edge.cells.table == "representation") & (edge.cells.group == "Female")]
    assert (female.log_shift_high < 0).all() and female.log_shift_p.tolist() == pytest.approx([0.05] * 2)
    assert all(v.get("shift_excludes_0", 0) == 0 for v in edge.summary.values())


def test_a_cell_undefined_in_more_than_a_tenth_of_the_resamples_has_no_interval():
    """One woman in 20 stories: a third of the resamples draw no woman, so the Female cells' log ratio is undefined
    there (a ratio of 0); the percentiles of the rest were an interval, "0 to 0", of a shift measured in two thirds
    of the resamples. The men's cells, defined in every resample, keep theirs."""
    chars, gold = _neutral(1, 19, flipped=0)
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names(), n_boot=44)
    rep = shift.cells[(shift.cells.table == "representation") & (shift.cells.kind == "gender")].set_index(
        ["model", "group"])
    for model in ("M", POOLED):
        assert rep.loc[(model, "Female"), "log_shift"] == 0.0
        assert np.isnan(rep.loc[(model, "Female"), ["log_shift_low", "log_shift_high", "log_shift_p"]].to_numpy(
            float)).all()
        assert rep.loc[(model, "Male"), ["log_shift_low", "log_shift_high"]].tolist() == [0.0, 0.0]


def test_a_story_drawn_twice_by_a_resample_counts_twice_in_the_gender_pairs():
    """A resample that draws a story twice holds two copies of it, each a story: under the story's own id the pairs
    table saw one story of two subjects and two objects, no pair, and left it out. Two romantic stories, labelled
    alike by both: every resample has its F-M pairs (a shift of 0), where half of them (a story drawn twice, the
    other not at all) had none."""
    chars, gold = [], []
    for i in range(2):
        chars += [_score(f"r{i}", "subject", "Female", "Female", "ana", "ana", domain="Love"),
                  _score(f"r{i}", "object", "Male", "Male", "bo", "bo", domain="Love")]
        gold.append(_gold(f"r{i}", "romantic", two=True))
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names(), n_boot=44)
    fm = shift.cells[(shift.cells.table == "orientation") & (shift.cells.group == "F-M")]
    assert len(fm) == 2 and (fm.manual > 0).all()
    assert (fm.log_shift_low == 0).all() and (fm.log_shift_high == 0).all() and (fm.log_shift_p == 1).all()


def test_gender_pairs_are_compared_and_unmeasured_races_stay_unmeasured_on_both_sides():
    """The gender pairs (S13d), the cells a labeller moves most, were left out; a race the audit leaves unmeasured
    (the name table's NH/PI) was compared as 1 against 1."""

    class Unmeasured(Names):
        def representative_shares(self):
            return {**dict.fromkeys(RACES, 0.5), "nhpi": 0.0}

    chars, gold = [], []
    for i in range(12):  # romantic stories: F-M by the manual labels, F-F by the labeller's in a third of them
        sid = f"r{i}"
        chars += [_score(sid, "subject", "Female", "Female", "ana", "ana", domain="Love"),
                  _score(sid, "object", "Male", "Female" if i % 3 == 0 else "Male", "bo", "bo", domain="Love")]
        gold.append(_gold(sid, "romantic", two=True))
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Unmeasured())
    pairs = shift.cells[shift.cells.table == "orientation"].set_index(["model", "group"])
    assert pairs.loc[("M", "F-F"), "manual"] == 0 and pairs.loc[("M", "F-F"), "labeller"] > 0
    assert "orientation" in shift.summary and "orientation (all sources)" in shift.summary
    nhpi = shift.cells[shift.cells.group == "nhpi"]
    assert len(nhpi) and nhpi.manual.isna().all() and nhpi.labeller.isna().all() and nhpi.same_verdict.isna().all()


def test_a_gold_condition_spelled_as_the_published_data_is_read_and_a_missing_one_is_refused_for_statistics():
    """A project-format row with "Power Dynamic" (the published data's name) kept it as its condition, and one
    without a condition was 'unknown': either way every character left the tables, which read 0 cells, exit 0."""
    from harness.errors import DataError
    from harness.labelling.data import parse_row

    row = {"id": "x", "domain": "Labor", "model": "m", "roles": {"subject": "doctor", "object": "patient"},
           "text": "Ana helped Bo.", "labels": {"subject": {"gender": "Female", "name": "Ana"},
                                                "object": {"gender": "Male", "name": "Bo"}}}
    assert parse_row({**row, "condition": "Power Dynamic"}, "x", "gold.jsonl:1").condition == "laden"
    assert parse_row({**row, "condition": "Baseline"}, "x", "gold.jsonl:1").condition == "neutral"
    with pytest.raises(DataError, match=r"^gold.jsonl:1: condition 'powerful'; use neutral or laden"):
        parse_row({**row, "condition": "powerful"}, "x", "gold.jsonl:1")
    chars = [_score("u1", "subject", "Female", "Female", "ana", "ana", condition="unknown")]
    with pytest.raises(DataError, match=r"--statistics needs each gold story's condition .* 1 of 1 have none, e.g. u1"):
        statistics_shift(SimpleNamespace(characters=chars), [_gold("u1")], Names())


def test_a_group_only_the_labeller_labels_counts_its_cells_as_one_sided_too():
    """The mirror of the test above: a cell defined under the labeller's labels alone is one-sided as much as one
    defined under the manual labels alone (counting only the manual side's cells passed every other test)."""
    chars, gold = [], []
    for i in range(8):  # power-laden Labor: a subject the manual labels leave Unspecified and the labeller calls
        # Non-binary (dominant, "bo": White), a male object (subordinate, "wei": Asian)
        chars += [_score(f"s{i}", "subject", "Unspecified", "Non-binary", "bo", "bo", condition="laden"),
                  _score(f"s{i}", "object", "Male", "Male", "wei", "wei", condition="laden")]
        gold.append(_gold(f"s{i}", two=True))
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names())
    # by hand, R_sub (paper mode, joint denominator: every gendered character of the role), 7 races per gender:
    #   manual: gendered = the 8 men, all subordinate: n_dom = 0 for Female, Male, Non-binary -> undefined;
    #           All (every named character): n_sub = 8, n_dom = 8 -> defined, 7 races
    #   labeller: Female: no character -> undefined; Male: n_sub = 8 men, n_dom = 8 NB -> defined (Asian 8 vs 0,
    #           smoothed; the 6 others 0 vs 0, R = 1 imputed); Non-binary: same denominators -> defined (White 0 vs 8,
    #           the 6 others imputed); All: as the manual
    #   one-sided: Male 7 + Non-binary 7 = 14, every one on the labeller's side;
    #   both defined: All's 7: White (0 / 8) and Asian (8 / 0) compared, the 5 others 0 / 0 on both sides (imputed)
    # R_rep, pairs: no power-neutral or romantic character: undefined on both sides; R_mrs (Female, Male, totals of
    # the gender): Male has no dominant character under either labelling (Unspecified, Non-binary) -> undefined
    for key in ("subordination", f"subordination ({POOLED})"):
        s = shift.summary[key]
        assert (s["one_sided"], s["cells"], s["all_zero_both"]) == (14, 2, 5), key
    for table in ("representation", "orientation", "rmrs"):
        assert shift.summary[table]["one_sided"] == shift.summary[table]["cells"] == 0, table
    cells = shift.cells[(shift.cells.table == "subordination") & (shift.cells.model == "M")]
    lab_only = cells[cells.labeller.notna() & cells.manual.isna()]
    assert len(lab_only) == 14 and sorted(set(lab_only.gender)) == ["Male", "Non-binary"]
    assert not (cells.manual.notna() & cells.labeller.isna()).any()


def test_the_source_models_summary_holds_every_models_cells_and_the_pooled_one_the_pooled_cells():
    """With one source model the model's summary and the pooled one ("all sources") read alike, so swapping them
    passed every test above. Two models, one labelled with 10 of 30 women flipped and one without a miss: the model
    rows count both models' cells, the pooled rows the cells of every character together; the printed row is
    the summary's own figures (inside the interval and same verdict differ here: 50 of 100 women lies outside the
    manual interval of 60 of 100, both intervals include 1)."""
    chars, gold = _neutral(30, 20, flipped=10)
    for i in range(50):
        gender, name = ("Female", "ana") if i < 30 else ("Male", "bo")
        chars.append(_score(f"b{i}", "subject", gender, gender, name, name, model="B"))
        gold.append(_gold(f"b{i}"))
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Names())
    rep = shift.cells[shift.cells.table == "representation"]
    defined = rep.dropna(subset=["manual", "manual_low", "manual_high", "labeller", "labeller_low", "labeller_high"])
    assert set(defined.model) == {"M", "B", POOLED}
    for key, rows in (("representation", defined.model != POOLED), (f"representation ({POOLED})",
                                                                    defined.model == POOLED)):
        s = shift.summary[key]
        assert s["cells"] == len(defined[rows]) and s["within"] == int(defined[rows].within.sum()), key
    per_model, pooled = shift.summary["representation"], shift.summary[f"representation ({POOLED})"]
    assert per_model["cells"] == 2 * pooled["cells"] > 0
    pstar = baseline_map(load_baselines())
    female = defined[(defined.model == POOLED) & (defined.group == "Female")].iloc[0]
    # by hand: 60 of 100 women, the labeller's 50
    ref_m = representation_ratio(60, 100, pstar["Female"], kind="gender")
    ref_l = representation_ratio(50, 100, pstar["Female"], kind="gender")
    assert (female.manual, female.labeller) == pytest.approx((ref_m.estimate, ref_l.estimate))
    assert not female.within and female.same_verdict
    # by hand: the models' cells M's Female and Male shifted by log 1.5, B's by 0, the race cells (all White) by 0;
    # the pooled ones: Female log(60 / 50), Male log(50 / 40), White 0
    assert per_model["median_abs_log"] == 0.0 and pooled["median_abs_log"] == pytest.approx(np.log(60 / 50))
    row = next(line for line in shift.to_text().splitlines() if line.startswith(f"| representation ({POOLED}) |"))
    n = pooled["cells"]
    assert pooled["within"] < pooled["same_verdict"]
    assert row == (f"| representation ({POOLED}) | {n} | {pooled['one_sided']} | {pooled['all_zero_both']} | "
                   f"{pooled['within']} ({pooled['within'] / n:.0%}) | "
                   f"{pooled['same_verdict']} ({pooled['same_verdict'] / n:.0%}) | {pooled['median_abs_log']:.3f} |")


def test_alpha_is_the_level_of_the_shift_test_and_its_interval_and_the_seed_makes_the_resamples():
    """``alpha`` and ``seed`` were taken and every test ran at 0.05: a hard-coded 0.05 passed. At 20 resamples the
    least p, 2 / 21, lies below 0.1: with a third of the women flipped in every resample, alpha = 0.1 finds the shift
    that 0.05 cannot, and its interval is the narrower. The same seed gives the same resamples, another seed others."""
    chars, gold = _neutral(30, 20, flipped=10)
    report = SimpleNamespace(characters=chars)
    at05 = statistics_shift(report, gold, Names(), n_boot=20, seed=1)
    at10 = statistics_shift(report, gold, Names(), n_boot=20, seed=1, alpha=0.1)
    assert at05.summary["representation"]["shift_excludes_0"] == 0
    s = at10.summary["representation"]
    assert s["shift_excludes_0"] == 2 < s["shift_tested"]  # the model's Female and Male cells
    assert "p < 0.1; 20 resamples" in at10.to_text()
    assert f"| {s['shift_excludes_0']} of {s['shift_tested']} |" in at10.to_text()

    def female(shift):
        return shift.cells[(shift.cells.table == "representation") & (shift.cells.group == "Female")
                           ].set_index("model")[["log_shift_low", "log_shift_high"]]

    f05, f10 = female(at05), female(at10)
    assert (f10.log_shift_low > f05.log_shift_low).all() and (f10.log_shift_high < f05.log_shift_high).all()
    again = statistics_shift(report, gold, Names(), n_boot=20, seed=1)
    other = statistics_shift(report, gold, Names(), n_boot=20, seed=2)
    assert female(again).equals(f05) and not female(other).equals(f05)


def test_a_race_the_audit_leaves_unmeasured_gets_no_shift_interval_from_the_resamples_either():
    """The resamples' tables must leave the races the name table cannot measure (NH/PI) unmeasured, as the point
    estimates do: otherwise R_sub's all-zero "R = 1" on both sides gave those cells an interval of 0 to 0 and a test,
    counted in ``shift_tested``, though neither labelling measures them."""

    class Unmeasured(Names):
        def representative_shares(self):
            return {**dict.fromkeys(RACES, 0.5), "nhpi": 0.0}

    chars, gold = [], []
    for i in range(12):  # power-laden Labor: White men dominant, women (half Asian) subordinate
        chars += [_score(f"s{i}", "subject", "Male", "Male", "bo", "bo", condition="laden"),
                  _score(f"s{i}", "object", "Female", "Female", "wei" if i % 2 else "ana", "ana", condition="laden")]
        gold.append(_gold(f"s{i}", two=True))
    shift = statistics_shift(SimpleNamespace(characters=chars), gold, Unmeasured(), n_boot=44)
    nhpi = shift.cells[(shift.cells.table == "subordination") & (shift.cells.group == "nhpi")]
    assert len(nhpi) and nhpi.manual.isna().all() and nhpi.labeller.isna().all()
    assert nhpi[["log_shift_low", "log_shift_high", "log_shift_p"]].isna().all().all()
    sub = shift.cells[(shift.cells.table == "subordination") & (shift.cells.model == "M") & ~shift.cells.all_zero_both]
    assert shift.summary["subordination"]["shift_tested"] == len(sub.dropna(subset=["log_shift_low"])) > 0


def test_an_interval_that_ends_at_1_includes_1():
    """A 95% interval is closed: one whose bound is exactly 1 does not exclude 1 (a ratio of an all-zero cell, R = 1
    with a bound at 1, is not called above or below)."""
    from harness.labelling.impact import _verdict

    low = pd.Series([1.0, 1.0 + 1e-12, 0.5, 0.5, 0.2, 1.0])
    high = pd.Series([2.0, 2.0, 1.0, 1.0 - 1e-12, 3.0, 1.0])
    assert _verdict(low, high).tolist() == ["includes 1", "above", "includes 1", "below", "includes 1", "includes 1"]


def test_benjamini_hochberg_corrects_each_summary_row_and_needs_resamples_to_keep_a_shift():
    """``shift_after_bh``: the uncorrected count finds about alpha of the cells tested where nothing shifts. Two
    models, M with 10 of 30 women flipped and B without a miss: the source models' row tests 6 cells (M's and B's
    Female, Male and White), the pooled row 3, and Benjamini-Hochberg runs within each row (statsmodels' fdr_bh is
    the reference). At 40 resamples M's two shifted cells have the least p, 2 / 41: uncorrected both are found, but
    their q in the models' row, 6 / 2 x 2 / 41, is above .05; at 160 resamples, 6 / 2 x 2 / 161, both are kept.
    The note under the table gives the fewest shifts a row can keep: more than m x (2 / (B + 1)) / alpha."""
    from statsmodels.stats.multitest import multipletests

    chars, gold = _neutral(30, 20, flipped=10)
    for i in range(50):
        gender, name = ("Female", "ana") if i < 30 else ("Male", "bo")
        chars.append(_score(f"b{i}", "subject", gender, gender, name, name, model="B"))
        gold.append(_gold(f"b{i}"))
    report = SimpleNamespace(characters=chars)
    for n_boot, kept in ((40, 0), (160, 2)):
        shift = statistics_shift(report, gold, Names(), n_boot=n_boot, seed=1)
        rep = shift.cells[shift.cells.table == "representation"].dropna(subset=["log_shift_p"])
        for key, rows in (("representation", rep.model != POOLED), (f"representation ({POOLED})", rep.model == POOLED)):
            q = multipletests(rep[rows].log_shift_p, method="fdr_bh")[1]
            assert rep[rows].log_shift_q.to_numpy() == pytest.approx(q), (n_boot, key)
            assert (rep[rows].shift_after_bh == (rep[rows].log_shift_q < 0.05)).all()
        models = rep[rep.model != POOLED]
        assert len(models) == 6 and len(rep) - len(models) == 3
        m_shifted = models[(models.model == "M") & (models.kind == "gender")]
        assert m_shifted.log_shift_p.tolist() == pytest.approx([2 / (n_boot + 1)] * 2)
        assert m_shifted.log_shift_q.tolist() == pytest.approx([6 / 2 * 2 / (n_boot + 1)] * 2)
        s = shift.summary["representation"]
        assert (s["shift_tested"], s["shift_excludes_0"], s["shift_after_bh"]) == (6, 2, kept)
        assert f"| {s['shift_excludes_0']} of {s['shift_tested']} | {kept} |" in shift.to_text()
    # the last run's note: the models' row, 6 cells at 160 resamples, keeps none or more than 6 x (2 / 161) / .05 =
    # 1.49, so at least 2: the two it keeps
    assert (f"At 160 resamples no p is below 2 / 161, so after Benjamini-Hochberg a row of m cells keeps none or more "
            f"than m x {2 / 161:.4g} / 0.05 (the largest row here, 6 cells: none or at least 2)") in shift.to_text()
    assert "Benjamini-Hochberg" not in statistics_shift(report, gold, Names()).to_text()  # no resamples, no test
