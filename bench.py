"""Benchmarks that print numbers (speed and memory targets live here, not in tests).

    python bench.py ingest PDF... [--enrich-pages N] [--json OUT]

``ingest`` runs each PDF in a fresh child process with an empty temporary
store, so every row has its own cold start and its own peak RSS. A row gives
time-to-searchable (the ingest call: open, extract/OCR, chunk, embed, store,
mark complete), pages per second for each stage, and, with --enrich-pages,
seconds per page for LLM titles/keywords on the first N pages.
Timings are single runs on a shared machine: repeat and compare medians.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import config

STAGES = ("extract", "ocr", "chunk", "embed", "store")


def ingest_one(pdf: Path, enrich_pages: int) -> dict:
    """Ingest ``pdf`` into an empty temp store in this process and measure it."""
    import ingest
    import models

    t0 = time.perf_counter()
    embedder = models.get_embeddings()
    load_seconds = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as store_dir:
        config.CHROMA_PERSIST_DIR = store_dir
        client = ingest.get_client(store_dir)
        result = ingest.ingest_pdf(pdf, client, embedder)
        row = {
            "pdf": pdf.name,
            "pages": result.pages,
            "chunks": result.chunks,
            "ocr_pages": result.ocr_pages,
            "model_load_s": round(load_seconds, 2),
            "searchable_s": round(result.seconds, 2),
            "stage_s": {k: round(v, 2) for k, v in result.stage_seconds.items()},
            "chunks_per_s_embed": round(result.chunks / max(result.stage_seconds["embed"], 1e-9), 1),
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
    row["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return row


def run_isolated(pdf: Path, enrich_pages: int) -> dict:
    """Run ``ingest_one`` in a child process so its peak RSS is its own."""
    cmd = [sys.executable, __file__, "_ingest_one", str(pdf), "--enrich-pages", str(enrich_pages)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"pdf": pdf.name, "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def print_ingest_table(rows: list[dict]) -> None:
    header = ["pdf", "pages", "chunks", "ocr", "searchable s", *(f"{s} p/s" for s in STAGES), "embed ch/s", "peak MiB", "enrich s/p"]
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
             r["chunks_per_s_embed"], r["peak_rss_mib"], r.get("enrich_s_per_page", "-")]
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(str(v).ljust(w) for v, w in zip(line, widths)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("ingest", "_ingest_one"):
        p = sub.add_parser(name)
        p.add_argument("pdfs", nargs="+", type=Path)
        p.add_argument("--enrich-pages", type=int, default=0, help="also time LLM labels on the first N pages")
        p.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    if args.command == "_ingest_one":
        config.setup_logging(40)
        print(json.dumps(ingest_one(args.pdfs[0], args.enrich_pages)))
        return 0
    rows = [run_isolated(pdf, args.enrich_pages) for pdf in args.pdfs]
    print(f"machine: {platform.machine()}, {__import__('os').cpu_count()} cores, Python {platform.python_version()}")
    print_ingest_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"ingest": rows}, indent=2))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
