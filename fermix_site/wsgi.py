import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from fermix_site.serving import at_the_edge

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fermix_site.settings")
# URLs checked and bodies read (chunked ones too) before Django: see fermix_site.serving.
application = at_the_edge(get_wsgi_application(), settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
