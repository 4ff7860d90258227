"""Are page labels written in the page's language? The labelling prompt with and without its language line.

    python -m evaluation.label_language --store STORE [--pages 8] [--seed 2611] [--out OUT.json]

For each non-English document of the multilingual bench in STORE (ingested from ../shared/bench/misc),
a seeded sample of its pages with text is labelled twice by the default model: with the prompt the
app sends (``ingest.label_messages`` with the document's language) and with the plain English prompt
(language None). A label counts as "in its language" when py3langid reads its title and keywords,
together, as the document's language. Records: docs/experiments/2026-11-26-other-designs-for-the-open-targets.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from pathlib import Path

import py3langid


import config
import ingest
import models
import prompts

log = logging.getLogger("label_language")
BENCH = Path(__file__).resolve().parent.parent.parent / "shared" / "bench" / "misc"
DOCUMENTS = {"fr": "fr_debian-reference.pdf", "de": "de_debian-reference.pdf",
             "es": "es_lshort-a4.pdf", "ja": "ja_debian-reference.pdf"}


def label(llm, number: int, texts: dict[int, str], language: str | None) -> tuple[str, list[str]]:
    """One page's label as the prompt for ``language`` gets it ("", [] when the reply is unusable)."""
    reply = llm.invoke(ingest.label_messages(number, texts, language)).content
    return ingest.parse_enrichment(reply) or ("", [])


def label_language(title: str, keywords: list[str]) -> str:
    """The language py3langid reads a label in."""
    return py3langid.classify(" ".join([title, *keywords]))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--seed", type=int, default=2611)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    client = ingest.get_client(args.store)
    llm = models.for_background_json(models.get_chat_model(), config.ENRICH_MAX_TOKENS, prompts.ENRICH_SCHEMA)
    rows = []
    for code, doc in DOCUMENTS.items():
        collection = client.get_collection(ingest.collection_name_for(ingest.file_sha256(BENCH / doc)))
        texts = ingest.page_texts(collection)
        pages = random.Random(args.seed).sample(sorted(p for p in texts if len(texts[p]) > 300), args.pages)
        for page in pages:
            for variant, language in (("plain", None), ("asked", code)):
                started = time.monotonic()
                title, keywords = label(llm, page, texts, language)
                rows.append({"lang": code, "page": page, "variant": variant, "title": title, "keywords": keywords,
                             "detected": label_language(title, keywords), "sec": round(time.monotonic() - started, 1)})
                log.info("%s", json.dumps(rows[-1], ensure_ascii=False))
    if args.out:
        args.out.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    for code in DOCUMENTS:
        for variant in ("plain", "asked"):
            mine = [r for r in rows if r["lang"] == code and r["variant"] == variant]
            log.info("%s %s: %d of %d labels in the page's language, %d unusable", code, variant,
                     sum(r["detected"] == code for r in mine), len(mine), sum(not r["title"] for r in mine))


if __name__ == "__main__":
    main()
