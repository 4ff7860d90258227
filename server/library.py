"""The heavy objects, made once per server process and shared by every request: store, embedder,
retriever, page labeller, and the ingest and answer workers. Routes get it as the ``Lib`` dependency.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request

import config
import embedders
import ingest
import models
from retriever import Retriever

from server.errors import ApiError
from server.answers import AnswerWorker
from server.jobs import IngestWorker


# -----------------------------------------------------------------------------
# The heavy objects, made once per server process


class Library:
    """Store client, embedder, retriever, enricher and the two workers, shared by all requests."""

    def __init__(self):
        self.client = ingest.get_client()
        ingest.sweep_unfinished(self.client)  # what a killed ingest left, before the first listing or search
        self.embedder = embedders.get_embeddings()
        self.retriever = Retriever(self.client, self.embedder)
        self.retriever.refresh()
        self.enricher = (
            ingest.BackgroundEnricher(self.client, self.embedder, models.get_chat_model) if config.ENRICH_ENABLED else None
        )
        self.uploads = Path(tempfile.mkdtemp(prefix="pdf-rag-uploads-"))
        self.ingester = IngestWorker(self)
        self.answers = AnswerWorker(self)
        if self.enricher is not None:  # labels left unfinished by an earlier run, as the app does
            for doc in ingest.list_documents(self.client):
                if ingest.labels_missing(doc):
                    self.enricher.submit(doc["collection"])

    def close(self) -> None:
        shutil.rmtree(self.uploads, ignore_errors=True)

    def document(self, document_id: str) -> dict:
        """The store's record of one complete document; 404 when there is none."""
        for doc in ingest.list_documents(self.client):
            if doc["collection"] == document_id:
                return doc
        raise ApiError(404, f"There is no document '{document_id}' in the library.")

    def scope(self, document_ids: list[str] | None) -> list[str] | None:
        """The checked scope for a search or a question (None: the whole library)."""
        if not document_ids:  # no listing needed: it costs ~100 ms at 200 documents
            return None
        known = {d["collection"] for d in ingest.list_documents(self.client)}
        unknown = [d for d in document_ids or [] if d not in known]
        if unknown:
            raise ApiError(404, f"There is no document {', '.join(repr(d) for d in unknown)} in the library.")
        return list(document_ids)


def get_library(request: Request) -> Library:
    return request.app.state.library


Lib = Annotated[Library, Depends(get_library)]
