"""Rules over an OpenAI chat-completions request body, free of I/O: what feeds retrieval,
where the block goes, and the caller's opt-out.

The turn's user text follows the LlamaIndex integration's rule
(:func:`~vancetope_rag.integrations.llamaindex.last_user_turn`): the run of consecutive
``user`` messages ending at the last one, so an agent's tool calls and results after it do not
hide the question; text parts only (images, audio and files in content-part arrays are left
out). ``developer`` counts as ``system``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from vancetope_rag.errors import InvalidInputError
from vancetope_rag.integrations.llamaindex import last_user_turn
from vancetope_rag.proxy.config import Placement

#: The body extension field a request may carry; taken out before forwarding.
EXTENSION_FIELD = "vancetope_rag"
#: The header a request may carry to opt out: ``X-Vancetope-Rag-Inject: off``.
OPT_OUT_HEADER = "x-vancetope-rag-inject"
_SYSTEM_ROLES = frozenset({"system", "developer"})
_OFF = frozenset({"off", "false", "0", "no"})


#: Deepest nesting of arrays and objects a request body may have: a chat body with tools whose
#: JSON schemas nest needs a few dozen levels; 200,000 ``[`` would exhaust the parser's stack.
MAX_JSON_DEPTH = 64
#: JSON strings (skipped when counting brackets) and the brackets themselves.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")
#: One segment of a model id, as upstreams name models: ``gpt-4o``, ``llama3.1:8b``,
#: ``meta-llama/Llama-3.1-8B-Instruct`` (two segments), ``@cf/meta/llama-3-8b``.
_MODEL_SEGMENT = re.compile(r"[A-Za-z0-9._:@+=~-]{1,256}")
MAX_MODEL_SEGMENTS = 8


def parse_json(raw: bytes) -> object:
    """``raw`` parsed, nested at most :data:`MAX_JSON_DEPTH` deep.

    Raises:
        InvalidInputError: Nested deeper (checked before parsing, so the parser never
            recurses that far).
        ValueError: Not JSON (``json.JSONDecodeError``, or not UTF-8).
    """
    depth = 0
    for bracket in _BRACKETS.finditer(_JSON_STRING.sub(b"", raw)):
        depth += 1 if bracket.group() in (b"[", b"{") else -1
        if depth > MAX_JSON_DEPTH:
            raise InvalidInputError(
                f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} deep"
            )
    try:
        return json.loads(raw)
    except RecursionError:  # what the count above missed (it reads invalid JSON loosely)
        raise InvalidInputError(
            f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} deep"
        ) from None


def model_path(raw: str) -> str | None:
    """The upstream path below ``/models`` for a model id as the request's path spells it
    (percent-encoded), or None when it is not a model id.

    The id is percent-decoded once (the openai SDK sends ``meta-llama%2FLlama-3.1-8B``);
    each ``/``-separated segment must be letters, digits and ``._:@+=~-``, not ``.`` or
    ``..``: no backslash, NUL or ``%`` (what is still encoded after one decoding is double
    encoding). The path sent is rebuilt from the checked segments, encoded again.
    """
    segments = unquote(raw, errors="replace").split("/")  # U+FFFD is no segment character
    if len(segments) > MAX_MODEL_SEGMENTS or not all(
        _MODEL_SEGMENT.fullmatch(s) and s not in (".", "..") for s in segments
    ):
        return None
    return "/models/" + "/".join(quote(s, safe=":@+=~") for s in segments)


def check_chat_body(body: object) -> dict[str, Any]:
    """The request body as a JSON object with a ``messages`` list of message objects.

    Raises:
        InvalidInputError: What is wrong, for the caller (the rest is the upstream's to judge).
    """
    if not isinstance(body, dict):
        raise InvalidInputError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInputError("'messages' must be a non-empty array of message objects")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidInputError(f"messages[{i}] must be an object with a 'role' text")
    return body


def text_of(content: object) -> str | None:
    """The text of a message's ``content``: a string, or the ``text`` parts of an array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(texts) if texts else None
    return None


def _role(role: str) -> MessageRole:
    if role in _SYSTEM_ROLES:
        return MessageRole.SYSTEM
    try:
        return MessageRole(role)
    except ValueError:  # a role of some newer API: not the user's question either way
        return MessageRole.ASSISTANT


def user_turn(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The texts of the trailing user turn, for retrieval."""
    chat = [
        ChatMessage(role=_role(str(m.get("role"))), content=text_of(m.get("content")))
        for m in messages
    ]
    return last_user_turn(chat)


def _leading_system(messages: Sequence[Mapping[str, Any]]) -> int:
    at = 0
    while at < len(messages) and messages[at].get("role") in _SYSTEM_ROLES:
        at += 1
    return at


def _appended(content: object, blocks: Sequence[str]) -> object:
    joined = "\n\n".join(blocks)
    if isinstance(content, list):
        return [*content, {"type": "text", "text": joined}]
    text = content if isinstance(content, str) else ""
    return f"{text}\n\n{joined}" if text.strip() else joined


def insert_blocks(
    messages: Sequence[Mapping[str, Any]], blocks: Sequence[str], placement: Placement
) -> list[dict[str, Any]]:
    """``messages`` with the turn's blocks after the caller's leading system messages.

    Args:
        messages: The request's messages (not modified).
        blocks: What ``pre_turn`` gave, in order; blank ones are skipped.
        placement: ``separate``: one ``system`` message per block right after the leading
            ``system``/``developer`` messages; ``merge``: appended to the last of those (a new
            first ``system`` message when there is none), for upstream templates that take
            one system message.
    """
    out = [dict(m) for m in messages]
    blocks = [b for b in blocks if b.strip()]
    if not blocks:
        return out
    at = _leading_system(out)
    if placement == "merge" and at > 0:
        out[at - 1]["content"] = _appended(out[at - 1].get("content"), blocks)
        return out
    new = [{"role": "system", "content": b} for b in blocks]
    if placement == "merge":
        new = [{"role": "system", "content": "\n\n".join(blocks)}]
    return [*out[:at], *new, *out[at:]]


def opted_out(headers: Mapping[str, str], body: dict[str, Any]) -> bool:
    """Whether the request opts out of injection, by header or by the body's extension field
    (``{"vancetope_rag": {"inject": "off"}}``). Only ``off`` is accepted: a caller can decline
    the block, never force one the recipe or settings turn off.

    Raises:
        InvalidInputError: An opt-out value other than ``off``, or an unknown extension field.
    """
    header = headers.get(OPT_OUT_HEADER)
    if header is not None and header.strip().lower() not in _OFF:
        raise InvalidInputError(
            f"{OPT_OUT_HEADER}: only 'off' is accepted (opt out of the injected context); "
            "the recipe and the project's settings decide otherwise"
        )
    extension = body.get(EXTENSION_FIELD)
    body_off = False
    if extension is not None:
        if not isinstance(extension, dict) or set(extension) - {"inject"}:
            raise InvalidInputError(
                f"'{EXTENSION_FIELD}' must be an object with the one field 'inject'"
            )
        value = extension.get("inject")
        if value is False or (isinstance(value, str) and value.strip().lower() in _OFF):
            body_off = True
        elif value is not None:
            raise InvalidInputError(
                f"'{EXTENSION_FIELD}.inject': only 'off' (or false) is accepted; the recipe "
                "and the project's settings decide otherwise"
            )
    return header is not None or body_off
