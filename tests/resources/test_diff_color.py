"""`resource_diff --color auto|always|never`: ANSI colours on a terminal, plain text elsewhere."""

import io
import os
import pty
import subprocess
import sys

import pytest
from django.core.management import call_command

from resources.bootstrap import bootstrap_seed
from resources.services import resource_write_file
from tests.conftest import ROOT, process_env, run_manage

pytestmark = pytest.mark.django_db

RED, GREEN, CYAN, BOLD, RESET = "\033[31m", "\033[32m", "\033[36m", "\033[1m", "\033[0m"


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def two_souls(home):
    bootstrap_seed(agent_id="main")
    resource_write_file(agent_id="main", resource_type="soul_md", content="Be kind.\nBe brief.\n",
                        mutation_source="manual_edit")
    resource_write_file(agent_id="main", resource_type="soul_md", content="Be kind.\nBe exact.\n",
                        mutation_source="manual_edit")


def diff(*flags, stdout=None):
    out = stdout or io.StringIO()
    call_command("resource_diff", "soul_md", "2", "3", *flags, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_always_colours_removed_added_and_hunk_lines(two_souls):
    out = diff("--color", "always")
    assert f"{RED}-Be brief.{RESET}\n" in out and f"{GREEN}+Be exact.{RESET}\n" in out
    assert f"{CYAN}@@ -1,2 +1,2 @@{RESET}\n" in out
    assert out.startswith(f"{BOLD}--- soul_md r2 (") and f"{BOLD}+++ soul_md r3 (" in out
    assert " Be kind.\n" in out  # context lines stay plain


def test_never_is_the_plain_diff_even_on_a_terminal(two_souls):
    out = diff("--color", "never", stdout=Terminal())
    assert "\033[" not in out and "-Be brief.\n+Be exact.\n" in out
    assert out == diff()  # what a pipe gets by default


def test_auto_colours_only_a_terminal(two_souls, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert "\033[" not in diff("--color", "auto")
    assert f"{RED}-Be brief.{RESET}" in diff("--color", "auto", stdout=Terminal())
    assert f"{RED}-Be brief.{RESET}" in diff(stdout=Terminal())  # auto is the default


def test_auto_honours_no_color_and_djangos_colour_flags(two_souls, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\033[" not in diff(stdout=Terminal())
    assert RED in diff("--force-color", stdout=Terminal()) and RED in diff("--color", "always")
    monkeypatch.delenv("NO_COLOR")
    assert "\033[" not in diff("--no-color", stdout=Terminal())


@pytest.mark.django_db(transaction=True)
def test_a_real_process_colours_a_pty_and_not_a_pipe(two_souls):
    piped = run_manage("resource_diff", "soul_md", "2", "3")
    assert piped.returncode == 0 and "-Be brief.\n" in piped.stdout and "\033[" not in piped.stdout
    forced = run_manage("resource_diff", "soul_md", "2", "3", "--color", "always")
    assert f"{RED}-Be brief.{RESET}" in forced.stdout

    leader, follower = pty.openpty()
    env = process_env()
    env.pop("NO_COLOR", None)
    with subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "resource_diff", "soul_md", "2", "3"],
                          cwd=ROOT, env=env, stdout=follower, stderr=subprocess.DEVNULL) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the other end closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=120) == 0
    os.close(leader)
    assert f"{RED}-Be brief.{RESET}" in b"".join(chunks).decode()
