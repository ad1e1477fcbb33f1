"""The JSON API under /api/v1/: every endpoint of CONTRACT §6, its OpenAPI document and browsable docs.

    path("api/v1/", api.urls)

Every endpoint needs `Authorization: Bearer <key>` (the docs and the OpenAPI document do not). Every
error, ninja's own included, is `{"error": {"code", "message"}}` (see `api.errors`).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from django.urls import URLPattern, re_path
from django.urls import path as route
from ninja import NinjaAPI
from ninja.openapi.docs import Redoc

from api import boundary, errors
from api.auth import ApiKeyAuth
from api.routes import conversations, jobs, memories, resources
from fermix_site.conf import ID_PATTERN
from memory.conversations import KEY_PATTERN
from resources.models import ResourceType

ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")  # Django's `<int:job_id>` is the document's `{job_id}`
# Every error an operation may answer, each described once under components/responses (the name) and referred
# to by status from the operations: (status, name, description).
ERRORS = [
    ("400", "BadRequest", "Invalid input (the message says which)"),
    ("401", "Unauthorized", "Missing, unknown or revoked API key"),
    ("403", "Forbidden", "The key or the trust may not do this"),
    ("404", "NotFound", "Unknown endpoint, id or token"),
    ("408", "RequestTimeout", "The request did not arrive in full (the client went silent)"),
    ("409", "Conflict", "Conflict: stale base, checkpoint rollback, concurrent run, an Idempotency-Key reused or "
                        "in progress"),
    ("413", "BodyTooLarge", "Request body over 1 MiB"),
    ("414", "UriTooLong", "The request line (path and query) is too long"),
    ("422", "InvalidInput", "A field failed validation (the message names it)"),
    ("431", "HeadersTooLarge", "The request headers are too large"),
    # What the server answers beyond the client's mistakes, and where: a model call (502 the provider failed,
    # 503 none configured, 504 the turn's budget spent) and a full disk or database (507, writes).
    ("502", "ProviderError", "The model provider gave no usable answer"),
    ("503", "NoProvider", "No model provider is configured"),
    ("504", "TurnTimeout", "The turn's time budget ([fermix_core.timeouts] turn_ms) was spent"),
    ("507", "StorageFull", "The disk or the database is full; nothing was written"),
]
COMMON_ERRORS = ("400", "401", "403", "404", "408", "409", "413", "414", "422", "431")
MODEL_ERRORS = ("502", "503", "504")
STORAGE_ERRORS = ("507",)
MODEL_PATHS = ("/turns", "/compact", "/preflight", "/review", "/soul/proposals", "/run")
# The formats the server checks, said in the document so that a client (or a fuzzer) knows them.
PATH_PARAMETERS = {
    "agent": {"type": "string", "pattern": ID_PATTERN, "example": "main"},
    "conv": {"type": "string", "pattern": KEY_PATTERN,
             "example": "telegram:12345", "description": "conversation key `<channel>:<chat_id>[:<thread_scope>]`"},
    "resource_type": {"type": "string", "enum": list(ResourceType.values), "example": "user_md"},
}


# A real request and answer for every operation, recorded by scripts/openapi_examples.py against the real server.
EXAMPLES = json.loads((Path(__file__).parent / "openapi_examples.json").read_text(encoding="utf-8"))
REDOC = Redoc(settings={"expandResponses": "200,201", "hideHostname": True, "pathInMiddlePanel": True,
                         "requiredPropsFirst": True, "sortPropsAlphabetically": False})


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
        urls.append(route("redoc", boundary.guarded(self.redoc), name="openapi-redoc"))
        # Anything else under /api/v1/ is an unknown endpoint: JSON, not Django's HTML 404 page.
        urls.append(re_path(r"^.*$", boundary.unknown_route))
        return urls

    def get_openapi_operation_id(self, operation) -> str:
        """The view's name (`memory_store`, `turn`): unique across the API, and what a generated client calls."""
        return operation.view_func.__name__

    def redoc(self, request):
        """The document as one readable page (ReDoc, served from this server's static files like the Swagger UI)."""
        return REDOC.render_page(request, self)

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
        """ninja's document, plus the one error shape on every operation, each error response described once."""
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        if "ErrorOut" not in schemas:
            schemas["ErrorOut"] = {"type": "object", "title": "ErrorOut", "required": ["error"], "properties": {
                "error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string"}, "message": {"type": "string"}}}}}
        components["responses"] = {name: {"description": description, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/ErrorOut"}}}} for _, name, description in ERRORS}
        names = {status: name for status, name, _ in ERRORS}
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                for status in self._errors_of(path, method):
                    operation["responses"].setdefault(status, {"$ref": f"#/components/responses/{names[status]}"})
                _no_null_body(operation)
                _with_example(operation, EXAMPLES.get(operation["operationId"]))
                for parameter in operation.get("parameters", []):
                    if parameter["in"] == "path" and parameter["name"] in PATH_PARAMETERS:
                        parameter["schema"] = {**parameter.get("schema", {}), **PATH_PARAMETERS[parameter["name"]]}
        return schema

    @staticmethod
    def _errors_of(path: str, method: str) -> tuple[str, ...]:
        found = COMMON_ERRORS
        if method != "get":
            found += STORAGE_ERRORS
        if method == "post" and path.endswith(MODEL_PATHS) or "/soul/proposals" in path:
            found += MODEL_ERRORS
        return found


def _with_example(operation: dict, example: dict | None) -> None:
    """The recorded exchange as the operation's request and answer examples."""
    if example is None:
        return
    if "request" in example and "requestBody" in operation:
        operation["requestBody"]["content"]["application/json"]["example"] = example["request"]
    responses = operation["responses"]
    answer = responses.get(example["status"]) or responses.get(str(example["status"]))
    if answer is not None and "content" in answer:
        answer["content"]["application/json"]["example"] = example["response"]


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
