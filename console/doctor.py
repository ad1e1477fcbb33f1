"""`doctor`: one pass over everything that makes Fermix healthy, as structured results.

Each check returns a `Check` with a status (`ok`, `warning`, `error`), a one-line message a person
can act on, and details. The command prints them (or `--json`) and exits non-zero on any error; the
admin shows the same list.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from fermix_site import conf as conf_module
from fermix_site import health
from fermix_site.conf import ConfigError, conf
from fermix_site.queries import database_answers
from fermix_site.storage import SQLITE_SYNCHRONOUS, SYNCHRONOUS_LEVELS, storage_state
from memory import checks as memory_checks
from memory import embeddings, vectors
from memory.models import ReviewRun
from memory.search import ann
from providers.models import ModelCall
from providers.probe import provider_probe
from resources.bootstrap import BOOTSTRAP_TYPES, TEMPLATE_DIR, bootstrap_template_check
from resources.catalog import FILE_NAMES, content_hash
from resources.files import read_bytes, resource_file_path
from resources.models import Resource, ResourceRevision

OK, WARNING, ERROR = "ok", "warning", "error"
PROBE_TIMEOUT_S = 3.0
RECENT = datetime.timedelta(hours=24)


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    message: str
    details: dict = field(default_factory=dict)


def _connection():
    return connections["default"]


def check_config() -> Check:
    try:
        config = conf_module.load()
    except ConfigError as exc:
        return Check("config", ERROR, f"configuration is invalid: {exc}")
    where = str(config.config_path) if config.config_path.exists() else "defaults (no config.toml)"
    return Check("config", OK, f"configuration is valid: {where}", {"path": str(config.config_path)})


def check_home_writable() -> Check:
    home = Path(conf.home)
    try:
        fd, probe = tempfile.mkstemp(dir=home, prefix=".doctor-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return Check("home_writable", ERROR, f"FERMIX_HOME {home} is not writable: {exc.strerror}",
                     {"path": str(home)})
    return Check("home_writable", OK, f"FERMIX_HOME {home} is writable", {"path": str(home)})


def check_storage() -> Check:
    """The same rule as /healthz: at least `[fermix_core.storage] min_free_mb` free under FERMIX_HOME."""
    state = storage_state()
    if state["free_bytes"] is None:
        return Check("storage", ERROR, f"cannot tell the free space under FERMIX_HOME: {state['error']}", state)
    free_mb = state["free_bytes"] / (1024 * 1024)
    if not state["ok"]:
        return Check("storage", ERROR, f"only {free_mb:,.1f} MiB free under FERMIX_HOME (less than min_free_mb = "
                     f"{conf.storage.min_free_mb}); free some space: writes answer 507 storage_full when the disk "
                     "fills", state)
    return Check("storage", OK, f"{free_mb:,.0f} MiB free under FERMIX_HOME", state)


def check_migrations() -> Check:
    connection = _connection()
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        names = [f"{m.app_label}.{m.name}" for m, _ in pending]
        return Check("migrations", ERROR, f"{len(names)} migration(s) not applied: run `python manage.py migrate`",
                     {"pending": names})
    return Check("migrations", OK, "database schema is up to date", {"vendor": connection.vendor})


def _from_system_check(name: str, messages, ok_message: str) -> Check:
    if not messages:
        return Check(name, OK, ok_message)
    worst = ERROR if any(m.is_serious() for m in messages) else WARNING
    text = " ".join(f"{m.msg} ({m.id})" for m in messages)
    return Check(name, worst, text, {"hints": [m.hint for m in messages if m.hint]})


def check_fts() -> Check:
    if _connection().vendor == "postgresql":
        return _from_system_check("fts_triggers", memory_checks.check_search_indexes(),
                                  "PostgreSQL search vectors are kept by the database; their GIN indexes are present")
    if _connection().vendor != "sqlite":
        return Check("fts_triggers", OK, "no full-text index on this database")
    return _from_system_check("fts_triggers", memory_checks.check_fts_triggers(),
                              "FTS5 mirrors and their triggers are present")


def check_wal() -> Check:
    if _connection().vendor != "sqlite":
        return Check("wal", OK, "not SQLite: journal mode does not apply")
    return _from_system_check("wal", memory_checks.check_wal(), "SQLite journal_mode is WAL")


def check_revision_hashes() -> Check:
    """Every stored revision's hash and size still match its content (redacted tombstones excepted)."""
    bad, total = [], 0
    rows = ResourceRevision.objects.filter(redacted_at__isnull=True).order_by("pk").values_list(
        "agent_id", "resource_type", "scope_id", "revision", "content", "content_hash", "byte_size")
    for agent_id, resource_type, scope_id, number, content, digest, size in rows.iterator(chunk_size=200):
        total += 1
        if content_hash(content) != digest or len(content.encode("utf-8")) != size:
            scope = "" if scope_id == "global" else f" [{scope_id}]"
            bad.append(f"{agent_id}/{resource_type}{scope} r{number}")
    if bad:
        return Check("revision_hashes", ERROR, f"{len(bad)} revision(s) do not match their stored hash: "
                     f"{', '.join(bad[:10])}", {"mismatched": bad, "checked": total})
    return Check("revision_hashes", OK, f"all {total} revision hashes match their content", {"checked": total})


def check_prompt_files() -> Check:
    """Every prompt file on disk holds exactly its resource's current revision."""
    differ, total = [], 0
    resources = Resource.objects.filter(resource_type__in=FILE_NAMES, current_revision__gt=0).order_by("pk")
    for resource in resources:
        total += 1
        current = ResourceRevision.objects.filter(
            agent_id=resource.agent_id, resource_type=resource.resource_type, scope_id=resource.scope_id,
            revision=resource.current_revision).values_list("content", flat=True).first()
        path = resource_file_path(agent_id=resource.agent_id, resource_type=resource.resource_type)
        if current is None or read_bytes(path) != current.encode("utf-8"):
            differ.append(f"{resource.agent_id}/{FILE_NAMES[resource.resource_type]}")
    if differ:
        # A hand edit not yet captured, or a rebuild that could not write the file (a full disk).
        return Check("prompt_files", WARNING, f"{len(differ)} prompt file(s) differ from their current revision: "
                     f"{', '.join(differ[:10])} (`resource_show TYPE` shows what the revision holds)",
                     {"differ": differ, "checked": total})
    return Check("prompt_files", OK, f"all {total} prompt files hold their current revision", {"checked": total})


def _agents() -> list[str]:
    found = set(Resource.objects.filter(resource_type__in=BOOTSTRAP_TYPES).values_list("agent_id", flat=True))
    return sorted(found | {conf.memory.agent_id})


def check_bootstrap_templates(template_dir: Path | None = None) -> Check:
    """Shipped FERMIX.md, SOUL.md and REALTIME.md against what each install's seed revision recorded."""
    details, drifted, missing, untracked = {}, [], [], []
    for agent_id in _agents():
        result = bootstrap_template_check(agent_id=agent_id, template_dir=template_dir)
        details[agent_id] = asdict(result)
        drifted += [f"{agent_id}/{n}" for n in result.drifted]
        missing += [f"{agent_id}/{n}" for n in result.missing]
        untracked += [f"{agent_id}/{n}" for n in result.untracked]
    notes = []
    if drifted:
        notes.append(f"shipped template changed since seeding: {', '.join(drifted)} (compare your file with "
                     f"the current template in {TEMPLATE_DIR} and pull in what you want)")
    if missing:
        notes.append(f"missing: {', '.join(missing)} (run `python manage.py fermix_setup --noinput`)")
    if untracked:
        notes.append(f"seeded before revision tracking, nothing to compare: {', '.join(untracked)}")
    status = WARNING if drifted or missing else OK
    message = "; ".join(notes) if notes else "bootstrap files match the templates they were seeded from"
    return Check("bootstrap_templates", status, message, details)


def check_worker() -> Check:
    state = health.worker_state()
    if state["state"] == "alive":
        return Check("worker", OK, f"django-q2 cluster seen {state['age_seconds']:.0f}s ago", state)
    if state["state"] == "never_seen":
        return Check("worker", WARNING, "django-q2 cluster has never been seen: start it with "
                     "`python manage.py qcluster` (make run does)", state)
    return Check("worker", WARNING, f"django-q2 cluster last seen {state['age_seconds']:.0f}s ago: is it running?",
                 state)


def _database() -> Check | None:
    try:
        database_answers(_connection())
    except DatabaseError as exc:
        return Check("database", ERROR, f"database unreachable: {exc}")
    return None


def check_durability() -> Check:
    """`[fermix_core.storage] durability` as this process's connection applies it (docs/reliability.md)."""
    durability = conf.storage.durability
    if _connection().vendor != "sqlite":
        return Check("durability", OK, "PostgreSQL: a commit is as durable as the server's synchronous_commit "
                     "makes it", {"durability": durability})
    with _connection().cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        level = SYNCHRONOUS_LEVELS.get(cursor.fetchone()[0], "unknown")
    details = {"durability": durability, "synchronous": level}
    if level != SQLITE_SYNCHRONOUS[durability]:
        return Check("durability", WARNING, f'durability is "{durability}" but SQLite runs with synchronous '
                     f"{level}; restart the server to apply the setting", details)
    return Check("durability", OK, f'durability "{durability}": SQLite synchronous {level} in WAL', details)


def check_embeddings() -> Check:
    """Vectors per embedding model: how many messages and live memory rows have one."""
    if conf.embeddings.backend == "none":
        return Check("embeddings", OK, 'embeddings are off (backend = "none"): recall is lexical')
    models = vectors.coverage()
    current = next((m for m in models if m["current"]), None)
    if current is None:
        return Check("embeddings", WARNING, "the embedding model could not be loaded", {"models": models})
    missing = sum(vectors.pending_counts(current["model_id"], older_than=vectors.GRACE))
    text = (f"{current['model_id']}: {current['messages']:,} of {current['messages_total']:,} messages, "
            f"{current['memories']:,} of {current['memories_total']:,} memory rows embedded")
    details = {"models": models, "vector_indexes": ann.status()}
    if missing:
        return Check("embeddings", WARNING, text + f"; {missing:,} wait (the cluster embeds them, or run "
                     "`python manage.py embeddings_rebuild`); hybrid recall is lexical until they are done",
                     details)
    large = ann.large_scopes(current["model_id"])
    indexed = {(i["agent_id"], i.get("kind")) for i in details["vector_indexes"] if i["whole"]}
    missing_indexes = [(agent, kind, n) for agent, kind, n in large if (agent, kind) not in indexed]
    unindexed = [f"{agent} {kind}" for agent, kind, _ in missing_indexes]
    if unindexed:
        why = _why_no_index(missing_indexes)
        return Check("embeddings", WARNING, text + f"; no vector index on this node for {', '.join(unindexed)} "
                     f"({why}); their recall is lexical until there is", details)
    return Check("embeddings", OK, text + (f"; {len(indexed)} vector index(es)" if indexed else ""), details)


def _why_no_index(missing: list[tuple[str, str, int]]) -> str:
    """Why large scopes have no vector index on this node, and what to do about it."""
    if not ann.available():
        return "usearch is not installed"
    model = embeddings.embedder()
    if not all(ann.fits(model.model_id, model.dimensions, kind, agent, n) for agent, kind, n in missing):
        return (f"they do not fit on this disk above [fermix_core.storage] min_free_mb = {conf.storage.min_free_mb}: "
                "free some space")
    return "run `python manage.py vector_index_rebuild`"


def check_providers() -> Check:
    """The provider chain: configured at all, and each provider answering a cheap request in a few seconds."""
    chain = conf.provider_chain
    if not chain:
        return Check("providers", WARNING, "no model provider is configured: messages are stored, but nothing is "
                     "reviewed into memory and turns cannot answer; add a [fermix_core.providers.<name>] table to "
                     f"{conf.config_path} (docs/providers.md) and run doctor again", {"providers": []})
    probes = [provider_probe(provider, timeout_s=PROBE_TIMEOUT_S) for provider in chain]
    details = {"providers": [asdict(probe) for probe in probes]}
    down = [p for p in probes if not p.reachable]
    text = "; ".join(f"{p.provider} at {p.url} answers" if p.reachable else f"{p.provider} at {p.url}: {p.message}"
                     for p in probes)
    if len(down) == len(probes):
        return Check("providers", ERROR, f"no provider answers: {text}", details)
    if down:
        return Check("providers", WARNING, f"{len(down)} of {len(probes)} provider(s) do not answer: {text}", details)
    return Check("providers", OK, text, details)


def check_last_model_call() -> Check:
    """How the most recent model call (every attempt of one chat()) ended."""
    last = ModelCall.objects.order_by("-created_at", "-pk").first()
    if last is None:
        return Check("last_model_call", OK, "no model call yet")
    attempts = list(ModelCall.objects.filter(call_id=last.call_id).order_by("attempt"))
    answered = next((a for a in attempts if a.outcome == ModelCall.Outcome.OK), None)
    when = f"{last.created_at:%Y-%m-%d %H:%M:%S} UTC"
    details = {"call_id": last.call_id, "agent_tag": last.agent_tag, "at": last.created_at.isoformat(),
               "attempts": [{"provider": a.provider, "outcome": a.outcome, "http_status": a.http_status,
                             "error": a.error} for a in attempts]}
    if answered:
        fell = [a.provider for a in attempts
                if a.outcome == ModelCall.Outcome.FALLBACK and a.provider != answered.provider]
        note = f" after {', '.join(fell)} failed" if fell else ""
        return Check("last_model_call", OK, f"the last model call ({last.agent_tag}, {when}) was answered by "
                     f"{answered.provider}/{answered.model} in {answered.latency_ms:,} ms{note}", details)
    failed = attempts[-1]
    if failed.outcome == ModelCall.Outcome.FALLBACK:
        return Check("last_model_call", OK, f"the last model call ({last.agent_tag}, {when}) is still trying its "
                     f"providers: {failed.provider} failed: {failed.error[:300]}", details)
    return Check("last_model_call", WARNING, f"the last model call ({last.agent_tag}, {when}) failed: "
                 f"{failed.error[:500]}", details)


def check_reviews() -> Check:
    """Reviews that failed in the last 24 hours: their conversations wait, memory learns nothing from them."""
    since = timezone.now() - RECENT
    recent = ReviewRun.objects.filter(started_at__gte=since)
    failed = recent.filter(status=ReviewRun.Status.FAILED)
    count = failed.count()
    if not count:
        return Check("reviews", OK, f"no review failed in the last 24 hours ({recent.count():,} ran)")
    last = failed.order_by("-started_at", "-pk").first()
    return Check("reviews", WARNING, f"{count:,} review(s) failed in the last 24 hours; the last, of "
                 f"{last.conversation_key} at {last.started_at:%Y-%m-%d %H:%M:%S} UTC: {last.reason[:300]} "
                 "(they are tried again; `python manage.py memory_review --now` runs them at once)",
                 {"failed": count, "last_run_id": last.pk})


CHECKS = (check_migrations, check_fts, check_wal, check_durability, check_revision_hashes, check_prompt_files,
          check_bootstrap_templates, check_worker, check_embeddings, check_last_model_call,
          check_reviews)


def doctor_run() -> list[Check]:
    """Run every check; database checks are skipped (one error) when the database cannot be reached."""
    results = [check_config(), check_home_writable(), check_storage(), check_providers()]
    unreachable = _database()
    if unreachable:
        return [*results, unreachable]
    results.append(Check("database", OK, f"database reachable ({_connection().vendor})"))
    for check in CHECKS:
        try:
            results.append(check())
        except DatabaseError as exc:
            results.append(Check(check.__name__.removeprefix("check_"), ERROR, f"could not run: {exc}"))
    return results


def overall(results: list[Check]) -> str:
    statuses = {r.status for r in results}
    return ERROR if ERROR in statuses else WARNING if WARNING in statuses else OK


def doctor_report() -> dict:
    """The JSON form: {"status": ..., "checks": [{name, status, message, details}, …]}."""
    results = doctor_run()
    return {"status": overall(results), "checks": [asdict(r) for r in results]}
