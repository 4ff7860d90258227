"""The answer evaluation (evaluation/eval_answers.py): its judge, summaries and labels, replaying stored passages,
and judging a model on an OpenAI-compatible server."""

from __future__ import annotations

import json

import checker
import config
import embedders
from evaluation import eval_answers
import models
import prompts
from conftest import FACT_PAGES, SERVER_KEY, SERVER_MODEL, write_text_pdf


def test_the_answer_judge_ignores_digit_grouping_and_tolerates_one_typo_in_long_answers():
    from evaluation import eval_answers

    assert eval_answers.normalise("$3,02,16,492.00 Tonnes!") == "30216492.00 tonnes"
    assert eval_answers.gold_items("['2006', '2007']") == ["2006", "2007"]
    question = {"pages": [3], "answer": "Elements of objects tend to be perceptually grouped"}
    assert eval_answers.is_correct(question, "Elements of objects tend to be perceptualy grouped together.", False)
    assert not eval_answers.is_correct(question, "Objects are grouped.", False)
    assert eval_answers.is_correct({"pages": [3], "answer": "12"}, "Worked out: 24 - 12 = 12", False)
    assert eval_answers.is_correct({"pages": [3], "answer": "12%"}, "The gap is 12%.", False)
    assert not eval_answers.is_correct({"pages": [3], "answer": "12"}, "Net sales 2021: 1,250 [2]", False)
    assert not eval_answers.is_correct({"pages": [3], "answer": "3.4"}, "The ratio is 3.46.", False)
    assert not eval_answers.is_correct({"pages": [3], "answer": "6"}, "The total is 29,274.75 [1][6].", False)
    assert not eval_answers.is_correct({"pages": [3], "answer": "2"}, "Quiz: 2 [1]\nWorked out: 2 + 2 + 2 = 6", False)
    assert eval_answers.is_correct({"pages": [], "answer": "Not answerable"}, "The documents do not say.", True)
    categories = {"pages": [3], "answer": "['Running', 'Football (Soccer)', 'Sportswear (sports-inspired lifestyle products)']"}
    assert eval_answers.is_correct(categories, "Running, Football (Soccer) and Sportswear.", False)  # a gloss need not be repeated
    assert not eval_answers.is_correct(categories, "Running and Sportswear.", False)


def test_answer_in_context_is_reported_beside_its_ceiling_the_answer_printed_on_the_gold_pages():
    from evaluation import eval_answers

    row = lambda on_page, in_context, correct: {  # noqa: E731
        "answerable": True, "category": "Pure-text (Plain-text)", "answer_on_gold_pages": on_page, "answer_in_context": in_context,
        "correct": correct, "refused": False, "page_hit": True, "citations": [], "seconds": 1.0}
    # a computed answer (a gap of two printed figures) is on no page, so it cannot be in the context either
    assert not eval_answers.answer_in_context({"pages": [7], "answer": "12%"}, ["Male 65+ 39%", "Female 65+ 27%"])
    summary = eval_answers.summarise([row(True, True, True), row(True, False, False), row(False, False, False)])
    assert summary["text_table_answer_in_context"] == "1/3 (0.33)"
    assert summary["text_table_answer_on_gold_pages"] == "2/3 (0.67)"
    assert summary["text_table_answer_in_context_where_on_page"] == "1/2 (0.50)"
    assert summary["text_table_correct_where_on_page"] == "1/2 (0.50)"


def test_a_sentence_judged_to_make_no_claim_is_left_out_of_the_labels(tmp_path):
    from evaluation import eval_answers

    judged = [{"question": "Q?", "sentence": "Mr. O.P. Vaish", "page": 11, "supports": False},
              {"question": "Q?", "sentence": "The directors are:", "page": 11, "supports": None}]
    path = tmp_path / "judgments.jsonl"
    path.write_text("".join(json.dumps(j) + "\n" for j in judged) + "\n")
    assert eval_answers.load_labels(path) == {eval_answers.pair_key(judged[0]): False}


def test_regate_counts_the_stored_replies_todays_app_shows_by_their_verdict(tmp_path, capsys):
    line = {"n": 1, "page": 35, "text": "We ended production of the 747 wide-body model in 2022.", "kind": "sentence"}
    asked = "Which wide-body airplane model did Boeing stop producing in 2022?"
    rows = [{"question": asked, "doc": "BOEING_2022_10K.pdf", "answerable": True, "sources": [line],
             "model_reply": "Boeing stopped producing the 747 wide-body model in 2022. [L1]"},
            {"question": asked + " ", "doc": "BOEING_2022_10K.pdf", "answerable": True, "sources": [line],
             "model_reply": "Boeing stopped producing the 777 wide-body model in 2022. [L1]"},
            {"question": "How many 787s did Boeing deliver?", "doc": "BOEING_2022_10K.pdf", "answerable": False, "sources": [line],
             "model_reply": "Boeing delivered 31 airplanes. [L1]"}]
    stored, verdicts = tmp_path / "rows.jsonl", tmp_path / "verdicts.jsonl"
    stored.write_text("".join(json.dumps(r) + "\n" for r in rows))
    verdicts.write_text(json.dumps({"question": asked, "verdict": "right"}) + "\n")
    assert eval_answers.main(["--regate", str(stored), "--verdicts", str(verdicts)]) == 0
    assert json.loads(capsys.readouterr().out) == {"answerable": {"right": 1, "nearest lines": 1}, "unanswerable": {"nearest lines": 1}}
    eval_answers.main(["--regate", str(stored), "--verdicts", str(verdicts), "--rules-off", "question_words_any_form"])
    assert json.loads(capsys.readouterr().out)["answerable"] == {"nearest lines": 2}  # "stopped" no longer restates "stop"


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


def test_judging_pairs_put_every_checked_sentence_beside_every_passage_shown():
    """Recall needs to know which uncited passages back a sentence, so each is written out for judging."""
    from evaluation import eval_answers

    row = {"model": "m", "question": "When did the railway reach the town?", "answer": "The railway reached the town in 1889 [1].",
           "sources": [{"n": 1, "page": 3, "gold_page": True, "text": "The railway reached the town in 1889."},
                       {"n": 2, "page": 2, "gold_page": False, "text": "Cod and haddock were landed."}]}
    pairs = eval_answers.judging_pairs([row])
    assert [(p["page"], p["cited"], p["verified"], p["gold_page"]) for p in pairs] == [(3, True, True, True), (2, False, False, False)]
    assert {p["sentence"] for p in pairs} == {checker.strip_markers("The railway reached the town in 1889 [1].")}


def test_replay_re_asks_the_stored_passages_and_compares_with_the_stored_answers(llm, tmp_path, monkeypatch, capsys):
    from evaluation import eval_answers

    monkeypatch.setattr(models.EmbeddedChatModel, "load", classmethod(lambda cls, name=None: llm))  # the session's model, loaded once
    notice = "Staff notice. The staff door code is 4711. Please keep it private."
    questions = [{"question": "What is the staff door code?", "answer": "4711", "doc": "notice.pdf", "pages": [1], "category": "Pure-text"},
                 {"question": "How many doors are there?", "answer": "12", "doc": "notice.pdf", "pages": [1], "category": "Pure-text"}]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    stored = [{"model": "qwen2.5-coder-0.5b", "question": q["question"], "gold": q["answer"], "answerable": True, "answer_in_context": True,
               "answer": prompts.REFUSAL, "refused": True, "correct": True,  # a stale verdict: today's judge reads it again
               "sources": [{"n": 1, "page": 1, "gold_page": True, "text": notice + " Door 12 is locked."}]} for q in questions]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in stored + stored[:1]))  # a question stored twice is asked once
    out = tmp_path / "replayed.jsonl"
    assert eval_answers.main(["--replay", str(rows), "--in-context", "--questions", str(tmp_path / "q.jsonl"),
                              "--models", "qwen2.5-coder-0.5b", "--out", str(out)]) == 0
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]  # the count "12" is no evidence of context: left out
    assert row["question"] == "What is the staff door code?" and row["before_refused"] and not row["before_correct"]
    assert "4711" in row["answer"] and row["correct"] and not row["refused"]
    assert '"correct_answerable": "0 -> 1 of 1"' in capsys.readouterr().out


def test_eval_answers_judges_a_model_on_an_openai_compatible_server(tmp_path, embedder, llama_server, monkeypatch, capsys):
    (tmp_path / "pdfs").mkdir()
    write_text_pdf(tmp_path / "pdfs" / "facts.pdf", FACT_PAGES)
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps([{"question": "Who was the lighthouse keeper of Port Elwin?", "doc": "facts.pdf", "pages": [1],
                                      "answer": "Margaret Tolland", "category": "Pure-text (Plain-text)"}]))
    # the settings name neither the store nor the server: main() hands both in (--store, --base-url)
    for name, value in {"CHROMA_PERSIST_DIR": "", "OPENAI_BASE_URL": "", "OPENAI_API_KEY": SERVER_KEY}.items():
        monkeypatch.setattr(config, name, value)
    monkeypatch.setattr(config, "setup_logging", lambda *args: None)  # no handlers on the test run's root logger
    monkeypatch.setattr(embedders, "get_embeddings", lambda: embedder)
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
