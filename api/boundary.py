"""The edge of the API: what is checked before ninja sees a request, and what it may not answer raw.

- A NUL character anywhere (path, query, JSON text) is a 400: PostgreSQL cannot store or compare it.
- A JSON body must be an object (`400 body_not_object`): every endpoint's body is one. Where a body is
  optional (SOUL.md apply, deny), it is left out, not sent as `null`.
- Content-Length is checked first: a value that is not a number is a 400, more than
  DATA_UPLOAD_MAX_MEMORY_SIZE (1 MiB) a 413, both before the key is looked up or the body read.
- Bodies are parsed strictly: UTF-8 only, JSON only (no NaN or Infinity, which PostgreSQL's jsonb
  refuses), no lone surrogates (`"\ud800"` is valid JSON but cannot be stored as UTF-8), nested at
  most MAX_DEPTH deep (a deeply nested document would otherwise reach Python's recursion limit
  somewhere later and become a 500).
- A query parameter the operation does not take is a 400 (`unknown_parameter`): `?limt=5` is a typo
  to say, not a filter to drop silently. What an operation takes is what the OpenAPI document lists.
- ninja's plain-text 405 and any path under /api/v1/ that names no endpoint answer JSON as well.
"""

from __future__ import annotations

import functools
import json
import math

from django.conf import settings
from django.views.decorators.csrf import csrf_exempt
from ninja.parser import Parser

from api.errors import MAX_BODY_MESSAGE, ApiError, error_response

MAX_DEPTH = 32


def _check_tree(data) -> None:
    """Depth and text of a parsed document, walked without recursion."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value)
        elif isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ApiError(400, "too_deep", f"the JSON body is nested more than {MAX_DEPTH} levels deep")
            if isinstance(value, dict):
                for key in value:
                    _check_text(key)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


def _check_text(text: str) -> None:
    # PostgreSQL stores neither NUL nor lone surrogates in text or jsonb; refusing them here keeps every
    # field of every endpoint safe on both databases.
    if "\x00" in text:
        raise ApiError(400, "invalid_text", "the JSON body holds a NUL character (\\u0000), which is not allowed")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "invalid_text", "the JSON body holds a lone surrogate escape (like \\ud800), "
                                            "which is not text") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of range for a number")
    return number


class StrictJsonParser(Parser):
    """JSON bodies in UTF-8, finite numbers, real text, at most MAX_DEPTH levels deep; else a 400 saying which."""

    def parse_body(self, request):
        try:
            text = request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, "invalid_utf8", "the request body is not valid UTF-8") from None
        try:
            data = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
        except RecursionError:
            raise ApiError(400, "too_deep", f"the JSON body is nested more than {MAX_DEPTH} levels deep") from None
        except ValueError as exc:
            raise ApiError(400, "invalid_json", f"the request body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ApiError(400, "body_not_object", f"the JSON body must be an object ({{...}}), not {_kind(data)}")
        _check_tree(data)
        return data


def _kind(value) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", list: "an array"}.get(type(value), "a number")


def _url_problem(request):
    texts = [request.path, *(value for values in request.GET.lists() for value in values[1])]
    if any("\x00" in text for text in texts):
        return error_response(400, "invalid_text", "the URL holds a NUL character (%00), which is not allowed")
    return None


def _body_problem(request):
    raw = request.META.get("CONTENT_LENGTH")
    if not raw:
        return None
    if not raw.strip().isdigit():
        return error_response(400, "invalid_content_length", "the Content-Length header must be a whole number")
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is not None and int(raw) > limit:
        return error_response(413, "body_too_large", MAX_BODY_MESSAGE)
    return None


def _query_problem(request, known_query):
    known = known_query(request.method)
    unknown = sorted(set(request.GET) - known) if known is not None else []
    if not unknown:
        return None
    takes = ", ".join(sorted(known)) or "none"
    return error_response(400, "unknown_parameter", f"this endpoint takes no query parameter {unknown[0]!r} "
                                                    f"(it takes: {takes})")


def guarded(view, known_query=lambda method: None):
    """Wrap one API view: URL, query and headers checked first, a plain 405 turned into the JSON error.

    `known_query(method)` names the query parameters the operation takes (None: not checked).
    """

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        problem = _url_problem(request) or _query_problem(request, known_query) or _body_problem(request)
        if problem is not None:
            return problem
        response = view(request, *args, **kwargs)
        if response.status_code == 405 and not response.get("Content-Type", "").startswith("application/json"):
            allowed = response.get("Allow", "")
            return error_response(405, "method_not_allowed", f"{request.method} is not allowed here; use {allowed}",
                                  headers={"Allow": allowed})
        return response

    # Bearer keys are not ambient credentials (no cookie), so CSRF protection has nothing to protect.
    wrapped.csrf_exempt = True
    return wrapped


@csrf_exempt
def unknown_route(request, *args, **kwargs):
    return error_response(404, "unknown_endpoint",
                          f"no API endpoint at {request.path}; the endpoints are listed at /api/v1/docs")
