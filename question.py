"""Read a question before searching: what is asked, and what only says how to answer it.

    "Answer as if you are an equity research analyst. What was Costco's FY2021 capex?
     Please state answer in USD millions."
      -> query         "What was Costco's FY2021 capex?"            (what the retriever searches)
      -> instructions  ["Answer as if you are ...", "Please state answer in USD millions."]
                                                                    (handed to the answer prompt)
      -> hints         []                                           (page hints, see below)
      -> years         ["2021"]
      -> readings      its tokens (tokenised once, per language), keywords, words as a table's cells name them,
                       names, years and months written, subject figures and lookup keys: each made once, on
                       first use, from the query; the search, the evidence lines, the cell reader (cells.py),
                       a domain's measures (domains.py) and the citation checker (checker.py) all read these

People wrap questions in instructions about the answer's form (units, a persona,
"relying on the details shown in the cash flow statement", "if ... then state
that"). Those words match boilerplate on many pages and swamp keyword search,
so only the question is searched. A kind of page a domain knows (domains.py), named in
an instruction ("relying on the cash flow statement") or needed by what is asked, is kept
as a hint of which page to find (``hints``), not as search words.

Deliberately simple: sentences are told apart by a few cue patterns (a persona,
the words answer/response/question, units and rounding, conditionals asking to
"state that"), not by a model. A sentence ending in "?" is always the question,
and instructions are split off only when such a sentence is left (a request
like "List the F1 scores, with one decimal place." is searched whole), so a
misread can only search too much, never lose the question.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import domains
import rules
from text_utils import (CODE, MONTHS, ORDINAL, REFERENCE, WRITTEN_WORD, acronym_tokens, cell_words, months_in, names_in, numbers_in,
                        sentence_spans, tokenize, without_possessive, years_in, years_named)

T = TypeVar("T")

# A lead-in "...question:" ends at its colon.
_LEAD_IN = re.compile(r"^(?P<lead>[^:?]*\b(?:question|answer|analyst|respond)\b[^:?]*):\s*(?P<rest>.+)$", re.IGNORECASE | re.DOTALL)

_INSTRUCTION_CUES = [
    r"\bas if you (?:are|were)\b", r"\byou are (?:an?|the)\b", r"\b(?:act|acting) as\b", r"\bimagine you\b",
    r"\b(?:answer|response|respond|reply)\b", r"\bthe (?:following )?question\b",
    r"\bin (?:usd|us\$|eur|gbp|\$)?\s*(?:millions|billions|thousands)\b", r"\bdecimal places?\b", r"\bround(?:ed)? to\b",
    r"\bshow (?:your|the) (?:calculation|work)\b", r"\bstate (?:that|any|your)\b", r"\bexplain why\b",
    r"\b(?:relying|based|focus(?:ing)?) (?:only )?on the (?:details|information|data|figures)\b",
]
_INSTRUCTION = re.compile("|".join(_INSTRUCTION_CUES), re.IGNORECASE)
_PARENTHESES = re.compile(r"\s*\(([^()]*)\)")


rules.register("answer_kind", 'a question asks for a quantity ("how much", "what percentage", a unit, a measure or line item a domain knows), a date ("when", '
               '"which year") or neither (a reason, a name), by its wording', "tests/test_question.py::test_rule_a_question_asks_a_quantity_a_date_or_neither",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: fresh3 (held out), states@3 19 -> 17 of 30 switched off; "
                       "fresh4 (held out) states@3 6 -> 4 of 22")
# Rule: a question asks for a quantity ("how much", "what percentage", a unit, a measure or line item a domain knows), a date ("when", "which year") or neither (a reason, a name), by its wording.
_ASKS_QUANTITY = re.compile(r"\bhow (?:much|many|large|big|high|low)\b|\bwhat (?:is |was |were |are )?(?:the )?"
                            r"(?:total |net |annual |aggregate )?(?:percent(?:age)?|share|proportion|amount|number|value|rate|ratio|"
                            r"size|sum|count)\b|\b(?:usd|us\$|eur|gbp)\b|\bin (?:millions|billions|thousands)\b", re.IGNORECASE)
_ASKS_DATE = re.compile(r"^\W*when\b|\b(?:what|which|in which) (?:year|date|month|day)\b", re.IGNORECASE)
_ASKS_REASON = re.compile(r"^\W*(?:why|how did|how does|how do|how has|how have)\b|\bwhat (?:drove|caused|made up|explains?|led to)\b",
                          re.IGNORECASE)


@dataclass
class ParsedQuestion:
    """A question split into what to search and how to answer; see the module docstring."""

    text: str
    query: str
    instructions: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)  # marks of the pages it points at (domains.py: "balance sheet")
    _read: dict = field(default_factory=dict, repr=False, compare=False)  # the query's readings, made once each

    def _once(self, key: object, read: Callable[[], T]) -> T:
        """The reading under ``key``, made by ``read`` the first time it is asked for."""
        if key not in self._read:
            self._read[key] = read()
        return self._read[key]

    def tokens(self, language: str | None = "en") -> list[str]:
        """The query's words as a page in ``language`` is indexed (text_utils.tokenize): the one tokenising of the
        question, once per language; every reading of its words below is made from these."""
        return self._once(("tokens", language), lambda: tokenize(self.query, language))

    def keywords(self, language: str | None = "en") -> list[str]:
        """The query's keyword tokens in ``language`` (text_utils.keyword_tokens: its words, then its acronyms),
        from ``tokens``: what the keyword search and the evidence lines rank by."""
        return self._once(("keywords", language), lambda: self.tokens(language) + acronym_tokens(self.query, language))

    @property
    def form(self) -> str:
        """The instructions beside the query as one text: what they say of the answer's form ("in USD millions",
        "in units of percents", "round to one decimal place"); no reading of what is asked."""
        return " ".join(self.instructions)

    @property
    def words(self) -> frozenset[str]:
        """The query's tokens (English) as a set: what an answer restating the question repeats."""
        return self._once("words", lambda: frozenset(self.tokens()))

    @property
    def cell_words(self) -> frozenset[str]:
        """The query's words as a table's cells are named by them (text_utils.cell_words): "assets" names "Asset"."""
        return self._once("cell_words", lambda: frozenset(cell_words(self.tokens())))

    @property
    def years(self) -> list[str]:
        """The years the query names however it words them ("FY19", "fiscal 2019": text_utils.years_named), read once."""
        return self._once("years", lambda: years_named(self.query))

    @property
    def years_written(self) -> frozenset[str]:
        """The years standing in the query as written, not inside larger numbers (text_utils.years_in)."""
        return self._once("years_written", lambda: frozenset(years_in(self.query)))

    @property
    def months(self) -> frozenset[str]:
        """The months the query names (text_utils.months_in): months({"from June to Sept."}) -> {"jun", "sep"}."""
        return self._once("months", lambda: frozenset(months_in(self.query)))

    @property
    def numbers(self) -> frozenset[str]:
        """The numbers the query writes, without thousands separators (text_utils.numbers_in): "error 288" -> "288"."""
        return self._once("numbers", lambda: frozenset(numbers_in(self.query)))

    @property
    def names(self) -> frozenset[str]:
        """The words the query writes as names (text_utils.names_in: capitalised, or letters with digits; its first
        word, capitalised anyway, left out)."""
        return self._once("names", lambda: frozenset(names_in(self.query)))

    @property
    def written_words(self) -> frozenset[str]:
        """Every word of the query as written (text_utils.WRITTEN_WORD), lower-cased, with and without a possessive 's:
        what an answer may repeat of it without a page saying it."""
        return self._once("written_words", lambda: frozenset(
            form for word in WRITTEN_WORD.findall(self.query.lower()) for form in (word, without_possessive(word))))

    @property
    def name_tokens(self) -> frozenset[str]:
        """The tokens of the words the query writes as names ("Ulta Beauty's FY2023" -> "ulta", "beauty", "s", "fy",
        "2023"): its names are tokenised here, a few words, not the query."""
        return self._once("name_tokens", lambda: frozenset(tokenize(
            " ".join(word for word in WRITTEN_WORD.findall(self.query) if without_possessive(word.lower()) in self.names))))

    @property
    def subject_words(self) -> frozenset[str]:
        """The question's subject as tokens: those of its names and the years it writes."""
        return self._once("subject_words", lambda: self.name_tokens | self.years_written)

    @property
    def subject_figures(self) -> frozenset[str]:
        """The query's figures that name its subject, not a fact: years ("FY2023"), references ("page 14",
        "Table 2") and digits inside names ("Q3", "GPT-4o"); a position ("the 2nd objective") is none.

        parse_question("What does error 288 on page 89 mean in FY2021 Q3?").subject_figures -> {"89", "2021", "3"}
        """
        def read() -> frozenset[str]:
            named = [name for name in self.names_with_first if any(c.isalpha() for c in name) and not ORDINAL.fullmatch(name)]
            inside_names = {n for name in named for n in numbers_in(name)}
            return self.years_written | set(REFERENCE.findall(self.query)) | inside_names | days_of_dates(self.query)
        return self._once("subject_figures", read)

    @property
    def names_with_first(self) -> frozenset[str]:
        """``names`` with the query's first word read too ("Q3 sales?" names "q3")."""
        return self._once("names_with_first", lambda: frozenset(names_in(" " + self.query)))

    @property
    def keys(self) -> frozenset[str]:
        """What the query looks a row up by: codes ("AR01", "Q3") and whole numbers that are neither years nor
        page or table references ("error numbers 88 and 188"), lower-cased.

        parse_question("What is the market name for EPS Code AR01 on page 9?").keys -> {"ar01"}
        """
        return self._once("keys", lambda: frozenset({w for w in self.names_with_first if CODE.match(w)}
                                                    | {n for n in self.numbers - self.subject_figures if n.isdigit()}))

    @property
    def answer_kind(self) -> str:
        """"quantity", "date" or "" (neither): what kind of answer the query asks for, read once (rule answer_kind)."""
        def read() -> str:
            asks_quantity = _ASKS_QUANTITY.search(self.query) or domains.asks_calculation(self.query) or domains.names_a_figure(self.query)
            return "" if not rules.on("answer_kind") or _ASKS_REASON.search(self.query) else (
                "date" if _ASKS_DATE.search(self.query) else "quantity" if asks_quantity else "")
        return self._once("kind", read)

    def searching(self, query: str) -> ParsedQuestion:
        """This question searched as ``query`` (its acronyms spelled out by the library, routing.py): itself when
        nothing changed, else a copy whose readings are made anew for the new text."""
        return self if query == self.query else replace(self, query=query, _read={})


rules.register("question_date", 'a date the question writes is its subject, its day as much as its month and year ("as of June 30, 2023")',
               "tests/test_checker.py::test_rule_a_date_the_question_writes_is_its_subject_day_and_all",
               pays_on="docs/experiments/2026-11-29-right-answers-held-back.md: fresh6 (held out) answers shown right 14 -> 15 of 36; "
                       "fresh8 (fitted) right 8 -> 9, wrong 3 -> 4")
_DAY_OF_MONTH = re.compile(rf"\b(?:{MONTHS})\.?\s+(\d{{1,2}})\b|\b(\d{{1,2}})\s+(?:{MONTHS})\b")


def days_of_dates(text: str) -> set[str]:
    """Rule: a date the question writes is its subject, its day as much as its month and year ("as of June 30, 2023").
    The days of the dates ``text`` writes; none with the rule off.

    days_of_dates("as of June 30, 2023, or 1 Jan 2024") -> {"30", "1"}
    """
    if not rules.on("question_date"):
        return set()
    return {day for match in _DAY_OF_MONTH.finditer(text) for day in match.groups() if day}


def as_read(question: str | ParsedQuestion) -> ParsedQuestion:
    """The question as read by the caller, or a text to search as written (nothing split off: the lab's
    legs and tests search a string whole)."""
    return question if isinstance(question, ParsedQuestion) else ParsedQuestion(text=question, query=question)


def sentences(text: str) -> list[str]:
    """sentences("What is X? Please state it in USD millions.") -> ["What is X?", "Please state it in USD millions."]"""
    # a sentence ends at . ! ? followed by space, or at ? ! followed by a capital; a line break is a space
    spans = sentence_spans(text, marks=".!?", between=r"\s+", capital_after="?!", line_breaks=False, trim=True)
    return [text[s:e] for s, e in spans]


rules.register("instruction_not_searched",
               "a sentence about the answer's form (or where to find it) is an instruction, not a search term",
               "tests/test_question.py::test_instructions_about_the_answer_are_split_from_the_question",
               pays_on="docs/experiments/2026-11-28-rules-that-pay.md: fresh3 (held out), hit@5 27 -> 26 of 30 and two right "
                       "cells read in code lost switched off; FinanceBench 88 (fitted) 3M's capex read in code lost")


@rules.switch("instruction_not_searched", stand_in=False)
def is_instruction(sentence: str) -> bool:
    """Rule: a sentence about the answer's form (or where to find it) is an instruction, not a search term.
    A sentence about the answer's form, or about where to find it (a sentence beside the question that
    names a kind of page a domain knows), rather than its content; a sentence ending in "?" never is.

    is_instruction("Please state answer in USD millions.") -> True; is_instruction("What was the answer rate?") -> False
    """
    return not sentence.rstrip().endswith("?") and bool(_INSTRUCTION.search(sentence) or domains.pages_named(sentence))


def parse_question(text: str) -> ParsedQuestion:
    """Split ``text`` into the question to search and the instructions about the answer's form."""
    parts = []
    for sentence in sentences(text):
        lead_in = _LEAD_IN.match(sentence)
        if lead_in and is_instruction(lead_in.group("lead") + "."):
            parts += [lead_in.group("lead").strip() + ":", lead_in.group("rest").strip()]
        else:
            parts.append(sentence)
    instructions = [p for p in parts if is_instruction(p)]
    asked = [p for p in parts if p not in instructions]
    for i, part in enumerate(asked):  # "What was capex (in USD millions)?": the aside is an instruction too
        asides = [inner for inner in _PARENTHESES.findall(part) if _INSTRUCTION.search(inner)]
        instructions += [f"({inner})" for inner in asides]
        asked[i] = _PARENTHESES.sub(lambda m, asides=asides: "" if m.group(1) in asides else m.group(0), part)
    if not any(part.endswith("?") for part in asked):  # no question mark left: an imperative request, search it whole
        asked, instructions = parts or [text], []
    return ParsedQuestion(
        text=text,
        query=" ".join(asked),
        instructions=instructions,
        # pages named anywhere, in the question or beside it, are where the answer is printed
        hints=list(dict.fromkeys(domains.pages_named(" ".join(instructions + asked)) + domains.pages_needed(" ".join(asked)))),
    )
