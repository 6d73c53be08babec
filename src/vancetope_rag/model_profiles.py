"""Model profiles: what a provider knows of an embedding model beyond its name.

A :class:`ModelProfile` holds the model's input window, how its tokens are counted (its own
tokenizer, ``cl100k``, or :func:`estimate_tokens` where the tokenizer is not at hand), the
text prefixes an asymmetric model expects on queries and documents (``query: `` /
``passage: `` for e5, ``search_query: `` / ``search_document: `` for nomic, the bge
instruction) or the ``input_type`` values a server takes in their place, and its dimension.
Known models ship with their profile (:func:`known_profile`); unknown ones get a safe one
(:func:`fallback_profile`). :class:`PrefixedEmbedding` puts the prefixes on the texts.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import PrivateAttr

#: How a profile counts tokens: the provider's own tokenizer, OpenAI's cl100k, or an estimate;
#: or the estimate scaled to the model's own counts, learnt from the server when the RAG was
#: created (its ``/tokenize`` route, or the ``usage`` of its embeddings answers).
TOKENIZER_MODEL = "model"
TOKENIZER_CL100K = "cl100k"
TOKENIZER_ESTIMATE = "estimate"
TOKENIZER_SERVER_TOKENIZE = "server-tokenize"
TOKENIZER_SERVER_USAGE = "server-usage"
SERVER_COUNTS = (TOKENIZER_SERVER_TOKENIZE, TOKENIZER_SERVER_USAGE)
#: ``file:<path>``: a tokenizer.json the user named (``ai.embedding.tokenizer``).
TOKENIZER_FILE = "file:"

#: The window of a model nobody described, behind an OpenAI-compatible URL: nearly every
#: open embedding model reads at least 512 tokens.
FALLBACK_WINDOW = 512

BGE_QUERY = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class ModelProfile:
    """What a provider knows of one model (see the module docstring)."""

    max_input_tokens: int
    tokenizer: str = TOKENIZER_MODEL
    #: Tokens the model adds around every input (``<s>``/``</s>``, ``[CLS]``/``[SEP]``).
    special_tokens: int = 0
    query_prefix: str = ""
    document_prefix: str = ""
    #: (query, document) values of an ``input_type`` field a server may take instead of
    #: the prefixes (it then adds them itself); never sent together with the prefixes.
    input_types: tuple[str, str] | None = None
    dimension: int | None = None
    #: The model's tokens per estimated token (a ``server-*`` tokenizer): chunks are counted
    #: as :func:`estimate_tokens` times this, the largest ratio the server's counts showed.
    token_ratio: float | None = None

    @property
    def has_prefixes(self) -> bool:
        return bool(self.query_prefix or self.document_prefix)

    def with_overrides(
        self,
        *,
        max_input_tokens: int | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
    ) -> ModelProfile:
        """This profile with a tenant's or project's ``ai.embedding.*`` overrides; a prefix
        set by hand is sent as text (the server's ``input_type`` is no longer used)."""
        out = self
        if max_input_tokens is not None:
            out = replace(out, max_input_tokens=max_input_tokens)
        if query_prefix is not None or document_prefix is not None:
            out = replace(
                out,
                query_prefix=self.query_prefix if query_prefix is None else query_prefix,
                document_prefix=self.document_prefix
                if document_prefix is None
                else document_prefix,
                input_types=None,
            )
        return out


#: What a RAG created before profiles is pinned to: no prefixes, the provider's old window.
EMPTY_PROFILE = ModelProfile(0)


def profile_to_json(profile: ModelProfile) -> str:
    """The profile as a RAG pins it (JSON object text; ``{}`` for :data:`EMPTY_PROFILE`)."""
    if profile == EMPTY_PROFILE:
        return "{}"
    out: dict[str, Any] = {
        "maxInputTokens": profile.max_input_tokens,
        "tokenizer": profile.tokenizer,
        "specialTokens": profile.special_tokens,
        "queryPrefix": profile.query_prefix,
        "documentPrefix": profile.document_prefix,
        "inputTypes": list(profile.input_types) if profile.input_types else None,
    }
    if profile.dimension:
        out["dimension"] = profile.dimension
    if profile.token_ratio:
        out["tokenRatio"] = profile.token_ratio
    return json.dumps(out, sort_keys=True)


def profile_from_json(text: str | None) -> ModelProfile:
    """A pinned profile; :data:`EMPTY_PROFILE` for a RAG that pinned none (None or ``{}``)."""
    data = json.loads(text) if text else {}
    if not data:
        return EMPTY_PROFILE
    types = data.get("inputTypes")
    return ModelProfile(
        int(data["maxInputTokens"]),
        str(data.get("tokenizer", TOKENIZER_MODEL)),
        int(data.get("specialTokens", 0)),
        str(data.get("queryPrefix", "")),
        str(data.get("documentPrefix", "")),
        (str(types[0]), str(types[1])) if types else None,
        data.get("dimension"),
        float(data["tokenRatio"]) if data.get("tokenRatio") else None,
    )


def same_embedding(a: ModelProfile, b: ModelProfile) -> bool:
    """Whether two profiles embed alike: same window and prefixes (sent as text or as an
    ``input_type``: which of the two a server takes is learnt once, not configured)."""
    return (a.max_input_tokens, a.query_prefix, a.document_prefix) == (
        b.max_input_tokens,
        b.query_prefix,
        b.document_prefix,
    )


def describe_profile(profile: ModelProfile) -> str:
    """``window 512, query prefix 'query: ', document prefix 'passage: '`` for status."""
    parts = [f"window {profile.max_input_tokens}"]
    if profile.query_prefix:
        parts.append(f"query prefix {profile.query_prefix!r}")
    if profile.document_prefix:
        parts.append(f"document prefix {profile.document_prefix!r}")
    return ", ".join(parts)


def _e5(dim: int) -> ModelProfile:
    return ModelProfile(
        512,
        TOKENIZER_ESTIMATE,
        special_tokens=2,
        query_prefix="query: ",
        document_prefix="passage: ",
        input_types=("query", "passage"),
        dimension=dim,
    )


def _bge(window: int, dim: int, query: str = BGE_QUERY) -> ModelProfile:
    return ModelProfile(window, TOKENIZER_ESTIMATE, 2, query_prefix=query, dimension=dim)


_SIZES = {"small": 384, "base": 768, "large": 1024}

#: (pattern over the normalised model name, profile builder); the first match wins.
_KNOWN: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], ModelProfile]], ...] = (
    (
        re.compile(r"text-embedding-3-(small|large)"),
        lambda m: ModelProfile(
            8191, TOKENIZER_CL100K, dimension=1536 if m.group(1) == "small" else 3072
        ),
    ),
    (
        re.compile(r"text-embedding-ada-002"),
        lambda m: ModelProfile(8191, TOKENIZER_CL100K, dimension=1536),
    ),
    (
        re.compile(r"gemini-embedding-001"),
        lambda m: ModelProfile(2048, TOKENIZER_CL100K, dimension=3072),
    ),
    (
        re.compile(r"(?:text-embedding-004|text-multilingual-embedding-002)"),
        lambda m: ModelProfile(2048, TOKENIZER_CL100K, dimension=768),
    ),
    (
        re.compile(r"(?:^|[-_])e5-(small|base|large)(?!-?v?\d*-?mistral)"),
        lambda m: _e5(_SIZES[m.group(1)]),
    ),
    (
        re.compile(r"nomic-embed-text"),
        # nomic reads 8,192 tokens, but Ollama serves it with a 2,048-token context.
        lambda m: ModelProfile(
            2048,
            TOKENIZER_ESTIMATE,
            2,
            query_prefix="search_query: ",
            document_prefix="search_document: ",
            dimension=768,
        ),
    ),
    (re.compile(r"bge-m3"), lambda m: ModelProfile(8192, TOKENIZER_ESTIMATE, 2, dimension=1024)),
    (
        re.compile(r"bge-(small|base|large)-(?:en|zh)"),
        lambda m: _bge(512, _SIZES[m.group(1)]),
    ),
    (re.compile(r"mxbai-embed-large"), lambda m: _bge(512, 1024)),
    (re.compile(r"snowflake-arctic-embed"), lambda m: _bge(512, 0)),
    (
        re.compile(r"all-minilm(?:-l6-v2|-l12-v2)?(?::|$)|all-minilm-l(?:6|12)"),
        lambda m: ModelProfile(256, TOKENIZER_ESTIMATE, 2, dimension=384),
    ),
    (
        re.compile(r"paraphrase-multilingual-minilm"),
        lambda m: ModelProfile(128, TOKENIZER_ESTIMATE, 2, dimension=384),
    ),
)


def normalise(model: str) -> str:
    """Lowercase, without an organisation (``intfloat/``) and without an Ollama tag."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    return name.split(":", 1)[0] if ":" in name and not name.endswith(":") else name


def known_profile(model: str) -> ModelProfile | None:
    """The shipped profile of ``model`` (any spelling: ``intfloat/e5-small-v2``,
    ``nomic-embed-text:latest``), or None for a model nobody described."""
    name = normalise(model)
    for pattern, build in _KNOWN:
        match = pattern.search(name)
        if match:
            profile = build(match)
            if profile.dimension == 0:
                profile = replace(profile, dimension=None)
            return profile
    return None


def fallback_profile(base_url: str | None) -> ModelProfile:
    """The profile of an unknown model: OpenAI's own API counts cl100k tokens in 8,191; any
    other OpenAI-compatible server gets the smallest usual window, counted safely."""
    if not base_url or "api.openai.com" in base_url:
        return ModelProfile(8191, TOKENIZER_CL100K)
    return ModelProfile(FALLBACK_WINDOW, TOKENIZER_ESTIMATE, special_tokens=2)


# -- the estimate --------------------------------------------------------------------------

_PIECES = re.compile(
    r"(?P<latin>[^\W\d_]+)|(?P<digits>\d+)|(?P<space>\s+)|(?P<other>.)", re.UNICODE | re.DOTALL
)
_ASCII = re.compile(r"[A-Za-z]+|[^A-Za-z]")


def _letters(word: str) -> int:
    """An ASCII run one piece per three letters; any other letter one piece each (an English
    vocabulary spells Cyrillic or CJK letter by letter; multilingual ones do better)."""
    return sum(math.ceil(len(p) / 3) for p in _ASCII.findall(word))


def estimate_tokens(text: str) -> list[str]:
    """Pieces of ``text`` at least as many as a subword tokenizer (WordPiece, SentencePiece,
    BPE) makes of it: an ASCII word counts one piece per three letters, a number one more than
    half its digits, every other letter or symbol one each. Used where the model's own tokenizer is
    not at hand, so a chunk sized by it fits the window; it over-counts English ~1.5×."""
    out: list[str] = []
    for m in _PIECES.finditer(text):
        kind, piece = m.lastgroup, m.group()
        if kind == "space":
            continue
        if kind == "latin":
            n = _letters(piece)
        elif kind == "digits":
            n = len(piece) // 2 + 1
        else:
            n = 1
        out.extend([piece] * n)
    return out


def scaled_estimate(ratio: float) -> Callable[[str], Sequence[int]]:
    """A tokenizer counting :func:`estimate_tokens` times ``ratio`` (rounded up): the
    estimate brought to a model's own counts, as its server showed them."""

    def count(text: str) -> Sequence[int]:
        return range(math.ceil(len(estimate_tokens(text)) * ratio))

    return count


def describe_counting(profile: ModelProfile) -> str:
    """What counts a RAG's chunks (status): the model's tokenizer, cl100k, the server's
    counts, or the estimate."""
    if profile.tokenizer in SERVER_COUNTS and profile.token_ratio:
        how = "/tokenize" if profile.tokenizer == TOKENIZER_SERVER_TOKENIZE else "usage"
        return (
            f"the server's token counts ({how}): {profile.token_ratio:.2f} tokens per "
            "estimated token"
        )
    if profile.tokenizer.startswith(TOKENIZER_FILE):
        path = profile.tokenizer.removeprefix(TOKENIZER_FILE)
        return f"the tokenizer {path} (ai.embedding.tokenizer)"
    if profile.tokenizer == TOKENIZER_CL100K:
        return "cl100k_base (tiktoken)"
    if profile.tokenizer == TOKENIZER_ESTIMATE:
        return "an estimate (the server gave no token count when the RAG was created)"
    return "the model's own tokenizer"


# -- prefixes ------------------------------------------------------------------------------


class PrefixedEmbedding(BaseEmbedding):
    """Puts a profile's query and document prefixes on the texts an inner model embeds."""

    _inner: BaseEmbedding = PrivateAttr()
    _query_prefix: str = PrivateAttr()
    _document_prefix: str = PrivateAttr()

    def __init__(self, inner: BaseEmbedding, query_prefix: str, document_prefix: str) -> None:
        super().__init__(model_name=inner.model_name, embed_batch_size=inner.embed_batch_size)
        self._inner = inner
        self._query_prefix = query_prefix
        self._document_prefix = document_prefix

    @classmethod
    def class_name(cls) -> str:
        return "PrefixedEmbedding"

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._inner.get_query_embedding(self._query_prefix + query)

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await self._inner.aget_query_embedding(self._query_prefix + query)

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._inner.get_text_embedding(self._document_prefix + text)

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._inner.get_text_embedding_batch([self._document_prefix + t for t in texts])


def with_prefixes(embed: BaseEmbedding, profile: ModelProfile) -> BaseEmbedding:
    """``embed`` behind :class:`PrefixedEmbedding` when the profile has prefixes to send."""
    if not profile.has_prefixes:
        return embed
    return PrefixedEmbedding(embed, profile.query_prefix, profile.document_prefix)


def prefix_tokens(profile: ModelProfile, tokenizer: Callable[[str], Sequence[Any]]) -> int:
    """Window the longer prefix takes (sent as text or added by the server)."""
    return max(len(tokenizer(profile.query_prefix)), len(tokenizer(profile.document_prefix)))
