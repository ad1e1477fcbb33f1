from django.contrib import admin
from django.urls import include, path

from api.v1 import api
from fermix_site import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("admin/fermix/", include("fermix_site.admin_urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]

handler400 = "api.handlers.bad_request"
handler403 = "api.handlers.permission_denied"
handler404 = "api.handlers.page_not_found"
handler500 = "api.handlers.server_error"
