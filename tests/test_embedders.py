"""The embedders (embedders.py): the embedded MiniLM's vectors, and the Ollama route, chosen only when a
server speaking Ollama's API has the model."""

from __future__ import annotations

import numpy as np
import pytest

import config
import embedders
import models


def test_embedder_gives_normalised_384_dim_vectors_that_rank_meaning(embedder):
    docs = ["The cat sat on the mat.", "Quarterly revenue grew by twelve percent."]
    vectors = np.array(embedder.embed_documents(docs))
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)
    query = np.array(embedder.embed_query("a kitten resting on a rug"))
    assert query @ vectors[0] > query @ vectors[1]


# -----------------------------------------------------------------------------
# Ollama route: against the local server in conftest that speaks Ollama's HTTP API


def test_padding_batches_to_a_multiple_does_not_change_a_vector(embedder):
    short = "The railway reached the town in 1889."
    alone = np.array(embedder.embed_query(short))
    beside_a_long_text = np.array(embedder.embed_documents([short, "Trains took nine hours. " * 20])[0])
    assert np.abs(alone - beside_a_long_text).max() < 1e-5


def test_auto_uses_ollama_embeddings_when_the_server_has_the_model(ollama_server, monkeypatch):
    monkeypatch.setattr(ollama_server, "models", ["nomic-embed-text:latest"])
    monkeypatch.setattr(config, "EMBED_BACKEND", "auto")
    embedder = embedders.get_embeddings()
    assert embedders.embedder_name(embedder) == "ollama:nomic-embed-text"
    assert embedder.embed_documents(["abc"]) == [[3.0, 1.0, 0.0]]


def test_auto_falls_back_to_embedded_when_the_model_is_missing(ollama_server, monkeypatch):
    monkeypatch.setattr(ollama_server, "models", ["llama3.2:3b"])
    monkeypatch.setattr(config, "EMBED_BACKEND", "auto")
    assert embedders.embedder_name(embedders.get_embeddings()) == config.EMBEDDED_EMBEDDER_NAME


def test_forcing_ollama_explains_a_missing_model_and_a_down_server(ollama_server, monkeypatch):
    monkeypatch.setattr(ollama_server, "models", [])
    monkeypatch.setattr(config, "EMBED_BACKEND", "ollama")
    with pytest.raises(models.ModelUnavailableError, match="ollama pull nomic-embed-text"):
        embedders.get_embeddings()
    monkeypatch.setattr(config, "OLLAMA_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(models.ModelUnavailableError, match="not answering"):
        embedders.get_embeddings()


def test_the_embedder_is_named_by_its_class_even_after_a_module_reload():
    """Streamlit reloads an edited embedders.py; an embedder cached before is an instance of the old class
    object, and must keep its name (else every document would look made by another embedder)."""
    OldMiniLM = type(embedders.MiniLMEmbeddings.__name__, (), {"name": config.EMBEDDED_EMBEDDER_NAME})  # the class before a reload
    assert embedders.embedder_name(OldMiniLM()) == config.EMBEDDED_EMBEDDER_NAME
    assert embedders.embedder_name(type("OllamaEmbeddings", (), {"model": "nomic-embed-text"})()) == "ollama:nomic-embed-text"


def test_a_subclass_of_the_embedded_embedder_keeps_its_own_name():
    class TestMiniLM(embedders.MiniLMEmbeddings):
        name = "minilm-variant"

    assert embedders.embedder_name(TestMiniLM.__new__(TestMiniLM)) == "minilm-variant"
