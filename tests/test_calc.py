"""Arithmetic in code: which questions get it, what the model's calculation line may contain, how it is shown."""

from __future__ import annotations

import calc
import rules


def test_questions_that_ask_for_arithmetic_and_ones_that_ask_for_a_printed_figure():
    for question in [
        "How many more Tweets are attributed to Germanwings than Lufthansa?",
        "What is the average performance gap between ProgramFC and our system?",
        "what is the FY2021 inventory turnover ratio for Nike?",
        "what is total debt to total assets for costco in FY 2021?",
        "By how much did revenue increase? Round your answer to one decimal place.",
        "How much was spent on research and marketing combined?",
    ]:
        assert calc.asks_calculation(question), question
    for question in [
        "What is total liabilities for costco in FY 2021?",
        "How many membership warehouses did COSTCO operate at 2021?",
        "Who chairs the audit committee?",
        "How many people are there in total in the leadership team and the staff?",
    ]:
        assert not calc.asks_calculation(question), question


def test_the_calculation_is_read_without_the_result_or_markers_the_model_added():
    reply = "Cost of sales 2021: 24,576 [2]\n**Calculation:** 24,576 / ((6,854 + 7,367) / 2) [1] = 1.37"
    assert calc.calculation_of(reply) == "24,576 / ((6,854 + 7,367) / 2)"
    assert calc.calculation_of("The documents do not say.") is None
    assert calc.calculation_of("Calculation: cash ratio = $9,889 / $26,291 = 0.38") == "$9,889 / $26,291"


def test_only_plain_arithmetic_is_evaluated():
    assert calc.evaluate("$1,200 - 800") == 400
    assert calc.evaluate("(10 - 4) / 4") == 1.5
    assert calc.evaluate("3 × 4 ÷ 2") == 6
    assert calc.evaluate("-5 + 2") == -3
    assert calc.evaluate("1 / 0") is None
    assert calc.evaluate("__import__('os').getcwd()") is None
    assert calc.evaluate("2 ** 100000") is None  # powers are not arithmetic a formula here needs
    assert calc.evaluate("10 > 4") is None


def test_the_result_is_rounded_as_asked_and_a_gap_of_percentages_stays_a_percentage():
    assert calc.format_result(97.4012, "…", "Round your answer to two decimal places.") == "97.40"
    assert calc.format_result(1.34433, "…", "round your answer to three decimal places") == "1.344"
    assert calc.format_result(12.0, "59% - 47%", "") == "12%"
    assert calc.format_result(0.45, "(1.2 + 0.9 + 0.3 + -0.6) / 4", "") == "0.45"
    assert calc.format_result(1234567.0, "1,000,000 + 234,567", "") == "1,234,567"
    assert calc.format_result(0.5, "50% / 100%", "") == "0.5"  # a ratio of percentages is a plain number


def test_worked_out_uses_only_figures_from_the_passages_or_the_question():
    passages = ["Germanwings 24 tweets", "Lufthansa 12 tweets"]
    reply = "Germanwings: 24 [1]\nLufthansa: 12 [2]\nCalculation: 24 - 12"
    assert calc.worked_out(reply, passages, "How many more?") == "Worked out: 24 - 12 = 12"
    assert calc.worked_out("Calculation: 24 - 13", passages, "How many more?") == (
        "Worked out: not computed: 13 is in none of the passages.")
    assert calc.worked_out("Calculation: (24 + 12) / 2", passages, "What is the average?") == "Worked out: (24 + 12) / 2 = 18"
    assert calc.worked_out("Calculation: sqrt(24)", passages, "?") == "Worked out: not computed: the calculation is not plain arithmetic."
    assert calc.worked_out("Germanwings had 12 more.", passages, "How many more?") is None


def test_arithmetic_lines_are_not_claims_about_a_page():
    assert calc.is_arithmetic_line("Calculation: 24 - 12")
    assert calc.is_arithmetic_line("**Worked out:** 24 - 12 = 12")
    assert not calc.is_arithmetic_line("Germanwings: 24 [1]")


def test_the_worked_out_result_is_read_back_only_when_it_was_computed():
    assert calc.result_of("Sales: 10 [1]\nWorked out: 10 - 4 = 6") == "6"
    assert calc.result_of("Worked out: not computed: 14, 13 is in none of the passages.") is None
    assert calc.result_of("The documents do not say.") is None


def test_a_figure_too_large_for_a_float_is_no_result_not_an_error():
    huge = "1" * 400  # float(int) raised OverflowError for this
    assert calc.evaluate(huge + " + 1") is None
    assert calc.evaluate(huge) is None
    reply = f"Sales: {huge} [1]\nCalculation: {huge} + 1"
    assert calc.calculation_of(reply) == f"{huge} + 1"
    assert calc.worked_out(reply, [f"Sales {huge}", "Costs 1"], "What is the sum?") == (
        "Worked out: not computed: the calculation is not plain arithmetic.")


def test_an_infinite_or_undefined_result_is_no_result():
    assert calc.evaluate("1e308*10") is None  # was inf (and a page prints no exponent)
    e308 = "1" + "0" * 308  # 1e308 as a page would print it
    assert calc.evaluate(f"{e308} * 10") is None  # was inf
    assert calc.evaluate(f"{e308} * 10 - {e308} * 10") is None  # was nan
    assert calc.evaluate(f"1 / ({e308} * 10)") is None  # an infinite step makes no finite result
    assert calc.evaluate(f"{e308} / 0.0000000001") is None
    assert calc.evaluate(f"{e308} + {e308[:-1]}") == 1.1e308  # large but finite is still a result


def test_text_that_is_not_arithmetic_never_reaches_the_parser_limits():
    # Python's parser raised MemoryError on ~1,500 words and RecursionError on deep nesting
    assert calc.evaluate("x " * 3000) is None
    assert calc.evaluate("-" * 20000 + "1") is None
    assert calc.evaluate("True + 1") is None  # a name, not a figure
    assert calc.evaluate("12abc + 1") is None  # not parsed: Python warned "invalid decimal literal" on stderr
    assert calc.calculation_of("\n" * 20000) is None  # was quadratic in a run of blank lines


def test_rule_the_result_a_model_gives_its_arithmetic_is_not_shown():
    def shown(pieces: list[str]) -> str:
        return "".join(calc.without_results(iter(pieces)))

    # the 1.5B's own result (23.0%) stood above the app's "Worked out: ... = 26.9"
    reply = ["RevPAR 2023: 231 [L2]\nCalc", "ulation: (231 - 182) / 182", " * 100 = 23.0%", "\n\nThat is the change."]
    assert shown(reply) == "RevPAR 2023: 231 [L2]\nCalculation: (231 - 182) / 182 * 100\n\nThat is the change."
    assert shown(["Calculation: cash ratio = 9,889 / 26,291 = 0.38"]) == "Calculation: cash ratio = 9,889 / 26,291"
    assert shown(["**Calculation:** 10 - 4 = 6 [L1]"]) == "**Calculation:** 10 - 4"
    assert shown(["Calculated values are not shown here = 5"]) == "Calculated values are not shown here = 5"  # not the label
    assert calc.worked_out(shown(reply), ["RevPAR 231 and 182"], "By what percentage did it change? Round to one decimal place.") == (
        "Worked out: (231 - 182) / 182 * 100 = 26.9")
    with rules.off({"model_result_not_shown"}):
        assert shown(reply) == "".join(reply)
