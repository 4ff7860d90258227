"""Question parsing (question.py): what is searched, what says how to answer, and its readings made once."""

from __future__ import annotations

import config
import rules
from question import parse_question


def test_instructions_about_the_answer_are_split_from_the_question():
    parsed = parse_question(
        "Answer the following question as if you are an equity research analyst: what was the FY2021 capex "
        "(in USD millions)? Give a response to the question by relying on the details shown in the cash flow statement."
    )
    assert parsed.query == "what was the FY2021 capex?"
    assert len(parsed.instructions) == 3 and "(in USD millions)" in parsed.instructions
    assert parsed.hints == ["cash flow statement"] and parsed.years == ["2021"]


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


def test_a_sentence_beside_the_question_that_names_a_kind_of_page_says_where_to_look():
    parsed = parse_question("What is the year end FY2019 total amount of inventories? Answer in USD millions. "
                            "Base your judgments on the information provided primarily in the balance sheet.")
    assert parsed.query == "What is the year end FY2019 total amount of inventories?"
    assert parsed.hints == ["balance sheet"]
    assert parse_question("What was the largest liability in the Balance Sheet in 2022?").hints == ["balance sheet"]


def test_with_no_domain_a_question_has_no_hints(monkeypatch):
    monkeypatch.setattr(config, "DOMAINS", "")
    parsed = parse_question("What is the year end FY2019 total amount of inventories? Answer in USD millions. "
                            "Base your judgments on the information provided primarily in the balance sheet.")
    assert parsed.hints == [] and parsed.query.startswith("What is the year end FY2019")


def test_a_question_is_tokenised_once_per_language_and_searching_again_reads_nothing_anew():
    parsed = parse_question("What was ACME's FY2019 capex? Answer in USD millions.")
    assert parsed.keywords() == parsed.tokens() + ["^acme", "^fy2019"] and parsed.years == ["2019"]
    assert parsed.keywords() is parsed.keywords() and parsed.tokens("de") is parsed.tokens("de")
    assert parsed.searching(parsed.query) is parsed
    spelled = parsed.searching("What was ACME's FY2019 capital expenditure?")
    assert "expenditure" in spelled.keywords() and "expenditure" not in parsed.keywords()


def test_the_readings_of_a_question_are_made_from_its_query_once():
    parsed = parse_question("What was ACME's FY2019 total assets figure for error 288 on page 9? Answer in USD millions.")
    assert parsed.cell_words == {"acme", "fy", "2019", "total", "asset", "figure", "error", "288", "page", "9"}  # no possessive "s"
    assert parsed.names == {"acme", "fy2019"} and parsed.subject_figures == {"2019", "9"} and parsed.keys == {"fy2019", "288"}
    assert parsed.subject_words == {"acme", "s", "fy", "2019"} and parsed.form == "Answer in USD millions."
    assert "usd" not in parsed.words and parsed.names is parsed.names  # the instructions are no words of what is asked


def test_the_answer_path_tokenises_the_question_once(store, embedder, three_page_pdf):
    """One question asked (qa.ask): the search, the evidence lines, the cell reader, a domain's measures and the
    citation checker all take the ParsedQuestion, so the question is tokenised once, by ParsedQuestion.tokens, and
    its instructions are not searched or checked as words of what is asked."""
    import sys

    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    import ingest
    import qa
    from retriever import Retriever

    ingest.ingest_pdf(three_page_pdf, store, embedder)
    retriever = Retriever(store, embedder)
    question = "How many tonnes of fish were landed in 1911? Answer in whole tonnes."
    query = parse_question(question).query
    tokenised, entered = [], set()

    def watch(frame, event, arg):
        if event != "call":
            return
        entered.add(frame.f_code.co_name)
        text = frame.f_locals.get("text") if frame.f_code.co_name == "tokenize" else None
        if isinstance(text, str) and ("fish were landed" in text or "whole tonnes" in text):  # the question, or a piece of it
            tokenised.append(frame.f_back.f_code.co_qualname.split(".<locals>")[0])

    llm = FakeListChatModel(responses=["In 1911 the catch reached 3,200 tonnes [L1]."])
    sys.setprofile(watch)
    try:
        answer = qa.answer_question(question, retriever, llm=llm, reads="lines")
    finally:
        sys.setprofile(None)
    assert "3,200 tonnes" in answer.evidence[0].text and answer.sentences[0].supported
    assert {"search", "best_lines", "named_cell", "answer_in_code", "verify_answer"} <= entered  # every reader was on the path
    assert query == "How many tonnes of fish were landed in 1911?"
    assert tokenised == ["ParsedQuestion.tokens"]  # once, by ParsedQuestion.tokens


def test_rule_a_question_asks_a_quantity_a_date_or_neither():
    assert parse_question("How many people did Adobe employ at the end of fiscal 2015?").answer_kind == "quantity"
    assert parse_question("What percentage of votes supported the proposal?").answer_kind == "quantity"
    assert parse_question("What did Costco say of its warehouses in FY2021? Answer in USD millions.").answer_kind == ""  # an instruction
    assert parse_question("What was Costco's capex in USD millions in FY2021?").answer_kind == "quantity"
    assert parse_question("What is Nike's FY2021 inventory turnover?").answer_kind == "quantity"  # a measure
    assert parse_question("What were Harbor Lane's total current assets in 2019?").answer_kind == "quantity"  # a line item
    assert parse_question("When did the railway reach the town?").answer_kind == "date"
    assert parse_question("In which year was the plant opened?").answer_kind == "date"
    for question in ("Why did CVS Health's effective income tax rate jump to 142.4% in 2018?", "Who chairs the board?",
                     "What drove the 21% increase in net revenues?"):
        assert parse_question(question).answer_kind == "", question
    with rules.off(["answer_kind"]):
        assert parse_question("How many people did Adobe employ?").answer_kind == ""
