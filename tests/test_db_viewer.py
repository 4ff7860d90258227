"""The store viewer, run headless with streamlit.testing.v1.AppTest on a real store,
plus its pure helpers on known inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

import db_viewer
import ingest
from conftest import OTHER_EMBEDDER, pretend_made_by, shown, write_text_pdf

VIEWER = str(Path(__file__).resolve().parents[1] / "db_viewer.py")


@pytest.fixture(autouse=True)
def fresh_client():
    """The viewer caches its Chroma client; each test's store is a new temp dir."""
    st.cache_resource.clear()
    yield
    st.cache_resource.clear()


def run_viewer() -> AppTest:
    app = AppTest.from_file(VIEWER, default_timeout=120).run()
    assert not app.exception
    return app


def chunk_table(app: AppTest):
    """The Chunks tab's table: the one with a text column after the collections table."""
    return app.dataframe[1].value


# -----------------------------------------------------------------------------
# The app on a real store


def test_an_ingested_pdf_is_listed_with_its_pages_chunks_and_384_dim_embeddings(store, embedder, three_page_pdf):
    result = ingest.ingest_pdf(three_page_pdf, store, embedder)
    app = run_viewer()
    table = app.dataframe[0].value
    assert list(table["document"]) == ["facts.pdf"]
    assert table["pages"][0] == 3 and table["chunks"][0] == result.chunks
    assert table["status"][0] == "✅ complete" and table["enriched"][0] == "0/3"
    assert len(chunk_table(app)) == result.chunks
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Dimension"] == "384" and metrics["Vectors"] == str(result.chunks)
    assert len(app.get("vega_lite_chart")) == 1  # the heatmap
    assert app.json[0].value.count("-p1-c0") == 1  # raw records, first chunk included


def test_filtering_to_a_page_shows_only_that_pages_chunks_and_the_page_view_its_text(store, embedder, tmp_path):
    long_page = " ".join(f"Sentence {i} tells of the harbour and its cod." for i in range(60))
    pdf = write_text_pdf(tmp_path / "two.pdf", ["The railway reached the town in 1889.", long_page])
    result = ingest.ingest_pdf(pdf, store, embedder)
    assert result.chunks > 2  # page 2 needs several chunks for the filter to mean something
    app = run_viewer()
    app.multiselect(key="filter_pages").select(2).run()
    shown = chunk_table(app)
    assert 1 < len(shown) < result.chunks and set(shown["page"]) == {2}
    app.text_input(key="filter_query").input("railway").run()
    assert len(chunk_table(app)) == 0  # page 2 never mentions the railway
    app.number_input(key="page_number").set_value(1).run()
    assert not app.exception
    assert "railway reached the town in 1889" in app.code[0].value


def test_delete_needs_confirmation_then_empties_the_store(store, embedder, three_page_pdf):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    app = run_viewer()
    assert app.button(key="delete").disabled  # no delete before the box is ticked
    app.checkbox(key="confirm_delete").check().run()
    app.button(key="delete").click().run()
    assert not app.exception
    assert ingest.list_documents(store, include_incomplete=True) == []
    assert "python ingest.py input_data/pdfs" in app.info[0].value


def test_a_document_made_with_another_embedder_is_marked_with_what_to_do(store, embedder, three_page_pdf, tmp_path):
    facts = ingest.ingest_pdf(three_page_pdf, store, embedder).collection
    ingest.ingest_pdf(write_text_pdf(tmp_path / "one.pdf", ["A single page about tides."]), store, embedder)
    pretend_made_by(store, facts)
    app = run_viewer()
    table = app.dataframe[0].value
    embedders = dict(zip(table["document"], table["embedder"]))
    assert embedders == {"facts.pdf": f"⚠️ {OTHER_EMBEDDER} (not the one in use)", "one.pdf": "all-MiniLM-L6-v2"}
    assert "embedder in use: all-MiniLM-L6-v2" in shown(app.caption[0].value)
    marked = [o for o in app.selectbox[0].options if o.endswith("another embedder")]
    assert len(marked) == 1 and marked[0].startswith("facts.pdf")
    one = next(o for o in app.selectbox[0].options if o.startswith("one.pdf"))
    app.selectbox[0].select(one).run()
    [warning] = [shown(w.value) for w in app.warning]  # under the table, whichever document is open
    assert warning.startswith(f"'facts.pdf' was embedded with '{OTHER_EMBEDDER}', not with the embedder now in use ('all-MiniLM-L6-v2')")
    assert "python ingest.py --reembed" in warning and "one.pdf" not in warning
    app.selectbox[0].select(marked[0]).run()
    assert not app.exception and [shown(w.value) for w in app.warning] == [warning, warning]  # and above the document

    ingest.reembed_document(store, embedder, facts)
    app = run_viewer()
    assert set(app.dataframe[0].value["embedder"]) == {"all-MiniLM-L6-v2"} and not app.warning


def test_an_empty_store_shows_the_ingest_command(store):
    app = run_viewer()
    assert "store is empty" in app.info[0].value and "python ingest.py input_data/pdfs" in app.info[0].value


def test_an_unfinished_collection_is_marked_as_garbage_without_crashing(store):
    store.create_collection(
        "pdf_rag_" + "0" * 16,
        metadata={"doc_name": "half.pdf", "sha256": "0" * 64, "status": "ingesting", "pages": 3, "embedder": "x"},
    )
    app = run_viewer()
    table = app.dataframe[0].value
    assert table["document"][0] == "half.pdf" and "unfinished" in table["status"][0]
    assert any("next ingest" in w.value for w in app.warning)
    assert any("no chunks" in i.value for i in app.info)


# -----------------------------------------------------------------------------
# Pure helpers


def test_embedding_stats_on_known_vectors():
    stats = db_viewer.embedding_stats(np.array([[3.0, 4.0], [0.0, 1.0]]))
    assert stats["count"] == 2 and stats["dimension"] == 2
    assert (stats["norm_min"], stats["norm_median"], stats["norm_max"]) == (1.0, 3.0, 5.0)
    assert (stats["mean_min"], stats["mean_median"], stats["mean_max"]) == (1.5, 2.0, 2.5)
    assert (stats["variance_min"], stats["variance_max"]) == (2.25, 2.25)


def test_embedding_stats_of_no_vectors_has_no_dimension():
    assert db_viewer.embedding_stats(np.empty((0, 384)))["dimension"] == 0


def test_chunk_rows_are_in_reading_order_and_filters_combine():
    got = {
        "ids": ["x-p2-c0", "x-p1-c1", "x-p1-c0"],
        "documents": ["Cod and haddock.", "Lamp burning.", "The keeper."],
        "metadatas": [
            {"page": 2, "chunk_index": 0, "text_source": "ocr", "title": "Fish", "keywords": "cod, catch"},
            {"page": 1, "chunk_index": 1, "text_source": "text", "title": "Lighthouse", "keywords": ""},
            {"page": 1, "chunk_index": 0, "text_source": "text", "title": "Lighthouse", "keywords": ""},
        ],
    }
    rows = db_viewer.chunk_rows(got)
    assert [r["id"] for r in rows] == ["x-p1-c0", "x-p1-c1", "x-p2-c0"]
    assert rows[0]["length"] == len("The keeper.")
    assert [r["id"] for r in db_viewer.filter_chunks(rows, pages=[1])] == ["x-p1-c0", "x-p1-c1"]
    assert [r["id"] for r in db_viewer.filter_chunks(rows, sources=["ocr"])] == ["x-p2-c0"]
    assert [r["id"] for r in db_viewer.filter_chunks(rows, query="LIGHTHOUSE")] == ["x-p1-c0", "x-p1-c1"]  # title
    assert [r["id"] for r in db_viewer.filter_chunks(rows, query="catch")] == ["x-p2-c0"]  # keywords
    assert db_viewer.filter_chunks(rows, pages=[1], query="cod") == []
    view = db_viewer.page_view(rows, 2, "TO")
    assert view["source"] == "OCR" and view["title"] == "Fish" and len(view["chunks"]) == 1


def test_raw_sample_cuts_embeddings_and_collection_rows_flag_unfinished():
    raw = db_viewer.raw_sample({"ids": ["a"], "documents": ["t"], "metadatas": [{}], "embeddings": np.ones((1, 384))}, keep=2)
    assert raw["embeddings"] == [{"first_values": [1.0, 1.0], "dimension": 384}]
    rows = db_viewer.collection_rows([{"collection": "pdf_rag_0", "doc_name": "half.pdf", "status": "ingesting", "pages": 3}])
    assert rows[0]["chunks"] is None and "unfinished" in rows[0]["status"] and rows[0]["enriched"] == "0/3"
    assert db_viewer.embedder_label({"embedder": "all-MiniLM-L6-v2"}, "all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert db_viewer.embedder_label({"embedder": "x"}, None) == "x"  # the embedder in use unknown: nothing marked
    assert db_viewer.embedder_label({}, "all-MiniLM-L6-v2") == "⚠️ (not recorded) (not the one in use)"


def viewer_on_facts_beside_one_more(store, embedder, three_page_pdf, tmp_path):
    """The viewer with facts.pdf and a one-page one.pdf in the store, facts.pdf selected."""
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    ingest.ingest_pdf(write_text_pdf(tmp_path / "one.pdf", ["A single page about tides."]), store, embedder)
    app = run_viewer()
    facts = next(o for o in app.selectbox[0].options if o.startswith("facts.pdf"))
    app.selectbox[0].select(facts).run()
    return app


def test_switching_documents_starts_with_fresh_filters(store, embedder, three_page_pdf, tmp_path):
    app = viewer_on_facts_beside_one_more(store, embedder, three_page_pdf, tmp_path)
    app.multiselect(key="filter_pages").select(3).run()
    app.number_input(key="page_number").set_value(3).run()
    one = next(o for o in app.selectbox[0].options if o.startswith("one.pdf"))
    app.selectbox[0].select(one).run()
    assert not app.exception
    assert app.multiselect(key="filter_pages").value == [] and app.number_input(key="page_number").value == 1
    assert "tides" in app.code[0].value


def test_the_heatmap_rows_are_told_apart_and_tiny_variances_print_in_powers_of_ten(store, embedder, three_page_pdf):
    ingest.ingest_pdf(three_page_pdf, store, embedder)
    app = run_viewer()
    data = app.get("vega_lite_chart")[0].proto.datasets[0].data.data  # the heatmap's frame, as Arrow
    labels = set(pa.ipc.open_stream(data).read_all().to_pandas()["chunk"])
    assert labels == {"p. 1 · chunk 0", "p. 2 · chunk 0", "p. 3 · chunk 0"}
    stats = db_viewer.stat_rows(db_viewer.embedding_stats(np.array([[1.0, 0.0], [1.0, 3e-5]])))
    assert stats[2] == {"statistic": "per-dimension variance", "min": "0", "median": "1.125e-10", "max": "2.25e-10"}


def test_the_heatmap_control_starts_from_each_documents_own_default(store, embedder, three_page_pdf, tmp_path):
    app = viewer_on_facts_beside_one_more(store, embedder, three_page_pdf, tmp_path)
    chunks = next(n for n in app.number_input if n.label == "Heatmap: first chunks")
    chunks.set_value(2).run()
    one = next(o for o in app.selectbox[0].options if o.startswith("one.pdf"))
    app.selectbox[0].select(one).run()
    assert not app.exception
    assert next(n for n in app.number_input if n.label == "Heatmap: first chunks").value == 1  # one.pdf's own default
