"""Django's error handlers (handler400 … handler500), in the API's one error shape.

What Django refuses before any view runs (a disallowed Host), a path that names nothing, and a last-resort
error all answer `{"error": {"code", "message"}}`, mapped as the API maps its own (`api.errors`). The
console is for people in a browser, so under /admin/ its errors stay Django's pages.
"""

import sys

from django.core.exceptions import DisallowedHost
from django.views import defaults

from api.errors import error_response, status_of

CONSOLE = "/admin/"


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
