"""What this process knows of each remote embedding endpoint: whose failure a failed call
was (:mod:`.failures`), whether the endpoint is down (:mod:`.circuits`) and how fast it may
be called (:mod:`.pacing`)."""

from vancetope_rag.services.providers.circuits import CircuitState, Endpoint, ProviderCircuits
from vancetope_rag.services.providers.failures import Failure, FailureKind, classify
from vancetope_rag.services.providers.pacing import Pacer

__all__ = [
    "CircuitState",
    "Endpoint",
    "Failure",
    "FailureKind",
    "Pacer",
    "ProviderCircuits",
    "classify",
]
