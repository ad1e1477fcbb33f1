"""Configuration: defaults, config.toml, environment over file, and a clear error for every bad value."""

import pytest

from fermix_site.conf import ConfigError, load
from tests.conftest import run_manage, write_config


def load_from(tmp_path, text="", **env):
    write_config(tmp_path, text)
    return load({"FERMIX_HOME": str(tmp_path), **env})


def test_it_has_a_default_for_every_key(tmp_path):
    config = load({"FERMIX_HOME": str(tmp_path)})
    assert config.home == tmp_path.resolve()
    memory = config.memory
    assert (memory.enabled, memory.agent_id, memory.owner_id) == (True, "main", "default")
    assert (memory.review_interval_hours, memory.review_max_messages) == (24, 40)
    assert (memory.review_input_token_budget, memory.review_failure_backoff_ms) == (4000, 300_000)
    assert (memory.prompt_user_token_cap, memory.prompt_memory_token_cap) == (1500, 2000)
    assert memory.max_conversation_history is None
    assert memory.persist_transcripts is False
    assert (config.compaction.enabled, config.compaction.threshold) == (True, 0.85)
    assert config.compaction.reasoning_effort == "medium"
    assert config.timeouts.llm_buffered_ms == 240_000
    assert (config.storage.durability, config.storage.min_free_mb) == ("normal", 32)
    assert config.providers == ()


def test_it_reads_config_toml(tmp_path):
    config = load_from(tmp_path, """
[fermix_core.memory]
agent_id = "helper"
review_interval_hours = 6
max_conversation_history = 50
persist_transcripts = true

[fermix_core.compaction]
threshold = 0.7
reasoning_effort = "low"

[fermix_core.providers.local]
kind = "openai"
base_url = "http://127.0.0.1:11434/v1/"
model = "llama3"
context_window = 8192

[fermix_core.providers.cloud]
kind = "anthropic"
base_url = "https://api.example.com"
model = "claude"
api_key_env = "CLOUD_KEY"
primary = true
""")
    assert config.memory.agent_id == "helper"
    assert config.memory.review_interval_hours == 6
    assert config.memory.max_conversation_history == 50
    assert config.memory.persist_transcripts is True
    assert config.compaction.threshold == 0.7
    assert [p.name for p in config.provider_chain] == ["cloud", "local"]
    assert config.provider_chain[1].base_url == "http://127.0.0.1:11434/v1"


def test_it_reads_the_storage_section(tmp_path):
    config = load_from(tmp_path, '[fermix_core.storage]\ndurability = "full"\nmin_free_mb = 500\n')
    assert config.storage.durability == "full"
    assert config.storage.min_free_bytes == 500 * 1024 * 1024
    assert load_from(tmp_path, "", FERMIX_STORAGE_DURABILITY="full").storage.durability == "full"


def test_environment_wins_over_the_file(tmp_path):
    config = load_from(tmp_path, "[fermix_core.memory]\nreview_interval_hours = 6\n",
                       FERMIX_MEMORY_REVIEW_INTERVAL_HOURS="0", FERMIX_COMPACTION_THRESHOLD="0.9",
                       FERMIX_MEMORY_MAX_CONVERSATION_HISTORY="infinity")
    assert config.memory.review_interval_hours == 0
    assert config.compaction.threshold == 0.9
    assert config.memory.max_conversation_history is None


@pytest.mark.parametrize(
    "text, env, expected",
    [
        ("[fermix_core.compaction]\nthreshold = 1.5\n", {}, "fermix_core.compaction.threshold must be from 0.1 to 1.0"),
        ("[fermix_core.compaction]\nthreshold = \"high\"\n", {}, "fermix_core.compaction.threshold must be a number"),
        ("[fermix_core.memory]\nreview_max_messages = 0\n", {}, "memory.review_max_messages must be from 1"),
        ("[fermix_core.memory]\nreview_max_messages = 2.5\n", {}, "review_max_messages must be a whole number"),
        ("[fermix_core.memory]\nreview_interval_hours = -1\n", {}, "review_interval_hours must be from 0"),
        ("[fermix_core.memory]\nenabled = \"maybe\"\n", {}, "fermix_core.memory.enabled must be true or false"),
        ("[fermix_core.memory]\nagent_id = \"../etc\"\n", {}, "fermix_core.memory.agent_id must be 1-64"),
        ("[fermix_core.memory]\nowner_id = \"..\"\n", {}, "fermix_core.memory.owner_id must be 1-64"),
        ("[fermix_core.memory]\nmax_conversation_history = 0\n", {}, "max_conversation_history must be from 1"),
        ("[fermix_core.memory]\nreview_intreval_hours = 3\n", {}, "review_intreval_hours is not a known key"),
        ("[fermix_core.compaction]\nreasoning_effort = \"extreme\"\n", {}, "reasoning_effort must be one of"),
        ("[fermix_core.timeouts]\nllm_buffered_ms = 10\n", {}, "fermix_core.timeouts.llm_buffered_ms must be from"),
        ("[fermix_core.storage]\ndurability = \"fsync\"\n", {},
         "fermix_core.storage.durability must be one of 'normal', 'full', got 'fsync'"),
        ("[fermix_core.storage]\ndurability = true\n", {}, "fermix_core.storage.durability must be one of"),
        ("[fermix_core.storage]\nmin_free_mb = -1\n", {}, "fermix_core.storage.min_free_mb must be from 0"),
        ("[fermix_core.storage]\nsynchronous = \"FULL\"\n", {}, "storage.synchronous is not a known key"),
        ("", {"FERMIX_STORAGE_DURABILITY": "FULL"}, "FERMIX_STORAGE_DURABILITY must be one of 'normal', 'full'"),
        ("[fermix_core.memorry]\n", {}, "fermix_core.memorry is not a known section"),
        ("[fermix_core.memory\n", {}, "is not valid TOML"),
        ("[fermix_core.providers.a]\nkind = \"openai\"\nmodel = \"m\"\n", {}, "providers.a.base_url is required"),
        ("[fermix_core.providers.a]\nkind = \"grpc\"\nbase_url = \"http://x\"\nmodel = \"m\"\n", {},
         "fermix_core.providers.a.kind must be one of 'openai', 'anthropic'"),
        ("[fermix_core.providers.a]\nkind = \"openai\"\nbase_url = \"ftp://x\"\nmodel = \"m\"\n", {},
         "providers.a.base_url must be an http:// or https:// URL"),
        ("[fermix_core.providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\ncontext_window = 5\n",
         {}, "providers.a.context_window must be from 1024"),
        ("[fermix_core.providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\n"
         "[fermix_core.providers.b]\nkind = \"openai\"\nbase_url = \"http://y\"\nmodel = \"m\"\n", {},
         "exactly one provider must have primary = true (found 0)"),
        ("", {"FERMIX_COMPACTION_THRESHOLD": "nan"}, "FERMIX_COMPACTION_THRESHOLD must be from 0.1 to 1.0"),
        ("", {"FERMIX_MEMORY_REVIEW_MAX_MESSAGES": "lots"}, "FERMIX_MEMORY_REVIEW_MAX_MESSAGES must be a number"),
        ("", {"FERMIX_MEMORY_PERSIST_TRANSCRIPTS": "sometimes"}, "FERMIX_MEMORY_PERSIST_TRANSCRIPTS must be true"),
    ],
)
def test_each_invalid_value_gets_an_error_naming_the_key(tmp_path, text, env, expected):
    with pytest.raises(ConfigError) as excinfo:
        load_from(tmp_path, text, **env)
    assert expected in str(excinfo.value)


def test_invalid_config_stops_start_up_with_the_key_named(tmp_path):
    write_config(tmp_path, "[fermix_core.compaction]\nthreshold = 3\n")
    result = run_manage("check", env={"FERMIX_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert "configuration error: fermix_core.compaction.threshold must be from 0.1 to 1.0, got 3" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("value", ["main", "a.b-c_1", "x" * 64])
def test_valid_ids(value):
    from fermix_site.conf import valid_id

    assert valid_id(value)


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "main\n", "x" * 65, "a b", "é"])
def test_invalid_ids(value):
    from fermix_site.conf import valid_id

    assert not valid_id(value)
