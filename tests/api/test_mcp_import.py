"""The MCP SDK is imported by the first request that reaches /mcp/, not when a process loads the URLs."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import django
django.setup()
from django.test import RequestFactory
from django.urls import get_resolver, resolve

get_resolver().url_patterns  # every URL module loaded, as a web worker's first request does
before = sorted(m for m in ("api.mcp", "mcp.server") if m in sys.modules)
response = resolve("/mcp/").func(RequestFactory().get("/mcp/"))
after = sorted(m for m in ("api.mcp", "mcp.server") if m in sys.modules)
print(json.dumps({"before": before, "after": after, "status": response.status_code,
                  "body": json.loads(response.content)}))
"""


def test_the_sdk_is_imported_by_the_first_mcp_request_only(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "DJANGO_SETTINGS_MODULE": "fermix_site.settings", "FERMIX_HOME": str(tmp_path),
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == []
    assert seen["after"] == ["api.mcp", "mcp.server"]
    # The endpoint answered as it always has: the API's JSON error, from the endpoint itself.
    assert seen["status"] == 405 and seen["body"]["error"]["code"] == "method_not_allowed"
