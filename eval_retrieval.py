"""Score retrieval against questions whose answer pages are known.

    python eval_retrieval.py [--questions FILE] [--pdf-dir DIR] [--scope doc|library|both]
                             [--k 5] [--json OUT] [--report OUT.md] [--store DIR] [--limit N]
                             [--chunk-size CHARS --chunk-overlap CHARS] [--extractor NAME]

Data flow: questions (JSON list or JSONL: question, doc, pages 1-based, optional
category) -> ingest each needed PDF once into an evaluation store (cached by
content hash) -> for every ablation (semantic only, BM25 only, hybrid) and
scope (the question's own document, or the whole library) run the retriever ->
page-level metrics -> a table on screen, a Markdown report and a JSON file.

A retrieved page counts when it is in the question's document and among its
gold pages. Questions with ``pages: []`` are not answerable from the document:
they are left out of hit/recall/precision/MRR and reported separately (the top
semantic similarity they get is what a refusal threshold must beat).

Metrics at k: hit@k (a gold page is in the top k), recall@k (share of gold pages
found), precision@k (share of the k pages that are gold), MRR (1 / rank of the
first gold page, 0 if none in the top k).

Chunking policies (``extract.chunk_page``'s size and overlap) are compared by
running once per policy with --chunk-size/--chunk-overlap: each policy gets its
own store beside the default one, since a PDF's collection name is its hash.
Page-text extractors (setting EXTRACTOR) are compared the same way with --extractor.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from tqdm import tqdm

import config
import ingest
import models
from retriever import Retriever, tokenize

log = logging.getLogger(__name__)

# name -> Retriever.search options; "hybrid" is the configuration the app uses
ABLATIONS = {
    "semantic": {"mode": "semantic", "page_refs": False},
    "bm25": {"mode": "bm25", "page_refs": False},
    "hybrid-plain": {"mode": "hybrid", "page_refs": False, "keyword_seat": False},
    "hybrid-no-page-refs": {"mode": "hybrid", "page_refs": False, "keyword_seat": True},
    "hybrid-no-keyword-seat": {"mode": "hybrid", "page_refs": True, "keyword_seat": False},
    "hybrid": {"mode": "hybrid", "page_refs": True, "keyword_seat": True},
}
DEFAULT_QUESTIONS = Path(config.INPUT_DATA_DIR) / "eval_questions.json"
EXTRACTORS = ["text", "layout"]  # values of the EXTRACTOR setting
DEFAULT_STORE = config.BASE_DIR / "chroma_store_eval"


def load_questions(path: Path) -> list[dict]:
    """Questions from a JSON list (or {"questions": [...]}) or a JSONL file, normalised.

    Each gets ``category``: its own, else its first evidence source (MMLongBench), else "uncategorised".
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
        rows = data["questions"] if isinstance(data, dict) else data
    except json.JSONDecodeError:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    for row in rows:
        sources = row.get("evidence_sources") or []
        row["category"] = row.get("category") or (sources[0] if sources else "uncategorised")
        row["pages"] = [int(p) for p in row.get("pages", [])]
    return rows


def use_extractor(name: str | None, store: Path) -> Path:
    """Switch to extractor ``name`` (when given) and return its own evaluation store beside ``store``."""
    if not name:
        return store
    config.EXTRACTOR = name
    return store.with_name(f"{store.name}-extract-{name}")


def default_pdf_dir(questions_path: Path) -> Path:
    """``pdfs/`` beside the questions file."""
    return Path(questions_path).resolve().parent / "pdfs"


def ingest_needed(questions: list[dict], pdf_dir: Path, client, embedder) -> dict[str, str]:
    """Ingest every PDF the questions name (cached by hash); {doc file name: collection}."""
    collections = {}
    for doc in tqdm(sorted({q["doc"] for q in questions}), desc="ingest", unit="pdf"):
        result = ingest.ingest_pdf(pdf_dir / doc, client, embedder, doc_name=doc)
        collections[doc] = result.collection
    return collections


# -----------------------------------------------------------------------------
# Metrics


def page_metrics(retrieved: list[tuple[str, int]], gold: set[tuple[str, int]], k: int) -> dict:
    """Page-level metrics for one question.

    page_metrics([("a", 3), ("a", 7)], {("a", 7), ("a", 8)}, k=5)
      -> {"hit": 1, "recall": 0.5, "precision": 0.2, "rr": 0.5}
    """
    top = retrieved[:k]
    ranks = [i for i, page in enumerate(top, 1) if page in gold]
    return {
        "hit": 1 if ranks else 0,
        "recall": len(set(top) & gold) / len(gold),
        "precision": len(ranks) / k,
        "rr": 1 / ranks[0] if ranks else 0.0,
    }


def summarise(rows: list[dict], k: int) -> dict:
    n = len(rows)
    mean = lambda key: round(sum(r[key] for r in rows) / n, 3) if n else 0.0  # noqa: E731
    return {f"hit@{k}": mean("hit"), f"recall@{k}": mean("recall"), f"precision@{k}": mean("precision"), "mrr": mean("rr"), "n": n}


def first_gold_rank(ranking: list[tuple[str, int]], gold: set[tuple[str, int]]) -> int | None:
    """1-based rank of the first gold page in a page ranking (pages deduplicated), else None."""
    seen: list[tuple[str, int]] = []
    for page in ranking:
        if page not in seen:
            seen.append(page)
            if page in gold:
                return len(seen)
    return None


# -----------------------------------------------------------------------------
# One evaluation run


def diagnose(retriever: Retriever, q: dict, scope: list[str] | None, gold: set, hits, page_texts) -> dict:
    """Why a question was or was not answered: each leg's rank of the gold page, overlap, near misses."""
    sem_rank = first_gold_rank([key for key, _, _ in retriever.semantic(q["question"], scope)], gold)
    bm25_rank = first_gold_rank([key for key, _ in retriever.keyword(q["question"], scope)], gold)
    query_terms = set(tokenize(q["question"]))
    gold_terms = set(tokenize(" ".join(page_texts.get(p, "") for _, p in gold)))
    gold_pages = {p for _, p in gold}
    near = sorted({h.page for h in hits if h.page not in gold_pages and any(abs(h.page - p) == 1 for p in gold_pages)})
    found = [h for h in hits if (h.collection, h.page) in gold]
    carried = "-"
    if found:
        t = found[0].trace
        carried = "+".join(leg for leg in ("semantic", "bm25", "page_ref") if f"{leg}_rank" in t)
    return {
        "semantic_rank": sem_rank,
        "bm25_rank": bm25_rank,
        "token_overlap": round(len(query_terms & gold_terms) / max(len(query_terms), 1), 2),
        "near_misses": near,
        "carried_by": carried,
        "rrf_table": [
            {"doc": h.doc_name, "page": h.page, "rrf": round(h.score, 4), **{k: v for k, v in h.trace.items() if k != "rrf"}}
            for h in hits
        ],
    }


def evaluate(retriever: Retriever, questions: list[dict], collections: dict[str, str], scopes: list[str], k: int) -> dict:
    """Run every ablation in every scope; returns metrics, breakdowns and per-question rows."""
    answerable = [q for q in questions if q["pages"]]
    unanswerable = [q for q in questions if not q["pages"]]
    texts_by_doc = {doc: ingest.page_texts(ingest.open_collection(retriever.client, col, retriever.embedder)) for doc, col in collections.items()}
    results: dict = {"k": k, "ablations": {}, "per_question": [], "unanswerable": {}}
    for scope_name in scopes:
        for ablation, options in ABLATIONS.items():
            rows = []
            for q in tqdm(answerable, desc=f"{scope_name}/{ablation}", unit="q", leave=False):
                col = collections[q["doc"]]
                scope = [col] if scope_name == "doc" else None
                gold = {(col, p) for p in q["pages"]}
                hits = retriever.search(q["question"], k=k, scope=scope, **options)
                row = {"category": q["category"], **page_metrics([(h.collection, h.page) for h in hits], gold, k)}
                rows.append(row)
                if ablation == "hybrid":
                    results["per_question"].append(
                        {"scope": scope_name, "question": q["question"], "doc": q["doc"], "gold_pages": q["pages"],
                         "retrieved": [h.page for h in hits], **row,
                         **diagnose(retriever, q, scope, gold, hits, texts_by_doc[q["doc"]])}
                    )
            by_category = defaultdict(list)
            for row in rows:
                by_category[row["category"]].append(row)
            results["ablations"][f"{scope_name}/{ablation}"] = {
                **summarise(rows, k),
                "by_category": {c: summarise(r, k) for c, r in sorted(by_category.items())},
            }
        results["unanswerable"][scope_name] = top_similarity_gap(retriever, answerable, unanswerable, collections, scope_name)
    return results


def top_similarity_gap(retriever, answerable, unanswerable, collections, scope_name) -> dict:
    """Median best cosine similarity for answerable vs unanswerable questions (refusal threshold input)."""
    def best(q):
        scope = [collections[q["doc"]]] if scope_name == "doc" else None
        top = retriever.semantic(q["question"], scope, n=1)  # [(page, similarity, chunk id)]
        return top[0][1] if top else 0.0

    return {
        "n": len(unanswerable),
        "median_top_similarity_answerable": round(statistics.median(best(q) for q in answerable), 3) if answerable else None,
        "median_top_similarity_unanswerable": round(statistics.median(best(q) for q in unanswerable), 3) if unanswerable else None,
    }


# -----------------------------------------------------------------------------
# Reporting


def metrics_table(results: dict) -> str:
    k = results["k"]
    keys = [f"hit@{k}", f"recall@{k}", f"precision@{k}", "mrr", "n"]
    lines = ["| run | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, m in results["ablations"].items():
        lines.append(f"| {name} | " + " | ".join(str(m[key]) for key in keys) + " |")
    return "\n".join(lines)


def category_table(results: dict) -> str:
    """hit@k of hybrid retrieval per question category (rows) and scope (columns)."""
    k = results["k"]
    runs = {name.split("/")[0]: m["by_category"] for name, m in results["ablations"].items() if name.endswith("/hybrid")}
    categories = sorted({c for by in runs.values() for c in by})
    lines = ["| category | " + " | ".join(f"{scope} hit@{k}" for scope in runs) + " | n |", "|---" * (len(runs) + 2) + "|"]
    for c in categories:
        n = next(by[c]["n"] for by in runs.values() if c in by)
        lines.append(f"| {c} | " + " | ".join(str(by.get(c, {}).get(f"hit@{k}", "-")) for by in runs.values()) + f" | {n} |")
    return "\n".join(lines)


def markdown_report(results: dict, questions_path: Path) -> str:
    k = results["k"]
    parts = [f"# Retrieval evaluation: {questions_path.name}", "", metrics_table(results), ""]
    for name, m in results["ablations"].items():
        if name.endswith("/hybrid"):
            parts += [f"## {name} by category", "", f"| category | hit@{k} | recall@{k} | mrr | n |", "|---|---|---|---|---|"]
            parts += [f"| {c} | {v[f'hit@{k}']} | {v[f'recall@{k}']} | {v['mrr']} | {v['n']} |" for c, v in m["by_category"].items()]
            parts.append("")
    parts += ["## Unanswerable questions", "", "```", json.dumps(results["unanswerable"], indent=2), "```", ""]
    misses = [r for r in results["per_question"] if not r["hit"]]
    parts += [f"## Misses (hybrid): {len(misses)}", "", "| scope | doc | question | gold | got | sem rank | bm25 rank | overlap | near |", "|---|---|---|---|---|---|---|---|---|"]
    for r in misses:
        question = r["question"].replace("|", "/")[:90]
        parts.append(
            f"| {r['scope']} | {r['doc'][:25]} | {question} | {r['gold_pages']} | {r['retrieved']} | "
            f"{r['semantic_rank']} | {r['bm25_rank']} | {r['token_overlap']} | {r['near_misses']} |"
        )
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Page-level retrieval evaluation.")
    parser.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS)
    parser.add_argument("--pdf-dir", type=Path, help="default: pdfs/ beside the questions file")
    parser.add_argument("--scope", choices=["doc", "library", "both"], default="both")
    parser.add_argument("--k", type=int, default=config.TOP_K)
    parser.add_argument("--json", type=Path, help="write all results here")
    parser.add_argument("--report", type=Path, help="Markdown report (default: beside --json, else eval_report.md)")
    parser.add_argument("--store", type=Path, default=DEFAULT_STORE, help="evaluation store (kept between runs)")
    parser.add_argument("--limit", type=int, help="only the first N questions")
    parser.add_argument("--chunk-size", type=int, help="compare a chunking policy (own store per policy)")
    parser.add_argument("--chunk-overlap", type=int)
    parser.add_argument("--extractor", choices=EXTRACTORS, help="compare a page-text extractor (own store per extractor)")
    args = parser.parse_args(argv)
    config.setup_logging(logging.WARNING)
    if args.chunk_size or args.chunk_overlap is not None:
        config.CHUNK_SIZE = args.chunk_size or config.CHUNK_SIZE
        config.CHUNK_OVERLAP = config.CHUNK_OVERLAP if args.chunk_overlap is None else args.chunk_overlap
        args.store = args.store.with_name(f"{args.store.name}-chunks{config.CHUNK_SIZE}-{config.CHUNK_OVERLAP}")
    args.store = use_extractor(args.extractor, args.store)
    config.CHROMA_PERSIST_DIR = str(args.store)  # locks and store live beside the evaluation store

    questions = load_questions(args.questions)[: args.limit]
    client, embedder = ingest.get_client(str(args.store)), models.get_embeddings()
    collections = ingest_needed(questions, args.pdf_dir or default_pdf_dir(args.questions), client, embedder)
    retriever = Retriever(client, embedder)
    retriever.refresh()
    scopes = ["doc", "library"] if args.scope == "both" else [args.scope]
    results = evaluate(retriever, questions, collections, scopes, args.k)

    print(metrics_table(results))
    print(category_table(results))
    print(json.dumps(results["unanswerable"]))
    report = args.report or (args.json.with_suffix(".md") if args.json else Path("eval_report.md"))
    report.write_text(markdown_report(results, args.questions), encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
