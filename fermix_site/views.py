"""The health probe (Django's own error pages, in the API's shape, are `api.handlers`)."""

from django.http import JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_safe

from fermix_site import health


@require_GET
def healthz(request):
    """Unauthenticated liveness: database reachable, room on the disk, django-q2 cluster's last heartbeat."""
    report = health.report()
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)


@require_safe
def landing(request):
    """`/`: where the console, the API documentation and the health check are."""
    return render(request, "fermix/landing.html", {"api_docs": reverse("api-v1:openapi-view"),
                                                   "api_redoc": reverse("api-v1:openapi-redoc")})
