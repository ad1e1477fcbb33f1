"""The MCP server at /mcp/: the memory tools and the prompt files over the Model Context Protocol.

    tools      memory_store, memory_recall, memory_forget, memory_sources_list (memory.tool_definitions,
               with `agent` and `conversation` among the arguments)
    resources  fermix://{agent}/USER.md, fermix://{agent}/MEMORY.md, fermix://{agent}/SOUL.md

Why a Django view: gunicorn serves Fermix over WSGI with threads (fermix_site.serving), and the SDK's
streamable HTTP transport is an ASGI application. In its stateless mode with JSON responses every POST is
one self-contained exchange: no session kept between requests (so any worker, and any node, can answer
the next one) and no server-sent-event stream held open (so a client cannot park a thread). Each request
is therefore handed to a StreamableHTTPSessionManager made for it, on an event loop of its own in the
request's thread, and what it answers is returned as the view's response. The edge in front of it is the
API's: gunicorn's request checks, Django's Host check, the body limit, the Bearer key (`ApiKeyAuth`).

Trust is the connection's, not the model's: the `Fermix-Trust: operator` header asserts it, under the
same rule as a body's `trust` (`Principal.trust`: an operator key, or a channel key made with
`--may-assert-operator`); without the header a connection is a guest. A tool call's agent, owner and
trust are decided by `Principal.tool_context`, as for `POST /api/v1/agents/{agent}/tools/{tool}`, and
admission confines a guest's call to its conversation. USER.md and MEMORY.md are the owner's memory:
reading them needs operator trust, as `memory_recall` beyond the conversation does; SOUL.md, the agent's
persona, any caller of the agent may read.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from django.db import connections
from django.http import HttpResponse
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from api import boundary
from api.auth import ApiKeyAuth, Principal
from api.errors import ApiError, error_response, status_of
from memory.conversations import ConversationError
from memory.models import Trust
from memory.tool_definitions import definitions
from memory.tools import TOOLS, ToolResult, refuse, run_tool
from resources.errors import ResourceError
from resources.models import ResourceType
from resources.selectors import resource_agents, resource_revision_get

TRUST_HEADER = "Fermix-Trust"
CALLER = "fermix.caller"  # where the view leaves the caller in the ASGI scope for the handlers
SCHEME = "fermix"
FILES = {"USER.md": ResourceType.USER_MD, "MEMORY.md": ResourceType.MEMORY_MD, "SOUL.md": ResourceType.SOUL_MD}
OWNER_FILES = ("USER.md", "MEMORY.md")  # the owner's memory: operator trust
FILE_HELP = {
    "USER.md": "What the agent knows about its user, rendered from the long-term memory rows (operator trust).",
    "MEMORY.md": "What the agent knows about the work and the situation, rendered from memory rows "
                 "(operator trust).",
    "SOUL.md": "The agent's persona and voice.",
}
INSTRUCTIONS = (
    "Fermix is the user's long-term memory. Recall before answering anything that depends on what the user "
    "said before; store short lasting facts as you learn them; correct a stored fact by its id rather than "
    "adding a duplicate. Every call names the agent (usually `main`) and the conversation it is made from.")
# The Host header is checked by Django (ALLOWED_HOSTS) before this view runs, and a Bearer key is no ambient
# credential a rebinding page could borrow, so the SDK's own Host and Origin checks would only repeat it.
SECURITY = TransportSecuritySettings(enable_dns_rebinding_protection=False)
AUTH = ApiKeyAuth()


@dataclass(frozen=True)
class Caller:
    principal: Principal
    trust: str


def _caller(ctx) -> Caller:
    return ctx.request.scope[CALLER]


async def _off_the_loop(work, *args):
    """Run ORM code in a worker thread: Django refuses queries in a thread that runs an event loop. The
    worker's connections are closed after, as Django closes a request's."""
    return await anyio.to_thread.run_sync(functools.partial(_closing, work, *args))


def _closing(work, *args):
    try:
        return work(*args)
    except (MCPError, ApiError):
        raise
    except Exception as exc:  # noqa: BLE001 - mapped as the API maps it (a full disk is storage_full)
        status, code, message = status_of(exc)
        if status == 500:
            raise
        raise MCPError(types.INTERNAL_ERROR, message, {"error": code}) from exc
    finally:
        connections.close_all()


def _refused(code: str, message: str) -> MCPError:
    """A request the protocol itself refuses (an unknown tool or resource, a resource this caller may not
    read), with the API's error code in `data.error`."""
    return MCPError(types.INVALID_PARAMS, message, {"error": code})


# --- tools -----------------------------------------------------------------------------------------------


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[types.Tool.model_validate(tool) for tool in definitions("mcp")])


def _call(caller: Caller, name: str, arguments: dict) -> ToolResult:
    arguments = dict(arguments)
    agent, conversation = arguments.pop("agent", None), arguments.pop("conversation", None)
    if agent is None:
        return refuse("invalid_agent", "give the agent whose memory to use, e.g. \"agent\": \"main\"")
    try:
        ctx = caller.principal.tool_context(agent_id=agent, conversation=conversation, asserted_trust=caller.trust)
    except ApiError as exc:
        return refuse(exc.code, exc.message)
    except ConversationError as exc:
        return refuse(exc.code, str(exc))
    return run_tool(name, ctx, arguments)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    """The tool's answer as the HTTP tools give it; a refusal is an error result the model can read and act on.
    A tool that does not exist is the protocol's error, as MCP has it."""
    if params.name not in TOOLS:
        raise _refused("unknown_tool", f"unknown tool {params.name!r}; the tools are {', '.join(TOOLS)}")
    answer = (await _off_the_loop(_call, _caller(ctx), params.name, params.arguments or {})).as_dict()
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer, ensure_ascii=False, default=str))],
                                structured_content=json.loads(json.dumps(answer, default=str)),
                                is_error=not answer["ok"])


# --- resources -------------------------------------------------------------------------------------------


def _readable(caller: Caller) -> tuple[str, ...]:
    return tuple(FILES) if caller.trust == Trust.OPERATOR else tuple(n for n in FILES if n not in OWNER_FILES)


def _resources(caller: Caller) -> list[types.Resource]:
    agents = caller.principal.agents or resource_agents()
    return [types.Resource(uri=f"{SCHEME}://{agent}/{name}", name=f"{agent}/{name}", description=FILE_HELP[name],
                           mime_type="text/markdown") for agent in agents for name in _readable(caller)]


async def list_resources(ctx, params) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=await _off_the_loop(_resources, _caller(ctx)))


async def list_resource_templates(ctx, params) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=[
        types.ResourceTemplate(uri_template=f"{SCHEME}://{{agent}}/{name}", name=name, description=FILE_HELP[name],
                               mime_type="text/markdown") for name in FILES])


def _file_of(uri: str) -> tuple[str, str]:
    """(agent, file name) of `fermix://{agent}/{file}`."""
    parts = urlsplit(uri)
    name = parts.path.lstrip("/")
    if parts.scheme != SCHEME or not parts.netloc or name not in FILES or parts.query or parts.fragment:
        raise _refused("unknown_resource", f"no resource {uri!r}: the resources are fermix://{{agent}}/USER.md, "
                                           "…/MEMORY.md and …/SOUL.md")
    return parts.netloc, name


def _read(caller: Caller, uri: str) -> str:
    agent, name = _file_of(uri)
    try:
        caller.principal.require_agent(agent)
    except ApiError as exc:
        raise _refused(exc.code, exc.message) from None
    if name not in _readable(caller):
        raise _refused("operator_only", f"{name} is the owner's memory and needs operator trust: connect with "
                                        f"`{TRUST_HEADER}: operator` (a key that may assert it)")
    try:
        return resource_revision_get(agent_id=agent, resource_type=FILES[name]).content
    except ResourceError as exc:
        raise _refused(exc.code, exc.message) from None


async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    text = await _off_the_loop(_read, _caller(ctx), uri)
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="text/markdown",
                                                                         text=text)])


SERVER = Server("fermix", version="1", title="Fermix memory", instructions=INSTRUCTIONS,
                on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                on_list_resource_templates=list_resource_templates, on_read_resource=read_resource)


# --- the view --------------------------------------------------------------------------------------------


def _scope(request, caller: Caller) -> dict:
    """The ASGI scope of a Django request."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request.method,
            "scheme": request.scheme, "path": request.path, "raw_path": request.path.encode(), "root_path": "",
            "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
            "headers": [(name.lower().encode("latin-1"), value.encode("latin-1"))
                        for name, value in request.headers.items()],
            "server": (request.get_host().rpartition(":")[0] or request.get_host(), int(request.get_port())),
            "client": (request.META.get("REMOTE_ADDR", ""), 0), "state": {}, CALLER: caller}


async def _exchange(scope: dict, body: bytes) -> tuple[int, list, bytes]:
    """One request through the SDK's stateless transport: (status, headers, body) of its answer."""
    manager = StreamableHTTPSessionManager(SERVER, json_response=True, stateless=True, security_settings=SECURITY)
    answer: dict = {"status": 500, "headers": [], "body": b""}
    delivered = anyio.Event()

    async def receive():
        if not delivered.is_set():
            delivered.set()
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()  # the client stays connected until the answer is sent

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"], answer["headers"] = message["status"], message.get("headers", [])
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    async with manager.run():
        await manager.handle_request(scope, receive, send)
    return answer["status"], answer["headers"], answer["body"]


def _trust(request, principal: Principal) -> str:
    asserted = request.headers.get(TRUST_HEADER, Trust.GUEST).strip().lower()
    if asserted not in Trust.values:
        raise ApiError(400, "invalid_trust", f"the {TRUST_HEADER} header must be operator or guest")
    return principal.trust(asserted)


def endpoint(request):
    """POST /mcp/: one JSON-RPC message of the streamable HTTP transport (stateless, JSON answers).

    There is no GET stream (the transport lets a server refuse it with 405) and no session to DELETE."""
    if request.method != "POST":
        return error_response(405, "method_not_allowed", f"{request.method} is not allowed here; MCP messages "
                              "are POSTed (this server keeps no session and opens no event stream)",
                              headers={"Allow": "POST"})
    try:
        principal = AUTH(request)
        caller = Caller(principal, _trust(request, principal))
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message, headers=exc.headers)
    status, headers, body = anyio.run(_exchange, _scope(request, caller), request.body)
    if status >= 400 and not dict(headers).get(b"content-type", b"").startswith(b"application/json"):
        # The transport's own refusals in plain text (a wrong Content-Type or Accept): the API's JSON shape.
        return error_response(status, "invalid_mcp_request", body.decode("utf-8", "replace")[:500] or
                              "the request is not an MCP message of the streamable HTTP transport")
    response = HttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() != b"content-length":
            response[name.decode("latin-1")] = value.decode("latin-1")
    return response


view = boundary.guarded(endpoint)
