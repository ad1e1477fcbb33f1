"""The site's URLs plus two bare JSON views, the baseline of the HTTP ingest benchmark.

Served only by the benchmark's gunicorn (DJANGO_SETTINGS_MODULE=bench.settings, FERMIX_BENCH_VIEWS=1).
`bare_message` is the least a JSON ingest view can do: parse the body and INSERT the row in one
transaction, no key, no validation, no conversation row, no cache. `echo` does not touch the database.
"""

import json
import os

from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.http import JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from fermix_site.urls import urlpatterns as site_urlpatterns

if os.environ.get("FERMIX_BENCH_VIEWS") != "1":
    raise ImproperlyConfigured("bench.urls holds benchmark-only views: set FERMIX_BENCH_VIEWS=1 to use it")

INSERT = ("INSERT INTO messages (agent_id, owner_id, channel, chat_id, thread_scope, sender, role, kind, trust, "
          "content, metadata_json, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, 'chat', %s, %s, '{}', %s) "
          "RETURNING id")


@csrf_exempt
def bare_message(request, agent, conv):
    body = json.loads(request.body)
    channel, chat_id, thread = conv.split(":")
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(INSERT, [agent, body.get("owner_id") or "default", channel, chat_id, thread,
                                body.get("sender", ""), body["role"], body.get("trust", "guest"), body["content"],
                                connection.ops.adapt_datetimefield_value(now)])
        message_id = cursor.fetchone()[0]
    return JsonResponse({"id": message_id, "conversation": conv, "created_at": now}, status=201)


@csrf_exempt
def echo(request):
    body = json.loads(request.body)
    return JsonResponse({"id": 0, "conversation": body.get("conversation", ""), "created_at": timezone.now()},
                        status=201)


urlpatterns = [
    path("bench/agents/<str:agent>/conversations/<str:conv>/messages", bare_message),
    path("bench/echo", echo),
    *site_urlpatterns,
]
