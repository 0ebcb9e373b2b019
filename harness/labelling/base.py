"""The labelling contract: stories with their roles in, one label per role out.

A labeller reads a story and, for each role of its prompt (``subject``, and ``object`` where the
prompt has a second character), returns the character's name (or None) and the words that refer to
that character. Gender follows later from ``harness.identity.gender.infer_gender`` on the
references; the first name from ``harness.identity.names.parse_first_name``.

``Labeller.label`` follows sentence-transformers' ``encode``: one call for one story or a million,
batches sorted by length internally, results in the caller's order. A story the labeller cannot
handle comes back with a reason in ``status``; it is never dropped.
"""

from __future__ import annotations

import abc
import re
import unicodedata
import warnings
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from itertools import chain, islice
from typing import Any

from harness.errors import DataError

ROLE_KEYS = ("subject", "object")
OK = "ok"
EMPTY_STORY = "empty story"
#: Quotation marks, straight and curly.
QUOTES = frozenset({'"', "\u201c", "\u201d"})


def quoted(words: Sequence[str], line_starts: Collection[int] = ()) -> list[bool]:
    r"""For each word of a story (in order, quotation marks included), whether it stands inside a
    quotation: straight quotes open and close by turns, curly ones by their direction.

    A quotation left open at the end of a line goes on only where the next line closes it (its first
    mark, not at the line's start, is a closing curly one or an odd straight one: a note or a poem written
    over lines, '"Happy anniversary,\nlove, John." She paid'); otherwise it ends there (a quotation over
    paragraphs opens each again with a mark), so a stray mark (a quotation never closed) misreads one
    paragraph, not the rest of the story. A line ends at a word that holds a line break (spaCy's
    whitespace tokens, the "\n" words of ``role_apposition.words_with_breaks``), which is marked as the line
    ended, and before each index of ``line_starts`` (``words.line_starts``, for words split without their
    line breaks). An inch mark after feet ("6'2\"", split "6", "'", "2", '"' or, by spaCy, "6'2", '"') is no
    quotation mark.

    >>> quoted(['"', "Wait", "\n", "He", "left", '"', "Go", '"'])
    [False, True, True, False, False, False, True, True]
    >>> quoted(['"', "Dear", "Jo", "\n", "love", '"', "She", "paid"])
    [False, True, True, True, True, True, False, False]
    """
    marks = [w in QUOTES and not _inch_mark(words, i) for i, w in enumerate(words)]
    starts = frozenset(line_starts)
    lines: list[list[int]] = [[]]  # the words of each line, break words ending theirs
    for i, w in enumerate(words):
        if i in starts and lines[-1]:
            lines.append([])
        lines[-1].append(i)
        if breaks_line(w):
            lines.append([])
    out = []
    inside = False
    for n, line in enumerate(lines):
        if n and inside and not _closes_what_was_open(words, marks, line):
            inside = False
        for i in line:
            out.append(inside)
            if marks[i]:
                inside = (not inside) if words[i] == '"' else words[i] == "\u201c"
    return out


def _closes_what_was_open(words: Sequence[str], marks: Sequence[bool], line: Sequence[int]) -> bool:
    """Whether a line's first quotation mark closes a quotation left open before the line: not the line's
    first word (that opens one again), and a closing curly mark or one of an odd number of straight ones."""
    found = [i for i in line if marks[i]]
    if not found or found[0] == next((i for i in line if not breaks_line(words[i])), None):
        return False
    if words[found[0]] != '"':
        return words[found[0]] == "\u201d"
    return sum(words[i] == '"' for i in found) % 2 == 1


_FEET_INCHES = re.compile(r"\d+['\u2019]\d+")


def _inch_mark(words: Sequence[str], i: int) -> bool:
    """Whether ``words[i]``, a closing or straight double quotation mark, follows a height in feet and
    inches ("6'2\"", "5\u20192\u201d")."""
    if words[i] == "\u201c" or i < 1:
        return False
    if _FEET_INCHES.fullmatch(words[i - 1]):
        return True
    return i >= 3 and words[i - 1].isdigit() and words[i - 2] in APOSTROPHES and words[i - 3].isdigit()


#: Titles written before a name ("Mr. Thompson", "Chef Maria"), case-folded without their ".": not name words.
NAME_TITLES = frozenset({"mr", "mrs", "ms", "miss", "mx", "dr", "chef", "nurse", "coach", "professor", "prof", "sir",
                         "madam", "mister", "doctor", "officer", "captain", "judge", "uncle", "aunt"})
#: Titles written abbreviated, with a point ("Dr. Ruiz", "Sen. Hart", "Sra. Lopez": the abbreviations among the
#: titles above and the name parser's): a point after one ends no sentence, where a point after a title written
#: in full does ("He went to see the doctor. He said", "She thanked the Principal. Maya smiled").
ABBREVIATED_TITLES = frozenset({"mr", "mrs", "ms", "mx", "dr", "prof", "rev", "fr", "det", "lt", "sgt", "capt", "col",
                                "gen", "cmdr", "sen", "gov", "rep", "maj", "cpl", "sr", "sra", "srta", "mme", "mlle"})
#: What ends a line, as ``str.splitlines`` reads it (CR alone, the Unicode line and paragraph separators too).
LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
#: ``LINE_BREAKS`` as a regular expression's character class.
LINE_BREAK_CLASS = "[" + re.escape("".join(sorted(LINE_BREAKS))) + "]"
#: The apostrophes a word may start with as the splitter cuts it ("'s", "'Brien" of "O'Brien").
APOSTROPHES = ("'", "\u2019")


def breaks_line(text: str) -> bool:
    """Whether ``text`` holds a line break (``LINE_BREAKS``)."""
    return not LINE_BREAKS.isdisjoint(text)


def _reject_unknown(cls: type, d: dict[str, Any], where: str) -> None:
    if not isinstance(d, dict):  # a list or number read as a record raised AttributeError: a traceback
        raise DataError(f"{where}: expected a JSON object, got {type(d).__name__}")
    names = {f.name for f in fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise DataError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; "
                        f"allowed: {', '.join(sorted(names))}")


def _check_type(d: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> None:
    """A DataError naming ``key`` where ``d`` gives it with a value not of ``kind`` (a missing key is the caller's)."""
    if key in d and not isinstance(d[key], kind):
        raise DataError(f"{where}: `{key}` must be a {'string' if kind is str else 'string or null'}, got "
                        f"{type(d[key]).__name__}")


def _has_text(story: StoryInput) -> bool:
    """Whether a story has text to label (an empty one is kept with the reason ``EMPTY_STORY``)."""
    return bool(story.text and story.text.strip())


def _by_constructor(self) -> tuple:
    """Pickle a slotted dataclass as its constructor call. Dataclasses' own pickling of slotted classes looks the
    fields up again for every object: labels crossing between the labeller's processes unpickled at 5.9 us per
    story that way, 1.7 this way."""
    return type(self), tuple(getattr(self, n) for n in self.__slots__)


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate (a JSON escape such as "\\ud83d" without its pair: no character,
    and nothing a tokenizer or a UTF-8 file takes) replaced by U+FFFD, one for one, so offsets hold."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


#: What a labeller's ``info()`` holds that does not change its labels: where it runs, where its weights lie (the
#: encoder's weights are named by their training data's and head's hashes, its arithmetic by ``precision``).
INFO_NOT_LABELS = ("device", "path")


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """One character the prompt asks for.

    Attributes:
        key: "subject" or "object".
        description: the {Character} string of the Table S7 labelling prompt ("student",
            "struggling student in math class", "first romantic partner", ...).
    """

    key: str
    description: str
    __reduce__ = _by_constructor

    def __post_init__(self) -> None:
        if self.key not in ROLE_KEYS:
            raise DataError(f"role key must be one of {', '.join(ROLE_KEYS)}, got {self.key!r}")
        if not isinstance(self.description, str) or not self.description.strip():
            raise DataError(f"role {self.key!r}: description must be a non-empty string, got {self.description!r}")
        object.__setattr__(self, "description", valid_text(self.description))


@dataclass(frozen=True, slots=True)
class StoryInput:
    """A story to label and the roles of the prompt that produced it (subject first)."""

    story_id: str
    text: str
    roles: tuple[RoleSpec, ...]
    __reduce__ = _by_constructor

    def __post_init__(self) -> None:
        if not isinstance(self.story_id, str):  # an int or None came back as the labels' id, joined to nothing
            raise DataError(f"story id {self.story_id!r}: must be a string, got {type(self.story_id).__name__}")
        roles = tuple(self.roles)
        object.__setattr__(self, "roles", roles)
        if not roles or len(roles) > 2:
            raise DataError(f"story {self.story_id!r}: needs 1 or 2 roles, got {len(roles)}")
        keys = [r.key for r in roles]
        if keys not in (["subject"], ["subject", "object"]):
            raise DataError(f"story {self.story_id!r}: roles must be (subject) or (subject, object), got {keys}")
        if self.text is not None and not isinstance(self.text, str):
            raise DataError(f"story {self.story_id!r}: text must be a string, got {type(self.text).__name__}")
        if self.text is not None:
            object.__setattr__(self, "text", valid_text(self.text))

    def role(self, key: str) -> RoleSpec | None:
        """The role with this key, or None."""
        return next((r for r in self.roles if r.key == key), None)


@dataclass(frozen=True, slots=True)
class CharacterLabel:
    """What a labeller found for one role.

    Attributes:
        role: "subject" or "object".
        name: the name as written in the story ("Dr. Sarah Kim"), or None when unnamed.
        references: distinct words that refer to the character, in order of first use.
        status: "ok", or why this character could not be labelled.
    """

    role: str
    name: str | None
    references: tuple[str, ...] = ()
    status: str = OK
    __reduce__ = _by_constructor

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for JSON and Parquet."""
        return {"role": self.role, "name": self.name, "references": list(self.references), "status": self.status}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CharacterLabel:
        """Inverse of ``to_dict``; unknown fields, and fields of another type (a null status, references given as
        one string, which were split into letters), are rejected."""
        _reject_unknown(cls, d, "CharacterLabel")
        refs = d.get("references")
        refs = () if refs is None else refs  # 0, false, "" or {} are refused below, not read as none
        _check_type(d, "role", str, "CharacterLabel")
        _check_type(d, "name", (str, type(None)), "CharacterLabel")
        _check_type(d, "status", str, "CharacterLabel")
        if not isinstance(refs, (list, tuple)) or not all(isinstance(r, str) for r in refs):
            raise DataError(f"CharacterLabel: `references` must be a list of strings, got {refs!r}"[:200])
        return cls(d["role"], d.get("name"), tuple(refs), d.get("status", OK))


@dataclass(frozen=True, slots=True)
class StoryLabels:
    """The labels of one story: one ``CharacterLabel`` per role, in the story's role order."""

    story_id: str
    characters: tuple[CharacterLabel, ...]
    status: str = OK
    __reduce__ = _by_constructor

    def character(self, key: str) -> CharacterLabel | None:
        """The label of role ``key``, or None."""
        return next((c for c in self.characters if c.role == key), None)

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for JSON and Parquet."""
        return {"story_id": self.story_id, "characters": [c.to_dict() for c in self.characters],
                "status": self.status}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StoryLabels:
        """Inverse of ``to_dict``; unknown fields are rejected."""
        _reject_unknown(cls, d, "StoryLabels")
        _check_type(d, "story_id", str, "StoryLabels")
        _check_type(d, "status", str, "StoryLabels")
        if not isinstance(d.get("characters"), list):
            raise DataError("StoryLabels: `characters` must be a list of role labels")
        return cls(d["story_id"], tuple(CharacterLabel.from_dict(c) for c in d["characters"]),
                   d.get("status", OK))


#: The status that starts a story's labels when its last attempt failed in the generation backend (a server
#: down, an engine that died), not in the story: a later run may label it (the label stage retries it).
BACKEND_FAILURE = "llm: backend error"


def failed(story: StoryInput, reason: str) -> StoryLabels:
    """Labels for a story that could not be labelled: every role unnamed, no references."""
    return StoryLabels(story.story_id, tuple(CharacterLabel(r.key, None, (), reason) for r in story.roles), reason)


# ------------------------------------------------------------------------------------------------
# post-processing shared by the labellers (digest section 4: drop what is not in the story)

_ALPHA = re.compile(r"[^\W\d_]+")


def alpha_tokens(text: str) -> list[str]:
    """Case-folded alphabetic tokens (NFKC), the unit of the "is it in the story" checks."""
    return _ALPHA.findall(unicodedata.normalize("NFKC", text).casefold())


def in_story(phrase: str, story_tokens: set[str]) -> bool:
    """True when every alphabetic token of ``phrase`` occurs in the story (and there is one)."""
    toks = alpha_tokens(phrase)
    return bool(toks) and all(t in story_tokens for t in toks)


#: What surrounds a reference and is no part of it: quotation marks, brackets and punctuation other than a point.
_WRAPPING = "\"'“”‘’,;:!?()[]"


def dedupe(words: Iterable[str]) -> tuple[str, ...]:
    """Distinct strings (case-insensitive, surrounding quotes and punctuation stripped, but not a point: "Mr."
    stays as written, so "her." and "her" are two, though what stands before that point comes off: "(her)." is
    "her."), first spelling kept.

    >>> dedupe(["Mr.", "(her).", "her", "“Her,”"])
    ('Mr.', 'her.', 'her')
    """
    seen: set[str] = set()
    out = []
    for w in words:
        w = w.strip().strip(_WRAPPING)
        if w.endswith("."):  # "(her)." is "her."
            w = w[:-1].rstrip(_WRAPPING) + "." if w[:-1].rstrip(_WRAPPING) else ""
        k = w.casefold()
        if w and k not in seen:
            seen.add(k)
            out.append(w)
    return tuple(out)


# ------------------------------------------------------------------------------------------------
# the labeller interface


ERROR_PREFIX = "labeller error: "


def error_status(e: BaseException) -> str:
    """The status of a story whose labelling raised ``e``."""
    return f"{ERROR_PREFIX}{type(e).__name__}: {e}"[:300]


def warn_one_at_a_time(error: str) -> None:
    """Warn that a batch failed with ``error`` (an ``error_status``) and that its stories are labelled one
    at a time, once per kind of error and place (Python's default warning filter): where every batch runs
    out of GPU memory, each is retried story by story, many times slower, and the labels alone do not
    show it."""
    kind = error.removeprefix(ERROR_PREFIX).split(":", 1)[0]
    hint = (": a smaller --batch-size avoids the retries" if "out of memory" in error.lower() else
            "; a story that fails alone too is kept with the error as its status")
    warnings.warn(f"labeller: a batch of stories failed ({kind}); its stories are labelled one at a time{hint}",
                  RuntimeWarning, stacklevel=3)


#: The text of a story any working labeller labels (``probe_story``).
PROBE_TEXT = "Maya Patel paid the bill. She smiled at Ethan Brooks, and he thanked her."


def probe_story(roles: tuple[RoleSpec, ...]) -> StoryInput:
    """A plain story with ``roles``, which a labeller that works labels: where every story of a batch fails
    alone, ``label_or_keep`` labels it to tell the machine's fault from the stories'."""
    return StoryInput("probe", PROBE_TEXT, roles)


def label_or_keep(label: Callable[[Sequence[Any]], list[StoryLabels]], items: Sequence[Any],
                  story: Callable[[Any], StoryInput] = lambda item: item, probe: Any = None) -> list[StoryLabels]:
    """``label(items)``, where an item that breaks the labeller (a text spaCy refuses, an input the model
    cannot take, a batch too large for the GPU's memory) is labelled alone and kept with the error as its
    status, and the rest of its batch is labelled as it would have been. ``story`` gives an item's story
    (items may carry more, as a decoder's story, encoding and probabilities do). Where every item of a batch
    of several fails alone too, the fault is the labeller's or the machine's (a model that does not load, a
    GPU another job fills), not the stories': the last item's error is raised, as ``host_pool.forward_or_keep``
    raises it, since the label stage keeps a story's "labeller error" as its final labels. Unless ``probe``, an
    item any working labeller labels (``probe_story``), is labelled: then the stories are at fault (two bad
    stories the length sort put in one batch of two stopped every run of their file), and the last is kept.
    A batch of one is told apart by the probe alike."""
    try:
        return label(items)
    except Exception as e:  # noqa: BLE001 - kept on the story, never raised past it
        error = error_status(e)
    # retried after the except block: the error's traceback holds the failed call's frames and what they
    # allocated (a forward pass's activations on the GPU that ran out of memory) until the block ends
    if len(items) > 1:
        warn_one_at_a_time(error)
        out: list[StoryLabels] = []
        for k, item in enumerate(items):
            if (k == len(items) - 1 and all(lab.status.startswith(ERROR_PREFIX) for lab in out)
                    and not _labels_probe(label, probe)):
                return out + label([item])  # raises where this one fails too
            out += label_or_keep(label, [item], story)
        return out
    if probe is not None and not _labels_probe(label, probe):
        # a batch of one (``--batch-size 1``) whose story fails where the probe fails too: the machine's fault,
        # raised where it fails again (every story was kept as "labeller error", exit 0, and never retried)
        return label(items)
    return [failed(story(items[0]), error)]


def _labels_probe(label: Callable[[Sequence[Any]], list[StoryLabels]], probe: Any) -> bool:
    """Whether ``label`` labels the item ``probe`` (None: no probe, so no)."""
    if probe is None:
        return False
    try:
        return all(lab.status == "ok" for lab in label([probe]))
    except Exception:  # noqa: BLE001 - the labeller's failure, which the caller raises on a story
        return False


def _as_asked(story: StoryInput, labels: StoryLabels) -> StoryLabels:
    """``labels``, where they are the story's and hold each of its roles once, in the story's role order (a
    labeller's object-first list is put in it); else the story kept failed with what differs (a labeller that
    left a role out dropped that character from every table, silently, and one that added a role stopped the
    label stage with a KeyError)."""
    want = [r.key for r in story.roles]
    got = [c.role for c in labels.characters]
    if labels.story_id == story.story_id and sorted(got) == sorted(want):
        if got == want:
            return labels
        return replace(labels, characters=tuple(sorted(labels.characters, key=lambda c: want.index(c.role))))
    what = (f"the labels of story {labels.story_id!r}" if labels.story_id != story.story_id else
            f"roles {', '.join(got) or 'none'} for {', '.join(want)}")
    return failed(story, f"{ERROR_PREFIX}the labeller returned {what}")


def _check_stories(stories: Sequence[Any], start: int) -> None:
    """A DataError naming the first of ``stories`` (numbered from ``start`` in the caller's input) that is no
    ``StoryInput``."""
    for i, s in enumerate(stories, start):
        if not isinstance(s, StoryInput):
            raise DataError(f"story #{i}: expected a StoryInput, got {type(s).__name__}")


def _windows(stories: Iterable[Any], size: int) -> Iterator[list[StoryInput]]:
    """``stories`` in lists of ``size`` (the last may be shorter), each checked as it is taken: a stream of a
    million stories is pulled one window at a time, never listed whole."""
    it = iter(stories)
    start = 0
    while chunk := list(islice(it, size)):
        _check_stories(chunk, start)
        yield chunk
        start += len(chunk)


def _stream_to_label(first: Sequence[StoryInput], window: int, total: int | None) -> int | None:
    """How many stories with text a stream holds, for ``Labeller._label_batches``, from its ``first`` window:
    exact where the stream ended within it; else that window's and the rest of the caller's ``total`` (the
    stories after it with no text counted too), or None (not known) without one."""
    with_text = sum(map(_has_text, first))
    if len(first) < window:
        return with_text
    return None if total is None else with_text + max(total - len(first), 0)


class Labeller(abc.ABC):
    """Base class of every labeller; subclasses implement ``_label_batch``.

    Registered by name in ``harness.labelling.LABELLERS``.
    """

    name: str = "base"
    #: Batch size used when the caller passes none.
    default_batch_size: int = 32
    #: Batches per window of ``iter_label``: stories are sorted by length within a window, and its labels come
    #: out when the whole window is done. Large windows cut padding; a slow labeller keeps them small, so that
    #: a killed run (``harness label label``, the label stage) loses little work.
    window_batches: int = 64

    @abc.abstractmethod
    def _label_batch(self, stories: Sequence[StoryInput]) -> list[StoryLabels]:
        """Label non-empty stories, returning one result per input in the same order."""

    def _label_batches(self, batches: Iterable[Sequence[StoryInput]],
                       stories: int | None) -> Iterator[list[StoryLabels]]:
        """Label batches in order (``stories``: how many stories they hold in all; None where not known, a
        stream longer than a window whose caller gave no total); a labeller may override this to overlap them.
        ``batches`` is lazy: take a batch only when ready to work on it."""
        for b in batches:
            yield self._label_or_keep(b)

    def _label_or_keep(self, stories: Sequence[StoryInput]) -> list[StoryLabels]:
        """``_label_batch``, with ``label_or_keep``'s guard."""
        return label_or_keep(self._label_batch, stories, probe=probe_story(stories[0].roles) if stories else None)

    def info(self) -> dict[str, Any]:
        """What the run manifest records about this labeller (name, weights, versions)."""
        return {"labeller": self.name}

    def label(
        self,
        stories: StoryInput | Sequence[StoryInput],
        *,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> list[StoryLabels] | StoryLabels:
        """Label stories; results come back in the caller's order.

        Args:
            stories: one ``StoryInput`` (gives one ``StoryLabels``) or a sequence of them.
            batch_size: stories per batch; stories are sorted by length first to cut padding.
            progress: show a progress bar.
        """
        single = isinstance(stories, StoryInput)
        items = [stories] if single else list(stories)
        out = list(self.iter_label(items, batch_size=batch_size, progress=progress))
        return out[0] if single else out

    def iter_label(
        self, stories: Iterable[StoryInput], *, batch_size: int | None = None, progress: bool = False,
        total: int | None = None,
    ) -> Iterator[StoryLabels]:
        """Like ``label`` but yields results in the caller's order as soon as they are ready.

        The stories are sorted by length inside windows of ``window_batches`` batches, so memory stays flat
        on a corpus of any size while padding stays small. An iterable that is not a sequence (a generator) is
        taken one window at a time, never listed whole: ``total``, how many stories it holds, sizes the progress
        bar and tells a pipelined labeller how many are coming (a sequence gives its own length).
        """
        bs = self.default_batch_size if batch_size is None else batch_size
        if bs < 1:
            raise DataError(f"batch_size must be >= 1, got {bs}")
        window = bs * self.window_batches
        if isinstance(stories, Sequence):  # checked whole before any story is labelled, and sliced into windows
            _check_stories(stories, 0)
            chunks: Iterator[Sequence[StoryInput]] = (stories[start:start + window]
                                                      for start in range(0, len(stories), window))
            total, labelled = len(stories), sum(map(_has_text, stories))
        else:  # checked a window at a time; the first, taken now, says how many stories the stream holds
            chunks = _windows(stories, window)
            first = next(chunks, [])
            labelled = _stream_to_label(first, window, total)
            chunks = chain([first] if first else [], chunks)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, desc=f"label ({self.name})", unit="story")
        # windows waiting for their labels, oldest first: [stories, results, batches still to label];
        # the batches of every window stream to _label_batches, so a pipelined labeller never drains
        windows: deque[list] = deque()
        owners: deque[tuple[list, list[int]]] = deque()  # per batch handed out: its window and positions

        def batches() -> Iterator[list[StoryInput]]:
            for chunk in chunks:
                results: list[StoryLabels | None] = [None] * len(chunk)
                todo = []
                for j, s in enumerate(chunk):
                    if not _has_text(s):
                        results[j] = failed(s, EMPTY_STORY)
                    else:
                        todo.append(j)
                todo.sort(key=lambda j: len(chunk[j].text), reverse=True)
                groups = [todo[b:b + bs] for b in range(0, len(todo), bs)]
                win = [chunk, results, len(groups)]
                windows.append(win)
                if bar is not None:
                    bar.update(len(chunk) - len(todo))
                for ix in groups:
                    owners.append((win, ix))
                    yield [chunk[j] for j in ix]

        def finished() -> Iterator[StoryLabels]:
            while windows and windows[0][2] == 0:
                yield from windows.popleft()[1]

        try:
            for labels in self._label_batches(batches(), labelled):
                win, idx = owners.popleft()
                if len(labels) != len(idx):
                    raise RuntimeError(f"{self.name} labeller returned {len(labels)} results "
                                       f"for {len(idx)} stories")
                for j, lab in zip(idx, labels):
                    win[1][j] = _as_asked(win[0][j], lab)
                win[2] -= 1
                if bar is not None:
                    bar.update(len(idx))
                yield from finished()
            yield from finished()  # windows with no story to label
            if windows or owners:
                raise RuntimeError(f"{self.name} labeller stopped before labelling every batch")
        finally:
            if bar is not None:
                bar.close()

    def start_workers(self, stories: int | None = None) -> float:
        """Start any worker processes that labelling ``stories`` stories (None: any number) would use,
        now rather than on first use; seconds it took (0.0: none)."""
        return 0.0

    def close(self) -> None:
        """Release resources (a generation backend, worker threads)."""

    def __enter__(self) -> Labeller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["CharacterLabel", "EMPTY_STORY", "Labeller", "OK", "ROLE_KEYS", "RoleSpec", "StoryInput", "StoryLabels",
           "alpha_tokens", "dedupe", "error_status", "failed", "in_story", "label_or_keep", "valid_text",
           "warn_one_at_a_time"]
