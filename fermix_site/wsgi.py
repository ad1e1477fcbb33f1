import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from fermix_site.serving import with_read_body

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fermix_site.settings")
# Bodies are read (chunked ones too) before Django, under the server's read timeout: see fermix_site.serving.
application = with_read_body(get_wsgi_application(), settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
