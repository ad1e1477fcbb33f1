"""The JSON API under /api/v1/: every endpoint of CONTRACT §6, its OpenAPI document and browsable docs.

    path("api/v1/", api.urls)

Every endpoint needs `Authorization: Bearer <key>` (the docs and the OpenAPI document do not). Every
error, ninja's own included, is `{"error": {"code", "message"}}` (see `api.errors`).
"""

from __future__ import annotations

import functools
import re

from django.urls import URLPattern, re_path
from ninja import NinjaAPI

from api import boundary, errors
from api.auth import ApiKeyAuth
from api.routes import conversations, jobs, memories, resources
from fermix_site.conf import ID_PATTERN
from memory.conversations import KEY_PATTERN
from resources.models import ResourceType

ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")  # Django's `<int:job_id>` is the document's `{job_id}`
COMMON_ERRORS = {
    "400": "Invalid input (the message says which)",
    "401": "Missing, unknown or revoked API key",
    "403": "The key or the trust may not do this",
    "404": "Unknown endpoint, id or token",
    "408": "The request did not arrive in full (the client went silent)",
    "409": "Conflict: stale base, checkpoint rollback, concurrent run, an Idempotency-Key reused or in progress",
    "413": "Request body over 1 MiB",
    "414": "The request line (path and query) is too long",
    "422": "A field failed validation (the message names it)",
    "431": "The request headers are too large",
}
# What the server answers beyond the client's mistakes, and where: a model call (502 the provider
# failed, 503 none configured, 504 the turn's budget spent) and a full disk or database (507, writes).
MODEL_ERRORS = {
    "502": "The model provider gave no usable answer",
    "503": "No model provider is configured",
    "504": "The turn's time budget ([fermix_core.timeouts] turn_ms) was spent",
}
STORAGE_ERRORS = {"507": "The disk or the database is full; nothing was written"}
MODEL_PATHS = ("/turns", "/compact", "/preflight", "/review", "/soul/proposals", "/run")
# The formats the server checks, said in the document so that a client (or a fuzzer) knows them.
PATH_PARAMETERS = {
    "agent": {"type": "string", "pattern": ID_PATTERN, "example": "main"},
    "conv": {"type": "string", "pattern": KEY_PATTERN,
             "example": "telegram:12345", "description": "conversation key `<channel>:<chat_id>[:<thread_scope>]`"},
    "resource_type": {"type": "string", "enum": list(ResourceType.values), "example": "user_md"},
}


class FermixAPI(NinjaAPI):
    def _get_urls(self):
        urls = []
        for pattern in super()._get_urls():
            if isinstance(pattern, URLPattern):
                path = "/" + ROUTE_PARAMETER.sub(r"{\1}", str(pattern.pattern))
                known = functools.partial(self.query_parameters_of, path)
                pattern = URLPattern(pattern.pattern, boundary.guarded(pattern.callback, known), pattern.default_args,
                                     pattern.name)
            urls.append(pattern)
        # Anything else under /api/v1/ is an unknown endpoint: JSON, not Django's HTML 404 page.
        urls.append(re_path(r"^.*$", boundary.unknown_route))
        return urls

    @functools.cached_property
    def _query_parameters(self) -> dict[tuple[str, str], frozenset[str]]:
        schema = self.get_openapi_schema(path_prefix="")
        return {(path, method.upper()): frozenset(p["name"] for p in operation.get("parameters", [])
                                                  if p["in"] == "query")
                for path, operations in schema["paths"].items() for method, operation in operations.items()}

    def query_parameters_of(self, path: str, method: str) -> frozenset[str] | None:
        """The query parameters the document lists for an operation; None for what it does not list."""
        return self._query_parameters.get((path, method))

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        """ninja's document, plus the one error shape on every operation."""
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        error_ref = {"$ref": "#/components/schemas/ErrorOut"}
        if "ErrorOut" not in schemas:
            schemas["ErrorOut"] = {"type": "object", "title": "ErrorOut", "required": ["error"], "properties": {
                "error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string"}, "message": {"type": "string"}}}}}
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                for status, description in self._errors_of(path, method).items():
                    operation["responses"].setdefault(status, {
                        "description": description, "content": {"application/json": {"schema": error_ref}}})
                _no_null_body(operation)
                for parameter in operation.get("parameters", []):
                    if parameter["in"] == "path" and parameter["name"] in PATH_PARAMETERS:
                        parameter["schema"] = {**parameter.get("schema", {}), **PATH_PARAMETERS[parameter["name"]]}
        return schema

    @staticmethod
    def _errors_of(path: str, method: str) -> dict:
        found = dict(COMMON_ERRORS)
        if method != "get":
            found.update(STORAGE_ERRORS)
        if method == "post" and path.endswith(MODEL_PATHS) or "/soul/proposals" in path:
            found.update(MODEL_ERRORS)
        return found


def _no_null_body(operation: dict) -> None:
    """An optional body is one that may be left out, never `null` (every body is an object): ninja writes
    `payload: X | None` as `anyOf: [X, null]`."""
    for content in operation.get("requestBody", {}).get("content", {}).values():
        choices = content.get("schema", {}).get("anyOf", [])
        if {"type": "null"} in choices:
            rest = [choice for choice in choices if choice != {"type": "null"}]
            content["schema"] = rest[0] if len(rest) == 1 else {"anyOf": rest}


api = FermixAPI(
    title="Fermix API",
    version="1",
    description="Long-term memory, prompt files and scheduled jobs for channel bots. "
                "Authenticate with `Authorization: Bearer <key>` (`python manage.py apikey_create`).",
    auth=ApiKeyAuth(),
    parser=boundary.StrictJsonParser(),
    urls_namespace="api-v1",
)
errors.install(api)
for module in (conversations, memories, resources, jobs):
    api.add_router("", module.router)
