"""`Idempotency-Key` on message appends and turns: a bot that retries stores nothing twice (CONTRACT §8).

A request with the header is scoped by its API key, its endpoint (method, agent, conversation, action)
and the key, and remembers a hash of its body as the endpoint read it (after defaults, so key order and
whitespace do not matter). Within KEPT_FOR a retry with the same body answers the first answer again
(`200`, `Idempotent-Replay: true`); another body is `409 idempotency_conflict`.

An append writes its record in the transaction of the message (`message_append(also=…)`): a server killed
between the commit and the answer leaves both, and the retry replays. A turn holds no transaction across
its model call, so its record is a claim: written `running` in the transaction of the user message and
`done`, with the answer, in the transaction of the reply. While the claim is held a retry answers
`409 idempotency_in_progress`. A retry takes the claim over when the attempt failed (the user message is
kept, so it is `failed`), when its process is gone (it ran on this machine and no longer runs) or when
it is older than TURN_LEASE (wherever it ran); the retry resumes the turn from the stored user message.
An attempt that lost its claim stores no reply.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated

from django.db import IntegrityError
from django.http import JsonResponse
from django.utils import timezone
from ninja import Header, Schema, Status
from ninja.responses import NinjaJSONEncoder
from pydantic import WithJsonSchema

from api.errors import ApiError
from api.models import IdempotencyRecord as Record
from memory.models import Message

HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replay"
MAX_KEY_CHARS = 200
KEPT_FOR = timedelta(hours=24)
# Longer than any turn the server lets run (a web worker is stopped after 300 s): a claim this old
# belongs to an attempt that will never finish, wherever it ran.
TURN_LEASE = timedelta(minutes=10)
State = Record.State

# The lengths are documented, not validated by ninja: an invalid key is a 400 (CONTRACT §8), not a 422.
KeyHeader = Annotated[str | None, WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS}),
                      Header(None, alias=HEADER, description=(
                          "Any 1-200 characters. A retry with the same key and body within 24 h returns the first "
                          "answer (200, `Idempotent-Replay: true`) and stores nothing; another body is 409."))]


def documented(replay: str) -> dict:
    """The OpenAPI additions of an idempotent operation: what its 200 is, and the replay header."""
    # ninja keys its responses by int; a str key would be a second "200" in the document.
    return {"responses": {200: {
        "description": replay,
        "headers": {REPLAY_HEADER: {"schema": {"type": "string", "enum": ["true"]},
                                    "description": "present on a replay"}}}}}


@dataclass(frozen=True)
class Keyed:
    """One request that carried an Idempotency-Key."""

    api_key_id: int
    endpoint: str
    key: str
    request_hash: str

    @property
    def scope(self) -> str:
        return hashlib.sha256(f"{self.endpoint}\n{self.key}".encode()).hexdigest()


def keyed(request, *, key: str | None, endpoint: str, payload: Schema) -> Keyed | None:
    """The request's key and body hash, or None without the header; an empty or over-long key is a 400."""
    if key is None:
        return None
    key = key.strip()
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        raise ApiError(400, "invalid_idempotency_key", f"the {HEADER} header must be 1-{MAX_KEY_CHARS} characters")
    body = json.dumps(payload.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return Keyed(request.auth.key_id, endpoint, key, hashlib.sha256(body.encode()).hexdigest())


def rendered(schema: type[Schema], data: dict) -> dict:
    """`data` as the endpoint answers it in JSON, so a replay repeats it exactly."""
    return json.loads(json.dumps(schema.model_validate(data).model_dump(), cls=NinjaJSONEncoder))


def append_once(once: Keyed | None, append: Callable[[Callable[[Message], None] | None], Message],
                answer: Callable[[Message], dict], schema: type[Schema]):
    """`append(also)` stores one message, running `also` in its transaction; `answer` (of `schema`) is
    what the endpoint answers for it: 201 the first time, the same answer replayed to a retry."""
    if once is None:
        return Status(201, answer(append(None)))
    found = _found(once)
    if found is not None:
        return _replay(found)
    try:
        message = append(lambda message: _record(once, state=State.DONE, status=201,
                                                 response=rendered(schema, answer(message)), message_id=message.id))
    except IntegrityError as exc:
        return _after_race(once, exc)
    return Status(201, answer(message))


def turn_once(once: Keyed | None, run: Callable[..., dict], schema: type[Schema]) -> dict | JsonResponse:
    """`run(resume=, on_message=, on_answer=)` is one turn (`turn_run`), answered as `schema`."""
    if once is None:
        return run()
    found = _found(once)
    if found is not None and found.state == State.DONE:
        return _replay(found)
    claim = TurnClaim(once, found)
    try:
        return run(resume=claim.resumed, on_message=claim.hold,
                   on_answer=lambda outcome: claim.finish(rendered(schema, outcome)))
    except Exception as exc:
        claim.release()
        if isinstance(exc, IntegrityError):
            return _after_race(once, exc)
        raise


class TurnClaim:
    """One attempt's hold on a turn's key: new (written with the user message) or taken over."""

    def __init__(self, once: Keyed, found: Record | None):
        self.once, self.token = once, f"{_this_process()} {uuid.uuid4().hex[:12]}"
        self.pk, self.resumed = None, False
        if found is not None:
            self._take_over(found)

    def _take_over(self, found: Record) -> None:
        if found.state == State.RUNNING and not _abandoned(found):
            raise _in_progress(self.once.key)
        # The claim is a conditional UPDATE: of two retries taking the same record, one wins.
        taken = Record.objects.filter(pk=found.pk, state=found.state, claimed_by=found.claimed_by).update(
            state=State.RUNNING, claimed_by=self.token, claimed_at=timezone.now())
        if not taken:
            raise _in_progress(self.once.key)
        self.pk, self.resumed = found.pk, True

    def hold(self, message: Message) -> None:
        """In the transaction of the user message."""
        self.pk = _record(self.once, state=State.RUNNING, message_id=message.id, claimed_by=self.token,
                          claimed_at=timezone.now()).pk

    def finish(self, response: dict) -> None:
        """In the transaction of the reply: an attempt whose claim was taken over stores no reply."""
        if not self._mine().update(state=State.DONE, status=200, response=response):
            raise _in_progress(self.once.key)

    def release(self) -> None:
        """The attempt failed after (or before) storing the user message: a retry resumes the turn."""
        if self.pk is not None:
            self._mine().filter(state=State.RUNNING).update(state=State.FAILED)

    def _mine(self):
        return Record.objects.filter(pk=self.pk, claimed_by=self.token)


def records_prune() -> int:
    """Delete the records older than KEPT_FOR (they no longer count); returns how many."""
    return Record.objects.filter(created_at__lt=timezone.now() - KEPT_FOR).delete()[0]


def _found(once: Keyed) -> Record | None:
    """The record of this key within KEPT_FOR; a retry with another body is refused."""
    record = Record.objects.filter(api_key_id=once.api_key_id, scope=once.scope,
                                   created_at__gte=timezone.now() - KEPT_FOR).first()
    if record is not None and record.request_hash != once.request_hash:
        raise ApiError(409, "idempotency_conflict", f"the {HEADER} {once.key!r} was already used with another "
                                                    "body; send a new key for a new request")
    return record


def _record(once: Keyed, **fields) -> Record:
    # An expired record of the same key still holds the unique index until it is pruned.
    Record.objects.filter(api_key_id=once.api_key_id, scope=once.scope,
                          created_at__lt=timezone.now() - KEPT_FOR).delete()
    return Record.objects.create(api_key_id=once.api_key_id, scope=once.scope, endpoint=once.endpoint, key=once.key,
                                 request_hash=once.request_hash, created_at=timezone.now(), **fields)


def _replay(record: Record) -> JsonResponse:
    if record.state != State.DONE:
        raise _in_progress(record.key)
    return JsonResponse(record.response, status=200, content_type="application/json; charset=utf-8",
                        headers={REPLAY_HEADER: "true"})


def _after_race(once: Keyed, exc: IntegrityError):
    """A concurrent request with the same key committed first, so this one stored nothing: answer as its retry."""
    found = _found(once)
    if found is None:
        raise exc
    return _replay(found)


def _in_progress(key: str) -> ApiError:
    return ApiError(409, "idempotency_in_progress", f"a request with the {HEADER} {key!r} is still running; "
                                                    "retry later for its answer")


# --- whether the attempt holding a claim still runs ---------------------------------------------------


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


BOOT_ID = _read("/proc/sys/kernel/random/boot_id")  # "" where there is no /proc: only the lease then


def _start_time(pid: int) -> str:
    """When process `pid` started (clock ticks since boot), "" when it does not run or cannot be read."""
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _this_process() -> str:
    # Read on every claim: gunicorn forks its workers after this module is imported.
    return f"{socket.gethostname()} {BOOT_ID or '-'} {os.getpid()} {_start_time(os.getpid()) or '-'}"


def _claimant_gone(claimed_by: str) -> bool:
    """The claim's process ran on this machine and no longer runs (a restart, a crash, a reboot)."""
    host, boot, pid, started, _attempt = claimed_by.split(" ")
    if host != socket.gethostname() or "-" in (boot, started) or not BOOT_ID:
        return False
    return boot != BOOT_ID or _start_time(int(pid)) != started


def _abandoned(record: Record) -> bool:
    return record.claimed_at < timezone.now() - TURN_LEASE or _claimant_gone(record.claimed_by)
