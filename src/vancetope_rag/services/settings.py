"""Cascade settings service: tenant and project scopes, innermost wins, secrets write-only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vancetope_rag.domain.settings.cascade import AutoInject
from vancetope_rag.domain.settings.registry import (
    SETTINGS,
    decode_setting,
    encode_setting,
    inherits_embedding_value,
    mask_secret,
    resolve_setting,
    unknown_setting,
)
from vancetope_rag.domain.suggest import did_you_mean
from vancetope_rag.domain.texts import check_id
from vancetope_rag.embeddings import PROVIDER_NONE, EmbeddingRegistry, EmbeddingSettings
from vancetope_rag.errors import EmbeddingDisabledError, EmbeddingError, SettingError
from vancetope_rag.rerankers import RerankerRegistry, RerankSettings
from vancetope_rag.secrets import register_secret
from vancetope_rag.store.port import SettingsStore

_PROVIDER = "ai.embedding.provider"
_MODEL = "ai.embedding.model"
_RERANKER = "ai.rerank.provider"


def _prefix(value: str | None) -> str | None:
    """A prefix setting as put before a text: ``none`` is no prefix, any other is followed
    by one space (values are stored stripped); None leaves the model's profile."""
    if value is None:
        return None
    return "" if value.lower() == "none" else f"{value} "


class SettingsSnapshot:
    """The values set at tenant and project scope, and what they resolve to."""

    def __init__(self, tenant: dict[str, Any], project: dict[str, Any]) -> None:
        self.tenant = tenant
        self.project = project
        self.effective: dict[str, Any] = {
            k: resolve_setting(
                k,
                project.get(k),
                tenant.get(k) if inherits_embedding_value(k, project, tenant) else None,
            )
            for k in SETTINGS
        }

    def embeddings_enabled(self) -> bool:
        """The tenant kill switch (spec §6.1): whether embed and query calls are allowed.

        The one place that decides it: the indexer, AutoInject, the tools, the CLI and the
        REST API all ask this (through the services), so ``ai.embedding.provider=none`` means
        the same everywhere. A project-scope value overrides the tenant's (innermost wins).
        """
        return bool(self.effective["ai.embedding.provider"] != PROVIDER_NONE)

    def project_rag_enabled(self) -> bool:
        """``rag.project.enabled`` (spec §4.5): the ``_documents`` RAG is indexed and injected.
        Manual RAGs are not affected."""
        return bool(self.effective["rag.project.enabled"])

    def embedding(self) -> EmbeddingSettings:
        """The effective ``ai.embedding.*`` settings, resolved as one group with the
        provider (the key is registered for redaction)."""
        return self._embedding(self.effective)

    def embedding_for(self, provider: str) -> EmbeddingSettings:
        """The settings that go with ``provider`` (a RAG's pinned one): the effective group
        when it is the effective provider; else the tenant's group when the tenant set that
        provider (a project switching provider keeps its live RAG's key and URL until the
        rebuild replaces it); else the effective values, as before groups existed."""
        if provider == self.effective["ai.embedding.provider"]:
            return self.embedding()
        if self.tenant.get("ai.embedding.provider") == provider:
            return self._embedding(
                {k: resolve_setting(k, None, self.tenant.get(k)) for k in SETTINGS}
            )
        raw = {k: resolve_setting(k, self.project.get(k), self.tenant.get(k)) for k in SETTINGS}
        return self._embedding(raw)

    @staticmethod
    def _embedding(values: dict[str, Any]) -> EmbeddingSettings:
        register_secret(values["ai.embedding.apiKey"])
        return EmbeddingSettings(
            provider=str(values["ai.embedding.provider"]),
            model=values["ai.embedding.model"],
            api_key=values["ai.embedding.apiKey"],
            base_url=values["ai.embedding.baseUrl"],
            max_input_tokens=values["ai.embedding.maxInputTokens"],
            tokenizer=values["ai.embedding.tokenizer"],
            query_prefix=_prefix(values["ai.embedding.queryPrefix"]),
            document_prefix=_prefix(values["ai.embedding.documentPrefix"]),
        )

    def rerank(self) -> RerankSettings:
        """The effective ``ai.rerank.*`` settings (the key is registered for redaction)."""
        values = self.effective
        register_secret(values["ai.rerank.apiKey"])
        return RerankSettings(
            provider=str(values[_RERANKER]),
            model=values["ai.rerank.model"],
            api_key=values["ai.rerank.apiKey"],
            base_url=values["ai.rerank.baseUrl"],
            timeout_s=float(values["ai.rerank.timeoutSeconds"]),
            requests_per_minute=values["ai.rerank.requestsPerMinute"],
        )

    def auto_inject_scopes(self) -> tuple[AutoInject | None, AutoInject | None]:
        """(project, tenant) values of ``rag.autoInject.enabled`` as set (None = absent)."""
        key = "rag.autoInject.enabled"
        p, t = self.project.get(key), self.tenant.get(key)
        return (p if isinstance(p, AutoInject) else None, t if isinstance(t, AutoInject) else None)


def _decoded(raw: Mapping[str, str]) -> dict[str, Any]:
    """Stored values of the known keys, decoded (a key no longer known is skipped)."""
    return {k: decode_setting(k, v) for k, v in raw.items() if k in SETTINGS}


class SettingsService:
    """Reads and writes ``rag.*`` / ``ai.embedding.*`` settings per tenant and project."""

    def __init__(
        self,
        control: SettingsStore,
        providers: EmbeddingRegistry | None = None,
        rerankers: RerankerRegistry | None = None,
        legacy_model: str | None = None,
    ) -> None:
        """``providers``, when given, checks ``ai.embedding.provider`` and ``.model`` values
        against the registry before they are stored; ``rerankers`` does the same for
        ``ai.rerank.provider``. ``legacy_model`` (``RAG_EMBEDDING_MODEL``) is the model of a
        provider that chooses one by name when ``ai.embedding.model`` is set at no scope."""
        self._control = control
        self._providers = providers
        self._rerankers = rerankers
        self._legacy_model = legacy_model or None

    def _legacy_model_for(self, values: Mapping[str, Any]) -> str | None:
        """``RAG_EMBEDDING_MODEL`` when it is the model these resolved values use: no scope
        sets ``ai.embedding.model`` and the provider chooses its model by name."""
        if self._legacy_model is None or values.get(_MODEL) is not None:
            return None
        if self._providers is None or not self._providers.chooses_model(values[_PROVIDER]):
            return None
        return self._legacy_model

    def _scope_values(self, tenant_id: str, project_id: str | None) -> dict[str, Any]:
        _check_scope(tenant_id, project_id)
        return _decoded(self._control.get_settings(tenant_id, project_id))

    def scopes(self, tenant_id: str, project_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(tenant values, project values) as set, decoded; unset keys are absent. One read
        of the store for both (a chat turn's)."""
        _check_scope(tenant_id, project_id)
        tenant, project = self._control.get_scope_settings(tenant_id, project_id)
        return _decoded(tenant), _decoded(project)

    def effective(self, tenant_id: str, project_id: str) -> dict[str, Any]:
        """Every known key's effective value for the project (secrets included: internal)."""
        return self.snapshot(tenant_id, project_id).effective

    def snapshot(self, tenant_id: str, project_id: str) -> SettingsSnapshot:
        """Both scopes read once, for a caller that needs several answers (the pre-turn hook)."""
        tenant, project = self.scopes(tenant_id, project_id)
        snapshot = SettingsSnapshot(tenant, project)
        legacy = self._legacy_model_for(snapshot.effective)
        if legacy is not None:  # the final fallback: beneath both scopes and the default
            snapshot.effective[_MODEL] = legacy
        return snapshot

    @staticmethod
    def keys() -> list[str]:
        """Every cascade setting key, sorted."""
        return sorted(SETTINGS)

    def get(self, tenant_id: str, project_id: str, key: str) -> Any:
        if key not in SETTINGS:
            raise unknown_setting(key)
        return self.effective(tenant_id, project_id)[key]

    def get_public(self, tenant_id: str, project_id: str | None, key: str) -> Any:
        """A value for display, masked: the project's effective one, or with project None
        what the tenant scope gives (its own value, else the default)."""
        return self.get_public_with_source(tenant_id, project_id, key)[0]

    def get_public_with_source(
        self, tenant_id: str, project_id: str | None, key: str
    ) -> tuple[Any, str]:
        """A value for display, masked, and where it comes from: ``"project"``, ``"tenant"``
        or ``"default"`` (the built-in default). Project None looks at the tenant scope only
        (what a project without its own value inherits)."""
        if key not in SETTINGS:
            raise unknown_setting(key)
        tenant = self._scope_values(tenant_id, None)
        project = {} if project_id is None else self._scope_values(tenant_id, project_id)
        if project.get(key) is not None:
            value, source = project[key], "project"
        elif tenant.get(key) is not None and inherits_embedding_value(key, project, tenant):
            value, source = tenant[key], "tenant"
        else:
            value, source = resolve_setting(key), "default"
            if key == _MODEL:
                provider = self.get_public_with_source(tenant_id, project_id, _PROVIDER)[0]
                legacy = self._legacy_model_for({_MODEL: None, _PROVIDER: provider})
                if legacy is not None:
                    value, source = legacy, "RAG_EMBEDDING_MODEL"
        return mask_secret(key, value), source

    def set(self, tenant_id: str, project_id: str | None, key: str, value: object) -> None:
        """Set a value at tenant scope (project None) or project scope; None unsets it."""
        _check_scope(tenant_id, project_id)
        if value is None:
            if key not in SETTINGS:
                raise unknown_setting(key)
            self._control.set_setting(tenant_id, project_id, key, None)
            return
        if SETTINGS.get(key) is not None and SETTINGS[key].secret and isinstance(value, str):
            register_secret(value)
        encoded = encode_setting(key, value)
        if self._providers is not None and key in (_PROVIDER, _MODEL):
            self._check_embedding(tenant_id, project_id, key, decode_setting(key, encoded))
        if self._rerankers is not None and key == _RERANKER:
            _check_provider_name(
                "reranker", str(decode_setting(key, encoded)), self._rerankers.names()
            )
        self._control.set_setting(tenant_id, project_id, key, encoded)

    def _check_embedding(
        self, tenant_id: str, project_id: str | None, key: str, value: object
    ) -> None:
        """A provider must be registered; a model must be one its provider makes, where the
        provider can tell without a call (settings that would only fail at the next index or
        rebuild are refused now)."""
        assert self._providers is not None
        names = self._providers.names()
        if key == _PROVIDER:
            _check_provider_name("embedding provider", str(value), names)
            return
        if value is None:
            return
        if project_id is None:
            provider = self._scope_values(tenant_id, None).get(_PROVIDER)
        else:
            provider = self.snapshot(tenant_id, project_id).effective[_PROVIDER]
        if provider is None or provider == PROVIDER_NONE or provider not in names:
            return
        try:
            self._providers.check_model(str(provider), str(value))
        except EmbeddingError as exc:
            raise SettingError(
                f"{exc.message} (for provider {provider!r}; to use another provider's model, "
                "set ai.embedding.provider first)"
            ) from None


def _check_provider_name(what: str, name: str, names: list[str]) -> None:
    """Refuse a provider that is not registered, naming the close ones."""
    if name not in names:
        raise SettingError(
            f"unknown {what} {name!r}; {did_you_mean(name, names)}available: {', '.join(names)} "
            "(a plugin's provider is listed once its package is installed and loaded)"
        )


def _check_scope(tenant_id: str, project_id: str | None) -> None:
    """Project ``None`` is the tenant scope; any other project id must be a valid id (the
    store keeps the tenant scope under project '', so '' must never be taken as a project)."""
    check_id(tenant_id, "tenant id")
    if project_id is not None:
        check_id(project_id, "project id")


def embeddings_disabled(
    tenant_id: str, project_id: str, consequence: str, *, rag_name: str | None = None
) -> EmbeddingDisabledError:
    """The error every refused embed, query or rebuild raises while the kill switch is off.

    Args:
        tenant_id: The tenant whose ``ai.embedding.provider`` is ``none``.
        project_id: The project asked about.
        consequence: What cannot happen, and what to do (ends the message).
        rag_name: The RAG concerned, when there is one.
    """
    return EmbeddingDisabledError(
        f"embeddings are switched off for tenant {tenant_id!r} (ai.embedding.provider=none); "
        f"{consequence}",
        tenant_id=tenant_id,
        project_id=project_id,
        rag_name=rag_name,
    )
