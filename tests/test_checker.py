"""The citation checker (checker.py): each rule on its own, and verify_answer on real passages (no model: it reads words and figures)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pymupdf
import pytest

import checker
import extract
import routing  # noqa: F401  (registers its rules: the registry's tests read them too)
import rules
from conftest import INCOME_TABLE
from question import parse_question
from records import Hit
from text_utils import number_words_as_digits

ROOT = Path(__file__).resolve().parent.parent


def test_parse_citations_and_sentences_worked_examples():
    assert checker.parse_citations("Rain fell [2]. It flooded [1, 3][2].") == [2, 1, 3]
    assert checker.split_sentences("It rained. [1] Then it snowed [2].") == ["It rained. [1]", "Then it snowed [2]."]
    assert checker.split_sentences("Funds were Rs. 1,039 million, see Fig. 3 [2]. Then e.g. this.\n- a [1]") == [
        "Funds were Rs. 1,039 million, see Fig. 3 [2].", "Then e.g. this.", "- a [1]"]
    assert checker.split_sentences("The directors are Mr. R.A. Shah and Mr. C.M. Maniar [1]. Then it rained.") == [
        "The directors are Mr. R.A. Shah and Mr. C.M. Maniar [1].", "Then it rained."]
    assert checker.split_sentences("It holds 1 cable (approx. 20 cm) and 1 case (approx. 8 cm) [1]. Then it rained.") == [
        "It holds 1 cable (approx. 20 cm) and 1 case (approx. 8 cm) [1].", "Then it rained."]


def _hit(text: str, page: int) -> Hit:
    return Hit(id=f"c{page}", collection="pdf_rag_test", doc_name="facts.pdf", page=page, start=0, end=len(text), text=text)


def test_fabricated_and_unsupported_citations_are_flagged():
    sources = [_hit("The railway reached the town in 1889.", 3), _hit("Cod and haddock were landed.", 2)]
    checked = checker.verify_answer(
        "The railway reached the town in 1889 [1]. The mayor owned eleven racehorses [2]. Cod was landed [7].",
        sources,
    )
    assert checked[0].supported and checked[0].citations[0].page == 3
    assert checked[1].supported is False and not checked[1].citations[0].verified
    assert checked[2].fabricated == [7]


def test_a_figure_the_passage_does_not_contain_is_not_supported():
    sources = [_hit("In 1911 the catch reached 3,200 tonnes, a record for the coast.", 2)]
    checked = checker.verify_answer("In 1911 the catch reached 3,200 tonnes [1]. In 1911 the catch reached 4,100 tonnes [1].", sources)
    assert checked[0].supported and checked[1].supported is False


def test_a_name_the_passage_does_not_write_is_a_missing_specific():
    assert checker.missing_specifics("In June GPT-4o scored 61.5%", "In June GPT-4 scored 61.5%") == {"gpt-4o"}


def test_a_month_the_passage_does_not_name_is_not_supported():
    sources = [_hit("For students in the Jan intake, the committee is due by 01 Aug of the same year.", 13)]
    [checked] = checker.verify_answer("Jan intake students must form the committee by 01 June of the same year [1].", sources)
    assert checked.supported is False


def test_a_sentence_without_markers_gets_an_inferred_citation():
    sources = [_hit("Cod and haddock were landed in the harbour.", 2), _hit("The railway reached the town in 1889.", 3)]
    checked = checker.verify_answer("The railway reached the town in 1889.", sources)
    citation = checked[0].citations[0]
    assert citation.inferred and citation.verified and citation.page == 3


def test_a_quotation_must_be_in_the_passage_word_for_word():
    sources = [_hit("10. As regards paragraph 19 of the Application, it refers the Court to Exhibits P-1 and P-2.", 2)]
    quoted, misquoted = checker.verify_answer(
        'It says: "As regards paragraph 19 of the Application, it refers the Court to Exhibits P-1 and P-2" [1]. '
        'It says: "As regards paragraph 19 of the Application, it refers the Court to the Judgment" [1].',
        sources,
    )
    assert quoted.supported and misquoted.supported is False
    # dashes are punctuation like any other: a title is the same title with "--" for the page's "-"
    assignments = [_hit("Unit 8 Key Assignments:\nCritical Thinking Case Study- Discrimination in\nthe Workplace Continues", 15)]
    [title] = checker.verify_answer('The case study under Unit 8 is "Critical Thinking Case Study-- Discrimination in the '
                                    'Workplace Continues" [1].', assignments, "What is the case study under Unit 8?")
    assert title.supported


def test_restating_the_question_with_some_number_from_the_page_is_not_verified():
    """Page 56 of a manual mentions USB: '56' is on the page, yet says nothing about steps."""
    sources = [_hit("56 User Manual. Data exchange via USB is possible while the USB stick is inserted.", 56)]
    question = "How many steps are there for data exchange via USB?"
    [checked] = checker.verify_answer("There are 56 steps for data exchange via USB.", sources, question)
    assert checked.supported is False and not checked.citations


def test_a_figure_from_another_row_or_year_of_the_cited_table_is_not_supported():
    sources = [_hit(INCOME_TABLE, 4)]
    right, other_row, other_year = checker.verify_answer(
        "Net income was $296.0 million in 2023 [1]. Net income was $412.0 million in 2023 [1]. "
        "Net income was $223.0 million in 2023 [1].", sources, "What was net income?")
    assert right.supported and right.citations[0].verified
    assert other_row.supported is False and other_year.supported is False
    assert checker.misplaced_figures("Net income was 412", "| | 2023 |\n| Operating income | 412 |\n| Net income | 296 |") == {"412"}
    assert checker.table_units(["| | 2023 | 2022 |", "| Net sales | 3,226.8 | 2,729.4 |"]) == [
        "Net sales 2023 3,226.8", "Net sales 2022 2,729.4"]


ERROR_LIST = ("Error number\nError description\nAction instructions\n6\nBrewing unit\nlockup current\n"
              "6 Switch off the coffee machine\n88\nBoiler:\nover-temperature\n6 Call WMF Service\n"
              "89\nBoiler:\nheat-up time error\n6 If error not remedied call WMF Service")


MARKETS = "EPS Code\nGeographic Market Name\nColorado Springs and\nSoutheastern Colorado\nCO01\nMetro Denver\nCO02"


def test_a_lookup_answered_from_another_row_of_a_cell_per_line_table_is_not_supported():
    """The text extractor writes a table one cell per line: the row is found by the question's key
    ("error 88", "EPS Code AR01") and the keys of the rows around it."""
    sources = [_hit(ERROR_LIST, 88)]
    question = "What are the error descriptions corresponding to error number 88?"
    right, next_row, first_row = checker.verify_answer(
        "Error 88 is Boiler: over-temperature [1].\nThe description is Boiler: heat-up time error [1].\n"
        "The description is Brewing unit lockup current [1].", sources, question)
    assert right.supported and right.citations[0].verified
    assert next_row.supported is False and first_row.supported is False
    [other_code] = checker.verify_answer("The market name for EPS Code AR01 is Metro Denver [1].", [_hit(MARKETS, 9)], "What's the geographic market name for EPS Code AR01?")
    assert other_code.supported is False
    [own_code] = checker.verify_answer("The market name for EPS Code CO02 is Metro Denver [1].", [_hit(MARKETS, 9)], "What's the geographic market name for EPS Code CO02?")
    assert own_code.supported
    table = "| Error number | Error description |\n|---|---|\n| 88 | Boiler: over-temperature |\n| 89 | Boiler: heat-up time error |"
    row_right, row_next = checker.verify_answer("Error 88 is Boiler: over-temperature [1].\nThe description is Boiler: heat-up time error [1].",
                                                [_hit(table, 88)], question)
    assert row_right.supported and row_next.supported is False  # a Markdown row's key is its first cell


def balance_sheet_text(more_rows: tuple = ()) -> str:
    """A balance sheet laid out in columns on a real PDF page, read back by the default text extractor,
    which writes it one cell per line: "Total liabilities" / "41,190" / "36,851" / ..."""
    page = pymupdf.open().new_page()
    page.insert_text((72, 80), "CONSOLIDATED BALANCE SHEETS (amounts in millions)")
    rows = [("Total current liabilities", "$ 29,441", "$ 24,844"), *more_rows, ("Total liabilities", "41,190", "36,851"),
            ("TOTAL EQUITY", "18,078", "18,705"), ("TOTAL LIABILITIES AND EQUITY", "$ 59,268", "$ 55,556")]
    for y, (label, this_year, last_year) in enumerate(rows):
        for x, cell in ((72, label), (350, this_year), (450, last_year)):
            page.insert_text((x, 100 + 16 * y), cell)
    return extract.read_page(page).text


def test_a_figure_under_another_row_label_of_a_cell_per_line_table_is_not_supported():
    """The text extractor writes a table one cell per line, label first: a figure belongs to the label above it."""
    text = balance_sheet_text()
    assert "Total liabilities\n41,190\n" in text  # one cell per line, as the check assumes
    question = "What were Costco's total liabilities in FY2021?"
    wrong_row, right_row, own_label = checker.verify_answer(
        "Total liabilities were $59,268 million in 2021 [1]. Total liabilities were $41,190 million in 2021 [1]. "
        "Total liabilities and equity were $59,268 million in 2021 [1].", [_hit(text, 38)], question)
    assert wrong_row.supported is False
    assert right_row.supported and right_row.citations[0].verified
    assert own_label.supported and own_label.citations[0].verified
    assert checker.under_another_label("Total liabilities were 59,268.", text)
    # without a "Total liabilities" row in the passage, the sum of liabilities and equity is still no figure of liabilities
    assert checker.under_another_label("Total liabilities were 59,268.", text.replace("Total liabilities\n", "Other\n"))
    assert not checker.under_another_label("Total liabilities and equity were 59,268.", text.replace("Total liabilities\n", "Other\n"))
    assert not checker.names_one_side("Cash and cash equivalents", {"cash"})  # its second side says "cash" too


def test_a_figure_whose_row_lacks_the_qualifier_the_question_asks_for_is_not_supported():
    """"Total long-term liabilities" is not the "Total liabilities" row when "Other long-term liabilities" is a row too."""
    text = balance_sheet_text((("Other long-term liabilities", "2,415", "1,935"), ("Total Costco stockholders' equity", "17,564", "18,284")))
    [total] = checker.verify_answer("The total long-term liabilities for Costco in FY 2021 are $41,190 million [1].",
                                    [_hit(text, 38)], "What is total long-term liabilities for Costco in FY 2021?")
    assert total.supported is False
    # the company's name, even written in lower case, is the question's subject, not a qualifier of a row
    [plain] = checker.verify_answer("The total liabilities for Costco in FY 2021 are $41,190 million [1].",
                                    [_hit(text, 38)], "What is total liabilities for costco in FY 2021?")
    assert plain.supported and plain.citations[0].verified
    # a year heads a column; it is no figure of some row ("May 31," / "2021" / "2020" is a row of years)
    dated = balance_sheet_text((("May 31,", "2021", "2020"),))
    [line] = checker.verify_answer("Total liabilities, 2020: 36,851 [1]", [_hit(dated, 38)], "What is the debt ratio in FY2021?")
    assert line.supported and line.citations[0].verified
    # the qualifier is the claim's: a measure's line names its row, whatever words the question's measure has
    assets = balance_sheet_text((("Cash and cash equivalents", "9,889", "8,348"), ("Inventories", "6,854", "7,367")))
    [stock] = checker.verify_answer("Inventories, 2021: 6,854 [1]", [_hit(assets, 61)],
                                    "What is cash conversion cycle in FY2021 for Nike?")
    assert stock.supported and stock.citations[0].verified


def test_a_figure_from_the_row_of_another_year_span_is_not_supported():
    """Indian annual reports run tables by financial year ("2003-04"); the row's year is the line above its figures."""
    dividends = _hit("Erstwhile ITC Hotels Limited\nFinancial\nDate of Declaration\nTotal Dividend\nUnclaimed Dividend\nDue for\n"
                     "Year\nof Dividend\n(Rs.)\nas on 31/03/2007\ntransfer to IEPF\n2000-01\n17th August, 2001\n3,02,16,492.00\n"
                     "3,04,552.00\n2003-04\n14th July, 2004\n6,04,32,984.00\n6,99,704.00", 13)
    question = "What is total dividend of Erstwhile ITC Hotels Limited (in Rupee) between 2002 to 2003 year?"
    [other_year] = checker.verify_answer("The total dividend between 2002 to 2003 year is Rs. 6,04,32,984.00 [1].", [dividends], question)
    [own_year] = checker.verify_answer("The total dividend in 2003-04 was Rs. 6,04,32,984.00 [1].", [dividends],
                                       "What is total dividend of Erstwhile ITC Hotels Limited in 2003-04?")
    assert other_year.supported is False
    assert own_year.supported and own_year.citations[0].verified


COUNTRY_SLIDE = ("Country Overview\nPopulation: (July 2013 est.) 251,160,124\nGDP (per capita): (2014) $4,271\n"
                 "Facebook: 4th in the world at 70 million users\n50%\n$4,271\n85\n$4,071\n35%\n2010\n2011\n2012\n2013\n"
                 "GDP per capita\nSmartphone Penetration")


def test_a_figure_the_page_labels_is_judged_by_its_label_not_by_a_bare_repeat_in_a_chart():
    """A flattened chart repeats "$4,271" among its years; the slide's own line says it is 2014's."""
    question = "How much greater is the GDP per capita for 2012 than 2011?"
    [wrong_year] = checker.verify_answer("The GDP per capita for 2012 was $4,271 [1].", [_hit(COUNTRY_SLIDE, 3)], question)
    [own_year] = checker.verify_answer("The GDP per capita in 2014 was $4,271 [1].", [_hit(COUNTRY_SLIDE, 3)],
                                       "What was the GDP per capita?")
    assert wrong_year.supported is False
    assert own_year.supported and own_year.citations[0].verified
    # a figure written only among bare values keeps the words of the text it was read with
    assert checker.misplaced_figures("GDP per capita in 2012 was $4,071", COUNTRY_SLIDE, question) == set()


def test_a_reference_number_the_passage_also_writes_is_no_misplaced_figure():
    caption = _hit("Figure 6: Error Analysis of Step-Back Prompting on TimeQA. Left: Step-Back + RAG vs Baseline\n"
                   "predictions. Right: Step-Back RAG vs RAG predictions. Step-Back + RAG is able to fix 39.9%\n"
                   "of the predictions where the baseline prediction is wrong, while causing 5.6% errors.", 12)
    [title] = checker.verify_answer("Figure 6: Step-Back + RAG vs Baseline predictions [1].", [caption],
                                    "What is the sum of the baseline wrong percentages?")
    [other_figure] = checker.verify_answer("Figure 7: Step-Back + RAG vs Baseline predictions [1].", [caption],
                                           "What is the sum of the baseline wrong percentages?")
    assert title.supported and title.citations[0].verified
    assert other_figure.supported is False
    assert checker.shared_references("Figure 6 and Table 2", "see Fig. 6, Table 3") == {"6"}


def test_a_sentence_that_denies_what_the_page_lists_is_not_supported():
    sources = [_hit("LinkedIn Metrics\nFollowers\nImpressions\nPost Reach\nPost Types\nVideo Views", 13)]
    question = "Which metrics are NOT included in LinkedIn Metrics: Post Reach, Post Types, Video Views?"
    denied, listed = checker.verify_answer("Post Reach, Post Types and Video Views are not included in LinkedIn Metrics [1].\n"
                                           "LinkedIn Metrics include Post Reach, Post Types and Video Views [1].", sources, question)
    assert denied.supported is False and listed.supported
    door = [_hit("Staff notice. The staff door code is 4712. Please keep it private.", 1)]
    [verdict] = checker.verify_answer("No, the staff door code is 4712 [1].", door, "Is the staff door code 4711?")
    assert verdict.supported  # the "No" of a yes/no answer is its verdict, not a denial of the page


def test_a_figure_in_another_sentence_of_the_cited_page_is_not_supported():
    sources = [_hit("Wages were 11.4% of net sales. Rent was 6.2% of net sales.", 3)]
    [checked] = checker.verify_answer("Wages were 6.2% of net sales [1].", sources, "What share of net sales were wages?")
    assert checked.supported is False


def test_the_questions_subject_need_not_be_repeated_by_the_passage():
    """The filing says "fiscal 2022" where the user said FY2023, and never names the company in the passage."""
    sources = [_hit("Merchandise inventories, net were $1,742.2 million at the end of fiscal 2022, "
                    "compared to $1,499.1 million at the end of fiscal 2021.", 7),
               _hit("Ulta Beauty Announces Fourth Quarter and Fiscal 2022 Results", 1)]  # another passage shown names it
    question = "What were Ulta Beauty's inventories in FY2023?"
    [checked] = checker.verify_answer("Ulta Beauty's inventories in FY2023 were $1,742.2 million [1].", sources, question)
    assert checked.supported and checked.citations[0].verified and checked.citations[0].page == 7


def test_a_sentence_naming_what_no_source_holds_is_not_supported():
    """The question's subject need not be on the cited page, but some passage shown must name it:
    "the plants of Apple Inc." asked of a tobacco company's report is a premise the documents do not share."""
    plants = _hit("xiv) Plant Locations\nThe Company has two plants: one is located at Andheri (Mumbai) and the other at "
                  "Guldhar (Ghaziabad).", 15)
    cover = _hit("GODFREY PHILLIPS INDIA LIMITED\nAnnual Report 2002-2003", 1)
    answer = "The two plants of {} are located at Andheri (Mumbai) and Guldhar (Ghaziabad) [1]."
    [foreign] = checker.verify_answer(answer.format("Apple Inc."), [plants, cover], "Where are the two plants of Apple Inc. located?")
    [own] = checker.verify_answer(answer.format("Godfrey Phillips"), [plants, cover],
                                  "Where are the two plants of Godfrey Phillips located?")
    assert foreign.supported is False
    assert own.supported and own.citations[0].page == 15
    assert checker.strangers("Where are the two plants of Apple Inc. in FY 2003?", [plants, cover]) == {"apple", "inc"}
    assert checker.strangers("How many hours must a Singaporean student serve?", [plants]) == set()  # a word, not a printed name
    filed = Hit(id="c7", collection="pdf_rag_test", doc_name="ulta_beauty_q4.pdf", page=7, start=0, end=9, text="Net sales rose.")
    assert checker.strangers("What were Ulta Beauty's net sales?", [filed]) == set()  # the file name names it


def test_words_pointing_at_the_source_need_not_be_on_it():
    """"… of the slide is …", "as stated in the document": words about where a fact stands, not facts of the page."""
    slide = _hit("Medical Informatics and HIT Systems\nDavid Lubliner", 1)
    [title] = checker.verify_answer('The title of the slide is "Medical Informatics and HIT Systems" [1].', [slide],
                                    "What is the title of the slide?")
    [wrong] = checker.verify_answer('The title of the slide is "Nursing Informatics and Health Systems" [1].', [slide],
                                    "What is the title of the slide?")
    assert title.supported and title.citations[0].verified
    assert wrong.supported is False
    watch = _hit("During a workout\nPress and hold to lock or unlock the screen.\nPress to mute.", 12)
    [stated] = checker.verify_answer("Press and hold to lock or unlock the screen, as stated in the document [1].", [watch],
                                     "How do I lock the screen during a workout?")
    assert stated.supported and stated.citations[0].verified
    line = _hit("We ended production of the 747 wide-body model in 2022.", 3)
    [preamble] = checker.verify_answer("Based on the PDF document, we ended production of the 747 "
                                       "wide-body model in 2022 [1].", [line], "Which model did Boeing end in 2022?")
    assert preamble.supported


def test_a_restated_question_is_backed_by_its_answer_standing_beside_what_was_asked():
    """Small models restate the question in their own words ("the car's ... uses"); the answer they add
    must be on the page, on the line of (or just below) what was asked about."""
    brochure = _hit("Stay connected\nWi-Fi Connect\nTurn your Toyota into a hotspot with 4G connectivity.\n"
                    "Safety Connect\nRound-the-clock help when the unexpected happens.", 6)
    question = "What technology does the car's Wi-Fi Connect use?"
    [right] = checker.verify_answer("The car's Wi-Fi Connect uses 4G connectivity [1].", [brochure], question)
    [elsewhere] = checker.verify_answer("The car's Safety Connect uses 4G connectivity [1].", [brochure],
                                        "What technology does the car's Safety Connect use?")
    assert right.supported and right.citations[0].verified
    assert elsewhere.supported is False  # 4G stands beside Wi-Fi Connect, not Safety Connect
    # side by side vouches for no rank, count or colour, nor for a page without the question's names
    panel = _hit("Operators\nTelkomsel 132 million subscribers\nXL Axiata 60 million subscribers\nIndosat 58 million", 7)
    [rank] = checker.verify_answer("The second largest operator by subscribers is Indosat [1].", [panel],
                                   "What is the second largest operator by subscribers?")
    assert rank.supported is False
    cover = _hit("Camry XSE\nCelestial Silver Metallic with Midnight Black Metallic roof", 5)
    assert not checker.answer_beside_question("The color of the Camry XSE on the cover is black.", cover.text,
                                              "What color is the Camry XSE on the cover?")  # a caption, not the picture
    index = _hit("YOLOV3Neck (class in mmdet.models.necks)\nYOLOV3Head (class in mmdet.models.dense_heads)", 468)
    assert not checker.answer_beside_question(  # the page never names the paper the question is about
        "The class name for V3Det is YOLOV3Head.", index.text,
        "If I want to use the detector in the paper V3Det, what is the implemented class name in mmdet.models.dense_heads?")
    # a name above its role on a title page; "the first page" says where to look, it asks no rank
    title_page = _hit("Strategic Plan\n2016-2018\nRick Scott\nGOVERNOR\nCeleste Philip, MD\nState Surgeon General", 1)
    [governor] = checker.verify_answer("The name of the governor is Rick Scott [1].", [title_page],
                                       "What is the name of the governor as mentioned on the first page?")
    assert governor.supported
    statement = _hit("Total assets\n41,190\nTotal liabilities\n29,268", 40)  # one cell per line: the figure's label is above it
    assert not checker.answer_beside_question("The total liabilities are 41,190.", statement.text, "What are the total liabilities?")


def test_a_number_the_question_names_is_a_fact_to_back_not_its_subject():
    """"error 288" in the question does not let "Heater error" from error 188's row pass; a year or a page reference does."""
    sources = [_hit("Error number | Error description\n188 | Heater error\n189 | Steam boiler: heat-up time error", 89)]
    question = "What are the error descriptions corresponding to error numbers 288 and 388?"
    [checked] = checker.verify_answer('The description of error number 288 is "Heater error" [1].', sources, question)
    assert checked.supported is False
    assert checker.subject_figures("What does error 288 on page 89 mean in FY2021 Q3?") == {"89", "2021", "3"}


def test_a_position_the_question_asks_for_is_a_fact_to_back():
    """A bench answer called a strategy page's goal "the 2nd objective"; the page numbers none of its objectives."""
    page = ("REGULATORY EFFICIENCY\nGOAL: Establish a regulatory structure that supports the state's strategic priorities\n"
            "OBJECTIVES\nIncrease the number of communications products.\nImprove efficiency of processes.")
    question = "WHAT IS THE 2nd OBJECTIVE OF REGULATORY EFFICIENCY?"
    [checked] = checker.verify_answer("The 2nd objective of Regulatory Efficiency is to establish a regulatory structure that "
                                      "supports the state's strategic priorities [1].", [_hit(page, 5)], question)
    assert checked.supported is False
    assert checker.subject_figures(question) == set()


def test_a_currency_names_nothing():
    assert checker.names_in("The dividend paid was Rs. 1,907.30 by ITC") == {"itc"}
    assert checker.names_in("The total dividend of ITC (in Rupee) was paid in US Dollars") == {"itc"}  # currencies name nothing


def test_the_word_for_word_answer_from_a_short_page_is_verified():
    sources = [_hit("Staff notice. The staff door code is 4711. Please keep it private.", 1)]
    [checked] = checker.verify_answer("The staff door code is 4711 [1].", sources, "What is the staff door code?")
    assert checked.supported and checked.citations[0].verified


def test_a_wrong_marker_stays_flagged_and_the_page_that_backs_the_sentence_is_inferred():
    sources = [_hit("The railway reached the town in 1889.", 3), _hit("Cod and haddock were landed.", 2)]
    [checked] = checker.verify_answer("The railway reached the town in 1889 [2].", sources)
    wrong, found = checked.citations
    assert (wrong.page, wrong.verified) == (2, False)
    assert (found.page, found.verified, found.inferred) == (3, True, True) and checked.supported


def test_co_cited_pages_that_do_not_back_a_supported_sentence_are_not_shown():
    sources = [_hit("The railway reached the town in 1889.", 3), _hit("Cod and haddock were landed.", 2)]
    [checked] = checker.verify_answer("The railway reached the town in 1889 [1][2].", sources)
    assert [(c.page, c.verified) for c in checked.citations] == [(3, True)]


# -----------------------------------------------------------------------------
# Each rule on its own, by the principle it states (no model: these are plain functions)


def test_rule_a_figure_must_stand_in_its_passage():
    assert checker.missing_specifics("In 1911 the catch was 4,100 tonnes", "In 1911 the catch was 3,200 tonnes") == {"4100"}
    assert checker.missing_specifics("In 1911 the catch was 3,200 tonnes", "In 1911 the catch was 3,200 tonnes") == set()


def test_rule_a_figure_must_stand_beside_the_thing_it_is_said_of():
    table = "| | 2023 |\n| Operating income | 412 |\n| Net income | 296 |"
    assert checker.misplaced_figures("Net income was 412", table) == {"412"}
    assert checker.misplaced_figures("Net income was 296", table) == set()


def test_rule_a_figure_of_a_cell_per_line_table_belongs_to_the_label_above_it():
    rows = "Long-term debt\n$\n6,692\nTotal liabilities\n$\n9,000"
    assert checker.under_another_label("Total liabilities were 6,692.", rows)
    assert not checker.under_another_label("Total liabilities were 9,000.", rows)


def test_rule_a_row_lacking_a_word_the_claim_says_is_another_row():
    rows = "Total liabilities\n41,190\nOther long-term liabilities\n2,415"
    assert checker.under_another_label("Total long-term liabilities were 41,190.", rows)
    assert not checker.under_another_label("Total liabilities were 41,190.", rows)


def test_rule_a_row_adding_two_things_does_not_back_one_of_them():
    assert checker.names_one_side("TOTAL LIABILITIES AND EQUITY", {"total", "liabilities"})
    assert not checker.names_one_side("TOTAL LIABILITIES AND EQUITY", {"total", "liabilities", "equity"})


def test_rule_a_lookup_is_answered_from_the_row_of_its_key():
    errors = "88\nBoiler:\nover-temperature\n89\nBoiler:\nheat-up time error"
    assert checker.beside_another_key("It is Boiler: heat-up time error.", errors, "What is error 88?")
    assert not checker.beside_another_key("It is Boiler: over-temperature.", errors, "What is error 88?")


_CURRENT = Hit("1", "c", "acme.pdf", 5, 0, 9, "Balance Sheets · Total current assets · 2019: 16,525 · 2018: 15,134 · (In millions)",
               trace={"kind": "row", "label": "Total current assets"})
_ALL = Hit("2", "c", "acme.pdf", 5, 0, 9, "Balance Sheets · Total assets · 2019: 45,400 · 2018: 40,830 · (In millions)",
           trace={"kind": "row", "label": "Total assets"})


def test_rule_a_rows_figure_backs_only_under_the_column_named():
    assert checker.in_unnamed_column("Total current assets were 16,525 in 2018.", _CURRENT.text, "")
    assert not checker.in_unnamed_column("Total current assets were 15,134 in 2018.", _CURRENT.text, "")
    # the sentence names no column: the question's year picks it
    assert checker.in_unnamed_column("They were 16,525.", _CURRENT.text, "What were total current assets in 2018?")
    assert not checker.in_unnamed_column("They were 16,525.", _CURRENT.text, "What were total current assets?")


# a balance sheet as the text extractor writes it: one cell per line, the years heading the columns
_ONE_CELL_PER_LINE = "December 31,\n2019\n2018\nTotal current assets ..........\n16,525\n15,134\nTotal assets\n45,400\n40,000"


def test_a_passages_table_backs_a_figure_only_under_the_column_named():
    """The row_column rule holds in a passage's table printed one cell per line, read into rows with their heads."""
    assert checker.in_unnamed_column("Total current assets were 15,134 in 2019.", _ONE_CELL_PER_LINE, "")
    assert not checker.in_unnamed_column("Total current assets were 16,525 in 2019.", _ONE_CELL_PER_LINE, "")
    assert checker.in_unnamed_column("They were 15,134.", _ONE_CELL_PER_LINE, "What were total current assets in 2019?")
    # the same figure written in a sentence as well may be backed there
    assert not checker.in_unnamed_column("They were 15,134 in 2019.", "Assets grew to 15,134.\n" + _ONE_CELL_PER_LINE, "")
    # in the whole answer: the other year's figure gets no ✓, the asked year's does
    passage = _hit(_ONE_CELL_PER_LINE, 5)
    wrong, right = (checker.verify_answer(f"Total current assets were {figure} in 2019 [1].", [passage])[0].supported
                    for figure in ("15,134", "16,525"))
    assert (wrong, right) == (False, True)


def test_a_sentence_with_a_figure_no_cited_line_holds_gets_no_check():
    question = "What were total current assets in 2019?"
    [wrong_column] = checker.verify_answer("Total current assets in 2019 were 15,134 million [L1].", [_CURRENT, _ALL], question)
    [wrong_row] = checker.verify_answer("Total current assets in 2019 were 45,400 million [L2].", [_CURRENT, _ALL], question)
    [invented] = checker.verify_answer("Total current assets in 2019 were 17,000 million [L1].", [_CURRENT, _ALL], question)
    [right] = checker.verify_answer("Total current assets in 2019 were 16,525 million [L1].", [_CURRENT, _ALL], question)
    assert not (wrong_column.supported or wrong_row.supported or invented.supported)
    assert right.supported and [(c.number, c.verified) for c in right.citations] == [(1, True)]


def test_rule_a_figure_of_one_year_span_does_not_back_another():
    assert checker.in_another_year_span("98", "In 2002-03 the dividend was 98", "2002-03\n12\n2003-04\n98")
    assert not checker.in_another_year_span("98", "In 2003-04 the dividend was 98", "2002-03\n12\n2003-04\n98")


def test_rule_a_denial_needs_a_passage_that_denies():
    assert checker.denies_what_passage_does_not("The plant is not in Pune.", "The plant is in Pune.")
    assert not checker.denies_what_passage_does_not("No, the plant is in Pune.", "The plant is in Pune.")


def test_rule_a_quotation_must_stand_in_the_passage_word_for_word():
    assert checker.quotes_what_passage_does_not('It says "net sales rose sharply in 2023".', "Net sales rose in 2023.")
    assert not checker.quotes_what_passage_does_not('It says "net sales rose in 2023".', "Net sales rose in 2023.")


def test_rule_a_premise_no_document_shares_backs_nothing():
    sources = [Hit(id="1", collection="c", doc_name="itc_annual_report.pdf", page=3, start=0, end=10,
                   text="The Company's plant is at Andheri")]
    assert checker.strangers("Where are the plants of Apple Inc.?", sources) == {"apple", "inc"}
    assert checker.strangers("Where are the plants of ITC?", sources) == set()


def test_rule_the_questions_subject_need_not_be_repeated_but_its_facts_must():
    assert checker.subject_figures("What does error 288 on page 89 mean in FY2021 Q3?") == {"89", "2021", "3"}


def test_rule_a_reference_both_write_names_a_thing_and_is_no_figure():
    assert checker.shared_references("Figure 6: RAG vs baseline.", "Figure 6: Step-Back + RAG vs Baseline") == {"6"}


def test_rule_a_restated_question_is_backed_by_an_answer_beside_what_was_asked():
    passage = "Wi-Fi Connect\nTurn it into a hotspot with 4G connectivity"
    assert checker.answer_beside_question("The car's Wi-Fi Connect uses 4G connectivity.", passage, "What does the car's Wi-Fi Connect use?")
    assert not checker.answer_beside_question("The car's Wi-Fi Connect uses 5G.", passage, "What does the car's Wi-Fi Connect use?")


def test_rule_side_by_side_cannot_vouch_for_a_rank_or_a_count():
    assert not checker.answer_beside_question("The largest market is India.", "Markets\nIndia\nChina", "What is the largest market?")
    assert not checker.answer_beside_question("There are 3 markets: India.", "Markets\nIndia 3", "How many markets are there?")


def test_rule_side_by_side_cannot_vouch_for_a_colour():
    cover = "Camry XSE\nCelestial Silver Metallic with Midnight Black Metallic roof"  # a caption, not the picture
    assert not checker.answer_beside_question("The color of the Camry XSE on the cover is black.", cover,
                                              "What color is the Camry XSE on the cover?")


def test_rule_a_page_by_position_says_where_to_look_not_a_rank():
    title_page = "Strategic Plan\n2016-2018\nRick Scott\nGOVERNOR\nCeleste Philip, MD"
    assert checker.answer_beside_question("The name of the governor is Rick Scott.", title_page,
                                          "What is the name of the governor as mentioned on the first page?")


def test_rule_a_sentence_is_backed_by_a_passage_that_holds_most_of_its_words():
    [checked] = checker.verify_answer("The railway reached the town in 1889 [1].", [_hit("The railway reached the town in 1889.", 3)])
    assert checked.supported and checked.citations[0].verified


def test_rule_a_word_the_question_asks_is_asked_in_any_of_its_forms():
    question = "Which wide-body airplane model did Boeing stop producing in 2022?"
    line = Hit(id="b", collection="c", doc_name="BOEING_2022_10K.pdf", page=35, start=0, end=55,
               text="We ended production of the 747 wide-body model in 2022.")
    said = "Boeing stopped producing the 747 wide-body model in 2022 [1]."
    assert checker.verify_answer(said, [line], question)[0].supported  # "stopped producing" restates the question; 747 is on the line
    with rules.off({"question_words_any_form"}):
        assert not checker.verify_answer(said, [line], question)[0].supported  # "stopped" would be a claim the line lacks
    assert checker.verify_answer(said.replace("747", "777"), [line], question)[0].supported is False  # what it adds is not there
    assert checker.verify_answer("Boeing stopped producing a wide-body airplane model in 2022 [1].", [line], question)[0].supported is False
    assert checker.word_form("stopped") == checker.word_form("stops") == checker.word_form("stop")


def test_rule_a_documents_file_name_names_its_subject_beside_any_line():
    question = "Which wide-body airplane model did Boeing stop producing in 2022?"
    text = "We ended production of the 747 wide-body model in 2022."
    assert checker.answer_beside_question("Boeing stopped producing the 747.", text, question, "BOEING_2022_10K.pdf")
    assert not checker.answer_beside_question("Boeing stopped producing the 747.", text, question, "AIRBUS_2022.pdf")
    with rules.off({"file_name_names"}):
        assert not checker.answer_beside_question("Boeing stopped producing the 747.", text, question, "BOEING_2022_10K.pdf")
    assert checker.file_names("health", "CVSHEALTH_2022_10K.pdf") and checker.file_names("mill", "GENERALMILLS_2022_10K.pdf")
    assert not checker.file_names("s", "CVSHEALTH_2022_10K.pdf")  # too short to tell
    greatcall = parse_question("When did Best Buy complete its acquisition of GreatCall, according to its fiscal 2019 10-K?")
    assert checker.file_named(greatcall, "BESTBUY_2019_10K.pdf") == {"best", "buy", "10", "k"}  # "10-K" is the file's "10K"
    assert checker.answer_beside_question("Best Buy completed its acquisition of GreatCall on October 1, 2018.",
                                          "On October 1, 2018, we acquired all outstanding shares of GreatCall.", greatcall,
                                          "BESTBUY_2019_10K.pdf")


def test_rule_a_date_the_question_writes_is_its_subject_day_and_all():
    question = "What share of Amcor's workforce was covered by collective bargaining agreements as of June 30, 2023?"
    line = [Hit(id="a", collection="c", doc_name="AMCOR_2023_10K.pdf", page=12, start=0, end=70,
                text="Collective bargaining agreements cover approximately 45% of our workforce.")]
    said = "45% of Amcor's workforce was covered by collective bargaining agreements as of June 30, 2023 [1]."
    assert checker.verify_answer(said, line, question)[0].supported  # the asked date is the question's, not a claim
    with rules.off({"question_date"}):
        assert not checker.verify_answer(said, line, question)[0].supported  # "30" would be a figure the line lacks
    assert checker.verify_answer(said.replace("45%", "54%"), line, question)[0].supported is False
    assert checker.verify_answer(said.replace("June 30", "June 29"), line, question)[0].supported is False  # a day not asked
    assert checker.date_word("fy") and checker.date_word("2023") and checker.date_word("june") and not checker.date_word("amcor")
    goal = "Reduce carbon emissions 75% by 2030 (over a 2009 baseline) and become carbon neutral by 2040."
    asked = "By what year does Best Buy aim to become carbon neutral, according to its FY23 annual report?"
    assert checker.answer_beside_question("By 2040, according to its FY23 annual report.", goal, asked, "BESTBUY_2023_10K.pdf")
    # (the FY23 of the question is its date, "Best" of Best Buy no rank, Best Buy the file's name)


def test_a_figure_written_without_its_leading_zero_is_the_same_figure():
    springs = [_hit("Unique coil springs not only drop the vehicle .60 inches for a lower center of gravity.", 20)]
    question = "By how much do the Camry TRD's unique coil springs drop the vehicle?"
    assert checker.verify_answer("The Camry TRD's unique coil springs drop the vehicle by 0.60 inches [1].", springs, question)[0].supported
    assert not checker.verify_answer("The Camry TRD's unique coil springs drop the vehicle by 60 inches [1].", springs, question)[0].supported


def test_rule_a_calculation_line_is_not_judged_as_a_claim():
    tweets = [_hit("Germanwings 24 tweets\nLufthansa 12 tweets", 4)]
    [calculation] = checker.verify_answer("Calculation: 24 - 12 = 12", tweets, "How many more tweets did Germanwings post?")
    assert calculation.supported is None  # calc.py works it out and shows the result as its own line


def test_rule_an_abbreviation_does_not_end_a_sentence():
    assert checker.split_sentences("Funds were Rs. 1,039 million [2]. Then it rose.") == ["Funds were Rs. 1,039 million [2].", "Then it rose."]


# -----------------------------------------------------------------------------
# The registry (rules.py): every rule by name, with its principle and its test; switched off by name


def test_every_registered_rule_states_its_principle_where_it_is_written_and_names_a_test_that_exists():
    # a "Rule:" line's sentence may run on over the next lines of its docstring or comment: read them as one
    sources = re.sub(r"\s*\n\s*(?:#\s*)?", " ", "".join(path.read_text() for path in ROOT.glob("*.py")))
    assert {"specifics", "latest_year"} <= rules.REGISTRY.keys()  # the checker's rules and routing's
    for rule in rules.REGISTRY.values():
        assert rule.principle and f"Rule: {rule.principle}" in sources, rule.name  # the code's "Rule:" line says it too
        path, test = rule.test.split("::")
        assert f"\ndef {test}(" in (ROOT / path).read_text(), rule.test


# the checker's own (test_rules_registered.py switches every module's rules off, their tests given their fixtures)
SWITCHABLE = [name for name, rule in rules.REGISTRY.items() if rule.switchable and rule.test.startswith("tests/test_checker.py::")]


@pytest.mark.parametrize("name", SWITCHABLE)
def test_a_rule_switched_off_by_name_fails_its_own_test(name):
    """Each rule's own example changes verdict without it: the switch reaches the rule, and the test tests it."""
    path, test = rules.REGISTRY[name].test.split("::")
    own_test = getattr(importlib.import_module(Path(path).stem), test)  # tests/ is on the path, as for conftest
    own_test()  # in force: passes
    with rules.off({name}), pytest.raises(AssertionError):
        own_test()
    assert rules.on(name)  # switched back on after the block


def test_a_rule_is_switched_off_only_by_a_registered_name():
    with pytest.raises(ValueError, match="no rule named no_such_rule"):
        with rules.off({"no_such_rule"}):
            pass
    with pytest.raises(ValueError, match="registered only"):  # routing's rules are registered, not switched
        with rules.off({"latest_year"}):
            pass
    answer, plant = "The company's new plant is not located in Pune [1].", _hit("The company's new plant is located in Pune.", 2)
    [denied] = checker.verify_answer(answer, [plant])
    with rules.off({"denial"}):
        [let_through] = checker.verify_answer(answer, [plant])
    assert denied.supported is False and let_through.supported


def test_a_row_with_leader_dots_backs_its_figure():
    page = "CONSOLIDATED STATEMENTS OF CASH FLOWS\n(in millions)\n2023\n2022\nNet cash provided by operating activities ..........\n6,439\n5,878\n"
    hit = Hit(id="a", collection="c", doc_name="acme.pdf", page=2, start=0, end=len(page), text=page)
    [checked] = checker.verify_answer("Net cash provided by operating activities, 2023: 6,439 [1]", [hit])
    assert checked.supported  # the dots end no sentence: the label and its figures are one place
    [other] = checker.verify_answer("Net cash provided by operating activities, 2023: 7,100 [1]", [hit])
    assert not other.supported


def test_the_checker_reads_its_question_once_however_many_sentences_and_sources():
    """Its words, names, subject figures and cell words are readings of the ParsedQuestion, made once per question,
    not per sentence × source: the question is tokenised once however long the answer."""
    import sys

    question = "How many tonnes of fish did the Port Elwin fleet land in 1911?"
    sources = [_hit("In 1911 the catch reached 3,200 tonnes, a record for the coast.", 2),
               _hit("The railway reached the town in 1889.", 3)]
    sentence = "In 1911 the catch reached 3,200 tonnes [1]. The railway reached the town in 1889 [2]. "

    def readings(answer: str) -> list[str]:
        read, parsed = [], parse_question(question)

        def watch(frame, event, arg):
            if event == "call" and frame.f_code.co_name in {"tokenize", "names_in"} and frame.f_locals.get("text") in (question, " " + question):
                read.append(frame.f_code.co_name)

        sys.setprofile(watch)
        try:
            checked = checker.verify_answer(answer, sources, parsed)
        finally:
            sys.setprofile(None)
        assert all(s.supported for s in checked)
        return sorted(read)

    once = readings(sentence)
    assert once == readings(sentence * 4) and once.count("tokenize") == 1


def test_rule_a_bare_figure_is_backed_by_the_line_it_cites():
    share = "What share of GOP-leaning independents favor legalizing marijuana, according to Pew?"
    line = Hit(id="p", collection="c", doc_name="Independents-Report.pdf", page=30, start=0, end=80,
               text="Among GOP-leaning independents, a 60% majority favors legalizing marijuana.")
    other = Hit(id="q", collection="c", doc_name="Independents-Report.pdf", page=31, start=0, end=60,
                text="Democrats (68%) favor legalizing marijuana; Republicans are divided.")
    checked = checker.verify_answer("60% [L1]", [line, other], share)[0]
    assert checked.supported and [c.number for c in checked.citations] == [1]
    assert checker.verify_answer("60% [L2]", [line, other], share)[0].supported is None  # its line does not print it
    assert checker.verify_answer("60%", [line, other], share)[0].supported is None  # nothing is inferred for a bare reply
    assert checker.verify_answer("68% [L1]", [line, other], share)[0].supported is None  # not on the line it cites
    with rules.off({"bare_figure_points_at_its_line"}):
        assert checker.verify_answer("60% [L1]", [line, other], share)[0].supported is None
    # of the kind asked: a share is a percentage, a count is none
    assert not checker.bare_figure_backed("60 [L1]", line.text, share)
    baselines = "How many baselines does ProgramFC outperform?"
    programfc = "On HOVER, ProgramFC outperforms the 7 baselines on average by 10.38%."
    assert checker.bare_figure_backed("7 baselines [L1]", programfc, baselines)
    assert not checker.bare_figure_backed("10.38% [L1]", programfc, baselines)
    # placed by the question's words: a figure said of another thing on the same line is not the one asked
    states = "New Jersey's operating revenue was $753 million. Pennsylvania's operating revenue was $451 million."
    assert checker.bare_figure_backed("$753 million", states, "What operating revenue did New Jersey generate?")
    assert not checker.bare_figure_backed("$451 million", states, "What operating revenue did New Jersey generate?")
    assert not checker.bare_figure_backed("Yes", line.text, share)  # no figure: nothing to point at


def test_rule_a_number_in_words_is_the_figure_its_digits_write():
    question = "How far ahead of an ITC Board meeting are the agenda papers usually sent out?"
    line = Hit(id="i", collection="c", doc_name="itc_report.pdf", page=9, start=0, end=70,
               text="Agenda papers are generally circulated seven working days prior to the Board meeting.")
    said = "7 working days prior to the Board meeting. [L1]"
    assert checker.verify_answer(said, [line], question)[0].supported
    assert checker.verify_answer(said.replace("7", "8"), [line], question)[0].supported is False
    assert checker.verify_answer(said, [line], question)[0].text == said  # the sentence is shown as said
    with rules.off({"figures_in_words"}):
        assert checker.verify_answer(said, [line], question)[0].supported is False
    # a number the question writes is restated, no figure the page must print
    plants = Hit(id="g", collection="c", doc_name="gpi_report.pdf", page=3, start=0, end=90,
                 text="The Company's plant is situated at Andheri (Mumbai) and the other one is located at Guldhar (Ghaziabad).")
    assert checker.verify_answer("The two plants are located at Andheri (Mumbai) and Guldhar (Ghaziabad). [L1]", [plants],
                                 "Where are the two plants of the company located?")[0].supported
    assert number_words_as_digits("seven days, twenty-five sites, Ninety nine") == "7 days, 25 sites, 99"
    assert number_words_as_digits("the two plants, six councils", keep={"two"}) == "the two plants, 6 councils"
    assert number_words_as_digits("one of our plants") == "one of our plants"  # "one" alone is mostly a pronoun
