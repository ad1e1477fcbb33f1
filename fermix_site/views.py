from django.http import JsonResponse
from django.views.decorators.http import require_GET

from fermix_site import health


@require_GET
def healthz(request):
    """Unauthenticated liveness: database reachable, django-q2 cluster's last heartbeat."""
    report = health.report()
    return JsonResponse(report, status=200 if report["database"]["ok"] else 503)
