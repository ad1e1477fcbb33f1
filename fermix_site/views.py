"""The health probe, and the JSON answers for errors Django raises outside the API's own handlers."""

import sys

from django.core.exceptions import DisallowedHost
from django.http import JsonResponse
from django.views import defaults
from django.views.decorators.http import require_GET

from api.errors import error_response, status_of
from fermix_site import health

# The console is for people in a browser, so its errors stay Django's pages; everything else a client
# reaches (the API, /healthz, a mistyped path, a request refused before routing) answers JSON.
CONSOLE = "/admin/"


@require_GET
def healthz(request):
    """Unauthenticated liveness: database reachable, room on the disk, django-q2 cluster's last heartbeat."""
    report = health.report()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)


def bad_request(request, exception):
    if isinstance(exception, DisallowedHost):
        return error_response(400, "disallowed_host", "this server does not answer to that Host header "
                                                      "(the allowed names are set by FERMIX_ALLOWED_HOSTS)")
    return error_response(400, "bad_request", "the request was refused as malformed")


def permission_denied(request, exception):
    if request.path.startswith(CONSOLE):
        return defaults.permission_denied(request, exception)
    return error_response(403, "forbidden", "this request is not allowed")


def page_not_found(request, exception):
    if request.path.startswith(CONSOLE):
        return defaults.page_not_found(request, exception)
    return error_response(404, "not_found", f"nothing is served at {request.path}; the API is under /api/v1/ "
                                            "(see /api/v1/docs) and the console under /admin/")


def server_error(request):
    """Django's last resort (handler500) for what no view answered, the console's pages and the session
    middleware included: the API's mapping applies there too, so a full disk or database is a 507."""
    status, code, message = status_of(sys.exc_info()[1])  # Django calls this inside its `except`
    if status == 500 and request.path.startswith(CONSOLE):
        return defaults.server_error(request)
    return error_response(status, code, message)
