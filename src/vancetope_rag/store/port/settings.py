"""The store port of cascade settings (values are stored encoded; see
:mod:`vancetope_rag.domain.settings`). Re-exported by :mod:`.port`."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class SettingsStore(Protocol):
    """Settings per tenant (``project_id`` None) and per project."""

    def get_settings(self, tenant_id: str, project_id: str | None) -> dict[str, str]: ...

    def set_setting(
        self, tenant_id: str, project_id: str | None, key: str, value: str | None
    ) -> None:
        """Store ``value`` under ``key``; None removes the key."""
        ...
