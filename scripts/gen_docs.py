"""Regenerate the generated parts of the docs from the code, so they cannot drift.

* ``docs/configuration.md``: the cascade settings
  (``vancetope_rag.domain.settings.registry.SETTINGS``) and the engine configuration
  (``vancetope_rag.config.EngineConfig``: fields, environment variables, defaults).
* ``docs/rest-api.md``: every route, parameter, response and model of ``/openapi.json``.
* ``docs/proxy.md``: the chat proxy's configuration (``vancetope_rag.proxy.ProxyConfig``).

Each page keeps its hand-written text; only the part between ``<!-- BEGIN GENERATED: name -->``
and ``<!-- END GENERATED: name -->`` is replaced. ``tests/docs/test_docs.py`` fails when a
page differs from what this script writes.

Usage: ``python scripts/gen_docs.py`` (writes) or ``python scripts/gen_docs.py --check``.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.settings.registry import SETTINGS, SettingKind, SettingSpec

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


# -- configuration ----------------------------------------------------------------------------


def _cell(text: object) -> str:
    out = str(text).replace("|", "\\|").replace("\n", " ")
    return out.replace("<", "&lt;").replace(">", "&gt;")  # not read as HTML tags


def _setting_type(spec: SettingSpec) -> str:
    bounds = ""
    if spec.minimum is not None or spec.maximum is not None:
        bounds = f" ({_num(spec.minimum)} to {_num(spec.maximum)})"
    kinds = {
        SettingKind.BOOL: "boolean",
        SettingKind.AUTO_INJECT: "`ON` \\| `OFF` \\| `AUTO` (or true/false)",
        SettingKind.PROVIDER: "provider name",
        SettingKind.STRING: "text",
        SettingKind.URL: "URL",
        SettingKind.INT: "integer" + bounds,
        SettingKind.FLOAT: "number" + bounds,
        SettingKind.MIN_SCORE: "`auto` or a number" + bounds,
        SettingKind.RELEVANCE_CUT: "`auto` \\| `off` \\| a gap (0-2)",
        SettingKind.CHOICE: " \\| ".join(f"`{c}`" for c in spec.choices),
    }
    out = kinds[spec.kind]
    if spec.secret:
        out += ", write-only secret"
    return out


def _num(value: float | None) -> str:
    if value is None:
        return "…"
    return str(int(value)) if float(value).is_integer() else str(value)


def _default(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def cascade_table() -> str:
    lines = [
        "| Key | Value | Default | What it does |",
        "| --- | --- | --- | --- |",
    ]
    for key, spec in SETTINGS.items():
        lines.append(
            f"| `{key}` | {_setting_type(spec)} | {_default(spec.default)} | "
            f"{_cell(spec.description)} |"
        )
    return "\n".join(lines)


def _env_names(name: str, field: FieldInfo, settings: type[BaseSettings]) -> list[str]:
    alias = field.validation_alias
    choices = getattr(alias, "choices", None)
    if choices:
        return [str(c) for c in choices]
    prefix = str(settings.model_config.get("env_prefix", ""))
    return [f"{prefix}{name}".upper()]


def _engine_default(name: str, field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "`<hostname>-<pid>`" if name == "node_id" else "computed"
    if field.default is None:
        return "—"
    return _default(field.default)


def engine_table(settings: type[BaseSettings] = EngineConfig) -> str:
    """The table of a settings class: ``EngineConfig``, or the proxy's ``ProxyConfig``."""
    lines = [
        "| Environment variable | Field | Default | What it does |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in settings.model_fields.items():
        env = "<br>".join(f"`{e}`" for e in _env_names(name, field, settings))
        secret = " Secret: never logged or shown." if "Secret" in str(field.annotation) else ""
        lines.append(
            f"| {env} | `{name}` | {_engine_default(name, field)} | "
            f"{_cell(field.description or '')}{secret} |"
        )
    return "\n".join(lines)


def configuration_blocks() -> dict[str, str]:
    return {"cascade-settings": cascade_table(), "engine-configuration": engine_table()}


# -- REST API ---------------------------------------------------------------------------------


def openapi_spec() -> dict[str, Any]:
    """``/openapi.json`` of an app on a throwaway store (the schema depends on no data)."""
    from vancetope_rag.api import create_api
    from vancetope_rag.app import RagApp

    with tempfile.TemporaryDirectory() as tmp:
        config = EngineConfig(
            store=f"sqlite:///{tmp}/rag.db",
            jwt_secret="docs-generator-secret-0123456789abcdef",  # type: ignore[arg-type]
            metrics_token="docs-generator-metrics-token",  # type: ignore[arg-type]
        )
        with RagApp.open(config) as app:
            spec: dict[str, Any] = json.loads(json.dumps(create_api(app).openapi()))
    return spec


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _schema_text(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"[`{name}`](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_text(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_schema_text(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return f"object of {_schema_text(schema['additionalProperties'])}"
    if kind == "null":
        return "null"
    return str(kind)


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            yield method.upper(), path, op


def rest_operations(spec: dict[str, Any]) -> str:
    out: list[str] = []
    for method, path, op in _operations(spec):
        out.append(f"### `{method} {path}`\n")
        if op.get("description"):
            out.append(op["description"].strip() + "\n")
        security = [name for item in op.get("security", []) for name in item]
        out.append(
            "Authentication: "
            + (", ".join(f"`{s}`" for s in security) if security else "none")
            + ".\n"
        )
        params = op.get("parameters", [])
        body = op.get("requestBody")
        if params or body:
            out.append("| Parameter | In | Type | Required | Description |")
            out.append("| --- | --- | --- | --- | --- |")
            for p in params:
                schema = p.get("schema", {})
                default = (
                    f", default `{json.dumps(schema['default'])}`" if "default" in schema else ""
                )
                bounds = [
                    f"{word} {schema[key]}"
                    for key, word in (("minimum", "min"), ("maximum", "max"))
                    if key in schema
                ]
                default += "".join(f", {b}" for b in bounds)
                out.append(
                    f"| `{p['name']}` | {p['in']} | {_schema_text(schema)}{default} | "
                    f"{'yes' if p.get('required') else 'no'} | "
                    f"{_cell(p.get('description', schema.get('description', '')))} |"
                )
            if body:
                (media, content), *_ = body["content"].items()
                out.append(
                    f"| body | {media} | {_schema_text(content['schema'])} | "
                    f"{'yes' if body.get('required') else 'no'} | |"
                )
            out.append("")
        out.append("| Status | Body | When |")
        out.append("| --- | --- | --- |")
        for status, response in sorted(op["responses"].items(), key=lambda kv: int(kv[0])):
            content = response.get("content", {})
            shape = ", ".join(
                f"{_schema_text(c.get('schema', {}))} ({m})" for m, c in content.items()
            )
            out.append(f"| {status} | {shape or '—'} | {_cell(response.get('description', ''))} |")
        out.append("")
    return "\n".join(out).rstrip()


def rest_models(spec: dict[str, Any]) -> str:
    out: list[str] = []
    for name, schema in spec["components"]["schemas"].items():
        out.append(f"#### `{name}`\n")
        if schema.get("description"):
            out.append(schema["description"].strip() + "\n")
        if "enum" in schema:
            out.append("One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".\n")
            continue
        required = set(schema.get("required", []))
        out.append("| Field | Type | Required | Description |")
        out.append("| --- | --- | --- | --- |")
        for field, sub in schema.get("properties", {}).items():
            out.append(
                f"| `{field}` | {_schema_text(sub)} | {'yes' if field in required else 'no'} | "
                f"{_cell(sub.get('description', ''))} |"
            )
        out.append("")
    return "\n".join(out).rstrip()


def rest_security(spec: dict[str, Any]) -> str:
    lines = ["| Scheme | Type | Description |", "| --- | --- | --- |"]
    for name, scheme in spec["components"]["securitySchemes"].items():
        kind = f"{scheme['type']} {scheme.get('scheme', '')}".strip()
        if scheme.get("bearerFormat"):
            kind += f" ({scheme['bearerFormat']})"
        lines.append(f"| `{name}` | {kind} | {_cell(scheme.get('description', ''))} |")
    return "\n".join(lines)


def rest_blocks() -> dict[str, str]:
    spec = openapi_spec()
    return {
        "rest-security": rest_security(spec),
        "rest-operations": rest_operations(spec),
        "rest-models": rest_models(spec),
    }


# -- pages ------------------------------------------------------------------------------------


def proxy_blocks() -> dict[str, str]:
    from vancetope_rag.proxy import ProxyConfig

    return {"proxy-configuration": engine_table(ProxyConfig)}


PAGES: dict[str, Callable[[], dict[str, str]]] = {
    "configuration.md": configuration_blocks,
    "rest-api.md": rest_blocks,
    "proxy.md": proxy_blocks,
}

_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) -->\n)(?P<body>.*?)"
    r"(<!-- END GENERATED: (?P=name) -->)",
    re.S,
)


def render(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each generated block replaced; every block must be present once."""
    seen: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in blocks:
            raise KeyError(f"no generator for block {name!r}")
        seen.append(name)
        return match.group(1) + blocks[name] + "\n" + match.group(4)

    out = _BLOCK.sub(replace, text)
    missing = sorted(set(blocks) - set(seen))
    if missing:
        raise KeyError(f"the page lacks the generated block(s) {', '.join(missing)}")
    return out


def generated_pages() -> dict[Path, tuple[str, str]]:
    """Per page: (as it is on disk, as this script would write it)."""
    out: dict[Path, tuple[str, str]] = {}
    for page, blocks in PAGES.items():
        path = DOCS / page
        current = path.read_text(encoding="utf-8")
        out[path] = (current, render(current, blocks()))
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, (current, fresh) in generated_pages().items():
        if current != fresh:
            stale.append(path)
            if not check:
                path.write_text(fresh, encoding="utf-8")
    for path in stale:
        verb = "is out of date" if check else "updated"
        print(f"{path.relative_to(ROOT)} {verb}", file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
