"""Serve the web app (gunicorn) and run the django-q2 cluster together until Ctrl-C.

gunicorn runs threaded workers (`fermix_site.serving.ThreadWorker`, see docs/deployment.md for why):
FERMIX_WEB_WORKERS processes of FERMIX_WEB_THREADS threads. Everything gunicorn writes (its control
socket, the workers' heartbeat files) and every temporary file stays inside $FERMIX_HOME/run.
"""

import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from fermix_site.conf import conf
from fermix_site.serving import DEFAULT_THREADS, GRACEFUL_S, gunicorn_command
from fermix_site.settings import BASE_DIR, RUN_DIR


def print_next_steps(out, base: str) -> None:
    """The first run's next steps; later runs repeat only the provider step, while none is configured."""
    shown = conf.home / ".next-steps-shown"
    first_run = not shown.exists()
    steps = []
    if not conf.provider_chain:
        steps.append("Configure a model provider (nothing is reviewed into memory without one): add a "
                     f"[fermix_core.providers.<name>] table to {conf.config_path} (docs/providers.md); the "
                     "file is re-read while serving.")
    if first_run:
        steps += ["Create an API key for a bot: python manage.py apikey_create --name my-bot --role channel",
                  "Check the installation and the provider: python manage.py doctor",
                  "A first review: once a bot has posted messages (docs/api.md), python manage.py memory_review "
                  "--now shows what the model saved",
                  f"Docs: {base}/api/v1/docs (the API), docs/operations.md (commands), docs/providers.md."]
        shown.touch()
    if steps:
        out.write("Next steps:\n" + "\n".join(f"  {n}. {step}" for n, step in enumerate(steps, start=1)))


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs, read from /proc (empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])  # after the name, which may hold spaces
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(entry))
    found, pending = [], list(children.get(pid, []))
    while pending:
        found.append(pending.pop())
        pending += children.get(found[-1], [])
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process it started. A child that did not stop in time may have started
    others (the task cluster's sentinel and workers): killing only the child left them running, orphaned,
    holding the database."""
    for target in [*descendants(pid), pid]:
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Command(BaseCommand):
    help = "Serve the web app and the django-q2 cluster together; Ctrl-C stops both."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default=os.environ.get("FERMIX_BIND", "127.0.0.1"))
        parser.add_argument("--port", default=os.environ.get("FERMIX_PORT", "8000"))
        parser.add_argument("--web-workers", type=int, default=int(os.environ.get("FERMIX_WEB_WORKERS", "2")))
        parser.add_argument("--web-threads", type=int,
                            default=int(os.environ.get("FERMIX_WEB_THREADS", DEFAULT_THREADS)))

    def handle(self, *args, **options):
        port = options["port"]
        if not str(port).isdigit() or not 0 < int(port) < 65536:
            raise CommandError(f"FERMIX_PORT must be a port number from 1 to 65535, got {port!r}")
        bind = options["bind"]
        address = f"[{bind}]:{port}" if ":" in bind else f"{bind}:{port}"
        run = RUN_DIR
        web = gunicorn_command(address=address, workers=options["web_workers"], threads=options["web_threads"],
                               run_dir=run, turn_ms=conf.timeouts.turn_ms)
        cluster = [sys.executable, str(BASE_DIR / "manage.py"), "qcluster"]
        names = ("web server", "task cluster")
        # Temporary files of the servers (Python's, SQLite's) go under $FERMIX_HOME, never to /tmp.
        env = {**os.environ, "TMPDIR": str(run), "SQLITE_TMPDIR": str(run)}
        children = [subprocess.Popen(cmd, cwd=BASE_DIR, env=env) for cmd in (web, cluster)]
        self.stdout.write(f"Fermix is serving http://{address}/ (admin at /admin/); Ctrl-C stops it.")
        print_next_steps(self.stdout, f"http://{address}")
        self.stdout.flush()
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping and all(child.poll() is None for child in children):
                time.sleep(0.2)
        finally:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + GRACEFUL_S + 5  # the web server's own graceful stop first
            for name, child in zip(names, children, strict=True):
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    kill_tree(child.pid)
                    child.wait()
                    self.stderr.write(f"the {name} did not stop within {GRACEFUL_S + 5} s of the stop signal: "
                                      "killed with every process it started")
        failed = [name for name, child in zip(names, children, strict=True) if child.returncode not in (0, -15)]
        if not stopping and failed:
            raise CommandError(f"the {' and the '.join(failed)} stopped unexpectedly; see the log above")
