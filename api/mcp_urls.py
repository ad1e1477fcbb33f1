"""The MCP server's URL (`/mcp/`, and `/mcp` too: a client configured without the slash must not meet a redirect
that it may not follow with its POST)."""

from django.urls import path

from api.mcp import view

urlpatterns = [
    path("mcp/", view, name="mcp"),
    path("mcp", view),
]
