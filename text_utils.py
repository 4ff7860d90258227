"""Reading text: words, names, numbers, years, dates, table rows and sentences, each pattern written once.

Every module that reads a page, a question or an answer uses these helpers, so one
question is split into words the same way by the retriever, the evidence lines, the
context picker and the citation checker, and every sentence is cut by one splitter,
told what ends it. Nothing here imports a model or the store: it is plain ``re``,
``config`` for the English stopword list, and ``language`` for other languages'
stopwords and Snowball stemmers (pure Python, loaded on first use of a language).

    text -> tokenize(text, language="en")
                                   keyword-search words: lower-cased, stopwords out,
                                   "FY19" -> "fy 2019", "Fig. 3" -> also "figure_3";
                                   in English exactly that; in another language also:
                                   its stopwords (and English ones) out, words stemmed
                                   ("Paketen" -> "pak"; "apt-get", "ext4" as written),
                                   Chinese/Japanese/Korean/Thai runs cut into character
                                   pairs ("設定ファイル" -> "設定", "定フ", "ファ", ...)
         -> cell_words(tokens)     the tokens as a table's cells are named by them: "assets" -> "asset"
         -> keyword_tokens(text, language="en")
                                   + "^pss" for each name's initials and word in capitals
         -> WORD / WRITTEN_WORD / LETTER_RUN
                                   "GPT-4o's" -> "GPT", "4o", "s" / "GPT-4o's" / "GPT", "o", "s"
         -> names_in()             "Sales of GPT-4o rose in Berlin's" -> {"gpt-4o", "berlin"} (currencies name nothing)
         -> names_with_initials()  "Pew Research Center" -> ("prc", ...)
         -> without_possessive()   "Costco's" -> "Costco"
         -> numbers_in()           "3,200" -> "3200"
         -> number_words_as_digits()
                                   "seven working days" -> "7 working days" (as the checker reads a page)
         -> years_named()          "FY19", "fiscal year 2019", "2019" -> "2019"
         -> years_in() / one_year_spans() / is_period_cell()
         -> months_in()
         -> is_table_row() / table_cells()
                                   "| Net sales | 3,226.8 |" -> ["Net sales", "3,226.8"]
         -> sentence_spans()       (start, end) of each sentence or line; the marks that end one, what
                                   stays with it, line breaks and abbreviations are its arguments
                                   (a page's lines, a question's sentences, evidence prose, an answer's
                                   sentences with their citation markers)

Years are built from one fragment (``YEAR``: 1900-2099), so "what counts as a year" is
decided in one place; the patterns below differ only in where a year may stand.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Callable, Iterable

import config
import language as languages

# -----------------------------------------------------------------------------
# Years: one fragment, the places it may stand

YEAR = r"(?:19|20)\d\d"
FY = r"FY\s?'?"  # "FY2019", "FY 2019", "FY'19"

YEAR_TOKEN = re.compile(rf"^{YEAR}$")  # a figure that is a year: "2019"
# A year standing in text, not inside a larger number ("2,011", "12019") or an amount ("$2019")
_YEAR_IN_TEXT = re.compile(rf"(?<![\d,.$]){YEAR}(?![\d]|[,.]\d)")
# A span of years: "2003-04", "2002 to 2003", "2001-2005"
YEAR_SPAN = re.compile(rf"\b({YEAR})\s*(?:-|–|/|\bto\b|\band\b)\s*({YEAR}|\d\d)\b")
# A year however a question or filing writes it: "FY2019", "FY 19", "fiscal 2019", "fiscal year 2019", "2019"
YEAR_WORDED = re.compile(rf"\b(?:{FY}(?P<short>\d{{2}})\b|(?:FY\s?|fiscal\s+(?:year\s+)?)?(?P<year>{YEAR})\b)", re.IGNORECASE)
_FY_YEAR = re.compile(rf"\b{FY}({YEAR}|\d\d)\b", re.IGNORECASE)  # "FY19", "FY2019": the year a keyword search matches
_YEAR_PREFIX = re.compile(rf"^{FY}$", re.IGNORECASE)  # the "FY" tokenize splits from "FY23"


def dates_a_year(token: str) -> bool:
    """Is ``token`` (tokenize's) a year or the "FY" that tokenize splits from one ("FY23" -> "fy", "2023")?"""
    return bool(YEAR_TOKEN.match(token) or _YEAR_PREFIX.match(token))


# A line or cell that is only a year: "2018", "fiscal 2018", "FY2018" (a statement's column head)
_YEAR_LINE = re.compile(rf"^(?:fiscal |fy\s?)?({YEAR})$", re.IGNORECASE)
# A column head that is a period: "2018", "FY2023", "Fiscal 2022", "December 31, 2018", "Q4 2022"
_PERIOD_CELL = re.compile(rf"^(?:(?:fiscal|fy|q[1-4])\s?|[A-Za-z]{{3,9}}\.?\s+(?:\d{{1,2}},?\s+)?)?{YEAR}$", re.IGNORECASE)


def years_named(text: str) -> list[str]:
    """Four-digit years however they are written: years_named("FY19 vs fiscal year 2020") -> ["2019", "2020"]"""
    years = []
    for match in YEAR_WORDED.finditer(text):
        year = match.group("year") or f"20{match.group('short')}"
        if year not in years:
            years.append(year)
    return years


def years_in(text: str) -> set[str]:
    """Years standing in text, not parts of larger numbers: years_in("fiscal 2022 (2,011 in FY2021)") -> {"2022", "2021"}"""
    return set(_YEAR_IN_TEXT.findall(text))


def one_year_spans(text: str) -> set[str]:
    """Spans of one year, the way a financial year is written ("2003-04" runs April 2003 to March 2004).

    one_year_spans("between 2002 to 2003; rows 2003-04 and 1999-00; 2001-2005") -> {"2002-03", "2003-04", "1999-00"}
    """
    return {f"{start}-{end[-2:]}" for start, end in YEAR_SPAN.findall(text) if int(end[-2:]) == (int(start) + 1) % 100}


def year_of_line(line: str) -> str | None:
    """The year of a line that is only a year: year_of_line("Fiscal 2022") -> "2022"; year_of_line("2022 sales") -> None"""
    match = _YEAR_LINE.match(line)
    return match.group(1) if match else None


def is_period_cell(cell: str) -> bool:
    """A table cell naming a period: is_period_cell("December 31, 2018") -> True; is_period_cell("1,577") -> False"""
    return bool(_PERIOD_CELL.match(cell))


# -----------------------------------------------------------------------------
# Numbers

_NUMBER = re.compile(r"(?<![\w.])\.\d+|\d+(?:[.,]\d+)*")  # loose: "3,02,16,492" (Indian grouping), "3.5" and ".60" alike
# A figure as a calculation writes it, thousands grouped by three: "1,577.5", ".5" (calc.py reads values with it)
FIGURE_IN_FORMULA = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?|\.\d+")
# A line of figures only, as a table cell printed one per line: "$", "59,268", "(310)", "15.6%", "—"
FIGURES_LINE = re.compile(r"^[\s$€£¥%()\-–—.,*\d\xa0]+$")
# One cell of figures as the text layer prints it: "(1,577)", "$ 5,363", "12.5 %", "—"
FIGURE_CELL = re.compile(r"^\$?\s*(\(?-?[\d,]+(?:\.\d+)?\)?|—|-)\s*\$?\s*%?$")


def numbers_in(text: str) -> set[str]:
    """Numbers without their thousands separators: numbers_in("3,200 tonnes in 1911 (3.5%)") -> {"3200", "1911", "3.5"};
    a fraction written without its leading zero is the same figure: numbers_in("drops .60 inches") -> {"0.60"}"""
    return {("0" + n if n.startswith(".") else n.replace(",", "").rstrip(".")) for n in _NUMBER.findall(text)}


_UNITS = "two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORD_VALUES = {"one": 1} | {w: i for i, w in enumerate(_UNITS, 2)} | {w: 10 * i for i, w in enumerate(_TENS, 2)}
# "one" alone is left as it is: far more often a pronoun ("one of our plants") than a count; "twenty-one" is 21
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_TENS) + r")(?:[- ](one|" + "|".join(_UNITS[:8]) + r"))?\b|\b(" + "|".join(_UNITS) + r")\b",
                          re.IGNORECASE)


def number_words_as_digits(text: str, keep: Iterable[str] = ()) -> str:
    """Numbers written in words, written in digits: "seven working days, twenty-five sites" -> "7 working days, 25 sites";
    the words of ``keep`` (lower-case) stay as they are."""
    kept = {word.lower() for word in keep}

    def digits(match: re.Match) -> str:
        if match.group(0).lower() in kept:
            return match.group(0)
        tens, unit, alone = match.groups()
        return str(_NUMBER_WORD_VALUES[alone.lower()] if alone else
                   _NUMBER_WORD_VALUES[tens.lower()] + (_NUMBER_WORD_VALUES[unit.lower()] if unit else 0))
    return _NUMBER_WORD.sub(digits, text)


# -----------------------------------------------------------------------------
# Dates: months

MONTH_NAMES = "January February March April May June July August September October November December".split()
# Month names as names, for capitalised text ("Oct. 24, 2016" names no document)
MONTHS = "|".join(MONTH_NAMES) + "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec"
_MONTH = re.compile(
    r"\b(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?"
    r"|nov(?:ember)?|dec(?:ember)?)\b",
    re.IGNORECASE,
)


def months_in(text: str) -> set[str]:
    """months_in("from Sept. to June; it may slip") -> {"sep", "jun"} (lower-case may/march are verbs)"""
    return {m.lower()[:3] for m in _MONTH.findall(text) if m not in ("may", "march")}


# -----------------------------------------------------------------------------
# Names: capitalised runs, their initials, words in capitals

# A name: capitalised words in a row, perhaps joined by "of" or "&" ("Bank of America", "Procter & Gamble").
# Words in capitals only (already acronyms), codes with digits and months are not part of one.
_NAME_WORD = rf"(?!(?:{MONTHS})\b)[A-Z][a-z][a-z&'-]*\b"
NAME_RUN = re.compile(rf"\b{_NAME_WORD}(?:[ \t]+(?:of[ \t]+|&[ \t]+)?{_NAME_WORD})+")
_SUFFIXES = "Inc Incorporated Corporation Corp Company Co Ltd LLC plc Group Holdings".split()
LEGAL_SUFFIX = re.compile(r",?[ \t]+(?:" + "|".join(_SUFFIXES + [s.upper() for s in _SUFFIXES]) + r")\b\.?(?![-\w])")
ACRONYM = re.compile(r"\b[A-Z][A-Z0-9&]{1,5}\b")
POSSESSIVE = r"['’]s"  # "Costco's", "Costco’s" (a typographic apostrophe)
_POSSESSIVE_END = re.compile(rf"{POSSESSIVE}$")


def names_with_initials(text: str) -> list[tuple[str, str]]:
    """(initials, name) for each name in ``text``, with and without its legal suffix: people say
    "Costco" of "Costco Wholesale Corporation" but "TIC" of "Travelers Insurance Company".

    names_with_initials("Pew Research Center's data") -> [("prc", "Pew Research Center's")]
    names_with_initials("Travelers Insurance Company") -> [("ti", "Travelers Insurance"), ("tic", "Travelers Insurance Company")]
    """
    pairs = []
    for run in NAME_RUN.findall(text):
        short = LEGAL_SUFFIX.sub("", run)
        forms = ([short] if NAME_RUN.fullmatch(short) else []) + ([run] if short != run else [])
        pairs += [("".join(w[0] for w in form.split() if w[0].isupper()).lower(), form) for form in forms]
    return pairs


def initials(text: str) -> list[str]:
    """The initials of each name in ``text``, legal suffixes dropped: initials("Pew Research Center's data") -> ["prc"]"""
    return [letters for letters, _ in names_with_initials(text)]


def without_s(word: str) -> str:
    """A plural or third-person "s" dropped: enough to see "assets" name "Asset", "uses" restate "use".

    without_s("assets") -> "asset"; without_s("loss") -> "loss"; without_s("gas") -> "gas"
    """
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def singular(word: str) -> str:
    """A plural's ending dropped: singular("inventories") -> "inventory"; singular("assets") -> "asset" (without_s).
    Plural and singular read alike; so may a third-person "s" ("uses", "use"), which is as well."""
    return word[:-3] + "y" if len(word) > 4 and word.endswith("ies") else without_s(word)


def without_possessive(word: str) -> str:
    """without_possessive("Costco’s") -> "Costco"; without_possessive("COSTCO'S") -> "COSTCO'S" (lower-case "s" only)"""
    return _POSSESSIVE_END.sub("", word)


def acronyms_written(text: str) -> set[str]:
    """The acronyms ``text`` writes in capitals, lower-cased: acronyms_written("the SEC and Mid-2014 IT") -> {"sec", "it"}

    (Only capitals count: "MID" in a question is not the "mid" of "mid-2014".)
    """
    return {m.lower() for m in ACRONYM.findall(text)}


# Currencies and units are capitalised without naming anything a passage must repeat ("Rs. 1,907.30").
_UNIT_WORDS = frozenset("rs inr usd us eur gbp jpy cny rmb chf aud cad sgd hkd mn bn "
                        "rupee rupees dollar dollars euro euros pound pounds yen yuan".split())


def names_in(text: str) -> set[str]:
    """Words that name something (capitalised, or letters mixed with digits), lower-cased, possessive 's dropped;
    the first word is skipped, being capitalised anyway. names_in("Sales of GPT-4o rose in Berlin's") -> {"gpt-4o", "berlin"}"""
    words = WRITTEN_WORD.findall(text)[1:]
    names = {without_possessive(w.lower()) for w in words
             if any(c.isupper() for c in w) or (any(c.isdigit() for c in w) and any(c.isalpha() for c in w))}
    return names - _UNIT_WORDS


# A reference to a part of a document: "page 14", "Table 2", "Fig. 3" (its number)
REFERENCE = re.compile(r"\b(?:pages?|pp?\.|slides?|figures?|fig\.|tables?|sections?|chapters?|appendix|steps?)\s*(\d+)", re.I)
ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)")  # "the 2nd objective": a position, not a name
CODE = re.compile(r"^[a-z]{1,5}-?\d{1,4}$")  # a key a row is looked up by: "ar01", "q3", "gpt-4", "p-10"; not "2nd", "75k"


# -----------------------------------------------------------------------------
# Words: what keyword search and word overlap are made of

# Three notions of a word, each for its own question:
WORD = re.compile(r"\w+")  # what keyword search matches: "GPT-4o" is "GPT" and "4o"
# A word as a name is written, its inner hyphens and apostrophes kept: "GPT-4o", "Berlin's" ("Study--" is "Study"),
# so a name is compared whole (the citation checker)
WRITTEN_WORD = re.compile(r"\w[\w'’-]*(?<![-'’])")
# A run of Latin letters, digits aside: whether a text is written in capitals counts its words by their
# letters ("FY2019" is the word "FY"; "2019" is no word)
LETTER_RUN = re.compile(r"[A-Za-z]+")
STOPWORDS = frozenset(config.STOPWORDS.split())
_NUMBERED_THING = re.compile(
    r"\b(fig(?:ure)?|tab(?:le)?|chart|section|chapter|appendix|step|slide)s?\.?\s*(\d+[a-z]?|[ivx]+)\b", re.IGNORECASE
)
_KIND = {"fig": "figure", "tab": "table"}


def tokenize(text: str, language: str | None = "en") -> list[str]:
    """Lower-cased Unicode words without punctuation or stopwords, plus one token per
    numbered figure/table/section so "Fig. 3" matches "Figure 3" but not "Table 3".

    tokenize("The page. Page 3, Zürich! See Fig. 2") -> ["page", "page", "3", "zürich", "see", "fig", "2", "figure_2"]
    tokenize("FY19 capex") -> ["fy", "2019", "capex"]   (so "FY2019" matches a page that says "2019")

    ``language`` is the text's language code (language.detect_language / question_language);
    "en" or None reads it as English, anything else as ``_words_in`` says:

    tokenize("Wie installiere ich die Pakete mit apt-get?", "de") -> ["installi", "pak", "apt", "get"]
    """
    text = _FY_YEAR.sub(lambda m: f"FY {m.group(1) if len(m.group(1)) == 4 else '20' + m.group(1)}", text)
    if not language or language == "en":
        words = [w for w in WORD.findall(text.lower()) if w not in STOPWORDS]
    else:
        words = _words_in(text, language)
    return words + [f"{_KIND.get(kind.lower(), kind.lower())}_{num.lower()}" for kind, num in _NUMBERED_THING.findall(text)]


def cell_words(tokens: list[str]) -> set[str]:
    """``tokens`` (``tokenize``'s) as a table's cells are named by them: a plural's "s" dropped, so "assets" names
    "Asset", and a lone "s" left out: a possessive's ("ACME's" is "acme", "s"), or an initial's ("U.S.", "Ram S. Tarneja").

    cell_words(tokenize("ACME's total assets")) -> {"acme", "total", "asset"}
    """
    return {without_s(word) for word in tokens if word != "s"}


# Scripts cut into overlapping character pairs: Thai, Lao, Myanmar, Khmer, Hangul, kana, Han.
_PAIRED = ("\u0e00-\u0eff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u3005-\u3007\u3040-\u30ff\u3130-\u318f"
           "\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff")
# A word character outside those scripts; combining marks count (Devanagari, Arabic vowel signs), as \w does not
_LETTER = rf"(?:(?![{_PAIRED}])[\w\u0300-\u036f\u0610-\u061a\u064b-\u065f\u0670\u0900-\u0963\u0966-\u0dff])"
_PART = re.compile(rf"{_LETTER}+")
# A run of a paired script, or a word; "apt-get", "sources.list", "2.100" are one word of several parts
_PIECE = re.compile(rf"(?P<run>[{_PAIRED}]+)|(?P<word>{_LETTER}+(?:[-.]{_LETTER}+)*)")
_CODE_LIKE = re.compile(r"^(?=[a-z0-9]*\d)[a-z0-9]+$")  # "ext4", "x86", "utf8", "3": written, not inflected


def _words_in(text: str, language: str) -> list[str]:
    """The keyword-search words of a text in a language other than English.

    Words are lower-cased and dropped when they are stopwords of the language or of English
    (technical text mixes English in), then stemmed with the language's Snowball stemmer if it
    has one, so "Pakete" and "Paketen" are both "pak". Parts of commands and versions
    ("apt-get", "sources.list", "2.100", "x86_64", "ext4") are kept as written, like English
    words: nothing English is stemmed. A run of Chinese, Japanese, Korean or Thai, written
    without spaces between words, becomes its overlapping character pairs (a lone character
    stays itself), so a question and a page sharing a word share its pairs:

    _words_in("パッケージを削除", "ja") -> ["パッ", "ッケ", "ケー", "ージ", "ジを", "を削", "削除"]
    """
    stop = languages.stopwords(language)
    stemmer = languages.stemmer(language)
    words = []
    for match in _PIECE.finditer(unicodedata.normalize("NFKC", text).lower()):
        run = match.group("run")
        if run:
            pairs = [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
            words += [p for p in pairs if p not in stop]
            continue
        parts = _PART.findall(match.group("word"))
        for part in parts:
            if part in stop or part in STOPWORDS:
                continue
            as_written = len(parts) > 1 or "_" in part or _CODE_LIKE.match(part) or stemmer is None
            words.append(part if as_written else stemmer.stem(part))
    return words


# German writes every noun with a capital: a run of capitalised words is no name to take initials of
_CAPITALISED_NOUNS = frozenset({"de", "lb"})


def keyword_tokens(text: str, language: str | None = "en") -> list[str]:
    """What the keyword index and its queries are made of: ``tokenize`` plus an acronym token
    ("^pss") for each name's initials and each word written in capitals.

    keyword_tokens("Prosecution Services Staff") -> ["prosecution", "services", "staff", "^pss"]   (so "PSS" matches it)

    Acronyms get their own tokens because capitals mean something words do not: "MID" in a
    question is "Mobile Internet Demographics", not the "mid" of "mid-2014", and "TO" (Telecom
    Operators) must survive the stopword "to". (In German, where every noun is capitalised, only
    words in capitals count: "Neue Pakete" is no name.)
    """
    return tokenize(text, language) + acronym_tokens(text, language)


def acronym_tokens(text: str, language: str | None = "en") -> list[str]:
    """The acronym tokens ``keyword_tokens`` adds to a text's words: acronym_tokens("Prosecution Services Staff") -> ["^pss"]"""
    names = [] if language in _CAPITALISED_NOUNS else initials(text)
    return [f"^{letters}" for letters in names + sorted(acronyms_written(text))]


# -----------------------------------------------------------------------------
# Markdown table rows: "| Net sales | 3,226.8 |", as the layout extractor writes a table

TABLE_ROW = re.compile(r"^\s*\|(.*)\|\s*$")


def is_table_row(line: str) -> bool:
    """is_table_row("| Net sales | 3,226.8 |") -> True; is_table_row("Net sales | 3,226.8") -> False"""
    return bool(TABLE_ROW.match(line))


def table_cells(row: str) -> list[str]:
    """The cells of a table row, whitespace trimmed: table_cells("| Net sales | 3,226.8 |") -> ["Net sales", "3,226.8"]"""
    match = TABLE_ROW.match(row)
    return [cell.strip() for cell in match.group(1).split("|")] if match else []


# -----------------------------------------------------------------------------
# Sentences: one splitter; what ends a sentence is said by each reader

# What follows the marks and belongs to neither sentence, by default: a closing quote or bracket, then space
_BETWEEN = r"[\"')\]]*\s+"


@lru_cache(maxsize=None)
def _sentence_end(marks: str, kept: str, between: str, capital_after: str, line_breaks: bool) -> re.Pattern:
    """The pattern of a sentence end; group "end" is what the sentence keeps, a line break has none."""
    mark = f"[{re.escape(marks)}]"
    # The run of marks is matched from its first mark: tried from inside a run ("....x"), the pattern
    # would re-scan the rest of the run at every mark (quadratic on a long run).
    end = rf"(?P<end>(?<!{mark}){mark}+{kept})"
    before_capital = rf"|(?<=[{re.escape(capital_after)}])(?=[A-Z])" if capital_after else ""
    return re.compile(rf"{end}(?:{between}{before_capital})" + (r"|\n\s*" if line_breaks else ""))


def sentence_spans(text: str, start: int = 0, stop: int | None = None, *, marks: str = ".!?;:", kept: str = "",
                   between: str = _BETWEEN, capital_after: str = "", line_breaks: bool = True,
                   is_end: Callable[[str, int, re.Match], bool] | None = None, trim: bool = False) -> list[tuple[int, int]]:
    """(start, end) of each sentence of ``text[start:stop]``, blank ones left out. Every reader of
    sentences splits with this; what ends a sentence is said by its arguments:

    marks          the characters a run of which ends a sentence
    kept           (a pattern) what after the marks still belongs to the sentence: a closing quote, "[2]"
    between        (a pattern) what must follow, standing between two sentences (the space): it belongs
                   to neither; a lookahead "(?=\\s)" asks for it and leaves it to ``trim``
    capital_after  marks that end a sentence right before a capital too ("What is X?Please ...")
    line_breaks    a line break ends a sentence (and the space after it is dropped)
    is_end         is_end(text, sentence_start, match) may refuse an end: an abbreviation's period
    trim           spans without the space at their ends; else only ``between`` and line breaks drop it

    The defaults cut a page into sentences and lines (context windows, OCR units): ";" and ":" end one
    too, and a closing quote or bracket after the marks goes with the space.

    sentence_spans("One. Two!\\nThree") -> [(0, 4), (5, 9), (10, 15)]
    sentence_spans("Is it? Yes", marks="?", line_breaks=False) -> [(0, 6), (7, 10)]
    """
    stop = len(text) if stop is None else stop
    spans, at = [], start
    for match in _sentence_end(marks, kept, between, capital_after, line_breaks).finditer(text, start, stop):
        if match.group("end") is None:  # a line break
            spans.append((at, match.start()))
        elif is_end is None or is_end(text, at, match):
            spans.append((at, match.end("end")))
        else:
            continue
        at = match.end()
    spans.append((at, stop))
    return [_trimmed(text, s, e) if trim else (s, e) for s, e in spans if text[s:e].strip()]


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """The span without the whitespace at its ends: text[start:end].strip() is text[_trimmed(...)]"""
    part = text[start:end]
    return start + len(part) - len(part.lstrip()), end - len(part) + len(part.rstrip())
