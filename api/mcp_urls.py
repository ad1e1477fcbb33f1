"""The MCP server's URL (`/mcp/`, and `/mcp` too: a client configured without the slash must not meet a redirect
that it may not follow with its POST).

`api.mcp` and the MCP SDK under it (about 25 MiB and 0.4 s a process) are imported by the first request that
reaches the endpoint, not when the URLs are loaded: a web worker that serves no MCP client, and every other
process that loads the URLs, never holds them."""

from django.urls import path

from api import boundary


def _endpoint(request):
    from api.mcp import endpoint

    return endpoint(request)


view = boundary.guarded(_endpoint)

urlpatterns = [
    path("mcp/", view, name="mcp"),
    path("mcp", view),
]
