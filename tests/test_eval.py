"""The evidence measures of the evaluation scripts: evidence@3 (eval_retrieval, eval_answers) and time to evidence (bench);
which chat model eval_answers and bench measure (any backend, named the same way)."""

from __future__ import annotations

import argparse
import json

from conftest import FACT_PAGES, SERVER_KEY, SERVER_MODEL, write_text_pdf

import bench
import config
import eval_answers
import eval_retrieval
import ingest
import models
from eval_retrieval import answer_in_texts, line_in_quotes
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
    assert not line_in_quotes("Purchases of property, plant and equipment rose sharply", ["Purchases of property, plant and equipment"])
    # the 6-grams must meet in one quote: 2 of 3 are quoted, but 1 in each quote
    line = "alpha beta gamma delta epsilon zeta eta theta"
    assert not line_in_quotes(line, ["alpha beta gamma delta epsilon zeta", "gamma delta epsilon zeta eta theta"])
    assert line_in_quotes(line, ["alpha beta gamma delta epsilon zeta eta"])
    assert not line_in_quotes("Revenue from the sale of outdoor equipment grew by twelve percent.", [CASH_FLOW_QUOTE])


def test_a_line_of_fewer_than_six_words_counts_only_whole_and_contiguous():
    assert line_in_quotes("sale of PP&E and", [CASH_FLOW_QUOTE])  # 5 words, in the quote in this order
    assert line_in_quotes("(1,577) (1,373)", [CASH_FLOW_QUOTE])  # "1 577 1 373": contiguous in the quote
    assert not line_in_quotes("Proceeds from PP&E", [CASH_FLOW_QUOTE])  # all quoted, but not one after another
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
    assert all(len(r["evidence_lines"]) == 3 for r in rows)

    table = eval_retrieval.metrics_table(results)
    assert "| hit@2 | evidence@3 |" in table and "| doc/hybrid | 1.0 | 0.667 |" in table
    [bm25] = [line.split("|") for line in table.splitlines() if line.startswith("| doc/bm25 |")]
    assert bm25[3].strip() == "-"
    report = eval_retrieval.markdown_report(results, tmp_path / "questions.jsonl")
    assert "evidence@3 judges 3 of 4 answerable questions: 2 by their evidence quotes, 1 by their answer" in report
    assert "## Evidence misses (hybrid, a gold page in the top 2): 2" in report  # the unquoted line, in each scope


def test_answer_summary_reports_evidence_shown_when_refused_and_median_times():
    def row(evidence, refused, evidence_seconds, first_token_seconds):
        return {"answerable": evidence != "unanswerable", "correct": False, "refused": refused, "citations": [], "seconds": 9.0,
                "evidence": None if evidence == "unanswerable" else evidence,
                "evidence_seconds": evidence_seconds, "first_token_seconds": first_token_seconds}

    rows = [row(1, True, 0.4, None), row(0, True, 0.6, None), row(1, False, 0.5, 3.0), row(None, False, 0.9, 5.0),
            row("unanswerable", True, 0.3, 0.0)]  # 0.0: a row stored before None meant "no model call"
    summary = eval_answers.summarise(rows)
    assert summary["evidence@3"] == "2/3 (0.67)"  # the row with evidence None is not judged
    assert summary["evidence_shown_when_refused"] == "1/2 (0.50)"
    assert summary["median_evidence_seconds"] == 0.5 and summary["median_first_token_seconds"] == 4.0
    assert eval_answers.summarise([{**r, "evidence": None} for r in rows[:1]])["evidence@3"] == "0/0"  # old rows: no figure


def test_bench_times_question_to_evidence_lines(store, embedder, three_page_pdf, monkeypatch):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    monkeypatch.setattr(models, "get_embeddings", lambda: embedder)
    row = bench.time_evidence(store, ["Who kept the lighthouse?", "What did the fleet land?", "When did the railway come?"])
    assert row["pages"] == 3
    assert 0 < row["search_p50_ms"] < row["evidence_p50_ms"] <= row["evidence_p90_ms"]


def test_the_model_flags_name_one_model_of_a_backend_or_keep_the_list_of_embedded_names(monkeypatch):
    parser = argparse.ArgumentParser()
    bench.add_model_flags(parser, ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    monkeypatch.setattr(config, "OPENAI_BASE_URL", "")

    def choose(*flags: str) -> list[str]:
        return bench.model_choices(parser.parse_args(list(flags)))

    assert choose() == ["embedded:qwen2.5-coder-0.5b", "embedded:qwen2.5-coder-1.5b"]  # today's default, unchanged
    assert choose("--models", "qwen2.5-coder-0.5b", "openai:qwen-7b", "ollama:llama3.2:3b") == [
        "embedded:qwen2.5-coder-0.5b", "openai:qwen-7b", "ollama:llama3.2:3b"]
    assert choose("--model", "qwen2.5-coder-0.5b") == ["embedded:qwen2.5-coder-0.5b"]  # a bare --model is an embedded one
    assert choose("--backend", "embedded") == [f"embedded:{config.EMBEDDED_LLM}"]
    assert choose("--backend", "openai") == ["openai:"]  # the server's first model
    assert config.OPENAI_BASE_URL == ""
    assert choose("--backend", "openai", "--model", "qwen-7b", "--base-url", "http://gpu:8080/v1") == ["openai:qwen-7b"]
    assert config.OPENAI_BASE_URL == "http://gpu:8080/v1"


def test_eval_answers_judges_a_model_on_an_openai_compatible_server(tmp_path, embedder, llama_server, monkeypatch, capsys):
    (tmp_path / "pdfs").mkdir()
    write_text_pdf(tmp_path / "pdfs" / "facts.pdf", FACT_PAGES)
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps([{"question": "Who was the lighthouse keeper of Port Elwin?", "doc": "facts.pdf", "pages": [1],
                                      "answer": "Margaret Tolland", "category": "Pure-text (Plain-text)"}]))
    # main() sets the store and the server's address in config: set here first, so both are put back after the test
    for name, value in {"CHROMA_PERSIST_DIR": "", "OPENAI_BASE_URL": "", "OPENAI_API_KEY": SERVER_KEY}.items():
        monkeypatch.setattr(config, name, value)
    monkeypatch.setattr(config, "setup_logging", lambda *args: None)  # no handlers on the test run's root logger
    monkeypatch.setattr(models, "get_embeddings", lambda: embedder)
    out = tmp_path / "rows.jsonl"

    code = eval_answers.main(["--questions", str(questions), "--store", str(tmp_path / "store"), "--out", str(out),
                              "--answerable", "1", "--unanswerable", "0",
                              "--backend", "openai", "--model", SERVER_MODEL, "--base-url", llama_server])

    assert code == 0
    [row] = eval_answers.read_rows(out)
    label = f"{SERVER_MODEL} on {llama_server}"
    assert row["model"] == f"openai:{SERVER_MODEL}" and row["model_label"] == label
    assert row["written_by"] == label and row["answer"] and row["page_hit"]  # the server's model wrote the answer judged
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed.startswith(f"openai:{SERVER_MODEL} ")
    assert json.loads(printed.partition(" ")[2])["model_label"] == label
