"""The API's refusals as exceptions: one class per HTTP status family, each carrying the API's error code.

Every error the service answers is `{"error": {"code": "...", "message": "..."}}` (CONTRACT §6). Catch
the class for the family (`NotFound`, `Conflict`, …) and branch on `.code` (`stale_base`,
`idempotency_conflict`, `trust_not_allowed`, …) for the precise reason.
"""

from __future__ import annotations

from typing import Any

import httpx


class FermixError(Exception):
    """Anything this client raises."""


class TransportError(FermixError):
    """The service could not be reached (or stopped answering) and the retries were spent."""

    def __init__(self, message: str, *, attempts: int):
        super().__init__(message)
        self.attempts = attempts


class APIError(FermixError):
    """The service answered with an error status."""

    def __init__(self, *, status: int, code: str, message: str, details: list[Any] | None = None,
                 headers: httpx.Headers | None = None):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.details = details or []
        self.headers = headers if headers is not None else httpx.Headers()


class InvalidInput(APIError):
    """400 or 422: the request was malformed or a field failed validation (the message names it)."""


class Unauthorized(APIError):
    """401: the key is missing, unknown or revoked."""


class Forbidden(APIError):
    """403: the key or the trust may not do this (`operator_only`, `trust_not_allowed`, `agent_not_allowed`…)."""


class NotFound(APIError):
    """404: unknown endpoint, id or token."""


class Conflict(APIError):
    """409: stale base, checkpoint rollback, concurrent run, an Idempotency-Key reused with another body."""


class PayloadTooLarge(APIError):
    """413: the body is over the service's limit (1 MiB by default)."""


class RateLimited(APIError):
    """429: slow down (retried with backoff before it is raised)."""


class ModelUnavailable(APIError):
    """502, 503 or 504: the model provider failed, none is configured, or the turn's budget was spent."""


class StorageFull(APIError):
    """507: the service's disk or database is full; nothing was written."""


class ServerError(APIError):
    """Any other 5xx."""


BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidInput, 422: InvalidInput, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    413: PayloadTooLarge, 429: RateLimited, 502: ModelUnavailable, 503: ModelUnavailable, 504: ModelUnavailable,
    507: StorageFull,
}


def error_from(response: httpx.Response) -> APIError:
    """The exception for an error answer; a body that is not the API's shape (a proxy's page) still gets one."""
    try:
        error = response.json().get("error", {})
        code, message = str(error["code"]), str(error["message"])
        details = error.get("details")
    except (ValueError, AttributeError, KeyError, TypeError):
        code, message, details = f"http_{response.status_code}", response.text[:500], None
    status = response.status_code
    cls = BY_STATUS.get(status, ServerError if status >= 500 else APIError)
    return cls(status=status, code=code, message=message, details=details, headers=response.headers)
