"""Embeddings for semantic recall: one small interface, its backends, the text they embed, the stored bytes.

`embedder()` is the backend `[fermix_core.embeddings]` configures: `local` (the default: a small model
shipped inside a Python package, no network; `memory.embeddings.local`), `openai` (any OpenAI-compatible
`/v1/embeddings`; `memory.embeddings.openai`), or None for `none` (recall stays lexical). It is built once
per process and configuration. A local model loads on its first text, so a command or task that never
embeds never pays for it; a web worker, which will embed its recall queries, loads it as it starts, on a
thread of its own (`load_ahead`), so that its first query does not wait for the load (a node's very
first load also optimises the graph: about a second).

A message is embedded as `message_text` writes it: the speaker, then the content, the way the transcript
shows it to a model. Recall questions name the speaker ("what did she say about…", "who teaches her"),
and the speaker tells the user's facts from the assistant's echoes of them. Vectors are unit length, so
the dot product of two is their cosine; they are stored as little-endian float16 (`to_bytes`), 2 bytes a
dimension: 768 bytes for the default model's 384.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from typing import Protocol

import numpy as np

from fermix_site.conf import EmbeddingsConf, conf
from memory.embeddings.base import EmbeddingError, normalised
from memory.embeddings.local import BATCH as LOCAL_BATCH
from memory.embeddings.local import DEFAULT_MODEL, LocalEmbedder
from memory.embeddings.openai import OpenAIEmbedder

__all__ = ["Embedder", "EmbeddingError", "build", "document_text", "embedder", "from_bytes", "load_ahead", "matrix",
           "memory_text", "message_text", "normalised", "to_bytes"]

STORED_DTYPE = np.dtype("<f2")
logger = logging.getLogger("fermix.memory.embeddings")


class Embedder(Protocol):
    """A backend: texts in, unit vectors out (float32, one row per text)."""

    model_id: str  # names the backend, model, version and dimension: "local:all-MiniLM-L6-v2-int8@1.0.0/384"
    dimensions: int

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """n texts → an n × dimensions array."""

    def embed_query(self, text: str) -> np.ndarray:
        """One text → a vector of `dimensions`."""


def document_text(role: str, content: str, sender: str = "") -> str:
    """A message's text as it is embedded: `user: …`, or `user (ana): …` when the sender is known."""
    speaker = f"{role} ({sender})" if sender else role
    return f"{speaker}: {content}"


def message_text(message) -> str:
    """`document_text` of a Message row (anything with `role`, `content` and `sender`)."""
    return document_text(message.role, message.content, message.sender)


def memory_text(key: str, value: str) -> str:
    """A memory row's text as it is embedded: its key in words, then its value (`pottery class: …`)."""
    words = re.sub(r"[_.]+", " ", key).strip()
    return f"{words}: {value}" if words else value


def to_bytes(vector: np.ndarray) -> bytes:
    """A vector as stored: little-endian float16, 2 bytes a dimension."""
    vector = np.asarray(vector, dtype=np.float32)
    if vector.ndim != 1:
        raise ValueError(f"to_bytes takes one vector, not an array of shape {vector.shape}")
    return vector.astype(STORED_DTYPE).tobytes()


def from_bytes(data: bytes, dimensions: int) -> np.ndarray:
    """The float32 vector `to_bytes` stored."""
    if len(data) != dimensions * STORED_DTYPE.itemsize:
        raise ValueError(f"{len(data)} bytes are not a stored vector of {dimensions} dimensions")
    return np.frombuffer(data, dtype=STORED_DTYPE).astype(np.float32)


def matrix(blobs: Iterable[bytes], dimensions: int) -> np.ndarray:
    """Stored vectors of one dimension as one float32 array, a row each (to score many at once)."""
    data = b"".join(blobs)
    if len(data) % (dimensions * STORED_DTYPE.itemsize):
        raise ValueError(f"{len(data)} bytes are not whole stored vectors of {dimensions} dimensions")
    return np.frombuffer(data, dtype=STORED_DTYPE).reshape(-1, dimensions).astype(np.float32)


def build(settings: EmbeddingsConf) -> Embedder | None:
    """A new backend for these settings (None for `none`); the local model is not loaded yet."""
    if settings.backend == "none":
        return None
    if settings.backend == "openai":
        return OpenAIEmbedder(settings)
    return LocalEmbedder(settings.model or DEFAULT_MODEL, threads=settings.threads,
                         batch=settings.batch or LOCAL_BATCH, cache_dir=conf.home / "cache" / "embeddings",
                         keep_free=conf.storage.min_free_bytes)


_built: tuple[EmbeddingsConf, Embedder | None] | None = None
_lock = threading.Lock()


def embedder() -> Embedder | None:
    """The configured backend, built once per process and configuration; None for `none`.

    Raises EmbeddingError when the configured local model is unknown or its package is not installed.
    """
    global _built
    settings = conf.embeddings
    built = _built
    if built is None or built[0] != settings:
        with _lock:
            built = _built
            if built is None or built[0] != settings:
                built = _built = (settings, build(settings))
    return built[1]


def load_ahead(**_signal) -> threading.Thread | None:
    """Load the configured local model on a thread of its own, now rather than on the first text (each web
    worker as it starts: `fermix_site.serving.web_worker_started`). A query that arrives meanwhile waits
    for the same load. Nothing is started for `none`, `openai` or a model already loaded; a model that
    cannot load is logged here, and recall reports it as it would have (`embeddings_failed`)."""
    try:
        model = embedder()
    except EmbeddingError as exc:
        logger.warning("embedding model not loaded ahead: %s", exc)
        return None
    if not isinstance(model, LocalEmbedder) or model.loaded:
        return None
    thread = threading.Thread(target=_load, args=(model,), name="fermix-embedding-load", daemon=True)
    thread.start()
    return thread


def _load(model: LocalEmbedder) -> None:
    started = time.monotonic()
    try:
        model.load()
    except EmbeddingError as exc:
        logger.warning("embedding model not loaded ahead: %s", exc)
        return
    logger.info("local embedding model %s loaded ahead of the first query in %.0f ms (process %d)",
                model.model.name, (time.monotonic() - started) * 1000, os.getpid())
