"""``files_visualize``, the multimodal bridge: the service and its result cache."""

from __future__ import annotations

from vancetope_rag.services.bridge.cache import BridgeCache
from vancetope_rag.services.bridge.service import BridgeRequest, BridgeService

__all__ = ["BridgeCache", "BridgeRequest", "BridgeService"]
