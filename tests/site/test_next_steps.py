"""What `make run` prints after "Fermix is serving": every step on the first run, then only what is missing."""

import io

from fermix_site.management.commands.serve import print_next_steps
from tests.fakeprovider import provider_config_toml, use_config


def steps(base="http://127.0.0.1:8000"):
    out = io.StringIO()
    print_next_steps(out, base)
    return out.getvalue()


def test_the_first_run_lists_provider_api_key_doctor_review_and_docs(home):
    text = steps()
    assert text.startswith("Next steps:\n  1. Configure a model provider")
    assert f"[fermix_core.providers.<name>] table to {home.home / 'config.toml'}" in text
    for part in ("apikey_create --name my-bot --role channel", "python manage.py doctor",
                 "memory_review --now", "http://127.0.0.1:8000/api/v1/docs"):
        assert part in text


def test_later_runs_repeat_only_the_missing_provider(home, fake_provider):
    steps()
    assert steps() == ("Next steps:\n  1. Configure a model provider (nothing is reviewed into memory without "
                       f"one): add a [fermix_core.providers.<name>] table to {home.home / 'config.toml'} "
                       "(docs/providers.md); the file is re-read while serving.")
    with use_config(provider_config_toml(fake_provider)):
        assert steps() == ""


def test_a_first_run_with_a_provider_already_configured_skips_that_step(home, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        text = steps()
    assert "Configure a model provider" not in text and text.startswith("Next steps:\n  1. Create an API key")
