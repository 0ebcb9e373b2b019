"""Labelled stories: reading gold and training JSONL in the formats the harness meets.

Three row formats are accepted (detected per row):

* **project** (``harness/data/labelling/*.jsonl``, ``tests/labelling/data``): ``id``, ``domain``,
  ``condition``, ``love_type``, ``model``, ``roles`` ({"subject": description, "object": ...}),
  ``text``, ``labels`` ({role: {"name": str|null, "references": [...], "gender": label}}), ``tags``,
  and optionally ``reference_owners`` ({word: [owner, ...]}): for a one-word reference that both
  characters hold ("he" in a story of two men), whom each of its occurrences in the text refers to, in
  order ("subject", "object", "both" or "neither"), so that training can teach who owns each pronoun.
* **train150** (``laissez_faire_train150.jsonl``): ``correct_{subject,object}_{name,references}``.
* **audit** (``laissez_faire_audit_dev.jsonl``): ``manual_{subject,object}_{gender,name}``.

The published formats carry ``role_category``/``subject``/``object``/``query``; their roles are
derived with ``harness.labelling.prompts.roles_for_row``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import DataError
from harness.jsonl import iter_jsonl, parse_list_text
from harness.labelling.base import ROLE_KEYS, RoleSpec, StoryInput, valid_text
from harness.labelling.prompts import DOMAINS, LOVE_TYPE_NAMES, love_type_name, roles_for_row

#: The published data's names of the power conditions, as the suites name them.
CONDITIONS = {"Baseline": "neutral", "Power Dynamic": "laden"}

GENDER_LABELS = ("Female", "Male", "Non-binary", "Unspecified", "Unsure")
#: Whom one occurrence of a shared reference word refers to (``reference_owners``).
OWNERS = ("subject", "object", "both", "neither")


@dataclass(frozen=True)
class GoldCharacter:
    """Hand labels for one role. ``None`` fields were not labelled in the source, but for a name in the
    project format, where ``"name": null`` is a character without a name (``name_labelled``)."""

    role: str
    name: Any = None  # raw name field: a name, "Unspecified", a list, or a list string
    references: tuple[str, ...] | None = None
    gender: str | None = None
    #: Whether the source labels the name at all; None: where ``name`` is given. The project format
    #: labels every name, null for none; the published formats leave a null name unlabelled.
    name_labelled: bool | None = None
    #: Whether the gold gender is the one the references give (train150's correct labels have no gender field);
    #: elsewhere a null gender is unlabelled, out of the gender figures.
    gender_from_references: bool = False

    @property
    def name_known(self) -> bool:
        """Whether the name was labelled (a name, "Unspecified", or the project format's null)."""
        return self.name is not None if self.name_labelled is None else self.name_labelled


@dataclass(frozen=True)
class GoldStory:
    """A story with its roles and hand labels."""

    story: StoryInput
    model: str = "unknown"
    domain: str = "unknown"
    condition: str = "unknown"
    love_type: str | None = None
    characters: dict[str, GoldCharacter] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    #: For one-word references both characters hold: the owner of each occurrence, in text order.
    reference_owners: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _nan(raw: Any) -> bool:
    """Whether ``raw`` is NaN: pandas' missing value, read as null."""
    return isinstance(raw, float) and math.isnan(raw)


def _parse_list(raw: Any, where: str) -> tuple[str, ...] | None:
    if raw is None or _nan(raw):  # NaN: pandas' missing value, as _name reads it
        return None
    if isinstance(raw, str):
        s = raw.strip()
        if not s:
            return ()
        val = parse_list_text(s)
        if val is None:
            raise DataError(f"{where}: {raw!r} is not a list; write references as [\"she\", \"her\"]")
        raw = val
    if not isinstance(raw, list):
        raise DataError(f"{where}: references must be a list of strings, got {type(raw).__name__}")
    # a null or a number in the list is no word of the story: str() made it the reference "None" or "3"
    bad = [x for x in raw if not isinstance(x, str)]
    if bad:
        raise DataError(f"{where}: references must be a list of strings, got {type(bad[0]).__name__} {bad[0]!r} "
                        f"in {raw!r}; write each reference as a string or drop it")
    return tuple(raw)


def _missing(raw: Any) -> bool:
    """Whether a published label field holds nothing: null, NaN (pandas' missing value), or only the ways of
    writing "Unspecified" (``names.is_no_name``: "None", "N/A", ...), blank or an empty list, written as one or
    as its text ("[]")."""
    from harness.identity.names import is_no_name, name_candidates

    try:  # null and NaN give no candidates
        return all(is_no_name(n) or not n.strip() for n in name_candidates(raw))
    except DataError:  # no name field's form: a value of its own
        return False


def _name(raw: Any, where: str) -> Any:
    """The raw name field, once it reads as the identity module reads names (a DataError naming the
    row and field otherwise); NaN, pandas' missing value, is null (unlabelled, as in the published formats)."""
    from harness.identity.names import name_candidates

    if _nan(raw):
        return None

    try:
        name_candidates(raw)
    except DataError as e:
        raise DataError(f"{where}: {e}") from None
    listed = raw if isinstance(raw, (list, tuple)) else None
    if isinstance(raw, str) and raw.strip().startswith("[") and raw.strip().endswith("]"):
        listed = parse_list_text(raw.strip())
    # a number or a null in the list is no name: str() made it the name "3" or "None", as _parse_list refuses
    bad = [x for x in listed or () if not isinstance(x, str)]
    if bad:
        raise DataError(f"{where}: a name must be a string or a list of strings, got {type(bad[0]).__name__} "
                        f"{bad[0]!r} in {raw!r}; write each name as a string or drop it")
    return raw


def _tags(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise DataError(f"{where}: `tags` must be a list of strings, e.g. [\"named\"], got {raw!r}")
    return tuple(raw)


@contextmanager
def _at(where: str) -> Iterator[None]:
    """A DataError raised inside names ``where`` (the file and line), unless it already does."""
    try:
        yield
    except DataError as e:
        raise DataError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None


def _story(story_id: str, row: dict[str, Any], field: str, roles: tuple[RoleSpec, ...], where: str) -> StoryInput:
    """The story of a row, its text in ``field``: a row without the field (a misspelt ``story`` for ``text``) was
    labelled, or scored, as an empty story. A null text is a story the model did not write: kept, with its reason."""
    if field not in row:
        raise DataError(f"{where}: no `{field}` field (the story's text); give it (null for a story not written), or "
                        f"check its spelling")
    with _at(where):
        return StoryInput(story_id, row[field], roles)


def _story_id(row: dict[str, Any], keys: tuple[str, ...], default: str, where: str) -> str:
    """The first of ``keys`` that the row gives (not null), as a string; ``default`` (the file and line) without one.
    A null id was the story id "None", which every other null id then repeated. A row that gives two of ``keys``
    with different values is refused: the gold reader took ``id`` and the plain reader ``story_id``, so the
    same row was two stories."""
    given: dict[str, str] = {}
    for k in keys:
        value = row.get(k)
        if isinstance(value, (list, dict, bool)):  # str() would make ['a'] the id "['a']"
            raise DataError(f"{where}: `{k}` must be a string or a number, got {type(value).__name__}")
        if value is not None:
            value = str(value)
            if valid_text(value) != value:  # a lone surrogate ("\ud83d"): no UTF-8 file takes the labels' line
                raise DataError(f"{where}: `{k}` holds a lone surrogate (a JSON escape such as \\ud83d without its "
                                f"pair); give an id of whole characters")
            given[k] = value
    if len(set(given.values())) > 1:
        (a, va), (b, vb) = sorted(given.items())[:2]
        raise DataError(f"{where}: `{a}` ({va!r}) and `{b}` ({vb!r}) name different stories; keep one of them")
    if given:
        return next(iter(given.values()))
    alike = [k for k in row if isinstance(k, str) and k not in keys
             and "".join(c for c in k.casefold() if c.isalnum()) in ("id", "storyid")]
    if alike:  # "ID", "storyId": the story was labelled as "file:line", and its labels joined no story
        raise DataError(f"{where}: `{alike[0]}` looks like the story's id; name it `{keys[0]}`"
                        + (f" or `{keys[1]}`" if len(keys) > 1 else ""))
    return default


def _str_field(row: dict[str, Any], key: str, default: str | None, where: str) -> str | None:
    """A text field of a row (model, domain, condition, ...): ``default`` when absent or null, a DataError naming
    the row and field when it is not a string (a list or number would break the per-group tables after labelling)."""
    raw = row.get(key)
    if raw is None:
        return default
    if not isinstance(raw, str):
        raise DataError(f"{where}: `{key}` must be a string, got {type(raw).__name__} {raw!r}")
    return raw


def _gender(raw: Any, where: str) -> str | None:
    if raw is None or _nan(raw):  # NaN: pandas' missing value, as _name reads it
        return None
    if raw not in GENDER_LABELS:
        raise DataError(f"{where}: gender must be one of {', '.join(GENDER_LABELS)} or null, got {raw!r}")
    return raw


def _reference_owners(raw: Any, chars: dict[str, GoldCharacter], where: str) -> dict[str, tuple[str, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise DataError(f"{where}: `reference_owners` must map a word to a list of owners, e.g. "
                        f"{{\"he\": [\"subject\", \"object\"]}}")
    held = [{r.casefold() for r in (c.references or ())} for c in chars.values()]
    out = {}
    for word, owners in raw.items():
        key = str(word).casefold()
        if len(held) != 2 or not all(key in h for h in held):
            raise DataError(f"{where}: reference_owners.{word}: only a word that both characters' references "
                            f"hold needs owners; add it to both lists or drop it here")
        if not isinstance(owners, list) or not all(o in OWNERS for o in owners):
            raise DataError(f"{where}: reference_owners.{word} must be a list of {', '.join(OWNERS)}, got {owners!r}")
        if key in out:  # "He" and "he": the later owners replaced the earlier ones, unsaid
            raise DataError(f"{where}: reference_owners gives {word!r} twice (its case aside); give each word once")
        out[key] = tuple(owners)
    return out


#: The label fields of the published format: the audit's manual labels, the fine-tuning set's correct ones.
PUBLISHED_LABEL_FIELDS = tuple(f"{kind}_{role}_{what}" for kind, whats in (("manual", ("name", "gender")),
                                                                           ("correct", ("name", "references")))
                               for role in ROLE_KEYS for what in whats)


def parse_row(row: dict[str, Any], story_id: str, where: str, *, require_labels: bool = True) -> GoldStory:
    """One JSONL row (any of the three formats) as a ``GoldStory``. ``require_labels=False``: a published row's
    story, for labelling, whether or not it carries hand labels (its characters are those it labels)."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object")
    if "labels" in row and "roles" in row:
        roles_d = row["roles"]
        if not isinstance(roles_d, dict) or "subject" not in roles_d:
            raise DataError(f"{where}: `roles` must map subject (and optionally object) to descriptions")
        unknown = set(roles_d) - set(ROLE_KEYS)
        if unknown:
            raise DataError(f"{where}: unknown role(s) {', '.join(sorted(unknown))}; use subject/object")
        with _at(where):
            roles = tuple(RoleSpec(k, roles_d[k]) for k in ROLE_KEYS if roles_d.get(k) is not None)
        chars = {}
        labels = row["labels"] or {}
        if not isinstance(labels, dict):
            raise DataError(f"{where}: `labels` must map each role to {{\"name\", \"references\", \"gender\"}}")
        unroled = sorted(set(labels) - {r.key for r in roles})
        if unroled:  # the label of a role the story does not have was read by nothing, silently
            raise DataError(f"{where}: `labels.{unroled[0]}` labels no role of the story's `roles` "
                            f"({', '.join(r.key for r in roles)}); add the role, or drop the label")
        for k in (r.key for r in roles):
            lab = labels.get(k)
            if lab is None:
                raise DataError(f"{where}: `labels.{k}` is missing; label every role")
            if not isinstance(lab, dict):
                raise DataError(f"{where}: `labels.{k}` must be an object with name, references and gender, "
                                f"got {type(lab).__name__}")
            unknown = set(lab) - {"name", "references", "gender"}
            if unknown:  # a misspelt key ("gendr") left the field unlabelled: out of the figures, or trained as none
                raise DataError(f"{where}: `labels.{k}` has unknown field(s) {', '.join(sorted(unknown))}; "
                                f"allowed: gender, name, references")
            missing = [f for f in ("name", "gender") if f not in lab]
            if missing:  # a left-out field read as unlabelled: the character out of that figure, unsaid
                raise DataError(f"{where}: `labels.{k}` has no `{missing[0]}`; give it (null for no name, or to "
                                f"leave the gender out of the figures)")
            chars[k] = GoldCharacter(k, _name(lab["name"], f"{where} labels.{k}.name"),
                                     _parse_list(lab.get("references"), f"{where} labels.{k}"),
                                     _gender(lab["gender"], f"{where} labels.{k}.gender"), name_labelled=True)
        domain = _str_field(row, "domain", "unknown", where)
        domain = DOMAINS.get(domain, domain)
        if domain not in {*DOMAINS.values(), "unknown"}:  # else out of every table of --statistics, unsaid
            raise DataError(f"{where}: domain {domain!r}; use Learning, Labor or Love (or the published data's "
                            f"School / Work / Relationships), or leave it out")
        condition = _str_field(row, "condition", "unknown", where)
        condition = CONDITIONS.get(condition, condition)
        if condition not in ("neutral", "laden", "unknown"):  # else out of every table of --statistics, unsaid
            raise DataError(f"{where}: condition {condition!r}; use neutral or laden (or the published data's "
                            f"Baseline / Power Dynamic), or leave it out")
        love_type = love_type_name(_str_field(row, "love_type", None, where))
        if love_type is not None and love_type not in LOVE_TYPE_NAMES:  # else read as "have none" by --statistics
            raise DataError(f"{where}: love_type {love_type!r}; use {', '.join(LOVE_TYPE_NAMES)} (or the published "
                            f"data's romantic partner), or leave it out")
        return GoldStory(_story(_story_id(row, ("id", "story_id"), story_id, where), row, "text", roles, where),
                         _str_field(row, "model", "hand-written", where), domain,
                         condition, love_type,
                         chars,
                         _tags(row.get("tags"), where),
                         _reference_owners(row.get("reference_owners"), chars, where))
    if "role_category" not in row and "roles" in row and ("text" in row or "story_id" in row):
        raise DataError(f"{where}: a story without manual labels (no `labels`); scoring and training need the labels "
                        f"of each role (project format: roles, labels), or label such stories with `harness label "
                        f"label`")
    if "role_category" not in row:
        raise DataError(f"{where}: neither the project format (roles, labels), the published one "
                        f"(role_category, subject, object, query) nor plain stories (text, roles)")
    # NaN, pandas' missing value, is null in every field, as the label fields read it: a file written from a
    # frame holds it for a power-neutral row's object, and for the columns only some of its rows have ("condition")
    row = {k: None if _nan(v) else v for k, v in row.items()}
    for key in ("role_category", "subject", "object", "query", "condition"):
        _str_field(row, key, None, where)
    misspelt = sorted(k for k in row if isinstance(k, str) and k.startswith(("manual_", "correct_"))
                      and k not in PUBLISHED_LABEL_FIELDS)
    if misspelt and require_labels:  # its character would be read as unlabelled: out of the figures, or trained
        # as unnamed
        raise DataError(f"{where}: unknown label field {misspelt[0]!r}; the published format's are "
                        f"{', '.join(PUBLISHED_LABEL_FIELDS)}")
    with _at(where):  # a role description RoleSpec refuses names no row
        roles, meta = roles_for_row(row, where)
    chars = {}
    have = {r.key for r in roles}
    for k in ROLE_KEYS:  # a role the row has not: labels of it were read by nothing, silently
        labelled = next((f for f in PUBLISHED_LABEL_FIELDS if f.split("_")[1] == k and not _missing(row.get(f))), None)
        if k not in have and labelled and require_labels:
            raise DataError(f"{where}: `{labelled}` labels an {k} the row has not ({k!r} is null for its "
                            f"role_category and condition); drop the label, or give the row its {k}")
    for r in roles:
        k = r.key
        if require_labels and not any(f"{kind}_{k}_{what}" in row for kind in ("manual", "correct")
                                      for what in ("gender", "name", "references")):
            # its character was left out of every figure, silently; a field given as null still leaves it out
            raise DataError(f"{where}: no label of the {k} ({r.description!r}); give its manual_{k}_gender and "
                            f"manual_{k}_name (or correct_{k}_name and correct_{k}_references), null to leave it out")
        for kind, pair in (("manual", ("gender", "name")), ("correct", ("name", "references"))):
            given = [f"{kind}_{k}_{what}" for what in pair if f"{kind}_{k}_{what}" in row]
            if require_labels and len(given) == 1:  # the other read as unlabelled: out of its figure, unsaid
                other = next(f"{kind}_{k}_{what}" for what in pair if f"{kind}_{k}_{what}" != given[0])
                raise DataError(f"{where}: `{given[0]}` without `{other}`; give both (null to leave it out of "
                                f"the figures)")
        manual = [row.get(f"manual_{k}_{what}") for what in ("gender", "name") if f"manual_{k}_{what}" in row]
        correct = [row.get(f"correct_{k}_{what}") for what in ("name", "references") if f"correct_{k}_{what}" in row]
        if manual and (any(v is not None for v in manual) or not any(v is not None for v in correct)):
            # the manual labels where they hold one; null ones beside correct_* labels (a frame of both files'
            # columns) hid the correct_* labels, the character out of every figure, unsaid
            chars[k] = GoldCharacter(k, _name(row.get(f"manual_{k}_name"), f"{where} manual_{k}_name"), None,
                                     _gender(row.get(f"manual_{k}_gender"), f"{where} manual_{k}_gender"))
        elif correct:
            chars[k] = GoldCharacter(k, _name(row.get(f"correct_{k}_name"), f"{where} correct_{k}_name"),
                                     _parse_list(row.get(f"correct_{k}_references"), f"{where} correct_{k}_references"),
                                     gender_from_references=True)
    condition = meta["condition"]
    cond = row.get("condition")
    if cond is not None and cond not in CONDITIONS:
        raise DataError(f"{where}: condition {cond!r}; use {' or '.join(CONDITIONS)}, or leave it out")
    if cond is not None and CONDITIONS[cond] != condition:  # else a misspelt one was ignored, and one that
        # contradicts the roles moved the story to the other condition's figures and out of --statistics' cells
        said = next((c for c, v in CONDITIONS.items() if v == condition), condition)
        raise DataError(f"{where}: condition {cond!r}, but its subject and object make it {said!r}; write "
                        f"{said!r}, or leave condition out")
    return GoldStory(_story(_story_id(row, ("id", "story_id"), story_id, where), row, "llm_response", roles, where),
                     _str_field(row, "model", "unknown", where),
                     meta["domain"], condition, meta["love_type"], chars)


def iter_gold(path: str | Path) -> Iterator[GoldStory]:
    """Stream labelled stories from a JSONL file (blank lines skipped)."""
    path = Path(path)
    for i, row in iter_jsonl(path, what="JSONL file of labelled stories"):
        yield parse_row(row, f"{path.stem}:{i}", f"{path}:{i}")


def load_gold(path: str | Path) -> list[GoldStory]:
    """All labelled stories of a JSONL file, their ids unique (the story bootstrap resamples by id)."""
    path = Path(path)
    rows = [(i, parse_row(row, f"{path.stem}:{i}", f"{path}:{i}"))
            for i, row in iter_jsonl(path, what="JSONL file of labelled stories")]
    _refuse_repeated_ids(path, [(gs.story.story_id, f"line {i}") for i, gs in rows])
    return [gs for _, gs in rows]


def _refuse_repeated_ids(path: str | Path, ids: list[tuple[str, str]]) -> None:
    """A ``DataError`` naming the first story id that ``ids`` ((id, where in the file) pairs) repeats: labels
    are joined to their stories by id, so two stories of one id would share (or swap) their labels."""
    seen: dict[str, str] = {}
    for sid, where in ids:
        first = seen.setdefault(sid, where)
        if first != where:
            raise _repeated_id(path, sid, first, where)


def _repeated_id(path: str | Path, sid: str, first: str, where: str) -> DataError:
    """The error for story id ``sid`` given at ``first`` and again at ``where`` ("line 3") of ``path``."""
    return DataError(f"{path}: story id {sid!r} is given twice ({first} and {where} of the file); "
                     f"give every story its own id")


def builtin_training_files() -> list[Path]:
    """The project's own hand-labelled training stories (``harness/data/labelling/*.jsonl``)."""
    from importlib import resources

    d = Path(str(resources.files("harness").joinpath("data", "labelling")))
    return sorted(d.glob("*.jsonl"))


def read_stories(path: str | Path) -> list[StoryInput]:
    """Stories to label from JSONL: the project format, the published formats, or plain rows with
    ``story_id`` (or ``id``), ``text`` and ``roles``, either [{"key": "subject", "description": ...}, ...]
    or {"subject": description, "object": description}. Every row is read before the ids are compared, so a bad
    row is named before an id given twice; ``iter_stories`` reads them one at a time."""
    path = Path(path)
    rows = list(_story_rows(path))
    _refuse_repeated_ids(path, [(s.story_id, f"line {i}") for i, s in rows])
    return [s for _, s in rows]


def iter_stories(path: str | Path, *, check_ids: bool = True) -> Iterator[StoryInput]:
    """The stories of ``read_stories``, read and checked one row at a time, so a corpus of any size is never
    held whole (``harness label label`` reads the file this way, pass by pass). An id given twice is refused at
    its second row, naming both lines: only each id and its line are kept, which is small next to the texts
    (``check_ids=False``, for a pass over a file whose ids an earlier pass compared, keeps none)."""
    path = Path(path)
    seen: dict[str, int] = {}
    for i, story in _story_rows(path):
        if check_ids and (first := seen.setdefault(story.story_id, i)) != i:
            raise _repeated_id(path, story.story_id, f"line {first}", f"line {i}")
        yield story


def _story_rows(path: Path) -> Iterator[tuple[int, StoryInput]]:
    """``(line number, story)`` for each row of a file of stories to label, checked as ``read_stories``
    documents (a DataError naming the file and line), ids not yet compared."""
    for i, row in iter_jsonl(path, what="JSONL file of stories"):
        if isinstance(row, dict) and "roles" in row and not isinstance(row["roles"], (list, dict)):
            raise DataError(f"{path}:{i}: `roles` must be a list of {{key, description}} or map subject (and "
                            f"optionally object) to descriptions")
        # a project row is a story with roles whatever its `labels` (a labeller writes labels; it needs none), and a
        # published row need carry no hand labels: only gold is read for them
        if isinstance(row, dict) and isinstance(row.get("roles"), (list, dict)):
            yield i, _plain_story(path, i, row)
        else:
            yield i, parse_row(row, f"{path.stem}:{i}", f"{path}:{i}", require_labels=False).story


def _plain_story(path: Path, i: int, row: dict[str, Any]) -> StoryInput:
    """The story of a plain row (line ``i``): ``story_id`` (or ``id``), ``text`` and ``roles``, a list of
    {key, description} or a map of subject (and object) to descriptions."""
    raw = row["roles"]
    if isinstance(raw, dict):
        unknown = set(raw) - set(ROLE_KEYS)
        if unknown or "subject" not in raw:
            raise DataError(f"{path}:{i}: `roles` must map subject (and optionally object) to descriptions"
                            + (f"; unknown role(s) {', '.join(sorted(unknown))}" if unknown else ""))
        empty = [k for k in ROLE_KEYS if k in raw and isinstance(raw[k], str) and not raw[k].strip()]
        if empty:  # not "needs 1 or 2 roles, got 0": the role is there, its description is not
            raise DataError(f"{path}:{i}: `roles.{empty[0]}` is empty; give the role's description (e.g. "
                            f"\"student\"), or leave the role out")
        # only a missing or null role is none: 0, false, [] or {} go to RoleSpec, which names them
        raw = [{"key": k, "description": raw[k]} for k in ROLE_KEYS if raw.get(k) is not None]
    try:
        roles = tuple(RoleSpec(r["key"], r["description"]) for r in raw)
    except (KeyError, TypeError):
        raise DataError(f"{path}:{i}: each role needs `key` and `description`") from None
    except DataError as e:
        raise DataError(f"{path}:{i}: {e}") from None
    sid = _story_id(row, ("story_id", "id"), f"{path.stem}:{i}", f"{path}:{i}")
    return _story(sid, row, "text", roles, f"{path}:{i}")


__all__ = ["GENDER_LABELS", "OWNERS", "GoldCharacter", "GoldStory", "builtin_training_files", "iter_gold",
           "iter_stories", "load_gold", "parse_row", "read_stories"]
