"""Counting the tokens of the ``<rag-context>`` block for its budget.

The count is ``cl100k_base`` (GPT-4 / GPT-3.5), a real tokenizer close to what most chat models
bill: tiktoken's encoding file ships inside ``llama-index-core`` (its ``_static`` cache), so it
loads offline, where tiktoken on its own would download it. If it cannot be loaded, the
count falls back to one token per 3 UTF-8 bytes, an over-estimate for English text (cl100k
averages ~4 bytes per token), so a block stays within its budget either way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from vancetope_rag.secrets import get_logger

log = get_logger(__name__)

__all__ = ["count_tokens", "token_counter"]


def _fallback(text: str) -> int:
    return (len(text.encode("utf-8", errors="replace")) + 2) // 3


@functools.cache
def token_counter() -> Callable[[str], int]:
    """The process's token counter (loaded once)."""
    try:
        from llama_index.core.utils import get_tokenizer

        encode = get_tokenizer()
        encode("warm-up")
    except Exception as exc:  # offline, or a broken tiktoken install
        log.warning("cl100k_base unavailable (%s); counting 1 token per 3 bytes", exc)
        return _fallback

    def count(text: str) -> int:
        return len(encode(text))

    return count


def count_tokens(text: str) -> int:
    """Tokens of ``text`` in ``cl100k_base`` (see the module docstring for the fallback)."""
    return token_counter()(text)
