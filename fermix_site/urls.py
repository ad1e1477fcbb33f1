from django.contrib import admin
from django.urls import path

from api.v1 import api
from fermix_site import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
