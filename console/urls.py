"""Console pages outside the model admins, behind the admin site's staff login and CSRF protection."""

from django.contrib import admin
from django.urls import path

from console import views

urlpatterns = [
    path("dashboard/", admin.site.admin_view(views.dashboard), name="fermix-dashboard"),
    path("settings/", admin.site.admin_view(views.settings_page), name="fermix-settings"),
]
