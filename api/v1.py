"""The JSON API under /api/v1/: every endpoint of CONTRACT §6, its OpenAPI document and browsable docs.

    path("api/v1/", api.urls)

Every endpoint needs `Authorization: Bearer <key>` (the docs and the OpenAPI document do not). Every
error, ninja's own included, is `{"error": {"code", "message"}}` (see `api.errors`).
"""

from __future__ import annotations

from django.urls import URLPattern, re_path
from ninja import NinjaAPI

from api import boundary, errors
from api.auth import ApiKeyAuth
from api.routes import conversations, jobs, memories, resources

COMMON_ERRORS = {
    "400": "Invalid input (the message says which)",
    "401": "Missing, unknown or revoked API key",
    "403": "The key or the trust may not do this",
    "404": "Unknown endpoint, id or token",
    "409": "Conflict: stale base, checkpoint rollback, concurrent run, an Idempotency-Key reused or in progress",
    "413": "Request body over 1 MiB",
    "422": "A field failed validation (the message names it)",
}


class FermixAPI(NinjaAPI):
    def _get_urls(self):
        urls = []
        for pattern in super()._get_urls():
            if isinstance(pattern, URLPattern):
                pattern = URLPattern(pattern.pattern, boundary.guarded(pattern.callback), pattern.default_args,
                                     pattern.name)
            urls.append(pattern)
        # Anything else under /api/v1/ is an unknown endpoint: JSON, not Django's HTML 404 page.
        urls.append(re_path(r"^.*$", boundary.unknown_route))
        return urls

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        """ninja's document, plus the one error shape on every operation."""
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        error_ref = {"$ref": "#/components/schemas/ErrorOut"}
        if "ErrorOut" not in schemas:
            schemas["ErrorOut"] = {"type": "object", "title": "ErrorOut", "required": ["error"], "properties": {
                "error": {"type": "object", "required": ["code", "message"], "properties": {
                    "code": {"type": "string"}, "message": {"type": "string"}}}}}
        for operations in schema["paths"].values():
            for operation in operations.values():
                for status, description in COMMON_ERRORS.items():
                    operation["responses"].setdefault(status, {
                        "description": description, "content": {"application/json": {"schema": error_ref}}})
        return schema


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
