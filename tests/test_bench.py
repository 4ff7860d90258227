"""The benchmark script (evaluation/bench.py): time to evidence, and which chat models it measures (any backend, named the same way)."""

from __future__ import annotations

import argparse
import json

import pytest

from evaluation import bench
import config
import embedders
import ingest


def test_bench_times_question_to_evidence_lines(store, embedder, three_page_pdf, monkeypatch):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    monkeypatch.setattr(embedders, "get_embeddings", lambda: embedder)
    row = bench.time_evidence(store, ["Who kept the lighthouse?", "What did the fleet land?", "When did the railway come?"])
    assert row["pages"] == 3
    assert 0 < row["search_p50_ms"] < row["evidence_p50_ms"] <= row["evidence_p90_ms"]


def test_bench_times_the_questions_about_a_built_stores_documents(store, embedder, three_page_pdf, tmp_path, monkeypatch):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    monkeypatch.setattr(embedders, "get_embeddings", lambda: embedder)
    questions = tmp_path / "q.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in [
        {"question": "Who kept the lighthouse?", "doc": three_page_pdf.name}, {"question": "What is the tax rate?", "doc": "other.pdf"},
        {"question": "When did the railway come?", "doc": three_page_pdf.name}]))
    row = bench.time_evidence_on_store(tmp_path / "chroma_store", questions, docs=three_page_pdf.stem)
    assert row["questions"] == 2 and row["pages"] == 3  # the question about a document not stored is left out
    assert 0 < row["search_p50_ms"] < row["evidence_p50_ms"]


def test_bench_times_each_leg_of_a_search(store, embedder, three_page_pdf, monkeypatch):
    monkeypatch.setattr(embedders, "get_embeddings", lambda: embedder)
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    row = bench.time_retrieval(store, ["Who kept the lighthouse?", "What did the fleet land?"])
    assert row["chunks"] > 0 and all(row[f"{leg}_p50_ms"] >= 0 for leg in ("embed", "semantic", "bm25", "fuse", "total"))
    assert row["total_p50_ms"] >= row["semantic_p50_ms"]


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
    assert choose("--backend", "openai", "--model", "qwen-7b", "--base-url", "http://gpu:8080/v1") == ["openai:qwen-7b"]
    assert config.OPENAI_BASE_URL == ""  # --base-url is handed to models.get_chat_model, not written to the settings


def test_section_titles_match_without_numbering_but_keep_their_numbers():
    assert bench.same_section("1 Introduction and preliminaries", "Introduction and preliminaries")
    assert bench.same_section("Item 7", "Item 7. Management's Discussion and Analysis")
    assert not bench.same_section("Item 8", "Item 7. Management's Discussion and Analysis")
    assert not bench.same_section("2.1 Methods", "Results")


def test_a_summary_is_judged_by_the_sections_it_covers_and_those_it_invents():
    sections = [{"title": "Introduction", "kind": "content"}, {"title": "Methods", "kind": "content"},
                {"title": "Index", "kind": "matter"}]
    verdict = bench.judge_summary(["1 Introduction", "Index", "A made-up part"], sections)
    assert (verdict["covered"], verdict["sections"], verdict["coverage"]) == (1, 2, 0.5)
    assert verdict["invented"] == ["A made-up part"] and verdict["missed"] == ["Methods"]


def test_an_embedder_setting_becomes_the_embedder_of_every_document():
    assert bench.embedder_env("default") == {"EMBED_BACKEND": "embedded", "MULTILINGUAL_EMBEDDER": "use-multilingual"}
    assert bench.embedder_env("local:/m/model.onnx") == {
        "EMBED_BACKEND": "local", "EMBED_MODEL": "/m/model.onnx", "MULTILINGUAL_EMBEDDER": "local:/m/model.onnx"}
    assert bench.embedder_env("ollama:embeddinggemma")["EMBED_BACKEND"] == "ollama"
    for wrong in ("local:", "gemma", "hf:google/embeddinggemma-300m"):
        with pytest.raises(ValueError, match="default, local:PATH or ollama:NAME"):
            bench.embedder_env(wrong)


def test_embedders_are_compared_by_their_medians_as_ratios_to_the_first():
    rows = [{"pdf": "a.pdf", "embedder": e, "pages": 10, "searchable_s": s, "evidence_p50_ms": ms, "peak_rss_mib": 900}
            for e, s, ms in [("default", 2.0, 100), ("local:big", 9.0, 700), ("default", 4.0, 300), ("local:big", 7.0, 500)]]
    rows.append({"pdf": "a.pdf", "embedder": "local:big", "error": "killed"})
    header, first, second = bench.compare_embedders(rows, ["default", "local:big"])
    assert first[1:8] == ["default", 2, 3.0, 3.33, 1.0, 200, 1.0]
    assert second[1:8] == ["local:big", 2, 8.0, 1.25, 2.67, 600, 3.0]  # the failed round is not a round


@pytest.mark.slow  # a child process loads the embedder
def test_the_ingest_bench_runs_each_embedder_in_its_own_process_and_times_questions(three_page_pdf, tmp_path, capsys):
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "Who kept the lighthouse?", "doc": three_page_pdf.name}) + "\n"
                         + json.dumps({"question": "Not about it", "doc": "other.pdf"}) + "\n")
    out = tmp_path / "rows.json"
    assert bench.main(["ingest", str(three_page_pdf), "--embedders", "default", "--ask", str(questions), "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["ingest"]
    assert row["embedder"] == "default" and row["pages"] == 3 and row["searchable_s"] > 0
    assert 0 < row["search_p50_ms"] <= row["evidence_p50_ms"] and row["peak_rss_with_evidence_mib"] >= row["peak_rss_mib"]
    assert "default" in capsys.readouterr().out
