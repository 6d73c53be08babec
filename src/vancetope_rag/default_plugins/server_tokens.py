"""How an OpenAI-compatible server counts a model's tokens, learnt when a RAG is created.

A remote model's tokenizer is not at hand, and :func:`~vancetope_rag.model_profiles.
estimate_tokens` has to over-count every text to stay within the window (e5 chunks used
60–75 % of it). So for a new RAG the provider asks the server how many tokens a few texts
(prose, code, numbers) are: TEI's ``POST /tokenize`` where it answers, else the ``usage`` of
one-text embeddings requests. The largest ratio of the server's count to the estimate, with a
margin, is pinned in the RAG's profile (``tokenRatio``): its chunks are counted as the
estimate times that ratio, the same in every process and for the RAG's whole life. A server
that gives no count leaves the estimate (status says which one sized the chunks).

A tokenizer the user names (``ai.embedding.tokenizer``: a ``tokenizer.json``) counts exactly
instead, and is pinned by path (:func:`file_tokenizer`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vancetope_rag.errors import EmbeddingConfigError, MissingDependencyError
from vancetope_rag.model_profiles import (
    TOKENIZER_SERVER_TOKENIZE,
    TOKENIZER_SERVER_USAGE,
    estimate_tokens,
)
from vancetope_rag.secrets import get_logger

log = get_logger(__name__)

#: Head-room over the largest ratio the samples showed.
MARGIN = 1.05
#: Seconds a counting call may take.
TIMEOUT_S = 30.0

#: What the counts are measured on: English prose, code and a table of numbers (the kinds of
#: text the estimate over-counts least, so other text is sized conservatively).
CALIBRATION_TEXTS = (
    "The committee reviewed the quarterly report before the meeting on Thursday. Revenue grew "
    "in every region except the north, where a late harvest delayed shipments and two "
    "warehouses closed for repairs. The board asked for a plan to recover the lost orders, an "
    "estimate of the cost of the repairs, and a comparison with the same quarter of last "
    "year. Several members wondered whether the new scheduling software had helped: the "
    "drivers reported fewer empty trips, but the dispatchers found the interface confusing "
    "and asked for training. After a long discussion the chair proposed to postpone the "
    "decision until the auditors had finished their review, which they expected by the end "
    "of the month. The proposal was accepted without objection.",
    "def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:\n"
    '    """Merge overlapping closed intervals; the result is sorted by start."""\n'
    "    merged: list[tuple[int, int]] = []\n"
    "    for start, end in sorted(intervals):\n"
    "        if merged and start <= merged[-1][1]:\n"
    "            merged[-1] = (merged[-1][0], max(merged[-1][1], end))\n"
    "        else:\n"
    "            merged.append((start, end))\n"
    "    return merged\n\n\n"
    "class Cache:\n"
    "    def __init__(self, size: int = 128) -> None:\n"
    "        self.size, self.items = size, {}\n\n"
    "    def get(self, key: str, default: object = None) -> object:\n"
    "        return self.items.get(key, default)\n",
    "| date | region | orders | revenue (EUR) | change |\n"
    "| 2024-01-31 | north | 1,204 | 183,920.50 | -4.2 % |\n"
    "| 2024-01-31 | south | 2,871 | 402,117.00 | +6.8 % |\n"
    "| 2024-02-29 | north | 1,133 | 171,004.25 | -5.9 % |\n"
    "| 2024-02-29 | south | 2,950 | 415,880.75 | +3.4 % |\n"
    "| 2024-03-31 | north | 1,318 | 199,466.10 | +16.3 % |\n"
    "| 2024-03-31 | south | 3,012 | 428,305.40 | +3.0 % |\n"
    "Totals: 12,488 orders, 1,800,694.00 EUR; phone +49 30 1234567, ref. 2024/03-117.",
)


def tokenizer_path(named: str) -> str:
    """The tokenizer.json ``ai.embedding.tokenizer`` names (a folder: its tokenizer.json)."""
    path = Path(named).expanduser()
    return str((path / "tokenizer.json" if path.is_dir() else path).resolve())


def file_tokenizer(path: str) -> Callable[[str], Sequence[int]]:
    """A counter of the model's own tokens (special tokens left out) from a tokenizer.json.

    Raises:
        EmbeddingConfigError: The file cannot be read as a tokenizer (the path is named).
        MissingDependencyError: The ``tokenizers`` package is not installed.
    """
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise MissingDependencyError("ai.embedding.tokenizer", "embedded") from exc
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:
        raise EmbeddingConfigError(
            f"ai.embedding.tokenizer {path!r} cannot be read as a tokenizer.json "
            f"({type(exc).__name__}); name the model's tokenizer.json, or unset it to count "
            "with the server"
        ) from None

    def count(text: str) -> Sequence[int]:
        ids: list[int] = tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    return count


def _tokenize_url(base_url: str) -> str:
    """TEI serves ``/tokenize`` beside its OpenAI routes (``…/v1`` → ``…/tokenize``)."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return f"{root}/tokenize"


def tokenize_counts(base_url: str, api_key: str, texts: Sequence[str]) -> list[int] | None:
    """Tokens of each text by the server's ``POST /tokenize`` (TEI), special tokens left
    out; None when the server has no such route or answers something else."""
    request = urllib.request.Request(
        _tokenize_url(base_url),
        data=json.dumps({"inputs": list(texts), "add_special_tokens": False}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            data: Any = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if (
        not isinstance(data, list)
        or len(data) != len(texts)
        or not all(isinstance(tokens, list) for tokens in data)
    ):
        return None
    return [len(tokens) for tokens in data]


def usage_counts(
    client: Any, model: str, texts: Sequence[str], *, input_type: str | None, prefix: str
) -> list[int] | None:
    """``usage.prompt_tokens`` of one embeddings request per text (a document, as the
    indexer sends it: with ``input_type`` or with the prefix as text); None when the
    server reports no usage."""
    out: list[int] = []
    for text in texts:
        kwargs: dict[str, Any] = {"model": model}
        if input_type is not None:
            kwargs["input"] = [text]
            kwargs["extra_body"] = {"input_type": input_type}
        else:
            kwargs["input"] = [prefix + text]
        answer = client.embeddings.create(**kwargs)
        usage = getattr(answer, "usage", None)
        tokens = getattr(usage, "prompt_tokens", None) if usage is not None else None
        if not isinstance(tokens, int) or tokens <= 0:
            return None
        out.append(tokens)
    return out


def measure(
    *,
    base_url: str,
    api_key: str,
    client: Any,
    model: str,
    input_type: str | None,
    prefix: str,
    special_tokens: int,
) -> tuple[str, float] | None:
    """(tokenizer, tokenRatio) the server's counts give the model, or None when it gives
    none (the estimate stays). Any failure is logged and leaves the estimate."""
    texts = CALIBRATION_TEXTS
    try:
        counts = tokenize_counts(base_url, api_key, texts)
        if counts is not None:
            how, ratios = (
                TOKENIZER_SERVER_TOKENIZE,
                [n / len(estimate_tokens(t)) for n, t in zip(counts, texts, strict=True)],
            )
        else:
            used = usage_counts(client, model, texts, input_type=input_type, prefix=prefix)
            if used is None:
                log.info(
                    "%s at %s reports no token counts: chunks sized by the estimate",
                    model,
                    base_url,
                )
                return None
            # usage holds the special tokens and the prefix: the prefix counts as text here
            how, ratios = (
                TOKENIZER_SERVER_USAGE,
                [
                    max(1, n - special_tokens) / len(estimate_tokens(prefix + t))
                    for n, t in zip(used, texts, strict=True)
                ],
            )
    except Exception as exc:  # the probes before it passed: an odd server, not an outage
        log.warning(
            "counting %s's tokens at %s failed (%s); chunks sized by the estimate",
            model,
            base_url,
            type(exc).__name__,
        )
        return None
    return how, round(max(ratios) * MARGIN, 3)
