"""The health probe (Django's own error pages, in the API's shape, are `api.handlers`)."""

from django.http import JsonResponse
from django.views.decorators.http import require_GET

from fermix_site import health


@require_GET
def healthz(request):
    """Unauthenticated liveness: database reachable, room on the disk, django-q2 cluster's last heartbeat."""
    report = health.report()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)
