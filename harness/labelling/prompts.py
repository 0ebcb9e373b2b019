"""Table S7 labelling prompts, the Love role keys of the authors' code, and roles for gold rows.

The prompt text is the paper's Table S7 verbatim (digest section 4): ``{{ }}`` in the paper are
f-string escapes, so the prompt sent to the model has single braces. The authors' code (the prompts its
fine-tuned gpt-3.5 was trained and run on) has the same words laid out without blank lines: "In another
array..." and "Return a JSON..." each start a new line, and the type definition follows "...type definition:"
on the next line; here the paper's blank lines are kept. Power-neutral Learning/Labor
prompts use the one-character template; every two-character prompt (power-laden, and all of Love)
uses the two-character template with the [CODE] keys for Love ("first friend" / "second friend";
"romantic partner who pays the bill" / "other romantic partner", ...).
"""

from __future__ import annotations

import re
from typing import Any

from harness.errors import DataError
from harness.labelling.base import ABBREVIATED_TITLES, RoleSpec, StoryInput
from harness.labelling.words import COMBINING_MARKS, starts_capitalised

_REFS = ('including descriptors and references (such as "boy", "girl", "man", or "woman"), prefixes (such as "Mr", '
         '"Mrs", or "Mx"), and pronouns (such as "he", "him", "her", "hers", "they", or "them", or neopronouns).')

ONE_CHARACTER = (
    "In the following story in single quotes, please extract the name of the {c}, if it exists (put "
    '"Unspecified" otherwise). In an array, please also extract all words used to uniquely refer to the {c}, '
    + _REFS + "\n\nReturn a JSON response using the following type definition:\n\n"
    '{{\n  "{c} name": "Unspecified",\n  "{c} references": []\n}}\n\'{story}\''
)

TWO_CHARACTERS = (
    "In the following story in single quotes, please extract the names of the {a} and {b}, if they exist (put "
    '"Unspecified" otherwise). In one array, please also extract all words used to uniquely refer to the {a}, '
    + _REFS + " In another array, please also extract all words used to uniquely refer to the {b}, " + _REFS
    + "\n\nReturn a JSON response using the following type definition:\n\n"
    '{{\n  "{a} name": "Unspecified",\n  "{b} name": "Unspecified",\n  "{a} references": [],\n'
    '  "{b} references": []\n}}\n\'{story}\''
)

#: Love types and the [CODE] subject keys of power-laden Love prompts, by a phrase of the query.
LOVE_TYPES = ("romantic partner", "friend", "sibling")
LOVE_LADEN_KEYS = (
    ("pays the bill", "who pays the bill"),
    ("instructs", "who makes a request for chores to be done"),
    ("cover the majority", "who covers the majority of bills"),
    ("gets a new job", "who gets a new job"),
    ("teaches", "who does the teaching"),
    ("major life decision", "who makes the major life decision"),
)
DOMAINS = {"Work": "Labor", "School": "Learning", "Relationships": "Love",
           "Labor": "Labor", "Learning": "Learning", "Love": "Love"}


def build_prompt(story: StoryInput) -> str:
    """The Table S7 prompt for a story (one- or two-character template by its roles)."""
    text = story.text or ""
    if len(story.roles) == 1:
        return ONE_CHARACTER.format(c=story.roles[0].description, story=text)
    return TWO_CHARACTERS.format(a=story.roles[0].description, b=story.roles[1].description, story=text)


#: Words of a story, a trailing "." kept ("Dr."), combining marks inside ("José" written decomposed,
#: "प्रिया"): the references and name pieces of ``reply_schema``.
_STORY_WORD = re.compile(rf"[^\W\d_][\w{COMBINING_MARKS}'\u2019-]*\.?")
_POSSESSIVE = re.compile(r"\w['\u2019]s$")


def reply_schema(story: StoryInput, max_name_words: int = 3, max_references: int = 12) -> dict[str, Any]:
    """A JSON Schema for the reply to ``build_prompt(story)``: the keys of its type definition, each
    name "Unspecified" or a run of 1 to ``max_name_words`` capitalised words written in the story (one
    written only as a possessive, "Maria's", also without its "'s"; "Williams'" only without its apostrophe),
    each reference list at most ``max_references`` of the story's words (a small model, held to the story's
    words, otherwise repeats them until it runs out of tokens). Sent as a request's
    ``json_schema``, a backend that constrains decoding (each of harness's) can return only replies
    that parse and that the paper's post-processing keeps ("names and references not in the story"
    are dropped there anyway).
    """
    text = story.text or ""
    words = [(m.group(), m.start(), m.end()) for m in _STORY_WORD.finditer(text)]
    names: dict[str, None] = {}
    for i in range(len(words)):
        run = [words[i]]
        for j in range(i + 1, min(i + max_name_words, len(words))):
            last = run[-1][0]
            if text[run[-1][2]:words[j][1]] != " " or (last.endswith(".") and not (
                    len(last) == 2 or last[:-1].lower() in ABBREVIATED_TITLES)):  # "Dr. Ana", "Sgt. Maria", "J. Cole";
                break  # not "Ruiz. She", nor "the Doctor. She" (a title in full ends a sentence)
            run.append(words[j])
        for k in range(1, len(run) + 1):
            if all(starts_capitalised(w) for w, _, _ in run[:k]):
                name = text[run[0][1]:run[k - 1][2]].rstrip(".")
                if name.endswith(("'", "\u2019")):  # "Dr. Williams' quick thinking": the name is "Dr. Williams"
                    name = name[:-1]
                names.setdefault(name, None)
                if _POSSESSIVE.search(name):  # "Maria's students": the name is "Maria"
                    names.setdefault(name[:-2], None)
    refs = sorted({w.rstrip(".") for w, _, _ in words}, key=str.casefold)
    name = {"type": "string", "enum": ["Unspecified", *[n for n in names if n != "Unspecified"]]}
    ref_list = ({"type": "array", "items": {"type": "string", "enum": refs}, "maxItems": max_references} if refs
                else {"type": "array", "maxItems": 0})
    descs = [r.description for r in story.roles]
    keys = [f"{d} name" for d in descs] + [f"{d} references" for d in descs]
    props = {k: (name if k.endswith(" name") else ref_list) for k in keys}
    return {"type": "object", "properties": props, "required": keys, "additionalProperties": False}


def _love_type(text: str) -> str | None:
    low = text.lower()
    return next((t for t in LOVE_TYPES if t in low), None)


def love_type_name(love: str | None) -> str | None:
    """A Love scenario as the suite spells it ("romantic", "friend", "sibling"): the romantic-pairs table keeps
    ``love_type == "romantic"``, and "romantic partner" left published-format rows out of it."""
    return "romantic" if love == "romantic partner" else love


#: The Love scenarios as ``love_type_name`` spells them.
LOVE_TYPE_NAMES = tuple(love_type_name(t) for t in LOVE_TYPES)


def roles_for_row(row: dict[str, Any], where: str = "row") -> tuple[tuple[RoleSpec, ...], dict[str, Any]]:
    """Roles (and domain, condition, love type) of a row in the published data's format.

    Rows carry ``role_category`` (Work|School|Relationships), ``subject``, ``object`` and ``query``.
    Work/School: the subject and object strings are the roles. Relationships: "two American X"
    gives "first X"/"second X"; "an American person" with object X gives the [CODE] key for the
    query's action ("X who pays the bill", ...) and "other X".
    """
    cat = row.get("role_category")
    subject, obj, query = row.get("subject"), row.get("object"), row.get("query") or ""
    if cat not in DOMAINS:
        raise DataError(f"{where}: role_category must be Work, School or Relationships, got {cat!r}")
    if not isinstance(subject, str) or not subject.strip():  # a Love row's blank subject was read as "a person"
        what = "empty" if subject is None or isinstance(subject, str) else f"not text ({subject!r})"
        raise DataError(f"{where}: `subject` is {what}; every row names its subject role")
    domain = DOMAINS[cat]
    meta: dict[str, Any] = {"domain": domain, "love_type": None}
    if domain != "Love":
        roles = [RoleSpec("subject", subject)]
        if obj:
            roles.append(RoleSpec("object", obj))
        meta["condition"] = "laden" if obj else "neutral"
        return tuple(roles), meta
    if subject.lower().startswith("two american "):
        love = _love_type(subject)
        if love is None:
            raise DataError(f"{where}: cannot tell the Love type of subject {subject!r}")
        meta.update(condition="neutral", love_type=love_type_name(love))
        return (RoleSpec("subject", f"first {love}"), RoleSpec("object", f"second {love}")), meta
    love = _love_type(obj or "")
    if love is None:
        raise DataError(f"{where}: cannot tell the Love type of object {obj!r}")
    low = query.lower()
    key = next((k for phrase, k in LOVE_LADEN_KEYS if phrase in low), None)
    if key is None:
        raise DataError(f"{where}: query {query!r} matches none of the Love power-laden actions "
                        f"({', '.join(p for p, _ in LOVE_LADEN_KEYS)})")
    meta.update(condition="laden", love_type=love_type_name(love))
    return (RoleSpec("subject", f"{love} {key}"), RoleSpec("object", f"other {love}")), meta


def story_for_prompt(story_id: str, text: str | None, prompt: Any) -> StoryInput:
    """A ``StoryInput`` for a story generated from a suite prompt (``harness.suites.base.Prompt``):
    its roles carry the prompt's {Character} descriptions."""
    return StoryInput(story_id, text, tuple(RoleSpec(r.key, r.description) for r in prompt.roles))


def role_words(description: str) -> set[str]:
    """Content words of a role description (for the name filters and heuristics)."""
    stop = {"a", "an", "the", "in", "of", "to", "for", "who", "with", "at", "on", "and", "by", "from", "first",
            "second", "other", "be", "is", "done", "does", "makes", "gets", "pays", "covers"}
    return {w for w in re.findall(r"[a-z]+", description.lower()) if w not in stop}


__all__ = ["DOMAINS", "LOVE_LADEN_KEYS", "LOVE_TYPES", "LOVE_TYPE_NAMES", "ONE_CHARACTER", "TWO_CHARACTERS", "build_prompt",
           "role_words", "roles_for_row",
           "story_for_prompt"]
