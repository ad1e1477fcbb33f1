"""The admin site's names; the console's own pages are mounted by fermix_site.admin_urls."""

from django.contrib import admin

admin.site.site_header = "Fermix operator console"
admin.site.site_title = "Fermix"
admin.site.index_title = "Operator console"
admin.site.site_url = None  # there is no public site to view
