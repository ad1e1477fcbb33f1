import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from fermix_site import conf as conf_module
from fermix_site import generations

pytest_plugins = ["tests.fakeprovider", "tests.live", "tests.personas"]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _fresh_local_caches():
    # Test transactions roll back generation counters and reuse ids; a cache entry from an earlier test
    # (a generation, the highest id it read) could then match. Production only caches committed rows.
    generations.clear_all()
    yield
    generations.clear_all()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh FERMIX_HOME with its configuration in force for this test."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("FERMIX_HOME", str(path))
    with conf_module.conf.use(conf_module.load()) as config:
        yield config


def write_config(home_path: Path, text: str) -> None:
    (home_path / "config.toml").write_text(text, encoding="utf-8")


def process_env(**extra) -> dict:
    """Environment for a second real process that talks to this test's database."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "fermix_site.settings"
    env["FERMIX_SECRET_KEY"] = settings.SECRET_KEY  # signed task packages must verify in the other process
    settings_dict = connection.settings_dict
    if connection.vendor == "sqlite":
        env["DATABASE_URL"] = "sqlite:///" + settings_dict["NAME"]
    else:
        env["DATABASE_URL"] = (
            f"postgres://{settings_dict['USER']}@{settings_dict['HOST']}:{settings_dict['PORT']}/{settings_dict['NAME']}"
        )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_manage(*args, env=None, input=None, timeout=120) -> subprocess.CompletedProcess:
    """Run `python manage.py ARGS` as a real process against this test's database."""
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env or process_env(),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
