"""A read-mostly window on the store: what each PDF became after ingest.py.

Run it beside the chat app with ``streamlit run db_viewer.py``. One run of the
script goes:

    ingest.list_documents(include_incomplete=True) -> collections table
        (an unfinished collection is flagged: readers skip it, the next ingest rebuilds it;
         so is one made with another embedder than the app's: searches leave it out until re-embedded)
    -> pick one document -> collection.get(documents, metadatas, embeddings)
        -> chunk_rows() -> filter_chunks()         -> Chunks tab (filterable table)
        -> page_view() + ingest.page_texts()       -> Pages tab (one page rebuilt from its chunks)
        -> embedding_stats() + heatmap_frame()     -> Embeddings tab (numbers and a heatmap)
        -> raw_sample(collection.get(limit=...))   -> Raw data expander (JSON)
    -> delete, behind an "I understand" checkbox   -> ingest.delete_document() -> rerun

The pure helpers at the top build tables and numbers from what Chroma returns
and know nothing of Streamlit, so they are tested directly; the layout
functions below only draw them.

Deliberately simple: the whole selected collection is read again on every
interaction (no st.cache_data), so the page is always what is on disk, at the
price of a slower page for documents with tens of thousands of chunks.
"""

from __future__ import annotations

import logging

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

try:  # first, alone: every module below reads its settings from it
    import config
except SystemExit as err:  # config.SettingError: a setting in the environment cannot be used
    st.error(str(err))
    st.stop()

import embedders
import ingest
import models
from safe_text import md

log = logging.getLogger(__name__)

INGEST_COMMAND = "python ingest.py input_data/pdfs"
UNFINISHED = "⚠️ unfinished: garbage, the next ingest of this file rebuilds it"
OTHER_EMBEDDER = "⚠️ "  # before the embedder's name when it is not the one in use
CHUNK_COLUMNS = [
    "id", "page", "chunk_index", "start", "end", "text_source",
    "title", "keywords", "enriched", "length", "text",
]
PAGE_SOURCE_NAMES = {"T": "text layer", "O": "OCR", "E": "empty", "D": "damaged, left out"}
RAW_EMBEDDING_VALUES = 8  # values of each vector shown in the raw view; 384 would drown the JSON

# -----------------------------------------------------------------------------
# Pure helpers: Chroma's answers -> rows and numbers


def status_label(doc: dict) -> str:
    """status_label({"status": "complete"}) -> "✅ complete"; anything else is unfinished."""
    return "✅ complete" if doc.get("status") == "complete" else UNFINISHED


def embedder_label(doc: dict, current: str | None) -> str:
    """The embedder that made a document's vectors, marked when it is not ``current`` (None: unknown, no mark).

    embedder_label({"embedder": "ollama:nomic-embed-text"}, "all-MiniLM-L6-v2") -> "⚠️ ollama:nomic-embed-text (not the one in use)"
    """
    name = str(doc.get("embedder") or "(not recorded)")
    if current is None or not ingest.made_with_other_embedder(doc, current):
        return name
    return f"{OTHER_EMBEDDER}{name} (not the one in use)"


def collection_rows(docs: list[dict], current_embedder: str | None = None) -> list[dict]:
    """One table row per entry of ``ingest.list_documents()``; an embedder other than ``current_embedder`` is marked.

    collection_rows([{"doc_name": "a.pdf", "sha256": "9f86d081884c...", "pages": 3, "enriched_pages": 1, ...}])
    -> [{"document": "a.pdf", "hash": "9f86d081884c", "pages": 3, "enriched": "1/3", ...}]
    """
    return [
        {
            "document": d.get("doc_name", "?"),
            "collection": d["collection"],
            "hash": d.get("sha256", "")[:12],
            "pages": d.get("pages"),
            # an unfinished collection has no counts yet: its metadata is written last
            "chunks": d.get("chunks"),
            "OCR pages": d.get("ocr_pages"),
            # pages whose text past MAX_PAGE_CHARS was left out: a person reading a page must know it is not whole
            "cut pages": ingest.page_ranges([cut["page"] for cut in ingest.cut_pages_in(d)]),
            "language": d.get("language") or "?",
            "embedder": embedder_label(d, current_embedder),
            "status": status_label(d),
            "enriched": f"{d.get('enriched_pages', 0)}/{d.get('pages', '?')}",
            "created_at": d.get("created_at", ""),
        }
        for d in docs
    ]


def chunk_rows(got: dict) -> list[dict]:
    """Rows of the chunk table from ``collection.get(include=["documents", "metadatas"])``,
    in reading order (page, then chunk index).

    chunk_rows({"ids": ["ab-p1-c0"], "documents": ["Hi."], "metadatas": [{"page": 1, "chunk_index": 0, ...}]})
    -> [{"id": "ab-p1-c0", "page": 1, "chunk_index": 0, ..., "length": 3, "text": "Hi."}]
    """
    rows = []
    for chunk_id, text, meta in zip(got["ids"], got["documents"], got["metadatas"]):
        meta = meta or {}
        rows.append(
            {
                "id": chunk_id,
                "page": meta.get("page"),
                "chunk_index": meta.get("chunk_index"),
                "start": meta.get("start"),
                "end": meta.get("end"),
                "text_source": meta.get("text_source", ""),
                "title": meta.get("title", ""),
                "keywords": meta.get("keywords", ""),
                "enriched": bool(meta.get("enriched", False)),
                "length": len(text or ""),
                "text": text or "",
            }
        )
    return sorted(rows, key=lambda r: (r["page"] or 0, r["chunk_index"] or 0))


def filter_chunks(
    rows: list[dict], pages: list[int] | None = None, sources: list[str] | None = None, query: str = ""
) -> list[dict]:
    """The rows on ``pages`` (None or empty: all), from ``sources``, whose text, title
    or keywords contain ``query`` (case-insensitive).

    filter_chunks(rows, pages=[2], query="cod") -> the page-2 chunks that mention "cod"
    """
    needle = query.strip().lower()
    return [
        r
        for r in rows
        if (not pages or r["page"] in pages)
        and (not sources or r["text_source"] in sources)
        and (not needle or needle in f"{r['text']}\n{r['title']}\n{r['keywords']}".lower())
    ]


def page_view(rows: list[dict], page: int, page_sources: str = "", cuts: list[dict] | None = None) -> dict:
    """What one page holds: its title, keywords, where its text came from, its chunks, and whether its
    text was cut at MAX_PAGE_CHARS (``cuts``: the document's ``cut_pages``; "" when it was not).

    page_view(rows, 2, "TOT") -> {"title": "...", "keywords": "...", "source": "OCR", "chunks": [...], "cut": ""}
    """
    chunks = [r for r in rows if r["page"] == page]
    letter = page_sources[page - 1] if 0 < page <= len(page_sources) else ""
    source = PAGE_SOURCE_NAMES.get(letter) or (chunks[0]["text_source"] if chunks else "no chunks")
    first = chunks[0] if chunks else {}
    cut = next((ingest.page_cut_note(c) for c in cuts or [] if c["page"] == page), "")
    return {"title": first.get("title", ""), "keywords": first.get("keywords", ""), "source": source, "chunks": chunks, "cut": cut}


def embedding_stats(vectors: np.ndarray) -> dict:
    """Count, dimension, vector norms and a summary of each dimension's mean and variance.

    embedding_stats(np.array([[3.0, 4.0], [0.0, 1.0]]))
    -> {"count": 2, "dimension": 2, "norm_min": 1.0, "norm_median": 3.0, "norm_max": 5.0,
        "mean_min": 1.5, "mean_median": 2.0, "mean_max": 2.5, "variance_min": 2.25, ...}
    """
    vectors = np.asarray(vectors if vectors is not None else [], dtype=float)
    if vectors.size == 0:
        return {"count": 0, "dimension": 0}
    norms = np.linalg.norm(vectors, axis=1)
    means, variances = vectors.mean(axis=0), vectors.var(axis=0)
    stats = {"count": vectors.shape[0], "dimension": vectors.shape[1]}
    for name, values in (("norm", norms), ("mean", means), ("variance", variances)):
        stats |= {f"{name}_min": float(values.min()), f"{name}_median": float(np.median(values)), f"{name}_max": float(values.max())}
    return stats


def chunk_label(row: dict) -> str:
    """A heatmap row's label, short enough to be shown whole: chunk_label({"page": 3, "chunk_index": 1}) -> "p. 3 · chunk 1" """
    return f"p. {row['page']} · chunk {row['chunk_index']}"


def stat_rows(stats: dict) -> list[dict]:
    """The statistics table, each value to 4 significant digits (tiny variances in powers of ten).

    stat_rows(embedding_stats(...)) -> [{"statistic": "vector norm", "min": "1", "median": "1", "max": "1"}, ...]
    """
    labels = (("norm", "vector norm"), ("mean", "per-dimension mean"), ("variance", "per-dimension variance"))
    return [
        {"statistic": label, **{part: f"{stats[f'{key}_{part}']:.4g}" for part in ("min", "median", "max")}}
        for key, label in labels
    ]


def heatmap_frame(vectors: np.ndarray, labels: list[str], chunks: int, dims: int) -> pd.DataFrame:
    """Long-format (chunk, dimension, value) rows of the first ``chunks`` x ``dims`` block,
    the shape a heatmap wants.

    heatmap_frame(np.array([[1.0, 2.0]]), ["a"], 1, 2) -> rows ("a", 0, 1.0), ("a", 1, 2.0)
    """
    block = np.asarray(vectors, dtype=float)[:chunks, :dims]
    return pd.DataFrame(
        {
            "chunk": np.repeat(labels[: block.shape[0]], block.shape[1]),
            "dimension": np.tile(np.arange(block.shape[1]), block.shape[0]),
            "value": block.ravel(),
        }
    )


def raw_sample(got: dict, keep: int = RAW_EMBEDDING_VALUES) -> dict:
    """``collection.get()``'s answer as plain JSON, each embedding cut to its first ``keep`` values.

    raw_sample({"ids": ["a"], "embeddings": np.ones((1, 384))}, keep=2)
    -> {"ids": ["a"], "embeddings": [{"first_values": [1.0, 1.0], "dimension": 384}]}
    """
    out = {key: got.get(key) for key in ("ids", "documents", "metadatas") if got.get(key) is not None}
    embeddings = got.get("embeddings")
    if embeddings is not None:  # a numpy array: its truth value is ambiguous
        out["embeddings"] = [
            {"first_values": [round(float(v), 4) for v in vector[:keep]], "dimension": len(vector)}
            for vector in embeddings
        ]
    return out


# -----------------------------------------------------------------------------
# Layout


@st.cache_resource
def store():
    return ingest.get_client()


@st.cache_resource
def _embedder():
    return embedders.get_embeddings()


def current_embedder() -> str | None:
    """The name of the embedder the app uses (the same ``embedders.get_embeddings()``); None when it
    cannot be had (EMBED_BACKEND=ollama with Ollama down): then nothing is marked."""
    try:
        return embedders.embedder_name(_embedder())
    except models.ModelUnavailableError as err:  # not cached: tried again on the next run
        log.warning("No embedder to compare documents with: %s", err)
        return None


def other_embedder_documents(docs: list[dict], current: str | None) -> list[dict]:
    """The complete documents made with another embedder than ``current`` (none when it is unknown)."""
    if current is None:
        return []
    return [d for d in docs if d.get("status") == "complete" and ingest.made_with_other_embedder(d, current)]


def show_collections(docs: list[dict], current: str | None) -> None:
    st.subheader("Collections")
    st.dataframe(
        pd.DataFrame(collection_rows(docs, current)),
        hide_index=True,
        column_config={
            "hash": st.column_config.TextColumn(help="First hex digits of the PDF's SHA-256"),
            "embedder": st.column_config.TextColumn(help="What made the vectors; ⚠️ when it is not the embedder in use"),
            "status": st.column_config.TextColumn(help="Only complete collections are searched"),
            "enriched": st.column_config.TextColumn(help="Pages with an LLM title and keywords / pages"),
        },
    )
    unfinished = [d.get("doc_name", d["collection"]) for d in docs if d.get("status") != "complete"]
    if unfinished:
        st.warning(
            f"Unfinished ingest: {md(', '.join(unfinished))}. The app ignores these collections; "
            f"ingesting the same file again deletes and rebuilds them."
        )
    if others := other_embedder_documents(docs, current):
        st.warning(md(ingest.other_embedder_message(others, current)), icon="⚠️")


def choose_document(docs: list[dict], current: str | None = None) -> dict:
    by_collection = {d["collection"]: d for d in docs}
    others = {d["collection"] for d in other_embedder_documents(docs, current)}
    name = st.selectbox(
        "Document",
        list(by_collection),
        format_func=lambda c: f"{by_collection[c].get('doc_name', '?')} ({c})"
        + ("" if by_collection[c].get("status") == "complete" else " – unfinished")
        + (" – another embedder" if c in others else ""),
    )
    return by_collection[name]


def show_chunks(rows: list[dict]) -> None:
    pages = sorted({r["page"] for r in rows if r["page"] is not None})
    sources = sorted({r["text_source"] for r in rows})
    left, middle, right = st.columns([2, 1, 2])
    chosen_pages = left.multiselect("Pages", pages, key="filter_pages", placeholder="All pages")
    chosen_sources = middle.multiselect("Text source", sources, key="filter_sources", placeholder="Any")
    query = right.text_input("Search text, title, keywords", key="filter_query")
    shown = filter_chunks(rows, chosen_pages, chosen_sources, query)
    st.caption(f"{len(shown)} of {len(rows)} chunks")
    st.dataframe(
        pd.DataFrame(shown, columns=CHUNK_COLUMNS),
        hide_index=True,
        column_config={
            "start": st.column_config.NumberColumn(help="Character offset in the page text"),
            "end": st.column_config.NumberColumn(help="Character offset in the page text (exclusive)"),
            "enriched": st.column_config.CheckboxColumn(help="Has an LLM page title and keywords"),
            "length": st.column_config.NumberColumn(help="Characters in the chunk"),
            "text": st.column_config.TextColumn(width="large"),
        },
    )


def show_page(collection, rows: list[dict], meta: dict) -> None:
    total = int(meta.get("pages") or max((r["page"] for r in rows), default=1))
    page = int(st.number_input("Page", min_value=1, max_value=max(total, 1), value=1, key="page_number"))
    view = page_view(rows, page, meta.get("page_sources", ""), ingest.cut_pages_in(meta))
    st.markdown(f"**{md(view['title'] or '(no title yet)')}** · source: {md(view['source'])}")
    if view["cut"]:
        st.caption(md(view["cut"]))
    st.caption(f"Keywords: {md(view['keywords'] or '(none yet)')}")
    st.code(ingest.page_texts(collection).get(page, "(no text on this page)"), language=None, wrap_lines=True)
    st.dataframe(pd.DataFrame(view["chunks"], columns=CHUNK_COLUMNS), hide_index=True)


def show_embeddings(vectors: np.ndarray, labels: list[str], collection_name: str) -> None:
    stats = embedding_stats(vectors)
    if not stats["dimension"]:
        st.info("This collection holds no embeddings.")
        return
    cols = st.columns(3)
    cols[0].metric("Dimension", stats["dimension"])
    cols[1].metric("Vectors", stats["count"])
    cols[2].metric("Median norm", f"{stats['norm_median']:.4f}")
    st.dataframe(pd.DataFrame(stat_rows(stats)), hide_index=True)
    left, right = st.columns(2)
    # number inputs, not sliders: a slider cannot have min == max (a one-chunk document);
    # keyed per document, so another document starts from its own default, not the last one's value
    chunks = left.number_input(
        "Heatmap: first chunks", 1, stats["count"], min(20, stats["count"]), key=f"heatmap_chunks-{collection_name}"
    )
    dims = right.number_input(
        "Heatmap: first dimensions", 1, stats["dimension"], min(64, stats["dimension"]), key=f"heatmap_dims-{collection_name}"
    )
    frame = heatmap_frame(vectors, labels, int(chunks), int(dims))
    chart = (
        alt.Chart(frame)
        .mark_rect()
        .encode(
            x=alt.X("dimension:O", axis=alt.Axis(labels=False, ticks=False)),
            y=alt.Y("chunk:N", sort=None, axis=alt.Axis(labelLimit=0)),
            color=alt.Color("value:Q", scale=alt.Scale(scheme="redblue", domainMid=0)),
            tooltip=["chunk", "dimension", "value"],
        )
    )
    st.altair_chart(chart, width="stretch")


def show_raw(collection) -> None:
    with st.expander("Raw data: collection.get()"):
        limit = st.number_input("Records", min_value=1, max_value=500, value=5, key="raw_limit")
        got = collection.get(limit=int(limit), include=["documents", "metadatas", "embeddings"])
        st.json(raw_sample(got), expanded=2)


def show_delete(collection_name: str, doc_name: str) -> None:
    with st.expander("Delete this collection"):
        sure = st.checkbox(f"I understand that {md(doc_name)} is removed from the library", key="confirm_delete")
        # the button only acts with the box ticked, so one stray click cannot delete
        if st.button("Delete collection", type="primary", disabled=not sure, key="delete") and sure:
            try:
                ingest.delete_document(store(), collection_name)
            except ingest.IngestError as err:  # removed but not purged: say so on the next page
                st.session_state["delete_problem"] = str(err)
            st.session_state.pop("confirm_delete", None)
            st.rerun()


def show_document(meta: dict, current: str | None = None) -> None:
    """Everything about one collection: chunks, pages, embeddings, raw records, delete."""
    collection = store().get_collection(meta["collection"], embedding_function=None)
    st.header(md(meta.get("doc_name", meta["collection"])))
    if meta.get("status") != "complete":
        st.warning(f"{UNFINISHED}. What it holds so far is shown below.")
    elif other_embedder_documents([meta], current):
        st.warning(md(ingest.other_embedder_message([meta], current)), icon="⚠️")
    got = collection.get(include=["documents", "metadatas", "embeddings"])
    rows = chunk_rows(got)
    if not rows:
        st.info("This collection holds no chunks.")
    else:
        chunks_tab, page_tab, embeddings_tab = st.tabs(["Chunks", "Pages", "Embeddings"])
        with chunks_tab:
            show_chunks(rows)
        with page_tab:
            show_page(collection, rows, meta)
        with embeddings_tab:
            # vectors in the table's reading order, so "the first chunks" of the heatmap are page 1's
            position = {chunk_id: n for n, chunk_id in enumerate(got["ids"])}
            vectors = np.asarray(got["embeddings"])[[position[r["id"]] for r in rows]]
            show_embeddings(vectors, [chunk_label(r) for r in rows], meta["collection"])
        show_raw(collection)
    show_delete(meta["collection"], meta.get("doc_name", meta["collection"]))


def main() -> None:
    st.title("Store viewer")
    current = current_embedder()
    st.caption(
        f"ChromaDB at `{config.CHROMA_PERSIST_DIR}`, collections named `{config.COLLECTION_PREFIX}…` · "
        f"embedder in use: {md(current) if current else 'unknown (it cannot be loaded now)'}"
    )
    if problem := st.session_state.pop("delete_problem", None):
        st.warning(md(problem))
    docs = ingest.list_documents(store(), include_incomplete=True)
    if not docs:
        st.info(f"The store is empty. Add PDFs with `{INGEST_COMMAND}` (or upload them in the chat app).")
        return
    show_collections(docs, current)
    show_document(choose_document(docs, current), current)


# Streamlit runs this file as __main__; the tests import it for its helpers without drawing a page.
if __name__ == "__main__":
    config.setup_logging()
    st.set_page_config(page_title="Store viewer", page_icon="🗄️", layout="wide")
    main()
