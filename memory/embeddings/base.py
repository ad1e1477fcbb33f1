"""What every embedding backend shares: its error and the normalisation of its vectors."""

from __future__ import annotations

import numpy as np

from memory.errors import CodedError


class EmbeddingError(CodedError):
    """A backend gave no vectors; the message names the backend and its model file or URL."""

    def __init__(self, message: str, *, backend: str, code: str = "embedding_failed"):
        super().__init__(code, message)
        self.backend = backend


def normalised(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length as float32 (a zero row stays zero), so a dot product is the cosine."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
