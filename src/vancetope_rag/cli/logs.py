"""The CLI's log output: timestamped lines on stderr, as text or as one JSON object a line
(``--log-format json``, for log shippers). Our loggers redact secrets before either."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from vancetope_rag.secrets import redact

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
NOISY = ("httpx", "sentence_transformers", "transformers")
#: What every LogRecord carries: not a field of ours (``extra=`` adds the others).
_RECORD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _field(value: object) -> object:
    """A JSON value for an extra: numbers and flags as they are, text redacted, sequences
    as lists, anything else as its (redacted) text."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_field(v) for v in value]
    return redact(str(value))


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, with a traceback ``exc``, and the record's extras (``extra=``) as fields
    of their own: the numbers of an access line or a tick summary, for a log shipper to
    chart without parsing the message. An extra never replaces one of the five."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRS and name not in entry and not name.startswith("_"):
                entry[name] = _field(value)
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
