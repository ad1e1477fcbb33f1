"""What happens after a reply is delivered: record the turn's context, start the review, check compaction."""

from __future__ import annotations

from django.db import transaction

from memory.compactor import post_delivery_check, record_peak
from memory.conversations import ConversationKey, chat_type_set
from memory.reviewer import review_start_background


def turn_commit(*, agent_id: str, conversation: str, owner_id: str | None = None, trust: str = "guest",
                peak_prompt_tokens: int | None = None, context_window: int | None = None,
                chat_type: str | None = None) -> dict:
    """Record the provider-reported peak prompt tokens, enqueue the background review (time-gated, after
    commit, so the turn never waits for it) and the post-delivery compaction when the peak crossed the
    threshold. Returns {"review", "compaction", "compacted", "notice"}."""
    key = ConversationKey.parse(conversation)
    if peak_prompt_tokens is not None and (not isinstance(peak_prompt_tokens, int) or peak_prompt_tokens < 0):
        raise ValueError("peak_prompt_tokens must be a non-negative whole number")
    with transaction.atomic():
        record_peak(agent_id=agent_id, conversation=key, peak_prompt_tokens=peak_prompt_tokens,
                    context_window=context_window, owner_id=owner_id)
        if chat_type is not None:
            chat_type_set(agent_id=agent_id, key=key, chat_type=chat_type)
        review = review_start_background(agent_id=agent_id, conversation=key)
        compaction = post_delivery_check(agent_id=agent_id, conversation=key, context_window=context_window)
    return {"review": review, "compaction": compaction, "compacted": False, "notice": None}
