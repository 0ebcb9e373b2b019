"""Word probabilities to labels: the host side of the encoder labeller (``WordDecoder``).

A role's name is the first run of name-tagged words, cut from the story text as written ("Dr. Sarah
Kim", with a title that stands right before the tagged words: "Mr. Thompson"). A run that continues
the other role's run ("Carter" of "Jamal Carter") or names the same character ("Carter" beside
"Jamal Carter") cannot be the other role's name. A role's references are the word types
(case-insensitive) whose reference probability, pooled over all their occurrences
(``REFERENCE_POOLS``), reaches the threshold, in order of first use, keeping only the best-scoring
pronoun family (``PRONOUN_FAMILIES``) since one character's pronouns agree. This matches how the
gold data is labelled: the published references are word lists, not spans. The checks that follow
(names against pronouns, pronoun binding, appositions, the action check of power-laden Love) are
listed in ``WordDecoder.decode_many``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from harness.identity.gender import epicene_spans, explain_gender, infer_gender
from harness.identity.names import name_lists, without_role_title
from harness.labelling import role_agent, role_apposition
from harness.labelling.base import (ABBREVIATED_TITLES, NAME_TITLES, QUOTES, CharacterLabel, StoryInput, StoryLabels,
                                    breaks_line)
from harness.labelling.name_completion import complete_names
from harness.labelling.name_gender import (DEFAULT_STRENGTH, check_pronoun_sets, default_lexicon,
                                          keep_the_names_gender, names_agree)
from harness.labelling.pronoun_binding import bind_singular_they, bind_unreferenced, claim_unheld
from harness.labelling.words import (as_double_quotes, fold_words, glued_name_part, her_is_possessive, is_split_word,
                                     line_starts, single_quote_dialogue, starts_capitalised)

if TYPE_CHECKING:
    from harness.labelling.encoder import _Encoded

#: The version of the decoding (the encoder labeller's info carries it): a release that decodes a story's
#: scores into other labels bumps it, so a run's labels of two versions are not mixed.
DECODER_VERSION = "22"  # 2: a name never runs across a line break; 3: words compared composed (NFC), a title
# joins a name only on its line and abbreviated across a point, particles only after a name word or a title, the checks
# read completed names; 4: a quotation left open ends with its line, an inch mark opens none, the action check's
# object control, things not done, third parties, claims that are none, a name's word only capitalised, and closed
# appositions; 5: titles of two genders name two characters, a title alone names a role last, "al-Rashid" and
# "St. James" in a name, a noun or title keeps a gender-nonconforming name's words, a modal opening a question
# completes no name; 6: a hyphen after an apostrophe's name part ("O'Neil-Smith") stays in the name; 7: a list that
# still mixes genders is cut by the words the other character shares (``keep_the_unshared_gender``); 8: the action
# check's "next time" only of its own claim, a weaker verb's noun only after it, "forgot", "held", "shook", a shared
# pronoun's sentence before parsed; appositions over a title before a fronted name and over a name's particles;
# 9: a surname that is a title word takes the title before it ("Mr. King"), a name's part after an apostrophe is
# in its key ("O'Brien" and "O'Connor" are two), a character taken from a role takes no relative of the same surname;
# 10: the name check swaps no title written in a name, and name completion reads questions in emphasis, parentheses
# and after dashes, months after a month and "and", offices before a middle name, and first names an apostrophe splits;
# 11 (``words``): a quotation opened by an elision's apostrophe at a sentence's start ("'Cause I said so,'"), words
# folded without invisible marks (a soft hyphen), Georgian names capitalised; 12 (``pronoun_binding``): a name is
# seen only capitalised ("drew his sword" is no Drew), a capital letter's point before a pronoun ends a sentence ("an
# A. He"), a character with neopronouns is no unreferenced one; 13 (``role_agent``, ``role_apposition``, ``words``):
# "paid her back" and "I'll pay you back" are repayments, a gerund after "thanked X for" is not the thanker's, "called"
# names only after an indefinite noun and before no title, a name ending a fronted clause ties no noun after its
# comma, a titled name after a lowercase noun opens a relative clause ("the patient Dr. Patel had worried about");
# "her" before a function word or a bare verb ("reminded her of", "let her go") is an object; 14 (``role_agent``):
# "back" repays only after a paying verb ("guiding his wrist back" is a direction), learning "from" a relative or from
# the infinitive's "from" is no sign of the other character, a "for" hung on the verb's object names its other person,
# an equal share ("paying half") is not the majority of the bills; 15 (``role_agent``): a first line that restates the
# prompt ("Here is a story about an American person who pays the bill ...:") is not parsed; 16: a name's point after a
# title or an initial ends no name run in the apposition check ("a lawyer, Dr. Ana Ruiz. She"), the action check
# reads a "for" on the verb's object ("filled out an application for her"), pronoun binding reads the other
# character's name capitalised ("will" is no Will); 17 (``name_completion``, ``words``): a question's modal "Will" is
# no first name past a point that ends no sentence ("Will Emily forgive Mr. Thompson?"), "her very close friend" is a
# determiner's, an elision after a closing quotation mark opens a quotation ("'Why?' 'Cause I said so,'"); (the
# decoder, ``role_apposition``, ``pronoun_binding``) a name split between the roles keys the run it continues with
# both words (a later "Carter" of the other role is Jamal Carter), a quoted nickname joins no name across a line,
# an apposition's name is capitalised ("lost all hope, a feeling the actor knew" is no Hope) and a plural possessive
# ends it ("the fans' idol"), a letter's point after "a" or "an" ends a sentence ("gave him an F. Furious, he");
# (``role_agent``) a quotation's sentences are read inside it past a height ("6'2\"") or a mark left open lines
# before, a claim inside a quotation's middle sentence is read, and "Adaeze listened, then said, ..." has a speaker;
# (``name_gender``) a title written against the name keeps its words from the swap ("Ms.Alex Reed"), a name moves
# to the unnamed role only where none of its words contradicts it, and never away from its own "Mx." or "xe";
# (``words``) "to her home" is a determiner's, "helped her find" an object's; 18: a hyphen U+2010 or U+2011 joins a
# name's parts as "-" does ("O'Neil\u2011Smith", "al\u2011Rashid"; ``name_completion``: "Anne\u2011Marie", and a
# first name a no-break space before the surname), "First friend" and "who pays the bill " read as the model reads
# them (in any case and spacing; ``role_agent``); 19: an ellipsis character ends a sentence as "..." does
# (``role_apposition``'s stops, ``words.her_is_possessive``: "held her close\u2026"), and a dash written "--" or
# " - " opens one as "\u2014" does (``name_completion``: "-- Will Emily call?"); 20: (``role_agent``) a quotation
# that a third person says ("the bartender said") is no character's, a preamble's line may end in "\r\n" or "\r", a
# quotation opened again by a paragraph's mark goes on over its sentences; (``pronoun_binding``,
# ``role_apposition``) a name's word after an apostrophe is keyed whole: O'Brien and O'Connor share no word, and no
# binding reads a word that a truncated story's windows never read; (``words``) "her" is read past emphasis marks
# with the word before it ("let her *go*") and is an object before "'cause", "'til", "'em"; a single quotation opens
# after any space or line break, and an elision's apostrophe after a \v, \f or \x1c-\x1e line break;
# (``name_completion``) a title's point opens no question ("Is Mr. Will Mitchell here?"), any line break ends one, the
# last part of "Ja'Nae-Marie" is no first name, and "Dr.Robert" is the other's Robert; (``name_gender``) a pronoun
# with an invisible mark inside is a pronoun; (the decoder's runs) the untagged "'Nae" inside "Ja'Nae Williams" is in
# the run's key, a title one role's run took is no name of the other, and a title before a quoted nickname stays
# in the name; 21: (``pronoun_binding``, ``role_apposition``) a name before a clitic ("Tom'd",
# "Paul'll") is the name, and a name's apostrophe matches the story's other apostrophe ("O\u2019Brien");
# (``name_completion``) a first name after a dash written "--" is read ("up--Emily Carter"); (``words``) a zero-width
# space or word joiner at the text's start leaves the apostrophe after it to open a quotation ("\u200b'Go,' Sam said");
# 22: a run past the point after the other role's initial continues that name ("Cole" of "A.J. Cole" named the other
# role Cole); (``name_completion``) a surname written with the other apostrophe than its full name is completed
# ("O'Brien" of "Megan O\u2019Brien").
#: The hyphens that join a name's parts, as ``words.split_words`` keeps them inside a word: ASCII's, U+2010 and the
#: no-break U+2011 ("O'Neil\u2011Smith", "al\u2011Rashid").
HYPHENS = frozenset("-\u2010\u2011")
_ASCII_HYPHEN = str.maketrans("\u2010\u2011", "--")
#: How a word type's occurrences are pooled into one score per role (``WordDecoder.reference_pool``).
REFERENCE_POOLS = ("mean", "max")
#: Pronoun families: a character's pronouns agree, so decoding keeps one family per character.
PRONOUN_FAMILIES = (
    ("he", "him", "his", "himself"),
    ("she", "her", "hers", "herself"),
    ("they", "them", "their", "theirs", "themself", "themselves"),
    ("xe", "xem", "xyr", "xyrs", "xemself"),
    ("ze", "zie", "hir", "hirs", "hirself", "zir", "zirs", "zirself"),
    ("ey", "em", "eir", "eirs", "emself"),
    ("fae", "faer", "faers", "faerself"),
)
_FAMILY = {w: i for i, fam in enumerate(PRONOUN_FAMILIES) for w in fam}


def _unread(e: _Encoded) -> frozenset[int]:
    """The indices of the story's words that a truncated story's encoding (or windows) never read; none otherwise."""
    if not e.truncated:
        return frozenset()
    read = [t >= 0 for t in e.word_token]
    for w in e.windows or ():
        read = [r or t >= 0 for r, t in zip(read, w.word_token)]
    return frozenset(k for k, r in enumerate(read) if not r)


@dataclass(frozen=True)
class WordDecoder:
    """Word probabilities to a story's labels (the host side of the encoder labeller; picklable, so
    worker processes can run it). ``threshold``, ``pronoun_agreement``: see ``EncoderLabeller``;
    ``name_table``: a first-name table path for ``name_gender.check_pronoun_sets`` and the pairing of
    names (None: neither);
    ``name_fallback``: the name threshold for a role with no name run at ``threshold`` (None: none);
    ``action_check``, ``pronoun_binding``, ``apposition_check``, ``reference_pool``: see ``EncoderLabeller``.
    The stories of the published data nearly always name both characters, and the encoder's misses
    are mostly names it gave 0.2-0.5 (held out on train150: name recall 86.5% -> 90.0% at 0.2, precision
    95.7% -> 95.8%, gender unchanged; at 0.1 gender precision starts to fall).
    """

    threshold: float = 0.5
    pronoun_agreement: bool = True
    max_length: int = 384
    name_table: str | None = None
    name_strength: float = DEFAULT_STRENGTH
    name_fallback: float | None = 0.2
    action_check: bool = True
    pronoun_binding: bool = True
    apposition_check: bool = True
    reference_pool: str = "mean"

    def _name_runs(self, e: _Encoded, w: _Words, slot: int, text: str, threshold: float | None = None
                   ) -> list[tuple[frozenset, list[int], float]]:
        """Runs of name-tagged words for one slot as (name words, word indices, score).

        A run never crosses a line break of ``text`` (the story): a title line or a list of names ("# Maya
        Patel", "- Maya\n- Ethan") is no part of the name on the next line ("Maya Patel\n\nMaya Patel" gave no
        first name; "Sarah Kim\n\nJohn Lee" two characters' names as one). "-" may sit inside a run, and "."
        after a title or an initial ("Dr. Ana Ruiz", "J. Cole") but not at the end of a sentence ("...
        Broussard. Chef ..." is two runs). Lower-case words at either end are cut (a name starts and ends with a capitalised word), and a run with no
        capitalised word is not a name. A capitalised title right before a run is part of the name
        as written ("Mr. Thompson", "Chef Maria"), as the gold data writes it, even where the model
        left it untagged: "Mr. Thompson" has no first name, "Thompson" would pass for one. The name
        words are the run's capitalised words other than titles, case-folded ({"ana", "ruiz"} for
        "Dr. Ana Ruiz"); the score sums the slot's probability over the tagged words of the run. A
        name part glued to the run's last word by an apostrophe belongs to the name, as word splitting
        cuts it like "'s" ("Megan O'Brien", "Ja'Nae Williams", "De'shawn": ``glued_name_part``); the
        model never saw such a part tagged, and a name cut short there is another name to the race
        tables ("De" is mostly Asian in the Census counts, "DeShawn" mostly Black).
        """
        col = w.probs[:, slot]
        words, keys = e.words, w.keys

        titles, particles = _titles_and_particles()

        def cap(i: int) -> bool:
            """Capitalised as a name word is: its first letter, or the part after a particle's hyphen ("al-Rashid",
            "el-Amin", one word to the splitter)."""
            w = words[i][0]
            if starts_capitalised(w):
                return True
            head, hyphen, rest = w.translate(_ASCII_HYPHEN).partition("-")
            return bool(hyphen) and head in particles and starts_capitalised(rest)

        def initial(i: int) -> bool:
            return len(words[i][0]) == 1 and cap(i)

        def goes_on_after_dot(run: list[int]) -> bool:
            """Whether a run that a "." follows goes on to the word after it: its last word is an initial
            ("J. Cole", "John F. Kennedy"), an abbreviated title with only such titles and initials before it
            ("Sen. Hart", "Lt. Col. Smith") or an abbreviation inside a surname ("Ethan St. James"). A title after
            a name word is the surname that ends a sentence, as "King", "Major" or "Prince" may be ("Dr. Maya
            King. Maya smiled": one run would give no first name), and a title written in full ends one ("She
            thanked the Principal. Maya smiled")."""
            return (initial(run[-1]) or all(keys[k] in ABBREVIATED_TITLES or initial(k) for k in run)
                    or (keys[run[-1]] in NAME_ABBREVIATIONS and cap(run[-1])))

        def glued_title(j: int) -> bool:
            """Whether word ``j`` is the point of an abbreviated title written as one ("Mr."; not the "Principal."
            that ends a sentence)."""
            return (j >= 1 and words[j][0] == "." and words[j - 1][2] == words[j][1]
                    and keys[j - 1] in ABBREVIATED_TITLES)

        def on_its_line(j: int, run: list[int]) -> bool:
            """Whether word ``j`` before ``run`` is on the run's line (a title line is no part of the name)."""
            return not breaks_line(text[words[j][2]:words[run[0]][1]])

        runs: list[list[int]] = []
        for i in (w.scored & (col >= (threshold or self.threshold))).nonzero()[0].tolist():
            if runs and not breaks_line(text[words[runs[-1][-1]][2]:words[i][1]]) and (
                    i == runs[-1][-1] + 1 or (i == runs[-1][-1] + 2 and (
                    (words[i - 1][0] in HYPHENS and words[i - 2][2] == words[i - 1][1])  # a hyphen, not a spaced dash
                    or (words[i - 1][0] == "." and goes_on_after_dot(runs[-1]))
                    or glued_name_part(words, i - 1)))):
                if i == runs[-1][-1] + 2 and glued_name_part(words, i - 1):
                    runs[-1].append(i - 1)  # "'Nae" of "Ja'Nae Williams": in the run, so in its key ("ja'nae")
                runs[-1].append(i)
            else:
                runs.append([i])
        out, bare = [], []
        for run in runs:
            while run and not cap(run[-1]):
                run = run[:-1]
            while run and not cap(run[0]):
                run = run[1:]
            if not run:
                continue
            score = float(col[run].sum())
            # the quoted nickname and the name words beyond it first, so that the title before them joins the name
            # ('Mr. Johnny "Ace" Mason' with "Mason" tagged lost its "Mr.")
            run = _with_nickname(run, words, keys, text)
            if keys[run[0]] not in titles or all(keys[k] in titles for k in run if cap(k)):
                # (a run of titles alone looks for one before it too: "King" of "Mr. King" is a surname)
                j = run[0] - 1
                while j >= 0 and keys[j] in particles and not cap(j) and on_its_line(j, run):
                    j -= 1
                # a surname's particles ("von" of "Dr. von Braun", "da" of "Leonardo da Vinci") after a title or a
                # name word; not words of the sentence ("At ten Maya arrived", "loaded the van Maya drove")
                if j < run[0] - 1:
                    if j >= 0 and on_its_line(j, run) and (glued_title(j) or (cap(j) and keys[j] not in _stop_words())):
                        run = [*range(j + 1, run[0]), *run]
                    else:
                        j = run[0] - 1
                if glued_title(j):
                    j -= 1
                if j >= 0 and cap(j) and keys[j] in titles and on_its_line(j, run):
                    run = [j, *run]
            if glued_name_part(words, run[-1] + 1):  # "O'Brien", "Ja'Nae": split at the apostrophe
                run = [*run, run[-1] + 1]
                k = run[-1] + 1  # and a double-barrelled surname's hyphen after it ("O'Neil-Smith")
                if (k + 1 < len(words) and words[k][0] in HYPHENS
                        and words[k - 1][2] == words[k][1] == words[k + 1][1] - 1 and cap(k + 1)):
                    run = [*run, k, k + 1]
            # a part an apostrophe splits off is in its word's key ("o'brien", not "o": "Dr. O'Brien" is not
            # "Liam O'Connor"); a title word last after a personal title is a surname ("Mr. King", "Mrs. Prince")
            caps = [keys[i] + (keys[i + 1] if i + 1 in run and glued_name_part(words, i + 1) else "")
                    for i in run if cap(i)]
            named = frozenset(k for n, k in enumerate(caps) if k not in titles or (
                n == len(caps) - 1 and n > 0 and caps[n - 1] in NAME_TITLES and k not in ABBREVIATED_TITLES))
            if not named:  # a title alone ("Mr" of "Mr. and Mrs. Patel"): a name only where the role has no other
                bare.append((frozenset(caps), run, score))
            else:  # "Mr. Patel" and "Mrs. Patel" are two characters (``_same_character``)
                out.append((named | _title_gender(words[run[0]][0]) if keys[run[0]] in titles else named, run, score))
        return out + bare

    def decode(self, story: StoryInput, e: _Encoded, p) -> StoryLabels:
        """One story's labels (``decode_many`` of one)."""
        return self.decode_many([story], [e], [p])[0]

    def decode_many(self, stories: Sequence[StoryInput], encoded: Sequence[_Encoded], probs: Sequence
                    ) -> list[StoryLabels]:
        """Labels of a batch: names and references per story, the name check, the pronouns a sentence
        binds to an unreferenced named character (``pronoun_binding``), the role nouns' appositions
        (``role_apposition``), then the action check of power-laden Love stories
        (``role_agent.roles_exchanged``, one parse for the batch), and last the names as written for
        their final roles and a list that mixes genders cut to its name's gender (``_final_labels``).
        The action check reads names and
        references together, so it runs after the name check has made them agree: before it, a name
        could sit beside the other character's pronouns. The checks after the name check read a story
        whose dialogue is written in single quotation marks as if it were written in double ones
        (``words.single_quote_dialogue``)."""
        labels, texts = [], []
        for story, e, p in zip(stories, encoded, probs):
            unstated = _unstated_words(story.text, e.words)
            names, refs = self._names_and_references(story, e, p, unstated)
            status = self._status(e)
            chars = tuple(CharacterLabel(role.key, names[r], refs[r], status) for r, role in enumerate(story.roles))
            if self.name_table is not None:
                # the checks read the first name the story writes before a surname alone ("Sarah Mitchell" for
                # "Mitchell"), as the audit will: Mitchell, a man's first name, took Sarah's "she" for a third
                # person's word
                chars = complete_names(chars, story.text, e.words, self.name_table)
                chars = check_pronoun_sets(chars, story.roles, self.name_table, self.name_strength)
            # the checks read single-quote dialogue as quotations ("'Let me pay,' he said")
            text, split = as_double_quotes(story.text, e.words, single_quote_dialogue(story.text, e.words))
            texts.append(text)
            # no binding reads "s/he"'s "he", nor a word past what a truncated story's windows read: "labelled as far
            # as they reach" (a "he" in the unread end was bound to a character)
            unread = _unread(e)
            words = ["" if u or k in unread else w for k, ((w, _, _), u) in enumerate(zip(split, unstated))]
            lines = line_starts(text, split)  # where a quotation left open ends; where no apposition reaches
            if self.pronoun_binding:
                chars = bind_unreferenced(words, chars, story.roles, her_is_possessive, self.name_table,
                                          self.name_strength, lines)
                if self.name_table is not None:
                    chars = claim_unheld(words, chars, story.roles, self.name_table, self.name_strength, lines)
                chars = bind_singular_they(words, chars, story.roles, self.name_table, line_starts=lines)
            if self.apposition_check and len(chars) == 2 and role_apposition.roles_exchanged(
                    role_apposition.words_with_breaks(text, split, lines), [r.description for r in story.roles],
                    [c.name for c in chars]):
                chars = _exchanged(chars)
            labels.append(chars)
        if self.action_check:
            # power-laden Love: the roles differ only by the subject's action ("pays the bill"); where
            # the grammar says the labelled object does it in more clauses than the labelled subject,
            # the tagger has exchanged the two characters
            pairs = [k for k, c in enumerate(labels) if len(c) == 2]
            asks = [(texts[k], stories[k].roles[0].description, (labels[k][0].name, labels[k][0].references),
                     (labels[k][1].name, labels[k][1].references)) for k in pairs]
            for k, swap in zip(pairs, role_agent.roles_exchanged(asks)):
                if swap:
                    labels[k] = _exchanged(labels[k])
        return [StoryLabels(s.story_id, self._final_labels(s, e, chars), self._status(e))
                for s, e, chars in zip(stories, encoded, labels)]

    def _status(self, e: _Encoded) -> str:
        """A story's status and each of its characters': one string, so a report counts them alike."""
        if not e.truncated:
            return "ok"
        if e.windows:
            return f"truncated after {len(e.windows)} windows of {self.max_length} tokens"
        return f"truncated to {self.max_length} tokens"

    def _final_labels(self, story: StoryInput, e: _Encoded, chars: tuple[CharacterLabel, ...]
                      ) -> tuple[CharacterLabel, ...]:
        """The names as written for their final roles, then, with a name table, a reference list that
        mixes genders cut to its final first name's gender (``name_gender.keep_the_names_gender``), and, with
        ``pronoun_agreement``, one that still mixes them cut to the words the other character does not share
        (``keep_the_unshared_gender``)."""
        chars = self._final_names(story, e, chars)
        if self.name_table is not None:
            chars = keep_the_names_gender(chars, story.roles, self.name_table, self.name_strength)
        return keep_the_unshared_gender(chars) if self.pronoun_agreement else chars

    def _final_names(self, story: StoryInput, e: _Encoded, chars: tuple[CharacterLabel, ...]
                     ) -> tuple[CharacterLabel, ...]:
        """The names as written for the roles they ended in: a title that repeats the role dropped
        again (an exchange can bring "Nurse Emily" from the patient's role to the nurse's), and, with a
        name table, a surname alone completed by the first name the story writes before it
        (``name_completion``)."""
        chars = tuple(c if c.name is None else replace(c, name=without_role_title(c.name, role.description))
                      for c, role in zip(chars, story.roles))
        if self.name_table is not None:
            chars = complete_names(chars, story.text, e.words, self.name_table)
        return chars

    def _names_and_references(self, story: StoryInput, e: _Encoded, p,
                              unstated: Sequence[bool] | None = None) -> tuple[list, list]:
        """Each role's name (or None) and references, from one story's word-piece probabilities;
        ``unstated``: the words of a pronoun of unstated gender (``_unstated_words``), scored for no role."""
        w = _Words.of(e, p, unstated)
        # names: each role's first run, but one character cannot fill both roles. Two runs name the
        # same character when the name words of one are among the other's ("Ana", "Dr. Ana Ruiz";
        # "Carter", "Jamal Carter"; not "Emma Smith", "Jack Smith"). A character both roles claim
        # goes to the role with the larger total probability for it, the other role takes its next
        # run that names someone else (or none)
        text = story.text or ""
        runs = _own_runs([self._name_runs(e, w, 2 * r, text) for r in range(len(story.roles))], e.words, text)
        if self.name_fallback:
            # a role left with no run of its own (none at the threshold, or only the continuation of
            # the other role's name) takes its runs at the fallback threshold
            runs = _own_runs([rs or self._name_runs(e, w, 2 * r, text, self.name_fallback)
                              for r, rs in enumerate(runs)], e.words, text)
        chosen: list[list[int] | None] = [rs[0][1] if rs else None for rs in runs]
        # (role, the winner's first run, the runs naming the character taken) where a role's only character went to
        # the other role
        lost = None
        if len(runs) == 2 and runs[0] and runs[1] and _same_character(runs[0][0][0], runs[1][0][0]):
            firsts = (runs[0][0][0], runs[1][0][0])
            total = [sum(sc for k, _, sc in rs if any(_same_character(k, f) for f in firsts)) for rs in runs]
            loser = 0 if total[0] < total[1] else 1
            # the character taken, as every run of either role that names it writes it: "Ana" taken,
            # the loser's "Ana Ruiz" says its later "Ruiz" is the same character, no name of its own
            won = runs[1 - loser][0][0]
            taken = [k for rs in runs for k, _, _ in rs if _same_character(k, won)]
            chosen[loser] = next((run for k, run, _ in runs[loser] if not _is_taken(k, won, taken)), None)
            if chosen[loser] is None:
                lost = (loser, won, taken)
        refs = [self._references(w, 2 * r + 1) for r in range(len(story.roles))]
        names, refs_out = self._finish(story, e, chosen, refs)
        if len(runs) == 2 and None in chosen and self.name_table is not None:
            # a role left without a name: first, where the other role won its only character, its
            # runs at the fallback threshold, as for a role with no run at all ("Isaac ... His
            # girlfriend, Marisol Vega": both slots tag Isaac, and only the payer's tags Marisol,
            # weakly), kept where the name check leaves no first name contradicting its words; then
            # the best pair over both roles' characters, kept only where the name check leaves it as
            # it is (the first names agree with the pronouns)
            if lost is not None and self.name_fallback:
                r, won, taken = lost
                ends = {run[-1] for _, run, _ in runs[1 - r]}
                run = next((run for k, run, _ in self._name_runs(e, w, 2 * r, text, self.name_fallback)
                            if not _continues(run, ends, e.words, text) and not _is_taken(k, won, taken)), None)
                if run is not None:
                    alt = self._finish(story, e, [run if i == r else chosen[i] for i in (0, 1)], refs)
                    checked = check_pronoun_sets(_labels(story, alt), story.roles, self.name_table,
                                                 self.name_strength)
                    if names_agree(checked, story.roles, self.name_table, self.name_strength):
                        return alt
            paired = _best_pair(runs)
            if paired != chosen:
                alt = self._finish(story, e, paired, refs)
                chars = _labels(story, alt)
                if check_pronoun_sets(chars, story.roles, self.name_table, self.name_strength) == chars:
                    return alt
        return names, refs_out

    def _finish(self, story: StoryInput, e: _Encoded, chosen: list[list[int] | None], refs: list
                ) -> tuple[list, list]:
        """Names (as written, without a title that repeats the role) and references for the chosen
        name runs: a gendered title joins the references, and power-neutral Love's "first" role
        goes to the character the story introduces first."""
        names = [story.text[e.words[run[0]][1]:e.words[run[-1]][2]] if run else None for run in chosen]
        # "Nurse Emily" in a nurse's story is Emily: the title repeats the role (without_role_title)
        names = [without_role_title(n, role.description) for n, role in zip(names, story.roles)]
        # a gendered title is a reference too (Table S7: prefixes such as Mr, Mrs or Mx)
        refs = [_with_title_reference(n, rf) for n, rf in zip(names, refs)]
        # "first X" / "second X" (Love, power-neutral): the first character is the one the story
        # introduces first, as every such story of the training data is labelled
        if (len(story.roles) == 2 and chosen[0] and chosen[1] and chosen[1][0] < chosen[0][0]
                and _opens_with(story.roles[0].description, "first")
                and _opens_with(story.roles[1].description, "second")):
            names.reverse()
            refs.reverse()
        return names, refs

    def _references(self, w: _Words, slot: int) -> tuple[str, ...]:
        """Word types whose mean probability over their occurrences (``reference_pool="max"``: whose
        most probable occurrence) reaches the threshold, in order of first use; with ``pronoun_agreement``
        only the best-scoring pronoun family is kept."""
        import numpy as np

        if not w.types:
            return ()
        ids, n = w.type_ids, len(w.types)
        pr = w.probs[w.scored_idx, slot]
        if self.reference_pool == "max":
            score = np.full(n, -np.inf)
            np.maximum.at(score, ids, pr)
        else:  # occurrences summed in order, as a loop over them would (bincount adds in index order)
            score = np.bincount(ids, weights=pr, minlength=n) / np.bincount(ids, minlength=n)
        keep = np.flatnonzero(score >= self.threshold).tolist()  # type ids run in order of first use
        if self.pronoun_agreement:
            fams: dict[int, float] = {}
            for t in keep:
                f = _FAMILY.get(w.types[t])
                if f is not None:
                    fams[f] = max(fams.get(f, 0.0), float(score[t]))
            if len(fams) > 1:
                best = max(fams, key=fams.get)
                keep = [t for t in keep if _FAMILY.get(w.types[t], best) == best]
        return tuple(w.first[t] for t in keep)


def _opens_with(description: str, word: str) -> bool:
    """Whether a role description is ``word`` and a noun ("first friend"), in any case and spacing: the model reads
    "First  friend" as "first friend" (its prefix is split at whitespace, its tokenizer lower-cases)."""
    words = description.casefold().split()
    return len(words) > 1 and words[0] == word


@lru_cache(maxsize=1)
def _stop_words() -> frozenset[str]:
    """spaCy's English stop words ("at", "the", "then"): a capitalised one opens a sentence, no name."""
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(STOP_WORDS)


@lru_cache(maxsize=1)
def _titles_and_particles() -> tuple[frozenset[str], frozenset[str]]:
    """The titles a name run takes in front of it (the labellers' ``NAME_TITLES`` and the name parser's surname
    and first-name titles: "Major Thompson", "Sen. Hart", "Detective Ruiz"), and the particles that start a
    surname ("von Braun"). With the labellers' titles alone the model's "Thompson" of "Major Thompson" stayed
    "Thompson", which the name parser then took for a first name."""
    lists = name_lists()
    return NAME_TITLES | lists.surname_titles | lists.first_name_titles, lists.surname_particles


def _quoted_capitals(words: Sequence[tuple[str, int, int]], i: int, step: int) -> int | None:
    """From the quote mark at ``i``, the index of the matching quote mark ``step`` words on (+1 or -1)
    with one or two capitalised words between them; None when the words there are anything else. Double marks
    only: a nickname in single ones ("Mary Ann 'Mimi' Jones", "Grumpy 'Doc' Miller" opening a sentence) made a name
    of four words, which has no first name to the paper's parsing, or took a word of the sentence for one
    (session 59's review; the same holds of double marks, kept as the training labels write such names)."""
    for n in (1, 2):
        j = i + step * (n + 1)
        if not 0 <= j < len(words) or words[j][0] not in QUOTES:
            continue
        if all(starts_capitalised(words[i + step * m][0]) for m in range(1, n + 1)):
            return j
    return None


def _with_nickname(run: list[int], words: Sequence[tuple[str, int, int]], keys: Sequence[str], text: str
                   ) -> list[int]:
    """A name run with the quoted nickname and the name words on its other side ('Johnny "Harmonica"
    Mason', where the tagger often marks only "Mason" or only "Johnny": the quotes break the run), on its line: a
    run never crosses a line break (a list of the characters, 'Maya Lopez\n"Doc" Thomas Reed', gave one of them
    'Maya Lopez\n"Doc" Thomas')."""
    def name_word(i: int) -> bool:
        return 0 <= i < len(words) and starts_capitalised(words[i][0]) and keys[i] not in NAME_TITLES

    def one_line(a: int, b: int) -> bool:
        return not breaks_line(text[words[a][1]:words[b][2]])

    i = run[0] - 1
    if i >= 0 and words[i][0] in QUOTES:
        j = _quoted_capitals(words, i, -1)
        if j is not None and name_word(j - 1) and one_line(j - 1, run[0]):
            run = [*range(j - 1, i + 1), *run]
    i = run[-1] + 1
    if i < len(words) and words[i][0] in QUOTES:
        j = _quoted_capitals(words, i, 1)
        if j is not None and name_word(j + 1) and one_line(run[-1], j + 1):
            run = [*run, *range(i, j + 2)]
    return run


_GENDERS = ("Female", "Male", "Non-binary")


def keep_the_unshared_gender(characters: tuple[CharacterLabel, ...]) -> tuple[CharacterLabel, ...]:
    """``characters`` with a reference list that mixes genders (Unsure) cut by the words it shares with the
    other character: where dropping the shared words of one gender, and only of one, leaves the list one gender,
    those words are the other character's ("Ms. Patterson" holding "his", "He" beside "the boy" who holds them
    too: Female). A list that mixes genders is nearly always wrong (hand-labelled lists almost never do: see
    ``name_gender.keep_the_names_gender``, which cuts one by a strongly gendered first name first), and Unsure
    is never a right gender, so the cut only turns a miss into a gender. Two lists that share words of both
    genders ("Mr", "She" in each) tell nothing and stay; so do lists that share none ("Ms. Alvarez" with "he",
    "him": a third person's title, or the pronouns of an unlabelled one). Each list is read against the other
    as the tagger left it, so it follows the other character's list where that is wrong. With the shipped encoder
    it changed 4 characters of the seven held-out files, each from Unsure to its gold gender, none of the training
    files or train150, and no gold list of the project's files; on dev, 1 character, from Unsure to a wrong gender
    in a story whose other character the tagger had already given the wrong one (``benchmarks/RESULTS.md``,
    section ``labelling-layers``, session 61)."""
    if len(characters) != 2:
        return characters
    lexicon = default_lexicon()

    def categories(word: str) -> frozenset[str]:
        return frozenset(cat for cat, _ in explain_gender([word], lexicon=lexicon).matches)

    out = list(characters)
    for x, (c, other) in enumerate(((characters[0], characters[1]), (characters[1], characters[0]))):
        mixed = explain_gender(list(c.references), lexicon=lexicon)
        if mixed.gender != "Unsure":
            continue
        theirs = {w.lower().rstrip(".") for w in other.references}
        cuts = []
        for cat in sorted({cat for cat, _ in mixed.matches}):
            shared = {w for w in c.references if w.lower().rstrip(".") in theirs and categories(w) == {cat}}
            kept = tuple(w for w in c.references if w not in shared)
            if shared and infer_gender(list(kept), lexicon=lexicon) in _GENDERS:
                cuts.append(kept)
        if len(cuts) == 1:
            out[x] = replace(c, references=cuts[0])
    return tuple(out)


def _exchanged(chars: tuple[CharacterLabel, CharacterLabel]) -> tuple[CharacterLabel, CharacterLabel]:
    """Two characters' labels with their names and references exchanged (roles and status stay)."""
    a, b = chars
    return replace(a, name=b.name, references=b.references), replace(b, name=a.name, references=a.references)


def _with_title_reference(name: str | None, refs: tuple[str, ...]) -> tuple[str, ...]:
    """``refs`` with the name's leading title when the gender lexicon genders it ("Mr." of "Mr.
    Thompson", "Mx." of "Mx. Lee", and of "Mr.Thompson" written without its space; not "Dr." or
    "Chef"), as the labelling prompt asks for prefixes. The encoder tags a title as part of the name and
    seldom also as a reference, so a character met only as "Mr. Thompson" was left Unspecified."""
    if not name:
        return refs
    head = name.split()[0]
    title, dot, rest = head.partition(".")
    if dot and rest and title.lower() in NAME_TITLES:  # "Mr.Thompson": the title is "Mr."
        head = title + dot
    key = head.lower().rstrip(".")
    if key not in NAME_TITLES or any(r.lower().rstrip(".") == key for r in refs):
        return refs
    if infer_gender([head], lexicon=default_lexicon()) == "Unspecified":
        return refs
    return (head, *refs)


def _unstated_words(text: str | None, words: Sequence[tuple[str, int, int]]) -> list[bool]:
    """For each story word, whether it is part of a pronoun of unstated gender ("s/he", "he or she":
    ``gender.epicene_spans``): its "he" refers to nobody's gender, so no role scores it and no binding
    gives it to a character."""
    out = [False] * len(words)
    starts = [start for _, start, _ in words]  # in order: a span's words found by bisection, not a scan each
    for a, b in epicene_spans(text) if text else ():
        for i in range(bisect_left(starts, a), bisect_left(starts, b)):
            out[i] = True
    return out


#: Abbreviations written with a point inside a name ("Ethan St. James", "Marie Ste. Croix").
NAME_ABBREVIATIONS = frozenset({"st", "ste"})


#: The marks a name run's key holds for the gender of its title (``_title_gender``), beside its name words.
TITLE_GENDERS = frozenset({"<Female>", "<Male>", "<Non-binary>"})


@lru_cache(maxsize=256)
def _title_gender(title: str) -> frozenset[str]:
    """The mark of a title's gender for a name run's key ("Mr" -> {"<Male>"}; "Dr" -> none)."""
    gender = infer_gender([title], lexicon=default_lexicon())
    return frozenset({f"<{gender}>"}) & TITLE_GENDERS


def _same_character(a: frozenset, b: frozenset) -> bool:
    """Whether two name runs' keys (see ``WordDecoder._name_runs``) can name one character: the name words of
    one are among the other's ("Ana", "Dr. Ana Ruiz"), and their titles' genders, where both have one, are one
    ("Mr. Patel" and "Mrs. Patel" are two; "Mr. Patel" and "Raj Patel" may be one)."""
    ga, gb = a & TITLE_GENDERS, b & TITLE_GENDERS
    if ga and gb and ga != gb:
        return False
    return _name_words(a) <= _name_words(b) or _name_words(b) <= _name_words(a)


def _name_words(key: frozenset) -> frozenset:
    """A name run's key without the mark of its title's gender."""
    return key - TITLE_GENDERS


def _is_taken(a: frozenset, won: frozenset, taken: Sequence[frozenset]) -> bool:
    """Whether a run of the role that lost a character to the other names that character: ``won`` is the winner's
    first run, ``taken`` every run that may name the same one. A run may be the winner's character, or only a
    shorter writing of a taken run ("Ruiz" of "Ana Ruiz"); "Tomás Ruiz" is not taken by "Mrs. Ruiz", which would
    be the same character only as "Ruiz" is (a couple's surname)."""
    return _same_character(a, won) or any(_same_character(a, t) and _name_words(a) <= _name_words(t) for t in taken)


def _own_runs(runs: list[list[tuple[frozenset, list[int], float]]], words: Sequence[tuple[str, int, int]], text: str
              ) -> list[list[tuple[frozenset, list[int], float]]]:
    """Each role's name runs without those right after the other role's run on its line: such a run continues
    that name ("Jamal" tagged for one role, "Carter" of "Jamal Carter" for the other), no name of its own; on the
    next line it is a name of its own ("Maya Patel\nEthan Brooks", a list of the characters). The run it continues
    takes its name words into its key: a later "Carter" of this role is then that character, not another (it
    filled both roles). A run of titles alone inside the other role's run is no name either: the title that run
    took in front of it ("Mr" tagged for one role, "Thompson" of "Mr. Thompson" for the other, named the first role
    "Mr" with the reference "Mr")."""
    if len(runs) != 2:
        return runs
    titles = _titles_and_particles()[0]
    runs = [list(rs) for rs in runs]
    for r in (0, 1):
        ends = {run[-1]: n for n, (_, run, _) in enumerate(runs[1 - r])}
        kept = []
        for x in runs[r]:
            if x[0] <= titles and any(set(x[1]) < set(run) for _, run, _ in runs[1 - r]):
                continue
            if (end := _continued(x[1], ends, words, text)) is not None:
                n = ends[end]  # the run it continues: "Jamal" of "Jamal Carter", written as tagged
                key, run, score = runs[1 - r][n]
                runs[1 - r][n] = (key | x[0], run, score)
            else:
                kept.append(x)
        runs[r] = kept
    return runs


def _continued(run: list[int], ends: Collection[int], words: Sequence[tuple[str, int, int]], text: str
               ) -> int | None:
    """The end (one of ``ends``) of the run that ``run`` starts right after, on its line, or None. A run that ends
    at an initial goes on past its point, as ``_name_runs`` reads "J. Cole" and "John F. Kennedy": "Cole" of "A.J.
    Cole", tagged for the other role, continued "A.J", and named the teacher Cole."""
    i = run[0]
    if i - 1 in ends:
        end = i - 1
    elif (i >= 2 and i - 2 in ends and words[i - 1][0] == "." and words[i - 2][2] == words[i - 1][1]
          and len(words[i - 2][0]) == 1 and words[i - 2][0].isupper()):
        end = i - 2
    else:
        return None
    return None if breaks_line(text[words[i - 1][2]:words[i][1]]) else end


def _continues(run: list[int], ends: Collection[int], words: Sequence[tuple[str, int, int]], text: str) -> bool:
    """Whether ``run`` starts right after a run that ends at one of ``ends``, on its line (``_continued``)."""
    return _continued(run, ends, words, text) is not None


def _labels(story: StoryInput, names_refs: tuple[list, list]) -> tuple[CharacterLabel, ...]:
    """Candidate labels from ``_finish``'s names and references, for the name check to read."""
    return tuple(CharacterLabel(role.key, n, rf) for role, n, rf in zip(story.roles, *names_refs))


def _best_pair(runs: list[list[tuple[frozenset, list[int], float]]]) -> list[list[int] | None]:
    """The first runs of the two different characters (or none) that score highest over both roles.

    A role's runs that name one character are one candidate, scored by the sum of their scores;
    each role that gets a name adds 1 (the published stories nearly always name both characters).
    The pair picked by each role's first run alone can leave a role empty: in "Owen Gallagher ...
    Yasmin Haddad ... Owen laughed" the payer's slot tags both full names and the other slot only
    the last "Owen", so both roles' first runs are Owen's, while the pair (Yasmin, Owen) is the one
    both slots support."""
    slots = []
    for rs in runs:
        cands: list[list] = []  # [name words, first run, summed score]
        for key, run, score in rs:
            hits = [c for c in cands if _same_character(key, c[0])]
            if not hits:
                cands.append([key, run, score])
                continue
            # a fuller run joins candidates met apart ("Ana", then "Ruiz", then "Ana Ruiz"): one character;
            # a shorter one joins the earliest only ("Smith" after "Emma Smith" and "Jack Smith")
            c = hits[0]  # the earliest, whose first run comes first
            for other in (o for o in hits[1:] if _name_words(o[0]) <= _name_words(key)):
                c[2] += other[2]
                c[0] = other[0] if len(other[0]) > len(c[0]) else c[0]
                cands.remove(other)
            c[2] += score
            c[0] = key if len(key) > len(c[0]) else c[0]
        slots.append([*cands, None])
    best, pair = -1.0, [None, None]
    for a in slots[0]:
        for b in slots[1]:
            if a is not None and b is not None and _same_character(a[0], b[0]):
                continue
            score = sum(c[2] + 1.0 for c in (a, b) if c is not None)
            if score > best:
                best, pair = score, [a[1] if a else None, b[1] if b else None]
    return pair


@dataclass(frozen=True)
class _Words:
    """Per-word views of one story's word-piece probabilities, computed once for all four slots.

    probs: (words, 4) probability of each word's first piece (zeros where truncated away);
    scored: words that count (a first piece survives truncation, the word is not punctuation, nor part
    of a pronoun of unstated gender: "he" of "s/he" or "he or she" refers to nobody's gender,
    ``gender.epicene_spans``);
    scored_idx: their indices as a list; keys: each word case-folded (the unit of reference types);
    types: the scored words' reference types in order of first use; type_ids: each scored word's type (an index
    into types); first: each type as its first occurrence is written.
    """

    probs: Any
    scored: Any
    scored_idx: list[int]
    keys: list[str]
    types: list[str]
    type_ids: Any
    first: list[str]

    @classmethod
    def of(cls, e: _Encoded, p, unstated: Sequence[bool] | None = None) -> _Words:
        import numpy as np

        p = np.asarray(p)
        tok = np.asarray(e.word_token, dtype=np.int64).reshape(-1)
        valid = tok >= 0
        probs = np.zeros((len(tok), p.shape[1]), dtype=np.float64)
        probs[valid] = p[tok[valid]]
        words = [w for w, _, _ in e.words]
        scored = valid & np.array(list(map(is_split_word, words)), dtype=bool)
        if unstated is not None and any(unstated):
            scored &= ~np.array(unstated, dtype=bool)
        idx = scored.nonzero()[0].tolist()
        keys = fold_words(words)
        types: dict[str, int] = {}
        ids, first = [], []  # first: each type as its first occurrence is written
        for i in idx:
            t = types.get(keys[i])
            if t is None:
                t = types[keys[i]] = len(types)
                first.append(words[i])
            ids.append(t)
        return cls(probs, scored, idx, keys, list(types), np.asarray(ids, dtype=np.intp), first)


__all__ = ["PRONOUN_FAMILIES", "REFERENCE_POOLS", "WordDecoder"]
