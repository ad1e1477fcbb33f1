"""Embeddings from any OpenAI-compatible `/v1/embeddings`: OpenAI itself, Ollama, vLLM, llama.cpp server.

A request carries up to `batch` texts. `dimensions` is sent when configured (models that can shorten
their vectors, such as OpenAI's text-embedding-3, honour it) and every answer is checked against it;
without it the dimension is the one of the first answer, and `dimensions` asks the server once for it.
The vectors are scaled to unit length here, as not every server does it. Requests go through the
providers' bounded POST (a deadline, a size cap on the answer); any failure is an EmbeddingError that
names the URL.
"""

from __future__ import annotations

import threading

import httpx
import numpy as np

from fermix_site.conf import EmbeddingsConf
from memory.embeddings.base import EmbeddingError, normalised
from providers.errors import ProviderError
from providers.openai import versioned
from providers.transport import post_json

BATCH = 32  # texts per request unless `batch` says otherwise


class OpenAIEmbedder:
    """`POST {base_url}/embeddings` for a configured model."""

    def __init__(self, settings: EmbeddingsConf):
        self.settings = settings
        self.url = versioned(settings.base_url) + "/embeddings"
        self._dimensions = settings.dimensions
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        """The configured dimension, or the one the server answers with (asked once if need be)."""
        if self._dimensions is None:
            self.embed_query("dimensions")
        return self._dimensions

    @property
    def model_id(self) -> str:
        return f"openai:{self.settings.model}/{self.dimensions}"

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dimensions or 0), dtype=np.float32)
        batch = self.settings.batch or BATCH
        return np.vstack([self._request(texts[start:start + batch]) for start in range(0, len(texts), batch)])

    def embed_query(self, text: str) -> np.ndarray:
        return self._request([text])[0]

    def _request(self, texts: list[str]) -> np.ndarray:
        # OpenAI refuses an empty string among the inputs; a space embeds as nothing does.
        body: dict = {"model": self.settings.model, "input": [text or " " for text in texts],
                      "encoding_format": "float"}
        if self.settings.dimensions is not None:
            body["dimensions"] = self.settings.dimensions
        try:
            data = post_json(self._http(), self.url, headers=self._headers(), body=body,
                             timeout_s=self.settings.timeout_ms / 1000)
        except ProviderError as exc:
            raise self._error(str(exc)) from exc
        return self._vectors(data, len(texts))

    def _headers(self) -> dict:
        headers = {"accept": "application/json"}
        env = self.settings.api_key_env
        if env:
            key = self.settings.api_key
            if not key:
                raise self._error(f"environment variable {env} (api_key_env) is not set")
            headers["authorization"] = f"Bearer {key}"
        return headers

    def _http(self) -> httpx.Client:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = httpx.Client(follow_redirects=False)
        return self._client

    def _vectors(self, data: dict, count: int) -> np.ndarray:
        items = data.get("data")
        if not isinstance(items, list) or len(items) != count:
            raise self._error(f"the answer holds {len(items) if isinstance(items, list) else 'no'} "
                              f"embeddings for {count} inputs")
        try:
            if all(isinstance(item, dict) and isinstance(item.get("index"), int) for item in items):
                items = sorted(items, key=lambda item: item["index"])
            vectors = np.array([item["embedding"] for item in items], dtype=np.float32)
        except (TypeError, KeyError, ValueError) as exc:
            raise self._error(f"the answer is not a list of embeddings ({type(exc).__name__}: {exc})") from None
        if vectors.ndim != 2 or not vectors.shape[1] or not np.isfinite(vectors).all():
            raise self._error("the answer's embeddings are not vectors of numbers of one length")
        expected = self._dimensions
        if expected is not None and vectors.shape[1] != expected:
            raise self._error(f"the answer's vectors have {vectors.shape[1]} dimensions, not {expected} "
                              f"(fermix_core.embeddings.dimensions)")
        self._dimensions = vectors.shape[1]
        return normalised(vectors)

    def _error(self, detail: str) -> EmbeddingError:
        return EmbeddingError(f"embeddings from {self.url} (model {self.settings.model}): {detail}",
                              backend="openai")
