"""LLM extraction labeller: the paper's method (Table S7 prompts) with any generation backend.

Each story is sent once with the one- or two-character Table S7 prompt (``prompts.build_prompt``).
The reply is parsed as JSON after light repair (code fences, prose around the object, smart quotes,
trailing commas, Python-style quoting, a missing closing brace; then comments, unquoted keys and values and
missing commas); the whole object with the prompt's keys that ranks highest wins (an example written before
the answer, its names not the story's, loses: ``parse_response``), read inside a single-key wrapper
({"answer": {...}}) or laid out by role ({"doctor": {"name": ...}}) too, and skipping a copy of the prompt's
own template (its type definition, or placeholders such as "<name>"); a reply of placeholders alone fails, one of the
type definition alone is read as its values (nobody named, no references: the answer for some stories).
A reply with no such object is read from its "key: value" lines (markdown bullets instead of JSON). A story
whose reply cannot be parsed is sent again, up to ``max_attempts`` in all (the authors' code: 3), the
retries sampled with a new seed; what still fails comes back with the last parse error as its status,
never dropped. A story the backend failed (a server error: the model gave no reply) is sent again with
the settings and seed of the request it lost, so its labels do not depend on the outage; a request the
story itself makes fail (a prompt longer than the model takes) is not, and the story is kept with the reason;
one whose attempts an outage took, with no reply of the model that parsed, is kept as the backend's failure
(which a rerun labels again), not as the model's. A reply cut at ``max_tokens`` before its object closed is
incomplete, so it is retried too, with twice the tokens (one a content filter cut, with the same tokens; where
the backend refuses twice the tokens, as a server that checks the prompt and ``max_tokens`` against its context
does, with the tokens it took); only the last attempt's cut reply is used, without the word it was cut in.
A backend that fails a batch keeps the replies it gave before failing and is sent the rest one story
at a time, in the same attempt with the same settings (and so for the story's later attempts), so one
request that breaks the backend takes no other story with it.

Post-processing follows the paper: names and references that do not occur in the story are dropped
("observable LM errors"); "Unspecified", and the model's other ways of writing it ("None", "N/A",
"Not specified", ...: ``harness.identity.names.NO_NAME``), count as no name.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from harness.errors import BackendError, ConfigError
from harness.generation.base import Backend, GenParams, GenRequest
from harness.identity.names import is_no_name, name_lists, survives_filters
from harness.jsonl import parse_list_text
from harness.labelling.base import (
    BACKEND_FAILURE,
    CharacterLabel,
    Labeller,
    StoryInput,
    StoryLabels,
    alpha_tokens,
    dedupe,
    failed,
    in_story,
    valid_text,
)
from harness.labelling.prompts import build_prompt, reply_schema

DEFAULT_PARAMS = GenParams(temperature=0.0, max_tokens=256)
RETRY_TEMPERATURE = 0.7


class ParseError(ValueError):
    """The model's reply could not be read as the JSON the prompt asks for."""


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})
#: Quotes other than JSON's and curly ones, as models write them: low-9 („…“), guillemets («…», ‹…›) and fullwidth;
#: read as JSON's only where a reading with them as they are fails (a name in «» may be the story's own).
_OTHER_QUOTES = str.maketrans({"\u201e": '"', "\u201f": '"', "\u00ab": '"', "\u00bb": '"', "\uff02": '"',
                               "\u201a": "'", "\u201b": "'", "\u2039": "'", "\u203a": "'", "\uff07": "'"})


_DANGLING_KEY = re.compile(r',?\s*"[^"]*"\s*:\s*$')
MAX_STARTS = 16  # '{' positions tried for a whole object


def _object_end(text: str, start: int) -> int:
    """Index of the '}' that closes the '{' at ``start`` (braces inside double-quoted strings
    ignored), or -1 when it never closes."""
    depth, in_string, escaped = 0, False, False
    for j in range(start, len(text)):
        ch = text[j]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return j
    return -1


#: A single-quoted string opened after a delimiter and never closed, at the end of a reply cut short.
_OPEN_SINGLE = re.compile(r"(?<=[\[{:,])\s*'[^']*$")
#: An unquoted list item after "[" or ",", or an unquoted value after a key's ":", that runs to the end of a reply
#: cut short ("needy patient name: An" of "Ana" was her name, status ok).
_OPEN_BARE = re.compile(r"(?<=[\[,:])\s*[^\s\"'\[\]{},:][^\"'\[\]{},:]*$")


def _open_tail(tail: str, cut: bool) -> list[str]:
    """A reply whose object never closes, closed. Cut at ``max_tokens`` (``cut``), its last string may
    end inside a word, so that string goes (with a key left without a value); otherwise the model just
    stopped early, and what is open is closed as it stands."""
    if not cut:
        return [tail.rstrip().rstrip(",") + closer for closer in ("}", "]}", '"]}', '"}', '" }')]
    if tail.count('"') % 2:  # inside a string: drop it
        tail = tail[: tail.rfind('"')]
    elif open_single := _OPEN_SINGLE.search(tail):  # inside a single-quoted string ('she', 'he|'): drop it too
        tail = tail[: open_single.start()]
    elif open_bare := _OPEN_BARE.search(tail):  # inside an unquoted list item ([she, her, he|) or value (name: An|),
        tail = tail[: open_bare.start()]  # as small models write them: "he" may be "herself" cut short
    tail = _DANGLING_KEY.sub("", tail.rstrip().rstrip(",[").rstrip())
    tail = tail.rstrip().rstrip(",")
    return [tail + closer for closer in ("}", "]}")]


def _candidates(text: str, cut: bool = False) -> list[tuple[str, bool]]:
    """Substrings that may hold the JSON object, most likely first, each with whether it closes an
    object the reply left open."""
    fenced = [m.group(1) for m in _FENCE.finditer(text)]
    out = [(f, False) for f in fenced]
    starts = [i for i, ch in enumerate(text) if ch == "{"][:MAX_STARTS]
    ends = [_object_end(text, s) for s in starts]  # -1: open to the end
    inside_open: list[tuple[str, bool]] = []
    for k, (start, end) in enumerate(zip(starts, ends)):  # the first whole object, even with more after it
        if end < 0:  # open to the end: later braces may be inside it, or it was a stray "{"
            inside_open = [(text[s:e + 1], False) for s, e in zip(starts[k + 1:], ends[k + 1:]) if e >= 0]
            break
        out.append((text[start:end + 1], False))
    if starts:
        start = starts[0]
        end = text.rfind("}")
        if end > start:
            out.append((text[start:end + 1], False))
        out.extend((c, True) for c in _open_tail(text[start:], cut))
        # where the first "{" was stray, the object the reply was cut in opens at a later one
        out.extend((c, True) for s, e in zip(starts[1:], ends[1:]) if e < 0 for c in _open_tail(text[s:], cut))
        # an object left open inside a closed fence ends at the fence, not at the reply's end; the model closed
        # the fence itself, so it was not cut there
        for f in fenced:
            at = f.find("{")
            if at >= 0 and _object_end(f, at) < 0:
                out.extend((c, True) for c in _open_tail(f[at:], False))
    return out + inside_open  # after the open objects' repairs, so a cut reply's inner object never wins


_LITERALS = {"null": "null", "none": "null", "true": "true", "false": "false"}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_BARE_WORD = re.compile(r'(?:[^,:{}\[\]"\n#/]|/(?![/*]))+')  # up to a delimiter, a line's end or a comment
_NEXT_CHAR = re.compile(r"\s*(\S?)")
_SPACE = re.compile(r"\s+")


def _next_char(s: str, i: int) -> str:
    """The first character of ``s`` from ``i`` on that is not white space ("" at the end), without copying
    the rest of ``s`` (a copy per quote made a long reply quadratic)."""
    return _NEXT_CHAR.match(s, i).group(1)


#: What follows a role's description in a key of the reply ("doctor name":, 'doctor pronouns':, **doctor
#: references:**), not in prose about it ("the doctor: never named").
_KEY_AFTER_ROLE = r"[\s'\"_*-]*(?:name|ref\w*|pronoun\w*)s?[\s'\"*]*:"
#: A double quote that ends a string in relaxed JSON: a delimiter, another string, a line's end or the end next.
_DOUBLE_QUOTE_END = re.compile(r'"(?=[ \t]*(?:[,:}\]"]|\r?\n|\Z))')
#: A double quote inside a string not yet escaped.
_INNER_QUOTE = re.compile(r'(?<!\\)"')
_SINGLE_QUOTE_END = re.compile(r"(?<!\\)'(?=[ \t]*(?:[,:}\]']|\r?\n|\Z))")
MAX_SINGLE_QUOTED = 200  # characters a single-quoted string may hold (a name, a word, a key); it never spans lines


def _single_quoted_end(s: str, i: int, ends: list[int]) -> int:
    """Index of the quote that closes the single-quoted string opening at ``i``: the first "'" followed by
    ``,`` ``:`` ``}`` ``]``, the next string's "'" or the end (so the apostrophes of "Dr. O'Brien" and
    "doctor's" stay inside), on the same line and within ``MAX_SINGLE_QUOTED`` characters, or -1. ``ends``:
    the positions of every such quote in ``s``, found once, so a reply of many quotes is read in linear time."""
    k = bisect.bisect_right(ends, i)
    if k == len(ends) or ends[k] - i > MAX_SINGLE_QUOTED + 1 or "\n" in s[i:ends[k]]:
        return -1
    return ends[k]


def _relaxed(s: str, inner_quotes: bool = False) -> str:
    """JSON as small models write it, made JSON: comments (``//``, ``/* */``, ``#``) taken out, single-quoted
    strings, unquoted keys and unquoted values quoted, ``None``/``True``/``False`` as JSON's literals, a
    comma put between two values written without one and taken out before a closing bracket.

    Not json_repair: its 0.64.6 keeps only the last word of an unquoted key ({doctor name: .., needy patient
    name: ..} is {"name": ..}), splits or merges single-quoted strings at their apostrophes (['She', 'doctor's']
    is ["She", "doctor", "s'"]), closes any object left open (which ``_candidates`` relies on failing) and
    takes seconds, growing quadratically, on a 20,000-character list of 'O'Brien'.

    ``inner_quotes``: a double quote ends a string only before a delimiter, another string or a line's end, so
    '"Thomas "Tommy" Lee"' is one string (tried where the plain reading does not parse: a comment or a note
    right after a string ends it there).

    >>> print(_relaxed("{doctor name: 'Dr. O'Brien', // the doctor\\n 'refs': ['he' 'him',], x: None}"))
    {"doctor name":"Dr. O'Brien","refs":["he","him"],"x":null}
    """
    out: list[str] = []
    ends = False  # the last token ends a value: a comma goes before the next one
    quote_ends = [m.start() for m in _SINGLE_QUOTE_END.finditer(s)] if "'" in s else []
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch.isspace():
            i = _SPACE.match(s, i).end()
            continue
        if s.startswith("//", i) or ch == "#":
            i = n if (e := s.find("\n", i)) < 0 else e
            continue
        if s.startswith("/*", i):
            i = n if (e := s.find("*/", i + 2)) < 0 else e + 2
            continue
        if ch in "}]":
            if out and out[-1] == ",":
                out.pop()
            out.append(ch)
            ends, i = True, i + 1
            continue
        if ch == ",":
            if out and out[-1] not in ",{[":
                out.append(ch)
            ends, i = False, i + 1
            continue
        if ch == ":":
            out.append(ch)
            ends, i = False, i + 1
            continue
        if ends:
            out.append(",")
        if ch in "{[":
            out.append(ch)
            ends, i = False, i + 1
            continue
        if ch == '"':  # a quote inside that is no end of the string ("Thomas "Tommy" Lee") is the name's own
            j, inner = i + 1, False
            while j < n and not (s[j] == '"' and (not inner_quotes or _DOUBLE_QUOTE_END.match(s, j))):
                inner |= s[j] == '"'
                j += 2 if s[j] == "\\" else 1
            if inner:
                out.append(json.dumps(json.loads('"' + _INNER_QUOTE.sub(r'\\"', s[i + 1:min(j, n)]) + '"',
                                                 strict=False), ensure_ascii=False))
            else:
                out.append(s[i:j + 1] if j < n else s[i:] + '"')
        elif ch == "'" and (j := _single_quoted_end(s, i, quote_ends)) >= 0:
            out.append(json.dumps(s[i + 1:j].replace("\\'", "'"), ensure_ascii=False))
        else:  # a bare key or value: up to the next delimiter or comment
            j = max(_BARE_WORD.match(s, i).end(), i + 1)
            word = s[i:j].strip()
            if _next_char(s, j) == ":" or not (word.casefold() in _LITERALS or _NUMBER.fullmatch(word)):
                out.append(json.dumps(word, ensure_ascii=False))
            else:
                out.append(_LITERALS.get(word.casefold(), word))
            j -= 1
        ends, i = True, j + 1
    return "".join(out)


def _loads(s: str, *, encoded: bool = False) -> Any:
    """A candidate's JSON value, repaired as small models need; ``encoded``: ``s`` is the text of an object a
    reply wrote as a JSON string (read one level deep, never again)."""
    smart = s.translate(_SMART)
    for attempt in (s, smart):
        fixed = _TRAILING_COMMA.sub(r"\1", attempt)
        for parse in (json.loads, ast.literal_eval):
            try:
                return parse(fixed)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    if not encoded and '\\"' in s and s.count('\\"') == s.count('"'):  # an object written as a JSON string
        try:  # ("{\\"doctor name\\": \\"Jos\\u00e9\\"}"): decoded as the string it is, escapes and all
            return _loads(json.loads(f'"{s}"', strict=False), encoded=True)
        except (ValueError, RecursionError, ParseError):
            pass
    for inner_quotes in (False, True):  # comments, unquoted keys, JSON and Python literals mixed, missing commas;
        try:  # then quotes inside strings written without their escape
            return json.loads(_relaxed(smart, inner_quotes), strict=False)
        except (ValueError, RecursionError):
            continue
    raise ParseError("not JSON")


def _objects(text: str, cut: bool = False) -> Iterator[tuple[dict[str, Any], bool, str]]:
    """The JSON objects a reply may hold, most likely first (``_candidates``), each with whether the reply
    left it open and the text it was read from; each distinct substring is read once."""
    seen: set[str] = set()
    for cand, closed_here in _candidates(text, cut):
        for reading in (cand, cand.translate(_OTHER_QUOTES)):  # the other quote marks as JSON's after, not before:
            if reading in seen:  # relaxed, «doctor name» reads as a key of its own
                continue
            seen.add(reading)
            try:
                val = _loads(reading)
            except ParseError:
                continue
            if isinstance(val, dict):
                yield val, closed_here, cand


def _parse_object(text: str, cut: bool = False) -> tuple[dict[str, Any], bool]:
    """The first JSON object in a reply, and whether the reply left it open (see ``_candidates``)."""
    if not text or "{" not in text:
        raise ParseError("no JSON object in the reply")
    for found, closed_here, _ in _objects(text, cut):
        return found, closed_here
    raise ParseError("reply holds a '{' but no parseable JSON object")


def parse_json_object(text: str, *, cut: bool = False) -> dict[str, Any]:
    """The first JSON object in a model reply, repairing common defects; ``cut``: the reply stopped
    at ``max_tokens``, so an open string at its end is a cut word and is dropped, not closed.

    >>> parse_json_object('Sure! ```json\\n{"doctor name": "Ana", "doctor references": ["she",],}\\n```')
    {'doctor name': 'Ana', 'doctor references': ['she']}
    >>> parse_json_object('{"a": ["he", "his"]} and then {"b": 1}')
    {'a': ['he', 'his']}
    >>> parse_json_object('{"a": ["him", "he', cut=True)
    {'a': ['him']}
    """
    return _parse_object(text, cut)[0]


_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NAME_OF = re.compile(r"(name|references?) (?:of|to|for) (?:the )?(.+)")


#: The version of the reply parsing: a release that reads a reply differently bumps it, so a run's labels of two
#: versions are not mixed (2: a name or reference written as an object is a parse error, retried; 3: the first
#: name the paper's filters keep, a name list written as a string, no "nobody named" read from a copied type
#: definition before an answer that did not parse, a quote inside a string without its escape, a single-quoted
#: word cut at max_tokens dropped, "<role> names" read as "<role> name"; 4: quotes other than JSON's and curly ones,
#: an object written as a JSON string, an object per character named in a role field, a reply a content filter
#: stopped read as cut, echoes of the whole prompt and examples before the answer; 5: another character's object,
#: role field or second bare "Name:" line is not the role's, an answer keyed by role beats one read by key order, a
#: reworded key holding a role's words goes to it, an unquoted list item cut at max_tokens is dropped; 6: a key that
#: numbers the characters ("Second Character name", "friend 2") goes to that place's role, not by key order; an
#: answer whose names the story check drops every one of ranks below the others; an answer cut after an example, or
#: one after it that does not parse, is sent again, not read as the example; 7: an example, then the answer in
#: "key: value" lines, is labelled with the lines; the reply schema offers "Williams'" without its apostrophe, and a
#: name run goes on after an abbreviated title's point, "Sgt. Maria Lopez", not after a title in full, "the Doctor.
#: She"); 8: "string" or "str" is a value only where the story writes the word (a character called String); 9: and
#: only capitalised ("String"), so a story that mentions a violin's string keeps reading "string" as the template;
#: 10: an unquoted value after a key's ":" cut at max_tokens is dropped as a list item is ("name: An" of "Ana").
PARSER_VERSION = "10"


def _norm_key(k: str) -> str:
    """A key as words: case (camelCase split), underscores, hyphens, a possessive and a closing colon aside
    ("Patient's_Name:", "patientName" and "patient-name" are "patient name"), and "name of the patient" as
    "patient name"."""
    k = _CAMEL.sub(" ", str(k).strip().strip("'\"")).casefold().replace("_", " ").replace("-", " ")
    k = re.sub(r"['’]s\b", "", k).rstrip(": ")
    k = re.sub(r"\s+", " ", k).strip()
    m = _NAME_OF.fullmatch(k)
    return f"{m.group(2)} {m.group(1)}" if m else k


def _pick(obj: dict[str, Any], roles: Sequence[str], suffix: str, stems: dict[str, int] | None = None
          ) -> list[Any]:
    """Values of "<role> <suffix>" keys for each role. Where the model reworded a role, a key it
    kept exactly still goes to its role; a reworded key goes to the one role whose description holds
    all its words ("patient name" for "needy patient"), or to the role its stem went to for the other suffix
    (``stems``: the stems of the reworded name keys by role, filled by the call for names, so "sick man
    references" follows "sick man name" whatever the keys' order); what is left goes by key order when the
    counts agree. A key that numbers the characters ("First Character name", "friend 2 name": ``_ordinal``) goes
    to the role of that place in the prompt before any goes by key order, which exchanged the characters where the
    reply listed the second first."""
    by_key = {_norm_key(k): v for k, v in obj.items()}
    wanted = [f"{_norm_key(r)} {suffix}" for r in roles]
    got: dict[int, Any] = {i: by_key[w] for i, w in enumerate(wanted) if w in by_key}
    placed: dict[int, str] = {}  # role -> the stem of the reworded key it took
    if len(got) < len(roles):
        loose = [k for k in by_key if k not in wanted and k.endswith((suffix, suffix.rstrip("s"), suffix + "s"))]
        role_words = [set(_norm_key(r).split()) for r in roles]
        for k in list(loose):
            stem = set(k.rsplit(" ", 1)[0].split()) if " " in k else set()
            owners = [i for i, words in enumerate(role_words) if stem and stem <= words]
            if stem and not owners:  # "needy patient full name": the role's words with more
                owners = [i for i, words in enumerate(role_words) if words <= stem]
            if len(owners) != 1 and stems and _stem(k) in stems:
                owners = [stems[_stem(k)]]
            if len(owners) == 1 and owners[0] not in got:
                got[owners[0]], placed[owners[0]] = by_key[k], _stem(k)
                loose.remove(k)
        if len(roles) > 1:  # "Second Character name", "friend 2 name": the prompt's order, not the reply's
            for k in list(loose):
                i = _ordinal(_stem(k), role_words)
                if i is not None and i not in got:
                    got[i], placed[i] = by_key[k], _stem(k)
                    loose.remove(k)
        left = [i for i in range(len(roles)) if i not in got]
        if len(loose) == len(left):
            for i, k in zip(left, loose):
                got[i], placed[i] = by_key[k], _stem(k)
            if loose and stems is not None:
                stems[_BY_ORDER] = -1
    if len(got) == len(roles):
        if stems is not None:
            stems.update((stem, i) for i, stem in placed.items())
        return [got[i] for i in range(len(roles))]
    missing = [w for i, w in enumerate(wanted) if i not in got]
    raise ParseError(f"missing key(s) {', '.join(repr(m) for m in missing)}")


#: Words a key numbers the characters with, in the prompt's order ("First Character", "Character 2", "friend one"),
#: by the role's index.
_ORDINALS = {"first": 0, "1st": 0, "1": 0, "one": 0, "second": 1, "2nd": 1, "2": 1, "two": 1}
#: Letters that number them ("Friend A", "Person B"), read only as a stem's last word after another: "a" is an
#: article too ("name of a doctor").
_LETTERS = {"a": 0, "b": 1}


def _ordinal(stem: str, role_words: Sequence[set[str]]) -> int | None:
    """The index of the role a reworded key's ``stem`` numbers ("first character" -> 0, "friend 2" -> 1), or None.

    Only a stem with one ordinal and a word besides it: "first name" is a given name and "second name" a surname,
    no place in the prompt. And only where its other words single out no role (they hold none of the roles' words,
    "character", or every role's, "friend" of "first friend" and "second friend"): "first patient" of a doctor and
    a needy patient is the patient, whatever its "first" says, so it is left to the other rules."""
    words = stem.split()
    marks = {_ORDINALS[w] for w in words if w in _ORDINALS}
    rest = {w for w in words if w not in _ORDINALS}
    if len(words) > 1 and words[-1] in _LETTERS:
        marks.add(_LETTERS[words[-1]])
        rest = {w for w in words[:-1] if w not in _ORDINALS}
    if len(marks) != 1 or not rest:
        return None
    sharing = sum(bool(rest & words) for words in role_words)
    if 0 < sharing < len(role_words):
        return None
    index = marks.pop()
    return index if index < len(role_words) else None


#: The mark ``_pick`` leaves in ``stems`` where a key went to its role by its order alone (no key's stem).
_BY_ORDER = "\0by order"


def _stem(key: str) -> str:
    """A normalised key without its last word ("sick man references" -> "sick man")."""
    return key.rsplit(" ", 1)[0] if " " in key else ""


def _seq(v: Any) -> Any:
    """A Python-style set ({"Ana"} read by ``ast.literal_eval``) as a list, in a fixed order; else ``v``."""
    return sorted(v, key=str) if isinstance(v, (set, frozenset)) else v


def _name_list(v: Any) -> list[str]:
    """The names a value holds: a string, or a (nested) list of them; null is no name. A name written as an
    object ({"first": "Tom"}) is no reading the labeller can trust (which of its values is the name?): it
    raises, so the story is sent again and, failing again, kept with that reason, not read as nobody named."""
    v = _seq(v)
    if v is None:
        return []
    if isinstance(v, dict):
        raise ParseError(f"a name written as an object ({repr(v)[:60]}), not a string")
    if isinstance(v, str):
        # a list written as a string ("['Unspecified', 'Tom Lee']"), as the published labels hold them, is its names
        if v.strip().startswith("[") and v.strip().endswith("]"):
            inner = parse_list_text(v.strip())
            if isinstance(inner, list) and all(x is None or isinstance(x, (str, list)) for x in inner):  # not [...]
                return [n for x in inner for n in _name_list(x)]
        return [v]
    if isinstance(v, (list, tuple)):
        return [n for x in v for n in _name_list(x)]
    return [str(v)]


def _ref_list(v: Any) -> list[str]:
    v = _seq(v)
    if v is None:
        return []
    if isinstance(v, str):
        return [p for p in re.split(r"[,;]", v) if p.strip()]
    if isinstance(v, (list, tuple)):
        out: list[str] = []
        for x in map(_seq, v):
            if isinstance(x, dict):
                raise ParseError(f"a reference written as an object ({repr(x)[:60]}), not a string")
            out.extend(_ref_list(x) if isinstance(x, (list, tuple)) else [] if x is None else [str(x)])
        return out
    raise ParseError(f"references must be a list, got {type(v).__name__}")


def _text_of(value: str) -> str:
    """A name or reference as the model wrote it, without a lone surrogate (a JSON escape such as
    "\\ud83d" without its pair, which no UTF-8 file takes) and surrounding space."""
    return valid_text(value).replace("\ufffd", "").strip()


#: A placeholder a model writes where a template shows one: "<name or Unspecified>", "{name}", "[reference]", "...".
_PLACEHOLDER = re.compile(r"<[^<>]*>|\{[^{}]*\}"
                          r"|\[[^\[\]]*(?:name|reference|pronoun|unspecified|\.\.\.|…)[^\[\]]*\]"
                          r"|(?:\.\s*){2,}|…", re.I)
#: A schema's type written as the value ("string", "str"): a placeholder unless written capitalised and the story
#: writes the word (a cellist called String, whom the reply schema offers as a name, was read as the template).
_TYPE_NAME = re.compile(r"str(?:ing)?", re.I)


def _placeholder(value: str, story_tokens: set[str] | None = None) -> bool:
    """Whether a name or reference is a template's placeholder, not the model's reading of the story."""
    value = value.strip()
    if _TYPE_NAME.fullmatch(value):  # a name is capitalised: "string" is the template even in a story of strings
        return story_tokens is None or not value[0].isupper() or not in_story(value, story_tokens)
    return bool(_PLACEHOLDER.fullmatch(value))


def _template(names: Sequence[Any], refs: Sequence[Any], story_tokens: set[str] | None = None) -> str | None:
    """What the values picked for the roles are when they are no answer: "definition", the prompt's type
    definition (every name "Unspecified", every reference list empty), which is also the answer for a story that
    names and refers to nobody; "placeholders", a template holding placeholders ("<name or Unspecified>",
    ["..."]), no reading of any story; None for an answer."""
    placeholders = False
    for nv, rv in zip(names, refs):
        given = [_text_of(n) for n in _name_list(nv)]
        marks = [_placeholder(v, story_tokens) for v in [*given, *(_text_of(r) for r in _ref_list(rv))]]
        if not given or not all(n.casefold() == "unspecified" or m for n, m in zip(given, marks)) \
                or not all(marks[len(given):]):
            return None
        placeholders = placeholders or any(marks)
    return "placeholders" if placeholders else "definition"


def _readings(obj: dict[str, Any], roles: Sequence[str]) -> Iterator[dict[str, Any]]:
    """``obj`` as the model may have laid out its answer: as it is; inside a single-key wrapper ({"answer":
    {...}}, {"output": ...}, {"result": ...}, {"labels": ...}, {"response": ...}, whatever the key); and by
    role ({"doctor": {"name": ..., "references": [...]}, ...} read as {"doctor name": ..., ...}, and
    {"role": "doctor", "name": ..., "references": [...]} likewise: ``_by_role_field``)."""
    while True:
        if not (keyed := _by_role_field(obj, roles)) and obj:  # another character's object
            return
        if keyed is not obj:  # its role field names the role: its keys are that role's, never given out by order
            yield keyed
        yield obj
        if len(obj) == 1 and isinstance(inner := next(iter(obj.values())), dict):
            obj = inner
            continue
        by_role = {f"{k} {sub}": v for k, d in obj.items() if isinstance(d, dict) for sub, v in d.items()}
        if by_role:
            yield {**{k: v for k, v in obj.items() if not isinstance(v, dict)}, **by_role}
        return


_BARE_LABEL_KEY = re.compile(r"names?|ref\w*|pronoun\w*")
#: Keys that name the character an object describes ({"role": "doctor", "name": "Ana", "references": [...]}).
_ROLE_FIELDS = ("role", "character", "character role", "type", "character type")


def _by_role_field(obj: dict[str, Any], roles: Sequence[str]) -> dict[str, Any]:
    """An object that names its character in a field ({"role": "doctor", "name": "Ana", "references": ["she"]})
    with that character's keys ({"doctor name": "Ana", "doctor references": ["she"]}), so a list of one such
    object per character reads as an object per character does; any other object as it is. The field must hold
    one of the prompt's ``roles`` (its words, case and punctuation aside): a field holding the character's name
    ({"character": "José", ...}) or something else ({"type": "object"}) would leave the keys to be matched by
    their order, and exchange the characters where the model listed them the other way."""
    if not any(_BARE_LABEL_KEY.fullmatch(_norm_key(k)) for k in obj):  # {"doctor name": .., "type": ..}: as it is
        return obj
    wanted = {_norm_key(r): r for r in roles}
    for field, value in obj.items():
        if _norm_key(field) in _ROLE_FIELDS and isinstance(value, str) and _norm_key(value) in wanted:
            role = wanted[_norm_key(value)]
            return {f"{role} {k}": v for k, v in obj.items() if k != field}
    words = {w for r in roles for w in _norm_key(r).split()}
    if any(_norm_key(f) == "role" and isinstance(v, str) and _norm_key(v) and not set(_norm_key(v).split()) & words
           for f, v in obj.items()):
        return {}  # {"role": "patient", ...} in a doctor's story: another character's, none of the roles' words
    return obj


_KEY_LINE = re.compile(r"^\s*(?:[-*+\u2022]\s+|\d+[.)]\s+)?(?P<key>[^:\n]{1,100}?)\s*:(?P<value>.*)$")
_BULLET = re.compile(r"^\s*(?:[-*+\u2022]|\d+[.)])\s+(?P<item>.+)$")
_MARKUP = " \t*_`#\"'"
_EDGES = _MARKUP + ",;{}[]/\\"  # around a value written without JSON: none of it is the name or word


def _key_values(text: str) -> dict[str, Any]:
    """The "key: value" lines of a reply written as markdown or plain lines instead of JSON ("- **Doctor
    name:** Dr. Ana Ruiz", "Doctor references: she, her"): a value written as a list (["she", "her"]) is read
    as one, and a key with no value takes the bullets under it as its list.

    >>> _key_values("Sure!\\n- **Doctor name:** Ana\\n- Doctor references:\\n  - she\\n  - her\\n")
    {'Doctor name': 'Ana', 'Doctor references': ['she', 'her']}
    """
    obj: dict[str, Any] = {}
    listing: list[str] | None = None  # the list of a key with no value, taking the bullets under it
    for line in text.splitlines():
        m = _KEY_LINE.match(line)
        if not m and listing is not None and (bullet := _BULLET.match(line)):
            listing.append(bullet.group("item").strip(_EDGES))
            continue
        if not m or not m.group("key").strip(_MARKUP):
            listing = None
            continue
        key, raw = m.group("key").strip(_MARKUP), m.group("value").strip().rstrip(",;").strip("*_` ")
        if not raw.strip(_MARKUP):
            obj[key] = listing = []
            continue
        listing = None
        if key in obj and _BARE_LABEL_KEY.fullmatch(_norm_key(key)):  # a second bare "Name:": another character's
            continue
        try:
            obj[key] = _loads(raw) if raw.startswith("[") else raw.strip(_EDGES)
        except ParseError:
            obj[key] = raw.strip(_EDGES)
    return obj


def _without_cut_word(text: str) -> str:
    """Lines cut at ``max_tokens`` without the value they were cut in: the last line's text after its last comma
    ("references: him, h" -> "references: him"), its value where it has no comma, or the line, a bullet."""
    head, last = text.rpartition("\n")[::2]
    if "," in last:
        return head + "\n" + last.rpartition(",")[0]
    m = _KEY_LINE.match(last)
    return head + "\n" + (last[:m.end("key")] + ":" if m else "")


def parse_response(text: str, story: StoryInput, *, cut: bool = False, retry_cut: bool = False) -> StoryLabels:
    """Read a model reply into labels for ``story`` (post-processed against the story text).

    The reply's objects are read in ``_candidates``' order, each as the model may have laid it out
    (``_readings``: inside a single-key wrapper, {"answer": {...}}, or by role): of those that have the
    prompt's keys and are not the prompt's own template (its type definition, every name "Unspecified"
    and every list empty, or one with placeholders such as "<name or Unspecified>", ["..."] or a key
    "{Character} name"), the answer is the one that ranks highest (``_rank``: first whether the story check keeps
    any of the names it gives, then keyed by role before read by key order, then the names and references it
    keeps; the first of those that rank as high), so a model that repeats the template, or writes an example,
    before it answers is labelled with its answer (a reply of the type definition alone is read as its values:
    nobody named, no references; a reply that echoes the whole prompt, definition and story, with nothing after
    it, is no answer). After the last object read, an object with a role's key that did not read (a bracket
    closed by a brace, "pronouns" keys) is an answer in a form that does not parse: the reply raises, so it is
    sent again, rather than being labelled with an example before it. A reply
    that gives each character its own object is read from their keys together; one with no object of the
    prompt's keys is read from its "key: value" lines (``_key_values``: markdown bullets instead
    of JSON), and so are the lines after objects whose names the story check drops every one of (an example, then
    the answer in lines), taken where they outrank them. ``cut``: the reply stopped short (at ``max_tokens``, or a
    server's content filter); with ``retry_cut``, a cut reply whose object never closed raises (its lists may lack
    what the model had yet to write), so the caller can retry; after an answer, only where the open object, closed,
    would outrank it (an answer cut after an example).
    Raises ``ParseError`` when the reply holds no usable object, or only a template of placeholders, or nests
    its lists deeper than Python's recursion reaches (a ``RecursionError`` got out of the labeller's batch).
    """
    try:
        return _read_response(text, story, cut, retry_cut)
    except RecursionError:
        raise ParseError("reply nests its lists or objects too deep to read") from None


def _read_response(text: str, story: StoryInput, cut: bool, retry_cut: bool) -> StoryLabels:
    """``parse_response``'s reading."""
    descs = [r.description for r in story.roles]
    story_tokens = set(alpha_tokens(story.text or ""))
    error: ParseError | None = None
    template = False  # an object was the prompt's template
    nobody: StoryLabels | None = None  # the labels of a template of the type definition's values alone
    definitions: list[str] = []  # the text of each object read as the type definition
    ranks: list[tuple[bool, bool, int]] = []  # per answer: how it ranks among the reply's answers (``_rank``)

    def answer(obj: dict[str, Any]) -> StoryLabels | str | bool:
        """Labels from ``obj``; else the kind of template it was (``_template``), or False (its error kept where
        it lacks keys)."""
        nonlocal error, nobody
        if any("{" in str(k) and "}" in str(k) for k in obj):  # '{"{Character} name": ...}': the template
            return "placeholders"
        try:
            stems: dict[str, int] = {}
            names = _pick(obj, descs, "name", stems)
            refs = _pick(obj, descs, "references", stems)
            kind = _template(names, refs, story_tokens)
            if kind is None:
                labels = _labels(story, names, refs, story_tokens)
                ranks.append(_rank(labels, names, _BY_ORDER in stems, story_tokens))
                return labels
            if kind == "definition" and nobody is None:
                nobody = _labels(story, names, refs, story_tokens)
            return kind
        except ParseError as e:
            error = error or e
            return False

    def outranks(found: dict[str, Any], answers: Sequence[StoryLabels]) -> bool:
        """Whether the object a cut reply left open, closed as it stands, would outrank every answer before it
        (``_rank``): an answer cut after an example ("Dr. John Smith", whose names the story check drops), not a cut
        copy of the answer, which keeps no more than the whole one. Cut before it holds every key of the prompt, it
        outranks only answers whose names were all dropped, where it holds some of the prompt's keys and the story
        check keeps a name of those it gives (or it gives none yet)."""
        best = max(ranks[:len(answers)])
        for obj in _readings(found, descs):
            at = len(ranks)
            got = answer(obj)
            if isinstance(got, StoryLabels):
                mine = ranks[at]
                del ranks[at:]  # no answer of the reply's: the caller raises or stops here
                return mine > best
            if got:  # the template: no answer
                return False
            by_key = {_norm_key(k): v for k, v in obj.items()}
            if not any(f"{_norm_key(d)} {sub}" in by_key for d in descs for sub in ("name", "references")):
                continue
            try:
                return not best[0] and not _names_dropped(
                    [by_key[f"{_norm_key(d)} name"] for d in descs if f"{_norm_key(d)} name" in by_key], story_tokens)
            except ParseError:  # a name written as an object: no reading to rank
                return False
        return False

    if text and "{" in text:
        merged: dict[str, Any] = {}  # the keys of every object, the first object's value of each
        answers: list[StoryLabels] = []
        read: list[str] = []  # the objects read as an answer or a template: an object inside one is part of it
        stopped = False  # a cut reply's open object came after an answer: what follows is inside an open object
        for found, closed_here, cand in _objects(text, cut):
            if stopped and not closed_here:
                break
            if any(cand != r and cand in r for r in read):  # {"patient": {"name": "Tom"}} inside the doctor's answer
                continue
            if cut and closed_here and retry_cut:
                # an answer, then more cut short: the answer, as when it was taken first, unless what was cut would
                # outrank it (an example, then the answer cut): its lists may lack what the model had yet to write
                if not answers or outranks(found, answers):
                    raise ParseError("reply cut short before its JSON object closed")
                stopped = True
                continue
            for obj in _readings(found, descs):
                got = answer(obj)
                if isinstance(got, StoryLabels):
                    answers.append(got)
                    read.append(cand)
                    break
                if got:
                    read.append(cand)
                    template = True
                    if got == "definition":
                        definitions.append(cand)
                    break
            else:
                merged.update((k, v) for k, v in _by_role_field(found, descs).items() if k not in merged)
        if answers:  # an example the model wrote before its answer ("Dr. Smith", "John": no name of the story) ranks
            # below the answer: the one that ranks highest, the first of those that rank as high
            best = max(range(len(answers)), key=ranks.__getitem__)
            ends = [text.rfind(c) + len(c) if c in text else len(text) for c in read]
            if not ranks[best][0]:
                # every object an example whose names the story check drops, then the answer in "key: value" lines
                # (a JSON example, then "- doctor name: Ana Ruiz"): the lines, where they outrank it
                tail, at = text[max(ends):], len(ranks)
                lines = answer(_key_values(_without_cut_word(tail) if cut else tail))
                if isinstance(lines, StoryLabels) and ranks[at] > ranks[best]:
                    if cut and retry_cut:  # its lists may lack what the model had yet to write
                        raise ParseError("reply cut short in its lines of keys and values")
                    return lines
            if not cut:
                # an object after the last one read, with a role's key, did not read: an answer in a form that does not
                # parse (as after a copied type definition below), sent again rather than labelled with an example
                # before it. Only after a "{": lines of keys after an answer may be a note on it, read as before
                after = text[max(ends):].casefold()
                after = after[after.find("{"):] if "{" in after else ""
                if any(re.search(re.escape(d.casefold()) + _KEY_AFTER_ROLE, after) for d in descs):
                    raise ParseError("reply writes an object of the prompt's keys, then answers in a form that does "
                                     "not parse")
            return answers[best]
        # one object per character ({"doctor name": ..., "doctor references": ...} {"patient name": ...})
        if not template and merged and isinstance(got := answer(merged), StoryLabels):
            return got
    else:
        error = ParseError("no JSON object in the reply")
    if (not template or nobody is not None) and text:  # markdown bullets or "key: value" lines instead of JSON
        first_error = error
        got = answer(_key_values(_without_cut_word(text) if cut else text))
        if isinstance(got, StoryLabels):
            if cut and retry_cut:  # its lists may lack what the model had yet to write
                raise ParseError("reply cut short in its lines of keys and values")
            return got
        template, error = bool(got), first_error
    if nobody is not None:  # no other answer: the type definition's values are this story's ("nobody named")
        # unless, after its last copy of the definition, the reply writes a role's key again (`"doctor pronouns":`,
        # an object that did not read: a bracket closed by a brace): an answer in a form that did not parse, sent again,
        # not taken for nobody named
        ends = [text.rfind(d) + len(d) for d in definitions if d in text]
        after = text[max(ends):].casefold() if ends else ""
        if any(re.search(re.escape(d.casefold()) + _KEY_AFTER_ROLE, after) for d in descs):
            raise ParseError("reply repeats the prompt's type definition, then answers in a form that does not parse")
        if ends and max(ends) <= _end_of_echo(text, story):  # every copy of the definition is the echoed prompt's
            raise ParseError("reply repeats the prompt, with no answer after it")
        return nobody
    if template:
        raise ParseError("reply only repeats the prompt's template of placeholders (\"<name>\", [\"...\"])")
    raise error or ParseError("reply holds a '{' but no parseable JSON object")


#: The opening of the labelling prompt (Table S7, either template), as a reply that echoes it starts.
_PROMPT_OPENING = "in the following story in single quotes, please extract the name"


def _end_of_echo(text: str, story: StoryInput) -> int:
    """Where a reply's copy of the prompt ends: after the story's text where the reply repeats the prompt's
    opening and the story (the prompt ends with it); -1 where it does not. A small model without constrained
    decoding often sends the prompt back whole; its type definition is no answer ("nobody named")."""
    folded = text.casefold()
    start = folded.find(_PROMPT_OPENING)
    body = (story.text or "").strip()
    if start < 0 or not body:
        return -1
    at = text.find(body[:200], start)
    return -1 if at < 0 else at + len(body[:200])


def _labels(story: StoryInput, names: Sequence[Any], refs: Sequence[Any], story_tokens: set[str]) -> StoryLabels:
    """Labels from the values picked for each role, post-processed against the story's tokens."""
    chars = []
    for role, nv, rv in zip(story.roles, names, refs):
        cands = [c for c in (_text_of(n) for n in _name_list(nv)) if c]
        real = [n for n in cands
                if not is_no_name(n) and not _placeholder(n, story_tokens) and in_story(n, story_tokens)]
        # the paper's code filters the list first (false positives, "American", the role's words), then takes the
        # first name left: ["The doctor", "Ana Ruiz"] of the doctor is Ana Ruiz, where the first in the story was
        # kept and the audit's filters then dropped it, leaving the character unnamed
        named = [n for n in real if survives_filters(n, role.description)]
        name = (named or real or [None])[0]
        kept = [r for r in (_text_of(r) for r in _ref_list(rv))
                if not _placeholder(r, story_tokens) and in_story(r, story_tokens)]
        chars.append(CharacterLabel(role.key, name, dedupe(kept)))
    return StoryLabels(story.story_id, tuple(chars))


def _names_dropped(names: Sequence[Any], story_tokens: set[str]) -> bool:
    """Whether the values picked for the roles' names give a name (not "Unspecified" or another way of writing no
    name, nor a placeholder) and the story check drops every one: an example's ("Dr. John Smith", "Mary")."""
    given = [t for v in names for t in (_text_of(n) for n in _name_list(v))
             if t and not is_no_name(t) and not _placeholder(t, story_tokens)]
    return bool(given) and not any(in_story(t, story_tokens) for t in given)


def _rank(labels: StoryLabels, names: Sequence[Any], by_order: bool, story_tokens: set[str]) -> tuple[bool, bool, int]:
    """How an answer ranks among a reply's objects, highest first: one that gives no name, or a name the story
    check keeps, above one whose names it drops every one of (an example written before the answer: "Dr. John
    Smith" and "Mary" are dropped, but its "he", "him", "his", "she", "her" are in most stories, so counted alone
    they outnumbered the answer's words); then one keyed by role above one read by key order (``by_order``);
    then the names and references kept."""
    return (not _names_dropped(names, story_tokens), not by_order,
            sum(bool(c.name) + len(c.references) for c in labels.characters))


def _story_index(request_id: str) -> int:
    """The story's index in its batch, from a request id "<index>#<attempt>"."""
    return int(request_id.split("#", 1)[0])


#: An error of a request its story causes, which sending it again repeats: a prompt longer than the model takes
#: (vLLM's validation error, an OpenAI-compatible server's 400 "maximum context length", a 413). Taken for an
#: outage, such a story was sent again on every rerun and the label stage of ``harness run`` never ended. Other
#: refusals (a 400 for a setting the server lacks, a 401) are every story's, so they stay outages: fixed, the
#: rerun labels the stories again.
_REFUSED = re.compile(r"maximum context length|context_length_exceeded|prompt is too long|HTTP 413\b"
                      r"|longer than the maximum model length", re.I)  # the last: vLLM 0.32's engine


def _story_refused(error: str) -> bool:
    """Whether ``error`` (a backend's, for one request) is the story's own (``_REFUSED``), not the server's."""
    return bool(_REFUSED.search(error))


#: What a failure's reason adds where the backend says why the reply ended: a content filter's empty reply read
#: "no JSON object in the reply", as though the model had answered in prose.
_HOW_IT_ENDED = {"length": " after hitting max_tokens", "content_filter": " (stopped by the server's content filter)"}


class LLMLabeller(Labeller):
    """Table S7 extraction through a generation backend.

    Args:
        backend: any ``harness.generation.base.Backend``; default: an ``engine`` backend with ``model``.
        model: model alias or path for the default backend (the embedded SmolLM2-135M).
        engine: the default backend's kind: "transformers", "vllm" or "openai" (a server at
            ``base_url`` serving ``model``); each holds replies to the prompt's JSON schema, see
            ``constrain`` (a server only where it enforces ``response_format``, as vLLM's does).
        base_url: the server's URL for the "openai" engine, e.g. http://127.0.0.1:8000/v1.
        params: sampling for the first attempt (default greedy, 256 new tokens).
        max_attempts: attempts per story (1 + retries).
        seed: base seed; a story's request after ``a`` replies of the model uses ``seed + a`` (the first
            ``seed``; a retry after the backend failed, with no reply, repeats the lost request's seed).
        constrain: send each story's ``prompts.reply_schema`` with its request, so a backend that
            constrains decoding (vLLM offline or served, and transformers through xgrammar) returns
            only JSON of the prompt's keys, with names and references written in the story. A reply
            cut at ``max_tokens`` or from a backend that does not constrain goes through the same
            repair and retries.
        owns_backend: ``close`` closes the given ``backend`` too (it was started for this labeller alone);
            a backend started here is always closed.
    """

    name = "llm"
    default_batch_size = 16
    #: A batch takes seconds on a GPU and about half a minute with SmolLM2 on 2 CPU cores: windows of 64
    #: batches (1,024 stories) held a killed run's labels back for up to half an hour there. Generation pads
    #: little, so sorting 64 stories by length is enough.
    window_batches = 4

    def __init__(self, backend: Backend | None = None, *, model: str = "smollm2-135m", engine: str = "transformers",
                 base_url: str | None = None, params: GenParams | None = None, max_attempts: int = 3, seed: int = 0,
                 constrain: bool = True, owns_backend: bool = False) -> None:
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {max_attempts}")
        self._owns_backend = backend is None or owns_backend
        if backend is None:
            from pydantic import ValidationError

            from harness.config import ModelConfig
            from harness.generation import load_backend

            if engine not in ("transformers", "vllm", "openai"):
                raise ConfigError(f"llm labeller: engine (--llm-backend) must be transformers, vllm or openai, "
                                  f"got {engine!r}")
            if (engine == "openai") != bool(base_url):  # the flags' names too, for `harness label`
                raise ConfigError("llm labeller: the openai engine (--llm-backend openai) needs base_url "
                                  "(--llm-base-url), the server's URL, e.g. http://127.0.0.1:8000/v1"
                                  if engine == "openai" else
                                  f"llm labeller: base_url (--llm-base-url) is for the openai engine, not {engine}")
            try:
                config = ModelConfig(backend=engine, path=model, base_url=base_url)
            except ValidationError as e:  # a traceback of pydantic's before
                err = e.errors()[0]
                field = str(err["loc"][0]) if err["loc"] else "model"
                option = {"base_url": "base_url (--llm-base-url)", "path": "model (--llm-model)",
                          "backend": "engine (--llm-backend)"}.get(field, field)
                raise ConfigError(f"llm labeller: {option} {err.get('input')!r}: "
                                  f"{err['msg'].removeprefix('Value error, ')}") from None
            try:
                backend = load_backend(config)
            except ConfigError as e:  # named as `harness label`'s option: it has no model.path
                if not str(e).startswith("model.path:"):
                    raise
                raise ConfigError("llm labeller: model (--llm-model)" + str(e).removeprefix("model.path")) from None
        if not isinstance(backend, Backend):
            raise ConfigError(f"backend must be a harness Backend, got {type(backend).__name__}")
        self.backend = backend
        self.params = params or DEFAULT_PARAMS
        self.max_attempts = max_attempts
        self.seed = seed
        self.constrain = constrain
        #: (story_id, attempt, reason) for every failed attempt: what the benchmarks count (a story's labels keep
        #: only its last reason, in `status`).
        self.failures: list[tuple[str, int, str]] = []

    def info(self) -> dict[str, Any]:
        """Labeller name, backend and model, sampling and retry settings."""
        b = self.backend.info()
        # the server too: a killed `label label` resumed against another server mixed two servers' labels
        served = {"base_url": b.extra["base_url"]} if b.extra.get("base_url") else {}
        # the name lists' version: the reply's name is the first that their filters keep (``survives_filters``)
        return {"labeller": self.name, "parser_version": PARSER_VERSION, "name_parsing": name_lists().version,
                "backend": b.backend, "model": b.model, **served,
                "max_attempts": self.max_attempts,
                "temperature": self.params.temperature, "top_p": self.params.top_p, "top_k": self.params.top_k,
                "max_tokens": self.params.max_tokens, "stop": list(self.params.stop), "seed": self.seed,
                "constrained": self.constrain and b.backend in ("vllm", "openai", "transformers")}

    def _retry_params(self, longer: bool) -> GenParams:
        """Sampled, and with twice the tokens where a reply was cut at ``max_tokens``. A ``top_k`` of 1 is lifted: it
        keeps one token whatever the temperature, so every retry repeated the greedy reply that failed."""
        p = self.params
        return GenParams(temperature=max(p.temperature, RETRY_TEMPERATURE), top_p=p.top_p,
                         top_k=-1 if p.top_k == 1 else p.top_k,
                         max_tokens=p.max_tokens * 2 if longer else p.max_tokens, stop=p.stop)

    def _generate(self, reqs: list[GenRequest], params: GenParams, alone: bool
                  ) -> tuple[dict[int, Any], dict[int, str], bool]:
        """Replies by story index, the backend's error for each story it failed, and whether a call of
        several requests failed. ``alone``: one request per call. When a call of several fails, the
        requests it left without a reply are sent again one per call, in the same attempt with the same
        settings, so a request that breaks the backend fails only its own story and costs the others
        neither an attempt nor their greedy reply."""
        replies: dict[int, Any] = {}
        errors: dict[int, str] = {}

        def send(batch: list[GenRequest]) -> None:
            try:
                for res in self.backend.generate(batch, params):
                    replies[_story_index(res.request_id)] = res
            except Exception as e:  # noqa: BLE001 - any backend failure is recorded on its stories, never raised
                why = str(e) if isinstance(e, BackendError) else f"{type(e).__name__}: {e}"
                for r in batch:
                    errors.setdefault(_story_index(r.request_id), why)

        broke = False
        if alone or len(reqs) == 1:
            for r in reqs:
                send([r])
        else:
            send(reqs)
            rest = [r for r in reqs if _story_index(r.request_id) not in replies]
            broke = bool(errors)
            if broke:
                errors.clear()
                for r in rest:
                    send([r])
        return replies, {i: e for i, e in errors.items() if i not in replies}, broke

    def _label_batch(self, stories: Sequence[StoryInput]) -> list[StoryLabels]:
        done: dict[int, StoryLabels] = {}
        last_error: dict[int, str] = {}
        pending = list(range(len(stories)))
        prompts = [build_prompt(s) for s in stories]
        schemas = [json.dumps(reply_schema(s)) if self.constrain else None for s in stories]
        alone = False
        replied: dict[int, int] = {}  # replies of the model (unparseable) per story: its retries are sampled, and
        # their seed counts the replies, not the attempts, so a backend failure before one changes no sample
        lost: dict[int, str] = {}  # the last backend error of a story, where one cost it an attempt
        outages: dict[int, int] = {}  # the attempts backend errors cost a story (a refusal of twice the tokens not)
        cut_reply: dict[int, str] = {}  # a story's last reply cut at max_tokens, read as it stands where its last
        # attempt, for twice the tokens, was refused (the reply a last attempt would have taken)
        said: dict[int, str] = {}  # why the model's last reply of a story did not parse
        cut: set[int] = set()  # of those, the ones a reply of was cut at max_tokens: their retries get twice the tokens
        capped: set[int] = set()  # of those, the ones whose request of twice the tokens the backend refused
        for attempt in range(self.max_attempts):
            if not pending:
                break
            replies: dict[int, Any] = {}
            errors: dict[int, str] = {}
            # a story the backend failed (no reply from the model yet) is sent again with the first attempt's
            # settings: its labels do not depend on whether the server was up
            for params, group in ((self.params, [i for i in pending if i not in replied]),
                                  (self._retry_params(False), [i for i in pending if i in replied
                                                               and (i not in cut or i in capped)]),
                                  (self._retry_params(True), [i for i in pending if i in cut and i not in capped])):
                if not group:
                    continue
                reqs = [GenRequest(f"{i}#{attempt}", prompts[i], seed=self.seed + replied.get(i, 0),
                                   json_schema=schemas[i]) for i in group]
                got, err, broke = self._generate(reqs, params, alone)
                replies.update(got)
                errors.update(err)
                alone = alone or broke
            last = attempt == self.max_attempts - 1
            still = []
            for i in pending:
                res = replies.get(i)
                if res is None or res.finish_reason == "error":
                    why = errors.get(i) or (res.error if res is not None else None) or "no result returned"
                    if _story_refused(why) and i in cut and i not in capped:
                        # the request of twice the tokens ("maximum context length ... in the completion"), not
                        # the story's: its retries go at the tokens the backend took
                        capped.add(i)
                        reason = f"the backend refused twice the tokens ({why})"
                        if last and i in cut_reply:
                            try:
                                done[i] = parse_response(cut_reply[i], stories[i], cut=True)
                                self.failures.append((stories[i].story_id, attempt, reason))
                                continue
                            except ParseError as e:  # its parse error is the status, as a last reply's is
                                reason = said[i] = (f"unparseable reply ({e}){_HOW_IT_ENDED['length']} (twice the "
                                                    f"tokens refused)")
                    elif _story_refused(why):  # sent again it fails again: kept with the reason, not an outage
                        reason = f"the backend refused the story's request: {why}"
                        done[i] = failed(stories[i], f"llm: {reason}"[:300])
                        # a failed attempt all the same: ``failures`` holds every one (the benchmarks count them)
                        self.failures.append((stories[i].story_id, attempt, reason))
                        continue
                    else:
                        lost[i] = why
                        outages[i] = outages.get(i, 0) + 1
                        reason = f"{BACKEND_FAILURE.removeprefix('llm: ')}: {why}"
                else:
                    try:
                        if not (res.text or "").strip():  # not "no JSON object in the reply": there was no reply
                            raise ParseError("empty reply")
                        # a reply a content filter stopped is cut as one max_tokens stopped is (its tokens are not
                        # doubled on a retry: more would not get past the filter)
                        done[i] = parse_response(res.text, stories[i], retry_cut=not last,
                                                 cut=res.finish_reason in ("length", "content_filter"))
                        continue
                    except ParseError as e:
                        replied[i] = replied.get(i, 0) + 1
                        if res.finish_reason == "length":
                            cut.add(i)
                            cut_reply[i] = res.text
                        reason = said[i] = (str(e) if str(e) == "empty reply" else f"unparseable reply ({e})"
                                            ) + _HOW_IT_ENDED.get(res.finish_reason, "")
                last_error[i] = reason
                self.failures.append((stories[i].story_id, attempt, reason))
                still.append(i)
            pending = still
        for i in pending:
            n = replied.get(i, 0)
            if i in lost and 0 < n < self.max_attempts:  # an outage took attempts that a reply did not: a backend
                # failure, which a rerun labels again (the story's labels do not depend on the outage), not a
                # story the model could not answer
                done[i] = failed(stories[i], f"{BACKEND_FAILURE} took {outages[i]} of {self.max_attempts} "
                                             f"attempt(s) ({lost[i]}); the model's {n} repl{'y' if n == 1 else 'ies'}: "
                                             f"{said[i]}"[:300])
            else:
                done[i] = failed(stories[i], f"llm: {last_error[i]} in {self.max_attempts} attempt(s)")
        return [done[i] for i in range(len(stories))]

    def close(self) -> None:
        """Close the backend if it is this labeller's (started here, or given with ``owns_backend``)."""
        if self._owns_backend:
            self.backend.close()


__all__ = ["DEFAULT_PARAMS", "LLMLabeller", "ParseError", "parse_json_object", "parse_response"]
