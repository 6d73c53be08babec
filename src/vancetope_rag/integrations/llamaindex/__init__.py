"""LlamaIndex chat integration: the LLM wrapper that gives every chat call the turn's
``pre_turn`` system messages, and the message rules it follows."""

from vancetope_rag.integrations.llamaindex.llm import (
    INJECTED_KEY,
    RagContextLLM,
    inject_system_messages,
    last_user_turn,
)

__all__ = ["INJECTED_KEY", "RagContextLLM", "inject_system_messages", "last_user_turn"]
