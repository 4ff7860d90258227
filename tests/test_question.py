"""Question parsing (question.py): pure functions."""

from __future__ import annotations

from question import parse_question, statements_measured, statements_named


def test_instructions_about_the_answer_are_split_from_the_question():
    parsed = parse_question(
        "Answer the following question as if you are an equity research analyst: what was the FY2021 capex "
        "(in USD millions)? Give a response to the question by relying on the details shown in the cash flow statement."
    )
    assert parsed.query == "what was the FY2021 capex?"
    assert len(parsed.instructions) == 3 and "(in USD millions)" in parsed.instructions
    assert parsed.statements == ["cash flow statement"] and parsed.years == ["2021"]


def test_a_conditional_asking_to_state_something_is_an_instruction():
    parsed = parse_question("Is gross margin useful here? If gross margin is not a useful metric, then please state that and explain why.")
    assert parsed.query == "Is gross margin useful here?" and len(parsed.instructions) == 1


def test_plain_questions_and_imperatives_are_searched_whole():
    for text in ("According to the report, how do 5% of the Latinos see their children's future?",
                 "List all the sections that discuss the experiment setup.",
                 "What was the response rate of the survey?",
                 "Please state the answer in USD millions."):  # nothing but an instruction: search it all
        parsed = parse_question(text)
        assert parsed.query == text and parsed.instructions == []


def test_statement_names_are_read_however_they_are_written():
    assert statements_named("the Consolidated Statements of Cash Flows and the balance sheet") == ["cash flow statement", "balance sheet"]
    assert statements_named("statement of operations") == ["income statement"]


def test_a_financial_measure_names_the_statements_it_is_computed_from():
    assert statements_measured("What is Nike's current ratio?") == ["balance sheet"]
    assert statements_measured("What is  cash_ratio in FY2021?") == ["balance sheet"]  # spacing and underscores aside
    assert statements_measured("what is the FY2021 inventory turnover ratio?") == ["income statement", "balance sheet"]
    assert statements_measured("What was EBITDA?") == ["income statement", "cash flow statement"]
    assert statements_measured("How many stores opened?") == []
    parsed = parse_question("What was free cash flow in 2021? Please state answer in USD millions.")
    assert parsed.measured == ["cash flow statement"] and parsed.statements == ["cash flow statement"]
    # other comprehensive income is a statement of its own, not the income statement ratios use
    assert statements_named("Consolidated Statements of Comprehensive Income") == ["statement of comprehensive income"]


def test_a_sentence_beside_the_question_that_names_a_statement_says_where_to_look():
    parsed = parse_question("What is the year end FY2019 total amount of inventories? Answer in USD millions. "
                            "Base your judgments on the information provided primarily in the balance sheet.")
    assert parsed.query == "What is the year end FY2019 total amount of inventories?"
    assert parsed.statements == ["balance sheet"]
    assert parse_question("What was the largest liability in the Balance Sheet in 2022?").statements == ["balance sheet"]
