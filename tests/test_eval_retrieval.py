"""The retrieval evaluation (eval_retrieval.py): evidence@3 and its line and answer rules, the reworded
questions and seeded halves, and the script end to end."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from conftest import REPO, write_text_pdf

import eval_retrieval
import ingest
from eval_retrieval import (abbreviate_names, answer_in_texts, figures, line_in_quotes, perturb, reword_years, split_questions,
                            states_answer)
from retriever import Retriever


# A quote as FinanceBench stores them (3M's 2018 cash flow statement, shortened): lines cut at every cell
CASH_FLOW_QUOTE = (
    "3M Company and Subsidiaries\nConsolidated Statement of Cash Flow s\nYears ended December 31\n \n(Millions)\n \n"
    "2018\n \n2017\n \n2016\n \nCash Flows from Investing Activities\n \n \nPurchases of property, plant and equipment (PP&E)\n"
    " \n \n(1,577) \n \n(1,373) \n \n(1,420) \nProceeds from sale of PP&E and other assets\n \n \n262 \n \n49 \n \n58 \n"
)


def test_a_line_counts_when_half_its_word_6grams_are_in_one_quote():
    # the page prints the row on several lines; its words are those of the quote: every 6-gram found
    assert line_in_quotes("Purchases of property, plant and equipment (PP&E)\n(1,577)\n(1,373)", [CASH_FLOW_QUOTE])
    # 7 words, 2 six-grams: "purchases of property plant and equipment" is quoted, "... equipment pp" is not (1 of 2: half)
    assert line_in_quotes("Purchases of property, plant and equipment PP", ["Purchases of property, plant and equipment were"])
    # 8 words, 3 six-grams, only the first quoted: less than half
    assert not line_in_quotes("Purchases of property, plant and equipment rose sharply", ["Purchases of property, plant and equipment were 1,577"])
    # the 6-grams must meet in one quote: 2 of 3 are quoted, but 1 in each quote
    line = "alpha beta gamma delta epsilon zeta eta theta"
    assert not line_in_quotes(line, ["alpha beta gamma delta epsilon zeta", "gamma delta epsilon zeta eta theta"])
    assert line_in_quotes(line, ["alpha beta gamma delta epsilon zeta eta"])
    assert not line_in_quotes("Revenue from the sale of outdoor equipment grew by twelve percent.", [CASH_FLOW_QUOTE])


def test_a_line_that_prints_a_whole_quote_counts():
    # a quote cut from the sentence that states it: the longer line prints all of it, in order
    line = "For the year ended December 31, 2022, billed business was $1,338 billion and at December 31, 2022, we had 76.7 million cards-in-force worldwide."
    assert line_in_quotes(line, ["at December 31, 2022, we had 76.7 million cards-in-force worldwide."])
    assert not line_in_quotes(line, ["at December 31, 2022, we had 77.1 million cards-in-force worldwide."])  # not the quote's words
    assert not line_in_quotes(line, ["million cards-in-force worldwide"])  # 5 words: too short to state anything alone


def test_a_line_of_fewer_than_six_words_counts_only_whole_and_contiguous():
    assert line_in_quotes("sale of PP&E and", [CASH_FLOW_QUOTE])  # 5 words, in the quote in this order
    assert line_in_quotes("(1,577) (1,373)", [CASH_FLOW_QUOTE])  # "1 577 1 373": contiguous in the quote
    assert not line_in_quotes("Proceeds from PP&E", [CASH_FLOW_QUOTE])  # all quoted, but not one after another
    # a quote the benchmark extracted with its spaces lost: a whole line of it still counts, in order
    glued = "ConsolidatedStatementsofIncome\nNetsales\n$\n14,082\nCostofsales\n9,019\n7,772\n7,468"
    assert line_in_quotes("Cost of sales 9,019 7,772 7,468", [glued])
    assert not line_in_quotes("Cost of sales 9,019 7,468 7,772", [glued])  # not in the quote's order
    assert not line_in_quotes("sales 9,019", [glued])  # a short line is judged by its words, as before
    assert not line_in_quotes("Purchases of land", [CASH_FLOW_QUOTE])
    assert not line_in_quotes("3M", ["13M shares"])  # whole words: "3m" is not the word "13m"
    assert not line_in_quotes("— —", [CASH_FLOW_QUOTE])  # no words at all


def test_the_answer_string_rule_ignores_case_and_whitespace_but_not_word_edges():
    assert answer_in_texts("Less well-off", ["Latinos expect their children to be LESS\n  well-off than themselves."])
    assert answer_in_texts("  Latinos interviewed by   cellphone ", ["Foreign born: 795 · Latinos interviewed by cellphone: 1,051"])
    assert answer_in_texts("2,100", ["Sample · 2015: 2,100"])
    assert not answer_in_texts("12", ["Revenue was 1250 in 2012."])  # not inside a longer figure
    assert not answer_in_texts("3.4", ["The ratio is 3.46."])
    assert not answer_in_texts("well-off", ["Less well-", "off"])  # each text alone: the answer must sit in one line
    assert not answer_in_texts("", ["anything"])


def test_a_line_states_the_answer_only_with_a_figure_of_the_gold_where_it_has_one():
    quote = "Cash Flows from Operating Activities\nNet cash provided by operating activities\n \n7,802 \n9,221 \n8,183"
    assert figures("Net cash 7,802 (1,670) in 2022; 37% of $150.0 billion, note 5") == {"7802", "1670", "37", "150"}
    assert figures("$1577.00") == figures("1,577") == {"1577"}  # the same figure, however printed
    # the label overlaps the quote (the overlap judge counts it) but states no figure
    assert line_in_quotes("Cash Flows from Operating Activities", [quote])
    assert not states_answer("Cash Flows from Operating Activities", [quote], "$7,802 million")
    assert not states_answer("Cash Flows from Operating Activities 2022 2021", [quote], "$7,802 million")  # years are no figures
    assert states_answer("Net cash provided by operating activities 7,802 9,221", [quote], "$7,802 million")
    # a figure the answer is computed from, printed in the quote, states part of it
    assert states_answer("Net cash provided by operating activities 7,802 9,221", [quote], "Free cash flow was $6,132 million")
    # a gold without figures: the overlap is all there is to ask
    assert states_answer("Cash Flows from Operating Activities", [quote], "Yes, it is healthy")
    # no quotes: the answer printed in the line
    assert states_answer("Foreign born: 795 · Interviewed by cellphone: 1,051", [], "1,051")
    assert not states_answer("Interviewed by cellphone", [], "1,051")


# One page, three sentences: the app's three evidence lines are all of them, whatever their order.
PAGE = ("The lighthouse keeper of Port Elwin was Margaret Tolland. "
        "She kept the lamp burning for forty-one winters without missing a night. "
        "The lamp was fuelled with whale oil until 1902.")


def test_evaluate_reports_evidence_at_3_as_the_inputs_imply(tmp_path, store, embedder):
    pdf = write_text_pdf(tmp_path / "keeper.pdf", [PAGE])
    collections = {"keeper.pdf": ingest.ingest_pdf(pdf, store, embedder, doc_name="keeper.pdf").collection}
    questions = [
        # a quote of the second sentence: shown, so a hit
        {"question": "How long did she keep the lamp burning?", "doc": "keeper.pdf", "pages": [1], "category": "quoted",
         "evidence": [{"page": 1, "text": "She kept the lamp burning for forty-one winters\nwithout missing a night."}]},
        # a quote of a line the page does not print: a miss
        {"question": "Who repaired the lamp?", "doc": "keeper.pdf", "pages": [1], "category": "quoted",
         "evidence": [{"page": 1, "text": "The lamp was repaired by the harbour master in the spring of 1950."}]},
        # no quote, answer printed on the gold page (other case, other spacing): judged by the answer string, a hit
        {"question": "Who was the lighthouse keeper?", "doc": "keeper.pdf", "pages": [1], "category": "printed",
         "answer": "margaret  TOLLAND"},
        # no quote, answer printed nowhere (computed): not judged
        {"question": "How many years did the lamp burn on whale oil?", "doc": "keeper.pdf", "pages": [1], "category": "printed",
         "answer": "41"},
        # unanswerable: never judged
        {"question": "What is the capital of Peru?", "doc": "keeper.pdf", "pages": []},
    ]
    for q in questions:
        q.setdefault("category", "uncategorised")
    retriever = Retriever(store, embedder)
    retriever.refresh()
    results = eval_retrieval.evaluate(retriever, questions, collections, ["doc", "library"], k=2)

    assert results["evidence"] == {"lines": 3, "answerable": 4, "quoted": 2, "answer_on_gold_page": 1}
    for scope in ("doc", "library"):
        hybrid = results["ablations"][f"{scope}/hybrid"]
        assert hybrid["evidence@3"] == round(2 / 3, 3) and hybrid["evidence_n"] == 3
        assert hybrid["by_category"]["quoted"]["evidence@3"] == 0.5 and hybrid["by_category"]["printed"]["evidence_n"] == 1
        assert "evidence@3" not in results["ablations"][f"{scope}/bm25"]  # only hybrid is scored for evidence
    rows = [r for r in results["per_question"] if r["scope"] == "doc"]
    assert [r["evidence"] for r in rows] == [1, 0, 1, None]
    assert all(len(r["evidence_lines"]) == 3 for r in rows)  # the page has three lines: no more to read
    # a page of prose without figures: both judges agree, and all its lines are among the first 8 as among the first 3
    for key in ("evidence@3", "evidence@8", "states@3", "states@8"):
        assert [r[key] for r in rows] == [1, 0, 1, None]

    table = eval_retrieval.metrics_table(results)
    assert "| hit@2 | evidence@1 | evidence@3 | evidence@8 | states@1 | states@3 | states@8 |" in table
    [hybrid_row] = [line.split("|") for line in table.splitlines() if line.startswith("| doc/hybrid |")]
    assert [cell.strip() for cell in hybrid_row[2:5:2]] == ["1.0", "0.667"]  # hit@2, evidence@3
    [bm25] = [line.split("|") for line in table.splitlines() if line.startswith("| doc/bm25 |")]
    assert bm25[3].strip() == "-"
    report = eval_retrieval.markdown_report(results, tmp_path / "questions.jsonl")
    assert "evidence@3 judges 3 of 4 answerable questions: 2 by their evidence quotes, 1 by their answer" in report
    assert "## Evidence misses (hybrid, a gold page in the top 2): 2" in report  # the unquoted line, in each scope

    pages_only = eval_retrieval.evaluate(retriever, questions, collections, ["doc"], k=2, with_evidence=False)
    assert pages_only["ablations"]["doc/hybrid"]["hit@2"] == results["ablations"]["doc/hybrid"]["hit@2"]
    assert all(r["evidence"] is None and r["evidence_lines"] == [] for r in pages_only["per_question"])  # no line embedded


def test_perturbations_add_instructions_abbreviate_names_and_reword_years():
    rng = random.Random(1)
    question = "What did Costco Wholesale Corporation earn in 2021?"
    after = perturb(question, "instruction-after", rng)
    assert after.startswith(question) and len(after) > len(question) + 10
    assert perturb(question, "instruction-before", rng).endswith(question)
    assert abbreviate_names(question, random.Random(0)) in ("What did CW earn in 2021?", "What did Costco earn in 2021?")
    assert abbreviate_names("How many cars are there?", rng) == "How many cars are there?"  # nothing to shorten
    assert reword_years("Revenue in 2019 and FY2020?", random.Random(3)) in {
        f"Revenue in {a} and {b}?" for a in ("FY2019", "fiscal 2019") for b in ("fiscal 2020", "2020")}


def test_split_halves_are_disjoint_seeded_and_cover_everything():
    questions = [{"question": str(i)} for i in range(11)]
    fit, held_out = split_questions(questions, "fit", 18), split_questions(questions, "held-out", 18)
    assert len(fit) == 5 and len(held_out) == 6 and not {q["question"] for q in fit} & {q["question"] for q in held_out}
    assert fit == split_questions(questions, "fit", 18) != split_questions(questions, "fit", 19)


@pytest.mark.slow  # starts another process
def test_eval_script_runs_end_to_end_and_writes_every_metric(tmp_path):
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    write_text_pdf(pdfs / "facts.pdf", [
        "The lighthouse keeper of Port Elwin was Margaret Tolland.",
        "In 1911 the fishing catch reached 3,200 tonnes.",
        "The railway reached the town in 1889.",
    ])
    questions = tmp_path / "questions.jsonl"
    rows = [
        {"question": "Who kept the lighthouse?", "doc": "facts.pdf", "pages": [1], "category": "semantic"},
        {"question": "catch 1911 tonnes", "doc": "facts.pdf", "pages": [2], "category": "keyword-heavy"},
        {"question": "What is the capital of Peru?", "doc": "facts.pdf", "pages": []},
    ]
    questions.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "eval_retrieval.py"), "--questions", str(questions), "--k", "2",
         "--store", str(tmp_path / "store"), "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())
    for scope in ("doc", "library"):
        for ablation in ("semantic", "bm25", "hybrid"):
            metrics = results["ablations"][f"{scope}/{ablation}"]
            assert set(metrics) >= {"hit@2", "recall@2", "precision@2", "mrr", "n"} and metrics["n"] == 2
    assert results["ablations"]["doc/hybrid"]["hit@2"] == 1.0
    assert results["unanswerable"]["doc"]["n"] == 1
    assert (tmp_path / "out.md").read_text().startswith("# Retrieval evaluation")

    # reworded questions, in the own document, the library and the library of the same document type
    proc = subprocess.run(
        [sys.executable, str(REPO / "eval_retrieval.py"), "--questions", str(questions), "--k", "2", "--perturb",
         "--scope", "all", "--store", str(tmp_path / "store"), "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    assert runs["doc/hybrid/instruction-after"]["changed"] == 2 and runs["doc/hybrid/year-wording"]["changed"] == 1
    assert {"library/bm25/plain", "type/semantic/abbreviated-names"} <= set(runs)
    assert "| instruction-before |" in proc.stdout

    # another chunking policy is ingested into its own store, beside the default one
    proc = subprocess.run(
        [sys.executable, str(REPO / "eval_retrieval.py"), "--questions", str(questions), "--k", "2", "--scope", "doc",
         "--store", str(tmp_path / "store"), "--chunk-size", "30", "--chunk-overlap", "0", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    policy_store = ingest.get_client(str(tmp_path / "store-chunks30-0"))
    default_store = ingest.get_client(str(tmp_path / "store"))
    [policy_doc] = ingest.list_documents(policy_store)
    assert policy_doc["chunks"] > ingest.list_documents(default_store)[0]["chunks"]


def test_results_break_down_by_split_and_category_together():
    def row(split, category, hit):
        return {"split": split, "category": category, "doc_type": "manual", "hit": hit, "recall": hit, "precision": hit / 5, "rr": hit}
    rows = [row("dev", "fr question, fr document", 1), row("heldout", "fr question, fr document", 0),
            row("heldout", "fr question, fr document", 1), row("heldout", "en question, fr document", 1)]
    summary = eval_retrieval.summary_with_breakdowns(rows, 5)
    assert summary["by_split_category"]["heldout · fr question, fr document"]["hit@5"] == 0.5
    assert summary["by_split_category"]["heldout · en question, fr document"]["n"] == 1
    assert summary["by_split"]["heldout"]["hit@5"] == 0.667 and summary["hit@5"] == 0.75
