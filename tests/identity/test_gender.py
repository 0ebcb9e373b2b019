"""Gender lexicon (Table S6a) and inference rules (paper B.1, authors' infer_gender_from_references)."""

from __future__ import annotations

import doctest

import pytest

import harness.identity.gender as g
from harness.errors import ConfigError, DataError
from harness.identity.gender import explain_gender, gender_pair, infer_gender, infer_genders, load_lexicon

# Table S6a, verbatim from the digest (section 3.1).
S6A = {
    "Non-binary": {"they", "them", "their", "theirs", "themselves", "mx"},
    "Female": {"she", "her", "hers", "herself", "girl", "woman", "mrs", "ms", "miss", "mother", "sister",
               "girlfriend", "wife", "grandmother", "transwoman"},
    "Male": {"he", "him", "his", "himself", "boy", "man", "mr", "mister", "father", "brother", "boyfriend",
             "husband", "grandfather", "transman"},
}


def test_default_lexicon_is_table_s6a_verbatim():
    lex = load_lexicon()
    assert {c: set(w) for c, w in lex.categories.items()} == S6A
    assert lex.id == "s6a@1.0"


def test_code_variant_differs_exactly_as_the_authors_code():
    code = load_lexicon("code")
    assert code.categories["Non-binary"] == (S6A["Non-binary"] - {"themselves"}) | {"theirself"}
    assert code.categories["Male"] == S6A["Male"] - {"mister"}
    assert code.categories["Female"] == S6A["Female"]
    assert code.sha256 != load_lexicon().sha256
    assert infer_gender(["mister"], lexicon="code") == "Unspecified"
    assert infer_gender(["mister"]) == "Male"


@pytest.mark.parametrize("refs, expected", [
    (["they", "them"], "Non-binary"),             # they/them alone
    (["They"], "Non-binary"),
    (["he", "she"], "Unsure"),                    # mixed he/she
    (["He", "his", "her"], "Unsure"),
    (["Mx. Lee"], "Non-binary"),                  # title Mx with punctuation
    (["MX"], "Non-binary"),
    (["Mrs. Patel", "her"], "Female"),
    (["Mr."], "Male"),
    (["Mr.Smith"], "Male"), (["Mrs.Lee"], "Female"), (["Mx.Rivera"], "Non-binary"),  # a title without its space
    (["Dr.Lee"], "Unspecified"), (["J.R."], "Unspecified"),
    (["the young woman's"], "Female"),            # possessive
    (["woman\u2019s"], "Female"),                 # curly apostrophe
    (["HIS!"], "Male"),                           # capitalised and punctuated
    (['"her,"'], "Female"),
    (["she's"], "Female"),                        # contraction
    (["she\u00b4s"], "Female"), (["he\u00b4d"], "Male"),  # an acute accent as the apostrophe (NFKC splits it)
    (["'She's"], "Female"), (["\u2018He\u2019d"], "Male"),  # a quotation's opening mark is no clitic's apostrophe
    (["trans-woman"], "Female"),
    (["I", "me", "the student"], "Unspecified"),  # first person: no lexicon word
    ([], "Unspecified"),
    (["her brother"], "Unsure"),                  # every token counts, as in the authors' code
    (["xe", "xem"], "Unspecified"),               # neopronouns not captured by S6a (paper)
    (["he/him"], "Male"),
    (["her;him"], "Unsure"), (["he,she"], "Unsure"),  # split at ";" and "," with no space after them
    (["\uff53\uff48\uff45"], "Female"),        # NFKC: full-width letters are the plain word
    (["he`s"], "Male"), (["she\u02bcs"], "Female"),  # a backtick or a modifier letter apostrophe before a clitic
    (["she'd've"], "Female"),                     # the clitics cut at the first apostrophe
])
def test_inference_rules(refs, expected):
    assert infer_gender(refs) == expected


@pytest.mark.parametrize("refs, expected", [
    (["s/he"], "Unspecified"), (["S/He"], "Unspecified"), (["(s)he"], "Unspecified"), (["s(he)"], "Unspecified"),
    (["he/she"], "Unspecified"), (["she/he"], "Unspecified"), (["he / she"], "Unspecified"),
    (["he or she"], "Unspecified"), (["him or her"], "Unspecified"), (["his/her"], "Unspecified"),
    (["he/she/they"], "Unspecified"), (["the applicant", "s/he", "his or her"], "Unspecified"),
    (["s/he", "her"], "Female"),            # the character's own pronoun still decides
    (["he/him"], "Male"), (["she/they"], "Unsure"), (["Theo or her"], "Female"),  # one person's pronouns
    (["himself/herself"], "Unspecified"), (["herself or himself"], "Unspecified"),  # the reflexives
    (["s/he said his or her"], "Unspecified"),   # two such forms in one reference are both taken out
    (["Ibrahim or her"], "Female"), (["Esther/him"], "Male"),  # a pronoun's letters ending a name are no pronoun
])
def test_a_pronoun_of_unstated_gender_is_no_gendered_word(refs, expected):
    assert infer_gender(refs) == expected


def test_neopronoun_extension_is_opt_in():
    assert infer_gender(["xe", "xem"], lexicon="neopronouns") == "Non-binary"
    assert infer_gender(["xe", "she"], lexicon="neopronouns") == "Unsure"
    assert load_lexicon("neopronouns").categories["Female"] == load_lexicon().categories["Female"]
    # the singular they's reflexive, which S6a (the paper) leaves out beside "themselves"
    assert infer_gender(["themself"]) == "Unspecified"
    assert infer_gender(["themself"], lexicon="neopronouns") == "Non-binary"


def test_hallucinated_references_are_dropped_before_inference():
    story = "Sam finished the essay. They smiled at the teacher."
    # "she" never occurs in the story: dropped, so the character is Non-binary, not Unsure.
    res = explain_gender(["they", "she"], story=story)
    assert res.gender == "Non-binary"
    assert res.dropped == ("she",)
    assert infer_gender(["they", "she"]) == "Unsure"
    # multi-token reference kept only if every alphabetic token occurs
    assert infer_gender(["the young woman"], story="The young girl ran.") == "Unspecified"
    assert infer_gender(["Mx. Sam"], story="Mx. Sam waved.") == "Non-binary"
    # story and reference are compared after NFKC: an accent written as a combining mark still occurs
    accent = explain_gender(["Mr. Jos\u00e9"], story="Mr. Jose\u0301 waved.")
    assert accent.gender == "Male" and accent.dropped == ()
    assert res.to_dict()["lexicon"] == "s6a@1.0"


def test_single_string_is_one_reference_and_none_is_empty():
    assert infer_gender("her") == "Female"
    assert infer_gender(None) == "Unspecified"
    with pytest.raises(DataError):
        infer_gender([3])


def test_infer_genders_vectorised_and_aligned():
    out = infer_genders([["he"], ["she"], []], ["he ran", "no pronoun here", "x"])
    assert out == ["Male", "Unspecified", "Unspecified"]
    with pytest.raises(DataError):
        infer_genders([["he"]], ["a", "b"])
    # without stories nothing is dropped, and the lexicon given is used for every character
    assert infer_genders([["he"], ["she", "him"]]) == ["Male", "Unsure"]
    assert infer_genders([["xe", "xem"], ["they"]], lexicon="neopronouns") == ["Non-binary", "Non-binary"]


@pytest.mark.parametrize("a, b, pair", [
    ("Female", "Male", "F-M"), ("Male", "Female", "F-M"), ("Female", "Female", "F-F"),
    ("Male", "Male", "M-M"), ("Non-binary", "Non-binary", "NB-NB"), ("Non-binary", "Female", "F-NB"),
    ("Male", "Non-binary", "M-NB"), ("Male", "Unsure", None), ("Unspecified", "Female", None), (None, "Male", None),
])
def test_gender_pairs(a, b, pair):
    assert gender_pair(a, b) == pair
    if pair is not None:
        assert pair in g.PAIRS


def test_user_lexicon_include_extend_and_errors(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("name: b\nversion: '2'\ncategories:\n  Female: [lady]\n  Male: [lad]\n")
    ext = tmp_path / "ext.yaml"
    ext.write_text("name: e\nversion: '1'\ninclude: base.yaml\nextend:\n  Male: [gent]\n")
    lex = load_lexicon(ext)
    assert lex.id == "e@1" and lex.categories["Male"] == {"lad", "gent"}
    assert infer_gender(["Gent."], lexicon=ext) == "Male"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nversion: '1'\ncategories:\n  Female: [pat]\n  Male: [Pat]\n")
    with pytest.raises(ConfigError, match="both"):
        load_lexicon(bad)
    unk = tmp_path / "unk.yaml"
    unk.write_text("name: x\nversion: '1'\ncategories:\n  Agender: [ae]\n")
    with pytest.raises(ConfigError, match="unknown category"):
        load_lexicon(unk)
    with pytest.raises(ConfigError, match="not found"):
        load_lexicon(tmp_path / "missing.yaml")
    noversion = tmp_path / "nv.yaml"
    noversion.write_text("name: x\ncategories:\n  Male: [he]\n")
    with pytest.raises(ConfigError, match="version"):
        load_lexicon(noversion)
    # not YAML, not UTF-8: one line naming the file (and the line), not yaml's multi-line message
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nversion: '1'\ncategories: [Male: he\n")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    for path, message in ((broken, f"gender lexicon {broken}: not valid YAML at line 4; fix the file"),
                          (latin, f"gender lexicon {latin}: not UTF-8 text (at byte offset 9); save it as UTF-8")):
        with pytest.raises(ConfigError) as e:
            load_lexicon(path)
        assert str(e.value) == message


def test_doctests():
    assert doctest.testmod(g).failed == 0


@pytest.mark.parametrize("text, says", [
    ("- he\n- she\n", "expected a mapping with name, version, categories"),
    ("name: x\nversion: '1'\nwords: [he]\ncategories:\n  Male: [he]\n", "unknown key(s) words; allowed: "),
    ("name: x\nversion: '1'\ncategories: [he, she]\n", "`categories` must map a category to a list of words"),
    ("name: x\nversion: '1'\ncategories:\n  Male: he\n", "`categories.Male` must be a list of words"),
    ("name: x\nversion: '1'\nextend:\n  Male: he\n", "`extend.Male` must be a list of words"),
    ("name: x\nversion: '1'\n", "no categories; give `categories:` or `include:`"),
    ("name: x\nversion: '1'\ncategories: {}\n", "no categories; give `categories:` or `include:`"),
    ("name: x\nversion: '1'\ninclude: lex.yaml\ncategories:\n  Male: [he]\n", "`include:` cycle through "),
    ("name: x\nversion: '1'\ncategories:\n  Male: [he, 3]\n", "category 'Male': 3 is not a word; list plain words"),
    ("name: x\nversion: '1'\ncategories:\n  Male: [he, '...']\n", "'...' is not a word"),
])
def test_a_user_lexicon_that_is_not_the_documented_shape_is_named_in_one_line(tmp_path, text, says):
    path = tmp_path / "lex.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_lexicon(path)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert str(path) in str(e.value) or "gender lexicon 'x'" in str(e.value)


def test_a_lexicon_path_that_is_a_folder_is_named_as_one(tmp_path):
    with pytest.raises(ConfigError, match=r"is a folder, not a file; pass one of "):
        load_lexicon(tmp_path)
