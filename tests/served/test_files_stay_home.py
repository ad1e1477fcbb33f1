"""Nothing the running service writes lands outside FERMIX_HOME, and what it writes there is private."""

import os
import re
import shutil
import stat

import pytest

from tests.fakeprovider import provider_config_toml
from tests.live import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.live]

WRITES = "open,openat,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,bind,symlink,symlinkat," \
         "link,linkat,truncate"
WRITE_FLAGS = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC")
# POSIX semaphores and multiprocessing's shared memory (the task cluster's queues): created in the
# kernel's /dev/shm and unlinked at once; glibc puts them there whatever the environment says.
KERNEL_IPC = re.compile(r"^/dev/shm/(sem\.|pym-)")


def written_paths(trace: str) -> set[str]:
    """Every path a successful write-like system call named (both names of a rename)."""
    paths = set()
    for line in trace.splitlines():
        call = re.match(r"^\d+ +(\w+)\((.*)\) += (-?\d+)", line)
        if not call or call.group(3).startswith("-"):
            continue
        name, args = call.group(1), call.group(2)
        if name in {"open", "openat"} and not WRITE_FLAGS.search(args):
            continue
        if name == "bind" and "AF_UNIX" not in args:
            continue
        paths.update(re.findall(r'"([^"]*)"', args))
    return paths


def outside(paths: set[str], home) -> set[str]:
    allowed = (str(home) + "/",)
    return {p for p in paths if not p.startswith(allowed) and p != "/dev/null" and not KERNEL_IPC.match(p)
            # Python's bytecode cache of the installed code itself, not data.
            and not (p.startswith(str(ROOT) + "/") and "/__pycache__/" in p)}


@pytest.mark.skipif(shutil.which("strace") is None, reason="no strace (scripts/test-setup.sh installs it)")
def test_the_server_writes_nothing_outside_fermix_home(fermix_server, fake_provider, tmp_path):
    trace = tmp_path / "strace.log"
    home = tmp_path / "home"
    server = fermix_server(home=home, config=provider_config_toml(fake_provider),
                           wrapper=["strace", "-f", "-qq", "-o", str(trace), "-e", f"trace={WRITES}"])
    key = server.key("ops", "operator")
    with server.client(key) as client:
        conv = "/api/v1/agents/main/conversations/telegram:1"
        assert client.post(conv + "/messages", json={"role": "user", "content": "I live in Porto"}).status_code == 201
        stored = client.post("/api/v1/agents/main/tools/memory_store", json={
            "conversation": "telegram:1", "trust": "operator",
            "arguments": {"key": "home_city", "value": "Lives in Porto", "category": "identity"}})
        assert stored.json()["ok"]
        assert client.post(conv + "/turns", json={"content": "hello"}).status_code == 200
        assert client.post(conv + "/messages", content=b"x" * 2048,
                           headers={"Content-Type": "application/json"}).status_code == 400
    assert (home / "run" / "gunicorn.ctl").exists()  # the control socket is this install's own
    server.stop()
    paths = written_paths(trace.read_text())
    assert any(p.endswith("/memory/main/USER.md") for p in paths)  # the trace saw the service's writes
    assert outside(paths, home) == set()
    assert [p for p in paths if KERNEL_IPC.match(p) and os.path.exists(p)] == []  # unlinked at once


def test_every_file_under_fermix_home_is_private_whoever_made_the_folder(fermix_server, fake_provider, tmp_path):
    home = tmp_path / "shared-home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)  # made by someone else, readable by all
    server = fermix_server(home=home, umask=0o022, config=provider_config_toml(fake_provider))
    key = server.key("ops", "operator")
    with server.client(key) as client:
        client.post("/api/v1/agents/main/tools/memory_store", json={
            "conversation": "telegram:1", "trust": "operator",
            "arguments": {"key": "home_city", "value": "Lives in Porto", "category": "identity"}})
    server.manage("fermix_setup", "--noinput")
    server.stop()
    created = [p for p in home.rglob("*") if not p.is_socket()]
    assert home / "memory.db" in created and home / "memory" / "main" / "USER.md" in created
    loose = {str(p.relative_to(home)): oct(stat.S_IMODE(p.stat().st_mode)) for p in created
             if stat.S_IMODE(p.stat().st_mode) & 0o077}
    assert loose == {}
