"""Hybrid retrieval on a real store with the real embedder and real PDFs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import OTHER_EMBEDDER, pretend_made_by, write_text_pdf
from rank_bm25 import BM25Okapi

import config
import embedders
import ingest
import rules
from question import parse_question
from retriever import Retriever, SparseBM25, Steps, meaning_read, page_references, rrf
from routing import file_named_runs
from text_utils import tokenize


def test_rrf_matches_a_hand_checked_example():
    fused = rrf([["a", "b", "c"], ["c", "a"]], k=60)
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert sorted(fused, key=fused.get, reverse=True) == ["a", "c", "b"]


def test_rrf_weighs_each_list_s_vote():
    fused = rrf([["a", "b"], ["b", "a"]], k=60, weights=[1.0, 0.5])
    assert fused["a"] == pytest.approx(1 / 61 + 0.5 / 62)
    assert fused["b"] == pytest.approx(1 / 62 + 0.5 / 61)
    assert fused["a"] > fused["b"]  # equal ranks, unequal votes: the heavier list decides
    assert rrf([["a"], ["b"]], k=60, weights=[1.0, 0.0])["b"] == 0.0


def test_page_references_read_numbers_words_and_positions():
    assert page_references("On page 14 and the cover page, and the second last page?", 20) == {1, 14, 19}
    assert page_references("How many cars appear on page three?", 20) == {3}
    assert page_references("Compare pages 3 and 5", 20) == {3, 5}
    assert page_references("What is on the last page?", 20) == {20}
    assert page_references("the chart in slide 7", 20) == {7}
    assert page_references("page 99", 20) == set()  # beyond the document


def test_sparse_bm25_scores_equal_rank_bm25():
    corpus = [tokenize(t) for t in [
        "the quick brown fox jumps over the lazy dog",
        "a fox is quick and brown and clever",
        "dogs are loyal and lazy on sundays",
        "brown bread with butter",
        "fox fox fox hunting season",
    ]]
    ours = SparseBM25(corpus)
    theirs = BM25Okapi([[ours.term(word) for word in tokens] for tokens in corpus])  # the same terms: "dogs" is "dog"
    for query in (["fox"], ["brown", "dog"], ["lazy", "lazy", "fox"], ["nothing"]):
        assert np.allclose(ours.get_scores(query), theirs.get_scores([ours.term(word) for word in query]))


def test_page_text_places_chunks_at_their_offsets():
    from pages import page_text
    from records import Hit

    chunks = [Hit("a", "c", "d", 1, 0, 5, "A a. "), Hit("b", "c", "d", 1, 5, 9, "B b.")]
    assert page_text(chunks) == "A a. B b."


# -----------------------------------------------------------------------------


@pytest.fixture
def catalogue_pdf(tmp_path) -> Path:
    """Six near-identical part pages (codes differ by a digit) and one page on car servicing."""
    codes = ["XK-4417B", "XK-4471A", "XK-4741B", "XK-4471C", "XK-4471B", "XK-7441B"]
    pages = [
        f"Replacement part {code}. This valve assembly fits the standard pump housing. "
        "Tighten the fittings by hand, then a quarter turn with a wrench. Keep in a dry place."
        for code in codes
    ]
    pages.append("Automobiles must be serviced every twelve months by a certified mechanic.")
    return write_text_pdf(tmp_path / "catalogue.pdf", pages)


def page_rank(ranking, retriever, page):
    """1-based rank of ``page`` in a leg's page ranking, else None."""
    pages = [entry[0][1] for entry in ranking]
    return pages.index(page) + 1 if page in pages else None


def test_exact_code_missed_by_meaning_is_found_by_keywords(store, embedder, catalogue_pdf):
    ingest.ingest_pdf(catalogue_pdf, store, embedder)
    retriever = Retriever(store, embedder)
    retriever.refresh()
    question = "Which pump housing does part XK-4471B fit?"
    assert page_rank(retriever.keyword(question), retriever, 5) == 1
    assert page_rank(retriever.semantic(question), retriever, 5) != 1  # the near-identical codes blur
    assert retriever.search(question, k=3)[0].page == 5


def test_paraphrase_with_no_shared_word_is_found_by_meaning(store, embedder, catalogue_pdf):
    ingest.ingest_pdf(catalogue_pdf, store, embedder)
    retriever = Retriever(store, embedder)
    retriever.refresh()
    question = "How often should my car get maintenance?"
    assert page_rank(retriever.keyword(question), retriever, 7) is None
    assert page_rank(retriever.semantic(question), retriever, 7) == 1
    top = retriever.search(question, k=3)[0]
    assert top.page == 7 and "semantic_rank" in top.trace and "bm25_rank" not in top.trace


def test_a_question_naming_a_page_ranks_that_page_first(store, embedder, catalogue_pdf):
    ingest.ingest_pdf(catalogue_pdf, store, embedder)
    retriever = Retriever(store, embedder)
    top = retriever.search("Which part number is listed on page 4?", k=3)[0]
    assert top.page == 4 and top.trace["page_ref_rank"] == 1
    assert retriever.search("Which part number is listed on page 4?", k=3, steps=Steps(page_refs=False))[0].trace.get("page_ref_rank") is None


def test_the_best_keyword_page_always_keeps_a_seat(store, embedder, catalogue_pdf, three_page_pdf):
    ingest.ingest_pdf(catalogue_pdf, store, embedder)
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    retriever = Retriever(store, embedder)
    questions = [
        "Which vehicle servicing applies to valve XK-4417B?",
        "How often must a car with pump part XK-7441B be maintained by a mechanic?",
        "Who looked after the lamp, and does valve XK-4741B fit?",
    ]
    bumped = 0
    for question in questions:
        best_keyword_page = retriever.keyword(question)[0][0]
        seated = [(h.collection, h.page) for h in retriever.search(question, k=1)]
        plain = [(h.collection, h.page) for h in retriever.search(question, k=1, steps=Steps(keyword_seat=False))]
        assert best_keyword_page in seated
        bumped += best_keyword_page not in plain
    assert bumped >= 1  # without the seat, fusion did push the exact match out


def test_hits_carry_location_and_trace_and_one_hit_per_page(store, embedder, catalogue_pdf):
    ingest.ingest_pdf(catalogue_pdf, store, embedder)
    hits = Retriever(store, embedder).search("valve assembly XK-4471B", k=5)
    assert len({(h.collection, h.page) for h in hits}) == len(hits) == 5
    for hit in hits:
        assert hit.doc_name == "catalogue.pdf" and hit.text and hit.end > hit.start
        assert hit.trace["fused"] == pytest.approx(hit.score)
        assert "semantic_rank" in hit.trace or "bm25_rank" in hit.trace


def test_scope_filter_keeps_other_documents_out_of_both_legs(store, embedder, catalogue_pdf, three_page_pdf):
    catalogue = ingest.ingest_pdf(catalogue_pdf, store, embedder).collection
    facts = ingest.ingest_pdf(three_page_pdf, store, embedder).collection
    retriever = Retriever(store, embedder)
    retriever.refresh()
    question = "part XK-4471B lighthouse keeper railway"
    assert {h.collection for h in retriever.search(question, k=8)} == {catalogue, facts}
    for mode in ("semantic", "bm25", "hybrid"):
        assert {h.collection for h in retriever.search(question, k=8, scope=[facts], steps=Steps(mode=mode))} == {facts}


def test_removing_a_document_removes_it_from_both_legs(store, embedder, catalogue_pdf, three_page_pdf):
    catalogue = ingest.ingest_pdf(catalogue_pdf, store, embedder).collection
    facts = ingest.ingest_pdf(three_page_pdf, store, embedder).collection
    retriever = Retriever(store, embedder)
    assert any(h.collection == catalogue for h in retriever.search("XK-4471B valve", k=5))
    ingest.delete_document(store, catalogue)
    retriever.refresh()
    owners = lambda ranking: {entry[0][0] for entry in ranking}  # noqa: E731
    assert owners(retriever.keyword("XK-4471B valve lighthouse")) == {facts}
    assert owners(retriever.semantic("XK-4471B valve")) == {facts}
    assert {h.collection for h in retriever.search("XK-4471B valve", k=5)} == {facts}


def test_a_document_made_with_another_embedder_is_left_out_of_searches_until_re_embedded(
    store, embedder, catalogue_pdf, three_page_pdf, caplog
):
    catalogue = ingest.ingest_pdf(catalogue_pdf, store, embedder).collection
    facts = ingest.ingest_pdf(three_page_pdf, store, embedder).collection
    pretend_made_by(store, facts)
    retriever = Retriever(store, embedder)
    with caplog.at_level("WARNING", logger="retriever"):
        hits = retriever.search("Who kept the lighthouse lamp burning?", k=5)  # no error: the others are searched
        retriever.refresh()
        retriever.search("part XK-4471B", k=3)
    assert hits and {h.collection for h in hits} == {catalogue}
    assert [(d["collection"], d["embedder"]) for d in retriever.other_embedder_documents()] == [(facts, OTHER_EMBEDDER)]
    assert retriever.other_embedder_documents(scope=[catalogue]) == []
    assert len([r for r in caplog.records if facts in r.getMessage()]) == 1  # said once, not per search

    with pytest.raises(ingest.EmbedderMismatchError) as err:  # asked about it alone: say why nothing can be found
        retriever.search("Who kept the lighthouse lamp burning?", scope=[facts])
    assert str(err.value).startswith(f"'facts.pdf' was embedded with '{OTHER_EMBEDDER}', not with the embedder now in use")
    assert "re-embedded" in str(err.value)
    assert {h.collection for h in retriever.search("lighthouse keeper valve", k=5, scope=[facts, catalogue])} == {catalogue}

    ingest.reembed_document(store, embedder, facts)
    retriever.refresh()
    assert retriever.other_embedder_documents() == []
    top = retriever.search("Who kept the lighthouse lamp burning?", k=3, scope=[facts])[0]
    assert (top.collection, top.page) == (facts, 1)
    assert {h.collection for h in retriever.search("lighthouse keeper part XK-4471B", k=8)} == {catalogue, facts}


def test_searches_from_several_threads_stay_correct_while_documents_come_and_go(store, embedder, catalogue_pdf, three_page_pdf):
    """Browser tabs share one Retriever: searches must never see a half-rebuilt index."""
    from concurrent.futures import ThreadPoolExecutor

    facts = ingest.ingest_pdf(three_page_pdf, store, embedder)
    retriever = Retriever(store, embedder)

    def ask(_: int) -> int:
        return retriever.search("When did the railway reach the town?", scope=[facts.collection])[0].page

    with ThreadPoolExecutor(4) as pool:
        answers = pool.map(ask, range(40))
        for _ in range(3):  # meanwhile another tab adds and removes a document
            added = ingest.ingest_pdf(catalogue_pdf, store, embedder)
            retriever.refresh()
            ingest.delete_document(store, added.collection)
            retriever.refresh()
        assert set(answers) == {3}


def test_page_labels_join_the_keyword_index_once_written(store, embedder, three_page_pdf):
    name = ingest.ingest_pdf(three_page_pdf, store, embedder).collection
    retriever = Retriever(store, embedder)
    assert retriever.keyword("zeppelin") == []
    col = ingest.open_collection(store, name, embedder)
    got = col.get(where={"page": 3}, include=["metadatas"])
    col.update(ids=got["ids"], metadatas=[{**m, "keywords": "zeppelin", "enriched": True} for m in got["metadatas"]])
    col.modify(metadata={**col.metadata, "enriched_pages": 1})
    retriever.refresh()  # as the app does after labelling; other processes' changes are seen within seconds
    assert page_rank(retriever.keyword("zeppelin"), retriever, 3) == 1


# -----------------------------------------------------------------------------
# Issue 18: instructions around the question, libraries of similar filings, fiscal-year wording


def statement(heading: str, rows: list[tuple[str, str, str]]) -> str:
    """A statement page as a PDF's text layer gives it: the heading, the year columns, then one cell per line."""
    cells = [f"{label}\n{this_year}\n{last_year}" for label, this_year, last_year in rows]
    return f"{heading}\n(in millions)\n2021\n2020\n" + "\n".join(cells)


def write_filing(path: Path, company: str) -> Path:
    """A small annual report: cover, a business page, and the three statements (same boilerplate in every filing)."""
    return write_text_pdf(path, [
        (f"FORM 10-K\nAnnual report for the fiscal year ended December 31, 2021\n{company}\n"
         "(Exact name of registrant as specified in its charter)"),
        (f"Item 1. Business. {company} designs, builds and sells outdoor equipment through its own stores. "
         "Equity research analysts who follow the company state that gross margin is a useful metric for it."),
        statement("CONSOLIDATED STATEMENTS OF CASH FLOWS", [
            ("Net cash provided by operating activities", "1,204", "1,102"), ("Depreciation", "220", "210"),
            ("Purchases of property and equipment (capital expenditures)", "(310)", "(280)"),
            ("Dividends paid", "(120)", "(110)"), ("Net change in cash", "402", "350")]),
        statement("CONSOLIDATED BALANCE SHEETS", [
            ("Cash", "1,400", "1,000"), ("Inventories", "2,210", "2,050"), ("Total assets", "9,870", "9,200"),
            ("Total liabilities", "5,120", "4,900"), ("Shareholders' equity", "4,750", "4,300")]),
        statement("CONSOLIDATED STATEMENTS OF INCOME", [
            ("Revenues", "12,400", "11,800"), ("Cost of sales", "7,100", "6,900"), ("Operating income", "1,480", "1,350"),
            ("Income taxes", "330", "300"), ("Net income", "1,050", "980")]),
    ])


@pytest.fixture
def filings(tmp_path, store, embedder) -> dict[str, str]:
    names = {"alder": "Alder Outdoor Equipment Corporation", "birch": "Birchwood Trail Gear, Inc."}
    return {key: ingest.ingest_pdf(write_filing(tmp_path / f"{key}.pdf", company), store, embedder).collection
            for key, company in names.items()}


def test_instructions_around_the_question_do_not_change_what_is_found(store, embedder, filings):
    retriever = Retriever(store, embedder)
    question = "How much did the company spend on capital expenditures?"
    wrapped = (f"Answer the following question as if you are an equity research analyst. {question} "
               "Please state answer in USD millions. If this is not a useful metric, then please state that and explain why.")
    scope = [filings["alder"]]
    assert [h.page for h in retriever.search(question, k=1, scope=scope)] == [3]
    assert [h.page for h in retriever.search(wrapped, k=1, scope=scope)] == [3]
    # unparsed, the instruction words match the boilerplate on the business page
    assert retriever.keyword(wrapped, scope)[0][0][1] == 2 and retriever.keyword(parse_question(wrapped).query, scope)[0][0][1] == 3


def test_a_statement_named_in_the_instructions_points_to_its_page(store, embedder, filings):
    retriever = Retriever(store, embedder)
    question = "What is the total? Give a response by relying on the details shown in the balance sheet."
    hits = retriever.search(question, k=1, scope=[filings["alder"]], steps=Steps(domain_hints=True))
    assert hits[0].page == 4 and hits[0].trace["hint_rank"] == 1


def test_the_statement_a_question_names_leads_the_results(store, embedder, filings):
    retriever = Retriever(store, embedder)
    question = "What were the capital expenditures? Base your judgments on the balance sheet."
    assert retriever.search(question, k=5, scope=[filings["alder"]], steps=Steps(domain_hints=False))[0].page != 4  # by its words
    hits = retriever.search(question, k=5, scope=[filings["alder"]])
    assert hits[0].page == 4 and "hint_rank" in hits[0].trace  # the balance sheet it names leads


def test_a_financial_measure_finds_the_statements_it_is_computed_from(store, embedder, filings):
    retriever = Retriever(store, embedder)
    scope = [filings["alder"]]
    # no word of these questions is on the statement pages, yet the figures are read off them
    current, turnover = "What was Alder's current ratio in 2021?", "What was the inventory turnover in 2021?"
    assert 4 not in [h.page for h in retriever.search(current, k=2, scope=scope, steps=Steps(domain_hints=False))]
    assert 4 in [h.page for h in retriever.search(current, k=2, scope=scope)]  # balance sheet
    assert {4, 5} <= {h.page for h in retriever.search(turnover, k=3, scope=scope)}  # balance sheet and income statement


def test_a_measure_word_in_a_question_about_another_document_seats_no_statement(store, embedder, filings, tmp_path):
    markets = write_text_pdf(tmp_path / "markets.pdf", [
        "Geographic markets by EPS Code\nAR01 Little Rock\nAR02 Fort Smith\nAR03 Northern Arkansas",
        "Geographic markets by EPS Code\nCA01 Los Angeles\nCA02 San Diego\nCA03 Sacramento",
        "How to order names from the search service: choose the markets, then the graduating class.",
    ])
    collection = ingest.ingest_pdf(markets, store, embedder).collection
    hits = Retriever(store, embedder).search("What is the market name for EPS Code AR03?", k=2)
    assert {h.collection for h in hits} == {collection}  # "EPS" (earnings per share) seats no income statement


def test_a_question_naming_a_document_is_answered_from_it_first_and_the_library_fills_the_rest(store, embedder, filings):
    retriever = Retriever(store, embedder)
    question = "What were Birchwood's revenues?"
    hits = retriever.search(question, k=10, steps=Steps(routing=True))
    routed = [(h.collection, h.page) for h in hits]
    birch_pages = len([p for (c, p) in retriever._page_chunks if c == filings["birch"]])
    assert [c for c, _ in routed[:birch_pages]] == [filings["birch"]] * birch_pages  # every page of it first
    assert all(h.trace["routed"] > 0 for h in hits[:birch_pages]) and "routed" not in hits[-1].trace
    assert routed.index((filings["birch"], 5)) < routed.index((filings["alder"], 5))  # same statement page, named company first
    assert len(hits) == 10  # the other filings fill the rest: none is dropped
    assert retriever.named_documents("What were the revenues?", None) == {}  # names no company: no preference
    unnamed = retriever.search("What were the revenues?", k=5, steps=Steps(routing=True))
    assert {h.collection for h in unnamed} == set(filings.values())
    assert retriever.profile(filings["birch"]).doc_type == "annual report"


def retriever_with(store, embedder, pdf: Path) -> Retriever:
    """A retriever over ``store`` once ``pdf`` is ingested into it."""
    ingest.ingest_pdf(pdf, store, embedder)
    return Retriever(store, embedder)


def test_an_acronym_is_searched_as_the_name_it_abbreviates_on_the_page_that_shares_the_question_s_words(store, embedder, tmp_path):
    pdf = write_text_pdf(tmp_path / "plan.pdf", [
        "Tomorrow's Workplace Skills are practised in the third quarter through mentoring and job shadowing.",
        "How staff prepare for the yearly audit: they read the checklist and tidy their desks.",
        "Our IT desk answers calls about Information Technology on weekdays.",
        "Two papers adopt the Model Debate strategy: agents argue before a judge answers.",
        "The MD signed the accounts after the audit committee met.",
    ])
    retriever = retriever_with(store, embedder, pdf)
    assert retriever.spelled_out("How do staff prepare for TWS?") == "How do staff prepare for TWS (Tomorrow's Workplace Skills)?"
    assert retriever.spelled_out("Who runs IT?") == "Who runs IT?"  # the page writes "IT": it means what that page uses it for
    assert retriever.spelled_out("Which papers adopt the MD strategy?") == "Which papers adopt the MD (Model Debate) strategy?"
    assert retriever.spelled_out("Who signed the accounts as MD?") == "Who signed the accounts as MD?"
    assert [h.page for h in retriever.search("How do staff prepare for TWS?", k=1, steps=Steps(mode="semantic"))] == [1]
    assert [h.page for h in retriever.search("How do staff prepare for TWS?", k=1, steps=Steps(mode="semantic", acronyms=False))] != [1]


def test_an_acronym_may_stand_for_a_table_row_label(store, embedder, tmp_path):
    """Analysts abbreviate line items ("LD" for "Long-term debt"), which a statement writes in lower case,
    so they are no capitalised name; the cover's address "Lake Drive" has the same initials."""
    pdf = write_text_pdf(tmp_path / "acme.pdf", [
        "ACME CORPORATION\n999 Lake Drive, Issaquah\nAnnual report on Form 10-K",
        "ACME CORPORATION\nCONSOLIDATED BALANCE SHEETS\nTotal liabilities\n41,190\n"
        "Long-term debt, excluding current portion\n$\n6,692\nTotal equity\n18,078",
        "Our warehouses sell groceries, fuel and electronics to members.",
        "Members renew each year; the fee rose in the spring.",
        "Risk factors include weather, fuel prices and labour costs.",
    ])
    retriever = retriever_with(store, embedder, pdf)
    question = "What is LD to TL in the consolidated balance sheets of ACME?"
    assert retriever.spelled_out(question) == "What is LD (Long-term debt) to TL (Total liabilities) in the consolidated balance sheets of ACME?"
    assert retriever.spelled_out("Where is ACME's LD?") == "Where is ACME's LD (Lake Drive)?"  # nothing else shared: the cover's address, as before


def test_an_acronym_in_capitals_finds_its_name_not_the_same_letters_as_a_word(store, embedder, tmp_path):
    pdf = write_text_pdf(tmp_path / "operators.pdf", [
        "Telecom Operators grew their subscriber bases; Telkomsel led the field.",
        "Sales grew to mid-range handsets in mid-2014 and grew to mid-size phones; agents and more agents sold them.",
        "Travelers Insurance Company agents interviewed the witness on the day of the fire.",
    ])
    retriever = retriever_with(store, embedder, pdf)
    # "TO" is not the stopword "to", "MID" is not "mid"; a legal suffix counts in initials too (TIC)
    assert [h.page for h in retriever.search("Which TO grew?", k=1, steps=Steps(mode="bm25"))] == [1]
    assert [h.page for h in retriever.search("Who did the TIC agents interview?", k=1, steps=Steps(mode="bm25"))] == [3]


def test_a_year_is_searched_as_the_document_writes_it(store, embedder, tmp_path):
    pdf = write_text_pdf(tmp_path / "fiscal.pdf", [
        "In fiscal 2019 the cooperative opened two new dairies.",
        "In fiscal 2020 the cooperative closed a creamery.",
        "Fiscal 2021 brought record milk prices.",
        "The cooperative was founded by farmers.",
    ])
    retriever = retriever_with(store, embedder, pdf)
    for wording in ("FY2020", "FY20", "fiscal year 2020", "2020"):
        assert retriever.search(f"What happened to a creamery in {wording}?", k=1)[0].page == 2


GERMAN_PAGES = [
    "Die Bahnstrecke erreichte die Stadt im Jahr 1871. Der Bahnhof wurde neben dem Marktplatz errichtet "
    "und brachte Händler aus dem ganzen Tal in die Gemeinde.",
    "Die Stadtbibliothek besitzt zwölftausend Bücher. Ausleihen ist für Schüler kostenlos, Erwachsene zahlen "
    "einen kleinen Jahresbeitrag für ihren Leseausweis.",
    "Der Stausee oberhalb der Gemeinde liefert das Trinkwasser. Er wurde nach der Dürre von 1921 angelegt, "
    "als die alten Brunnen versiegten.",
]
ENGLISH_PAGES = [
    "The harbour was dredged in 1904 so that steamships could dock at the new quay. Fishing boats moved to "
    "the inner basin, and the old wooden pier was taken down the following spring.",
    "The town council meets on the first Monday of each month in the old guildhall. Its meetings are open "
    "to the public, and the minutes are posted on the door of the library a week later.",
]


def test_a_two_language_library_finds_a_german_page_for_a_german_question_in_other_words(store, embedder, tmp_path):
    german = ingest.ingest_pdf(write_text_pdf(tmp_path / "chronik.pdf", GERMAN_PAGES), store, embedder)
    english = ingest.ingest_pdf(write_text_pdf(tmp_path / "history.pdf", ENGLISH_PAGES), store, embedder)
    docs = {d["doc_name"]: d for d in ingest.list_documents(store)}
    assert (docs["chronik.pdf"]["language"], docs["history.pdf"]["language"]) == ("de", "en")
    assert docs["chronik.pdf"]["embedder"] == config.MULTILINGUAL_EMBEDDER_NAME  # MiniLM knows no German
    assert docs["history.pdf"]["embedder"] == embedders.embedder_name(embedder)
    retriever = Retriever(store, embedder)
    # no content word shared with page 1 ("Zug" for "Bahnstrecke", "Ort" for "Stadt", "kam" for "erreichte")
    hits = retriever.search("Wann kam der erste Zug in den Ort?", k=2)
    assert (hits[0].collection, hits[0].page) == (german.collection, 1)
    hits = retriever.search("Woher bekommen die Einwohner ihr Wasser?", k=2)
    assert (hits[0].collection, hits[0].page) == (german.collection, 3)
    # the English document is still searched as before
    hits = retriever.search("When does the council meet?", k=1)
    assert (hits[0].collection, hits[0].page) == (english.collection, 2)


def test_a_keyword_match_votes_by_the_weight_of_its_document_s_embedder(store, embedder, tmp_path, monkeypatch):
    german = ingest.ingest_pdf(write_text_pdf(tmp_path / "chronik.pdf", GERMAN_PAGES), store, embedder)
    english = ingest.ingest_pdf(write_text_pdf(tmp_path / "history.pdf", ENGLISH_PAGES), store, embedder)
    monkeypatch.setattr(config, "KEYWORD_WEIGHT", 1.0)
    monkeypatch.setattr(config, "MULTILINGUAL_KEYWORD_WEIGHT", 0.0)
    retriever = Retriever(store, embedder)
    assert (retriever.keyword_weight(english.collection), retriever.keyword_weight(german.collection)) == (1.0, 0.0)

    def fused_from_legs(hit):  # each leg's RRF vote, the keyword leg's times its document's weight
        weight = retriever.keyword_weight(hit.collection)
        return sum(w / (config.RRF_K + hit.trace[f"{leg}_rank"]) for leg, w in (("semantic", 1.0), ("bm25", weight))
                   if f"{leg}_rank" in hit.trace)

    for question, doc in (("Woher kommt das Trinkwasser der Stadt?", german), ("When was the harbour dredged?", english)):
        hits = retriever.search(question, k=4)
        assert any("bm25_rank" in h.trace for h in hits if h.collection == doc.collection)  # the keyword leg ranked it ...
        for hit in hits:  # ... but only the English pages' keyword ranks add to their score
            assert hit.trace["fused"] == pytest.approx(fused_from_legs(hit))
    monkeypatch.setattr(config, "MULTILINGUAL_KEYWORD_WEIGHT", 1.0)  # a setting, read at each search
    assert retriever.keyword_weight(german.collection) == 1.0


def test_a_german_page_is_found_by_keywords_in_another_inflection(store, embedder, tmp_path):
    german = ingest.ingest_pdf(write_text_pdf(tmp_path / "chronik.pdf", GERMAN_PAGES), store, embedder)
    retriever = Retriever(store, embedder)
    found = retriever.keyword("Welche Büchern hat die Bibliotheken?", scope=[german.collection])
    assert found[0][0] == (german.collection, 2)  # "Büchern"/"Bücher", "Bibliotheken"/"Stadtbibliothek" stemmed


def ingest_a_manual(store, embedder, tmp_path, pages: int) -> None:
    """Another document in the library, of ``pages`` pages that share no word with a filing."""
    ingest.ingest_pdf(write_text_pdf(tmp_path / "manual.pdf", [f"Step {i}. Fold the sheet and press the seam." for i in range(pages)]),
                      store, embedder)


def test_a_documents_own_name_is_no_keyword_within_it_but_still_tells_documents_apart(store, embedder, filings, tmp_path):
    head = "Quillfeather Paper Company - Annual Report 2023\n"
    exhibits = head + "Exhibits\n" + "".join(f"10.{i} Quillfeather Plan {i}\n" for i in range(1, 16)) + "10.16 Quillfeather Employees Plan\n"
    pdf = write_text_pdf(tmp_path / "quillfeather.pdf", [
        head + "FORM 10-K\nQuillfeather Paper Company\nAnnual report for the fiscal year ended December 31, 2023",
        head + "Human capital. As of December 31, 2023 we had approximately 4,200 employees, "
               "1,100 of them in our mills and the rest in sales and distribution.",
        head + "Item 7. Results of operations. Net sales rose 4% on higher paper prices.",
        exhibits,
    ])
    quill = ingest.ingest_pdf(pdf, store, embedder).collection
    ingest_a_manual(store, embedder, tmp_path, 20)  # a library where few pages carry the name: a rare, heavy keyword
    retriever = Retriever(store, embedder)
    question = "How many employees did Quillfeather have?"
    words = retriever.query_tokens(question, [quill])
    assert retriever.own_names_everywhere(words, [quill]) == {"quillfeather"}  # on every page: tells no page apart
    assert retriever.keyword(question, [quill])[0][0][1] == 2  # the page that answers, not the exhibit list
    bm25_with_name = retriever._bm25.get_scores(words)
    assert bm25_with_name[retriever._page_column[(quill, 4)]] > bm25_with_name[retriever._page_column[(quill, 2)]]  # what the rule undoes
    # with other documents searched, which do not carry the name, it picks the document and stays a keyword
    assert retriever.own_names_everywhere(words, [quill, filings["alder"]]) == set()


def test_rule_a_keyword_matches_its_plural_and_its_singular(store, embedder, tmp_path):
    index = SparseBM25([["merchandise", "inventories", "5651"], ["stores", "opened"], ["^bby", "figure_2"], ["operations"]])
    assert index.get_scores(["inventory"])[0] > 0 and index.get_scores(["store"])[1] > 0 and index.get_scores(["operation"])[3] > 0
    assert index.get_scores(["operating"])[3] == 0  # no stem: "operating income" is not every row of a Statement of Operations
    assert index.get_scores(["^bby"])[2] > 0 and index.get_scores(["5651"])[0] > 0  # acronym and figure tokens as they are
    with rules.off({"plural_matches_singular"}):
        assert SparseBM25([["merchandise", "inventories"], ["stores"]]).get_scores(["inventory"]).sum() == 0
    pages = ["Merchandise inventories were $5,651 million at year end.", "We opened 20 stores and closed 12.",
             "The board met four times."]
    collection = ingest.ingest_pdf(write_text_pdf(tmp_path / "forms.pdf", pages), store, embedder).collection
    question = "How large was the inventory?"  # "inventory": no page prints it, page 1 its plural
    assert Retriever(store, embedder).keyword(question, [collection])[0][0] == (collection, 1)
    with rules.off({"plural_matches_singular"}):
        assert (collection, 1) not in [page for page, _ in Retriever(store, embedder).keyword(question, [collection])]


def test_rule_the_name_a_file_gives_its_document_is_no_keyword_within_it(store, embedder, tmp_path):
    """"General Mills" prints "general" in lower case too, so its first pages do not make it a name; the file name
    GENERALMILLS_2020_10K.pdf does. Kept as keywords, its words find the auditor's consent that repeats the name."""
    assert file_named_runs("Why did General Mills' costs fall?", {"generalmills", "fiscal"}) == [["General", "Mills"]]
    assert file_named_runs("What was Costco's capex in FY2021?", {"costco"}) == [["Costco"]]
    assert file_named_runs("What did General Electric say?", {"generalmills"}) == []
    consent = ("Consent of Independent Registered Public Accounting Firm. We consent to the incorporation by reference of our report "
               "dated at the end of the year on the financial statements of Green River Foods, Inc. in the registration statements "
               "of Green River Foods, Inc. for the employees' savings plan of Green River Foods, Inc.")
    pdf = write_text_pdf(tmp_path / "GREENRIVER_2023_10K.pdf", [
        "Green River Foods, Inc.\nAnnual report on Form 10-K for the fiscal year 2023",
        "Human capital. At the end of the year we had approximately 3,100 full-time employees in our plants and offices.",
        "Our green packaging ships by river barge to general stores across the region.",
        consent,
    ])
    collection = ingest.ingest_pdf(pdf, store, embedder).collection
    ingest_a_manual(store, embedder, tmp_path, 12)
    retriever = Retriever(store, embedder)
    question = "How many employees did Green River have at the end of the year?"
    assert retriever.file_names_asked(collection, question) == {"green", "river"}
    assert retriever.own_names_asked(collection, question) >= {"green", "river"}  # nor a line
    assert retriever.keyword(question, [collection])[0][0] == (collection, 2)
    with rules.off({"file_name_no_keyword"}):
        assert retriever.keyword(question, [collection])[0][0] == (collection, 4)  # the consent, which only names it


def test_rule_a_line_is_read_for_its_meaning_only_when_it_holds_a_word_asked(store, embedder, tmp_path):
    """Embedding each line of the pages shown is most of the time to evidence on pages never read: only the lines
    holding a word asked are embedded, the others rank last by meaning; with no such line, every line is read."""
    assert meaning_read(np.array([0.0, 1.2, 0.0, 0.4])).tolist() == [1, 3]
    assert meaning_read(np.zeros(3)).tolist() == [0, 1, 2]
    pages = ["The stores opened in spring.", "Research spending was 4.2 million.", "Sales rose.", "The board met."]
    collection = ingest.ingest_pdf(write_text_pdf(tmp_path / "r.pdf", pages), store, embedder).collection
    retriever = Retriever(store, embedder)
    lines = ["Research spending was 4.2 million.", "The stores opened in spring.", "Development outlays rose."]
    keyword, meaning = retriever.line_scores("How much was spent on research?", lines, [collection] * 3)
    assert keyword[0] > 0 and keyword[1] == keyword[2] == 0
    assert meaning[0] > 0 and meaning[1] == meaning[2] == -1.0
    assert len(retriever._line_vectors) == 1  # the two lines holding no word asked were never embedded
    with rules.off({"meaning_where_a_word_is_asked"}):
        _, meaning = retriever.line_scores("How much was spent on research?", lines, [collection] * 3)
    assert (meaning > -1.0).all() and meaning[2] > meaning[1]  # "Development outlays" is near in meaning
