"""The cascade setting registry (spec §4.5 plus retrieval tuning): every key with its type,
default and secrecy; validation, the JSON the stores keep, innermost-wins resolution and
masking for display.

Pure rules, no I/O. Settings live at two scopes, tenant and project; the innermost scope that
has a value wins, else the spec default. ``rag.autoInject.enabled`` has an extra rule on top
(:mod:`vancetope_rag.domain.settings.cascade`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from urllib.parse import urlsplit

from vancetope_rag.domain import limits
from vancetope_rag.domain.bridge import BRIDGE_SETTINGS
from vancetope_rag.domain.retrieval.calibration import parse_min_score
from vancetope_rag.domain.retrieval.relevance import RELEVANCE_AUTO, parse_relevance_cut
from vancetope_rag.domain.settings.cascade import parse_auto_inject
from vancetope_rag.domain.settings.extraction import EXTRACT_SETTINGS
from vancetope_rag.domain.settings.kinds import SettingKind, SettingSpec
from vancetope_rag.domain.suggest import did_you_mean
from vancetope_rag.errors import InvalidInputError, SettingError

__all__ = [
    "EMBEDDING_GROUP",
    "RERANK_GROUP",
    "SECRET_MASK",
    "SETTINGS",
    "SettingKind",
    "SettingSpec",
    "decode_setting",
    "encode_setting",
    "inherits_embedding_value",
    "mask_secret",
    "parse_setting_value",
    "resolve_setting",
]

#: What :func:`mask_secret` shows instead of a secret's value.
SECRET_MASK = "********"


def _specs(*specs: SettingSpec) -> Mapping[str, SettingSpec]:
    return MappingProxyType({spec.key: spec for spec in specs})


#: Every cascade setting key this package reads (spec §4.5 plus retrieval tuning).
SETTINGS: Mapping[str, SettingSpec] = _specs(
    SettingSpec(
        "rag.project.enabled",
        SettingKind.BOOL,
        True,
        description="Turns the project's _documents RAG on or off (indexer and AutoInject).",
    ),
    SettingSpec(
        "rag.project.includeSummaries",
        SettingKind.BOOL,
        True,
        description="Also write 'summary' chunks next to 'content' chunks.",
    ),
    SettingSpec(
        "rag.autoInject.enabled",
        SettingKind.AUTO_INJECT,
        None,
        nullable=True,
        description="AutoInject default for recipes without an ON/OFF stance (ON, OFF, AUTO).",
    ),
    SettingSpec(
        "ai.embedding.provider",
        SettingKind.PROVIDER,
        "none",
        description="Embedding backend for new RAGs; 'none' switches RAG off for the tenant.",
    ),
    SettingSpec(
        "ai.embedding.model",
        SettingKind.STRING,
        None,
        nullable=True,
        description="Embedding model name; empty means the provider's default.",
    ),
    SettingSpec(
        "ai.embedding.apiKey",
        SettingKind.STRING,
        None,
        secret=True,
        nullable=True,
        description="API key of the embedding provider (never shown).",
    ),
    SettingSpec(
        "ai.embedding.baseUrl",
        SettingKind.URL,
        None,
        nullable=True,
        description="Base URL of an OpenAI-compatible endpoint; empty means api.openai.com.",
    ),
    SettingSpec(
        "ai.embedding.requestsPerMinute",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=1_000_000,
        description="Most requests per minute this process sends to a remote embedding "
        "provider (per endpoint); empty means unpaced. In-process models are never paced.",
    ),
    SettingSpec(
        "ai.embedding.tokensPerMinute",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=1_000_000_000,
        description="Most input tokens per minute this process sends to a remote embedding "
        "provider (per endpoint, counted with the model's tokenizer); empty means unpaced.",
    ),
    SettingSpec(
        "ai.embedding.maxInputTokens",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=16,
        maximum=1_000_000,
        description="Tokens the embedding model reads per input; empty means the model's "
        "profile. New RAGs and rebuilds pin it.",
    ),
    SettingSpec(
        "ai.embedding.tokenizer",
        SettingKind.STRING,
        None,
        nullable=True,
        description="A local tokenizer of the embedding model (a tokenizer.json file, or a "
        "folder holding one, as the Hugging Face tokenizers library reads it) that sizes the "
        "chunks of a remote model exactly; empty means the server's counts, else an estimate. "
        "New RAGs and rebuilds pin it.",
    ),
    SettingSpec(
        "ai.embedding.queryPrefix",
        SettingKind.STRING,
        None,
        nullable=True,
        description="Text put before every query (one space follows it; 'none' for no prefix); "
        "empty means the model's profile. New RAGs and rebuilds pin it.",
    ),
    SettingSpec(
        "ai.embedding.documentPrefix",
        SettingKind.STRING,
        None,
        nullable=True,
        description="Text put before every chunk embedded (one space follows it; 'none' for no "
        "prefix); empty means the model's profile. New RAGs and rebuilds pin it.",
    ),
    # -- the rerank stage (off with provider none): see services/retrieval/rerank.py
    SettingSpec(
        "ai.rerank.provider",
        SettingKind.PROVIDER,
        "none",
        description="Reranker that reorders a query's candidates before topK and "
        "maxPerDocument apply (tei, cohere for any Cohere-style /rerank API, or a plugin's); "
        "'none' turns the rerank stage off.",
    ),
    SettingSpec(
        "ai.rerank.model",
        SettingKind.STRING,
        None,
        nullable=True,
        description="Reranker model name; empty means the provider's default.",
    ),
    SettingSpec(
        "ai.rerank.baseUrl",
        SettingKind.URL,
        None,
        nullable=True,
        description="Base URL of the rerank API, to which /rerank is appended (tei: the "
        "server's root; cohere: e.g. https://api.jina.ai/v1 or http://localhost:8000/v1); empty "
        "means the provider's default (cohere: https://api.cohere.com/v1).",
    ),
    SettingSpec(
        "ai.rerank.apiKey",
        SettingKind.STRING,
        None,
        secret=True,
        nullable=True,
        description="API key of the reranker, sent as a bearer token (write-only, never shown).",
    ),
    SettingSpec(
        "ai.rerank.candidates",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=1000,  # the largest topK a query may ask for (domain.retrieval.MAX_TOP_K)
        description="Candidates sent to the reranker per query; empty means max(4 x topK, 20).",
    ),
    SettingSpec(
        "ai.rerank.timeoutSeconds",
        SettingKind.FLOAT,
        10.0,
        minimum=0.1,
        maximum=600.0,
        description="How long a query waits for the reranker; past it the query keeps the "
        "retrieval's order.",
    ),
    SettingSpec(
        "ai.rerank.requestsPerMinute",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=1_000_000,
        description="Most requests per minute this process sends to the reranker (per "
        "endpoint); a query past it keeps the retrieval's order rather than wait. Empty means "
        "unpaced.",
    ),
    SettingSpec(
        "rag.topK",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=limits.TOP_K_MAX,
        description="How many hits a query returns; empty means the built-in default.",
    ),
    SettingSpec(
        "rag.minScore",
        SettingKind.MIN_SCORE,
        None,
        nullable=True,
        minimum=-1.0,
        maximum=1.0,
        description="Hits scoring below this cosine similarity are dropped; auto: the "
        "threshold calibrated for each RAG's model and chunks; empty: the engine's default.",
    ),
    SettingSpec(
        "rag.rebuild.maxFailureRatio",
        SettingKind.FLOAT,
        0.05,
        minimum=0.0,
        maximum=1.0,
        description="A rebuild onto a new model is abandoned, keeping the live index, when "
        "more than this share of its documents fail for good.",
    ),
    SettingSpec(
        "rag.maxPerDocument",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=1,
        maximum=limits.MAX_PER_DOCUMENT_MAX,
        description="At most this many hits from one document.",
    ),
    SettingSpec(
        "rag.retrieval.mode",
        SettingKind.CHOICE,
        # SciFact (docs/benchmarks.md): nDCG@10 0.718 hybrid vs 0.657 dense, the same 29 of 30
        # off-topic turns dropped at minScore 0.35.
        "hybrid",
        choices=("dense", "hybrid"),
        description="dense: vector similarity; hybrid: fused with full-text (BM25) relevance.",
    ),
    SettingSpec(
        "rag.autoInject.maxTokens",
        SettingKind.INT,
        None,
        nullable=True,
        minimum=limits.AUTOINJECT_MAX_TOKENS_MIN,
        maximum=limits.AUTOINJECT_MAX_TOKENS_MAX,
        description="Token budget of the <rag-context> block; empty means the built-in default.",
    ),
    SettingSpec(
        "rag.autoInject.relevanceCut",
        SettingKind.RELEVANCE_CUT,
        # SciFact (docs/benchmarks.md, "The relevance cut"): hybrid blocks at 0.70x the
        # tokens, precision 0.256 -> 0.424, recall 0.97x
        RELEVANCE_AUTO,
        description="Which of a turn's hits the <rag-context> block keeps: auto: those within "
        "the RAG's calibrated gap of the turn's best hit (in hybrid, also ranked well by the "
        "fused score; the gap narrowed on a turn whose best barely clears the RAG's noise "
        "floor) or ranked first by the words; off: every hit up to rag.topK; a number: that "
        "gap (a cosine).",
    ),
    SettingSpec(
        "rag.autoInject.whenToolsPresent",
        SettingKind.CHOICE,
        "inject",
        choices=("inject", "skip"),
        description="skip: no block when the turn's model has rag_query as a tool, unless the "
        "recipe itself says ON.",
    ),
    *EXTRACT_SETTINGS,
    *BRIDGE_SETTINGS,
)

_PROVIDER_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
_BOOL_WORDS: Mapping[str, bool] = MappingProxyType(
    {
        "true": True,
        "yes": True,
        "on": True,
        "1": True,
        "false": False,
        "no": False,
        "off": False,
        "0": False,
    }
)


def unknown_setting(key: str) -> SettingError:
    """The error for a key that is no setting: the close keys first, then all of them."""
    return SettingError(
        f"unknown setting {key!r}; {did_you_mean(key, SETTINGS)}"
        f"known settings: {', '.join(sorted(SETTINGS))}"
    )


def _spec(key: str) -> SettingSpec:
    spec = SETTINGS.get(key)
    if spec is None:
        raise unknown_setting(key)
    return spec


def _bad(spec: SettingSpec, accepted: str, raw: object) -> SettingError:
    # A secret's value never appears in a message, not even a wrong one (it may be a real key).
    got = f"a {type(raw).__name__}" if spec.secret else repr(raw)
    return SettingError(f"{spec.key} must be {accepted}, got {got}")


def _bounds(spec: SettingSpec, what: str) -> str:
    return f"{what} from {spec.minimum:g} to {spec.maximum:g}"


def _in_bounds(spec: SettingSpec, value: float) -> bool:
    low = -math.inf if spec.minimum is None else spec.minimum
    high = math.inf if spec.maximum is None else spec.maximum
    return low <= value <= high


def parse_setting_value(key: str, raw: object) -> object:
    """Validate and coerce a user-supplied value for a cascade setting.

    Strings are accepted for every kind because the CLI passes everything as text
    (``"true"``, ``"0.4"``, ``"ON"``). For nullable keys, ``None`` and a blank string both
    mean ``None`` (no value at this scope).

    Args:
        key: A key of :data:`SETTINGS`.
        raw: The value as given by the user, the CLI or decoded JSON.

    Returns:
        The value in its canonical type: ``bool``, :class:`AutoInject`, ``str``, ``int``,
        ``float`` or ``None``.

    Raises:
        SettingError: The key is unknown (the message lists the known keys) or the value does
            not fit (the message names the key and the accepted form, never a secret's value).
    """
    spec = _spec(key)
    if spec.nullable and (raw is None or (isinstance(raw, str) and not raw.strip())):
        return None
    text = raw.strip() if isinstance(raw, str) else None
    kind = spec.kind

    if kind is SettingKind.BOOL:
        if isinstance(raw, bool):
            return raw
        if text is not None and text.lower() in _BOOL_WORDS:
            return _BOOL_WORDS[text.lower()]
        raise _bad(spec, "true or false", raw)

    if kind is SettingKind.AUTO_INJECT:
        return parse_auto_inject(raw, where=key)

    if kind is SettingKind.PROVIDER:
        if text is not None and _PROVIDER_RE.match(text):
            return text
        raise _bad(spec, "a lowercase provider name such as none, embedded, openai or gemini", raw)

    if kind is SettingKind.STRING:
        if text is not None:
            return text
        raise _bad(spec, "a string", raw)

    if kind is SettingKind.URL:
        if text is not None:
            try:
                parts = urlsplit(text)
            except ValueError:
                parts = None
            if parts is not None and parts.scheme in ("http", "https") and parts.netloc:
                return text
        raise _bad(spec, "an http:// or https:// URL", raw)

    if kind is SettingKind.INT:
        number: int | None = None
        if isinstance(raw, int) and not isinstance(raw, bool):
            number = raw
        elif text is not None and re.fullmatch(r"[+-]?\d+", text):
            number = int(text)
        if number is not None and _in_bounds(spec, number):
            return number
        raise _bad(spec, _bounds(spec, "an integer"), raw)

    if kind is SettingKind.MIN_SCORE:
        try:
            return parse_min_score(raw, key)
        except InvalidInputError:
            raise _bad(spec, _bounds(spec, "auto or a number"), raw) from None

    if kind is SettingKind.RELEVANCE_CUT:
        try:
            return parse_relevance_cut(raw, key)
        except InvalidInputError:
            raise _bad(spec, "auto, off or a cosine gap from 0 to 2", raw) from None

    if kind is SettingKind.FLOAT:
        real: float | None = None
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            real = float(raw)
        elif text is not None:
            try:
                real = float(text)
            except ValueError:
                real = None
        if real is not None and math.isfinite(real) and _in_bounds(spec, real):
            return real
        raise _bad(spec, _bounds(spec, "a number"), raw)

    if kind is SettingKind.CHOICE:
        if text is not None and text.lower() in spec.choices:
            return text.lower()
        raise _bad(spec, "one of " + ", ".join(spec.choices), raw)

    raise AssertionError(f"unhandled setting kind {kind!r}")  # pragma: no cover


def encode_setting(key: str, value: object) -> str:
    """Validate a value and encode it as the JSON text a settings store keeps.

    Args:
        key: A key of :data:`SETTINGS`.
        value: The value, in any form :func:`parse_setting_value` accepts.

    Returns:
        JSON text, e.g. ``'true'``, ``'"ON"'``, ``'0.4'``, ``'null'``.

    Raises:
        SettingError: Unknown key or invalid value.
    """
    return json.dumps(parse_setting_value(key, value))


def decode_setting(key: str, stored: str) -> object:
    """Decode JSON text written by :func:`encode_setting` back to a validated value.

    Args:
        key: A key of :data:`SETTINGS`.
        stored: The JSON text from the settings store.

    Returns:
        The value in its canonical type (see :func:`parse_setting_value`).

    Raises:
        SettingError: Unknown key, text that is not JSON, or a stored value that is invalid.
    """
    spec = _spec(key)
    try:
        raw: object = json.loads(stored)
    except ValueError:
        shown = "" if spec.secret else f": {stored!r}"
        raise SettingError(f"stored value of {key} is not valid JSON{shown}") from None
    return parse_setting_value(key, raw)


def resolve_setting(key: str, project_value: object = None, tenant_value: object = None) -> object:
    """Resolve a setting over the cascade: the innermost scope with a value wins.

    ``None`` means "not set at this scope" (spec §4.5 reads ``null`` as "no enforcement at
    this scope"), so a project cannot null out a tenant value; it can only override it with
    another value. For ``rag.autoInject.enabled`` the result may be ``AUTO``, which still has
    to go through :func:`~vancetope_rag.domain.settings.cascade.resolve_auto_inject`:
    ``resolve_auto_inject(r, p, t)`` equals
    ``resolve_auto_inject(r, resolve_setting(key, p, t), None)``.

    Args:
        key: A key of :data:`SETTINGS`.
        project_value: The decoded project-scope value, ``None`` when not set.
        tenant_value: The decoded tenant-scope value, ``None`` when not set.

    Returns:
        The project value, else the tenant value, else the spec default.

    Raises:
        SettingError: Unknown key.
    """
    spec = _spec(key)
    if project_value is not None:
        return project_value
    if tenant_value is not None:
        return tenant_value
    return spec.default


PROVIDER_KEY = "ai.embedding.provider"
#: Settings that belong to the provider they were set with: a scope that sets another
#: provider never inherits them (a tenant's OpenAI key or model is not a project's Ollama's).
EMBEDDING_GROUP = frozenset(
    {
        "ai.embedding.model",
        "ai.embedding.apiKey",
        "ai.embedding.baseUrl",
        "ai.embedding.requestsPerMinute",
        "ai.embedding.tokensPerMinute",
        "ai.embedding.maxInputTokens",
        "ai.embedding.tokenizer",
        "ai.embedding.queryPrefix",
        "ai.embedding.documentPrefix",
    }
)
#: The same rule for the reranker: a project that picks another reranker than its tenant's
#: never sends the tenant's key to it.
RERANK_GROUP = frozenset(
    {"ai.rerank.model", "ai.rerank.apiKey", "ai.rerank.baseUrl", "ai.rerank.requestsPerMinute"}
)
#: Each provider key and the settings that belong to the provider it names.
_PROVIDER_GROUPS: Mapping[str, frozenset[str]] = MappingProxyType(
    {PROVIDER_KEY: EMBEDDING_GROUP, "ai.rerank.provider": RERANK_GROUP}
)


def inherits_embedding_value(
    key: str, project: Mapping[str, object], tenant: Mapping[str, object]
) -> bool:
    """Whether the project inherits the tenant's value of ``key``: always, but for a key of
    :data:`EMBEDDING_GROUP` (or :data:`RERANK_GROUP`) when the project sets a provider other
    than the one the tenant set (then the project gets its provider's defaults, never the
    other provider's values).

    Args:
        key: A key of :data:`SETTINGS`.
        project: The decoded project-scope values (unset keys absent or None).
        tenant: The decoded tenant-scope values.
    """
    for provider_key, group in _PROVIDER_GROUPS.items():
        if key in group:
            own, outer = project.get(provider_key), tenant.get(provider_key)
            return own is None or outer is None or own == outer
    return True


def mask_secret(key: str, value: object) -> object:
    """Hide a secret setting's value for display; other values pass through.

    Args:
        key: A key of :data:`SETTINGS`.
        value: The value to show.

    Returns:
        ``"********"`` for a set secret, else ``value`` unchanged (``None`` stays ``None``).

    Raises:
        SettingError: Unknown key.
    """
    if _spec(key).secret and value is not None:
        return SECRET_MASK
    return value
