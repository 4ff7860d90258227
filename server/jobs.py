"""Ingest jobs: uploads queued to one worker thread, first come first served.

    check_upload -> IngestJob (queued) -> IngestWorker thread: ingest.ingest_pdf(progress=job.report)
                 -> done / failed (a sentence and a status); finished jobs forgotten after a while
"""

from __future__ import annotations

import logging
import queue
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import config
import ingest

from server.errors import without_server_path, status_and_message

if TYPE_CHECKING:
    from server.library import Library

log = logging.getLogger(__name__)

# -----------------------------------------------------------------------------
# Ingest jobs: one worker thread, first come first served


@dataclass
class IngestJob:
    file: str
    path: Path  # the upload, saved until the job ends
    document_id: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = "queued"  # queued | running | done | failed
    message: str = "Waiting for its turn"
    current: int = 0
    total: int = 0
    status: int | None = None  # the HTTP status of the error, when failed
    result: dict = field(default_factory=dict)
    version: int = 0  # bumped on every change, so the event stream knows when to send
    finished_at: float | None = None  # time.monotonic() when it ended (done or failed)

    def report(self, current: int, total: int, message: str) -> None:
        """ingest's progress callback: page ``current`` of ``total``, and what is happening."""
        self.current, self.total, self.message = current, total, message
        self.version += 1

    def finish(self, state: str, message: str, status: int | None = None, **result) -> None:
        self.state, self.message, self.status, self.result = state, message, status, result
        self.finished_at = time.monotonic()
        self.version += 1

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "file": self.file,
            "state": self.state,
            "document_id": self.document_id,
            "message": self.message,
            "current": self.current,
            "total": self.total,
            "progress": round(self.current / self.total, 3) if self.total else (1.0 if self.state == "done" else 0.0),
            **({"status": self.status} if self.status else {}),
            **self.result,
        }


class IngestWorker:
    """Ingests queued uploads one at a time in a background thread; jobs are kept for lookup, a
    finished one for API_JOB_KEEP_SECONDS and only the API_JOB_KEEP_COUNT most recent (``prune``)."""

    FORGOTTEN_KEPT = 10_000  # ids of pruned jobs remembered, so their 404 can say why

    def __init__(self, library: Library):
        self.library = library
        self.jobs: dict[str, IngestJob] = {}
        self.forgotten: OrderedDict[str, str] = OrderedDict()  # pruned job id -> its document id
        self._lock = threading.Lock()  # jobs is changed by request threads and the worker
        self._queue: queue.Queue[IngestJob] = queue.Queue()
        threading.Thread(target=self._work, name="ingest-worker", daemon=True).start()

    def submit(self, job: IngestJob) -> None:
        with self._lock:
            self.jobs[job.id] = job
            self._prune()
            self._tell_places()
        self._queue.put(job)

    def _tell_places(self) -> None:
        """Tell each waiting job its place, so no upload waits without knowing why (and for whom).
        Called with the lock held, when a job arrives and when one starts."""
        running = next((j for j in self.jobs.values() if j.state == "running"), None)
        waiting = [j for j in self.jobs.values() if j.state == "queued"]  # dicts keep arrival order
        for ahead, job in enumerate(waiting, start=int(running is not None)):
            now = f" (now adding {running.file})" if running else ""
            message = f"Waiting for its turn: {ahead} upload{'s' if ahead != 1 else ''} ahead{now}"
            if message != job.message:
                job.report(0, 0, message)

    def job(self, job_id: str) -> IngestJob | None:
        with self._lock:
            self._prune()
            return self.jobs.get(job_id)

    def busy_with(self, document_id: str) -> IngestJob | None:
        with self._lock:
            jobs = list(self.jobs.values())
        return next((j for j in jobs if j.document_id == document_id and j.state in ("queued", "running")), None)

    def _prune(self) -> None:
        """Forget finished jobs older than API_JOB_KEEP_SECONDS, and the oldest beyond API_JOB_KEEP_COUNT
        (queued and running jobs are kept). Called with the lock held."""
        now = time.monotonic()
        finished = sorted((j for j in self.jobs.values() if j.finished_at is not None), key=lambda j: j.finished_at)
        excess = len(finished) - max(config.API_JOB_KEEP_COUNT, 0)
        for n, job in enumerate(finished):
            if n < excess or now - job.finished_at > config.API_JOB_KEEP_SECONDS:
                del self.jobs[job.id]
                self.forgotten[job.id] = job.document_id
        while len(self.forgotten) > self.FORGOTTEN_KEPT:
            self.forgotten.popitem(last=False)

    def _work(self) -> None:
        while True:  # a daemon thread: it ends with the process
            job = self._queue.get()
            try:
                self._ingest(job)
            finally:
                shutil.rmtree(job.path.parent, ignore_errors=True)
                with self._lock:
                    self._prune()

    def _ingest(self, job: IngestJob) -> None:
        lib = self.library
        with self._lock:
            job.state = "running"
            job.report(0, 0, "Checking the file")
            self._tell_places()
        try:
            result = ingest.ingest_pdf(job.path, lib.client, lib.embedder, progress=job.report, doc_name=job.file)
            lib.retriever.refresh()
        except Exception as err:  # report it on the job; the worker goes on with the next upload
            status, message = status_and_message(err)
            message = without_server_path(message, job.path)
            log.warning("Upload %s failed: %s", job.file, message)
            job.finish("failed", message, status)
            return
        if lib.enricher is not None:
            lib.enricher.submit(result.collection)
        note = "Already in the library" if result.cached else f"Searchable: {result.pages} pages, {result.chunks} passages"
        if result.cut_pages:  # said in the last message too: a client may only read that one
            note += f". Text cut: {ingest.cut_pages_note(result.cut_pages)}"
        job.finish("done", note, cached=result.cached, pages=result.pages, passages=result.chunks, ocr_pages=result.ocr_pages,
                   cut_pages=result.cut_pages)
