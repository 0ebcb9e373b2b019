"""Story words as the labellers read them: split with character offsets (``split_words``), case-folded
(``fold_word``, ``fold_words``), whether a "her" is a determiner (``her_is_possessive``), which the
gender flip of training and the pronoun binding of decoding both ask, and which single quotation marks are
a story's dialogue marks (``single_quote_dialogue``, ``as_double_quotes``)."""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from collections.abc import Sequence

from harness.labelling.base import QUOTES as _QUOTES
from harness.labelling.base import APOSTROPHES as _APOSTROPHES
from harness.labelling.base import LINE_BREAK_CLASS as _LINE_BREAK_CLASS
from harness.labelling.base import LINE_BREAKS as _LINE_BREAKS


def _combining_marks() -> str:
    """Every combining mark (Unicode categories Mn, Mc and Me: accents, the vowel signs and viramas of the
    Indic scripts, Thai vowels and tones, Arabic and Hebrew points) as the ranges of a character class.
    None lies below U+0300 or between U+20000 and the variation selectors at U+E0100 (about 16 ms)."""
    ranges: list[list[int]] = []
    for cp in (*range(0x300, 0x20000), *range(0xE0100, 0xE01F0)):
        if unicodedata.category(chr(cp))[0] == "M":
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


#: Combining marks, for a character class: what continues a word written with them ("Garci" + U+0301 + "a",
#: "प्रिया", "สมศักดิ์") though ``re``'s ``\w`` takes none of them.
COMBINING_MARKS = _combining_marks()
# inside a word: combining marks and invisible format marks (soft hyphen, zero-width space and joiners, word
# joiner), which a word never starts with
_INNER = COMBINING_MARKS + "\u00ad\u200b-\u200d\u2060"
_PART = rf"[^\W_]+(?:[{_INNER}]+[^\W_]*)*"
#: Words an apostrophe opens, where it follows a space inside a sentence ("get 'em", "rode 'til dawn"); any other
#: apostrophe after a space or a line's start opens a single quotation ("'Maya, wait!'", "'She is late,' he said"),
#: an elision's too at the start of the text, a line or a sentence ("'Cause I said so,' Mum said": a lone "'Twas"
#: there is an unpaired mark, which no quotation takes), a sentence's after two spaces or a closing quotation mark
#: too ("'Why?' 'Cause I said so,' Mum said").
_ELISIONS = "em|til|tis|twas|cause|cos|cuz|bout|round|n|nuff|kay"
# an apostrophe and letters are one word (a clitic: "'s", "'ll", the "'Brien" of "O'Brien") written right
# after a word (not after an invisible mark alone: "\u200b'Let me go,'" opens a quotation), or an elision; elsewhere
# the apostrophe is a word of its own and its word another
_WORD = re.compile(rf"{_PART}(?:[-\u2010\u2011]{_PART})*"
                   rf"|(?<=[\w{_INNER}])(?<!^[{_INNER}])(?<![^\w{_INNER}][{_INNER}])"
                   rf"['\u2019][^\W\d_]+(?:[{_INNER}]+[^\W_]*)*"
                   rf"|(?<=[^\S\r\n\v\f\x1c-\x1e\x85\u2028\u2029])(?<![.!?\u2026]\s)(?<![.!?\u2026]\s\s)"
                   rf"(?<![.!?\u2026]['\u2019\"\u201d]\s)['\u2019](?i:{_ELISIONS})(?![\w{_INNER}])"
                   r"|[^\w\s]|_")


def split_words(text: str) -> list[tuple[str, int, int]]:
    """Story words with character offsets; possessive/clitic endings ("'s") are words of their own, and so
    is an apostrophe that opens a single quotation ("'She is late,' he said": "'", "She", ...).

    >>> [w for w, _, _ in split_words("'Maya, wait!' Tom's O'Brien got 'em")]
    ["'", 'Maya', ',', 'wait', '!', "'", 'Tom', "'s", 'O', "'Brien", 'got', "'em"]
    """
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def line_starts(text: str, words: Sequence[tuple[str, int, int]]) -> list[int]:
    r"""Indices of the words (``split_words``) that start a line: a line break (``base.breaks_line``)
    stands between each and the word before it.

    >>> line_starts("Maya Patel\nEthan Brooks\r\n\nThe end", split_words("Maya Patel\nEthan Brooks\r\n\nThe end"))
    [2, 4]
    """
    if _LINE_BREAKS.isdisjoint(text):
        return []
    # each break, found once in the text, marks the word after it (one bisection each, not a slice per word)
    starts = [start for _, start, _ in words]
    out = set()
    for m in _LINE_BREAK.finditer(text):
        k = bisect_right(starts, m.start())
        if 1 <= k < len(words) and words[k - 1][2] <= m.start():  # between two words, not inside the one before
            out.add(k)
    return sorted(out)


_LINE_BREAK = re.compile(_LINE_BREAK_CLASS)


#: What may stand right before a single quotation mark that opens a quotation, and right before one that
#: closes it: a closing mark follows the quotation's last punctuation ("'Let me pay,' he said"), which an
#: apostrophe ending a plural possessive ("the students' books") never does.
_BEFORE_OPENING = frozenset("([{\u2014\u2013")  # and any space or line break (``str.isspace``)
#: Marks no reader sees, which may start a text before its first quotation (a byte-order mark, a zero-width space).
_UNSEEN_START = "\ufeff\u200b\u2060"
_BEFORE_CLOSING = frozenset(".,!?;:\u2026\u2014\u2013-")


def single_quote_dialogue(text: str, words: Sequence[tuple[str, int, int]]) -> list[int]:
    """Indices of the words (``split_words``) that are single quotation marks used as a story's dialogue
    marks, in pairs: an opening mark after a space, a line's start or a bracket and glued to the word it
    opens; a closing mark after the quotation's last punctuation, before a space, a line's end or more
    punctuation. An opening mark that meets another opening one before its closing one is dropped (an
    elision the splitter does not know, a quotation carried over a paragraph break). None in a story that
    writes a double quotation mark: there single quotes are quotations inside quotations.

    >>> t = "'Let me pay,' Sam said. The students' books were 'vintage'."
    >>> [split_words(t)[i][0] for i in single_quote_dialogue(t, split_words(t))]
    ["'", "'"]
    """
    if any(w in _QUOTES for w, _, _ in words):
        return []
    out: list[int] = []
    opening = None
    for k, (w, start, end) in enumerate(words):
        if w not in ("'", "\u2018", "\u2019"):
            continue
        glued = k + 1 < len(words) and words[k + 1][1] == end and words[k + 1][0][:1].isalnum()
        before = text[start - 1] if start else " "
        if w != "\u2019" and glued and (before.isspace() or before in _BEFORE_OPENING or (
                before in _UNSEEN_START and not text[:start].strip(_UNSEEN_START))):
            opening = k
        elif (w != "\u2018" and opening is not None and start > 0 and text[start - 1] in _BEFORE_CLOSING
              and (end == len(text) or not text[end].isalnum())):
            out += [opening, k]
            opening = None
    return out


def as_double_quotes(text: str, words: Sequence[tuple[str, int, int]], marks: Sequence[int]
                     ) -> tuple[str, Sequence[tuple[str, int, int]]]:
    """The story's text and words with the single quotation marks at ``marks`` (``single_quote_dialogue``)
    written as straight double ones, character for character, so that every reader of quotations
    (``base.quoted``, the action check's parse) reads them alike; offsets are unchanged. Without marks, the
    text and words as given (not copied)."""
    if not marks:
        return text, words
    chars, out = list(text), list(words)
    for k in marks:
        _, start, end = out[k]
        chars[start] = '"'
        out[k] = ('"', start, end)
    return "".join(chars), out


#: Marks that show nothing and mean nothing inside a word: soft hyphen, zero-width space, word joiner, BOM (not
#: the zero-width joiners, which spell Indic and Persian words).
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u2060\ufeff"))


def fold_word(w: str) -> str:
    """A word as reference types and the word lists compare it: case-folded, a curly apostrophe made straight,
    composed (NFC: a decomposed "Señora", as macOS writes it, is the title "señora" of the lists), without the
    invisible marks a word may hold (a soft hyphen, a zero-width space, a word joiner: "Rive\u00adra" is "rivera";
    a word of them alone keeps them)."""
    return unicodedata.normalize("NFC", w.casefold().replace("\u2019", "'")).translate(_INVISIBLE) or w


def fold_words(words: Sequence[str]) -> list[str]:
    """``fold_word`` of each word, in one pass over their text: case folding and composition map each word
    on its own (NUL composes with nothing), so folding the words joined by NUL and splitting again gives each
    word's folding (a story with a NUL of its own is folded word by word)."""
    out = unicodedata.normalize("NFC", "\0".join(words).casefold().replace("\u2019", "'")).translate(_INVISIBLE)
    out = out.split("\0")
    return [f or w for f, w in zip(out, words)] if len(out) == len(words) and words else [fold_word(w) for w in words]


def starts_capitalised(w: str) -> bool:
    """Whether a word starts as a name does: with a capital letter ("Ana", "Юлия"), or with a letter of a
    script that has no case (Chinese, Japanese, Korean, Arabic, Hebrew, Devanagari, Thai: "李明", "محمد"),
    whose names a capital cannot mark.

    >>> [starts_capitalised(w) for w in ["Ana", "ana", "Юлия", "李明", "محمد", "ß", "42", "'s", ""]]
    [True, False, True, True, True, False, False, False, False]
    """
    c = w[:1]
    # Georgian's letters have no capitals in everyday writing, yet Unicode files them as lowercase (its paragraph
    # separator, U+10FB, sits among them and is no letter)
    return c.isupper() or (c.isalpha() and not c.islower()) or (c.isalpha() and "\u10d0" <= c <= "\u10ff")


#: What an apostrophe glues to a word without making a name of it ("Maya's", "can't", "ma'am").
_CLITICS = frozenset({"s", "t", "d", "m", "ll", "re", "ve", "em", "n", "am", "til", "cause", "all"})


def glued_name_part(words: Sequence[tuple[str, int, int]], k: int) -> bool:
    """Whether word ``k`` is the rest of a name that an apostrophe splits ("'Brien" of "O'Brien",
    "'Nae" of "Ja'Nae", "'shawn" of "De'shawn"): an apostrophe and letters, written right after the
    word before it, which is capitalised, and no clitic ending ("'s", "'ll", "'t", ...)."""
    if not 0 < k < len(words):
        return False
    w, start, _ = words[k]
    # a lone apostrophe (the possessive of "James' book", a closing single quote: "'Sit, Maya', he
    # said") has no letters: no name part
    return (len(w) > 1 and w[0] in "'\u2019" and start == words[k - 1][2]
            and starts_capitalised(words[k - 1][0]) and not is_clitic(w[1:]))


def is_clitic(rest: str) -> bool:
    """Whether ``rest``, what follows an apostrophe, is a clitic's ending ("s", "ll", "d", "til") or nothing, not the
    rest of a name ("Brien")."""
    return not rest or rest.casefold() in _CLITICS


def is_word(w: str) -> bool:
    """Whether a token holds a letter or digit (not punctuation alone)."""
    return any(c.isalnum() for c in w)


def is_split_word(w: str) -> bool:
    """``is_word`` for a token of ``split_words``, without its loop over the characters: those tokens
    are words (letters or digits, "'s") or single punctuation marks, so a token of more than one
    character, or an alphanumeric one, is a word (a decoding pass per story calls it for every token)."""
    return len(w) > 1 or w.isalnum()


def phrase_tokens(phrase: str) -> list[str]:
    """A name or reference as the folded words to look for in a story ("Dr. Ana Ruiz" -> dr, ana, ruiz),
    without a clitic ending ("'s"; so "O'Brien" is "o"). A word after an apostrophe that another word follows is
    kept: "O'Brien-Smith" is "o", "'brien", "smith", as the story writes it (without it the run was found nowhere)."""
    ws = [w for w, _, _ in split_words(phrase) if is_word(w)]
    return [fold_word(w) for k, w in enumerate(ws) if k + 1 < len(ws) or not w.startswith(_APOSTROPHES)]


def find_all(words: list[str], seq: list[str]) -> list[int]:
    """Every index at which ``seq`` occurs in ``words`` (none for an empty ``seq``)."""
    n = len(seq)
    return [i for i in range(len(words) - n + 1) if n and words[i:i + n] == seq]


#: Words after which "her" is an object ("gave her the book", "saw her and ..."), not a determiner; a
#: determiner cannot follow one ("handed her his keys", "told her something"), nor a pronoun or an
#: auxiliary ("told her he was", "the one who saw her had"). Degree adverbs ("very", "so", "more", "too")
#: are not here: ``her_is_possessive`` reads what follows them.
_AFTER_OBJECT_HER = frozenset(
    "and or but nor to for with as at in into on onto up down back off out over that the a an again from by "
    "about away home once now then when while if because before after through across around this tonight today "
    "tomorrow yesterday how what why where who whom until all like is was be feel know than "
    "his my your our their its her these those some any another something anything everything nothing "
    "he she it we they you i him them me us were are am been had has have would could should did does "
    # words no determiner precedes: "reminded her of", "told her not to", "left her there|alone", "gave her no
    # choice", "beside her must"; "will", "might", "may" and "can" are nouns too ("her will", "all her might")
    "of not no each there here alone afterward afterwards instead yet either must shall cannot which whose "
    "upon against without within toward towards among between beside besides behind under beneath above below "
    "near along since till during throughout herself himself themselves myself yourself ourselves itself "
    "everyone everybody someone somebody anyone anybody nobody anyway anyhow everywhere somewhere anywhere nowhere "
    "halfway "
    # the shortened forms ``split_words`` keeps as one word ("loved her 'cause", "kept her 'til dawn")
    "'cause 'cos 'cuz cos cuz 'til 'bout 'round 'em".split())
#: Prepositions after which "her back" is a determiner and its noun ("behind her back", "lay on her back"; "paid
#: her back" keeps its object).
_BEFORE_HER_BACK = frozenset("on onto behind at in into to from across over against down up of around".split())
#: Verbs after which "her" and a bare infinitive are object and verb ("let her go", "made her laugh", "helped her
#: carry", "watched her leave"), not a determiner and its noun ("made her way", "helped her friend").
_BARE_INFINITIVE_VERBS = frozenset(
    "let lets letting make makes made making help helps helped helping bid bade watch watches watched watching "
    "see sees saw seeing hear hears heard hearing notice notices noticed noticing".split())
#: Verbs in the base form, read as such after ``_BARE_INFINITIVE_VERBS`` and "her". Words that are as often a
#: noun after "her" there are left out ("made her way|move|mark|point|bed|choice|rounds|order|debut|visit").
_BARE_VERBS = frozenset(
    "go come leave stay sit stand walk run fall fly drive ride swim dance sing play win lose forget remember know "
    "think believe understand realize see look hear listen feel taste smell decide choose pick try begin start "
    "stop finish keep hold carry take give bring put get make do say tell ask answer explain speak talk whisper "
    "shout laugh smile cry weep sob scream sigh nod shrug blush frown wonder worry relax rest sleep wake eat drink "
    "cook bake clean wash pay buy sell spend borrow lend read write sign fill draw paint build fix open close "
    "shut lock enter cross climb jump step turn hang lean kneel bend reach grab catch throw push pull lift drop "
    "pack solve learn teach study practice practise train prepare change grow freeze shake tremble "
    "untangle shape narrate whisk stir pour chop slice escape recover heal breathe succeed fail pass graduate "
    "apply agree accept admit confess promise pretend hesitate struggle suffer doubt trust hope wish wait "
    "continue return arrive follow lead join meet help find appreciate celebrate".split())
#: Verbs after which "her" and a word in -ing are object and participle ("found her crying in the hall", "saw her
#: leaving."), where the word after the participle ends the phrase (not "found her missing earring").
_PARTICIPLE_VERBS = frozenset(
    "see sees saw seen seeing watch watches watched hear hears heard find finds found catch catches caught "
    "notice notices noticed spot spots spotted keep keeps kept leave leaves left imagine imagined picture pictured "
    "feel feels felt".split())
#: Words in -ing that are nouns, not participles ("saw her wedding.", "found her painting.").
_ING_NOUNS = frozenset(
    "wedding morning evening building painting drawing clothing ceiling sibling darling thing string earring "
    "offspring stocking pudding meeting feeling ending beginning duckling ring king wing sing".split())
#: Adverbs that may stand between a determiner "her" and its adjective ("her very best friend", "her most
#: trusted advisor", "her always cheerful smile"), as well as after an object "her" ("loved her very much");
#: besides these, words in -ly (``_LY_NOT_ADVERBS`` aside).
_ADVERBS = frozenset(
    "very so most more too much less least quite rather still always never often sometimes already also almost "
    "ever".split())
#: Words that continue a run of adverbs, though each could be an adjective on its own ("hugged her so hard
#: that", "her very close friend"; "her long, dark hair" has no adverb).
_FLAT_ADVERBS = frozenset("much hard long close tight well fast enough far deep high low loud".split())
#: Words in -ly that are adjectives or nouns, not adverbs ("her family", "her only son", "her weekly lunch").
_LY_NOT_ADVERBS = frozenset(
    "family only early daily weekly monthly yearly nightly hourly quarterly friendly unfriendly lovely lonely "
    "elderly ugly holy silly jolly curly lively costly deadly likely unlikely orderly belly ally rally bully jelly "
    "assembly supply reply butterfly lily folly melancholy homely manly womanly motherly fatherly sisterly brotherly "
    "scholarly heavenly worldly earthly ghostly ghastly cowardly timely unruly wobbly bubbly prickly sickly smelly "
    "chilly frilly woolly wrinkly sparkly cuddly comely courtly leisurely lowly portly saintly shapely stately "
    "surly burly wily steely gangly scraggly grisly oily bodily july italy anomaly monopoly homily".split())
_SENTENCE_END = frozenset(".!?\u2026")  # an ellipsis character ends one as "..." does
EMPHASIS_MARKS = frozenset("*_")  # markdown's emphasis marks, which some models write around words
#: Nouns a degree adverb can precede ("did her very best", "a room of her very own").
_ADVERB_NOUNS = frozenset("best own worst utmost hardest".split())
#: After the adjective of "her" + adverb + adjective, a word that ends the phrase: the adjective is
#: predicative ("made her very happy and ..."), the "her" an object ("home" aside: "her newly built home").
_AFTER_PREDICATE = _AFTER_OBJECT_HER - {"home"}


def _is_adverb(w: str, first: bool) -> bool:
    """Whether a folded word is an adverb here; ``first``: right after "her" (no flat adverb there)."""
    return w in _ADVERBS or (not first and w in _FLAT_ADVERBS) or (
        len(w) > 3 and w.endswith("ly") and w not in _LY_NOT_ADVERBS)


def her_is_possessive(words: Sequence[str], i: int) -> bool:
    """Whether ``words[i]`` ("her") is a determiner: a word follows and it is not a function word, and
    where it is an adverb, an adjective or noun follows the adverbs and the phrase goes on after it.

    "her" before an adverb is an object when the adverbs end the clause or a function word follows them
    ("told her quietly", "thanked her profusely for", "loved her very much"), or when the word after them
    ends the phrase itself ("made her very happy.", "watched her slowly walk away": a predicate or a verb);
    it is a determiner before an adjective and its noun ("her very best friend", "her most trusted
    advisor", "her carefully chosen words") and before "best" or "own" ("did her very best"). A word
    that may be an adverb or an adjective is an adverb right after "her" only at the end of a sentence
    ("held her close."). A verb after the adverbs is read as one where a function word follows it ("saw her
    slowly cross the street": an object); one followed by a content word ("saw her slowly cross Main Street")
    cannot be told from an adjective and its noun without a parse, which this path has none of: a determiner.

    After a verb that takes an object and a bare infinitive ("let", "made", "helped", "watched"), "her" before a
    verb of ``_BARE_VERBS`` is an object ("let her go", "made her laugh"; "made her way" keeps its determiner);
    after a verb of seeing or finding, so is "her" before a word in -ing that ends the phrase ("found her crying
    in the hall", not "found her missing earring").

    Markdown's emphasis marks around "her" and the words after it are read past ("her **best friend**", "let her
    *go*", "*held her close*.").

    >>> texts = ["told her quietly", "met her very best friend", "made her very happy ."]
    >>> [her_is_possessive(t.split(), 1) for t in texts]
    [False, True, False]
    """
    if not EMPHASIS_MARKS.isdisjoint(words[max(i - 2, 0):i + 4]):  # the test reads a few words ahead: a window of
        # them, not the rest of the story copied for each "her" (quadratic: 14 s at 100,000 words with 5,000 "*her*"),
        # with the word before "her", which the window dropped ("let her *go*" read as "her go")
        before = [w for w in words[max(i - 3, 0):i] if w not in EMPHASIS_MARKS][-1:]
        words, i = [*before, words[i], *(w for w in words[i + 1:i + 65] if w not in EMPHASIS_MARKS)], len(before)
    n = len(words)
    if i + 1 >= n or not is_word(words[i + 1]):
        return False
    w = fold_word(words[i + 1])
    verb = fold_word(words[i - 1]) if i > 0 else ""
    if w in ("back", "home") and verb in _BEFORE_HER_BACK:  # "to her home" (but "drove her home")
        return True
    if w in _AFTER_OBJECT_HER:
        return False
    if verb in _BARE_INFINITIVE_VERBS and w in _BARE_VERBS:
        return False  # "let her go", "made her laugh"
    if verb in _PARTICIPLE_VERBS and w.endswith("ing") and w not in _ING_NOUNS and (
            i + 2 >= n or not is_word(words[i + 2]) or fold_word(words[i + 2]) in _AFTER_PREDICATE):
        return False  # "found her crying in", "saw her leaving."
    if w in _FLAT_ADVERBS and (i + 2 >= n or words[i + 2] in _SENTENCE_END):
        return False  # "held her close.", "wished her well." (but "her long, dark hair")
    if not _is_adverb(w, True):
        return True
    j = i + 2
    while j < n and is_word(words[j]) and _is_adverb(fold_word(words[j]), False):
        j += 1
    last = fold_word(words[j - 1])
    if (j - 1 > i + 1 and last in _FLAT_ADVERBS and last not in _ADVERBS and j < n and is_word(words[j])
            and fold_word(words[j]) not in _AFTER_PREDICATE):
        return True  # "her very close friend": the flat word ends the adverbs as their adjective, before its noun
    if j >= n or not is_word(words[j]) or fold_word(words[j]) in _AFTER_OBJECT_HER:
        return False
    if fold_word(words[j]) in _ADVERB_NOUNS:
        return True
    return j + 1 < n and is_word(words[j + 1]) and fold_word(words[j + 1]) not in _AFTER_PREDICATE


__all__ = ["COMBINING_MARKS", "EMPHASIS_MARKS", "as_double_quotes", "find_all", "fold_word", "fold_words",
           "glued_name_part", "her_is_possessive", "is_clitic", "is_split_word", "is_word", "line_starts",
           "phrase_tokens", "single_quote_dialogue", "split_words", "starts_capitalised"]
