"""The API's URLs, for the site's URL configuration to include by name (the site imports no domain app)."""

from api.v1 import api

urlpatterns, app_name, _namespace = api.urls
