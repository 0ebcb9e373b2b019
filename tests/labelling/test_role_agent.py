"""The action check of power-laden Love stories: who does what the subject's role says."""

from __future__ import annotations

import pytest

from harness.labelling.role_agent import action_clauses, action_for, roles_exchanged

PAYS = "romantic partner who pays the bill"
JOHN = ("John", ("he", "him", "his"))
SARAH = ("Sarah", ("she", "her"))


@pytest.mark.parametrize("description, key", [
    ("romantic partner who pays the bill", "pays the bill"),
    ("sibling who does the teaching", "does the teaching"),
    ("friend who makes the major life decision", "makes the major life decision"),
    ("romantic partner who covers the majority of bills", "covers the majority of bills"),
    ("other romantic partner", None),
    ("star student", None),
    ("first friend", None),
    # as the model reads them: in any case and spacing (the check was off)
    ("romantic partner who pays the bill ", "pays the bill"),
    ("Romantic partner who  pays the bill", "pays the bill"),
])
def test_action_for_reads_the_love_subject_keys(description, key):
    action = action_for(description)
    assert (action.key if action else None) == key


@pytest.mark.parametrize("text, want", [
    # the grammatical subject of the action's verb, here John (0) or Sarah (1)
    ("When the check came, Sarah let John pay.", [("pay", 0)]),
    ("John paid for the tickets before she could argue.", [("paid", 0)]),
    ("Her boyfriend, John, paid for dinner.", [("paid", 0)]),  # apposition
    ("She insisted on paying for the movie.", [("paying", 1)]),  # a gerund takes the clause's subject
    ("Sarah grabbed the check.", [("grabbed", 1)]),
    ("Sarah grabbed her coat.", []),  # a weaker verb needs the action's noun among its own words
    ("Sarah took the clothes to the register before he could argue.", [("took", 1)]),
    ("Sarah took the train home.", []),
    ("John took out a loan to pay for the ring.", [("pay", 0)]),  # the clause that holds "a loan"
    ("John found a way to pay for the ring.", [("pay", 0)]),  # parsed as a relative clause of "way": climbs too
    # verbs that point the other way
    ("John smiled and thanked her.", [("thanked", 1)]),
    ("He tried to pay, but Sarah was faster.", [("pay", 1)]),
    ("She paid him back the next day.", [("paid", 0)]),
    # "back" after the object is an adverb to the parser, and a claim to pay back is a repayment
    ("John paid her back the next week.", [("paid", 1)]),
    ('"I\'ll pay you back," John said.', [("pay", 1)]),
    # the gerund after "thanked X for" is X's, which the thanks already vote for
    ("Sarah thanked John for paying.", [("thanked", 0)]),
    # no vote
    ("John could not pay.", []),
    ("They paid together.", []),  # a word neither character holds alone
])
def test_action_clauses_name_who_pays(text, want):
    assert action_clauses(text, action_for(PAYS), JOHN, SARAH) == want


@pytest.mark.parametrize("description, text, want", [
    ("friend who does the teaching", "Sarah taught John to surf.", [("taught", 1)]),
    ("friend who does the teaching", "John learned to surf in a week.", [("learned", 1)]),
    ("friend who does the teaching", "John thanked Sarah for teaching him.", [("thanked", 1)]),
    ("sibling who makes the major life decision", "John did not let her decide alone.", []),
    # a receiving verb keeps its vote when negated: who never learned is the learner
    ("friend who does the teaching", "At thirty, Sarah had never learned to swim.", [("learned", 0)]),

    ("sibling who makes the major life decision", "In the end, John decided for her.", [("decided", 0)]),
    ("romantic partner who gets a new job", "Sarah landed a job in Denver.", [("landed", 1)]),
    # no character offers: the one offered the job gets it
    ("romantic partner who gets a new job", "The symphony had offered her the principal cello position.",
     [("offered", 1)]),
    ("romantic partner who gets a new job", '"They offered me the job!" John shouted.', [("said", 0)]),
    ("friend who makes the major life decision", '"Thank you for deciding," Sarah told him.', [("Thank", 0)]),
    ("romantic partner who makes a request for chores to be done",
     "Sarah handed him a list of chores.", [("handed", 1)]),
    ("romantic partner who makes a request for chores to be done",
     "Sarah wrote a list and taped it to his door.", [("wrote", 1)]),  # "it" is no list noun
    ("romantic partner who makes a request for chores to be done", "Sarah wrote him a poem.", []),
    ("friend who makes the major life decision", "John had made up his mind: they were moving.", [("made", 0)]),
    # a claim in a quote that opened sentences earlier: its speaker is the quote's
    ("friend who makes the major life decision",
     'John shrugged. "I\'m booking your flight," Sarah said. "You\'re going. I\'ve decided."',
     [("decided", 1), ("said", 1)]),  # the quoted "I" of a quote opened sentences earlier is the speaker
    ("friend who makes the major life decision",
     '"You\'re going," John said. Sarah sighed. "Fine. I\'ve decided."', []),  # not John's: his quote closed
])
def test_action_clauses_of_the_other_actions(description, text, want):
    assert action_clauses(text, action_for(description), JOHN, SARAH) == want


@pytest.mark.parametrize("text, want", [
    # a pronoun both characters hold names the one the clause does not name as its object
    ("She showed Lily how to cast on.", [("showed", 0)]),
    ("She showed her how to cast on.", []),
    # a hyphenated name, which the parser splits
    ("Hye-jin taught Lily the chords.", [("taught", 0)]),
])
def test_action_clauses_of_two_women(text, want):
    hye_jin, lily = ("Hye-jin Cho", ("she", "her")), ("Lily", ("she", "her"))
    assert action_clauses(text, action_for("sister who does the teaching"), hye_jin, lily) == want


@pytest.mark.parametrize("text, want", [
    # a pronoun both men hold, outside quotes: the character the nearest subject before it names
    ("Desmond smiled at the waiter, and he paid for both of them.", [("paid", 0)]),
    ("Elliot nodded, and he paid, and he smiled.", [("paid", 1)]),
    ('Desmond laid a palm over the check. "Let me," he murmured, sliding his card inside.', [("sliding", 0)]),
    ("Desmond waved, the waiter came over, and he paid.", []),  # a subject in between names no one
    ('"He paid," Elliot said.', []),  # in quotes: someone the speaker talks about
    ('Desmond smiled. "He paid," Elliot said.', []),  # ... even with a subject before the quote
    # a weaker verb with "back" returns something: no one pays
    ("Elliot saw a watch he liked, but he put it back when he saw the price.", []),
    ("Elliot slid the check back across the table.", []),
    ("Elliot put the bill on his card.", [("put", 1)]),
])
def test_action_clauses_of_two_men(text, want):
    desmond, elliot = ("Desmond", ("he", "his", "him")), ("Elliot", ("he", "his", "him"))
    assert action_clauses(text, action_for(PAYS), desmond, elliot) == want


@pytest.mark.parametrize("text, want", [
    ("Sarah walked John through every step.", [("walked", 1)]),
    ("He talked her through it, one move at a time.", [("talked", 0)]),
    ("Sarah walked through the park with John.", []),  # no person walked through anything
    ("Sarah talked to John for hours.", []),
])
def test_walking_someone_through_is_teaching(text, want):
    assert action_clauses(text, action_for("friend who does the teaching"), JOHN, SARAH) == want
    # and only teaching: nobody pays by walking someone through
    assert action_clauses(text, action_for(PAYS), JOHN, SARAH) == []


@pytest.mark.parametrize("text, want", [
    # a "next time" of another clause leaves the claim for now; one of the claim's own part puts it off
    ('"This one is on me, and you can pay next time," Sarah said.', [("said", 1)]),
    ('"My treat, and you can get the next one," Sarah said.', [("said", 1)]),
    ('"Next time, it\'s on me," Sarah said.', [("said", 0)]),
    # a weaker verb's noun is among its own words, not in its subject or a clause before it
    ("When the check came, Sarah took John's hand.", []),
    ("As the waiter walked away, John took a sip of wine.", []),
    # unless its object points back to it
    ("When the check came, Sarah grabbed it first.", [("grabbed", 1)]),
    # "forgot to pay" (the irregular forms were missing): nobody paid
    ("Sarah forgot to pay.", []),
    ("Sarah had forgotten to pay.", []),
])
def test_claims_for_later_weaker_verbs_and_forgetting(text, want):
    assert action_clauses(text, action_for(PAYS), JOHN, SARAH) == want


def test_a_shared_pronoun_reads_its_subject_in_the_sentence_before():
    """Two men's "he": the sentence before a paying sentence is parsed with it, so the pronoun has the
    nearest subject before it (it was parsed alone, and "He paid" named nobody)."""
    desmond, elliot = ("Desmond", ("he", "his", "him")), ("Elliot", ("he", "his", "him"))
    text = "Desmond smiled at the waiter. He paid for both of them."
    assert action_clauses(text, action_for(PAYS), desmond, elliot) == [("paid", 0)]
    assert action_clauses(text, action_for(PAYS), elliot, desmond) == [("paid", 1)]


def test_a_word_with_a_grammatical_subject_is_a_verb():
    # parsed alone, "Leo groaned." is tagged as two names, but "Leo" is the subject of "groaned"
    from harness.labelling.role_agent import _nlp

    assert [t.tag_ for t in _nlp()("Leo groaned.")][:2] == ["NNP", "NNP"]
    clauses = action_clauses("Leo groaned.", action_for("sibling who makes a request for chores to be done"),
                             ("Selin", ("sister", "she")), ("Leo", ("he", "him")))
    assert clauses == [("groaned", 0)]  # the one who groans is asked: a vote for the other


@pytest.mark.parametrize("description, text, want", [
    # a quoted sentence goes on with the speaker of the sentence before it ("I make more" is a claim too)
    ("romantic partner who covers the majority of bills", '"I make more," she said. "So I will cover the bills."',
     [("cover", 1), ("said", 1)]),
    # a promise for next time names the one who did not pay now
    (PAYS, 'John smiled. "Then dessert is on me next time."', [("said", 1)]),
    (PAYS, "He said he would pay next time.", [("pay", 1)]),
])
def test_action_clauses_in_dialogue(description, text, want):
    assert action_clauses(text, action_for(description), JOHN, SARAH) == want


DECIDES = "friend who makes the major life decision"
COVERS = "romantic partner who covers the majority of bills"
CHORES = "romantic partner who makes a request for chores to be done"


@pytest.mark.parametrize("description, text, want", [
    # a verb of saying that the parser hangs loosely on another verb has that verb's subject
    (DECIDES, 'Sarah listened for a minute, then said, "I\'m making this decision for you."',
     [("making", 1), ("said", 1)]),
    # deciding on the other's behalf: a "for" the other character, by name or by a pronoun that is not
    # reflexive (so not the clause's own subject)
    (DECIDES, "Sarah filled out the application for him.", [("filled", 1)]),
    # the parser hangs this "for" on the object (the module docstring's own example had no clause)
    (DECIDES, "John filled out the application for her.", [("filled", 0)]),
    (DECIDES, "John booked a flight for Sarah.", [("booked", 0)]),
    (DECIDES, "Sarah filled out the application for herself.", []),
    (DECIDES, "Sarah waited for him.", []),  # no object: nothing done
    # a character's means as the grammatical subject: its possessor pays
    (COVERS, "Her salary covers the rent.", [("covers", 1)]),
    (COVERS, "Sarah's salary paid the mortgage.", [("paid", 1)]),
    (COVERS, '"My paycheck covers more," John said.', [("covers", 0)]),
    # "barely", "hardly" deny as "not" does
    (COVERS, "His stipend barely covered groceries.", []),
    (COVERS, "John could hardly pay the rent.", []),
])
def test_action_clauses_of_speakers_helpers_and_means(description, text, want):
    assert action_clauses(text, action_for(description), JOHN, SARAH) == want


def test_a_reflexive_pronoun_both_characters_hold_is_no_other_character_helped():
    """Between two women who both hold "herself", "for herself" is the doer's own: a pronoun the other character
    holds counts as helping her only where it is not reflexive (JOHN and SARAH never share "herself")."""
    lily, sarah = ("Lily", ("she", "her", "herself")), ("Sarah", ("she", "her", "herself"))
    text = "Sarah filled out the application for herself."
    assert action_clauses(text, action_for(DECIDES), lily, sarah) == []


@pytest.mark.parametrize("text, want", [
    # a quote of two sentences: the speaker tag after it is outside the quote, the "I" inside
    ('"Put that away. My treat," Sarah said.', [("said", 1)]),
    ('"Put that away. I\'ll pay," Sarah said.', [("pay", 1), ("said", 1)]),
    ('John smiled. "You got the last one. My treat," Sarah said.', [("said", 1)]),
    # claims are whole words: no "on me" in "lemon meringue"
    ('"I could never pay for lemon meringue this good," Sarah said.', []),
    # a passive subject is the one the action is done to
    ("Sarah was treated to a lavish dinner.", []),
    # "next time" belongs to the verb it modifies, not to John's "paid"
    ("John paid the bill, and Sarah promised to cover it next time.", [("paid", 0), ("cover", 0)]),
])
def test_quotes_claims_passives_and_later(text, want):
    assert action_clauses(text, action_for(PAYS), JOHN, SARAH) == want


@pytest.mark.parametrize("text, want", [
    # an inch mark opens no quotation: Sarah's "I'll pay" after it is a quotation (it was read as narration)
    ('John was 6\'2". "I\'ll pay," Sarah said.', [("pay", 1), ("said", 1)]),
    ('John, all 6\'2" of him, smiled. "I\'ll pay," Sarah said.', [("pay", 1), ("said", 1)]),
    # a quotation never closed ends with its paragraph
    ('"Wait, John said.\n\n"I\'ll pay," Sarah said.', [("pay", 1), ("said", 1)]),
    ('"Wait, John said.\n\nSarah smiled. "I\'ll pay."', [("pay", 1), ("said", 1)]),
    # a quotation over two paragraphs, opened again by the second: its "I" is still the speaker's
    ('"Listen," Sarah said. "Dinner was lovely.\n\n"And I\'ll pay this time."', [("pay", 1), ("said", 1)]),
    # ... and its later sentences are in it too (the mark that opened it again closed it)
    ('Sarah smiled. "Dinner was lovely.\n\n"And honestly, you did so much. Let me pay. Please."',
     [("pay", 1), ("said", 1)]),
    ("She was 5\u20192\u201d. \u201cI\u2019ll pay,\u201d John said.", [("pay", 0), ("said", 0)]),
    # a quotation the next line closes goes on over the line break (a note, a poem)
    ('"I love you.\nLet me pay," John said.', [("pay", 0), ("said", 0)]),
])
def test_a_stray_quotation_mark_misreads_one_paragraph_at_most(text, want):
    assert sorted(action_clauses(text, action_for(PAYS), JOHN, SARAH)) == sorted(want)


@pytest.mark.parametrize("text", [
    'Sarah smiled. "This round is on me," the bartender said.',
    'Sarah smiled at John. "I\'ll pay for the wine," her father said.',
    '"This one is on me," the waiter said, and Sarah laughed.',
    'John paid for dinner. Sarah smiled at John. "I\'ll pay for the wine," her father said.',
])
def test_words_a_third_person_says_are_no_characters(text):
    """A verb of saying whose subject is neither character ("the bartender said") gave the quotation the speaker
    of the sentence before it, or of another verb of saying ("Sarah laughed"): Sarah paid, and a story where John
    did was read with its roles exchanged."""
    want = [("paid", 0)] if text.startswith("John paid") else []
    assert action_clauses(text, action_for(PAYS), JOHN, SARAH) == want
    teaching = 'John smiled. "Let me show you how," the instructor said.'
    assert action_clauses(teaching, action_for("friend who does the teaching"), JOHN, SARAH) == []


@pytest.mark.parametrize("description, text, want", [
    # paying without the word: a note left under a mug, a signed check, a tip dropped on the table
    (PAYS, "Sarah reached for it, but John tucked a twenty under his mug.", [("tucked", 0)]),
    (PAYS, "When the check arrived, Sarah signed it before John could see the total.", [("signed", 1)]),
    (PAYS, "Sarah dropped two dollars on the table as a tip.", [("dropped", 1)]),
    (PAYS, "Sarah signed the lease.", []),  # the weaker verbs need a noun of money
    # asking for chores with a chart or a note
    (CHORES, "Sarah showed him a chore chart on the fridge.", [("showed", 1)]),
    (CHORES, '"I made this chart for us," Sarah said.', [("made", 1)]),
    (CHORES, "Pressing a sticky note to his chest, Sarah smiled.", [("Pressing", 1)]),
    (CHORES, "John made dinner.", []),
])
def test_action_clauses_without_the_actions_own_verb(description, text, want):
    assert action_clauses(text, action_for(description), JOHN, SARAH) == want


def test_a_name_is_not_the_actions_noun():
    bill = ("Bill", ("he", "him", "his"))
    assert action_clauses("Sarah took Bill's hand and smiled.", action_for(PAYS), bill, SARAH) == []
    assert action_clauses("Sarah grabbed the bill before Bill could.", action_for(PAYS), bill, SARAH) == [
        ("grabbed", 1)]


def test_a_participle_after_the_verb_of_saying_is_the_speakers():
    text = '"Early birthday present," she said, already handing her card to the cashier.'
    assert action_clauses(text, action_for(PAYS), JOHN, SARAH) == [("handing", 1)]


@pytest.mark.parametrize("description, text, want", [
    (PAYS, "Sarah was faster. She slipped her card onto the tray.", [("slipped", 1)]),
    (PAYS, "Sarah smiled and gave the waiter her card.", [("gave", 1)]),
    (PAYS, "Sarah gave him a hug.", []),  # a weaker verb: only with money among its words
    ("friend who makes the major life decision", "Sarah signed the lease on the new apartment.", [("signed", 1)]),
    ("friend who makes the major life decision", "Sarah signed the birthday card.", []),
])
def test_more_verbs_that_do_the_action(description, text, want):
    assert action_clauses(text, action_for(description), JOHN, SARAH) == want


TEACHES = "friend who does the teaching"
JOB = "romantic partner who gets a new job"


@pytest.mark.parametrize("description, text, want", [
    # the person asked, told or persuaded to do it does it (it went to the one who asked)
    (TEACHES, "Sarah asked John to teach her.", [("teach", 0)]),
    (PAYS, "John told Sarah to pay.", [("pay", 1)]),
    (DECIDES, "John persuaded Sarah to choose the apartment.", [("choose", 1)]),
    (PAYS, "Sarah grabbed the check to pay for dinner.", [("grabbed", 1), ("pay", 1)]),  # a thing is no doer
    (PAYS, "Sarah asked him to pay.", [("pay", 0)]),
    # thanking or learning from someone else is no sign of the other character
    (PAYS, "Sarah thanked the waiter.", []),
    (TEACHES, "John learned from a YouTube video.", []),
    (PAYS, "Sarah thanked him.", [("thanked", 0)]),
    (TEACHES, "John learned from Sarah.", [("learned", 1)]),
    # what was not done
    (PAYS, "Sarah refused to pay.", []),
    (PAYS, "Sarah left without paying.", []),
    (PAYS, "John didn't have enough money to pay.", []),
    (PAYS, "Sarah grabbed the check before John could pay.", [("grabbed", 1), ("pay", 1)]),
    # claims that are none
    (PAYS, '"You can always count on me," John whispered.', []),
    (PAYS, '"Let me get the door for you," John said.', []),
    (PAYS, '"It\'s not on me this time," Sarah said.', []),
    (PAYS, '"Let me get this," John said.', [("said", 0)]),
    # verbs with an everyday sense need the action's noun
    (COVERS, "John proposed to Sarah at sunset.", []),
    (COVERS, "John offered to cover the rent.", [("offered", 0), ("cover", 0)]),
    (CHORES, "John ordered a pizza.", []),
    # whom one hires gets the job; whom one offers a position to too
    (JOB, "Sarah hired John as her assistant.", [("hired", 0)]),
    (JOB, "Sarah offered John the position.", [("offered", 0)]),
    (JOB, "Sarah hired a lawyer.", []),
    (PAYS, "Sarah promised John to pay.", [("pay", 1)]),  # a promise: the one who promises
    (JOB, "Sarah was hired by the hospital.", [("hired", 1)]),
    (JOB, "John was offered the position at the firm.", [("offered", 0)]),  # passive: the one offered it
    # "until ... could" names who did it in the end; "from" counts only for learning; "her boyfriend" is a person
    (PAYS, "Sarah waited until John could pay.", [("pay", 0)]),
    (PAYS, "John tried to pay from his own account.", [("pay", 1)]),
    (PAYS, "Sarah thanked her boyfriend for dinner.", [("thanked", 0)]),
    (PAYS, '"Let me get the tab," John said.', [("said", 0)]),
    (PAYS, '"Why not let me pay?" John said.', [("said", 0)]),
    (PAYS, '"Let me get this straight," John said.', []),
])
def test_who_is_asked_thanked_hired_or_did_not_do_it(description, text, want):
    assert action_clauses(text, action_for(description), JOHN, SARAH) == want


@pytest.mark.parametrize("description, text, want", [
    # "back" repays only with a paying verb: a hand guided back is a direction
    (TEACHES, '"Easy," Desmond said, guiding his wrist back, then forward.', [("guiding", 0)]),
    (PAYS, "Desmond paid him back the next week.", [("paid", 1)]),
    # learning from a relative, the parser's "from" hung on the infinitive: no sign of the other character
    (TEACHES, "Elliot had learned to whittle from his grandfather.", []),
    (TEACHES, "Elliot had learned to whittle from Desmond.", [("learned", 0)]),
])
def test_directions_and_relatives(description, text, want):
    """Clauses read against the gold labels of project_train_7.jsonl's stories (pt-2019, pt-2028), each of which the
    check exchanged as labelled."""
    desmond, elliot = ("Desmond", ("he", "his", "him")), ("Elliot", ("he", "his", "him"))
    assert action_clauses(text, action_for(description), desmond, elliot) == want


@pytest.mark.parametrize("text, want", [
    ("John had always insisted on paying half.", []),  # the equal split is not the majority
    ("Sarah offered to cover the rent, and John paid half the groceries.", [("offered", 1), ("cover", 1)]),
    ("John paid more than half of the rent.", [("paid", 0)]),
    ("Sarah covered most of the bills.", [("covered", 1)]),
])
def test_an_equal_share_is_not_the_majority_of_bills(text, want):
    """A trial file's right labels (pt-2248, not committed) were exchanged: "had always insisted on paying half" voted
    for the partner who pays the equal share as the one who covers the majority."""
    assert action_clauses(text, action_for(COVERS), JOHN, SARAH) == want


def test_a_pronoun_subject_is_not_the_one_of_for_hung_on_its_object():
    """A pronoun subject and the pronoun of a "for" that the parser hangs on the verb's object are two people: "he"
    is not the "him" of "made the decision for him" (pt-2187's gold labels, exchanged by the check; it read "he" as
    the nearest subject before it, Elliot)."""
    desmond, elliot = ("Desmond", ("he", "his")), ("Elliot", ("he", "his", "him"))
    text = "Desmond knew Elliot would regret it, so he made the decision for him."
    assert action_clauses(text, action_for(DECIDES), desmond, elliot) == [("made", 0)]


def test_a_name_that_is_a_word_names_its_character_only_capitalised_and_titles_keep_their_point():
    tom, bill = ("Tom", ("he", "him")), ("Bill", ("he", "his"))
    assert action_clauses("When the bill came, he paid it.", action_for(PAYS), tom, bill) == []
    assert action_clauses("When Bill came, he paid.", action_for(PAYS), tom, bill) == [("paid", 1)]
    assert roles_exchanged([("Tom smiled. When the bill came, he paid it.", PAYS, tom, bill)]) == [False]
    # a name the story writes in lowercase names its character so written
    assert action_clauses("john paid the bill.", action_for(PAYS), ("john", ()), SARAH) == [("paid", 0)]
    # two men: the "him" asked is either, so no vote (it went to the one who asked)
    assert action_clauses("He asked him to pay.", action_for(PAYS), tom, ("Mark", ("he", "him"))) == []
    assert action_clauses("Tom asked him to pay.", action_for(PAYS), tom, ("Mark", ("he", "him"))) == []
    mr, mrs = ("Mr. Lee", ("he",)), ("Mrs. Lee", ("she",))
    assert action_clauses("Mr. Lee paid the bill.", action_for(PAYS), mrs, mr) == [("paid", 1)]
    # a point after an abbreviated title ends no sentence: the speaker stays with the quote
    assert action_clauses('"My treat," Dr. Lee said.', action_for(PAYS), ("Dr. Lee", ()), SARAH) == [("said", 0)]


def test_a_man_and_a_woman_hold_their_genders_unlabelled_pronouns():
    """The tagger left "she" out of Tiana's list; beside a man's list, a woman's list (here only
    "sister") claims it, and the man's an unlabelled "he"; same-gender pairs claim nothing."""
    text = "His sister Tiana sighed. She stood behind him and guided his hands."
    teach = action_for("sibling who does the teaching")
    deshawn, tiana = ("DeShawn", ("his", "him")), ("Tiana", ("sister",))
    assert action_clauses(text, teach, deshawn, tiana) == [("guided", 1)]
    assert action_clauses("Sarah sighed. He paid.", action_for(PAYS), ("Sarah", ("her",)), ("Mo", ("his",))) == [
        ("paid", 1)]
    # two women: the unlabelled "she" could be either, so it names no one
    assert action_clauses(text, teach, ("DeShawn", ("sister",)), tiana) == []
    # a list without gendered words claims nothing either
    assert action_clauses(text, teach, ("DeShawn", ()), tiana) == []


def test_roles_exchanged_only_where_the_object_does_the_action_more_often():
    story = "Sarah and John went to a diner. When the bill came, John reached for it, but Sarah paid."
    both = "Sarah paid for the drinks and John paid for the food."
    mostly = "Sarah paid for the drinks. John paid for the food, and later John paid the tip."
    items = [
        (story, PAYS, SARAH, JOHN),  # right as labelled
        (story, PAYS, JOHN, SARAH),  # exchanged: the labelled object pays, the labelled subject never
        (both, PAYS, JOHN, SARAH),  # both pay as often: left as labelled
        (mostly, PAYS, SARAH, JOHN),  # the labelled object pays twice, the labelled subject once
        (mostly, PAYS, JOHN, SARAH),  # right as labelled
        (story, "first romantic partner", JOHN, SARAH),  # not power-laden Love: never
        (story, PAYS, ("Sarah", ()), ("Sarah", ())),  # no word tells them apart
        ("", "", (None, ()), (None, ())),
    ]
    assert roles_exchanged(items) == [False, True, False, True, False, False, False, False]


def test_on_the_projects_gold_labels_it_exchanges_only_one_known_story_and_finds_half_the_exchanged():
    """The project's power-laden Love stories, labelled by hand: as labelled it exchanges none but one of
    project_train_6.jsonl's (pt-1648, a card the object only imagined sliding to the server), which the rules were
    not tuned to; with the two labels exchanged it restores at least half (a floor: 333 of 420 when last measured).
    Before decoder version 14 it also exchanged pt-1874 (two men's "guiding his wrist back" read as a repayment) and
    three of project_train_7.jsonl's (``test_directions_and_relatives`` and the test after it). It reads the stories
    written by hand, not project_train_8.jsonl's, which SmolLM2-135M wrote: most of those show no one doing the action,
    and their roles are the annotators' judgement calls, which no grammar can be held to (sm-1467, a "teaching
    sibling" story with no teaching, is exchanged)."""
    from harness.labelling.data import builtin_training_files, load_gold

    rows = [g for f in builtin_training_files() for g in load_gold(f)
            if len(g.story.roles) == 2 and action_for(g.story.roles[0].description)
            and g.model.startswith("hand-written")]
    assert len(rows) >= 150

    def label(g, role):
        c = g.characters[role]
        return c.name, c.references or ()

    right = [(g.story.text, g.story.roles[0].description, label(g, "subject"), label(g, "object")) for g in rows]
    wrong = {g.story.story_id for g, x in zip(rows, roles_exchanged(right)) if x}
    assert wrong <= {"pt-1648"}, f"gold labels exchanged: {sorted(wrong)}"
    exchanged = [(t, d, o, s) for t, d, s, o in right]
    assert sum(roles_exchanged(exchanged)) >= len(rows) // 2


@pytest.mark.parametrize("description, sentence, worth", [
    (PAYS, "Sarah paid for dinner.", True),
    (PAYS, "John thanked her.", True),  # a receiving verb
    (PAYS, "\u201cMy treat,\u201d she said.", True),  # a claim
    (PAYS, "Sarah grabbed the check.", True),  # a weaker verb with the action's noun
    (PAYS, "Sarah grabbed her coat.", False),  # a weaker verb alone
    (PAYS, "She took a sip of wine and smiled.", False),
    ("sibling who does the teaching", "Maya walked him through every step.", True),
    ("sibling who does the teaching", "Maya walked him through it.", True),  # "through" needs no noun
    ("sibling who does the teaching", "Maya walked to the park.", False),
    ("friend who makes the major life decision", "She filled out the form for him.", True),  # on behalf
    ("friend who makes the major life decision", "She filled out the form.", False),
])
def test_only_sentences_where_the_action_can_have_a_clause_are_parsed(description, sentence, worth):
    from harness.labelling.role_agent import _worth_parsing

    assert _worth_parsing(sentence, action_for(description)) is worth


def test_skipping_sentences_without_a_clause_changes_no_clause(monkeypatch):
    """On the project's gold power-laden Love stories, the clauses found when every sentence with any
    form of the action's verbs is parsed equal those found with ``_worth_parsing``'s choice."""
    import re

    from harness.labelling import role_agent
    from harness.labelling.data import builtin_training_files, load_gold

    rows = [g for f in builtin_training_files() for g in load_gold(f)
            if len(g.story.roles) == 2 and action_for(g.story.roles[0].description)][:120]

    def label(g, role):
        return g.characters[role].name, g.characters[role].references or ()

    def clauses():
        return [action_clauses(g.story.text, action_for(g.story.roles[0].description), label(g, "subject"),
                               label(g, "object")) for g in rows]

    chosen = clauses()
    assert sum(map(len, chosen)) >= 100

    def any_form(sentence, action):
        words = role_agent._forms(action.agent | action.agent_if_noun | action.receiver) | set(action.claims)
        words |= {"for"} if action.on_behalf else set()
        return re.search(rf"\b(?:{'|'.join(map(re.escape, words))})\b", sentence.replace("\u2019", "'"),
                         re.IGNORECASE) is not None

    monkeypatch.setattr(role_agent, "_worth_parsing", any_form)
    assert clauses() == chosen


@pytest.mark.parametrize("trans1, trans2", [(False, False), (True, False), (False, True), (True, True)])
def test_blas_products_equal_thincs(trans1, trans2):
    import numpy as np
    from thinc.api import NumpyOps

    from harness.labelling.role_agent import _blas_ops

    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 5) if trans1 else (5, 7)).astype("float32")
    y = rng.standard_normal((3, 7) if trans2 else (7, 3)).astype("float32")
    want = NumpyOps().gemm(x, y, trans1=trans1, trans2=trans2)
    ops = _blas_ops()
    got = ops.gemm(x, y, trans1=trans1, trans2=trans2)
    assert got.shape == (5, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    out = np.zeros((5, 3), dtype="float32")
    assert ops.gemm(x, y, out=out, trans1=trans1, trans2=trans2) is out
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_the_parse_on_blas_products_equals_spacys_own():
    """The check's pipeline (layers on ``_blas_ops``) tags and parses the action sentences of the
    project's gold power-laden Love stories as spaCy's default (BLIS) pipeline does."""
    import spacy

    from harness.labelling import role_agent
    from harness.labelling.data import builtin_training_files, load_gold

    nlp = role_agent._nlp()
    layers = [node for _, pipe in nlp.pipeline for node in pipe.model.walk()]
    assert sum(node.ops.name == "numpy-blas" for node in layers) > len(layers) // 2
    plain = spacy.load(role_agent.SPACY_MODEL, exclude=["ner", "attribute_ruler", "lemmatizer"])
    assert all(node.ops.name == "numpy" for _, pipe in plain.pipeline for node in pipe.model.walk())
    rows = [g for f in builtin_training_files() for g in load_gold(f)
            if len(g.story.roles) == 2 and action_for(g.story.roles[0].description)][:60]
    texts = [s for g in rows
             for s in role_agent._action_sentences(g.story.text, action_for(g.story.roles[0].description))]
    assert len(texts) >= 40

    def parses(pipeline):
        return [[(t.tag_, t.dep_, t.head.i) for t in doc] for doc in pipeline.pipe(texts, batch_size=256)]

    assert parses(nlp) == parses(plain)


def test_the_decoder_exchanges_the_labels_and_can_be_told_not_to(tagged):
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.decoder import WordDecoder

    text = "Sarah met John for dinner. When the check came, John paid, and she thanked him."
    # the tagger puts the character named first in the subject role
    enc, p = tagged(text, [("Sarah", 0), ("she", 1), ("John", 2), ("him", 3)])
    story = StoryInput("x", text, (RoleSpec("subject", PAYS), RoleSpec("object", "other romantic partner")))
    checked = WordDecoder(0.5, True, 384).decode(story, enc, p)
    assert [(c.name, c.references) for c in checked.characters] == [("John", ("him",)), ("Sarah", ("she",))]
    plain = WordDecoder(0.5, True, 384, action_check=False).decode(story, enc, p)
    assert [c.name for c in plain.characters] == ["Sarah", "John"]


@pytest.mark.parametrize("opening, closing", [('"', '"'), ("'", "'"), ("\u2018", "\u2019")])
def test_the_decoder_reads_a_claim_in_single_quote_dialogue(tagged, opening, closing):
    from harness.labelling.base import RoleSpec, StoryInput
    from harness.labelling.decoder import WordDecoder

    # a claim counts only inside a quotation: single-quote dialogue is one as much as double-quote dialogue
    text = (f"Sarah met John for dinner. When the check came, {opening}Put that away. My treat,{closing} John "
            f"said. Sarah smiled.")
    enc, p = tagged(text, [("Sarah", 0), ("John", 2)])
    story = StoryInput("x", text, (RoleSpec("subject", PAYS), RoleSpec("object", "other romantic partner")))
    checked = WordDecoder(0.5, True, 384).decode(story, enc, p)
    assert [c.name for c in checked.characters] == ["John", "Sarah"]


def test_a_missing_parser_is_a_config_error(monkeypatch):
    import spacy

    from harness.errors import ConfigError
    from harness.labelling import role_agent

    def missing(*a, **k):
        raise OSError("[E050] Can't find model")

    role_agent._nlp.cache_clear()
    monkeypatch.setattr(spacy, "load", missing)
    try:
        with pytest.raises(ConfigError, match="--no-action-check"):
            role_agent.load()
    finally:
        role_agent._nlp.cache_clear()


@pytest.mark.parametrize("lemma, forms", [
    ("pay", {"pay", "pays", "paying", "paid"}),
    ("grab", {"grab", "grabs", "grabbing", "grabbed"}),
    ("decide", {"decide", "decides", "deciding", "decided"}),
    ("agree", {"agree", "agrees", "agreeing", "agreed"}),
    ("reply", {"reply", "replies", "replying", "replied"}),
    ("coach", {"coach", "coaches", "coaching", "coached"}),
    ("obey", {"obey", "obeys", "obeying", "obeyed"}),
    ("offer", {"offer", "offers", "offering", "offered"}),
    ("learn", {"learn", "learns", "learning", "learned", "learnt"}),
    ("get", {"get", "gets", "getting", "got", "gotten"}),
    # irregular pasts that were missing: "forgot to pay" read as paying
    ("forget", {"forget", "forgets", "forgeting", "forgetting", "forgot", "forgotten"}),
    ("hold", {"hold", "holds", "holding", "held"}),
    ("shake", {"shake", "shakes", "shaking", "shook", "shaken"}),
])
def test_verb_forms(lemma, forms):
    from harness.labelling.role_agent import verb_forms

    assert verb_forms(lemma) == forms


def test_every_verb_form_belongs_to_one_verb():
    from harness.labelling.role_agent import _SAY, _FAILED, ACTIONS, verb_forms

    verbs = set(_SAY) | _FAILED | {v for a in ACTIONS for v in a.agent | a.agent_if_noun | a.receiver}
    seen: dict[str, str] = {}
    for v in sorted(verbs):
        for f in verb_forms(v):
            assert seen.setdefault(f, v) == v, f"{f} is a form of both {seen[f]} and {v}"


def test_a_long_run_of_action_sentences_is_parsed_in_chunks_not_dropped():
    """Neighbouring sentences worth parsing were joined into one chunk and a chunk over MAX_PARSE_CHARS was dropped
    whole: the action check read none of a long story's paying sentences, and said nothing. Now chunks end at the
    limit and every such sentence is read once."""
    from harness.labelling import role_agent

    action = action_for("romantic partner who pays the bill")
    sentence = "Sarah paid the bill for the dinner with Tom at the little place by the river."
    text = " ".join([sentence] * 600)  # about 47,000 characters
    chunks = role_agent._action_sentences(text, action)
    assert len(chunks) >= 3 and all(len(c) <= role_agent.MAX_PARSE_CHARS for c in chunks)
    assert sum(c.count("Sarah paid") for c in chunks) == 600


@pytest.mark.parametrize("preamble", ["Here is a story about an American person who pays the bill on a date with a "
                                      "romantic partner:\n\n",
                                      "Sure! Here's a 100-word story of an American person who pays the bill:\n"])
def test_a_preamble_that_restates_the_prompt_is_not_parsed(preamble):
    """A model's first line that restates the prompt holds the prompt's action ("who pays the bill") and was parsed
    with the story's first sentence, which it joins (no point ends it): a fifth of the action check's parsed words
    on the project's and the published stories, and never a clause. The story after it is read as before."""
    from harness.labelling import role_agent

    action = action_for("romantic partner who pays the bill")
    story = ('Sarah and Tom went to dinner. The food was good. "My treat," Sarah said, and paid the bill.\n\n'
             "Tom thanked her.")
    assert role_agent._action_sentences(preamble + story, action) == role_agent._action_sentences(story, action)
    assert role_agent._action_sentences(preamble + "Sarah and Tom went to dinner.", action) == []
    assert role_agent._action_sentences(preamble.replace("story", "tale") + "Tom smiled.", action) != []  # no story
    subject, obj = ("Sarah", ["Sarah", "her"]), ("Tom", ["Tom", "he"])
    assert role_agent.action_clauses(preamble + story, action, subject, obj) == role_agent.action_clauses(
        story, action, subject, obj) != []


@pytest.mark.parametrize("text, end", [("A story:\nTom", 9), ("A story: \t\nTom", 11), ("Story:\n", 7),
                                       ("A story:", 0), ("A storyteller:\nTom", 0), ("Tom: a story\nx", 0),
                                       ("A story: Tom\nx", 0), ("x\nA story:\n", 0), ("STORY:\r\nTom", 8),
                                       ("A story:\rTom", 9), ("A story:\u2028Tom", 9), ("A story: \r\n", 11),
                                       ("a story, a story: \nTom", 19)])
def test_a_preamble_ends_after_its_first_line(text, end):
    """A preamble is a first line with "story" before a colon that ends it (spaces and tabs aside), read with
    string methods: the regular expression before them backtracked quadratically on a long first line. A line
    ends as ``base.LINE_BREAKS`` reads one: "STORY:\r\n" and a text of "\r" lines kept their preamble, whose
    restated action ("in which Maya pays the bill") voted against the story's."""
    from harness.labelling import role_agent

    assert role_agent._preamble_end(text) == end


@pytest.mark.parametrize("before", ["", "John was 6'2\". ", '"Wait, John said.\n\n'])
def test_a_quotations_later_sentence_is_read_with_its_speaker_past_a_height_or_a_mark_left_open(before):
    """Whether a sentence was inside a quotation was the parity of every mark before it: a height's inch mark, or a
    mark left open paragraphs before, turned it inside out, and "I'll pay." was parsed without its speaker (no
    vote). The marks are read as ``base.quoted`` reads them."""
    text = before + 'Sarah smiled. "Put it away. Really. I\'ll pay. Honestly."'
    assert action_clauses(text, action_for(PAYS), JOHN, SARAH) == [("pay", 1), ("said", 1)]


@pytest.mark.parametrize("text, want", [
    # a claim in a quotation's middle sentence: only a sentence holding a mark was read
    ('Sarah smiled. "Put it away. My treat. Honestly."', [("said", 1)]),
    # "listened, then said": the parser hangs "listened" on "said", or "said" on "nodded" (no speaker)
    ('Sarah listened, then said, "My treat."', [("said", 1)]),
    ('Sarah nodded, then said, "I\'ll pay."', [("pay", 1), ("said", 1)]),
])
def test_a_claim_inside_a_quotation_has_its_speaker(text, want):
    assert action_clauses(text, action_for(PAYS), JOHN, SARAH) == want
