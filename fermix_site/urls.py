from django.contrib import admin
from django.urls import include, path

from fermix_site import views

urlpatterns = [
    path("", views.landing, name="landing"),
    path("healthz", views.healthz, name="healthz"),
    path("admin/fermix/", include("console.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("api.urls", namespace="api-v1")),
    path("", include("api.mcp_urls")),
]

handler400 = "api.handlers.bad_request"
handler403 = "api.handlers.permission_denied"
handler404 = "api.handlers.page_not_found"
handler500 = "api.handlers.server_error"
