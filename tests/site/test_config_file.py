"""config.toml has one writer: values edited in place, comments kept, writers in turn, bad values refused."""

import os
import stat
import threading
import tomllib

import pytest

from fermix_site.conf import ConfigError, load
from fermix_site.config_file import HEADER, config_set

MINE = ('# my notes\n[fermix_core.memory]  # the reviewer\nagent_id = "main"\nreview_interval_hours = 24  # daily\n\n'
        '[fermix_core.providers.local]\nkind = "openai"\nbase_url = "http://127.0.0.1:9"\nmodel = "m"\n'
        'primary = true\n\n[my_tools]\nanything = "kept"  # not read by Fermix\n')


def config_path(home):
    return home.home / "config.toml"


def test_it_changes_only_the_values_it_sets(home):
    config_path(home).write_text(MINE)
    config_set({"memory.review_interval_hours": 6, "memory.review_max_messages": 12})
    assert config_path(home).read_text() == MINE.replace(
        "review_interval_hours = 24  # daily\n", "review_interval_hours = 6  # daily\nreview_max_messages = 12\n")


def test_it_adds_a_missing_table_after_the_other_fermix_tables(home):
    config_path(home).write_text(MINE)
    config_set({"compaction.threshold": 0.7})
    assert config_path(home).read_text() == MINE.replace(
        "primary = true\n\n", "primary = true\n\n[fermix_core.compaction]\nthreshold = 0.7\n\n")


def test_it_edits_a_key_with_a_comment_after_it_in_an_inline_table(home):
    config_path(home).write_text("[fermix_core]\nmemory = { agent_id = \"ada\", review_interval_hours = 3 }  # inline\n"
                                 "compaction.threshold = 0.5 # dotted\n")
    config_set({"memory.review_interval_hours": 6, "compaction.threshold": 0.9})
    assert config_path(home).read_text() == (
        "[fermix_core]\nmemory = { agent_id = \"ada\", review_interval_hours = 6 }  # inline\n"
        "compaction.threshold = 0.9 # dotted\n")


def test_a_missing_file_is_created_with_the_header_and_private(home):
    path = config_set({"memory.max_conversation_history": "infinity", "storage.durability": "full"})
    assert path == config_path(home)
    text = path.read_text()
    assert text.startswith(HEADER)
    assert tomllib.loads(text) == {"fermix_core": {"memory": {"max_conversation_history": "infinity"},
                                                   "storage": {"durability": "full"}}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load().storage.durability == "full"


@pytest.mark.parametrize("values, message", [
    ({"compaction.threshold": 3}, "fermix_core.compaction.threshold must be from 0.1 to 1.0"),
    ({"memory.review_interval_hours": "soon"}, "must be a number"),
    ({"memory.no_such_key": 1}, "fermix_core.memory.no_such_key is not a known key"),
    ({"providers.local": "x"}, "fermix_core.providers.local is not a known key"),
])
def test_an_invalid_value_leaves_the_file_byte_for_byte(home, values, message):
    original = MINE.replace("\n", "\r\n").encode()
    config_path(home).write_bytes(original)
    with pytest.raises(ConfigError, match=message):
        config_set(values)
    assert config_path(home).read_bytes() == original


def test_a_file_that_would_not_load_after_the_edit_is_left_as_it_was(home):
    text = "[fermix_core.memory]\nreview_intervall_hours = 3\n"  # a typo start-up refuses
    config_path(home).write_text(text)
    with pytest.raises(ConfigError, match="review_intervall_hours is not a known key"):
        config_set({"memory.review_interval_hours": 6})
    assert config_path(home).read_text() == text
    assert sorted(os.listdir(home.home)) == [".config.toml.lock", "config.toml"]  # no temp file left


def test_concurrent_writers_do_not_lose_each_others_keys(home):
    config_path(home).write_text(MINE)
    keys = ["memory.review_max_messages", "memory.prompt_user_token_cap", "memory.prompt_memory_token_cap",
            "storage.min_free_mb"]
    start = threading.Barrier(len(keys))
    errors = []

    def write(key):
        start.wait()
        try:
            for value in range(101, 121):
                config_set({key: value})
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    written = tomllib.loads(config_path(home).read_text())["fermix_core"]
    assert {k: written.get(k.split(".")[0], {}).get(k.split(".")[1]) for k in keys} == dict.fromkeys(keys, 120)
    assert config_path(home).read_text().startswith("# my notes\n")
