import sys

from django.http import JsonResponse
from django.views.decorators.http import require_GET

from api.errors import error_response, status_of
from fermix_site import health


@require_GET
def healthz(request):
    """Unauthenticated liveness: database reachable, room on the disk, django-q2 cluster's last heartbeat."""
    report = health.report()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)


def server_error(request):
    """Django's last resort (handler500) for what no view answered, the console's pages and the session
    middleware included: the API's mapping applies there too, so a full disk or database is a 507."""
    status, code, message = status_of(sys.exc_info()[1])  # Django calls this inside its `except`
    return error_response(status, code, message)
