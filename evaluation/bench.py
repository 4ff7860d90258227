"""Benchmarks that print numbers (speed and memory targets live here, not in tests).

    python -m evaluation.bench ingest PDF... [--enrich-pages N] [--json OUT]
    python -m evaluation.bench ingest --big 1000 [--json OUT]
    python -m evaluation.bench ingest PDF... --embedders default local:PATH [--rounds 3] [--ask Q.jsonl] [--json OUT]
    python -m evaluation.bench retrieval [--chunks 1000 10000 100000] [--json OUT]
    python -m evaluation.bench evidence --store STORE --questions Q.jsonl [--docs 10K] [--limit 20] [--json OUT]
    python -m evaluation.bench answer [--models qwen2.5-coder-0.5b qwen2.5-coder-1.5b] [--questions 10] [--json OUT]
    python -m evaluation.bench answer --backend openai [--model NAME] [--base-url URL] [--questions 10] [--json OUT]
    python -m evaluation.bench answer --while-labelling [--models ...] [--questions 4] [--seed 17] [--json OUT]
    python -m evaluation.bench memory [PDF] [--model NAME] [--questions 3] [--label-pages 6] [--json OUT]
    python -m evaluation.bench runtime [--models ...] [--rounds 3] [--source-chars 800] [--json OUT]
    python -m evaluation.bench summary --store STORE [--docs PDF...] [--model NAME] [--json OUT]
    python -m evaluation.bench api [--clients 20] [--ask-clients 4] [--chunks 10000] [--model NAME] [--json OUT]
    python -m evaluation.bench abandoned [--model NAME] [--timeout 1.5] [--rounds 3] [--abandon 3] [--json OUT]

``ingest`` runs each PDF in a fresh child process with an empty temporary
store, so every row has its own cold start and its own peak RSS. A row gives
time-to-searchable (the ingest call: open, extract/OCR, chunk, embed, store,
mark complete), pages per second for each stage, and, with --enrich-pages,
seconds per page for LLM titles/keywords on the first N pages. It also re-embeds
the same chunks with the embedder alone, so "pipeline / raw" says how close the
whole ingest comes to the embedder's own speed, and it records the longest
silence between progress updates. ``--big N`` builds (once, cached under
``bench_store/``) an N-page PDF from the text pages of the bench PDFs and
ingests that: the bounded-memory case. ``--embedders`` ingests each PDF once per embedder setting
(``default``: the built-in ones; ``local:PATH`` or ``ollama:NAME``: that model for every document, main and
not English), the settings taking turns for ``--rounds`` rounds so that a busy spell of the machine falls on
all of them; ``--ask`` then times, on each fresh store, the questions of that file about the PDF from
question in to evidence lines ready (the line vectors of the pages found are embedded then: a large
embedder's cost shows there). It prints each setting's medians and their ratio to the first setting's.

``retrieval`` builds (once, cached under ``bench_store/``) stores of N chunks
from the real chunks and vectors of the evaluation store (run
``eval_retrieval.py`` on ../shared/bench/mmlongbench first), copied into
collections of about 500 chunks (a 100-page PDF each) with a little noise added
to each copy's vector, then times every leg of real bench questions. Then, with a
fresh retriever on the same store (no query cached; line vectors cached from one
question to the next, as in the app), it times each question in to its evidence
lines ready: ``retriever.search`` and ``evidence.best_lines`` together ("time to
evidence", p50 and p90 over the questions, with the search alone beside it).
``answer`` asks the sample questions in ``input_data/`` (R-intro.pdf, cached in
``bench_store/answer``) the way the app does (retrieve, fit the context, stream)
and reports time to first token, generation speed and prompt size per model. The model is
any the app can answer with (``--backend embedded|ollama|openai --model NAME``, see
``add_model_flags``): a model on a GPU server is timed the way the embedded ones are.
``api`` starts a real ``uvicorn api:app`` on the scaled store of ``--chunks`` chunks
(built as for ``retrieval``), sends ``--requests`` bench questions one after another
from each of ``--clients`` concurrent /api/search clients, then ``--ask-rounds``
questions from each of ``--ask-clients`` /api/ask clients, and reports p50/p95/max
latency, errors, the longest wait in the answer queue and whether answers came
round by round (a fair queue); it exits non-zero when any request failed.
``abandoned`` starts a real server with input_data's PDF, then, each round, lets ``--abandon`` askers using the
official ``openai`` client give up at once, each on its own question (a ``--timeout`` second timeout and the
client's default two retries: three requests each), then asks one streamed /api/ask: it reports when that next
question's evidence and first word came (``--abandon 0``: the same with nobody giving up, the baseline).
``memory`` runs, in a fresh child process on an empty store, what the app does with
one upload: the embedder and a BackgroundEnricher, the PDF ingested and submitted for
labels, ``--questions`` questions asked while the labeller runs (the first racing it
to load the chat model), then labelling to its end; it prints resident memory after
each step and the process's peak (VmHWM), and exits non-zero unless the chat model
and the embedder were each loaded exactly once. ``answer --while-labelling`` cancels
the labeller after each "running" question and waits at most 60 s for it to stop
(it reports how long it took; a labeller that does not stop is an error, not a hang).

``summary`` asks "Summarise this document." of each document of the whole-document bench
(``evaluation/whole_document_bench.jsonl``: each document's top-level sections as a reader lists them)
that ``--store`` holds, scoped to it, with the embedded model, and reports the seconds, where the outline
came from, and the answer judged against those sections: how many it covers and which of its sections name
none of the document's (invented).

Timings are single runs on a shared machine: repeat and compare medians.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import config

log = logging.getLogger("bench")

STAGES = ("extract", "ocr", "chunk", "embed", "store")
BENCH_DIR = config.BASE_DIR.parent / "shared" / "bench" / "mmlongbench"
BENCH_PDFS = BENCH_DIR / "pdfs"
BENCH_QUESTIONS = BENCH_DIR / "questions.jsonl"


def ingest_one(pdf: Path, enrich_pages: int, questions: list[str] | None = None) -> dict:
    """Ingest ``pdf`` into an empty temp store in this process and measure it; then, with ``questions``,
    time each from question in to evidence lines ready on that store (``time_evidence``)."""
    import embedders
    import ingest
    import models

    t0 = time.perf_counter()
    embedder = embedders.get_embeddings()
    load_seconds = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as store_dir:
        client = ingest.get_client(store_dir)  # its kept PDF and lock go in it too (ingest.store_dir)
        updates: list[float] = []
        result = ingest.ingest_pdf(pdf, client, embedder, progress=lambda *_: updates.append(time.perf_counter()))
        gaps = [b - a for a, b in zip([t0 + load_seconds] + updates, updates)]
        ingest_peak_mib = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)  # before the raw pass below
        texts = client.get_collection(result.collection).get(include=["documents"])["documents"]
        t = time.perf_counter()
        embedder.embed_documents(texts)
        raw_embed_s = time.perf_counter() - t
        row = {
            "pdf": pdf.name,
            "pages": result.pages,
            "chunks": result.chunks,
            "ocr_pages": result.ocr_pages,
            "model_load_s": round(load_seconds, 2),
            "searchable_s": round(result.seconds, 2),
            "stage_s": {k: round(v, 2) for k, v in result.stage_seconds.items()},
            "chunks_per_s_embed": round(result.chunks / max(result.stage_seconds["embed"], 1e-9), 1),
            "chunks_per_s_raw": round(result.chunks / max(raw_embed_s, 1e-9), 1),
            "pipeline_vs_raw": round(raw_embed_s / max(result.seconds, 1e-9), 2),
            "progress_updates": len(updates),
            "max_progress_gap_s": round(max(gaps, default=0.0), 1),
            "peak_rss_mib": ingest_peak_mib,
        }
        if enrich_pages:
            col = ingest.open_collection(client, result.collection, embedder)
            todo = ingest.pages_to_enrich(col)[:enrich_pages]
            keep = set(todo)
            t = time.perf_counter()
            llm = models.get_chat_model()
            row["llm_load_s"] = round(time.perf_counter() - t, 2)
            # label only the first N pages: mark the rest as done for this measurement
            rest = col.get(where={"enriched": False}, include=["metadatas"])
            skip = [(i, m) for i, m in zip(rest["ids"], rest["metadatas"]) if m["page"] not in keep]
            if skip:
                col.update(ids=[i for i, _ in skip], metadatas=[{**m, "enriched": True} for _, m in skip])
            t = time.perf_counter()
            ingest.enrich_document(col, llm)
            row["enrich_s_per_page"] = round((time.perf_counter() - t) / max(len(todo), 1), 2)
        if questions:
            row.update(time_evidence(client, questions))
            row["peak_rss_with_evidence_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return row


def embedder_env(setting: str) -> dict[str, str]:
    """The settings that make ``setting`` the embedder of every document, English or not.

    embedder_env("local:/m/model.onnx") -> {"EMBED_BACKEND": "local", "EMBED_MODEL": "/m/model.onnx",
                                            "MULTILINGUAL_EMBEDDER": "local:/m/model.onnx"}
    """
    if setting == "default":
        return {"EMBED_BACKEND": "embedded", "MULTILINGUAL_EMBEDDER": "use-multilingual"}
    kind, _, model = setting.partition(":")
    if kind not in ("local", "ollama") or not model:
        raise ValueError(f"--embedders takes default, local:PATH or ollama:NAME, not {setting!r}")
    return {"EMBED_BACKEND": kind, "EMBED_MODEL": model, "MULTILINGUAL_EMBEDDER": setting}


def questions_about(path: Path, pdf: Path) -> list[str]:
    """The questions of a JSON or JSONL question file about ``pdf`` (its ``doc`` field names the file), or all
    of them when the file names no documents."""
    import eval_retrieval

    rows = eval_retrieval.load_questions(path)
    return [q["question"] for q in rows if q.get("doc", pdf.name) == pdf.name]


def run_isolated(pdf: Path, enrich_pages: int, embedder: str | None = None, ask: Path | None = None) -> dict:
    """Run ``ingest_one`` in a child process so its peak RSS is its own (with ``embedder``'s settings, if given)."""
    cmd = [sys.executable, "-m", "evaluation.bench", "_ingest_one", str(pdf), "--enrich-pages", str(enrich_pages)]
    cmd += ["--ask", str(ask)] if ask else []
    env = {**os.environ, **embedder_env(embedder)} if embedder else None
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=config.BASE_DIR, env=env)
    row = {"pdf": pdf.name} | ({"embedder": embedder} if embedder else {})
    if proc.returncode != 0:
        return row | {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return row | json.loads(proc.stdout.strip().splitlines()[-1])


def compare_embedders(rows: list[dict], embedders: list[str]) -> list[list]:
    """Per PDF and embedder setting: medians over the rounds of searchable seconds, pages per second, time to
    evidence and peak memory, and the first two as ratios to the first setting's (the built-in one, usually)."""
    import statistics

    def median(pdf: str, embedder: str, key: str) -> float | None:
        values = [r[key] for r in rows if r["pdf"] == pdf and r["embedder"] == embedder and key in r]
        return round(statistics.median(values), 2) if values else None

    table = [["pdf", "embedder", "rounds", "searchable s", "pages/s", "× first", "evidence p50 ms", "× first",
              "peak MiB ingest", "with evidence"]]
    for pdf in dict.fromkeys(r["pdf"] for r in rows):
        first = {key: median(pdf, embedders[0], key) for key in ("searchable_s", "evidence_p50_ms")}
        for embedder in embedders:
            ok = [r for r in rows if r["pdf"] == pdf and r["embedder"] == embedder and "error" not in r]
            if not ok:
                table.append([pdf[:40], embedder, 0, "error"] + [""] * 6)
                continue
            searchable, evidence = median(pdf, embedder, "searchable_s"), median(pdf, embedder, "evidence_p50_ms")
            ratio = lambda value, base: round(value / base, 2) if value and base else "-"
            table.append([pdf[:40], embedder[-40:], len(ok), searchable, round(ok[0]["pages"] / searchable, 2),
                          ratio(searchable, first["searchable_s"]), evidence if evidence is not None else "-",
                          ratio(evidence, first["evidence_p50_ms"]), median(pdf, embedder, "peak_rss_mib"),
                          median(pdf, embedder, "peak_rss_with_evidence_mib") or "-"])
    return table


def print_ingest_table(rows: list[dict]) -> None:
    header = ["pdf", "pages", "chunks", "ocr", "searchable s", *(f"{s} p/s" for s in STAGES), "embed ch/s",
              "raw ch/s", "pipeline/raw", "max gap s", "peak MiB", "enrich s/p"]
    lines = [header]
    for r in rows:
        if "error" in r:
            lines.append([r["pdf"], "error: " + r["error"]] + [""] * (len(header) - 2))
            continue
        per_stage = [
            f"{r['pages'] / r['stage_s'][s]:.0f}" if r["stage_s"][s] > 0.005 else "-" for s in STAGES
        ]
        lines.append(
            [r["pdf"][:40], r["pages"], r["chunks"], r["ocr_pages"], r["searchable_s"], *per_stage,
             r["chunks_per_s_embed"], r["chunks_per_s_raw"], r["pipeline_vs_raw"], r["max_progress_gap_s"],
             r["peak_rss_mib"], r.get("enrich_s_per_page", "-")]
        )
    print_table(lines)


def print_table(lines: list[list]) -> None:
    """Rows of cells as aligned columns; the first row is the header."""
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        print("  ".join(str(v).ljust(w) for v, w in zip(line, widths)))


def build_big_pdf(pages: int, target: Path) -> Path:
    """An N-page PDF of text pages cut from the bench PDFs, built once (the 1,000-page case)."""
    import pymupdf

    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    out = pymupdf.open()
    for source in sorted(BENCH_PDFS.glob("*.pdf")):
        with pymupdf.open(source) as doc:
            for page in doc:
                if out.page_count < pages and len(page.get_text("text").strip()) >= config.OCR_SPARSE_TEXT_CHARS:
                    out.insert_pdf(doc, from_page=page.number, to_page=page.number)
    if out.page_count < pages:
        raise SystemExit(f"The bench PDFs hold only {out.page_count} text pages; asked for {pages}.")
    partial = target.with_suffix(".partial")
    out.save(partial, garbage=3, deflate=True)
    partial.replace(target)
    return target


# -----------------------------------------------------------------------------
# Retrieval latency

CHUNKS_PER_COLLECTION = 500


def build_scaled_store(n_chunks: int, source_dir: Path, target_dir: Path):
    """A store of ``n_chunks`` chunks copied from ``source_dir``'s documents (cached by size)."""
    import numpy as np

    import ingest

    client = ingest.get_client(str(target_dir))
    if sum(c.count() for c in client.list_collections()) >= n_chunks:
        return client
    for c in client.list_collections():
        client.delete_collection(c.name)
    source = ingest.get_client(str(source_dir))
    pool = {"ids": [], "documents": [], "metadatas": [], "embeddings": []}
    for doc in ingest.list_documents(source):
        got = source.get_collection(doc["collection"], embedding_function=None).get(
            include=["documents", "metadatas", "embeddings"]
        )
        for key in pool:
            pool[key] += list(got[key])
    if not pool["ids"]:
        raise SystemExit(f"No ingested documents in {source_dir} to copy chunks from: "
                         "run eval_retrieval.py first, or pass --source-store STORE.")
    vectors = np.array(pool["embeddings"], dtype=np.float32)
    rng = np.random.default_rng(0)
    for start in range(0, n_chunks, CHUNKS_PER_COLLECTION):
        number = start // CHUNKS_PER_COLLECTION
        idx = np.arange(start, min(start + CHUNKS_PER_COLLECTION, n_chunks)) % len(pool["ids"])
        noisy = vectors[idx] + rng.normal(0, 0.01, (len(idx), vectors.shape[1])).astype(np.float32)
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        sha = f"{number:016x}" + "0" * 48
        meta = {"doc_name": f"copy{number}.pdf", "sha256": sha, "embedder": config.EMBEDDED_EMBEDDER_NAME,
                "status": "complete", "pages": 100, "chunks": len(idx), "ocr_pages": 0, "empty_pages": 0}
        col = client.create_collection(ingest.collection_name_for(sha), metadata=meta,
                                       configuration={"hnsw": {"space": "cosine"}}, embedding_function=None)
        metas = [{**pool["metadatas"][i], "doc_name": meta["doc_name"], "sha256": sha} for i in idx]
        for s in range(0, len(idx), 5000):
            col.add(ids=[f"c{number}-{j}" for j in range(s, min(s + 5000, len(idx)))],
                    documents=[pool["documents"][i] for i in idx[s:s + 5000]],
                    metadatas=metas[s:s + 5000], embeddings=noisy[s:s + 5000])
    return client


def time_retrieval(client, questions: list[str]) -> dict:
    """p50/p95 milliseconds of each leg and of the whole search, per question."""
    import numpy as np

    import embedders
    from retriever import Retriever, rrf

    retriever = Retriever(client, embedders.get_embeddings())
    t = time.perf_counter()
    retriever.refresh()
    build_s = time.perf_counter() - t
    timings = {"embed": [], "semantic": [], "bm25": [], "fuse": [], "total": []}
    for q in questions:
        t0 = time.perf_counter()
        for embedder in retriever._vector_groups:  # fills the query cache, so the semantic leg below is search only
            retriever._embed_query(embedder, q)
        t1 = time.perf_counter()
        sem = retriever.semantic(q)
        t2 = time.perf_counter()
        kw = retriever.keyword(q)
        t3 = time.perf_counter()
        rrf([[key for key, _, _ in sem], [key for key, _ in kw]])
        t4 = time.perf_counter()
        for leg, seconds in (("embed", t1 - t0), ("semantic", t2 - t1), ("bm25", t3 - t2), ("fuse", t4 - t3), ("total", t4 - t0)):
            timings[leg].append(seconds * 1000)
    chunks = sum(c.count() for c in client.list_collections())
    row = {"chunks": chunks, "collections": len(client.list_collections()), "index_build_s": round(build_s, 1)}
    for leg, values in timings.items():
        row[f"{leg}_p50_ms"] = round(float(np.percentile(values, 50)), 1)
        row[f"{leg}_p95_ms"] = round(float(np.percentile(values, 95)), 1)
    return row


def time_evidence(client, questions: list[str]) -> dict:
    """p50/p90 milliseconds from question in to evidence lines ready (search + ``evidence.best_lines``), and of
    the search alone, per question, on a retriever of its own (so no question's embedding is cached yet)."""
    import numpy as np

    import embedders
    import evidence
    from retriever import Retriever

    retriever = Retriever(client, embedders.get_embeddings())
    retriever.refresh()
    search_ms, evidence_ms = [], []
    for q in questions:
        t0 = time.perf_counter()
        hits = retriever.search(q)
        t1 = time.perf_counter()
        evidence.best_lines(q, retriever.load_pages(hits), retriever)
        t2 = time.perf_counter()
        search_ms.append((t1 - t0) * 1000)
        evidence_ms.append((t2 - t0) * 1000)
    pages = sum(len({m["page"] for m in c.get(include=["metadatas"])["metadatas"]}) for c in client.list_collections())
    row = {"pages": pages}
    for name, values in (("search", search_ms), ("evidence", evidence_ms)):
        row[f"{name}_p50_ms"] = round(float(np.percentile(values, 50)), 1)
        row[f"{name}_p90_ms"] = round(float(np.percentile(values, 90)), 1)
    return row


def time_evidence_on_store(store: Path, questions: Path, docs: str = "", limit: int = 20) -> dict:
    """``time_evidence`` on a built store, for the first ``limit`` questions of ``questions`` about its documents
    (those whose name holds ``docs``): in a fresh process no line vector is cached, so each question's evidence
    lines are embedded then, as on the first question about pages never read before."""
    import ingest

    client = ingest.get_client(str(store))
    stored = {d["doc_name"] for d in ingest.list_documents(client)}
    asked = [json.loads(line) for line in questions.read_text().splitlines() if line.strip()]
    chosen = [q["question"] for q in asked if q.get("doc") in stored and docs in q["doc"]][:limit]
    return {"questions": len(chosen), **time_evidence(client, chosen)}


# -----------------------------------------------------------------------------
# Which chat model a measurement uses (evaluation/bench.py answer, evaluation/eval_answers.py): the same flags for both

BACKENDS = ("embedded", "ollama", "openai")


def add_model_flags(parser: argparse.ArgumentParser, default_models: list[str]) -> None:
    """``--models`` (embedded names or choice ids), or ``--backend B [--model NAME]`` for one model, and ``--base-url``."""
    parser.add_argument("--models", nargs="+", default=default_models,
                        help="embedded model names, or choice ids such as openai:NAME (ignored with --backend/--model)")
    parser.add_argument("--backend", choices=BACKENDS,
                        help="measure one model of this backend instead of --models (openai: OPENAI_BASE_URL, OPENAI_API_KEY)")
    parser.add_argument("--model", help="the model's name on --backend (default: embedded EMBEDDED_LLM, ollama LLM_MODEL, "
                                        "openai the server's first model); without --backend, an embedded name")
    parser.add_argument("--base-url", help="the OpenAI-compatible server's /v1 address (default: OPENAI_BASE_URL)")


def as_choice(name: str) -> str:
    """as_choice("qwen2.5-coder-0.5b") -> "embedded:qwen2.5-coder-0.5b"; a choice id ("openai:qwen-7b") stays as it is.
    as_choice("llama3.2:3b") -> "embedded:llama3.2:3b": only a backend's name before the colon makes a choice id."""
    return name if name.partition(":")[0] in BACKENDS else f"embedded:{name}"


def model_choices(args: argparse.Namespace) -> list[str]:
    """The choice ids (models.get_chat_model's names) the flags ask for, in order; ``--base-url`` is not part of
    them: it is handed to ``models.get_chat_model`` beside each (``args.base_url``).

    --backend openai --model qwen-7b -> ["openai:qwen-7b"]; --backend openai -> ["openai:"] (the server's first model);
    --model qwen2.5-coder-0.5b -> ["embedded:qwen2.5-coder-0.5b"]; neither -> --models, each through ``as_choice``.
    """
    if not (args.backend or args.model):
        return [as_choice(name) for name in args.models]
    backend = args.backend or "embedded"
    name = args.model or {"embedded": config.EMBEDDED_LLM, "ollama": config.LLM_MODEL or config.OLLAMA_DEFAULT_LLM}.get(backend, "")
    return [f"{backend}:{name}"]


def choice_of(llm) -> str:
    """The choice id of a loaded chat model, its name filled in ("openai:" -> "openai:qwen-7b", the server's model)."""
    import models

    if isinstance(llm, models.EmbeddedChatModel):
        return f"embedded:{llm.model_name}"
    if isinstance(llm, models.ServerChatModel):
        return f"openai:{llm.model_name}"
    return f"ollama:{getattr(llm, 'model', '?')}"


# -----------------------------------------------------------------------------
# Answering speed


def answer_store():
    """(client, retriever) over input_data's PDFs, ingested once into ``bench_store/answer``."""
    import embedders
    import ingest
    from retriever import Retriever

    store_dir = config.BASE_DIR / "bench_store" / "answer"  # its kept PDFs and locks go in it too (ingest.store_dir)
    client, embedder = ingest.get_client(str(store_dir)), embedders.get_embeddings()
    for pdf in sorted((Path(config.INPUT_DATA_DIR) / "pdfs").glob("*.pdf")):
        ingest.ingest_pdf(pdf, client, embedder)
    return client, Retriever(client, embedder)


def stream_answer(llm, retriever, question: str, first_token_only: bool = False, context: str | None = None) -> dict:
    """Ask ``question`` the way qa.ask does (retrieve, find the lines, fit what the model reads, stream) minus
    the citation check, as a question (labelling waits); seconds are counted from the question, as in the app.
    ``context``: what the model reads, "lines" or "passages" (default: what suits it, reading.what_model_reads)."""
    import context as passage_context
    import evidence
    import models
    import reading

    as_lines = reading.what_model_reads(llm, context) == "lines"
    with models.QUESTIONS.asking():
        t0 = time.perf_counter()
        pages = retriever.load_pages(retriever.search(question))
        lines = evidence.best_lines(question, pages, retriever, more=config.ANSWER_LINES - config.EVIDENCE_LINES if as_lines else 0)
        read = lines if as_lines else passage_context.choose_context(question, pages, reading.passage_chars(llm), marked=lines)
        sources = reading.fit_sources(question, read, [], lambda text: models.count_tokens(llm, text),
                                 models.context_length(llm), config.LLM_MAX_TOKENS, as_lines)
        messages = reading.build_messages(question, sources, [], as_lines, refuses_for_model=as_lines)  # as qa.the_model: English lines
        first, text, cached, pieces = None, "", None, llm.stream(messages)
        for chunk in pieces:
            if usage := chunk.usage_metadata:  # the last chunk: how much of the prompt came from the prompt cache
                cached = (usage.get("input_token_details") or {}).get("cache_read")
            if not chunk.content:  # a server opens (and closes) its stream with empty chunks: not a token
                continue
            first = first or time.perf_counter()
            text += chunk.content
            if first_token_only:
                pieces.close()  # the reply is not needed: free the model at once
                break
        end = time.perf_counter()
    return {"messages": messages, "first_token_s": first - t0, "text": text, "first": first, "end": end, "t0": t0,
            "cached_prompt_tokens": cached}


def time_answers(choice: str, questions: list[str], contexts: list[str] | None = None,
                 base_url: str | None = None) -> list[dict]:
    """Median time to first token, tokens/s and prompt size of one chat model (a choice id, see ``model_choices``;
    an "openai:" one on the server at ``base_url``, default OPENAI_BASE_URL), one row per ``contexts`` (what the model reads: "lines", "passages"), asked in turn question by question so
    that both meet the same machine; with two, the second row says its first-token ratio to the first.
    Tokens are counted by llama.cpp where the model runs on it, else estimated (``models.count_tokens``)."""
    import statistics

    import models
    import reading

    _, retriever = answer_store()
    t = time.perf_counter()
    llm = models.get_chat_model(choice, base_url)
    load_s = time.perf_counter() - t  # for a server: asking it for the model, its context length and /tokenize
    contexts = contexts or [reading.what_model_reads(llm)]
    count = lambda text: models.count_tokens(llm, text)  # noqa: E731
    samples = {c: {"prompt_tokens": [], "cached_prompt_tokens": [], "first_token_s": [], "tokens_per_s": [], "answer_tokens": [],
                   "total_s": []} for c in contexts}
    for i, question in enumerate(questions):
        for context in contexts[i % len(contexts):] + contexts[: i % len(contexts)]:  # the order alternates
            run, kept = stream_answer(llm, retriever, question, context=context), samples[context]
            answer_tokens = count(run["text"])
            kept["prompt_tokens"].append(sum(count(m.content) for m in run["messages"]))
            kept["cached_prompt_tokens"].append(run["cached_prompt_tokens"] or 0)  # 0: none reused, or a server that does not say
            kept["first_token_s"].append(run["first_token_s"])
            kept["tokens_per_s"].append((answer_tokens - 1) / max(run["end"] - run["first"], 1e-9))
            kept["answer_tokens"].append(answer_tokens)
            kept["total_s"].append(run["end"] - run["t0"])
    rows = []
    for context in contexts:
        row = {"model": choice_of(llm), "label": models.chat_model_label(llm), "context": context, "questions": len(questions),
               "load_s": round(load_s, 1)}
        row.update({f"median_{k}": round(statistics.median(v), 1) for k, v in samples[context].items()})
        if rows:
            row["first_token_ratio_to_" + rows[0]["context"]] = round(row["median_first_token_s"] / rows[0]["median_first_token_s"], 2)
        rows.append(row)
    models.forget_chat_models()  # the next model is not loaded beside this one
    return rows


LABELLING_PDF = BENCH_PDFS / "05-03-18-political-release.pdf"  # 17 text pages
LABELLER_STOP_TIMEOUT_S = 60  # a cancelled labeller stops at its next reply step: far less than this


def labelling_collection(store_dir: str):
    """A bench PDF in a store of its own with no page labelled yet: pages for the labeller to chew on."""
    import embedders
    import ingest

    client, embedder = ingest.get_client(store_dir), embedders.get_embeddings()
    result = ingest.ingest_pdf(LABELLING_PDF, client, embedder)
    return ingest.open_collection(client, result.collection, embedder)


def time_answers_while_labelling(model_name: str, questions: list[str], fresh: list[str], seed: int) -> dict:
    """First-token seconds for the same questions with page labelling idle and running.

    Each question is asked in both conditions, in alternating order; with labelling
    running it arrives a seeded random moment into the labeller's work, so it lands
    mid-page. The prompt cache is off for these pairs (the second asking of a
    question would otherwise find its whole prompt cached). Then the two ``fresh``
    questions, never asked before, cache on: the second reuses only the answer
    instructions' prefix; and that second question again with the cache off.
    """
    import random
    import statistics
    import threading

    import ingest
    import models

    _, retriever = answer_store()
    llm = models.EmbeddedChatModel.load(model_name)
    cold = llm.model_copy(update={"reuse_prompt_cache": False})
    rng = random.Random(seed)
    stream_answer(cold, retriever, questions[0], first_token_only=True)  # warm the process up
    with tempfile.TemporaryDirectory() as label_dir:
        collection = labelling_collection(label_dir)
        pairs = []
        for i, question in enumerate(questions):
            row = {"question": question}
            for condition in (("idle", "running") if i % 2 == 0 else ("running", "idle")):
                cancel, labeller = threading.Event(), None
                if condition == "running":
                    labeller = threading.Thread(target=ingest.enrich_document, args=(collection, llm), kwargs={"cancel": cancel})
                    labeller.start()
                    time.sleep(rng.uniform(2.0, 12.0))
                row[f"{condition}_first_token_s"] = round(stream_answer(cold, retriever, question, first_token_only=True)["first_token_s"], 2)
                if labeller:
                    t = time.perf_counter()
                    cancel.set()  # stops the page in hand at its next step, or the labeller's wait for a question
                    labeller.join(timeout=LABELLER_STOP_TIMEOUT_S)
                    if labeller.is_alive():
                        raise RuntimeError(f"The labeller did not stop within {LABELLER_STOP_TIMEOUT_S} s of being cancelled")
                    row["labeller_stop_s"] = round(time.perf_counter() - t, 2)
            row["ratio"] = round(row["running_first_token_s"] / row["idle_first_token_s"], 2)
            pairs.append(row)
            print(f"while labelling: {row}", file=sys.stderr)
        labelled_pages = collection.metadata.get("enriched_pages", 0)
    # two questions not asked before, cache on: the second finds only the shared prefix cached;
    # then the same second question with the cache off, for its cold figure
    first_new, second_new = fresh
    stream_answer(llm, retriever, first_new, first_token_only=True)
    warm = round(stream_answer(llm, retriever, second_new, first_token_only=True)["first_token_s"], 2)
    second_cold = round(stream_answer(cold, retriever, second_new, first_token_only=True)["first_token_s"], 2)
    idle = statistics.median(p["idle_first_token_s"] for p in pairs)
    running = statistics.median(p["running_first_token_s"] for p in pairs)
    return {
        "model": model_name,
        "questions": len(questions),
        "seed": seed,
        "pairs": pairs,
        "pages_labelled_meanwhile": labelled_pages,
        "median_idle_first_token_s": idle,
        "median_running_first_token_s": running,
        "ratio_of_medians": round(running / idle, 2),
        "median_pair_ratio": statistics.median(p["ratio"] for p in pairs),
        "max_labeller_stop_s": max(p["labeller_stop_s"] for p in pairs),
        "second_question_cold_first_token_s": second_cold,
        "second_question_warm_prefix_first_token_s": warm,
    }


# -----------------------------------------------------------------------------
# The app's memory: one process doing what the app does (upload, labelling, questions)

MEMORY_PDF = Path(config.INPUT_DATA_DIR) / "pdfs" / "R-intro.pdf"


def _memory_mib() -> dict:
    """This process's resident memory now and at its peak, MiB (Linux: VmRSS and VmHWM of /proc/self/status)."""
    status = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    status[key] = round(int(value.split()[0]) / 1024)
    except OSError:
        pass
    return {"rss_mib": status.get("VmRSS"), "peak_rss_mib": status.get("VmHWM")}


def memory_one(pdf: Path, questions: list[str], label_pages: int) -> dict:
    """In this process, the app's own pieces: the embedder and store, a BackgroundEnricher on
    ``models.get_chat_model`` (as app.enricher()), ``pdf`` uploaded (ingested, then submitted for
    labels), ``questions`` asked as app.py asks them (QUESTIONS.asking(), get_chat_model, qa) while
    the labeller runs, then labelling to the end. The settings (temp store, model) come from the
    environment ``time_memory`` gives. Memory after each step, its peak, and how often each model loaded.

    ``label_pages`` > 0 marks the pages after the first N as labelled beforehand, so labelling ends
    sooner: memory does not grow with pages labelled (one model, one context of LLM_N_CTX tokens).
    """
    import logging

    import embedders
    import ingest
    import models
    import qa
    from retriever import Retriever

    loads = {"chat model": 0, "embedder": 0}

    class CountLoads(logging.Handler):  # the lines models.py and embedders.py log once per load
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("Loaded embedded chat model"):
                loads["chat model"] += 1
            elif message.startswith("Embeddings: "):
                loads["embedder"] += 1

    for name in ("models", "embedders"):
        models_log = logging.getLogger(name)
        models_log.addHandler(CountLoads())
        models_log.setLevel(logging.INFO)
    steps: list[dict] = []

    def step(name: str, started: float, **facts) -> None:
        steps.append({"step": name, "s": round(time.perf_counter() - started, 1), **_memory_mib(), **facts})

    t = time.perf_counter()
    embedder = embedders.get_embeddings()
    client = ingest.get_client()
    enricher = ingest.BackgroundEnricher(client, embedder, models.get_chat_model)
    step("start", t)
    t = time.perf_counter()
    result = ingest.ingest_pdf(pdf, client, embedder)
    collection = ingest.open_collection(client, result.collection, embedder)
    if label_pages:
        rest = collection.get(where={"enriched": False}, include=["metadatas"])
        skip = [(i, m) for i, m in zip(rest["ids"], rest["metadatas"]) if m["page"] > label_pages]
        if skip:
            collection.update(ids=[i for i, _ in skip], metadatas=[{**m, "enriched": True} for _, m in skip])
    enricher.submit(result.collection)  # the labeller loads the chat model now, as the first question does
    retriever = Retriever(client, embedder)
    step("upload", t, pages=result.pages, chunks=result.chunks)
    for number, question in enumerate(questions, 1):
        t = time.perf_counter()
        with models.QUESTIONS.asking():
            llm = models.get_chat_model()
            answer = qa.answer_question(question, retriever, llm=llm)
        step(f"question {number}", t, refused=answer.refused)
    t = time.perf_counter()
    while enricher.progress()[result.collection].state in ("queued", "labelling"):
        time.sleep(0.5)
    state = enricher.progress()[result.collection]
    titled = {m["page"] for m in collection.get(include=["metadatas"])["metadatas"] if m.get("title")}
    step("labelling done", t, state=state.state, pages_labelled=len(titled))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "model": config.EMBEDDED_LLM,
        "pdf": pdf.name,
        "questions": len(questions),
        "chat_model_loads": loads["chat model"],
        "embedder_loads": loads["embedder"],
        "peak_rss_mib": _memory_mib()["peak_rss_mib"],
        "ru_maxrss_mib": round(usage.ru_maxrss / 1024),
        "steps": steps,
    }


def time_memory(model: str, pdf: Path, questions: list[str], label_pages: int) -> dict:
    """``memory_one`` in a child process of its own (its peak RSS is the app's alone), on an empty temp store."""
    with tempfile.TemporaryDirectory() as store_dir:
        settings = {"CHROMA_PERSIST_DIR": store_dir, "CHROMA_HOST": "", "LLM_BACKEND": "embedded",
                    "EMBED_BACKEND": "embedded", "EMBEDDED_LLM": model, "ENRICH_ENABLED": "true",
                    "LOG_FILE": str(Path(store_dir) / "app.log")}
        cmd = [sys.executable, "-m", "evaluation.bench", "_memory_one", str(pdf), "--label-pages", str(label_pages)]
        cmd += ["--ask", *questions] if questions else []
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=config.BASE_DIR, env={**os.environ, **settings})
    if proc.returncode != 0:
        raise SystemExit(f"The memory run failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -----------------------------------------------------------------------------
# Runtimes side by side: xllamacpp (the app's, a prebuilt wheel) and llama-cpp-python (compiled)

RUNTIMES = ("xllamacpp", "llama-cpp-python")
RUNTIME_MAX_TOKENS = 32


def runtime_prompts(n: int = 2, source_chars: int = config.CHUNK_SIZE) -> list[list]:
    """``n`` answer prompts as the app builds them: input_data question + its gold page and the
    four pages after it as the five numbered sources (about 1,100 tokens each at 800 characters)."""
    import pymupdf

    import reading
    from records import Hit

    questions = json.loads((Path(config.INPUT_DATA_DIR) / "eval_questions.json").read_text())[:n]
    prompts_ = []
    with pymupdf.open(Path(config.INPUT_DATA_DIR) / "pdfs" / "R-intro.pdf") as doc:
        for q in questions:
            pages = range(q["pages"][0], q["pages"][0] + 5)
            hits = [Hit(f"p{p}", "bench", "R-intro.pdf", p, 0, source_chars, doc[p - 1].get_text()[:source_chars]) for p in pages]
            prompts_.append(reading.build_messages(q["question"], hits, []))
    return prompts_


def _cpu_seconds() -> float:
    """CPU seconds used so far by this process, all threads (llama.cpp's included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _time_stream(pieces) -> dict:
    """Wall and CPU seconds to the first piece and after it, text and piece count of one streamed reply.

    CPU seconds are the steadier figure on a shared machine: they do not count the
    time other processes held the cores (with one thread there is no spin-waiting either).
    """
    t0, c0, first, cpu_first, text, count = time.perf_counter(), _cpu_seconds(), None, None, "", 0
    for piece in pieces:
        if first is None:
            first, cpu_first = time.perf_counter(), _cpu_seconds()
        text, count = text + piece, count + 1
    end, cpu_end = time.perf_counter(), _cpu_seconds()
    first, cpu_first = first or end, cpu_first or cpu_end
    return {"first_s": first - t0, "gen_s": end - first, "first_cpu_s": cpu_first - c0, "gen_cpu_s": cpu_end - cpu_first,
            "text": text, "pieces": count}


class _LlamaCppPython:
    """llama-cpp-python driven the way models.py drove it before the switch (for comparison only)."""

    def __init__(self, path: Path):
        from llama_cpp import Llama

        self.llama = Llama(model_path=str(path), n_ctx=config.LLM_N_CTX, n_threads=config.LLM_THREADS,
                           n_threads_batch=config.LLM_THREADS, n_batch=config.LLM_BATCH, n_ubatch=config.LLM_BATCH,
                           verbose=False)

    def count_tokens(self, text: str) -> int:
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False))

    def stream(self, messages, max_tokens: int):
        chat = [{"role": {"system": "system", "human": "user"}[m.type], "content": m.content} for m in messages]
        for part in self.llama.create_chat_completion(chat, stream=True, temperature=0.0, max_tokens=max_tokens):
            if part["choices"][0]["delta"].get("content"):
                yield part["choices"][0]["delta"]["content"]


class _XLlamaCpp:
    """The app's own EmbeddedChatModel (xllamacpp)."""

    def __init__(self, name: str):
        import models

        self.llm = models.EmbeddedChatModel.load(name).model_copy(update={"temperature": 0.0})

    def count_tokens(self, text: str) -> int:
        return self.llm.count_tokens(text)

    def stream(self, messages, max_tokens: int):
        import models

        for chunk in models.with_max_tokens(self.llm, max_tokens).stream(messages):
            if chunk.content:
                yield chunk.content


def runtime_one(runtime: str, model_name: str, source_chars: int) -> dict:
    """Load ``model_name`` in ``runtime`` in this process and time what the app needs of it."""
    from langchain_core.messages import HumanMessage

    import models

    path = models.embedded_gguf_path(model_name)
    t = time.perf_counter()
    llm = _XLlamaCpp(model_name) if runtime == "xllamacpp" else _LlamaCppPython(path)
    row = {"runtime": runtime, "model": model_name, "threads": config.LLM_THREADS, "batch": config.LLM_BATCH,
           "load_s": time.perf_counter() - t}
    (prompt,) = runtime_prompts(1, source_chars)
    prompt_tokens = sum(llm.count_tokens(m.content) + 4 for m in prompt)
    cold = _time_stream(llm.stream(prompt, RUNTIME_MAX_TOKENS))
    generated = llm.count_tokens(cold["text"])
    row.update(
        prompt_tokens=prompt_tokens,
        first_token_s=cold["first_s"],
        prompt_tok_s=prompt_tokens / max(cold["first_s"], 1e-9),
        generated_tokens=generated,
        gen_tok_s=(generated - 1) / max(cold["gen_s"], 1e-9),
        prompt_tok_per_cpu_s=prompt_tokens / max(cold["first_cpu_s"], 1e-9),
        gen_tok_per_cpu_s=(generated - 1) / max(cold["gen_cpu_s"], 1e-9),
        pieces_per_token=cold["pieces"] / max(generated, 1),
    )
    # cancellation: read five pieces of a long reply, drop it, then time a short request
    long_reply = llm.stream([HumanMessage("Count from 1 to 300, one number per line.")], 400)
    for _ in zip(range(5), long_reply):
        pass
    t = time.perf_counter()
    long_reply.close()
    row["cancel_s"] = time.perf_counter() - t
    row["first_token_after_cancel_s"] = _time_stream(llm.stream([HumanMessage("Say OK.")], 4))["first_s"]
    row["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


RUNTIME_METRICS = {  # metric -> True when bigger is better
    "load_s": False, "first_token_s": False, "prompt_tok_s": True, "gen_tok_s": True,
    "prompt_tok_per_cpu_s": True, "gen_tok_per_cpu_s": True, "cancel_s": False, "first_token_after_cancel_s": False,
    "peak_rss_mib": False, "pieces_per_token": True,
}


def compare_runtimes(model_names: list[str], rounds: int, source_chars: int) -> dict:
    """Interleaved fresh-process runs of both runtimes; medians per runtime and xllamacpp's ratio."""
    import statistics

    runs = []
    for r in range(rounds):
        for name in model_names:
            order = RUNTIMES if r % 2 == 0 else RUNTIMES[::-1]  # alternate who goes first
            for runtime in order:
                cmd = [sys.executable, "-m", "evaluation.bench", "_runtime_one", runtime, name, "--source-chars", str(source_chars)]
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=config.BASE_DIR)
                if proc.returncode != 0:
                    raise SystemExit(f"{runtime} {name} failed: {proc.stderr.strip()[-500:]}")
                runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1}: {runtime} {name}: first token {runs[-1]['first_token_s']} s", file=sys.stderr)
    summary = []
    for name in model_names:
        medians = {rt: {m: statistics.median(x[m] for x in runs if x["runtime"] == rt and x["model"] == name)
                        for m in RUNTIME_METRICS} for rt in RUNTIMES}
        for metric, bigger_better in RUNTIME_METRICS.items():
            xl, lcp = medians["xllamacpp"][metric], medians["llama-cpp-python"][metric]
            # xllamacpp relative to llama-cpp-python: > 1 means xllamacpp is better on this metric
            ratio = (xl / lcp if bigger_better else lcp / xl) if xl and lcp else None
            summary.append({"model": name, "metric": metric, "xllamacpp": round(xl, 3),
                            "llama-cpp-python": round(lcp, 3), "xllamacpp_better_x": ratio and round(ratio, 2)})
    return {"rounds": rounds, "source_chars": source_chars, "runs": runs, "summary": summary}
# -----------------------------------------------------------------------------
# The HTTP API under load


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_api_server(settings: dict[str, str], log_path: Path, headers: dict | None = None) -> tuple[subprocess.Popen, str]:
    """``uvicorn api:app`` on a free local port, with ``settings`` added to this environment;
    returns (process, base URL) once /api/health answers 200 (the server's output goes to ``log_path``)."""
    import httpx

    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "api:app", "--host", "127.0.0.1", "--port", str(port)],
            cwd=config.BASE_DIR, env={**os.environ, **settings}, stdout=out, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{url}/api/health", headers=headers, timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError(f"The API server did not start: {log_path.read_text()[-3000:]}")


def stop_api_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def load_test(url: str, path: str, bodies: list[list[dict]]) -> list[dict]:
    """Client c sends ``bodies[c]`` one after another, all clients starting together;
    one record per request: client, round, sent/done (seconds), status, JSON reply."""
    import threading

    import httpx

    records: list[dict] = []
    start = threading.Barrier(len(bodies))

    def client(number: int) -> None:
        with httpx.Client(base_url=url, timeout=1800) as http:
            start.wait()
            for round_, body in enumerate(bodies[number]):
                sent = time.perf_counter()
                try:
                    response = http.post(path, json=body)
                    status, reply = response.status_code, response.json()
                except (httpx.HTTPError, ValueError) as err:
                    status, reply = type(err).__name__, {}
                records.append({"client": number, "round": round_, "sent": sent, "done": time.perf_counter(), "status": status, "reply": reply})

    threads = [threading.Thread(target=client, args=(n,)) for n in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def summarise_load(name: str, records: list[dict]) -> dict:
    import numpy as np

    latencies = [(r["done"] - r["sent"]) * 1000 for r in records]
    wall = max(r["done"] for r in records) - min(r["sent"] for r in records)
    return {
        "endpoint": name,
        "clients": len({r["client"] for r in records}),
        "requests": len(records),
        "errors": sum(r["status"] != 200 for r in records),
        "p50_ms": round(float(np.percentile(latencies, 50))),
        "p95_ms": round(float(np.percentile(latencies, 95))),
        "max_ms": round(max(latencies)),
        "requests_per_s": round(len(records) / wall, 2),
    }


def answered_in_rounds(records: list[dict]) -> bool:
    """Fair queueing, seen from outside: every client's n-th answer arrives before any client's
    (n+1)-th (each client asks again only after its answer, so a fair queue serves round by round)."""
    rounds = sorted({r["round"] for r in records})
    return all(
        max(r["done"] for r in records if r["round"] == a) <= min(r["done"] for r in records if r["round"] == b)
        for a, b in zip(rounds, rounds[1:])
    )


def time_api(args) -> list[dict]:
    """/api/search from ``args.clients`` clients, then /api/ask from ``args.ask_clients``, on a real server."""
    import httpx

    store_dir = config.BASE_DIR / "bench_store" / str(args.chunks)
    client = build_scaled_store(args.chunks, args.source_store, store_dir)
    chunks = sum(c.count() for c in client.list_collections())
    questions = [json.loads(line)["question"] for line in BENCH_QUESTIONS.read_text().splitlines()]
    settings = {"CHROMA_PERSIST_DIR": str(store_dir), "CHROMA_HOST": "", "ENRICH_ENABLED": "false", "API_TOKEN": "",
                "LLM_BACKEND": "embedded", "EMBED_BACKEND": "embedded", "EMBEDDED_LLM": args.model,
                "LOG_FILE": str(config.BASE_DIR / "bench_store" / "api.log")}
    proc, url = start_api_server(settings, config.BASE_DIR / "bench_store" / "api-server.out")
    try:
        while not httpx.get(f"{url}/api/health", timeout=30).json()["chat_model"]["ok"]:  # the model loads at start
            time.sleep(1)
        n = args.requests
        search = load_test(url, "/api/search", [
            [{"query": questions[(c * n + i) % len(questions)]} for i in range(n)] for c in range(args.clients)
        ])
        ask = load_test(url, "/api/ask", [
            [{"question": questions[(c * args.ask_rounds + i) % len(questions)]} for i in range(args.ask_rounds)]
            for c in range(args.ask_clients)
        ])
    finally:
        stop_api_server(proc)
    rows = [summarise_load("/api/search", search), summarise_load("/api/ask", ask)]
    for row in rows:
        row["chunks"] = chunks
    waits = [(r["done"] - r["sent"]) - r["reply"].get("seconds", 0) for r in ask if r["status"] == 200]
    rows[1].update(model=args.model, max_queue_wait_s=round(max(waits, default=0.0), 1), served_round_by_round=answered_in_rounds(ask))
    return rows


def time_after_abandoned(model: str, timeout: float, rounds: int, abandon: int) -> list[dict]:
    """Seconds to the evidence and the first word of a question asked right after ``abandon`` impatient
    askers gave up (the official openai client, ``timeout`` s, its default two retries, each with its own
    question so the prompt cache does not hide the work), ``rounds`` times, on a real server with ``model``."""
    import threading

    import httpx
    import openai

    folder = Path(tempfile.mkdtemp(prefix="bench-abandoned-"))
    settings = {"CHROMA_PERSIST_DIR": str(folder / "store"), "CHROMA_HOST": "", "ENRICH_ENABLED": "false", "API_TOKEN": "",
                "LLM_BACKEND": "embedded", "EMBED_BACKEND": "embedded", "EMBEDDED_LLM": model, "LOG_FILE": str(folder / "api.log")}
    proc, url = start_api_server(settings, folder / "server.out")
    questions = iter(q["question"] for q in json.loads((Path(config.INPUT_DATA_DIR) / "eval_questions.json").read_text()))
    rows = []

    def give_up(question: str, gave_up: list) -> None:
        impatient = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=timeout)  # default max_retries=2
        try:
            impatient.chat.completions.create(model=config.API_MODEL_ID, messages=[{"role": "user", "content": question}])
        except openai.APITimeoutError:
            gave_up.append(question)

    try:
        with httpx.Client(base_url=url, timeout=600) as http:
            pdf = MEMORY_PDF
            [job] = http.post("/api/documents", files={"files": (pdf.name, pdf.read_bytes(), "application/pdf")}).json()["jobs"]
            while http.get(f"/api/jobs/{job['id']}").json()["state"] not in ("done", "failed"):
                time.sleep(0.5)
            http.post("/api/ask", json={"question": next(questions)})  # the model loaded and warm
            for n in range(rounds):
                gave_up: list[str] = []
                askers = [threading.Thread(target=give_up, args=(next(questions), gave_up)) for _ in range(abandon)]
                for asker in askers:
                    asker.start()
                for asker in askers:
                    asker.join()
                sent, row = time.monotonic(), {"round": n + 1, "abandoned": len(gave_up)}
                with http.stream("POST", "/api/ask", json={"question": next(questions), "stream": True}) as reply:
                    for line in reply.iter_lines():
                        kind = line[6:].strip() if line.startswith("event:") else None
                        if kind in ("queued", "evidence"):
                            row.setdefault(f"{kind}_s", round(time.monotonic() - sent, 2))
                        elif kind == "token" and "first_word_s" not in row:
                            row["first_word_s"] = round(time.monotonic() - sent, 2)
                        elif kind in ("answer", "error"):
                            row["done_s"] = round(time.monotonic() - sent, 2)
                rows.append(row)
                time.sleep(30 if abandon else 0)  # a server that answers abandoned questions would still be at it: let it finish
    finally:
        stop_api_server(proc)
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def _title_words(title: str) -> set[str]:
    """A section title's words without its leading numbering: "2.1 Reservoir survey" -> {"reservoir", "survey"};
    numbers inside stay ("Item 7" is not "Item 8")."""
    return set(re.findall(r"\w+", re.sub(r"^\s*(\d+(\.\d+)*\.?|[IVX]+\.)\s+", "", title.lower())))


def same_section(ours: str, theirs: str) -> bool:
    """Whether two section titles name the same section: one's words hold the other's, or they share
    at least half of all their words (the bench writes "Item 7. Management's Discussion...", an outline "Item 7")."""
    a, b = _title_words(ours), _title_words(theirs)
    if not a or not b:
        return False
    return a <= b or b <= a or len(a & b) >= len(a | b) / 2


def judge_summary(answer_titles: list[str], sections: list[dict]) -> dict:
    """Which of a document's content sections (the bench's, as a reader lists them) a whole-document
    answer covers, and which of the answer's section titles name no section of the document at all."""
    content = [s for s in sections if s.get("kind", "content") == "content"]
    covered = [s["title"] for s in content if any(same_section(t, s["title"]) for t in answer_titles)]
    invented = [t for t in answer_titles if not any(same_section(t, s["title"]) for s in sections)]
    return {"sections": len(content), "covered": len(covered), "coverage": round(len(covered) / max(len(content), 1), 3),
            "answer_sections": len(answer_titles), "invented": invented, "missed": [s["title"] for s in content if s["title"] not in covered]}


def time_summaries(store: Path, bench: Path, model: str, question: str, only: list[str] | None) -> list[dict]:
    """Ask ``question`` of each bench document in ``store`` (scoped to it) with the embedded ``model``:
    seconds, the outline's source, and the answer judged against the document's own sections."""
    import embedders
    import ingest
    import models
    import qa
    from retriever import Retriever

    client = ingest.get_client(str(store))  # the outlines read its kept PDFs (ingest.store_dir)
    stored = {d["doc_name"]: d for d in ingest.list_documents(client)}
    retriever = Retriever(client, embedders.get_embeddings())
    llm = models.EmbeddedChatModel.load(model)
    rows = []
    for line in bench.read_text().splitlines():
        entry = json.loads(line)
        doc = stored.get(entry["doc"])
        if doc is None or (only and entry["doc"] not in only):
            continue
        t0 = time.perf_counter()
        answer = qa.answer_question(question, retriever, llm=llm, scope=[doc["collection"]])
        seconds = time.perf_counter() - t0
        verdict = judge_summary([h.title for h in answer.sources], entry["sections"])
        rows.append({"doc": entry["doc"], "pages": doc["pages"], "labelled": doc.get("enriched_pages", 0),
                     "outline": answer.sources[0].trace.get("source", "?") if answer.sources else "-",
                     "seconds": round(seconds, 1), "first_text_s": round(answer.first_token_seconds or 0, 1),
                     "cites_page_ranges": bool(re.search(r"\(pp?\. \d+(–\d+)?\)", answer.text)), **verdict,
                     "answer": answer.text})
        log.warning("%s: %.1fs, %d/%d sections, %d invented", entry["doc"], seconds, verdict["covered"], verdict["sections"], len(verdict["invented"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("ingest", "_ingest_one"):
        p = sub.add_parser(name)
        p.add_argument("pdfs", nargs="*", type=Path)
        p.add_argument("--big", type=int, default=0, help="also build and ingest a PDF of this many text pages")
        p.add_argument("--enrich-pages", type=int, default=0, help="also time LLM labels on the first N pages")
        p.add_argument("--embedders", nargs="+", help="ingest each PDF with each: default, local:PATH, ollama:NAME")
        p.add_argument("--rounds", type=int, default=1, help="with --embedders: how many times each, taking turns")
        p.add_argument("--ask", type=Path, help="also time these questions about the PDF, in to evidence lines")
        p.add_argument("--json", type=Path, help="write the rows here")
    p = sub.add_parser("answer")
    add_model_flags(p, ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    p.add_argument("--questions", type=int, default=10, help="how many of input_data's questions to ask")
    p.add_argument("--contexts", nargs="+", choices=["lines", "passages"],
                   help="what the model reads, each asked in turn per question (default: what suits the model, ANSWER_CONTEXT)")
    p.add_argument("--while-labelling", action="store_true", help="first token with page labelling idle vs running")
    p.add_argument("--seed", type=int, default=17, help="when, into the labelling, each question arrives")
    p.add_argument("--json", type=Path)
    for name in ("memory", "_memory_one"):
        p = sub.add_parser(name)
        p.add_argument("pdf", nargs="?", type=Path, default=MEMORY_PDF, help="the PDF to upload (default: input_data's)")
        p.add_argument("--model", default=config.EMBEDDED_LLM, help="embedded chat model (default: the app's, EMBEDDED_LLM)")
        p.add_argument("--questions", type=int, default=3, help="how many of input_data's questions to ask while labelling")
        p.add_argument("--ask", nargs="+", help="the questions themselves (instead of input_data's)")
        p.add_argument("--label-pages", type=int, default=6, help="label only the first N pages (0: all of them)")
        p.add_argument("--json", type=Path)
    p = sub.add_parser("runtime")
    p.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    p.add_argument("--rounds", type=int, default=3, help="interleaved fresh-process runs per runtime and model")
    p.add_argument("--source-chars", type=int, default=config.CHUNK_SIZE, help="characters per source in the prompt")
    p.add_argument("--json", type=Path)
    p = sub.add_parser("_runtime_one")
    p.add_argument("runtime", choices=RUNTIMES)
    p.add_argument("model")
    p.add_argument("--source-chars", type=int, default=config.CHUNK_SIZE)
    p = sub.add_parser("api")
    p.add_argument("--clients", type=int, default=20, help="concurrent /api/search clients")
    p.add_argument("--requests", type=int, default=10, help="searches per client, one after another")
    p.add_argument("--ask-clients", type=int, default=4, help="concurrent /api/ask clients")
    p.add_argument("--ask-rounds", type=int, default=2, help="questions per ask client, one after another")
    p.add_argument("--chunks", type=int, default=10000, help="library size (a scaled store, as for retrieval)")
    p.add_argument("--model", default=config.EMBEDDED_LLM, help="embedded chat model the server answers with")
    p.add_argument("--source-store", type=Path, default=config.BASE_DIR / "chroma_store_eval")
    p.add_argument("--json", type=Path)
    p = sub.add_parser("abandoned")
    p.add_argument("--model", default=config.EMBEDDED_LLM, help="embedded chat model the server answers with")
    p.add_argument("--timeout", type=float, default=1.5, help="the openai client's timeout, in seconds")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--abandon", type=int, default=3, help="impatient askers before each timed question (0: the baseline)")
    p.add_argument("--json", type=Path)
    p = sub.add_parser("summary")
    p.add_argument("--store", type=Path, required=True, help="a store holding the bench's documents (labelled, for the time figure)")
    p.add_argument("--bench", type=Path, default=config.BASE_DIR / "evaluation" / "whole_document_bench.jsonl")
    p.add_argument("--model", default=config.EMBEDDED_LLM, help="embedded chat model (default: the app's)")
    p.add_argument("--question", default="Summarise this document.")
    p.add_argument("--docs", nargs="+", help="only these bench documents")
    p.add_argument("--json", type=Path)
    p = sub.add_parser("evidence")
    p.add_argument("--store", type=Path, required=True, help="a built store; run in a fresh process, no line is embedded yet")
    p.add_argument("--questions", type=Path, required=True, help="a questions file (question, doc)")
    p.add_argument("--docs", default="", help="only questions about documents whose name holds this (10K: annual reports)")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", type=Path)
    p = sub.add_parser("retrieval")
    p.add_argument("--chunks", type=int, nargs="+", default=[1000, 10000, 100000])
    p.add_argument("--questions", type=int, default=100, help="how many bench questions to time")
    p.add_argument("--source-store", type=Path, default=config.BASE_DIR / "chroma_store_eval")
    p.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.command == "_runtime_one":
        config.setup_logging(40)
        print(json.dumps(runtime_one(args.runtime, args.model, args.source_chars)))
        return 0
    if args.command == "_memory_one":
        config.setup_logging(40)
        print(json.dumps(memory_one(args.pdf, args.ask or [], args.label_pages)))
        return 0
    if args.command != "_ingest_one":
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    if args.command == "answer":
        config.setup_logging(40)
        path = Path(config.INPUT_DATA_DIR) / "eval_questions.json"
        every_question = [q["question"] for q in json.loads(path.read_text())]
        questions = every_question[: args.questions]
        choices = model_choices(args)
        if args.while_labelling:
            if any(not c.startswith("embedded:") for c in choices):
                parser.error("--while-labelling measures the embedded model giving way to questions: use embedded models")
            fresh = every_question[args.questions : args.questions + 2]
            rows = [time_answers_while_labelling(c.partition(":")[2], questions, fresh, args.seed) for c in choices]
            print_table([[k for k in rows[0] if k != "pairs"]] + [[v for k, v in r.items() if k != "pairs"] for r in rows])
            if args.json:
                args.json.write_text(json.dumps({"answer_while_labelling": rows}, indent=2))
            return 0
        rows = [row for choice in choices for row in time_answers(choice, questions, args.contexts, args.base_url)]
        print_table([list(rows[0])] + [list(r.values()) for r in rows])
        if args.json:
            args.json.write_text(json.dumps({"answer": rows}, indent=2))
        return 0
    if args.command == "memory":
        questions = args.ask or [q["question"] for q in json.loads((Path(config.INPUT_DATA_DIR) / "eval_questions.json").read_text())]
        row = time_memory(args.model, args.pdf, questions[: args.questions], args.label_pages)
        print_table([["step", "seconds", "RSS MiB", "peak RSS MiB", "facts"]] + [
            [s["step"], s["s"], s["rss_mib"], s["peak_rss_mib"],
             ", ".join(f"{k}={v}" for k, v in s.items() if k not in ("step", "s", "rss_mib", "peak_rss_mib"))]
            for s in row["steps"]
        ])
        print(f"{row['model']}, {row['pdf']}, {row['questions']} questions: peak RSS {row['peak_rss_mib']} MiB "
              f"(ru_maxrss {row['ru_maxrss_mib']} MiB); chat model loaded {row['chat_model_loads']}x, "
              f"embedder {row['embedder_loads']}x")
        if args.json:
            args.json.write_text(json.dumps({"memory": row}, indent=2))
        return 0 if row["chat_model_loads"] == row["embedder_loads"] == 1 else 1
    if args.command == "runtime":
        config.setup_logging(40)
        result = compare_runtimes(args.models, args.rounds, args.source_chars)
        print_table([["model", "metric", "xllamacpp", "llama-cpp-python", "xllamacpp better ×"]]
                    + [list(row.values()) for row in result["summary"]])
        if args.json:
            args.json.write_text(json.dumps({"runtime": result}, indent=2))
        return 0
    if args.command == "api":
        config.setup_logging(40)
        rows = time_api(args)
        print_table([list(rows[1])] + [[r.get(k, "") for k in rows[1]] for r in rows])
        if args.json:
            args.json.write_text(json.dumps({"api": rows}, indent=2))
        return 0 if all(r["errors"] == 0 for r in rows) else 1
    if args.command == "abandoned":
        config.setup_logging(40)
        rows = time_after_abandoned(args.model, args.timeout, args.rounds, args.abandon)
        keys = ["round", "abandoned", "queued_s", "evidence_s", "first_word_s", "done_s"]
        print_table([keys] + [[r.get(k, "") for k in keys] for r in rows])
        if args.json:
            args.json.write_text(json.dumps({"abandoned": rows}, indent=2))
        return 0
    if args.command == "summary":
        config.setup_logging(30)
        rows = time_summaries(args.store, args.bench, args.model, args.question, args.docs)
        keys = ["doc", "pages", "labelled", "outline", "seconds", "first_text_s", "sections", "covered", "coverage", "answer_sections", "cites_page_ranges"]
        print_table([keys + ["invented"]] + [[r[k] for k in keys] + [len(r["invented"])] for r in rows])
        if args.json:
            args.json.write_text(json.dumps({"summary": rows}, indent=2, ensure_ascii=False))
        return 0
    if args.command == "evidence":
        config.setup_logging(40)
        row = time_evidence_on_store(args.store, args.questions, args.docs, args.limit)
        print_table([list(row), list(row.values())])
        if args.json:
            args.json.write_text(json.dumps({"evidence": row}, indent=2))
        return 0
    if args.command == "retrieval":
        config.setup_logging(40)
        questions = [json.loads(line)["question"] for line in BENCH_QUESTIONS.read_text().splitlines()][: args.questions]
        rows = []
        for n in args.chunks:
            client = build_scaled_store(n, args.source_store, config.BASE_DIR / "bench_store" / str(n))
            rows.append({**time_retrieval(client, questions), **time_evidence(client, questions)})
        legs = ("embed", "semantic", "bm25", "total")
        header = ["chunks", "pages", "collections", "index build s", *(f"{leg} p50/p95 ms" for leg in legs),
                  "search p50/p90 ms", "time to evidence p50/p90 ms"]
        print_table([header] + [
            [r["chunks"], r["pages"], r["collections"], r["index_build_s"],
             *(f"{r[f'{leg}_p50_ms']} / {r[f'{leg}_p95_ms']}" for leg in legs),
             *(f"{r[f'{name}_p50_ms']} / {r[f'{name}_p90_ms']}" for name in ("search", "evidence"))]
            for r in rows
        ])
        if args.json:
            args.json.write_text(json.dumps({"retrieval": rows}, indent=2))
        return 0
    if args.command == "_ingest_one":
        config.setup_logging(40)
        questions = questions_about(args.ask, args.pdfs[0]) if args.ask else None
        print(json.dumps(ingest_one(args.pdfs[0], args.enrich_pages, questions)))
        return 0
    pdfs = args.pdfs + ([build_big_pdf(args.big, config.BASE_DIR / "bench_store" / f"big-{args.big}.pdf")] if args.big else [])
    if not pdfs:
        parser.error("name PDFs to ingest, or --big N")
    if args.embedders:
        rows = [run_isolated(pdf, args.enrich_pages, embedder, args.ask)
                for _ in range(args.rounds) for pdf in pdfs for embedder in args.embedders]
        print_table(compare_embedders(rows, args.embedders))
    else:
        rows = [run_isolated(pdf, args.enrich_pages, ask=args.ask) for pdf in pdfs]
        print_ingest_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"ingest": rows}, indent=2))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
