"""Work out an answer's arithmetic in code, never in the model.

Small local models copy figures well and compute with them badly (the 1.5B default gave Nike's
inventory turnover as "1.37"; it is 3.46). So a question that asks for a computed figure (a gap, a
sum, an average, a ratio, a financial measure) gets an answer shape of its own: the model lists the
figures it uses, each with its source, and writes the arithmetic on one line without a result:

    Cost of sales 2021: 24,576 [2]
    Inventories 2021: 6,854 [1]
    Inventories 2020: 7,367 [1]
    Calculation: 24,576 / ((6,854 + 7,367) / 2)

    question -> asks_calculation()     does it want a figure worked out?
    reply    -> calculation_of()       the expression after "Calculation:", up to any "=" the model added
             -> unknown_operands()     every figure must be in the passages shown or in the question
             -> evaluate()             + - * / and parentheses only, by walking the syntax tree (no eval)
             -> format_result()        rounded as the question asks ("two decimal places"); a sum or gap
                                       of percentages stays a percentage
             -> worked_out()           "Worked out: 24,576 / ((6,854 + 7,367) / 2) = 3.46"
    reply (streamed) -> without_results()  a result the model adds after the arithmetic ("= 23.0%") is not
                                       shown: only the one worked out in code is

The figure lines are checked against their passages like any sentence (checker.py); the two
arithmetic lines are not claims about a page, so the checker leaves them unjudged.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Iterator

import domains
import rules
from text_utils import FIGURE_IN_FORMULA

CALCULATION_LABEL = "Calculation:"
WORKED_OUT_LABEL = "Worked out:"

# Words that ask for arithmetic on figures, not for a figure the page prints (a domain adds its own:
# domains.asks_calculation).
_ASKS_CALCULATION = re.compile(
    r"\b(how (many|much) (more|fewer|less|higher|lower|bigger|smaller)|gap|difference in|sum of|summed|average|mean|"
    r"ratio|percentage (change|increase|decrease|points?)|"
    r"growth rate|(increase|decrease|grow|grew|rise|rose|fall|fell|drop|dropp?ed)d? by|decimal places?|"
    r"round(ed)? (your|the) answer)\b",
    re.IGNORECASE,
)
# "In total" asks for a sum of figures ("How much was spent in total?") or for a count of things
# ("How many people are there in total?"); a count is read off the page, not worked out.
_ASKS_TOTAL = re.compile(r"\b(combined|in total|altogether|add(ed)? up)\b", re.IGNORECASE)
_ASKS_COUNT = re.compile(r"\bhow many\b", re.IGNORECASE)
_DECIMALS = re.compile(r"\b(one|two|three|four|\d) decimal places?\b", re.IGNORECASE)
_WORD_DIGITS = {"one": 1, "two": 2, "three": 3, "four": 4}
_OPERATOR = re.compile(r"\d\s*[-+*/×÷−–x]\s*[\d($]")
# The line's lead-in stays on its line: a lead-in that could run over line breaks ([\s]) made every empty
# line of a reply retry the rest of it (quadratic on a run of blank lines).
_CALCULATION_LINE = re.compile(r"^(?:[*_#>-]|[^\S\n])*calculation\s*[:：]\s*(?P<expr>.+)$", re.IGNORECASE | re.MULTILINE)
# Constants a formula may bring that no page prints: halves for an average, 100 for a percentage,
# days and months in a year for turnover days.
_FORMULA_CONSTANTS = {"2", "100", "365", "360", "12", "1000"}
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def asks_calculation(question: str) -> bool:
    """asks_calculation("How many more tweets did Germanwings get than Lufthansa?") -> True;
    asks_calculation("What is total liabilities for Costco in FY2021?") -> False;
    asks_calculation("How many people are there in total?") -> False (a count)"""
    asks_sum = _ASKS_TOTAL.search(question) and not _ASKS_COUNT.search(question)
    return bool(_ASKS_CALCULATION.search(question) or asks_sum or domains.asks_calculation(question))


def calculation_of(reply: str) -> str | None:
    """The arithmetic the model wrote last, without any result it added.

    calculation_of("Sales: 10 [1]\\nCalculation: (10 - 4) / 4 = 1.5") -> "(10 - 4) / 4";
    calculation_of("Calculation: cash ratio = 9,889 / 26,291 = 0.38") -> "9,889 / 26,291"
    """
    matches = list(_CALCULATION_LINE.finditer(reply))
    if not matches:
        return None
    match = matches[-1]  # a worked chain of steps ends with the one that gives the answer
    steps = [_clean(step) for step in match.group("expr").split("=")]
    arithmetic = _arithmetic_step(steps)
    return steps[arithmetic] if arithmetic is not None else steps[0] or None


def _clean(step: str) -> str:
    """A step of a calculation line without its citations and markup: "(10 - 4) / 4 [L1]" -> "(10 - 4) / 4"."""
    return re.sub(r"\[L?\d+(?:\s*,\s*L?\d+)*\]|[<>]", "", step).strip(" *_`.")


def _arithmetic_step(steps: list[str]) -> int | None:
    """Which of a calculation line's "="-separated steps is its arithmetic: the first that is, not the measure's name
    ("cash ratio = 9,889 / 26,291 = 0.38" -> 1), or None."""
    return next((i for i, step in enumerate(steps) if evaluate(step) is not None and _OPERATOR.search(step)), None)


rules.register("model_result_not_shown", "the result a model gives its own arithmetic is not shown: the app works it out",
               "tests/test_calc.py::test_rule_the_result_a_model_gives_its_arithmetic_is_not_shown",
               pays_on="docs/experiments/2026-11-29-answers-and-speed.md: of 27 stored replies with a calculation line, all add their "
                       "own result and 7 differ from the worked-out one (16.0% above 9.86); none is shown now")


def without_results(reply: Iterator[str]) -> Iterator[str]:
    """Rule: the result a model gives its own arithmetic is not shown: the app works it out.
    The reply as it streams, each "Calculation:" line held until it ends and shown without the result the model
    added: the 1.5B wrote "Calculation: (231 - 182) / 182 * 100 = 23.0%" above the app's "= 26.9"."""
    held, passing = "", False  # the line so far while it may be a calculation; passing: this line is not one
    for piece in reply:
        for part in filter(None, re.split(r"(\n)", piece)):
            if passing:
                passing = part != "\n"
                yield part
            elif part == "\n":
                yield _shown(held) + part
                held = ""
            else:
                held += part
                if not _may_be_calculation(held):
                    yield held
                    held, passing = "", True
    if held:
        yield _shown(held)


def _may_be_calculation(line: str) -> bool:
    """Can ``line``, so far, still be a "Calculation:" line (its markup and spaces aside)?"""
    compact = re.sub(r"[\s*_#>-]", "", line).lower().replace("：", ":")
    label = CALCULATION_LABEL.lower()
    return label.startswith(compact) or compact.startswith(label)


def _shown(line: str) -> str:
    """A line as shown: a calculation line up to its arithmetic (calculation_of's step), any other line as it is."""
    match = _CALCULATION_LINE.match(line)
    if not match or not rules.on("model_result_not_shown"):
        return line
    steps = match.group("expr").split("=")
    arithmetic = _arithmetic_step([_clean(step) for step in steps])
    return line[: match.start("expr")] + "=".join(steps[: (arithmetic or 0) + 1]).rstrip()


def _as_python(expression: str) -> str:
    """Figures as plain numbers and the usual operator signs as Python's: "$1,200 × 3%" -> "1200 * 3"."""
    text = expression.replace("×", "*").replace("÷", "/").replace("−", "-").replace("–", "-")
    text = re.sub(r"(?<=[\d)\s])x(?=[\s(\d$])", "*", text)
    text = re.sub(r"[$€£₹%]|\b(?:Rs|USD|INR|EUR)\b\.?", "", text)
    return FIGURE_IN_FORMULA.sub(lambda m: m.group(0).replace(",", ""), text)


def operands(expression: str) -> list[str]:
    """operands("(1,200 - 800) / 2") -> ["1200", "800", "2"]"""
    return [figure.replace(",", "") for figure in FIGURE_IN_FORMULA.findall(expression)]


def _figures_in(text: str) -> set[str]:
    """Every figure in ``text``, also without trailing decimal zeros: "7,692.0" -> {"7692.0", "7692"}."""
    figures = set()
    for figure in operands(text):
        figures.add(figure)
        if "." in figure:
            figures.add(figure.rstrip("0").rstrip("."))
    return figures


def unknown_operands(expression: str, passages: list[str], question: str) -> list[str]:
    """The figures of ``expression`` that are in none of the passages, nor in the question, nor a formula constant."""
    known = _figures_in("\n".join(passages)) | _figures_in(question) | _FORMULA_CONSTANTS
    return [figure for figure in operands(expression) if figure not in known]


# Only plain figures, + - * / and parentheses reach Python's parser, and only a line's worth: it warns on
# stderr about text like "12abc" (SyntaxWarning), and fails on long or deeply nested input with MemoryError
# or RecursionError rather than SyntaxError (3.11: from ~1,500 tokens). A calculation a reader can check
# fits on a line, and a page prints figures, not exponents ("1e308").
_ARITHMETIC = re.compile(r"[0-9.+\-*/() \t]{1,1000}")


def _finite(value: float) -> float:
    """``value``, or ValueError when it is inf or nan: a figure or step past a float's range is no figure."""
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {value}")
    return value


def _value(node: ast.AST) -> float:
    """The value of an arithmetic syntax tree; ValueError for anything else (names, calls, powers, True)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):  # not bool, not complex
        return _finite(float(node.value))  # float() of an int past 1.8e308 raises OverflowError
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return -_value(node.operand) if isinstance(node.op, ast.USub) else _value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _finite(_OPERATORS[type(node.op)](_value(node.left), _value(node.right)))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")


def evaluate(expression: str) -> float | None:
    """evaluate("$1,200 - 800") -> 400.0; None for anything but figures, + - * / and parentheses, a
    division by zero, or a figure or result a float cannot hold (inf and nan are no result)."""
    text = _as_python(expression)
    if not _ARITHMETIC.fullmatch(text):
        return None
    try:
        return _value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None


def decimals_asked(question: str) -> int | None:
    """decimals_asked("Round your answer to three decimal places.") -> 3"""
    match = _DECIMALS.search(question)
    if not match:
        return None
    word = match.group(1).lower()
    return _WORD_DIGITS.get(word) or int(word)


def format_result(value: float, expression: str, question: str) -> str:
    """The result as a person writes it: format_result(97.4012, "…", "… two decimal places") -> "97.40";
    a sum or gap of percentages keeps its "%": format_result(12.0, "59% - 47%", "") -> "12%"."""
    decimals = decimals_asked(question)
    text = f"{value:,.{decimals}f}" if decimals is not None else f"{round(value, 2):,.2f}".rstrip("0").rstrip(".")
    if "%" in expression and not re.search(r"[*/×÷]", expression):
        text += "%"
    return text


def worked_out(reply: str, passages: list[str], question: str) -> str | None:
    """The line the app adds under a reply that wrote a calculation, or None when it wrote none.

    It says the result, or plainly why there is none (a figure from nowhere, arithmetic it cannot do).
    """
    expression = calculation_of(reply)
    if expression is None:
        return None
    if unknown := unknown_operands(expression, passages, question):
        return f"{WORKED_OUT_LABEL} not computed: {', '.join(unknown)} is in none of the passages."
    value = evaluate(expression)
    if value is None:
        return f"{WORKED_OUT_LABEL} not computed: the calculation is not plain arithmetic."
    return f"{WORKED_OUT_LABEL} {expression} = {format_result(value, expression, question)}"


def result_of(answer: str) -> str | None:
    """The result the app worked out under an answer, or None when it computed none.

    result_of("Sales: 10 [1]\\nWorked out: 10 - 4 = 6") -> "6"
    """
    computed = re.findall(rf"^{WORKED_OUT_LABEL} (?!not computed).* = (.+)$", answer, re.MULTILINE)
    return computed[-1] if computed else None


def is_arithmetic_line(sentence: str) -> bool:
    """A "Calculation:" or "Worked out:" line: arithmetic, not a claim a page could back."""
    return bool(re.match(rf"^[\s*_#>-]*({CALCULATION_LABEL}|{WORKED_OUT_LABEL})", sentence, re.IGNORECASE))
