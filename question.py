"""Read a question before searching: what is asked, and what only says how to answer it.

    "Answer as if you are an equity research analyst. What was Costco's FY2021 capex?
     Please state answer in USD millions."
      -> query         "What was Costco's FY2021 capex?"            (what the retriever searches)
      -> instructions  ["Answer as if you are ...", "Please state answer in USD millions."]
                                                                    (handed to the answer prompt)
      -> statements    []                                           (page hints, see below)
      -> years         ["2021"]

People wrap questions in instructions about the answer's form (units, a persona,
"relying on the details shown in the cash flow statement", "if ... then state
that"). Those words match boilerplate on many pages and swamp keyword search,
so only the question is searched. A financial statement named in an instruction
is kept as a hint of which page to find (``statements``), not as search words, and
so is a statement the question's financial measure is computed from ("current
ratio" -> the balance sheet; ``MEASURE_STATEMENTS``).

Deliberately simple: sentences are told apart by a few cue patterns (a persona,
the words answer/response/question, units and rounding, conditionals asking to
"state that"), not by a model. A sentence ending in "?" is always the question,
and instructions are split off only when such a sentence is left (a request
like "List the F1 scores, with one decimal place." is searched whole), so a
misread can only search too much, never lose the question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from text_utils import sentence_spans, years_named

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

# Canonical statement -> how filings head it (also matched in page text by the retriever).
STATEMENT_NAMES = {
    "cash flow statement": r"cash[\s-]+flows?\s+statements?|statements?\s+of\s+(?:consolidated\s+)?cash\s+flows?",
    "income statement": r"income\s+statements?|statements?\s+of\s+(?:consolidated\s+)?(?:operations|income|earnings)|profit\s+(?:and|or)\s+loss(?:\s+account)?",
    # Other comprehensive income is not what margins and turnovers are computed from: a statement of its own.
    "statement of comprehensive income": r"statements?\s+of\s+(?:consolidated\s+)?comprehensive\s+income",
    "balance sheet": r"balance\s+sheets?|statements?\s+of\s+(?:consolidated\s+)?financial\s+position",
    "statement of equity": r"statements?\s+of\s+(?:consolidated\s+)?(?:stockholders|shareholders)['’]?\s+equity",
}
_STATEMENTS = {name: re.compile(pattern, re.IGNORECASE) for name, pattern in STATEMENT_NAMES.items()}

# Financial measures -> the statements they are computed from (textbook definitions), so "Nike's
# current ratio in FY2021?" looks for the balance sheet although it never names one.
_BALANCE, _INCOME, _CASH = "balance sheet", "income statement", "cash flow statement"
MEASURE_STATEMENTS = {
    r"current ratio|quick ratio|acid[- ]test|cash ratio|working capital|debt[- ]to[- ](?:equity|assets|capital)|"
    r"debt ratio|book value|total (?:assets|liabilities)|(?:long[- ]term|short[- ]term) (?:debt|liabilities)|"
    r"accru(?:ed|al) liabilities|current (?:assets|liabilities)|shareholders['’]? equity|stockholders['’]? equity": [_BALANCE],
    r"(?:inventory|receiv\w*|payables?|asset) turnover|turnover ratio|days (?:sales|inventory|payables?)|"
    r"\bd[sip]o\b|cash conversion cycle|return on (?:assets|equity|invested capital)|\broa\b|\broe\b|\broic\b": [_INCOME, _BALANCE],
    r"gross (?:margin|profit)|operating (?:margin|income)|net (?:profit )?margin|\bebit\b|interest coverage|"
    r"earnings per share|\beps\b|effective tax rate": [_INCOME],
    r"\bebitda\b": [_INCOME, _CASH],
    r"free cash flow|capital expenditures?|\bcapex\b|operating cash flow|cash from operations|dividends paid|"
    r"depreciation and amortization|\bd&a\b": [_CASH],
    r"(?:dividend )?payout ratio": [_INCOME, _CASH],
}
_MEASURES = [(re.compile(pattern, re.IGNORECASE), statements) for pattern, statements in MEASURE_STATEMENTS.items()]

@dataclass
class ParsedQuestion:
    """A question split into what to search and how to answer; see the module docstring."""

    text: str
    query: str
    instructions: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)  # of those, the ones a financial measure asked for needs
    years: list[str] = field(default_factory=list)


def sentences(text: str) -> list[str]:
    """sentences("What is X? Please state it in USD millions.") -> ["What is X?", "Please state it in USD millions."]"""
    # a sentence ends at . ! ? followed by space, or at ? ! followed by a capital; a line break is a space
    spans = sentence_spans(text, marks=".!?", between=r"\s+", capital_after="?!", line_breaks=False, trim=True)
    return [text[s:e] for s, e in spans]


def is_instruction(sentence: str) -> bool:
    """Rule: a sentence about the answer's form (or where to find it) is an instruction, not a search term.
    A sentence about the answer's form, or about where to find it (a sentence beside the question that
    names a financial statement), rather than its content; a sentence ending in "?" never is.

    is_instruction("Please state answer in USD millions.") -> True; is_instruction("What was the answer rate?") -> False
    is_instruction("Base your judgments on the balance sheet.") -> True
    """
    return not sentence.rstrip().endswith("?") and bool(_INSTRUCTION.search(sentence) or statements_named(sentence))


def statements_named(text: str) -> list[str]:
    """Rule: a statement named beside the question is where its answer is printed.
    statements_named("relying on the consolidated statements of cash flows") -> ["cash flow statement"]"""
    return [name for name, pattern in _STATEMENTS.items() if pattern.search(text)]


def statements_measured(text: str) -> list[str]:
    """Rule: a financial measure is computed from the statements of its textbook definition.
    The statements a financial measure named in ``text`` is computed from.

    statements_measured("What is the FY2021 inventory turnover ratio for Nike?") -> ["income statement", "balance sheet"]
    """
    text = re.sub(r"[\s_]+", " ", text)  # "cash_ratio", "payables  turnover"
    found = [name for pattern, names in _MEASURES if pattern.search(text) for name in names]
    return list(dict.fromkeys(found))


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
    measured = statements_measured(" ".join(asked))
    return ParsedQuestion(
        text=text,
        query=" ".join(asked),
        instructions=instructions,
        # a statement named anywhere, in the question or beside it, is where the answer is printed
        statements=list(dict.fromkeys(statements_named(" ".join(instructions + asked)) + measured)),
        measured=measured,
        years=years_named(text),
    )
