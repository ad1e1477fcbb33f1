"""Every refusal the API answers, in one JSON shape: `{"error": {"code": "...", "message": "..."}}`.

Services raise their own errors (ConversationError, MemoryRowError, ResourceError, ProviderError, …).
This module maps each one to an HTTP status once, so every endpoint says the same thing for the same
mistake, and nothing a client sends can surface as a 500 or as an HTML page.
"""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, JsonResponse
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from fermix_site.storage import STORAGE_FULL_MESSAGE, is_storage_full
from jobs.services import JobError
from memory.compactor import WINDOW_MOVED, CompactionError
from memory.conversations import ConversationError
from memory.reviewer import ReviewBusy, UndoError
from memory.rows import MemoryRowError
from providers.errors import BudgetSpent, ContextLengthError, NoProviderConfigured, ProviderError
from resources.errors import ResourceError

logger = logging.getLogger("fermix.api")

CONTEXT_LENGTH_ADVICE = (
    "This conversation no longer fits the model's context window. Send /compact to summarise the older "
    "messages, or /new to start a fresh conversation (long-term memory is kept either way)."
)
MAX_BODY_MESSAGE = "the request body is over 1 MiB; send less (long texts belong in several messages)"

# Memory-row refusals that are not "bad input" (400).
MEMORY_ROW_STATUS = {
    "not_found": 404,
    "already_archived": 409,
    "not_archived": 409,
    "not_pending": 409,
    "archived": 409,
    "trust_gate": 403,
    "out_of_scope": 403,
    "forbidden": 403,
}


class ApiError(Exception):
    """A refusal decided by the API layer itself (authentication, permissions, unknown ids)."""

    def __init__(self, status: int, code: str, message: str, *, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


def error_response(status: int, code: str, message: str, *, details: list | None = None,
                   headers: dict | None = None) -> JsonResponse:
    error: dict = {"code": code, "message": message}
    if details:
        error["details"] = details
    response = JsonResponse({"error": error}, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def unauthorized(code: str, message: str) -> ApiError:
    return ApiError(401, code, message, headers={"WWW-Authenticate": 'Bearer realm="fermix"'})


def _where(loc) -> str:
    # ninja locates body fields as ("body", <parameter name>, field, …): the parameter name means nothing
    # to a client, so drop it.
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        parts = ["body", *parts[2:]]
    return ".".join(parts[1:]) if len(parts) > 1 else parts[0] if parts else "input"


def validation_message(errors: list[dict]) -> str:
    described = [f"{_where(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(described) + more


def _details(errors: list[dict]) -> list[dict]:
    return [{"where": _where(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type", "")}
            for e in errors[:20]]


def _provider_error(exc: ProviderError) -> tuple[int, str, str]:
    if isinstance(exc, ContextLengthError):
        return 400, "context_length_exceeded", CONTEXT_LENGTH_ADVICE
    if isinstance(exc, NoProviderConfigured):
        return 503, "no_provider", str(exc)
    if isinstance(exc, BudgetSpent):
        return 504, "turn_timeout", ("the model did not finish within the turn's time budget "
                                     "([fermix_core.timeouts] turn_ms); the message is stored, ask again")
    return 502, "provider_error", f"the model provider did not give an answer: {exc}"[:1000]


def status_of(exc: Exception | None) -> tuple[int, str, str]:
    """(status, code, message) for any error a service raises; 500 only for a genuine bug."""
    if isinstance(exc, ApiError):
        return exc.status, exc.code, exc.message
    if is_storage_full(exc):  # whatever layer it surfaced in: the disk or the database is full
        return 507, "storage_full", STORAGE_FULL_MESSAGE
    if isinstance(exc, ResourceError):
        return exc.http_status, exc.code, exc.message
    if isinstance(exc, MemoryRowError):
        return MEMORY_ROW_STATUS.get(exc.code, 400), exc.code, str(exc)
    if isinstance(exc, ConversationError):
        return 400, exc.code, str(exc)
    if isinstance(exc, ProviderError):
        return _provider_error(exc)
    if isinstance(exc, RequestDataTooBig):
        return 413, "body_too_large", MAX_BODY_MESSAGE
    if isinstance(exc, JobError | ReviewBusy):
        return getattr(exc, "http_status", 409), exc.code, str(exc)
    if isinstance(exc, UndoError):
        return 404 if exc.code == "not_found" else 409, exc.code, str(exc)
    if isinstance(exc, CompactionError):
        # "window_moved" is a race with another compaction or /clear; anything else is the model failing.
        if isinstance(exc.__cause__, NoProviderConfigured):
            return _provider_error(exc.__cause__)
        return 409 if exc.code == WINDOW_MOVED else 502, exc.code, str(exc)
    return 500, "internal_error", "the server failed to answer; the error is logged"


def install(api) -> None:
    """Answer every error of `api` with the one JSON shape."""

    def service_error(request, exc):
        status, code, message = status_of(exc)
        if status == 500:
            logger.error("%s %s failed", request.method, request.path, exc_info=exc)
        elif status > 500:
            logger.warning("%s %s: %s", request.method, request.path, message)
        headers = exc.headers if isinstance(exc, ApiError) else None
        return error_response(status, code, message, headers=headers)

    def validation_error(request, exc: NinjaValidationError):
        return error_response(422, "invalid_input", validation_message(exc.errors), details=_details(exc.errors))

    def http_error(request, exc: HttpError):
        cause = exc.__cause__
        if isinstance(cause, ApiError):  # our body parser's refusal, wrapped by ninja
            return service_error(request, cause)
        if exc.status_code == 400:
            return error_response(400, "invalid_json", "the request body is not valid JSON text in UTF-8")
        return error_response(exc.status_code, f"http_{exc.status_code}", str(exc))

    def not_found(request, exc):
        return error_response(404, "not_found", "no such API endpoint or object; see /api/v1/docs")

    def not_authenticated(request, exc):
        return service_error(request, unauthorized(
            "missing_key", "send an API key as `Authorization: Bearer <key>` (create one with "
            "`python manage.py apikey_create`)"))

    api.add_exception_handler(Exception, service_error)
    api.add_exception_handler(NinjaValidationError, validation_error)
    api.add_exception_handler(HttpError, http_error)
    api.add_exception_handler(AuthenticationError, not_authenticated)
    api.add_exception_handler(Http404, not_found)
