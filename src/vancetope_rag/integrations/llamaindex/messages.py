"""Chat-message rules of the LlamaIndex integration, free of any LLM: where injected system
messages go and which messages make up the user's turn."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.base.llms.types import ChatMessage, MessageRole

__all__ = ["INJECTED_KEY", "inject_system_messages", "last_user_turn"]

#: ``additional_kwargs`` key that marks a system message this module inserted.
INJECTED_KEY = "vancetope_rag_injected"

# Roles that make up the host's leading system part (prompt, memory); o1-style models use
# ``developer`` for what others call ``system``.
_LEADING_ROLES = frozenset({MessageRole.SYSTEM, MessageRole.DEVELOPER})


def _is_injected(message: ChatMessage) -> bool:
    return bool(message.additional_kwargs.get(INJECTED_KEY))


def inject_system_messages(
    messages: Sequence[ChatMessage], blocks: Sequence[str]
) -> list[ChatMessage]:
    """Insert ``blocks`` as system messages after the leading system messages.

    Messages a previous call inserted (marked with :data:`INJECTED_KEY`) are dropped first, so
    the result carries exactly this call's blocks even when a host feeds an earlier LLM input
    back in, or wrappers are nested. The input is not modified.

    Args:
        messages: The LLM input as the host built it.
        blocks: System message texts, in order; blank ones are skipped.

    Returns:
        A new list: the leading ``system``/``developer`` messages, then one ``system`` message
        per block, then the rest of the conversation.
    """
    kept = [m for m in messages if not _is_injected(m)]
    new = [
        ChatMessage(role=MessageRole.SYSTEM, content=b, additional_kwargs={INJECTED_KEY: True})
        for b in blocks
        if b.strip()
    ]
    at = 0
    while at < len(kept) and kept[at].role in _LEADING_ROLES:
        at += 1
    return [*kept[:at], *new, *kept[at:]]


def _is_react_observation(messages: Sequence[ChatMessage], i: int) -> bool:
    """A ReAct agent's tool result, which LlamaIndex sends with the ``user`` role by default.

    ``ReActChatFormatter`` writes it as ``Observation: …`` right after the assistant's
    ``Action:`` step; it belongs to the turn, it is not what the user asked.
    """
    text = messages[i].content or ""
    if not text.startswith("Observation:") or i == 0:
        return False
    before = messages[i - 1]
    return before.role == MessageRole.ASSISTANT and "Action:" in (before.content or "")


def last_user_turn(messages: Sequence[ChatMessage]) -> list[str]:
    """Texts of the last user turn: the run of consecutive user messages ending at the last one.

    Messages after it (an agent's tool calls and results in the same turn, ReAct observations
    included) do not end the turn. Non-text content (images, audio) is ignored; messages
    without text are left out.
    """

    def is_user(i: int) -> bool:
        return messages[i].role == MessageRole.USER and not _is_react_observation(messages, i)

    users = [i for i in range(len(messages)) if is_user(i)]
    if not users:
        return []
    end = users[-1]
    start = end
    while start > 0 and is_user(start - 1):
        start -= 1
    texts = [messages[i].content for i in range(start, end + 1)]
    return [t for t in texts if t and t.strip()]
