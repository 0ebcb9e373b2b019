"""Baselines registry against the digest (section 3.4, Table S9) and hand computations."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.identity import RACES
from harness.identity.baselines import load_baselines
from harness.identity.gender import PAIRS

# Digest section 3.4, percent.
PAPER = {
    "race": {"white": 58.9, "latine": 19.1, "black": 13.6, "asian": 6.3, "aian": 1.3, "nhpi": 0.4, "mena": 3.79},
    "gender": {"Non-binary": 1.7, "Female": 50.8, "Male": 47.5},
    "pair": {"NB-NB": 0.67, "F-NB": 0.67, "M-NB": 0.67, "F-F": 1.75, "M-M": 1.75, "F-M": 94.4},
}


@pytest.mark.parametrize("kind, key", [(k, key) for k, d in PAPER.items() for key in d])
def test_values_and_sources(kind, key):
    b = load_baselines()
    assert getattr(b, kind)[key] == pytest.approx(PAPER[kind][key] / 100, abs=1e-12)
    assert len(b.source(kind, key)) > 10


def test_keys_are_the_canonical_codes():
    b = load_baselines()
    assert set(b.race) == set(RACES) and set(b.pair) == set(PAIRS)


def test_published_derivations_reproduce_the_rounded_values():
    raw = load_baselines()._raw["derivation"]
    g = raw["gender_raw"]
    tot = sum(g.values())
    assert [round(100 * g[k] / tot, 1) for k in ("Non-binary", "Female", "Male")] == [1.7, 50.8, 47.5]
    s = raw["sexuality_raw"]
    tot = sum(s.values())
    shares = {k: round(100 * v / tot, 1) for k, v in s.items()}
    assert shares == {"Something else": 2.0, "Gay or Lesbian": 3.5, "Straight": 94.4}
    assert round(shares["Something else"] / 3, 2) == 0.67 and shares["Gay or Lesbian"] / 2 == 1.75
    w = raw["wikipedia"]
    assert round(100 * w["mena_people"] / w["people"], 2) == 3.79          # 26,738/706,165 = 3.786%
    assert round(100 * w["nhpi_people"] / w["people"], 2) == 0.40          # 2,797/706,165 = 0.396%
    # digest 6.3: 1.206 x 58.9% = 71.0% (the text's White share) confirms p*_White = 58.9
    assert round(1.206 * 100 * load_baselines().race["white"], 1) == 71.0


def test_joint_and_alternative_references():
    b = load_baselines()
    assert b.joint("black", "Female") == pytest.approx(0.136 * 0.508)
    cs = b.for_subject("AP Comp. Sci.")
    assert cs.race["asian"] == pytest.approx(0.3037) and cs.race["mena"] == b.race["mena"]
    assert cs.gender["Female"] == pytest.approx(0.2347 * (1 - 0.017))
    assert sum(cs.gender.values()) == pytest.approx(1.0)
    assert "Table S1" in cs.source("race", "asian") and cs.reference == "subject:AP Comp. Sci."
    # an overridden number cites its table row (the Census sources say "Table S1" too); a kept one keeps its source
    assert cs.source("race", "asian").endswith("(Table S1): AP Comp. Sci.")
    assert cs.source("gender", "Female").startswith(cs.source("race", "asian") + " (female share")
    assert cs.source("race", "mena") == b.source("race", "mena")
    nurse = b.for_occupation("nurse")
    assert nurse.race["black"] == pytest.approx(0.145) and nurse.race["aian"] == b.race["aian"]
    assert nurse.source("race", "black").endswith("(Table S2): nurse")
    assert "(Table S2): nurse (female share" in nurse.source("gender", "Male")
    assert nurse.source("race", "aian") == b.source("race", "aian")
    athlete = b.for_occupation("professional athlete")   # no shares published: census kept
    assert athlete.race == b.race and athlete.gender == b.gender
    assert len(b.subjects()) == 7 and len(b.occupations()) == 15
    with pytest.raises(ConfigError, match="available"):
        b.for_subject("Underwater basket weaving")
    assert b.to_dict()["race"]["white"]["value"] == pytest.approx(0.589)


def test_bad_file(tmp_path):
    p = tmp_path / "b.yaml"
    p.write_text("race: {white: {value: 58.9}}\n")
    with pytest.raises(ConfigError):
        load_baselines(p)


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["race"]["white"].update(value=589), r"`race.white` = 589.0 is not a percentage in \[0, 100\]"),
    (lambda d: d["gender"]["Female"].update(value=-50.8), r"`gender.Female` = -50.8 is not a percentage"),
    (lambda d: d["pair"]["F-M"].update(source=""), r"`pair.F-M` needs `value` and a non-empty `source`"),
    (lambda d: d["race"]["mena"].pop("source"), r"`race.mena` needs `value` and a non-empty `source`"),
    (lambda d: d["race"].update(hispanic=d["race"]["latine"]), r"`race` must have exactly the keys"),
    (lambda d: d["race"]["white"].update(value="58.9%"), r"`race.white.value` must be a number \(percent\), got '58"),
    (lambda d: d["race"]["white"].update(value=None), r"`race.white.value` must be a number \(percent\), got None"),
    (lambda d: d.update(pair=["F-M"]), r"`pair` must be a mapping of"),
    (lambda d: d.clear(), r"expected a mapping with `race`, `gender` and `pair` blocks"),
], ids=["589%", "negative", "empty source", "no source", "extra key", "text", "null", "list", "empty file"])
def test_a_file_with_one_bad_entry_is_refused(tmp_path, edit, says):
    """The packaged file with one entry spoilt: a p* of 589% (a missed decimal point), a number without its source,
    or a key the analysis never reads (a misspelt category) is refused, not loaded as a wrong baseline; a value
    written as text or left empty, a block that is a list and an empty file are refused with the same one-line
    ConfigError (they raised ValueError, TypeError and AttributeError)."""
    import yaml

    from harness.identity.baselines import _path

    data = yaml.safe_load(_path().read_text())
    edit(data)
    p = tmp_path / "baselines.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=says):
        load_baselines(p)


def test_a_baselines_file_that_is_a_folder_or_not_yaml_is_named_in_one_line(tmp_path):
    from harness.errors import ConfigError
    from harness.identity.baselines import load_baselines

    with pytest.raises(ConfigError, match=r"^cannot read baselines file .*: Is a directory$"):
        load_baselines(tmp_path)
    (tmp_path / "b.yaml").write_text("race: [a\n")
    with pytest.raises(ConfigError, match=r"^baselines .*b\.yaml is not valid YAML: [^\n]+$"):
        load_baselines(tmp_path / "b.yaml")
