"""Realtime voice transcripts: final spoken turns stored as `voice_turn` messages, when enabled."""

from __future__ import annotations

import re

from fermix_site.conf import conf
from memory.conversations import ConversationError, ConversationKey, message_append
from memory.models import Message, Role, Trust

DEVICE_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9_.@+=-]{1,200}$"  # read the same by Python and the OpenAPI document
DEVICE_RE = re.compile(DEVICE_PATTERN)


def realtime_conversation(device_id: str) -> ConversationKey:
    """Each device has its own realtime conversation: `realtime:<device_id>:root`."""
    if not isinstance(device_id, str) or not DEVICE_RE.fullmatch(device_id):
        raise ConversationError("invalid_device", "device_id must be 1-200 of A-Z a-z 0-9 _ . @ + = - "
                                                  "(not '.' or '..')")
    return ConversationKey("realtime", device_id, "root")


def transcript_store(*, agent_id: str, device_id: str, role: str, text: str,
                     owner_id: str | None = None) -> Message | None:
    """Store one final user or assistant transcript; None when `persist_transcripts` is off.

    Voice turns come from the owner's own device, so they are stored with operator trust and feed the
    reviewer like chat messages.
    """
    key = realtime_conversation(device_id)
    if role not in (Role.USER, Role.ASSISTANT):
        raise ConversationError("invalid_role", "a transcript's role is user or assistant")
    if not isinstance(text, str) or not text.strip():
        raise ConversationError("invalid_content", "a transcript needs its final text")
    if not conf.memory.persist_transcripts:
        return None
    return message_append(agent_id=agent_id, conversation=key, role=role, content=text.strip(),
                          owner_id=owner_id, sender=device_id, trust=Trust.OPERATOR, kind="voice_turn",
                          metadata={"source_type": "realtime", "device_id": device_id})
