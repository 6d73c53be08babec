"""The request ids every HTTP process (``serve``, ``worker --metrics-port``, ``proxy``) keeps or
replaces by one rule (``health.request_id_of``): a plain token of letters, digits and
``._:-``, at most 128 characters, is kept; anything else is replaced by one of ours. Before,
the proxy kept ``@/+=`` as well, which ``serve`` replaced."""

from __future__ import annotations

#: (the caller's ``X-Request-Id``, whether it is kept)
REQUEST_IDS = [
    ("client-req-7", True),
    ("a.b:c_d-e", True),
    ("x" * 128, True),
    ("x" * 129, False),
    ("a/b+c=d@e", False),
    ("bad id", False),
    ("", False),
]
