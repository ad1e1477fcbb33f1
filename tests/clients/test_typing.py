"""fermix_client is typed: the package and a bot's use of both clients pass `mypy --strict`."""

import subprocess
import sys

from tests.clients.conftest import CLIENT_SRC

USE = '''
from fermix_client import AsyncClient, Client, Conflict


def ask(question: str) -> str:
    with Client("http://127.0.0.1:8000", api_key="k") as fermix:
        fermix.append("telegram:1", question, trust="operator", chat_type="group")
        return str(fermix.turn("telegram:1", question)["reply"])


async def ask_async(question: str) -> str:
    async with AsyncClient("http://127.0.0.1:8000", api_key="k") as fermix:
        try:
            answer = await fermix.turn("telegram:1", question, idempotency_key="update-1")
        except Conflict as exc:
            return exc.code
        return str(answer["reply"])
'''


def mypy(*targets, tmp_path):
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), *targets],
                          env={"MYPYPATH": str(CLIENT_SRC), "PATH": ""}, capture_output=True, text=True, timeout=300)


def test_the_package_passes_mypy_strict(tmp_path):
    run = mypy(str(CLIENT_SRC / "fermix_client"), tmp_path=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_code_using_the_clients_type_checks_and_a_wrong_argument_does_not(tmp_path):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(USE)
    bad.write_text(USE.replace('trust="operator"', 'trust="owner"'))
    assert mypy(str(good), tmp_path=tmp_path).returncode == 0
    wrong = mypy(str(bad), tmp_path=tmp_path)
    assert wrong.returncode == 1 and "trust" in wrong.stdout
