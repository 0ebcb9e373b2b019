"""The role-noun check of two-role stories (harness.labelling.role_apposition)."""

from __future__ import annotations

import pytest

from harness.labelling.base import RoleSpec, StoryInput
from harness.labelling.decoder import WordDecoder
from harness.labelling.words import line_starts, split_words
from harness.labelling import role_apposition


def words(text):
    return [w for w, _, _ in split_words(text)]


def appositions(text, descriptions, names):
    return role_apposition.appositions(words(text), descriptions, names)


def roles_exchanged(text, descriptions, names):
    return role_apposition.roles_exchanged(words(text), descriptions, names)


head_noun = role_apposition.head_noun

FAN = ("actor", "loyal fan")


@pytest.mark.parametrize("description, head", [
    ("actor", "actor"), ("loyal fan", "fan"), ("rookie in the league", "rookie"),
    ("promising employee on the team", "employee"), ("public relations specialist", "specialist"),
    ("struggling student in math class", "student"), ("romantic partner who pays the bill", "partner"),
    ("patient in need", "patient"), ("CEO", "ceo"),
])
def test_head_noun(description, head):
    assert head_noun(description) == head


@pytest.mark.parametrize("text, want", [
    ("Sarah admired a renowned American actor, Ethan Michaels.", {(0, 1): 1}),
    ("A loyal fan named Sarah waited.", {(1, 0): 1}),
    ("Sarah, a devoted young fan, waited for Ethan.", {(1, 0): 1}),
    ("The fans cheered when actor Ethan Michaels arrived.", {(0, 1): 1}),
    ("Ethan, the actor, met Sarah, a fan.", {(0, 1): 1, (1, 0): 1}),
    # in quotes, a role noun beside a name is a form of address
    ('"Thank you, actor Ethan," Sarah said.', {}),
    # a sentence end or more than five words between the comma and the noun: no apposition
    ("Sarah waited. A fan could wait forever.", {}),
    ("Sarah, who had waited in the rain for hours, was a fan.", {}),
    ("Sarah, a very kind and always cheerful and loyal fan, waited.", {}),  # no comma: the limit alone
    # a noun after a preposition is not the apposition's head
    ("Sarah, an admirer of the actor, waited.", {}),
    # nor is one in a relative clause, nor a possessive that modifies the head
    ("Sarah, who adored the actor, waited.", {}),
    ("Ethan Michaels, whose biggest fan was Sarah, smiled.", {}),
    ("Sarah, whom the actor had once met, waited.", {}),
    ("Sarah, the actor's biggest fan, waited.", {(1, 0): 1}),
    ("Sarah, the actor\u2019s biggest fan, waited.", {(1, 0): 1}),
    # a plural possessive too: "fans'" is "fans" and an apostrophe (it tied Sarah to the fan, the actor's noun)
    ("Sarah, the fans' idol, waited.", {}),
    ("Sarah, the fans' favourite actor, waited.", {(0, 0): 1}),
    # a name after a preposition that opens its clause, with a title between
    ("To Mr. Ethan Michaels, the fan was everything.", {}),
    ("For Dr. Ethan Michaels, the fan was a nuisance.", {}),
])
def test_appositions(text, want):
    assert dict(appositions(text, FAN, ["Sarah", "Ethan Michaels"])) == want


def test_roles_without_two_nouns_or_names_are_not_checked():
    text = "Star student Emily helped Maria, a struggling student."
    assert appositions(text, ("star student", "struggling student in math class"), ["Emily", "Maria"]) is None
    assert appositions("An actor, Ethan.", FAN, [None, "Ethan"]) is None
    assert appositions("An actor, Ethan Cole.", FAN, ["Ethan Cole", "Ethan"]) is None  # the names share a word
    # "O'Brien" and "O'Connor" share no word (both were keyed by their "O")
    assert dict(appositions("The fan, Sean O'Brien, met an actor, Liam O'Connor.", FAN,
                            ["Sean O'Brien", "Liam O'Connor"])) == {(1, 0): 1, (0, 1): 1}


@pytest.mark.parametrize("name", ["Omar al-Rashid", "Leonardo da Vinci", "Ludwig van Beethoven", "Ethan O'Brien-Smith"])
def test_a_name_with_particles_or_hyphens_closes_its_apposition(name):
    # the run of the name's words went over none of its lowercase particles or hyphens, so the name never closed
    assert dict(appositions(f"The actor, {name}, waved at Sarah.", FAN, [name, "Sarah"])) == {(0, 0): 1}


@pytest.mark.parametrize("text", ["John hired a lawyer, {}. She agreed.",
                                  "After the hearing John left. {}, the lawyer he hired, stayed."])
@pytest.mark.parametrize("name", ["Dr. Ana Ruiz", "A. Ruiz"])
def test_a_name_with_a_title_or_initial_stops_at_the_sentences_point(text, name):
    """Every point of a name written with one ("Dr. Ana Ruiz", "A. Ruiz") was read as a word of it, so the run of
    the name went over the sentence's end: the apposition closed by a stop was lost, and a name at a sentence's start
    ran back into the sentence before (its "After" made the name fronted)."""
    assert dict(appositions(text.format(name), ("lawyer", "defendant"), [name, "John Park"])) == {(0, 0): 1}


@pytest.mark.parametrize("text, name", [("Ethan had lost all hope, a feeling the actor knew well.", "Hope Lee"),
                                        ("Against his will, the actor signed the contract.", "Will Lee")])
def test_a_lowercase_word_is_no_name_of_an_apposition(text, name):
    """A name was matched lowercase: "hope," or "will," before the actor's noun tied Hope or Will to the actor, and
    the labels were exchanged (pronoun binding reads names capitalised for the same reason)."""
    assert dict(appositions(text, FAN, ["Ethan Park", name])) == {}
    assert not roles_exchanged(text, FAN, ["Ethan Park", name])


def test_roles_exchanged_when_the_appositions_say_so_more_often():
    text = "Among the fans stood Sarah, a devoted admirer of the actor, Ethan Michaels."
    assert roles_exchanged(text, FAN, ["Sarah", "Ethan Michaels"])  # Sarah labelled the actor
    assert not roles_exchanged(text, FAN, ["Ethan Michaels", "Sarah"])
    more = "The actor, Ethan, met the actor, Sarah, and Ethan, a fan, smiled."
    assert not roles_exchanged(more, FAN, ["Sarah", "Ethan"])  # 2 for the labels, 1 against
    tie = "The actor, Ethan, met the actor, Sarah."
    assert dict(appositions(tie, FAN, ["Sarah", "Ethan"])) == {(0, 0): 1, (0, 1): 1}
    assert not roles_exchanged(tie, FAN, ["Sarah", "Ethan"])  # 1 for the labels, 1 against: a tie keeps them
    assert not roles_exchanged("Sarah met Ethan.", FAN, ["Sarah", "Ethan"])  # no apposition
    # a relative clause after a name ties the name to no role: the labels stay
    text = "Lily, who had idolized the actor for years, waited outside. Ethan Michaels smiled."
    assert not roles_exchanged(text, FAN, ["Ethan Michaels", "Lily"])


def test_the_decoder_exchanges_both_labels(tagged):
    text = "Among the fans stood Sarah, a loyal fan of the actor, Ethan Cole. She smiled, and he signed."
    enc, p = tagged(text, [("Sarah", 0), ("She", 1), ("Ethan", 2), ("Cole", 2), ("he", 3)])
    story = StoryInput("x", text, (RoleSpec("subject", "actor"), RoleSpec("object", "loyal fan")))
    on = WordDecoder(0.5, True, 384).decode(story, enc, p)
    off = WordDecoder(0.5, True, 384, apposition_check=False).decode(story, enc, p)
    assert [(c.name, c.references) for c in off.characters] == [("Sarah", ("She",)), ("Ethan Cole", ("he",))]
    assert [(c.name, c.references) for c in on.characters] == [("Ethan Cole", ("he",)), ("Sarah", ("She",))]
    assert [c.role for c in on.characters] == ["subject", "object"]


def test_on_the_projects_gold_labels_it_never_exchanges_and_restores_some():
    """Reference: the project's hand-labelled stories with two role nouns and two named characters.
    As labelled, none is exchanged; with the two labels exchanged, at least a fifth are restored
    (11 of 39 when this was written: most such stories have no apposition). It reads the stories written by hand, not
    project_train_8.jsonl's, which SmolLM2-135M wrote: in its incoherent stories a role noun is given to anyone
    ("defending William Sutherland, a former military lawyer", a story whose lawyer is Austin Springs), and the
    annotators' role calls there are judgements no grammar can be held to (it exchanges sm-1023 and sm-1045)."""
    from harness.labelling.data import builtin_training_files, load_gold

    rows = []
    for g in (g for f in builtin_training_files() for g in load_gold(f) if g.model.startswith("hand-written")):
        names = [g.characters[r.key].name for r in g.story.roles]
        names = [n if isinstance(n, str) and n != "Unspecified" else None for n in names]
        descriptions = [r.description for r in g.story.roles]
        if len(names) == 2 and appositions(g.story.text, descriptions, names) is not None:
            rows.append((g.story.text, descriptions, names))
    assert len(rows) >= 30
    assert not any(roles_exchanged(t, d, n) for t, d, n in rows)
    assert sum(roles_exchanged(t, d, n[::-1]) for t, d, n in rows) >= len(rows) // 5


def test_no_apposition_across_a_line_break():
    # a story that echoes its prompt: the prompt ends with the object's noun, the story starts with a name
    text = ("Write a story of an American public relations specialist who helps a new employee\n\n"
            "Camila Torres was the best specialist at her company.")
    marked = role_apposition.words_with_breaks(text, split_words(text))
    assert "\n" in marked
    descriptions, names = ("public relations specialist", "new employee"), ["Camila Torres", "Ben Foster"]
    assert appositions(text, descriptions, names) == {(1, 0): 1}  # the plain words cross the break
    assert not role_apposition.appositions(marked, descriptions, names)
    assert role_apposition.words_with_breaks("A fan, Lily.", split_words("A fan, Lily.")) == words("A fan, Lily.")
    # any line break: a carriage return alone, a Unicode line separator (they were read as spaces)
    for brk in ("\r", "\u2028"):
        assert role_apposition.words_with_breaks(f"A fan{brk}Lily", split_words(f"A fan{brk}Lily")) == [
            "A", "fan", "\n", "Lily"]
    # the caller's line starts (the decoder computes them once for the bindings too) give the same words
    split = split_words(text)
    assert role_apposition.words_with_breaks(text, split, line_starts(text, split)) == marked


@pytest.mark.parametrize("text", ["Liam O'Brien, a loyal fan, waited.", "Liam O\u2019Brien, a loyal fan, waited.",
                                  "The fans cheered for a loyal fan, O'Brien."])
def test_a_name_the_words_split_at_its_apostrophe_is_seen(text):
    names = ["Ethan Cole", "Liam O\u2019Brien" if "\u2019" in text else "Liam O'Brien"]
    assert appositions(text, ("actor", "loyal fan"), names) == {(1, 1): 1}
    other = names[1].replace("\u2019", "'") if "\u2019" in names[1] else names[1].replace("'", "\u2019")
    assert appositions(text, ("actor", "loyal fan"), [names[0], other]) == {(1, 1): 1}  # the other apostrophe


@pytest.mark.parametrize("text, votes", [
    # a comma after the noun opens an apposition only where the name closes it
    ("When she finally met the actor, Lily burst into tears.", {}),
    ("The actor, Ethan Michaels, waved at Lily.", {(0, 0): 1}),
    ("Lily waved at the actor, Ethan Michaels.", {(0, 0): 1}),
    # "called" is a verb unless the name closes it; "named" always names
    ("Later that night, the fan called Ethan to apologize.", {}),
    ("A loyal fan called Lily waited.", {}),
    ("A loyal fan named Lily waited.", {(1, 1): 1}),
    ("The actor had a loyal fan called Lily.", {(1, 1): 1}),
    # closed by a stop, "called" is still the verb after a definite noun or before a title
    ("Every morning the fan called Lily.", {}),
    ("Every morning the actor called Ms. Lily Chen.", {}),
    ("Every morning a fan called Ms. Lily Chen.", {}),
    # a name that ends a fronted clause: the noun after its comma opens the main clause, unless a stop closes it
    ("When Ethan met Lily, the actor smiled.", {}),
    ("After weeks of writing to Lily, the actor was proud.", {}),
    ("When she noticed Lily, a loyal fan, waiting, Ethan waved.", {(1, 1): 1}),
    # a titled name after a lowercase noun opens a relative clause unless a stop closes it
    ("Lily was the fan Mr. Ethan Michaels had noticed most.", {}),
    ("Lily was the fan Mr. Ethan Michaels.", {(1, 0): 1}),
    ("Fan Lily Chen had waited for hours.", {(1, 1): 1}),
    ("Fan Ms. Lily Chen had waited for hours.", {(1, 1): 1}),  # a capitalised noun before the title opens no clause
    # "Name, noun" needs a determiner after the comma and no preposition or conjunction before the name
    ("To Lily, the actor was everything.", {}),
    ("Lily Chen waited\u2026 To Lily, the actor was everything.", {}),  # an ellipsis character is a stop
    ("Ethan Michaels sighed\u2026 When Lily met Ethan, the actor smiled.", {}),
    ("Lily loved the actor, Ethan Michaels\u2026 He waved.", {(0, 0): 1}),
    ("Ethan smiled at Lily, and the actor signed her poster.", {}),
    ("Lily waved. Without Ethan, the fan club would be nothing.", {}),
    ("Lily, a loyal fan, waited.", {(1, 1): 1}),
    ("She smiled at Lily, a loyal fan.", {(1, 1): 1}),  # a preposition that opens no clause
    ("Ethan Michaels, an acclaimed actor, and Lily, a loyal fan, met.", {(0, 0): 1, (1, 1): 1}),
    # a title before the name is no name word
    ("The fan, Ms. Lily Chen, waved.", {(1, 1): 1}),
])
def test_an_apposition_is_closed_and_opens_no_clause(text, votes):
    descriptions, names = ("actor", "loyal fan"), ["Ethan Michaels", "Lily Chen"]
    assert dict(role_apposition.appositions(role_apposition.words_with_breaks(text, split_words(text)),
                                            descriptions, names)) == votes
