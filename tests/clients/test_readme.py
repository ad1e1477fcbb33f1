"""clients/python/README.md's quick start, run as written: install the package, make a key, run the snippet."""

import os
import shlex
import subprocess
import sys

import pytest

from tests.clients.readme import code_blocks, commands
from tests.fakeprovider import Reply
from tests.live import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.live]

README = ROOT / "clients/python/README.md"


def test_the_readmes_quick_start_works_from_the_repository(served, script, tmp_path):
    target, key = tmp_path / "site", None
    for line in commands(README):
        argv = shlex.split(line)
        if argv[:2] == ["pip", "install"]:
            # Into a folder of its own rather than the suite's venv, so the snippet imports the installed copy.
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                            *argv[2:]], cwd=ROOT, check=True, timeout=300)
        elif argv[:2] == ["python", "manage.py"]:
            key = served.manage(*argv[2:]).stdout.strip().split()[-1]
        else:
            raise AssertionError(f"the README runs a command this test does not know: {line}")
    assert (target / "fermix_client/py.typed").exists() and key
    script.push("turn", Reply(text="You drink green tea."))
    snippet = code_blocks(README, "python")[0]
    assert len(snippet.strip().splitlines()) <= 10
    env = {**os.environ, "PYTHONPATH": str(target), "FERMIX_URL": served.base, "FERMIX_API_KEY": key}
    run = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "You drink green tea."
    assert "drinks green tea" in run.stdout.splitlines()[0]
    with served.client(served.operator) as http:
        window = http.get("/api/v1/agents/main/conversations/telegram:42/messages").json()["messages"]
    assert [m["content"] for m in window] == ["I drink green tea every morning.", "What do I drink?",
                                              "You drink green tea."]
