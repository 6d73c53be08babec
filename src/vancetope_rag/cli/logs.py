"""The CLI's log output: timestamped lines on stderr, as text or as one JSON object a line
(``--log-format json``, for log shippers). Our loggers redact secrets before either."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
NOISY = ("httpx", "sentence_transformers", "transformers")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message`` and, with a traceback, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(verbose: int, log_format: str = "text") -> None:
    """Root handler on stderr: WARNING, INFO with ``-v``, DEBUG with ``-vv``."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        formatter = logging.Formatter(TEXT_FORMAT)
        formatter.default_msec_format = "%s.%03d"
        handler.setFormatter(formatter)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
        handlers=[handler],
    )
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
