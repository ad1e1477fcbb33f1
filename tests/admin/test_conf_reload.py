"""A changed config.toml reaches a running process without a restart (the web setup page relies on it)."""

import os

from fermix_site.conf import _Current, load


def current(monkeypatch, tmp_path, interval=0.0):
    monkeypatch.setenv("FERMIX_HOME", str(tmp_path))
    watcher = _Current()
    watcher.check_interval = interval
    return watcher


def write(tmp_path, text):
    # Written the way the web setup writes it: a temp file renamed over the old one.
    temp = tmp_path / "config.toml.tmp"
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, tmp_path / "config.toml")


def test_it_reloads_when_config_toml_changes(monkeypatch, tmp_path):
    watcher = current(monkeypatch, tmp_path)
    assert watcher.get().memory.review_interval_hours == 24
    write(tmp_path, "[fermix_core.memory]\nreview_interval_hours = 6\n")
    assert watcher.get().memory.review_interval_hours == 6
    write(tmp_path, "[fermix_core.compaction]\nthreshold = 0.5\n")
    assert watcher.compaction.threshold == 0.5
    assert watcher.memory.review_interval_hours == 24


def test_it_keeps_the_config_in_force_when_the_changed_file_is_invalid(monkeypatch, tmp_path):
    write(tmp_path, "[fermix_core.memory]\nreview_interval_hours = 6\n")
    watcher = current(monkeypatch, tmp_path)
    assert watcher.get().memory.review_interval_hours == 6
    write(tmp_path, "[fermix_core.compaction]\nthreshold = 7\n")
    assert watcher.get().memory.review_interval_hours == 6
    assert watcher.get().compaction.threshold == 0.85


def test_it_looks_at_the_file_at_most_once_per_interval(monkeypatch, tmp_path):
    watcher = current(monkeypatch, tmp_path, interval=3600)
    first = watcher.get()
    write(tmp_path, "[fermix_core.memory]\nreview_interval_hours = 6\n")
    assert watcher.get() is first
    watcher.check_interval = 0
    assert watcher.get().memory.review_interval_hours == 6


def test_a_configuration_put_in_force_by_use_is_not_replaced(monkeypatch, tmp_path):
    watcher = current(monkeypatch, tmp_path)
    pinned = load()
    with watcher.use(pinned):
        write(tmp_path, "[fermix_core.memory]\nreview_interval_hours = 6\n")
        assert watcher.get() is pinned
    assert watcher.get().memory.review_interval_hours == 6

