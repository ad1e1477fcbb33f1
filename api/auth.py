"""Who is calling: `Authorization: Bearer <key>`, looked up by its prefix and compared in constant time.

The one auth class of the API. It also checks the `{agent}` of the path, so no endpoint can forget
it: an invalid agent id is a 400, an agent the key is not restricted to a 403. Endpoints then ask
the principal for the rest: an operator key (archive, restore, rollback, review, undo, job changes),
the trust a request speaks with (`trust`), or operator trust (chat commands that change state:
compact, clear, soul).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import DatabaseError
from django.utils import timezone
from ninja.security import HttpBearer

from api.errors import ApiError, unauthorized
from api.models import KEY_PREFIX, ApiKey
from fermix_site.conf import conf, valid_id
from fermix_site.storage import is_storage_full
from memory.conversations import ConversationKey
from memory.models import Trust
from memory.tools import ToolContext

MAX_KEY_CHARS = 200
# last_used_at is for people ("is this key still in use?"), so one write a minute per key is plenty
# and keeps a busy bot from turning every request into a database write.
TOUCH_EVERY = timedelta(seconds=60)
OPERATOR = ApiKey.Role.OPERATOR


@dataclass(frozen=True)
class Principal:
    """The authenticated API key, as endpoints see it."""

    key_id: int
    name: str
    role: str
    agents: tuple[str, ...]
    may_assert_operator: bool = False

    @property
    def is_operator(self) -> bool:
        return self.role == OPERATOR

    @property
    def actor(self) -> str:
        return f"api:{self.name}"

    def require_agent(self, agent_id: str) -> None:
        """A valid agent id (else 400) that this key may use (else 403)."""
        if not isinstance(agent_id, str) or not valid_id(agent_id):
            raise ApiError(400, "invalid_agent", f"agent id {agent_id!r} is invalid: use 1-64 of A-Z a-z 0-9 "
                                                 "_ . - (not '.' or '..')")
        if self.agents and agent_id not in self.agents:
            raise ApiError(403, "agent_not_allowed", f"this API key is restricted to agent(s) "
                                                     f"{', '.join(self.agents)}; it may not use agent {agent_id!r}")

    def require_operator(self, action: str) -> None:
        if not self.is_operator:
            raise ApiError(403, "operator_key_required", f"{action} needs an operator API key; this is a "
                                                         f"{self.role} key")

    def trust(self, asserted: str | None) -> str:
        """The trust a request speaks with: what its body asserts, if the key may assert it; guest when
        the body says nothing. A channel key vouches for the owner only if it was created with
        `apikey_create --may-assert-operator`; any other channel key's claim is refused, not ignored,
        so a bot that believes it speaks for the owner learns that it does not."""
        if asserted != Trust.OPERATOR:
            return Trust.GUEST
        if self.is_operator or self.may_assert_operator:
            return Trust.OPERATOR
        raise ApiError(403, "trust_not_allowed", f"this {self.role} key may not assert \"trust\": \"operator\"; "
                                                 "create the bot's key with `apikey_create --may-assert-operator` "
                                                 "if it knows when the owner speaks")

    def require_operator_trust(self, asserted: str | None, command: str) -> str:
        """Chat commands that change state: an operator key, or a channel key that may vouch for the owner
        and does."""
        if self.is_operator or self.trust(asserted) == Trust.OPERATOR:
            return Trust.OPERATOR
        raise ApiError(403, "operator_trust_required", f"{command} changes state and needs operator trust: send "
                                                       "\"trust\": \"operator\" when the owner asked for it")

    def tool_context(self, *, agent_id: str, conversation: str, asserted_trust: str | None,
                     owner_id: str | None = None) -> ToolContext:
        """A memory tool call made with this key, from `conversation`: the one place the HTTP tools and the MCP
        server decide its agent, owner and trust (admission then confines a guest's call)."""
        self.require_agent(agent_id)
        return ToolContext(agent_id=agent_id, owner_id=owner_id or conf.memory.owner_id,
                           conversation=ConversationKey.parse(conversation), trust=self.trust(asserted_trust),
                           actor_id=self.actor)


def _touch(key: ApiKey) -> None:
    now = timezone.now()
    if key.last_used_at is not None and now - key.last_used_at <= TOUCH_EVERY:
        return
    try:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    except DatabaseError as exc:
        # A full database must not turn reads into refusals: the request itself says whether it can
        # be served, and the next request tries the touch again.
        if not is_storage_full(exc):
            raise


class ApiKeyAuth(HttpBearer):
    def __call__(self, request):
        header = request.headers.get("Authorization", "")
        if not header:
            raise unauthorized("missing_key", "send an API key as `Authorization: Bearer <key>` (create one with "
                                              "`python manage.py apikey_create`)")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("invalid_key", "the Authorization header must be `Bearer <key>`")
        principal = self.authenticate(request, token.strip())
        agent_id = (request.resolver_match.kwargs if request.resolver_match else {}).get("agent")
        if agent_id is not None:
            principal.require_agent(agent_id)
        return principal

    def authenticate(self, request, token: str) -> Principal:
        key = None
        if len(token) <= MAX_KEY_CHARS and token.isascii() and token.startswith(KEY_PREFIX):
            key = ApiKey.objects.filter(prefix=token[:12]).first()
        if key is None or not key.matches(token):
            raise unauthorized("invalid_key", "this API key is not known; check it, or create a new one with "
                                              "`python manage.py apikey_create`")
        if key.revoked_at is not None:
            raise unauthorized("revoked_key", "this API key was revoked; ask the operator for a new one")
        _touch(key)
        return Principal(key.pk, key.name, key.role, tuple(key.agents or ()), key.may_assert_operator)
