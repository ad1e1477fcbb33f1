"""Realtime voice transcripts are stored as voice_turn messages only when persist_transcripts is on."""

import pytest

from fermix_site.conf import conf, load
from memory.conversations import ConversationError, window_read
from memory.models import Message
from memory.transcripts import transcript_store

pytestmark = pytest.mark.django_db


def test_transcripts_are_not_stored_by_default(home):
    assert transcript_store(agent_id="main", device_id="kitchen", role="user", text="hello") is None
    assert Message.objects.count() == 0


def test_with_persist_transcripts_on_each_device_has_its_realtime_conversation(home, monkeypatch):
    monkeypatch.setenv("FERMIX_MEMORY_PERSIST_TRANSCRIPTS", "true")
    with conf.use(load()):
        transcript_store(agent_id="main", device_id="kitchen", role="user", text=" I bought oat milk ")
        transcript_store(agent_id="main", device_id="kitchen", role="assistant", text="Noted.")
        transcript_store(agent_id="main", device_id="car", role="user", text="Drive home")
    kitchen = window_read(agent_id="main", conversation="realtime:kitchen")
    assert [(m.role, m.content, m.kind) for m in kitchen] == [("user", "I bought oat milk", "voice_turn"),
                                                               ("assistant", "Noted.", "voice_turn")]
    assert kitchen[0].metadata == {"source_type": "realtime", "device_id": "kitchen"}
    assert kitchen[0].trust == "operator"  # the owner's device: reviewed like chat
    assert [m.content for m in window_read(agent_id="main", conversation="realtime:car")] == ["Drive home"]


@pytest.mark.parametrize("fields", [{"device_id": "../x"}, {"role": "system"}, {"text": "  "}])
def test_bad_transcripts_are_refused(home, fields):
    args = {"agent_id": "main", "device_id": "kitchen", "role": "user", "text": "hi", **fields}
    with pytest.raises(ConversationError):
        transcript_store(**args)
