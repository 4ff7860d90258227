"""What a reranker costs on the evidence lines: time to evidence and memory, with and without it.

    python -m evaluation.rerank_cost --store /work/evalstore --questions ../shared/bench/financebench/questions.jsonl \
        --reranker local:DIR [--json OUT]

``--reranker`` names a RERANKER setting; ``--minilm-sized DIR`` first makes DIR a cross-encoder export of
ms-marco-MiniLM-L6-v2's shape (the built-in MiniLM's layers, a random head: its scores mean nothing, its cost
is that model's; tests/test_rerankers.minilm_sized_cross_encoder) and uses it. Each question of the store's
documents is searched over the whole store once; its evidence lines are then ranked three times on the same
pages, alternating so that a busy machine weighs on each alike: without the reranker on first-seen pages (the
lines embedded then), with it, and without it again (the lines' vectors cached). Printed: p50/p90 of each, of
the reranker's own call, the lines it read per question, its load time and the process's peak RSS before and
after loading it. ``--against-embedding N``: instead, for the first N questions, the reranker's time on all of a
question's candidate lines and on 30 of them beside the built-in embedder's time to embed the same lines,
twice each, alternating: a ratio that a busy machine leaves as it is.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np



def peak_mib() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--reranker", default="")
    parser.add_argument("--minilm-sized", type=Path, help="make this folder a MiniLM-sized cross-encoder export and use it")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--against-embedding", type=int, default=0, metavar="N")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import embedders
    import evidence
    import ingest
    import rerankers
    from retriever import Retriever

    client = ingest.get_client(args.store)
    names = {d["doc_name"] for d in ingest.list_documents(client)}
    questions = [q for q in map(json.loads, args.questions.read_text().splitlines()) if f"{q['doc']}.pdf" in names or q["doc"] in names]
    questions = questions[: args.limit] if args.limit else questions
    retriever = Retriever(client, embedders.get_embeddings())
    retriever.refresh()
    setting = args.reranker
    if args.minilm_sized:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from test_rerankers import minilm_sized_cross_encoder

        if not (args.minilm_sized / "model.onnx").is_file():
            minilm_sized_cross_encoder(embedders.MiniLMEmbeddings(), args.minilm_sized)
        setting = f"local:{args.minilm_sized}"
    before = peak_mib()
    t = time.perf_counter()
    reranker = rerankers.get_reranker(setting)
    load_s = time.perf_counter() - t
    calls: list[tuple[int, float]] = []
    read: list[list[str]] = []  # the lines of each call
    scores = reranker.scores

    def timed(question, texts):
        t = time.perf_counter()
        out = scores(question, texts)
        calls.append((len(texts), (time.perf_counter() - t) * 1000))
        read.append(texts)
        return out

    reranker.scores = timed
    if args.against_embedding:
        return against_embedding(questions[: args.against_embedding], retriever, scores, setting, read)
    runs: dict[str, list[float]] = {"first_seen_without": [], "with": [], "without": []}
    for q in questions:
        t0 = time.perf_counter()
        pages = retriever.load_pages(retriever.search(q["question"]))
        evidence.best_lines(q["question"], pages, retriever, reranker="none")
        runs["first_seen_without"].append((time.perf_counter() - t0) * 1000)
        for name, value in (("with", setting), ("without", "none")):
            t0 = time.perf_counter()
            evidence.best_lines(q["question"], pages, retriever, reranker=value)
            runs[name].append((time.perf_counter() - t0) * 1000)
    row = {"reranker": setting, "name": reranker.name, "questions": len(questions), "load_s": round(load_s, 2),
           "peak_mib_before_load": before, "peak_mib_after": peak_mib(),
           "lines_p50": float(np.percentile([n for n, _ in calls], 50)), "lines_max": max(n for n, _ in calls)}
    for name, values in [*runs.items(), ("rerank_call", [ms for _, ms in calls])]:
        row[f"{name}_p50_ms"] = round(float(np.percentile(values, 50)), 1)
        row[f"{name}_p90_ms"] = round(float(np.percentile(values, 90)), 1)
    print(json.dumps(row, indent=1))
    if args.json:
        args.json.write_text(json.dumps(row, indent=1) + "\n")
    return 0


def against_embedding(questions: list[dict], retriever, scores, setting: str, read: list[list[str]]) -> int:
    import evidence

    rows = []
    for q in questions:
        pages = retriever.load_pages(retriever.search(q["question"]))
        evidence.best_lines(q["question"], pages, retriever, reranker=setting)  # the reranker's call keeps its lines in ``read``
        lines = read[-1]
        for _ in range(2):
            t = time.perf_counter()
            retriever.embedder.embed_documents(lines)
            embed = time.perf_counter() - t
            t = time.perf_counter()
            scores(q["question"], lines)
            rerank = time.perf_counter() - t
            t = time.perf_counter()
            scores(q["question"], lines[:30])
            rows.append((len(lines), embed, rerank, time.perf_counter() - t))
    median = lambda i: float(np.median([r[i] for r in rows]))  # noqa: E731
    print(json.dumps({"questions": len(questions), "lines_p50": median(0), "embed_lines_p50_s": round(median(1), 3),
                      "rerank_lines_p50_s": round(median(2), 3), "rerank_30_lines_p50_s": round(median(3), 3),
                      "rerank_over_embed_p50": round(float(np.median([r[2] / r[1] for r in rows])), 2),
                      "rerank_ms_per_line_p50": round(float(np.median([1000 * r[2] / r[0] for r in rows])), 1)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
