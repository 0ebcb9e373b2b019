"""Training the encoder labeller (``train_encoder``, ``harness label train``).

Gold labels become per-word targets: every occurrence of a gold reference word is marked
(``project_labels``), since the published references are word lists, not spans; where a story says
whom each occurrence of a shared word refers to, only its owner is (``occurrence_targets``). Each
epoch augments the stories: first names swapped for names of many origins (``_swap_names``) and, in
a share of them, every binary gendered word flipped (``flip_gender``). ``train_soup`` trains one
encoder per seed from one head start and saves the mean of their weights (``average_encoders``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import json
import math
import os
import random
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.errors import BackendError, ConfigError, DataError
from harness.labelling.base import NAME_TITLES
from harness.labelling.bases import DEFAULT_BASE, base_encoder, base_model_path
from harness.labelling.data import GoldStory, load_gold
from harness.labelling.encoder import (DEFAULT_NAME, SLOTS, _build_model, _collate, _encode, _torch, check_threads,
                                       default_device, default_model_dir, read_model_meta)
from harness.labelling.words import (EMPHASIS_MARKS, find_all, fold_word, her_is_possessive, is_word, phrase_tokens,
                                     split_words, starts_capitalised)
from harness.store import atomic_write_text

#: First names swapped into training stories (augmentation), drawn from many origins.
_AUG_NAMES = ("Aaliyah", "Adebayo", "Aiko", "Alejandro", "Amara", "Anjali", "Arjun", "Beatriz", "Bilal", "Camila",
              "Chen", "Dakota", "Darius", "Deja", "Diego", "Elif", "Emeka", "Esperanza", "Farah", "Hana", "Hiroshi",
              "Imani", "Ivan", "Jamal", "Jun", "Kai", "Kalani", "Keanu", "Laila", "Leilani", "Luis", "Mai", "Malik",
              "Mateo", "Mei", "Nadia", "Nia", "Omar", "Priya", "Quinn", "Rahul", "Rosa", "Rowan", "Sakura", "Santiago",
              "Sora", "Tariq", "Thandiwe", "Tomas", "Wei", "Ximena", "Yara", "Yusuf", "Zainab", "Zeynep", "Ezra",
              "Morgan", "Riley", "Avery", "Harper", "Noah", "Ethan", "Olivia", "Sophia", "Liam", "Grace", "Owen")


def project_labels(words: Sequence[str], slot_names: dict[str, Any], slot_refs: dict[str, Sequence[str]]
                   ) -> list[list[float]]:
    """Word-level targets (one row of 4 per word) from a gold name and reference list per role.

    Every occurrence of a reference (case-insensitive, as a word sequence) is marked; for names the
    full name and each of its non-title words of two letters or more, each where the story writes it with a
    capital ("Rose", not the verb "rose"; case is not compared after the first letter: "ROSE" is marked).
    """
    from harness.identity.names import select_name

    alnum_idx = [i for i, w in enumerate(words) if is_word(w)]
    alnum = [words[i] for i in alnum_idx]
    alnum_low = [fold_word(w) for w in alnum]
    targets = [[0.0] * 4 for _ in words]
    for r, role in enumerate(("subject", "object")):
        raw = slot_names.get(role)
        name = select_name(raw) if raw is not None else None
        if name:
            for j in _name_marks(alnum, alnum_low, name):
                targets[alnum_idx[j]][2 * r] = 1.0
        for ref in slot_refs.get(role) or ():
            for j in _reference_marks(alnum_low, ref):
                targets[alnum_idx[j]][2 * r + 1] = 1.0
    return targets


def _name_marks(words: Sequence[str], low: Sequence[str], name: str) -> set[int]:
    """The words (indices into ``words``, words only; ``low`` folded) a name marks: its whole run where the first
    word is written with a capital ("she rose" is not the name "Rose"), and each of its non-title words of two
    letters or more written with one."""
    toks = phrase_tokens(name)
    marks = {start + k for start in find_all(low, toks) if starts_capitalised(words[start]) for k in range(len(toks))}
    for word in name.split():
        # each word of the name as the story writes it alone: "O'Brien" is the run o, 'brien, whose "O" is marked as
        # in the full name (phrase_tokens drops the last piece after an apostrophe); its letters, not its first
        # piece's, count towards the two ("O'Brien smiled" was taught as no one's name)
        run = [fold_word(w) for w, _, _ in split_words(word) if is_word(w)]
        kept = phrase_tokens(word)
        if not kept or kept[0] in NAME_TITLES or sum(c.isalpha() for c in word) < 2:
            continue
        marks |= {start + k for start in find_all(low, run) if starts_capitalised(words[start])
                  for k in range(len(kept))}
    return marks


def _reference_marks(low: Sequence[str], ref: str) -> set[int]:
    """The words (indices into the folded words ``low``) a reference marks: every occurrence, any case."""
    toks = phrase_tokens(ref)
    return {start + k for start in find_all(low, toks) for k in range(len(toks))}


def _token_targets(batch: Sequence[tuple[Any, list[list[float]], list[list[float]] | None]], length: int
                   ) -> tuple[Any, Any]:
    """A batch's word-level targets and loss weights placed on each word's first token (float32 arrays of
    shape (stories, length, slots)); tokens that start no word, and words cut off by truncation, weigh 0."""
    import numpy as np

    target = np.zeros((len(batch), length, len(SLOTS)), dtype=np.float32)
    mask = np.zeros_like(target)
    for i, (e, tg, wt) in enumerate(batch):
        pos = np.asarray(e.word_token, dtype=np.int64)
        kept = pos >= 0
        if not kept.any():
            continue
        target[i, pos[kept]] = np.asarray(tg, dtype=np.float32)[kept]
        mask[i, pos[kept]] = np.asarray(wt, dtype=np.float32)[kept] if wt is not None else 1.0
    return target, mask


def _owner_ranks(gs: GoldStory) -> dict[int, str | None]:
    """For each of the story's ``_tracked`` words by rank, the hand-labelled owner of that occurrence
    where it is a shared reference word with ``reference_owners`` (else None). Ranks survive the gender
    flip and the name swap of training augmentation ("he" -> "she" keeps its rank); empty without owners."""
    if not gs.reference_owners:
        return {}
    words = [fold_word(w) for w, _, _ in split_words(gs.story.text) if is_word(w)]
    tracked = _tracked(gs)
    ranks: dict[int, str | None] = {}
    seen: dict[str, int] = {}
    for rank, w in enumerate(x for x in words if x in tracked):
        owners = gs.reference_owners.get(w)
        ranks[rank] = None
        if owners is None:
            continue
        k = seen.get(w, 0)
        seen[w] = k + 1
        if k < len(owners):
            ranks[rank] = owners[k]
    for w, owners in gs.reference_owners.items():
        if seen.get(w, 0) != len(owners):
            raise DataError(f"story {gs.story.story_id!r}: reference_owners.{w} lists {len(owners)} owner(s) but "
                            f"the text has {seen.get(w, 0)} occurrence(s) of {w!r}; give one owner per occurrence")
    return ranks


def _tracked(gs: GoldStory) -> frozenset[str]:
    return _GENDERED | frozenset(gs.reference_owners)


def occurrence_targets(words: Sequence[str], targets: list[list[float]], refs: dict[str, Sequence[str] | None],
                       ranks: dict[int, str | None], tracked: frozenset[str]) -> list[list[float]]:
    """Per-word loss weights (one row of 4, as ``project_labels``), correcting ``targets`` in place.

    A one-word reference that both characters hold ("he" in a story of two men) is marked for both at
    every occurrence by ``project_labels``. Where the story says whom each occurrence refers to
    (``ranks``, from ``_owner_ranks``) the occurrence is marked for its owner only; where it does not
    (the published stories label word types), the occurrence is left out of the reference loss of
    both characters, so that the tagger learns who owns each pronoun rather than to give a shared
    pronoun to both characters wherever it occurs.
    """
    low = [fold_word(w) for w in words]
    held = [{fold_word(r) for r in (refs.get(k) or ()) if len(phrase_tokens(r)) == 1} for k in ("subject", "object")]
    shared = held[0] & held[1]
    if len(ranks) != sum(1 for w in low if w in tracked):
        ranks = {}  # augmentation changed the tracked words (a name that is one of them): owners unknown
    weights = [[1.0] * 4 for _ in words]
    rank = -1
    for i, w in enumerate(low):
        if w in tracked:
            rank += 1
        if w not in shared:
            continue
        owner = ranks.get(rank) if w in tracked else None
        if owner is None:
            weights[i][1] = weights[i][3] = 0.0
        else:
            targets[i][1] = float(owner in ("subject", "both"))
            targets[i][3] = float(owner in ("object", "both"))
    return weights


def _written(name: str) -> str:
    """A pattern of ``name`` written as a word of its own, as ``split_words`` reads one: an underscore, markdown's
    emphasis, is no part of it (``\\b`` took "_Priya_" for a word of five letters and two underscores)."""
    return rf"(?<![^\W_]){re.escape(name)}(?![^\W_])"


def _swap_names(gs: GoldStory, rng: random.Random, text: str | None = None, *, flipped: bool = False
                ) -> tuple[str, dict[str, Any]]:
    """Replace each gold first name in text and labels by a random one (training augmentation).
    ``flipped``: ``text`` is the story after ``flip_gender``, so the names' titles are flipped as its
    words are ("Mrs. Reyes" -> "Mr. Reyes")."""
    from harness.identity.names import parse_first_name, select_name

    text = gs.story.text if text is None else text
    names: dict[str, Any] = {}
    # never a word the story already holds: the other character's name (or a third one's) would give two
    # characters one name, and project_labels would mark it as the name of both
    used: set[str] = {w.casefold() for w in re.findall(r"\w+", text)}
    swapped: dict[str, str] = {}  # first name as a label writes it -> its new name
    for k, ch in gs.characters.items():
        raw = select_name(ch.name) if ch.name is not None else None
        if raw and flipped:  # else the label keeps "Mrs." where the text says "Mr.", and the title is no name word
            raw = flip_gender(raw, {}, her_is_possessive)[0]
        names[k] = raw
        first = parse_first_name(raw) if raw else None
        if not first or rng.random() < 0.3 or first.casefold() in {o.casefold() for o in swapped}:
            continue
        written = _written(first)
        free = [n for n in _AUG_NAMES if n.casefold() not in used]
        # the name in any case the text or label writes it ("GREG", "Min-jun" of "Min-Jun", a label "emily carter"
        # of "Emily Carter"), capitalised in the text (not the word "hope" of a "Hope"), each in its own case: a
        # spelling left as it was kept the old name in the text while the label held the new one (taught as no one's)
        if not free or not any(starts_capitalised(m.group()) for m in re.finditer(written, text, re.I)):
            continue
        new = rng.choice(free)
        used.add(new.casefold())
        swapped[first] = new
        text = re.sub(written, lambda m: _match_case(new, m.group()) if starts_capitalised(m.group()) else m.group(),
                      text, flags=re.I)
    # every label that writes a swapped name, not only its own character's: two characters named "Jamie", or one's
    # first name the other's surname ("Jordan Lee", "Sam Jordan"), kept in the other label a word the text no longer
    # holds, so the epoch taught that character's name at no word
    for k, raw in names.items():
        for old, new in swapped.items():
            if raw:
                raw = re.sub(_written(old), lambda m, new=new: _match_case(new, m.group()), raw, flags=re.I)
        names[k] = raw
    return text, names


#: Gendered words and their counterparts (lower case); "her" is resolved by its part of speech.
_FLIP_PAIRS = (
    ("he", "she"), ("him", "her"), ("his", "her"), ("himself", "herself"), ("man", "woman"), ("men", "women"),
    ("boy", "girl"), ("boys", "girls"), ("gentleman", "lady"), ("father", "mother"), ("dad", "mom"),
    ("brother", "sister"), ("son", "daughter"), ("husband", "wife"), ("boyfriend", "girlfriend"),
    ("grandfather", "grandmother"), ("grandpa", "grandma"), ("uncle", "aunt"), ("nephew", "niece"),
    ("king", "queen"), ("mr", "ms"), ("sir", "madam"), ("guy", "gal"), ("actor", "actress"),
    ("waiter", "waitress"), ("businessman", "businesswoman"), ("policeman", "policewoman"),
    ("fiancé", "fiancée"), ("groom", "bride"), ("prince", "princess"), ("hero", "heroine"),
    ("brothers", "sisters"), ("sons", "daughters"), ("fathers", "mothers"), ("husbands", "wives"),
    ("boyfriends", "girlfriends"), ("dads", "moms"), ("uncles", "aunts"), ("nephews", "nieces"),
    ("gentlemen", "ladies"), ("kings", "queens"), ("widower", "widow"), ("lad", "lass"), ("lads", "lasses"),
    ("stepfather", "stepmother"), ("stepbrother", "stepsister"), ("stepson", "stepdaughter"),
    ("grandson", "granddaughter"), ("daddy", "mommy"), ("papa", "mama"), ("bro", "sis"), ("fiance", "fiancee"),
    ("salesman", "saleswoman"), ("schoolboy", "schoolgirl"),
    # left in the old gender in 9 training characters' labels (sm-1092's "male" beside her/she)
    ("male", "female"), ("males", "females"), ("cowboy", "cowgirl"), ("englishman", "englishwoman"),
    ("guys", "gals"), ("masculine", "feminine"), ("duke", "duchess"),
)
_FLIP = {a: b for a, b in _FLIP_PAIRS} | {b: a for a, b in _FLIP_PAIRS if b != "her"}
_FLIP.update({"hers": "his", "mrs": "mr", "miss": "mr", "ms": "mr", "mum": "dad", "mummy": "daddy", "auntie": "uncle",
              "granny": "grandpa", "lord": "lady"})
#: Words after which "his" stands alone, the woman's "hers" ("offered his to Junior", "His was a ..."): not "her".
_HIS_ALONE_BEFORE = frozenset({"is", "was", "were", "are", "to", "too"})
#: Words the gender flip rewrites (one word for one, so their order survives it).
_GENDERED = frozenset(_FLIP) | frozenset(_FLIP.values()) | {"her", "hers"}


def _match_case(new: str, old: str) -> str:
    if old.isupper() and len(old) > 1:
        return new.upper()
    return new[:1].upper() + new[1:] if old[:1].isupper() else new


def _word_follows(toks: Sequence[str], j: int) -> bool:
    """Whether a word comes at ``toks[j]``, past markdown's emphasis marks ("his *favorite* pen")."""
    while j < len(toks) and toks[j] in EMPHASIS_MARKS:
        j += 1
    return j < len(toks) and is_word(toks[j])


def flip_gender(text: str, refs: dict[str, Sequence[str] | None], her_is_possessive) -> tuple[str, dict[str, Any]]:
    """The story with every binary gendered word swapped (she <-> he, woman <-> man, Ms <-> Mr, ...)
    and the reference lists mapped the same way (training augmentation: the model must bind
    pronouns to characters by context, not by which gender a role usually has).

    ``her_is_possessive(words, i)`` tells whether the ``i``-th word "her" is a determiner
    ("her book" -> "his book") or an object ("saw her" -> "saw him").
    """
    words = split_words(text)
    toks = [w for w, _, _ in words]
    out, pos = [], 0
    seen: dict[str, set[str]] = {}
    for i, (w, a, b) in enumerate(words):
        low = fold_word(w)
        new = None
        if low == "her":
            new = "his" if her_is_possessive(toks, i) else "him"
        elif low == "his" and (not _word_follows(toks, i + 1) or fold_word(toks[i + 1]) in _HIS_ALONE_BEFORE):
            new = "hers"
        elif low == "miss" and not w[:1].isupper():
            pass  # the verb ("will miss the bus"), not the title
        elif low in _FLIP:
            new = _FLIP[low]
        out.append(text[pos:a])
        if new is None:
            out.append(w)
        else:
            new = _match_case(new, w)
            out.append(new)
            seen.setdefault(low, set()).add(new)
        pos = b
    out.append(text[pos:])
    new_refs: dict[str, Any] = {}
    for k, lst in refs.items():
        if lst is None:
            new_refs[k] = None
            continue
        mapped: list[str] = []
        for r in lst:
            toks_r = [t for t in r.split()]
            pieces = split_words(r)
            if len(toks_r) == 1 and fold_word(r.strip(".")) in seen:
                mapped.extend(sorted(seen[fold_word(r.strip("."))]))
            elif len(toks_r) == 1 and len(pieces) > 1 and fold_word(pieces[0][0]) in seen and all(
                    p.startswith(("'", "\u2019")) for p, _, _ in pieces[1:]):
                # a pronoun and its clitic ("he'd" -> "she'd"): kept as one, it named the other character's pronoun
                mapped.extend(new + r[pieces[0][2]:] for new in sorted(seen[fold_word(pieces[0][0])]))
            elif len(toks_r) > 1:  # a phrase flipped as the text is ("her brother" -> "his sister", "a friend of
                # his" -> "of hers"): word by word, its "her" stayed and a last "his" became "her", words the text has not
                mapped.append(flip_gender(r, {}, her_is_possessive)[0])
            else:
                f = fold_word(r.strip("."))
                mapped.append(_match_case(_FLIP[f], r) if f in _FLIP and f != "her" else r)
        new_refs[k] = list(dict.fromkeys(mapped))
    return "".join(out), new_refs


def _augmented(gs: GoldStory, rng: random.Random, flip_prob: float) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """One epoch's version of a training story: its text, references and names, every binary gendered word
    flipped (``flip_gender``) with probability ``flip_prob``, then first names swapped (``_swap_names``)."""
    text, refs = None, {k: c.references for k, c in gs.characters.items()}
    flipped = rng.random() < flip_prob
    if flipped:
        text, refs = flip_gender(gs.story.text, refs, her_is_possessive)
    text, names = _swap_names(gs, rng, text, flipped=flipped)
    return text, refs, names


@dataclass(frozen=True)
class TrainReport:
    """What ``train_encoder`` did.

    Attributes:
        out_dir: where the model was saved.
        stories: training stories used; words: story words seen per epoch.
        epochs, seconds: training length and wall time; final_loss: mean loss of the last epoch;
        epoch_losses: mean loss (per tagged word) of every epoch.
        data_sha256: hash of the training rows (text and labels), recorded in ``meta.json``.
        device: where it trained ("cpu" or "cuda").
        seeds: the seeds of the model (several for a soup, ``train_soup``); trained_seeds: those whose
            model this call trained (a soup's rerun reuses members already trained alike, and
            ``seconds`` then still sums every member's training time).
        resumed_epochs: the epochs an earlier call, cut short, had trained (``CHECKPOINT``); this call
            trained the rest. ``seconds`` counts both calls' training. A soup's: its members', summed.
        precision: the forward pass's arithmetic (``train_precision``), named in ``line`` where it is not float32.
    """

    out_dir: str
    stories: int
    words: int
    epochs: int
    seconds: float
    final_loss: float
    data_sha256: str
    epoch_losses: tuple[float, ...] = ()
    device: str = "cpu"
    seeds: tuple[int, ...] = ()
    trained_seeds: tuple[int, ...] = ()
    resumed_epochs: int = 0
    precision: str = "float32"

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python form for JSON."""
        return asdict(self)

    def line(self) -> str:
        """What the training did, in one line: for a soup, which members this call trained and which it reused."""
        what = (f"on {self.stories} stor{'y' if self.stories == 1 else 'ies'} ({self.words} word"
                f"{'' if self.words == 1 else 's'}) for {self.epochs} epoch{'' if self.epochs == 1 else 's'}")
        where = self.device + (f" in {self.precision}" if self.precision != "float32" else "")
        went_on = (f"; went on from {self.resumed_epochs} epoch{'s' if self.resumed_epochs > 1 else ''} a training cut "
                   f"short had finished" if self.resumed_epochs else "")
        if len(self.seeds) <= 1:
            return (f"trained {what} in {self.seconds:.0f} s on {where}{went_on}; final loss "
                    f"{self.final_loss:.4f}; saved to {self.out_dir}")
        now = (f"trained seed{'s' if len(self.trained_seeds) > 1 else ''} {', '.join(map(str, self.trained_seeds))} "
               f"now" if self.trained_seeds else "trained no seed now (every member was already trained alike)")
        return (f"{now}; averaged seeds {', '.join(map(str, self.seeds))}, each trained {what} ({self.seconds:.0f} s "
                f"of training in all, on {where}{went_on}); saved the soup to {self.out_dir}")


def _training_rows(files: Sequence[str | Path]) -> list[GoldStory]:
    """The labelled stories of ``files``, each checked: text, reference labels, and every labelled
    name and reference a word of the text (a label that is not there cannot be taught)."""
    from harness.identity.names import select_name

    rows: list[GoldStory] = []
    seen: dict[str, str] = {}  # text -> where it was read first
    for f in files:
        stories = load_gold(f)
        if not stories:  # given on purpose, so probably the wrong file or one not yet written
            raise DataError(f"{f}: no stories in it; give a file of labelled stories or leave it out")
        for gs in stories:
            where = f"{f}: story {gs.story.story_id!r}"
            if not gs.story.text or not gs.story.text.strip():
                raise DataError(f"{where} has no text; give the story's text or drop the row")
            first = seen.get(gs.story.text)
            if first is not None:  # a file given twice (--data and --extra) was trained on twice
                said = "itself: the file is given twice" if first == where else first
                raise DataError(f"{where} repeats the text of {said}; give each training file once and each story "
                                f"in one of them")
            seen[gs.story.text] = where
            unlabelled = [r.key for r in gs.story.roles
                          if gs.characters.get(r.key) is None or gs.characters[r.key].references is None]
            if len(unlabelled) == len(gs.story.roles):
                raise DataError(f"{where} has no reference labels; training needs references (the project "
                                f"format or train150), not audit rows")
            if unlabelled:  # its targets would all be 0: taught that no word of the story refers to it
                raise DataError(f"{where}: {unlabelled[0]} has no reference labels; give its `references` (an "
                                f"empty list where the story has none) or drop the row")
            words = [w for w, _, _ in split_words(gs.story.text)]
            for key, ch in gs.characters.items():
                name = select_name(ch.name)  # its words: quotes around a nickname may be written otherwise
                wanted = [("references", w) for w in ch.references or ()]
                wanted += [("name", w) for w in re.findall(r"\w+", name or "")]
                for field, w in wanted:
                    if field == "references" and not phrase_tokens(w):  # "" matched anywhere, "." nowhere
                        raise DataError(f"{where}: {key} references hold {w!r}, which holds no word; drop it")
                    # a curly apostrophe against a straight one is the same word, as fold_word compares them
                    straight = re.escape(w.replace("\u2019", "'"))
                    if not re.search(rf"(?<!\w){straight}(?!\w)", gs.story.text.replace("\u2019", "'"), re.IGNORECASE):
                        raise DataError(f"{where}: {key} {field} hold {w!r}, which does not occur in the story; "
                                        f"correct the label or the text")
                _check_taught(where, key, words, name, ch.references or ())
            try:
                _owner_ranks(gs)  # one owner per occurrence, checked where the file is known
            except DataError as e:
                raise DataError(f"{f}: {e}") from None
            rows.append(gs)
    if not rows:
        raise DataError(f"no labelled stories in {', '.join(map(str, files))}")
    return rows


def _check_taught(where: str, key: str, words: Sequence[str], name: str | None, references: Sequence[str]) -> None:
    """A DataError where a label that occurs in the story would teach no word of it: ``project_labels`` reads the
    story's words as the tagger splits them, so "Jean" of "Jean-Luc", "Mary Anne" for "Mary-Anne" or "self" of
    "self-taught" mark nothing, and the word the story writes is taught as no one's. It matches as
    ``project_labels`` does (``_name_marks``, ``_reference_marks``), without its table of targets."""
    kept = [w for w in words if is_word(w)]
    low = [fold_word(w) for w in kept]
    for ref in references:
        if not _reference_marks(low, ref):
            raise DataError(f"{where}: {key} references hold {ref!r}, which the story writes only inside another "
                            f"word (the tagger reads {_holding_word(words, ref)!r} as one word), so it would teach "
                            f"nothing; label the word as the story writes it")
    if name and not _name_marks(kept, low, name):
        raise DataError(f"{where}: {key} name {name!r} is not written in the story as its own capitalised words "
                        f"(the tagger reads {_holding_word(words, name)!r} as one word), so it would teach nothing; "
                        f"write the name as the story does")


def _holding_word(words: Sequence[str], phrase: str) -> str:
    """The story's word that holds the first word of ``phrase`` (for the message of ``_check_taught``)."""
    first = (phrase_tokens(phrase) or [fold_word(phrase)])[0]
    return next((w for w in words if first in fold_word(w)), phrase)


#: What a word is taught as (the targets ``_token_targets`` and the flip build from the labels): a release that
#: teaches a word otherwise bumps it, so ``train_soup`` trains again a member taught the older way, and a training
#: cut short under them does not go on under these. Models that record none were taught as version 1. 2: the flip
#: reads "her" before function words and bare verbs as an object, keeps the verb "miss" and a pronoun's clitic in
#: its references; the name swap replaces every capitalised spelling of the name. 3: the flip swaps plural kin
#: words ("brothers" <-> "sisters"), step- and grand- kin, "widow", "lad", "bro"/"sis" and a few more. 4: a swapped
#: name is swapped in every label that writes it (two characters named alike); a reference of several words is
#: flipped as the text is ("her brother" -> "his sister"). 5: the flip reads "her very close friend", "to her home"
#: as a determiner's and "helped her find" as an object's; an elision's apostrophe after a closing quotation mark or
#: two spaces is a word of its own; "male", "cowboy", "Englishman", "Auntie" and a few more are flipped (their
#: labels kept the old gender); "his" before "was", "is" or "to" stands alone ("hers", not "her"). 6: an
#: ellipsis character ends a sentence as "..." does ("held her close\u2026" is an object's "her"). 7: the name swap
#: replaces a name inside markdown's underscores ("_Priya_", "_SCOLA MORPBIES_"), a word of its own to the tagger;
#: a name with an apostrophe inside marks all its words ("O'Brien-Smith"); the flip reads "her" past emphasis marks
#: ("let her *go*": "him") and before "'cause", "'til", "'em" as an object. 8: a name's word with an apostrophe
#: after its first letter ("O'Brien", "D'Andre") is marked where the story writes it alone, as in the full name (its
#: first piece fell under the two-letter test); the project's files and train150 are taught as under 7.
TARGETS_VERSION = 8


def _targets_version(recorded: dict[str, Any]) -> Any:
    """The targets version a model's ``train`` record or a checkpoint's key holds: 1 where it holds none (a model
    or checkpoint of a release before it)."""
    return recorded.get("targets_version", 1)


def _roles_hash(rows: list[GoldStory]) -> str:
    """Hash of the role descriptions the rows give the model (the role prefix it reads), which ``_data_hash``
    leaves out (it was fixed before they were recorded): a training file whose descriptions alone changed is
    other data to the model."""
    h = hashlib.sha256()
    for gs in rows:
        h.update(json.dumps([[r.key, r.description] for r in gs.story.roles]).encode())
    return h.hexdigest()


def _data_hash(rows: list[GoldStory]) -> str:
    h = hashlib.sha256()
    for gs in rows:
        h.update(gs.story.text.encode())
        for k in sorted(gs.characters):
            ch = gs.characters[k]
            h.update(json.dumps([k, str(ch.name), list(ch.references or ())]).encode())
        if gs.reference_owners:
            h.update(json.dumps(sorted(gs.reference_owners.items())).encode())
    return h.hexdigest()


#: The state of a training cut short (killed, Ctrl-C, a full disk), written into the model directory after every
#: epoch but the last: a rerun with the same settings and data goes on from it, to the same weights as a run that
#: was never stopped; the finished model removes it. Other settings or data start over (and replace it).
CHECKPOINT = ".train-checkpoint.pt"


def _save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """``state`` at ``path``, whole or not at all (written beside it, then renamed). A checkpoint that cannot be
    written (a full disk) is said and skipped: the training it guards goes on."""
    torch = _torch()
    tmp = path.with_name(path.name + ".part")
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # torch's zip writer raises RuntimeError on a failed write (a full disk)
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        reason = " ".join(str(getattr(e, "strerror", None) or e).split())[:200]
        warnings.warn(f"{path}: checkpoint not written ({reason}); the training goes on, but if it is cut short a "
                      f"rerun goes on only from an earlier checkpoint", stacklevel=2)


def _load_checkpoint(path: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint at ``path`` if it was written by a training with these settings (``key``), else None."""
    if not path.is_file():
        return None
    torch = _torch()
    try:
        # on the CPU: load_state_dict moves each tensor to its parameter's device (AdamW's step counts stay on the
        # CPU, as a fresh optimiser keeps them; loaded onto a GPU they would cost a sync per parameter and step)
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # unreadable (another torch, a damaged file): the training starts over
        # one line: torch's unpickling error runs to a dozen lines of advice on weights_only
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        why = f"{type(e).__name__}: {first[:100]}{'...' if len(first) > 100 else ''}" if first else type(e).__name__
        warnings.warn(f"{path}: not read ({why}); training starts over", stacklevel=3)
        return None
    saved = state.get("key") if isinstance(state, dict) else None
    if isinstance(saved, dict):  # a checkpoint of an earlier release recorded neither: version 1 on these roles
        saved = {"roles_sha256": key.get("roles_sha256"), **saved, "targets_version": _targets_version(saved)}
    if saved != key:
        warnings.warn(f"{path}: a training cut short with other settings or data; this one starts over",
                      stacklevel=3)
        return None
    return state


#: ``train_encoder``'s arithmetic: float32, or bfloat16 through torch's autocast.
TRAIN_PRECISIONS = ("float32", "bfloat16")


def train_precision(precision: str | None) -> str:
    """The training's arithmetic: ``precision`` checked; float32 by default.

    bfloat16 is faster where the CPU multiplies it natively (AVX512-BF16 or AMX; one without emulates it, slower
    than float32): on the 2-core AMD EPYC with AVX512-BF16 a soup's epoch took about 140 s against 224 s. Two
    bfloat16 soups each fell below the shipped float32 soup on one or two figures, by up to 1.5 points (held-out
    recall for one, dev gender recall for the other; ``benchmarks/RESULTS.md``, section labelling-layers, session
    70): so it is the faster choice for trying a change, not the default."""
    if precision is None:
        return "float32"
    if precision not in TRAIN_PRECISIONS:
        raise ConfigError(f"precision {precision!r} (--precision, label.train_precision): train in "
                          f"{' or '.join(TRAIN_PRECISIONS)}")
    return precision


def recorded_precision(train: dict[str, Any]) -> str:
    """The precision a model's ``meta.json`` ``train`` block says it was trained in (an earlier release recorded
    none: it trained in float32)."""
    return train.get("precision", "float32")


#: ``train_encoder``'s ``progress``: silent, a bar of steps, or a line per epoch.
PROGRESS = (False, True, "bar", "epochs")


def check_progress(progress: Any) -> None:
    """Refuse a ``progress`` that ``train_encoder`` does not know (a typo printed nothing, silently)."""
    if not any(progress is p or (isinstance(p, str) and progress == p) for p in PROGRESS):
        raise ConfigError(f"progress={progress!r}: give False, True, 'bar' or 'epochs'")


def epoch_line(seed: int, done: int, epochs: int, loss: float, earlier: float, now: float, now_epochs: int) -> str:
    """The line ``progress="epochs"`` prints as an epoch ends: ``done`` of ``epochs`` finished, ``now_epochs`` of
    them in this call's ``now`` seconds, after ``earlier`` seconds of a training cut short (its epochs went at
    another pace, or on another machine, so the time left is read from this call's alone).

    >>> epoch_line(2, 3, 16, 0.08123, 0.0, 360.0, 3)
    '[train seed 2] epoch 3/16: loss 0.0812; 6.0 min so far, about 26 min to go'
    >>> epoch_line(0, 16, 16, 0.0123, 600.0, 1200.0, 10)
    '[train seed 0] epoch 16/16: loss 0.0123; 30.0 min so far, done'
    """
    left = now / now_epochs * (epochs - done)
    to_go = ("done" if done == epochs else "under a minute to go" if left < 60 else
             f"about {round(left / 60)} min to go")
    return f"[train seed {seed}] epoch {done}/{epochs}: loss {loss:.4f}; {(earlier + now) / 60:.1f} min so far, {to_go}"


def train_encoder(
    files: Sequence[str | Path],
    *,
    out_dir: str | Path | None = None,
    epochs: int = 8,
    batch_size: int = 8,
    lr: float = 1e-4,
    head_lr_mult: float = 10.0,
    layers: int | None = None,
    max_length: int = 384,
    augment: bool = True,
    flip_prob: float = 0.5,
    seed: int = 0,
    limit: int | None = None,
    threads: int | None = None,
    init_from: str | Path | None = None,
    progress: bool | str = False,
    base: str | None = None,
    occurrences: bool = False,
    device: str | None = None,
    head_seed: int | None = None,
    precision: str | None = None,
) -> TrainReport:
    """Fine-tune a base encoder (all-MiniLM-L6-v2 unless ``base`` names another of
    ``harness.labelling.bases.BASES``) on labelled JSONL files and save it.

    Args:
        files: JSONL files in the project or train150 format (references are required).
        out_dir: where to save (default ``default_model_dir()``, or ``default_model_dir("encoder-<base>")``
            for another base).
        epochs, batch_size, lr: optimisation (AdamW, linear warm-up over 10% then decay); the new
            head's learning rate is ``lr * head_lr_mult``.
        layers: keep only the first ``layers`` transformer layers (faster; default all of them).
        augment: swap first names for random ones in 70% of the named characters each epoch, and
            swap every binary gendered word (``flip_gender``) in a ``flip_prob`` share of the stories.
        limit: use only the first ``limit`` stories (quick checks and tests).
        threads: torch CPU threads (default: leave torch's setting).
        init_from: continue from a model directory written by this function instead of the
            pretrained base (more epochs without starting over); needs ``out_dir``, which may be ``init_from``.
        progress: False (silent), True or "bar" (a bar of the optimiser's steps), or "epochs" (a line on stderr as
            each epoch ends: the seed, the epoch, its loss, the time so far and an estimate of the time left;
            what members of a soup trained at once in processes print, where their bars would overwrite each
            other's line).
        base: the pretrained encoder to start from (``harness.labelling.bases``; default ``minilm``, or
            the base of ``init_from``).
        occurrences: teach who owns each occurrence of a reference word both characters hold
            (``occurrence_targets``: the hand-labelled owner where a story gives ``reference_owners``,
            no reference loss there where it does not). The default, False, marks every occurrence for
            both, as the word-type labels say: on dev, two seeds per arm, owners cost about one point of
            gender recall (section ``labelling-layers`` of ``benchmarks/RESULTS.md``, session 17).
        device: "cpu" or "cuda" (default: cuda when available), in float32 either way. The saved model is
            the same kind of file from both and labels on either; a GPU's arithmetic rounds differently, so
            the weights are not bit-equal to a CPU run's.
        head_seed: draw the new head's first weights under this seed instead of ``seed``, which then
            orders the batches and draws the augmentation and dropout alone. The members of a soup
            (``train_soup``) share one head this way, so their weights can be averaged.
        precision: the forward pass's arithmetic: "float32", or "bfloat16" (torch's autocast: matrix products in
            bfloat16; weights, gradients and the optimiser's state in float32; ``train_precision``). Default
            float32. The saved model is float32 either way.
    """
    torch = _torch()
    from transformers import AutoTokenizer

    _check_limit(limit)
    rows = _training_rows(files)
    if limit is not None:
        rows = rows[:limit]
    if epochs < 1 or batch_size < 1:
        raise ConfigError(f"epochs and batch_size must be >= 1, got {epochs}, {batch_size}")
    # AdamW checks only its default rate, not those of parameter groups: a negative rate trained away from the
    # labels and NaN made every weight NaN, each saved as a model
    for option, value in (("lr", lr), ("head_lr_mult", head_lr_mult)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{option} must be a positive number, got {value}")
    if not 0.0 <= flip_prob <= 1.0:
        raise ConfigError(f"flip_prob is a probability, from 0 to 1; got {flip_prob}")
    check_progress(progress)
    check_threads(threads)
    if threads:
        torch.set_num_threads(threads)
    device = device or default_device()
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"device={device!r}: train on cpu or cuda")
    precision = train_precision(precision)
    if device == "cuda" and default_device() != "cuda":
        raise ConfigError("device='cuda' but torch sees no GPU here; leave the device out to train on the CPU")
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ConfigError(f"out_dir {out_dir}: a file is there, and a trained model is a directory; choose another "
                          f"path or remove the file")  # checked now, not after the training
    if init_from is not None and out_dir is None:  # the default directory is the default labeller's
        raise ConfigError(f"init_from={init_from} needs an out_dir (--out): without one the continued model would "
                          f"be written over the default encoder; give --out {init_from} to continue it in place")
    owner_ranks = [_owner_ranks(gs) for gs in rows]  # checked before any training
    rng = random.Random(seed)
    torch.manual_seed(seed if head_seed is None else head_seed)
    if init_from is not None:
        init = Path(init_from)
        _restore_replaced(init)  # a save into it killed between its moves
        init_meta = read_model_meta(init, "init_from")
        started = init_meta.get("base_name", DEFAULT_BASE)
        if base is not None and base != started:
            raise ConfigError(f"init_from={init}: that encoder was fine-tuned from base {started!r}, not {base!r}; "
                              f"leave out the base to continue it")
        spec = base_encoder(started)
        tok = AutoTokenizer.from_pretrained(str(init / "encoder"))  # the base's own, saved beside it
        model = _build_model(init / "encoder", layers)
        model.head.load_state_dict(torch.load(init / "head.pt", map_location="cpu"))
    else:
        spec = base_encoder(base or DEFAULT_BASE)
        base_dir = base_model_path(spec.name)
        tok = AutoTokenizer.from_pretrained(str(base_dir))
        model = _build_model(base_dir, layers)
    if head_seed is not None and head_seed != seed:
        torch.manual_seed(seed)  # the head was drawn under head_seed (above); dropout follows seed
    out = model_dir_for(out_dir, spec.name)
    try:  # made now, not after the training: a path that cannot be written costs no work
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"out_dir {out}: cannot make it ({e.strerror}); choose another path") from None
    with training_lock(out):  # a second training into ``out`` is refused: it wrote over this one's files
        # the 30k-word embedding table stays as trained (a few hundred stories cannot improve
        # it, and it is half of the optimiser's work)
        model.encoder.embeddings.word_embeddings.weight.requires_grad_(False)
        model.to(device)
        model.train()
        steps_per_epoch = math.ceil(len(rows) / batch_size)
        total = steps_per_epoch * epochs
        head_params = list(model.head.parameters())
        body = [p for n, p in model.named_parameters() if p.requires_grad and not n.startswith("head.")]
        # the fresh head learns faster than the pretrained body
        opt = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head_params, "lr": lr * head_lr_mult}],
                                weight_decay=0.01)
        warm = max(1, total // 10)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / (total - warm + 1))))
        loss_fn = torch.nn.BCEWithLogitsLoss(reduction="none")
        data_sha256 = _data_hash(rows)
        checkpoint = out / CHECKPOINT
        # --init-from by its path and what its meta.json says of it: a model trained again there is another start
        init_key = (None if init_from is None else
                    [str(init_from), hashlib.sha256(json.dumps(init_meta, sort_keys=True).encode()).hexdigest()])
        key = {"data_sha256": data_sha256, "base": spec.name, "init_from": init_key,
               "epochs": epochs, "batch_size": batch_size, "lr": lr, "head_lr_mult": head_lr_mult, "layers": layers,
               "max_length": max_length, "augment": augment, "flip_prob": flip_prob, "seed": seed, "limit": limit,
               "occurrences": occurrences, "head_seed": head_seed, "device": device,
               "roles_sha256": _roles_hash(rows), "targets_version": TARGETS_VERSION}
        if precision != "float32":  # a float32 training's key as before: its checkpoints still resume
            key["precision"] = precision
        state = _load_checkpoint(checkpoint, key)
        start, words_seen, earlier_seconds = 0, 0, 0.0
        losses: list[float] = []
        if state is not None:  # every state the remaining epochs read: weights, optimiser, schedule, both generators
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
            rng.setstate((state["rng"][0], tuple(state["rng"][1]), state["rng"][2]))
            torch.set_rng_state(state["torch_rng"].cpu())
            if device == "cuda" and state.get("cuda_rng") is not None:
                torch.cuda.set_rng_state(state["cuda_rng"].cpu())
            start, words_seen, earlier_seconds = state["epoch"], state["words"], state["seconds"]
            losses = list(state["losses"])
        t0 = time.perf_counter()
        last = losses[-1] if losses else float("nan")
        bar = None
        if progress and progress != "epochs":
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=start * steps_per_epoch, desc="train encoder", unit="step")
        for ep in range(start, epochs):
            examples = []
            for gs, ranks in zip(rows, owner_ranks):
                if augment:
                    text, refs, names = _augmented(gs, rng, flip_prob)
                else:
                    from harness.identity.names import select_name

                    text = gs.story.text
                    refs = {k: c.references for k, c in gs.characters.items()}
                    names = {k: (select_name(c.name) if c.name is not None else None) for k, c in gs.characters.items()}
                e = _encode(tok, gs.story, text, max_length)
                words = [w for w, _, _ in e.words]
                tgt = project_labels(words, names, refs)
                weights = occurrence_targets(words, tgt, refs, ranks, _tracked(gs)) if occurrences else None
                examples.append((e, tgt, weights))
            if ep == 0:
                words_seen = sum(len(e.words) for e, _, _ in examples)
            # length-bucketed batches, shuffled
            order = sorted(range(len(examples)), key=lambda i: len(examples[i][0].input_ids) + rng.random() * 8)
            batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
            rng.shuffle(batches)
            tot_loss, tot_n = 0.0, 0
            for b in batches:
                batch = [examples[i] for i in b]
                ids, am, tt = _collate([e for e, _, _ in batch], tok.pad_token_id)
                target, mask = (torch.from_numpy(a) for a in _token_targets(batch, ids.shape[1]))
                if device != "cpu":
                    ids, am, tt, target, mask = (t.to(device, non_blocking=True) for t in (ids, am, tt, target, mask))
                with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bfloat16"):
                    logits = model(ids, am, tt)
                logits = logits.float()
                n = (mask.sum() / len(SLOTS)).clamp(min=1.0)
                loss = (loss_fn(logits, target) * mask).sum() / n
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                # summed on the device: reading a GPU figure back every step would stall the host
                tot_loss = tot_loss + loss.detach() * n
                tot_n = tot_n + n.detach()
                if bar is not None:
                    bar.update(1)
            last = float(tot_loss) / max(float(tot_n), 1.0)
            if not math.isfinite(last):  # a diverged training exited 0 and saved a model that labels nothing
                if bar is not None:
                    bar.close()
                raise ConfigError(f"training diverged at epoch {ep + 1} (loss {last}); lower --lr (lr {lr})")
            losses.append(round(last, 5))
            if progress == "epochs":
                # one write of the whole line: print's two (text, then end) let a member trained beside this one
                # put its line between them
                sys.stderr.write(epoch_line(seed, ep + 1, epochs, last, earlier_seconds, time.perf_counter() - t0,
                                            ep + 1 - start) + "\n")
                sys.stderr.flush()
            if ep + 1 < epochs:
                _save_checkpoint(checkpoint, {
                    "key": key, "epoch": ep + 1, "words": words_seen, "losses": losses,
                    "seconds": earlier_seconds + time.perf_counter() - t0, "model": model.state_dict(),
                    "optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "rng": rng.getstate(),
                    "torch_rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state() if device == "cuda" else None})
        if bar is not None:
            bar.close()
        seconds = earlier_seconds + time.perf_counter() - t0
        report = TrainReport(str(out), len(rows), words_seen, epochs, round(seconds, 2), round(last, 5), data_sha256,
                             tuple(losses), device, (seed,), (seed,), start, precision)
        import transformers

        meta = {"format": 1, "slots": list(SLOTS), "max_length": max_length,
                "base": f"{spec.model} ({', '.join(spec.packages)})", "base_name": spec.name,
                "layers": len(model.encoder.encoder.layer), "files": [Path(f).name for f in files],
                "train": {"epochs": epochs, "batch_size": batch_size, "lr": lr, "head_lr_mult": head_lr_mult,
                          "augment": augment, "flip_prob": flip_prob, "seed": seed, "limit": limit,
                          "occurrences": occurrences, "device": device, "head_seed": head_seed,
                          "layers": layers, "roles_sha256": key["roles_sha256"], "targets_version": TARGETS_VERSION,
                          "precision": precision},
                "init_from": str(init_from) if init_from else None,
                "report": report.to_dict(), "versions": {"torch": torch.__version__,
                                                          "transformers": transformers.__version__}}

        def write(stage: Path) -> None:
            model.encoder.save_pretrained(str(stage / "encoder"))
            tok.save_pretrained(str(stage / "encoder"))
            torch.save({k: v.cpu() for k, v in model.head.state_dict().items()}, stage / "head.pt")

        _install_model(out, write, meta)
        # the model is whole: nothing to go on from
        for left in (checkpoint, checkpoint.with_name(checkpoint.name + ".part")):
            try:
                left.unlink(missing_ok=True)
            except OSError:  # not a file (or not ours to remove): left as it is, the model is saved
                pass
        return report


#: ``train_encoder``'s defaults, which a soup's members are checked against when its caller leaves one out.
_TRAIN_DEFAULTS = {k: v.default for k, v in inspect.signature(train_encoder).parameters.items()}


#: Where a model's files are written before they take the place of the model there (``_install_model``).
SAVING, REPLACED = ".saving", ".replaced"


def _install_model(out: Path, write: Any, meta: dict[str, Any]) -> None:
    """A model's files written by ``write(folder)`` into a folder inside ``out``, then moved in place of the
    model there, ``meta`` last. A save cut short while writing (killed, a full disk) leaves the model that was
    there whole, so ``--init-from X --out X`` reads X again on the rerun and goes on from its checkpoint (the
    save wrote over X's files, and X's meta.json was gone). The model there is moved aside, meta.json first,
    and moved back where a move fails; one killed between the moves (no meta.json, the loader names it) is
    moved back by the next call that saves into the folder or continues from it (``_restore_replaced``)."""
    stage, old = out / SAVING, out / REPLACED
    _restore_replaced(out)  # the model there, where an earlier save was killed between its moves
    for left in (stage, old):  # an earlier save's, cut short
        _remove(left)
    stage.mkdir(parents=True)
    write(stage)
    old.mkdir()
    try:
        for name in ("meta.json", "encoder", "head.pt"):
            if (out / name).exists():
                os.replace(out / name, old / name)
            if name != "meta.json":
                os.replace(stage / name, out / name)
    except OSError:
        _restore_replaced(out)
        raise
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=2))  # whole, by rename
    for left in (stage, old):
        _remove(left)


def _restore_replaced(out: Path) -> None:
    """The model ``_install_model`` moved aside, moved back where the folder has no meta.json of its own (a save
    killed between its moves): every file of it in place of the new one, and the rest of the save removed."""
    old = out / REPLACED
    if (out / "meta.json").exists() or not (old / "meta.json").is_file():
        return
    for name in ("encoder", "head.pt", "meta.json"):  # meta.json last: the model is whole before it names one
        if (old / name).exists():
            _remove(out / name)
            os.replace(old / name, out / name)
    for left in (old, out / SAVING):  # the new model's files that had not come in are no model
        _remove(left)


def _remove(path: Path) -> None:
    """A file or folder gone, whichever is there."""
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _check_limit(limit: int | None) -> None:
    # rows[:0] trained nothing and divided by zero in the schedule; rows[:-1] trained on all but the last story
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be a whole number >= 1 (the first stories to train on), got {limit!r}")


def _head_start(meta: dict[str, Any]) -> Any:
    """The seed a model's head was first drawn under (``train_encoder``'s ``head_seed``, else its ``seed``)."""
    train = meta.get("train", {})
    return train.get("seed") if train.get("head_seed") is None else train.get("head_seed")


def average_encoders(members: Sequence[str | Path], out_dir: str | Path,
                     meta_update: dict[str, Any] | None = None) -> Path:
    """Write the uniform average of trained encoder directories' weights (a "model soup", Wortsman et
    al. 2022) to ``out_dir``: the encoder's tensors and the head's, each the mean of the members'. The
    members must be fine-tuned from one base with the same head start (``train_encoder``'s
    ``head_seed``), or their average is no model at all. ``meta.json`` is the first member's, with the
    members listed under ``soup`` and the keys of ``meta_update`` replaced; it is written last, so a cut-short
    average is not mistaken for a model."""
    torch = _torch()
    from safetensors.torch import load_file, save_file

    dirs = [Path(m) for m in members]
    if not dirs:
        raise ConfigError("average_encoders needs at least one trained encoder directory")
    metas = [read_model_meta(d, "soup member") for d in dirs]
    targets = [_targets_version(m.get("train", {})) for m in metas]
    for d, m, taught in zip(dirs[1:], metas[1:], targets[1:]):
        for key in ("base_name", "layers", "slots"):
            if m.get(key) != metas[0].get(key):
                raise ConfigError(f"soup member {d}: its {key} is {m.get(key)!r}, the first member's "
                                  f"{metas[0].get(key)!r}; average only encoders trained alike")
        if taught != targets[0]:  # the soup's meta.json is the first member's: it would say one
            raise ConfigError(f"soup member {d}: taught with targets version {taught!r}, the first member "
                              f"{targets[0]!r}; average only encoders trained alike")
        # heads drawn apart average to no head; the labeller reads the soup's occurrences (its reference pooling)
        # and max_length from the first member's meta.json, which would then describe one member only
        for what, mine, first in (("head start (head_seed, else seed)", _head_start(m), _head_start(metas[0])),
                                  ("occurrences", bool(m.get("train", {}).get("occurrences")),
                                   bool(metas[0].get("train", {}).get("occurrences"))),
                                  ("max_length", m.get("max_length"), metas[0].get("max_length"))):
            if mine != first:
                raise ConfigError(f"soup member {d}: its {what} is {mine!r}, the first member's {first!r}; average "
                                  f"only encoders trained alike")
    for d in dirs:
        if not (d / "encoder" / "model.safetensors").is_file():
            raise ConfigError(f"soup member {d}: no encoder/model.safetensors to average; retrain it")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def mean(tensors: list) -> Any:
        # summed in float64, so the order of the members does not round the average differently
        return (sum(t.double() for t in tensors) / len(tensors)).to(tensors[0].dtype)

    weights = [load_file(str(d / "encoder" / "model.safetensors")) for d in dirs]
    keys = sorted(weights[0])
    for d, w in zip(dirs[1:], weights[1:]):
        if sorted(w) != keys:
            raise ConfigError(f"soup member {d}: its encoder's tensors differ from the first member's; average "
                              f"only encoders of one base")

    def write(stage: Path) -> None:
        (stage / "encoder").mkdir()
        for f in (dirs[0] / "encoder").iterdir():  # config and tokenizer files, the first member's
            if f.is_file() and f.name != "model.safetensors":
                (stage / "encoder" / f.name).write_bytes(f.read_bytes())
        save_file({k: mean([w[k] for w in weights]).contiguous() for k in keys},
                  str(stage / "encoder" / "model.safetensors"), metadata={"format": "pt"})
        heads = [torch.load(d / "head.pt", map_location="cpu") for d in dirs]
        torch.save({k: mean([h[k] for h in heads]) for k in heads[0]}, stage / "head.pt")

    meta = dict(metas[0])
    # members inside the soup's directory (train_soup's members/) by relative path, so the model can move
    listed = [str(d.resolve().relative_to(out.resolve())) if d.resolve().is_relative_to(out.resolve()) else str(d)
              for d in dirs]
    meta["soup"] = {"members": listed, "seeds": [m.get("train", {}).get("seed") for m in metas]}
    meta.update(meta_update or {})
    _install_model(out, write, meta)
    return out


def model_dir_for(out_dir: str | Path | None, base: str | None) -> Path:
    """Where a training writes its model: ``out_dir``, else the cache's directory of the base's encoder
    (``default_model_dir``: encoder-minilm, or encoder-<base>)."""
    base = base or DEFAULT_BASE
    return Path(out_dir) if out_dir else default_model_dir(DEFAULT_NAME if base == DEFAULT_BASE else f"encoder-{base}")


@contextlib.contextmanager
def training_lock(model_dir: Path, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive lock beside ``model_dir`` (``<parent>/.<name>.train.lock``) while one training writes a model
    there. Two trainings into one directory wrote over each other's model and removed each other's checkpoint and
    half-written save, each saying it had saved its model. ``waiting`` None: a lock held by another training is
    refused at once, in one line (``harness label train``); else ``waiting()`` is called and the lock waited for
    (``harness run`` trains the encoder on first use: the jobs of an array sharing the cache train it once, the
    others then use it). A folder this process may read but not write, or a file system without flock: no lock."""
    from harness.store import make_folder

    make_folder(model_dir.parent, "the encoder's folder")
    path = model_dir.parent / f".{model_dir.name}.train.lock"
    key = str(path.resolve())
    if key in _training.held:  # this thread holds it already (``harness run`` around ``train_soup``)
        yield
        return
    try:
        lock = open(path, "a")  # noqa: SIM115 - held while the context is open
    except OSError:
        lock = None
    if lock is None:  # no lock, as before locks (it trains alone)
        yield
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is None:
                raise ConfigError(f"{model_dir}: another training is writing this model now ({path} is held); let "
                                  f"it finish, or give --out another directory") from None
            waiting()
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:  # a file system without flock (some network mounts)
            pass
        _training.held.add(key)
        try:
            yield  # released when the file closes
        finally:
            _training.held.discard(key)


class _Training(threading.local):
    """The training locks this thread holds (``training_lock``): a second flock of one would refuse itself."""

    def __init__(self) -> None:
        self.held: set[str] = set()


_training = _Training()


def _member_done(member: Path, base: str, want: dict[str, Any], data_sha256: str, roles_sha256: str) -> bool:
    """Whether ``member`` holds a whole model fine-tuned from ``base`` with the settings ``want`` on these rows,
    their role descriptions and this release's targets (a member of an earlier release, which recorded neither,
    is taken as taught version 1's targets on these descriptions)."""
    try:
        meta = read_model_meta(member)
    except ConfigError:
        return False
    train = meta.get("train", {})
    # the longest story window is recorded beside the settings
    have = {**train, "precision": recorded_precision(train), "max_length": meta.get("max_length")}
    return (meta.get("report", {}).get("data_sha256") == data_sha256 and meta.get("base_name") == base
            and all(have.get(k) == v for k, v in want.items())
            and train.get("roles_sha256", roles_sha256) == roles_sha256
            and _targets_version(train) == TARGETS_VERSION)


def train_soup(files: Sequence[str | Path], seeds: Sequence[int], *, out_dir: str | Path | None = None,
               jobs: int = 1, **kwargs: Any) -> TrainReport:
    """Train one encoder per seed (``train_encoder`` with ``kwargs``; each member's head drawn under the
    first seed) and save the average of their weights (``average_encoders``) as one model.

    The members are kept under ``<out_dir>/members/seed-<seed>``: a rerun after a crash trains only the
    seeds whose member is missing or was trained otherwise, then averages again. The soup labels at the
    cost of one model. The report sums the members' training seconds; its losses are the first member's.
    With one seed, it is ``train_encoder``'s model and report.

    ``jobs`` > 1 trains up to that many members at once on the CPU, each in a process of its own with
    ``threads`` torch threads (default: the usable CPUs shared out among the jobs). A small encoder's
    training keeps one thread busier than two, so on 2 CPU cores two members at once take less time than
    one after the other (``benchmarks/soup_training.py``). A member that fails does not stop the others:
    those that finish stay on disk for the rerun, and the first failure is raised once all have ended. On a
    GPU the members train one after the other, whatever ``jobs`` says."""
    seeds = [int(s) for s in seeds]
    if (twice := next((s for i, s in enumerate(seeds) if s in seeds[:i]), None)) is not None:
        raise ConfigError(f"seed {twice} is given twice; give each seed once (a soup of one model with itself is "
                          "that model)")
    if not seeds:
        raise ConfigError("train_soup needs at least one seed")
    if (bad := next((s for s in seeds if not 0 <= s < 2**32), None)) is not None:  # torch's seed overflowed
        raise ConfigError(f"seed {bad}: give seeds from 0 to 2**32 - 1")
    if jobs < 1:
        raise ConfigError(f"jobs must be >= 1, got {jobs}")
    if jobs > 1 and len(seeds) == 1:  # it did nothing, silently
        raise ConfigError(f"jobs {jobs} (--jobs, label.train_jobs): trains a soup's members at once, and one seed "
                          f"trains one model; give more seeds, or drop it")
    check_progress(kwargs.get("progress", False))
    _check_limit(kwargs.get("limit"))
    if len(seeds) == 1:  # no soup: the one model, as train_encoder saves it
        return train_encoder(files, out_dir=out_dir, seed=seeds[0], **kwargs)
    if kwargs.get("init_from") is not None:
        raise ConfigError("a soup starts every member from the base; leave out init_from (--init-from)")
    base = kwargs.get("base") or DEFAULT_BASE
    # resolved once: a member is checked against the arithmetic it was trained in, not against "the default"
    kwargs["precision"] = train_precision(kwargs.get("precision"))
    out = model_dir_for(out_dir, base)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out_dir {out}: a file is there, and a trained model is a directory; choose another "
                          f"path or remove the file")
    rows = _training_rows(files)
    if kwargs.get("limit") is not None:
        rows = rows[:kwargs["limit"]]
    data_sha256, roles_sha256 = _data_hash(rows), _roles_hash(rows)
    settings = {k: kwargs.get(k, _TRAIN_DEFAULTS[k]) for k in ("epochs", "batch_size", "lr", "head_lr_mult", "augment",
                                                          "flip_prob", "limit", "occurrences", "layers", "max_length",
                                                          "precision")}
    with training_lock(out):  # a second training into ``out`` is refused (its members' folders too)
        members = {seed: out / "members" / f"seed-{seed}" for seed in seeds}
        todo = {seed: member for seed, member in members.items()
                if not _member_done(member, base, {**settings, "seed": seed, "head_seed": seeds[0]}, data_sha256,
                                    roles_sha256)}
        if min(jobs, len(todo)) > 1 and (kwargs.get("device") or default_device()) == "cpu":
            reports = _train_members_at_once(files, todo, seeds[0], min(jobs, len(todo)), kwargs)
        else:
            reports = [train_encoder(files, out_dir=member, seed=seed, head_seed=seeds[0], **kwargs)
                       for seed, member in todo.items()]
        metas = [read_model_meta(m) for m in members.values()]
        first = metas[0]["report"]
        report = TrainReport(str(out), first["stories"], first["words"], first["epochs"],
                             round(sum(m["report"]["seconds"] for m in metas), 2), first["final_loss"], data_sha256,
                             tuple(first.get("epoch_losses", ())), first.get("device", "cpu"), tuple(seeds),
                             tuple(todo), sum(r.resumed_epochs for r in reports),
                             recorded_precision(metas[0]["train"]))
        # in the soup's one meta.json: written after it, a kill between the two writes left a soup without its seeds,
        # which harness run's training check reads as the first member's alone
        average_encoders(list(members.values()), out, {
            "report": {k: v for k, v in report.to_dict().items()  # this call's, not the model's
                       if k not in ("trained_seeds", "resumed_epochs")},
            "train": {**metas[0].get("train", {}), "seeds": seeds}})
        return report


def _train_members_at_once(files: Sequence[str | Path], members: dict[int, Path], head_seed: int, jobs: int,
                           kwargs: dict[str, Any]) -> list[TrainReport]:
    """``train_soup``'s ``members`` (seed -> directory) trained in ``jobs`` processes at once (spawned: a forked
    torch can hang). Stopped (Ctrl-C, SIGTERM to this process alone), it ends the members' processes at once, each
    keeping the checkpoint of its last finished epoch (it waited for every member to finish its training); one whose
    parent is killed outright (SIGKILL: no cleanup runs) ends with it (``host_pool.exit_with_parent``); a member the
    system kills is one line."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from harness.labelling.encoder import usable_cpus
    from harness.labelling.host_pool import exit_with_parent

    kw = {**kwargs, "device": "cpu", "threads": kwargs.get("threads") or max(1, usable_cpus() // jobs)}
    if kw.get("progress"):  # bars of two processes overwrite each other's line
        kw["progress"] = "epochs"
    pool = ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=exit_with_parent)
    try:
        futures = [pool.submit(train_encoder, list(files), out_dir=member, seed=seed, head_seed=head_seed, **kw)
                   for seed, member in members.items()]
        errors = [f.exception() for f in futures]  # every member ends, trained or failed, before one is raised
    except BaseException:
        processes = list((getattr(pool, "_processes", None) or {}).values())  # no public way to stop a running call
        for p in processes:
            p.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            p.join(10)
        raise
    pool.shutdown()
    if any(isinstance(error, BrokenProcessPool) for error in errors):  # every member's call ends with the pool
        where = next(iter(members.values())).parent
        raise BackendError(f"{where}: a process training a member of the soup ended abruptly (killed by the system: "
                           f"out of memory?), which stops every member trained beside it; their finished epochs are "
                           f"kept: rerun the same command to go on") from None
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]


__all__ = ["TrainReport", "average_encoders", "flip_gender", "model_dir_for", "occurrence_targets", "project_labels",
           "train_encoder", "train_soup", "training_lock"]
