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

handler400 = "fermix_site.views.bad_request"
handler403 = "fermix_site.views.permission_denied"
handler404 = "fermix_site.views.page_not_found"
handler500 = "fermix_site.views.server_error"
