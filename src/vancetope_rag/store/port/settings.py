"""The store port of cascade settings (values are stored encoded; see
:mod:`vancetope_rag.domain.settings.registry`). Re-exported by :mod:`.port`."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class SettingsStore(Protocol):
    """Settings per tenant (``project_id`` None) and per project."""

    def get_settings(self, tenant_id: str, project_id: str | None) -> dict[str, str]: ...

    def get_scope_settings(
        self, tenant_id: str, project_id: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        """(the tenant's settings, the project's) in one read: what every chat turn reads."""
        ...

    def set_setting(
        self, tenant_id: str, project_id: str | None, key: str, value: str | None
    ) -> None:
        """Store ``value`` under ``key``; None removes the key."""
        ...

    def settings_scopes(self) -> list[tuple[str, str | None]]:
        """Every scope holding at least one setting, as ``(tenant_id, project_id)`` with
        None for a tenant-wide scope, sorted (None first): a copy finds tenants with settings
        but no project this way."""
        ...
