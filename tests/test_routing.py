"""Document profiles and routing (routing.py): pure functions."""

from __future__ import annotations

from text_utils import STOPWORDS, keyword_tokens
from routing import (acronyms_asked, acronyms_in, distinctive_words, document_profile, expansion_here, names_in_question, route,
                     row_labels_with_initials)


def filing(company: str, year: str) -> list[str]:
    return [
        (f"UNITED STATES SECURITIES AND EXCHANGE COMMISSION\nFORM 10-K\nFor the fiscal year ended August 29, {year}\n"
         f"{company}\n(Exact name of registrant as specified in its charter)"),
        f"Item 1. Business. {company} operates stores. Fiscal {year} net sales rose.",
    ]


def test_profiles_read_names_acronyms_years_type_and_year_style():
    profile = document_profile("COSTCO_2021_10K.pdf", filing("Costco Wholesale Corporation", "2021"))
    assert {"costco", "wholesale"} <= profile.names and "cw" in profile.acronyms
    assert profile.years == ["2021"] and profile.doc_type == "annual report" and profile.title.startswith("UNITED STATES")
    assert acronyms_in("Pew Research Center and NIKE, Inc. (the SEC)") >= {"prc", "nike", "sec"}


def test_a_profile_name_is_a_word_the_document_never_writes_in_lower_case():
    """A bench question about "the Chairman of the Board ... the President of the SILF" was routed
    to the two reports whose first pages say "Chairman", "President" and "Board"."""
    profile = document_profile("report.pdf", ["Birchwood Ltd\nReport of the Chairman of the Board"],
                               "The chairman thanked the board. Orders at www.birchwood.com. Birchwood grew.")
    assert "birchwood" in profile.names and not {"chairman", "board"} & profile.names
    cover = document_profile("plan.pdf", ["HOW TO GROW: the PRC plan"], "How to grow, by the PRC.")
    assert "prc" in cover.acronyms and "to" not in cover.acronyms  # "TO" is the word "to" in capitals


def test_an_acronym_stands_for_the_name_on_the_page_that_shares_the_question_s_words():
    debate, director = ("Model Debate", 3.0, 7), ("Managing Director", 1.0, 8)
    assert expansion_here([debate, director], []) == "Model Debate"  # its page shares more of the question
    assert expansion_here([("Model Debate", 1.0, 7), director], []) == "Managing Director"  # a tie: the most used name
    assert expansion_here([debate, director], [3.0]) is None  # a page writing "MD" shares as much: it means that
    assert expansion_here([], [1.0]) is None
    # what counts as an acronym in a question: not a date format's letters, nothing in a question shouted in capitals
    assert acronyms_asked("Which TO grew in 2014? Date it YYYY-MM-DD.") == {"to"}
    assert acronyms_asked("In the slide that includes MID and Trends, what does the PRC’s IP show?") == {"mid", "prc", "ip"}
    assert acronyms_asked("WHAT IS THE 2nd OBJECTIVE OF REGULATORY EFFICIENCY?") == set()
    # a table's row labels are line items analysts abbreviate; a heading or a label alone on its line is not one
    assert row_labels_with_initials("ASSETS\nLong-term debt, excluding current portion\n$\n6,692\nNet sales 12\nNotes\nSee below") == [
        ("ld", "Long-term debt"), ("ltd", "Long-term debt")]


def test_routing_picks_named_documents_by_distinctive_words_only():
    profiles = {
        "costco": document_profile("COSTCO_2021_10K.pdf", filing("Costco Wholesale Corporation", "2021")),
        "nike": document_profile("NIKE_2021_10K.pdf", filing("NIKE, Inc.", "2021")),
        "pew": document_profile("report.pdf", ["Pew Research Center\nSeniors and technology use, 2014"]),
    }
    weights = distinctive_words(profiles)
    assert "costco" in weights and "form" not in weights  # every filing says "Form 10-K": names nothing
    assert list(route({"costco", "capex"}, set(), ["2021"], profiles, weights)) == ["costco"]
    assert list(route({"capex"}, {"cw"}, [], profiles, weights)) == ["costco"]  # abbreviated
    assert route({"capex", "sales"}, set(), ["2021"], profiles, weights) == {}  # names no document: no preference
    assert route({"costco"}, set(), [], {"costco": profiles["costco"]}, weights) == {}  # one document: nothing to choose


def test_a_question_names_a_document_by_the_head_of_a_name_it_writes_not_by_common_words():
    """A bench question named GODFREY PHILLIPS INDIA LIMITED and was routed to another
    company's report whose first pages say "India", "Limited" and (for "non-executive") "Executive"."""
    other = document_profile("report.pdf", ["ITC Limited, India\nReport of the Executive Directors"])
    profiles = {"other": other, "costco": document_profile("COSTCO_2021_10K.pdf", filing("Costco Wholesale Corporation", "2021"))}
    weights = distinctive_words(profiles)
    question = "Who are the non-executive and independent directors of GODFREY PHILLIPS INDIA LIMITED?"
    assert names_in_question(question, STOPWORDS) == {"godfrey", "godfreyphillipsindialimited"}
    assert route(names_in_question(question, STOPWORDS), set(), [], profiles, weights) == {}
    assert list(route(set(keyword_tokens(question)), set(), [], profiles, weights)) == ["other"]  # every word of it would
    asked = "What were Costco's capital expenditures? Costco Wholesale, and ITC too."
    assert names_in_question(asked, STOPWORDS) == {"costco", "costcowholesale", "itc"}  # an opening stopword is no name; "Costco" opens a name
    assert set(route(names_in_question(asked, STOPWORDS), acronyms_asked(asked), [], profiles, weights)) == {"costco", "other"}


def test_a_month_however_written_names_no_document():
    """"Oct. 24, 2016" in a question about a complaint routed it to a software manual whose cover says "Oct"."""
    question = "According to the complaint, who was interviewed by Traveler's agents on Oct. 24, 2016?"
    assert names_in_question(question, STOPWORDS) == {"traveler"}
    assert names_in_question("What was filed in Sept 2019 and on 3 March?", STOPWORDS) == set()


def test_a_name_of_two_words_names_the_file_that_writes_it_as_one_and_the_year_picks_the_filing():
    profiles = {f"bestbuy{year}": document_profile(f"BESTBUY_{year}_10K.pdf", filing("Best Buy Co., Inc.", year)) for year in ("2019", "2023")}
    for name in ("Costco", "Walmart", "Target", "Kroger", "Nike", "Adobe", "Boeing", "Corning", "Verizon", "Pepsico",
                 "Amcor", "Netflix", "Oracle", "Intel", "Cisco", "Paypal", "Ulta", "Kohl", "Macy", "Dollar"):  # a library
        profiles[name] = document_profile(f"{name.upper()}_2021_10K.pdf", filing(f"{name} Corporation", "2021"))
    question = "What were Best Buy's FY2019 inventories?"
    words = names_in_question(question, STOPWORDS)
    assert "bestbuy" in words
    assert list(route(words, set(), ["2019"], profiles, distinctive_words(profiles))) == ["bestbuy2019"]
    assert set(route(words, set(), [], profiles, distinctive_words(profiles))) == {"bestbuy2019", "bestbuy2023"}  # no year: both


def test_a_word_another_document_writes_in_lower_case_is_no_name():
    """Across a library, a cover's "Page", "Board" or "College" is an ordinary word another document writes
    in lower case; a bench question about "Page 5" of one document was sent to another's cover saying "Page"."""
    profiles = {
        "brochure": document_profile("brochure.pdf", ["Graduate College\nPage 1", "Board of Studies"], "Graduate College. Page 1."),
        "guide": document_profile("guide.pdf", ["Search guide"], "Turn the page to see the board of each college."),
        "costco": document_profile("COSTCO_2021_10K.pdf", filing("Costco Wholesale Corporation", "2021")),
        "block": document_profile("BLOCK_2020_10K.pdf", filing("Square, Inc.", "2020")),
    }
    assert {"college", "page", "board"} <= profiles["brochure"].names  # the brochure alone never writes them in lower case
    weights = distinctive_words(profiles)
    assert not {"college", "page", "board"} & set(weights) and "costco" in weights
    assert route({"page", "college"}, set(), [], profiles, weights) == {}
    assert list(route({"block"}, set(), [], profiles, weights)) == ["block"]  # a file name's word is the owner's name for it


def test_a_document_s_acronym_is_named_only_by_a_word_in_capitals():
    """"Mr. R.A. Shah" named the reports whose covers carry a run of capitalised words with the initials "MR"."""
    profiles = {"indonesia": document_profile("slides.pdf", ["Mobile Research\nIndonesia 2015"]),
                "costco": document_profile("COSTCO_2021_10K.pdf", filing("Costco Wholesale Corporation", "2021"))}
    weights = distinctive_words(profiles)
    assert "mr" in profiles["indonesia"].acronyms
    question = "How many companies do Mr. R.A. Shah and Mr. C.M. Maniar hold directorships of?"
    assert route(names_in_question(question, STOPWORDS), acronyms_asked(question), [], profiles, weights) == {}
    assert list(route(set(), acronyms_asked("What did MR publish?"), [], profiles, weights)) == ["indonesia"]


def test_in_german_a_capitalised_noun_is_no_name():
    """A German question's "Verbindung" (connection) named the German guide whose cover writes "Verbindung"."""
    cover = ["LaTeX2e-Kurzbeschreibung\nVerbindung und Satz mit LaTeX"]
    german = document_profile("l2kurz.pdf", cover, "Eine kurze Beschreibung.", language="de")
    assert "verbindung" not in german.names and german.names == {"kurz"}  # the file name's word
    assert "verbindung" in document_profile("l2kurz.pdf", cover, "Eine kurze Beschreibung.").names  # as English, it would be



def test_a_question_about_several_years_is_about_the_report_of_the_latest():
    """A report prints the year before its own beside it: FY2015 and FY2016 figures are both in the FY2016 10-K."""
    profiles = {year: document_profile(f"ADOBE_{year}_10K.pdf", filing("Adobe Systems Incorporated", year) + [f"Fiscal {int(year) - 1}"])
                for year in ("2015", "2016")}
    profiles["8k"] = document_profile("ADOBE_8K.pdf", ["FORM 8-K\nAdobe Systems Incorporated\nDate of report: March 1, 2016"])
    for number in range(30):  # a library in which three Adobe documents are few
        profiles[f"other{number}"] = document_profile(f"OTHER{number}_2016_10K.pdf", filing(f"Zeta{number} Corporation", "2016"))
    weights = distinctive_words(profiles)
    assert profiles["2016"].own_year == "2016" and profiles["8k"].own_year == ""  # "For the fiscal year ended August 29, 2016"
    assert set(route({"adobe"}, set(), ["2015", "2016"], profiles, weights)) == {"2016", "8k"}  # an 8-K states no period
    assert set(route({"adobe"}, set(), ["2015"], profiles, weights)) == {"2015"}  # not the 2016 report that compares with it
    assert set(route({"adobe"}, set(), ["2013"], profiles, weights)) == {"2015", "2016", "8k"}  # none carries it: all named


def test_a_name_may_begin_with_a_digit():
    assert "3m" in names_in_question("What drove operating margin change as of FY2022 for 3M?", STOPWORDS)
    assert "3m" in names_in_question("What were 3M's capital expenditures?", STOPWORDS)
    assert "3m" in document_profile("3M_2018_10K.pdf", filing("3M Company", "2018")).names
    assert document_profile("2310.07609v1.pdf", ["A paper"]).names == set()  # an arXiv number is no name
