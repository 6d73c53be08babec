"""Ready-made chat-framework integrations of the pre-turn hook.

LlamaIndex is a core dependency, so its integration is re-exported here; integrations for
other frameworks would live in their own modules and be imported from there.
"""

from __future__ import annotations

from vancetope_rag.integrations.llamaindex.llm import (
    INJECTED_KEY,
    RagContextLLM,
    inject_system_messages,
    last_user_turn,
)

__all__ = ["INJECTED_KEY", "RagContextLLM", "inject_system_messages", "last_user_turn"]
