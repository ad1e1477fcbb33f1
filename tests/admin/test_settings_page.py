"""Web setup: the wizard's two knobs, validated, written to config.toml, in force without a restart."""

import pytest
from django.urls import reverse

from console.web_setup import write_settings
from fermix_site.conf import ConfigError, conf
from fermix_site.config_file import set_keys

pytestmark = [pytest.mark.django_db]

URL = reverse("fermix-settings")
OTHER = ('# my notes\n[fermix_core.memory]\nagent_id = "main"  # keep\nreview_interval_hours = 24\n\n'
         '[fermix_core.providers.local]\nkind = "openai"\nbase_url = "http://127.0.0.1:9"\nmodel = "m"\n'
         'primary = true\n')


def config_text(home):
    return (home.home / "config.toml").read_text()


def test_saving_writes_config_toml_and_takes_effect_at_once(console, home):
    (home.home / "config.toml").write_text(OTHER)
    response = console.post(URL, {"review_interval_hours": "6", "threshold": "0.7"})
    assert response.status_code == 302
    text = config_text(home)
    assert "review_interval_hours = 6\n" in text and "[fermix_core.compaction]\nthreshold = 0.7\n" in text
    assert "# my notes" in text and 'agent_id = "main"  # keep' in text and 'model = "m"' in text
    assert conf.memory.review_interval_hours == 6 and conf.compaction.threshold == 0.7
    html = console.get(URL).content.decode()
    assert 'value="6"' in html and 'value="0.7"' in html


def test_zero_turns_background_review_off(console, home):
    console.post(URL, {"review_interval_hours": "0", "threshold": "0.85"})
    assert conf.memory.review_interval_hours == 0
    assert "background review off" in console.get(URL).content.decode()


def test_invalid_values_are_refused_naming_the_key_and_nothing_is_written(console, home):
    (home.home / "config.toml").write_text(OTHER)
    html = console.post(URL, {"review_interval_hours": "-1", "threshold": "3"}).content.decode()
    assert "fermix_core.memory.review_interval_hours must be from 0" in html
    assert "fermix_core.compaction.threshold must be from 0.1 to 1.0" in html
    assert config_text(home) == OTHER
    html = console.post(URL, {"review_interval_hours": "soon", "threshold": "0.5"}).content.decode()
    assert "must be a number" in html and config_text(home) == OTHER


def test_staff_without_superuser_rights_cannot_change_settings(client, viewer, home):
    client.force_login(viewer)
    assert client.get(URL).status_code == 200
    client.post(URL, {"review_interval_hours": "6", "threshold": "0.7"})
    assert not (home.home / "config.toml").exists()
    assert conf.memory.review_interval_hours == 24


def test_a_broken_config_toml_is_not_overwritten(home):
    (home.home / "config.toml").write_text("[fermix_core.memory\nbroken")
    with pytest.raises(ConfigError):
        write_settings({"memory.review_interval_hours": 6}, home=home.home)
    assert config_text(home) == "[fermix_core.memory\nbroken"


def test_a_table_written_inline_is_edited_where_it_stands(home):
    (home.home / "config.toml").write_text("[fermix_core]\nmemory = { review_interval_hours = 3 }  # inline\n")
    write_settings({"memory.review_interval_hours": 6}, home=home.home)
    assert config_text(home) == "[fermix_core]\nmemory = { review_interval_hours = 6 }  # inline\n"


def test_a_section_that_is_not_a_table_is_refused_and_left_as_it_was(home):
    text = "[fermix_core]\nmemory = 3\n"
    (home.home / "config.toml").write_text(text)
    with pytest.raises(ConfigError, match=r"\[fermix_core.memory\] must be a table"):
        write_settings({"memory.review_interval_hours": 6}, home=home.home)
    assert config_text(home) == text


def test_saving_keeps_comments_unknown_tables_and_the_layout(console, home):
    text = ("# my notes\n\n[fermix_core.memory]  # the reviewer\nreview_interval_hours = 24  # daily\n\n"
            "[fermix_core.compaction]\nthreshold=0.85\n\n[my_tools]  # not Fermix's\nanything = 'kept'\n")
    (home.home / "config.toml").write_text(text)
    assert console.post(URL, {"review_interval_hours": "6", "threshold": "0.5"}).status_code == 302
    assert config_text(home) == text.replace("= 24  # daily", "= 6  # daily").replace("=0.85", "=0.5")


def test_set_keys_replaces_inserts_or_appends():
    assert set_keys("[fermix_core.memory]\nx = 1\nreview_interval_hours = 2\n",
                    {"memory.review_interval_hours": 5.0}) == "[fermix_core.memory]\nx = 1\nreview_interval_hours = 5\n"
    assert set_keys("[fermix_core.memory]\nx = 1\n[other]\n", {"memory.review_interval_hours": 1.5}) == (
        "[fermix_core.memory]\nx = 1\nreview_interval_hours = 1.5\n[other]\n")
    assert set_keys("a = 1", {"compaction.threshold": 0.9}) == "a = 1\n\n[fermix_core.compaction]\nthreshold = 0.9\n"
    assert set_keys("", {"compaction.threshold": 0.9}) == "[fermix_core.compaction]\nthreshold = 0.9\n"
