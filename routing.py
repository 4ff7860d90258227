"""Which documents of a library a question names: small per-document profiles and a routing step.

    first pages of a document (text + page labels) + its file name
      -> DocumentProfile: title, name words (capitalised words, file-name words), acronyms,
         years, a document type and the period its cover states, how it writes years (the last three as a domain reads them: domains.py)
    question -> names_in_question(): the words it writes as names ("Godfrey" of "GODFREY PHILLIPS INDIA LIMITED")
    those names + every in-scope profile
      -> route(): {collection: score} for the documents the question names
    question -> acronyms_asked(): "MD", "TO" (not the "MM" of "YYYY-MM-DD")
      + how much of the question each page with a name of those initials (a capitalised run,
        or a table row label: row_labels_with_initials), or with the acronym printed, shares
        (the retriever scores that on its keyword index)
      -> expansion_here(): the name it stands for here, or None -> expand_acronyms()

Across a library of similar documents (ten annual reports), the same statement
names and boilerplate repeat in every one; the company and the year in the
question are what pick the document. A profile word counts only when few
documents have it (ROUTE_MAX_SHARE), so "report" or "2021" name nothing while
"Costco", "NIKE" or "PRC" (Pew Research Center) do. The retriever then searches
the named documents first and fills what is left of the results from the whole
library, so a wrong name costs places, and a right one keeps other filings' look-alike
pages (every 10-K has an inventories line) out of the way.

Deliberately simple: no entity recogniser; a name is a capitalised word on the
first pages that no document of the library writes in lower case ("Costco", "Pew", not
"Chairman" or "Board") or a file-name word, an acronym is the initials of a run of
capitalised words, with and without a legal suffix ("Pew Research Center" ->
"prc"; "Travelers Insurance Company" -> "ti", "tic"), a table row label's initials ("Long-term
debt" -> "ld", "ltd"), or a word written in capitals.
On the question's side only what it writes as a name counts, and of a run of
capitalised words only the first: "non-executive directors of GODFREY PHILLIPS
INDIA LIMITED" must not name another company's report because its first pages
say "Executive", "India" and "Limited". A name's first word is also what people
shorten it to ("Costco", "Pew").
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import config
import domains
import rules
from text_utils import ACRONYM, FIGURES_LINE, LETTER_RUN, MONTHS, POSSESSIVE, acronyms_written, initials, without_possessive, years_named

_CAPITALISED = re.compile(r"\b[A-Z][\w&'-]*")
_STANDALONE_ACRONYM = re.compile(r"(?<![\w-])[A-Z][A-Z0-9&]{1,5}(?![\w-])")
# A word written as a name in a question: capitalised or in capitals (not a month), possessive dropped.
_QUESTION_NAME = re.compile(rf"\b(?!(?:{MONTHS})\b)(?:[A-Z]|\d[A-Z]+\b)[\w&-]*(?:{POSSESSIVE}\b)?")  # "3M" is a name too
_SENTENCE_START = re.compile(r"(?:^|[.?!:;]\s+|\n)$")
_FILE_WORD = re.compile(r"[A-Za-z]{3,}|(?<![A-Za-z0-9])\d[A-Za-z]+(?![A-Za-z0-9])")  # "3M" of "3M_2018_10K.pdf"
# A word in lower case outside web and mail addresses ("costco" of "costco.com" is still a name).
_LOWER_WORD = re.compile(r"(?<![\w./@-])[a-z][a-z-]*(?![\w/@]|\.[a-z])")

# Document types by the words their first pages use; first match wins, a domain's types first (domains.py).
DOC_TYPES = [
    ("academic paper", r"\babstract\b.*\b(?:introduction|university|arxiv)\b|\barxiv\b"),
    ("manual", r"\b(?:user\s+manual|user\s+guide|instructions?\s+for\s+use|quick\s+start|handbook)\b"),
    ("survey report", r"\b(?:survey|respondents|research\s+center)\b"),
]


@dataclass
class DocumentProfile:
    """What a document's first pages say it is; ``names`` and ``acronyms`` are lower-cased."""

    title: str
    names: set[str] = field(default_factory=set)
    acronyms: set[str] = field(default_factory=set)
    years: list[str] = field(default_factory=list)  # most frequent first
    doc_type: str = ""
    wording: str = "plain"  # how the document writes years, as a domain reads it (domains.wording_of)
    file_words: set[str] = field(default_factory=set)  # the words of its file name, which its owner chose
    lower_words: set[str] = field(default_factory=set)  # the words it writes in lower case somewhere
    own_year: str = ""  # the year of the period its cover says it covers (domains.report_period)


def acronyms_in(text: str) -> set[str]:
    """Initials of each run of capitalised words, legal suffixes dropped, plus acronyms written out.

    acronyms_in("Pew Research Center and NIKE, Inc. (the SEC)") -> {"prc", "sec", "nike"}
    """
    return acronyms_written(text) | set(initials(text))


def row_labels_with_initials(text: str) -> list[tuple[str, str]]:
    """Rule: analysts abbreviate a table's line items by their initials ("LTD" for "Long-term debt").
    (initials, label) of each table row label of 2-5 words: a line followed by its figures, one
    cell per line as the text extractor writes statements. Analysts abbreviate line items ("LD" or
    "LTD" for "Long-term debt", "TL" for "Total liabilities") that are no capitalised name.

    row_labels_with_initials("Long-term debt, excluding current portion\n$\n6,692") -> [("ld", "Long-term debt"), ("ltd", "Long-term debt")]
    """
    lines = [line.strip() for line in text.split("\n")]
    pairs = []
    for i, line in enumerate(lines[:-1]):
        after = lines[i + 1:i + 3]
        if FIGURES_LINE.match(line) or not FIGURES_LINE.match(after[0]) or not any(c.isdigit() for c in "".join(after)):
            continue
        label = re.split(r"[,(:]", line)[0].strip()
        words = label.split()
        if 2 <= len(words) <= 5 and label[0].isupper():
            by_word = "".join(w[0] for w in words)  # "LD"
            by_part = "".join(part[0] for w in words for part in w.split("-") if part)  # "LTD"
            pairs += [(letters.lower(), label) for letters in dict.fromkeys((by_word, by_part))]
    return pairs


def acronyms_asked(question: str) -> set[str]:
    """Rule: an acronym is a word in capitals standing on its own, in a question not written in capitals throughout.
    The acronyms a question uses, lower-cased: words in capitals standing on their own (not the
    "MM" of "YYYY-MM-DD"); none when the question is written in capitals throughout.

    acronyms_asked("Which TO grew? Date it YYYY-MM-DD.") -> {"to"};  acronyms_asked("WHAT IS THE AIM?") -> set()
    """
    words = LETTER_RUN.findall(question)
    if sum(word.isupper() for word in words) * 2 > len(words):
        return set()
    return {m.lower() for m in _STANDALONE_ACRONYM.findall(question)}


def expansion_here(named: list[tuple[str, float, int]], written: list[float]) -> str | None:
    """Rule: an acronym means the name spelled out on the page that shares most of the question.
    The name an acronym stands for in this question, or None when it stands for itself.

    ``named``: (name, how much of the question its page shares, how often the library uses the
    name) for each page with a name of these initials; ``written``: how much of the question
    each page that writes the acronym in capitals shares. Initials are ambiguous across a
    library ("MD" is Model Debate in a paper, Managing Director in an annual report), so the
    name chosen is the one on the page sharing the most of the question (the most used name on
    a tie). A page writing the acronym itself that shares as much wins: the acronym then means
    what that page uses it for.

    expansion_here([("Mobile Internet Demographics", 2.0, 1), ("Mid Range", 1.0, 5)], [1.5])
      -> "Mobile Internet Demographics"
    """
    if not named:
        return None
    name, shared, _ = max(named, key=lambda item: (item[1], item[2]))
    return None if any(page >= shared for page in written) else name


def expand_acronyms(question: str, expansions: dict[str, str]) -> str:
    """Each acronym of the question with an expansion, followed by the name it abbreviates.

    expand_acronyms("How to prepare for TWS?", {"tws": "Tomorrow's Workplace Skills"})
      -> "How to prepare for TWS (Tomorrow's Workplace Skills)?"
    """
    def expand(match: re.Match) -> str:
        name = expansions.get(match.group().lower())
        return f"{match.group()} ({name})" if name and name.lower() not in question.lower() else match.group()

    return ACRONYM.sub(expand, question)


def names_in_question(question: str, stopwords: frozenset[str] = frozenset()) -> set[str]:
    """Rule: only what a question writes as a name can name a document; a name may begin with a digit ("3M").
    The words a question writes as names, lower-cased: the first word of each run of
    capitalised words. A sentence's first word is capitalised anyway: it opens a name only
    when it is written in capitals or a run goes on after it, and never when it is a stopword.

    names_in_question("Who are the directors of GODFREY PHILLIPS INDIA LIMITED?", {"who"}) -> {"godfrey"}
    names_in_question("What did Costco's CFO say about PRC? Please answer.", {"what"}) -> {"costco", "prc"}
    names_in_question("What were Best Buy's sales?", {"what"}) -> {"best", "bestbuy"}
    """
    names = set()
    for run in _capitalised_runs(question):
        (first, opens_sentence), rest = run[0], run[1:]
        if opens_sentence and (first.lower() in stopwords or not (rest or first.isupper())):
            run = rest
        if run:
            names.add(without_possessive(run[0][0]).lower())
        if joined := _joined_name(run):
            names.add(joined)
    return names


def name_runs_in_question(question: str) -> list[list[str]]:
    """The runs of capitalised words the question writes, possessives dropped (a sentence's capitalised first word
    too: the document's profile decides what is a name of it).

    name_runs_in_question("What were Harbor Lane Outfitters' total assets?") -> [["What"], ["Harbor", "Lane", "Outfitters"]]
    """
    return [[without_possessive(word).rstrip("'’") for word, _ in run] for run in _capitalised_runs(question)]


def file_named_runs(question: str, file_words: set[str]) -> list[list[str]]:
    """The question's runs of capitalised words that name a document as its file name does: a word of the file
    name ("Costco's" in COSTCO_2021_10K.pdf) or its words written in one ("General Mills'" in GENERALMILLS_2020_10K.pdf).

    file_named_runs("Why did General Mills' interest fall?", {"generalmills"}) -> [["General", "Mills"]]
    """
    named = []
    for run in _capitalised_runs(question):
        words = [without_possessive(word).rstrip("'’") for word, _ in run]
        if (joined := _joined_name(run)) and joined in file_words:
            named.append(words[: _parts_joined(words, joined)])
        else:
            named += [[word] for word in words if word.lower() in file_words]
    return named


def _parts_joined(words: list[str], joined: str) -> int:
    """How many of ``words`` make up ``joined`` written in one: _parts_joined(["Best", "Buy", "FY19"], "bestbuy") -> 2."""
    text = ""
    for count, word in enumerate(words, 1):
        text += word.lower()
        if text == joined:
            return count
    return len(words)


def _joined_name(run: list[tuple[str, bool]]) -> str:
    """A name of several words as it is often written in one ("Best Buy" in BESTBUY_2019_10K.pdf): the run's
    words up to the first possessive, before any figure; "" for a one-word name.

    _joined_name([("Best", True), ("Buy's", False), ("FY2019", False)]) -> "bestbuy"
    """
    parts = []
    for word, _ in run:
        if any(ch.isdigit() for ch in word):
            break
        parts.append(without_possessive(word))
        if parts[-1] != word:  # "Buy's": the name ends here
            break
    return "".join(parts).lower() if len(parts) > 1 else ""


def _capitalised_runs(text: str) -> list[list[tuple[str, bool]]]:
    """Runs of capitalised words next to each other, each word with whether it opens a sentence."""
    runs, previous_end = [], None
    for match in _QUESTION_NAME.finditer(text):
        word = (match.group(), bool(_SENTENCE_START.search(text[: match.start()])))
        if previous_end is not None and text[previous_end: match.start()] in (" ", "\t"):
            runs[-1].append(word)
        else:
            runs.append([word])
        previous_end = match.end()
    return runs


# Languages that capitalise every noun: there a capitalised word is no sign of a name.
NOUNS_CAPITALISED = {"de", "lb"}


def document_profile(doc_name: str, first_pages: list[str], all_text: str = "", language: str = "en") -> DocumentProfile:
    """A profile from the file name and the text (and labels) of the first pages; ``all_text`` gives the year style.
    Rule: in a language that capitalises its nouns (German), only file-name words and acronyms name the document.

    document_profile("COSTCO_2021_10K.pdf", ["COSTCO WHOLESALE CORPORATION ... Form 10-K ... fiscal year 2021"])
      -> title "COSTCO WHOLESALE CORPORATION ...", names {"costco", "wholesale", ...}, acronyms {"cw", ...},
         years ["2021"], doc_type "annual report"
    """
    head = "\n".join(page[: config.PROFILE_CHARS] for page in first_pages)
    title = next((line.strip() for line in head.splitlines() if len(line.strip()) > 3), doc_name)
    common = {part for word in _LOWER_WORD.findall(all_text or head) for part in word.split("-")}  # not names
    capitalised = [] if language in NOUNS_CAPITALISED else _CAPITALISED.findall(head)
    names = {name for name in (without_possessive(w).lower() for w in capitalised if len(w) > 2) if name not in common}
    file_words = {w.lower() for w in _FILE_WORD.findall(doc_name.rsplit(".", 1)[0])}
    years = [year for year, _ in Counter(years_named(head)).most_common()]
    doc_type = next((name for name, pattern in domains.document_types() + DOC_TYPES if re.search(pattern, head, re.IGNORECASE | re.DOTALL)), "")
    acronyms = acronyms_in(head) - common  # "TO" on a cover page is the word "to" in capitals
    return DocumentProfile(title[:120], names | file_words, acronyms, years, doc_type, domains.wording_of(all_text or head),
                           file_words, common, domains.report_period(head))


def distinctive_words(profiles: dict[str, DocumentProfile]) -> dict[str, float]:
    """Rule: a word names a document only when few documents have it.
    Rule: a word any document of the library writes in lower case is an ordinary word, not a name
    (unless it is in the document's file name): "Page", "Board" or "College" on one report's cover
    name nothing when another report writes "page", "board" or "college".
    Profile words few documents share, each with its weight log(documents / documents having it)."""
    ordinary = set().union(*(profile.lower_words for profile in profiles.values()))
    counts: Counter = Counter()
    for profile in profiles.values():
        counts.update({word for word in profile.names | profile.acronyms if word in profile.file_words or word not in ordinary})
    most = max(1, int(config.ROUTE_MAX_SHARE * len(profiles)))
    return {word: math.log(len(profiles) / n) for word, n in counts.items() if n <= most}


def route(question_words: set[str], question_acronyms: set[str], question_years: list[str],
          profiles: dict[str, DocumentProfile], weights: dict[str, float]) -> dict[str, float]:
    """Rule: pages of the documents a question names are searched first; no document is dropped.
    Rule: an acronym of a document is named only by a word the question writes in capitals ("Mr" is no "MR").
    Rule: a question about several years is about the report of the latest (it prints the earlier ones too).
    {collection: score} for the documents the question names, best first; empty when it names none.

    A document is named by a distinctive word of its profile; a year on its first
    pages only adds to a document already named (years alone name nothing). When the
    question names a year and some named documents carry it on their first pages, only
    those are kept: "Best Buy's FY2019 inventories" is about the FY2019 filing, not
    about every Best Buy filing. Of those, when one's cover reports the latest year the question
    names, the reports of other periods go (a report prints the years before its own, for comparison),
    and documents whose cover states no period stay. Only documents within half of the best score are kept.
    """
    if len(profiles) < 2:
        return {}
    scores = {}
    for collection, profile in profiles.items():
        named = (question_words & profile.names) | (question_acronyms & (profile.names | profile.acronyms))
        score = sum(weights.get(word, 0.0) for word in named)
        if score > 0:
            scores[collection] = score + 0.5 * len(set(question_years) & set(profile.years))
    of_the_year = {c: s for c, s in scores.items() if set(question_years) & set(profiles[c].years)}
    # a report prints the years before its own beside it: FY2015 and FY2016 are both in the FY2016 10-K
    latest = max(question_years, default="")
    if any(profiles[c].own_year == latest for c in of_the_year):  # a cover stating no period leaves it open
        of_the_year = {c: s for c, s in of_the_year.items() if profiles[c].own_year in (latest, "")}
    scores = of_the_year or scores
    best = max(scores.values(), default=0.0)
    return dict(sorted(((c, s) for c, s in scores.items() if s >= best / 2), key=lambda item: -item[1]))


# The rules above, by name (rules.py): registered, not switched (switching one off would need its code to
# ask ``rules.on``).
_TEST = "tests/test_routing.py::"
_ACRONYM_TEST = _TEST + "test_an_acronym_stands_for_the_name_on_the_page_that_shares_the_question_s_words"
rules.register("row_label_initials", 'analysts abbreviate a table\'s line items by their initials ("LTD" for "Long-term debt")',
               _ACRONYM_TEST, switchable=False,
               pays_on="docs/experiments/2026-11-23-retrieval-that-generalises.md: mmlongbench, names abbreviated, held-out seeds"
                       " 606/707/808, library questions lost 5/4/6 -> 5/3/5 (of 241)")
rules.register("acronym_in_capitals", "an acronym is a word in capitals standing on its own, in a question not written in capitals throughout",
               _ACRONYM_TEST, switchable=False,
               pays_on="docs/experiments/2026-11-23-retrieval-that-generalises.md: mmlongbench, names abbreviated, held-out seeds"
                       " 303/404/505, library questions lost 4/6/8 -> 2/4/6 (of 241), acronyms spelled out by context")
rules.register("acronym_as_the_page_spells_it", "an acronym means the name spelled out on the page that shares most of the question",
               _ACRONYM_TEST, switchable=False,
               pays_on="docs/experiments/2026-11-23-retrieval-that-generalises.md: mmlongbench, names abbreviated, held-out seeds"
                       " 303/404/505, library questions lost 4/6/8 -> 2/4/6 (of 241)")
rules.register("names_as_written", 'only what a question writes as a name can name a document; a name may begin with a digit ("3M")',
               _TEST + "test_a_question_names_a_document_by_the_head_of_a_name_it_writes_not_by_common_words", switchable=False,
               pays_on="docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: first fresh set, names that begin with a"
                       " digit left out: 2 questions lost (both about 3M), 0 won")
rules.register("capitalised_nouns", "in a language that capitalises its nouns (German), only file-name words and acronyms name the document",
               _TEST + "test_in_german_a_capitalised_noun_is_no_name", switchable=False,
               pays_on="docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: second fresh set (held out), the router "
                       "with its three principles left out: 4 lost / 0 won, library hit@5 0.804 -> 0.717")
rules.register("distinctive_words", "a word names a document only when few documents have it",
               _TEST + "test_routing_picks_named_documents_by_distinctive_words_only", switchable=False,
               pays_on="docs/experiments/2026-11-26-rules-audit.md: fresh_mm retrieval (held out), the routing step off: library "
                       "MRR 0.622 -> 0.594")
rules.register("lower_case_words", "a word any document of the library writes in lower case is an ordinary word, not a name "
               '(unless it is in the document\'s file name): "Page", "Board" or "College" on one report\'s cover name nothing when '
               'another report writes "page", "board" or "college"',
               _TEST + "test_a_word_another_document_writes_in_lower_case_is_no_name", switchable=False,
               pays_on="docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: second fresh set (held out), the router "
                       "with its three principles left out: 4 lost / 0 won, library hit@5 0.804 -> 0.717")
rules.register("named_documents_first", "pages of the documents a question names are searched first; no document is dropped",
               "tests/test_retriever.py::test_a_question_naming_a_document_is_answered_from_it_first_and_the_library_fills_the_rest",
               switchable=False,
               pays_on="docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: second fresh set (held out), the router "
                       "left out: 4 lost / 0 won, library hit@5 0.804 -> 0.717")
rules.register("document_acronym_in_capitals", 'an acronym of a document is named only by a word the question writes in capitals ("Mr" is no "MR")',
               _TEST + "test_a_document_s_acronym_is_named_only_by_a_word_in_capitals", switchable=False,
               pays_on="docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: second fresh set (held out), the router "
                       "with its three principles left out: 4 lost / 0 won, library hit@5 0.804 -> 0.717")
rules.register("latest_year", "a question about several years is about the report of the latest (it prints the earlier ones too)",
               _TEST + "test_a_question_about_several_years_is_about_the_report_of_the_latest", switchable=False,
               pays_on="docs/experiments/2026-11-26-a-fresh-set-of-analyst-questions.md: first fresh set, left out: 2 lost / 0 "
                       "won; second fresh set (held out) 1 lost / 1 won")
