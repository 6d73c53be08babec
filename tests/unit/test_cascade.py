"""Cascade settings (domain/settings/registry.py) and AutoInject resolution
(domain/settings/cascade.py)."""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest
import yaml

from vancetope_rag.domain.settings.cascade import (
    AutoInject,
    explain_auto_inject,
    parse_auto_inject,
    resolve_auto_inject,
)
from vancetope_rag.domain.settings.registry import (
    SETTINGS,
    SettingKind,
    decode_setting,
    encode_setting,
    mask_secret,
    parse_setting_value,
    resolve_setting,
)
from vancetope_rag.errors import InvalidInputError, SettingError
from vancetope_rag.recipes import parse_recipe

# Every combination, written out by hand from spec §5 (not computed). "-" = absent.
# Columns: recipe, project setting, tenant setting -> injected?, deciding level.
AUTO_INJECT_TABLE = """
    ON   ON   ON   on  recipe
    ON   ON   OFF  on  recipe
    ON   ON   AUTO on  recipe
    ON   ON   -    on  recipe
    ON   OFF  ON   on  recipe
    ON   OFF  OFF  on  recipe
    ON   OFF  AUTO on  recipe
    ON   OFF  -    on  recipe
    ON   AUTO ON   on  recipe
    ON   AUTO OFF  on  recipe
    ON   AUTO AUTO on  recipe
    ON   AUTO -    on  recipe
    ON   -    ON   on  recipe
    ON   -    OFF  on  recipe
    ON   -    AUTO on  recipe
    ON   -    -    on  recipe
    OFF  ON   ON   off recipe
    OFF  ON   OFF  off recipe
    OFF  ON   AUTO off recipe
    OFF  ON   -    off recipe
    OFF  OFF  ON   off recipe
    OFF  OFF  OFF  off recipe
    OFF  OFF  AUTO off recipe
    OFF  OFF  -    off recipe
    OFF  AUTO ON   off recipe
    OFF  AUTO OFF  off recipe
    OFF  AUTO AUTO off recipe
    OFF  AUTO -    off recipe
    OFF  -    ON   off recipe
    OFF  -    OFF  off recipe
    OFF  -    AUTO off recipe
    OFF  -    -    off recipe
    AUTO ON   ON   on  project
    AUTO ON   OFF  on  project
    AUTO ON   AUTO on  project
    AUTO ON   -    on  project
    AUTO OFF  ON   off project
    AUTO OFF  OFF  off project
    AUTO OFF  AUTO off project
    AUTO OFF  -    off project
    AUTO AUTO ON   off default
    AUTO AUTO OFF  off default
    AUTO AUTO AUTO off default
    AUTO AUTO -    off default
    AUTO -    ON   on  tenant
    AUTO -    OFF  off tenant
    AUTO -    AUTO off default
    AUTO -    -    off default
    -    ON   ON   on  project
    -    ON   OFF  on  project
    -    ON   AUTO on  project
    -    ON   -    on  project
    -    OFF  ON   off project
    -    OFF  OFF  off project
    -    OFF  AUTO off project
    -    OFF  -    off project
    -    AUTO ON   off default
    -    AUTO OFF  off default
    -    AUTO AUTO off default
    -    AUTO -    off default
    -    -    ON   on  tenant
    -    -    OFF  off tenant
    -    -    AUTO off default
    -    -    -    off default
"""


def _stance(word: str) -> AutoInject | None:
    return None if word == "-" else AutoInject(word)


def _rows() -> list[tuple[AutoInject | None, AutoInject | None, AutoInject | None, bool, str]]:
    rows = []
    for line in AUTO_INJECT_TABLE.strip().splitlines():
        recipe, project, tenant, result, decider = line.split()
        rows.append((_stance(recipe), _stance(project), _stance(tenant), result == "on", decider))
    return rows


ROWS = _rows()
STANCES = [AutoInject.ON, AutoInject.OFF, AutoInject.AUTO, None]


def test_table_covers_the_full_product_once() -> None:
    combos = {(r, p, t) for r, p, t, _, _ in ROWS}
    assert len(ROWS) == 64
    assert combos == {(r, p, t) for r in STANCES for p in STANCES for t in STANCES}


@pytest.mark.parametrize(("recipe", "project", "tenant", "expected", "decider"), ROWS)
def test_auto_inject_resolution(
    recipe: AutoInject | None,
    project: AutoInject | None,
    tenant: AutoInject | None,
    expected: bool,
    decider: str,
) -> None:
    assert resolve_auto_inject(recipe, project, tenant) is expected
    assert explain_auto_inject(recipe, project, tenant) == (expected, decider)


@pytest.mark.parametrize(("recipe", "project", "tenant", "expected", "decider"), ROWS)
def test_resolve_setting_then_auto_inject_agrees_with_the_table(
    recipe: AutoInject | None,
    project: AutoInject | None,
    tenant: AutoInject | None,
    expected: bool,
    decider: str,
) -> None:
    # Collapsing the scopes with the generic cascade first must not change the outcome.
    collapsed = resolve_setting("rag.autoInject.enabled", project, tenant)
    assert isinstance(collapsed, AutoInject | None)
    assert resolve_auto_inject(recipe, collapsed, None) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, AutoInject.ON),
        (False, AutoInject.OFF),
        ("true", AutoInject.ON),
        ("false", AutoInject.OFF),
        ("TRUE", AutoInject.ON),
        ("on", AutoInject.ON),
        ("ON", AutoInject.ON),
        (" Off ", AutoInject.OFF),
        ("auto", AutoInject.AUTO),
        ("AUTO", AutoInject.AUTO),
        (AutoInject.AUTO, AutoInject.AUTO),
    ],
)
def test_parse_auto_inject_accepts(value: object, expected: AutoInject | None) -> None:
    assert parse_auto_inject(value, where="x") is expected


@pytest.mark.parametrize("value", ["", "yes", "enabled", 1, 0, 1.0, ["ON"], {"on": 1}])
def test_parse_auto_inject_rejects(value: object) -> None:
    with pytest.raises(SettingError) as info:
        parse_auto_inject(value, where="recipes/a.yaml: params.rag.autoInject")
    message = str(info.value)
    assert "recipes/a.yaml: params.rag.autoInject" in message
    for accepted in ("ON", "OFF", "AUTO", "true", "false"):
        assert accepted in message


# Legacy booleans and YAML spellings must resolve exactly like the quoted enum strings.
YAML_SPELLINGS = [
    ("ON", "ON"),
    ('"ON"', "ON"),
    ("on", "ON"),
    ("true", "ON"),
    ("True", "ON"),
    ("yes", "ON"),  # YAML 1.1 boolean as well
    ('"OFF"', "OFF"),
    ("OFF", "OFF"),
    ("off", "OFF"),
    ("false", "OFF"),
    ("no", "OFF"),
    ("AUTO", "AUTO"),
    ('"auto"', "AUTO"),
]


@pytest.mark.parametrize(("spelling", "quoted"), YAML_SPELLINGS)
def test_yaml_spellings_resolve_like_quoted_strings(spelling: str, quoted: str) -> None:
    text = f"name: r\nparams:\n  rag:\n    autoInject: {spelling}\n"
    parsed = parse_recipe(yaml.safe_load(text)).rag.auto_inject
    reference = parse_recipe(
        yaml.safe_load(f'name: r\nparams:\n  rag:\n    autoInject: "{quoted}"\n')
    ).rag.auto_inject
    assert parsed is reference is AutoInject(quoted)
    for project in STANCES:
        for tenant in STANCES:
            assert explain_auto_inject(parsed, project, tenant) == explain_auto_inject(
                reference, project, tenant
            )


@pytest.mark.parametrize(
    ("legacy", "word"), [(True, "ON"), (False, "OFF"), ("true", "ON"), ("false", "OFF")]
)
def test_legacy_setting_values_resolve_like_enum(legacy: object, word: str) -> None:
    as_setting = parse_setting_value("rag.autoInject.enabled", legacy)
    assert as_setting is AutoInject(word)
    for recipe in (AutoInject.AUTO, None):
        assert explain_auto_inject(recipe, None, parse_auto_inject(legacy, where="t")) == (
            word == "ON",
            "tenant",
        )
        assert explain_auto_inject(recipe, parse_auto_inject(legacy, where="p"), None) == (
            word == "ON",
            "project",
        )


def test_settings_registry_matches_spec() -> None:
    assert {key: spec.default for key, spec in SETTINGS.items()} == {
        "rag.project.enabled": True,
        "rag.project.includeSummaries": True,
        "rag.autoInject.enabled": None,
        "ai.embedding.provider": "none",
        "ai.embedding.model": None,
        "ai.embedding.apiKey": None,
        "ai.embedding.baseUrl": None,
        "ai.embedding.requestsPerMinute": None,
        "ai.embedding.tokensPerMinute": None,
        "ai.embedding.maxInputTokens": None,
        "ai.embedding.tokenizer": None,  # a local tokenizer.json sizes chunks
        "ai.embedding.queryPrefix": None,
        "ai.embedding.documentPrefix": None,
        # the rerank stage: off until a reranker is chosen
        "ai.rerank.provider": "none",
        "ai.rerank.model": None,
        "ai.rerank.baseUrl": None,
        "ai.rerank.apiKey": None,
        "ai.rerank.candidates": None,
        "ai.rerank.timeoutSeconds": 10.0,
        "ai.rerank.requestsPerMinute": None,
        "rag.topK": None,
        "rag.minScore": None,
        "rag.rebuild.maxFailureRatio": 0.05,
        "rag.maxPerDocument": None,
        "rag.retrieval.mode": "hybrid",
        "rag.autoInject.maxTokens": None,
        "rag.autoInject.relevanceCut": "auto",
        "rag.autoInject.whenToolsPresent": "inject",
        "rag.extract.timeoutSeconds": 120.0,
        "rag.extract.maxPages": 2_000,
        "rag.extract.maxSlides": 1_000,
        "rag.extract.maxSheets": 100,
        "rag.extract.maxCells": 1_000_000,
        "rag.extract.maxFrames": 6,
        "rag.extract.maxLegacyOfficeBytes": 20 * 1024 * 1024,
        "rag.extract.maxVideoBytes": 50 * 1024 * 1024,
        "rag.extract.ocr": "none",
        "rag.extract.ocrLanguage": "eng",
        "rag.extract.vision.model": None,
        "rag.extract.vision.ocrModel": None,
        "rag.extract.vision.fallback": None,
        "rag.extract.vision.baseUrl": None,
        "rag.extract.vision.apiKey": None,
        "rag.extract.vision.maxPages": 50,
        "rag.extract.vision.concurrency": 2,
        # empty: the engine's environment default (MM_BRIDGE_*), then the spec's
        "rag.bridge.maxChars": None,
        "rag.bridge.visionMaxPages": None,
        "rag.bridge.maxFrames": None,
    }
    assert [key for key, spec in SETTINGS.items() if spec.secret] == [
        "ai.embedding.apiKey",
        "ai.rerank.apiKey",
        "rag.extract.vision.apiKey",
    ]
    assert all(spec.key == key and spec.description for key, spec in SETTINGS.items())
    assert SETTINGS["rag.autoInject.enabled"].kind is SettingKind.AUTO_INJECT
    assert isinstance(SETTINGS, MappingProxyType)  # read-only registry


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("rag.project.enabled", "true", True),
        ("rag.project.enabled", "False", False),
        ("rag.project.enabled", " off ", False),
        ("rag.project.enabled", "1", True),
        ("rag.project.enabled", False, False),
        ("rag.project.includeSummaries", "no", False),
        ("rag.autoInject.enabled", "ON", AutoInject.ON),
        ("rag.autoInject.enabled", "auto", AutoInject.AUTO),
        ("rag.autoInject.enabled", None, None),
        ("rag.autoInject.enabled", "", None),
        ("ai.embedding.provider", "none", "none"),
        ("ai.embedding.provider", "my-plugin_2", "my-plugin_2"),
        ("ai.embedding.model", " text-embedding-3-small ", "text-embedding-3-small"),
        ("ai.embedding.model", "", None),
        ("ai.embedding.apiKey", "sk-123", "sk-123"),
        ("ai.embedding.baseUrl", "http://localhost:11434/v1", "http://localhost:11434/v1"),
        ("ai.embedding.baseUrl", "https://api.openai.com", "https://api.openai.com"),
        ("ai.embedding.baseUrl", "  ", None),
        ("rag.topK", "5", 5),
        ("rag.topK", 100, 100),
        ("rag.topK", None, None),
        ("rag.minScore", "0.4", 0.4),
        ("rag.minScore", "-1", -1.0),
        ("rag.minScore", 1, 1.0),
        ("rag.maxPerDocument", " 2 ", 2),
    ],
)
def test_parse_setting_value_accepts(key: str, raw: object, expected: object) -> None:
    value = parse_setting_value(key, raw)
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("key", "raw", "accepted"),
    [
        ("rag.project.enabled", "maybe", "true or false"),
        ("rag.project.enabled", None, "true or false"),
        ("rag.project.enabled", 1, "true or false"),
        ("rag.autoInject.enabled", "sometimes", "ON, OFF, AUTO"),
        ("ai.embedding.provider", "OpenAI", "provider name"),
        ("ai.embedding.provider", "", "provider name"),
        ("ai.embedding.provider", "1st", "provider name"),
        ("ai.embedding.model", 3, "a string"),
        ("ai.embedding.baseUrl", "ftp://x", "http:// or https:// URL"),
        ("ai.embedding.baseUrl", "localhost:11434", "http:// or https:// URL"),
        ("rag.topK", "abc", "an integer from 1 to 100"),
        ("rag.topK", "0", "an integer from 1 to 100"),
        ("rag.topK", 101, "an integer from 1 to 100"),
        ("rag.topK", True, "an integer from 1 to 100"),
        ("rag.topK", 2.5, "an integer from 1 to 100"),
        ("rag.minScore", "1.5", "a number from -1 to 1"),
        ("rag.minScore", "nan", "a number from -1 to 1"),
        ("rag.minScore", True, "a number from -1 to 1"),
        ("rag.maxPerDocument", "-1", "an integer from 1 to 100"),
        ("rag.retrieval.mode", "sparse", "one of dense, hybrid"),
        ("rag.retrieval.mode", 1, "one of dense, hybrid"),
        ("rag.autoInject.whenToolsPresent", "never", "one of inject, skip"),
        ("rag.autoInject.maxTokens", "10", "an integer from 50 to 100000"),
    ],
)
def test_parse_setting_value_rejects(key: str, raw: object, accepted: str) -> None:
    with pytest.raises(SettingError) as info:
        parse_setting_value(key, raw)
    assert key in str(info.value)
    assert accepted in str(info.value)
    assert isinstance(info.value, InvalidInputError)


@pytest.mark.parametrize(
    ("key", "raw", "value"),
    [
        ("rag.retrieval.mode", " Hybrid ", "hybrid"),
        ("rag.retrieval.mode", "dense", "dense"),
        ("rag.autoInject.whenToolsPresent", "SKIP", "skip"),
        ("rag.autoInject.maxTokens", "1500", 1500),
        ("rag.autoInject.maxTokens", "", None),
    ],
)
def test_parse_choice_and_budget_settings(key: str, raw: object, value: object) -> None:
    assert parse_setting_value(key, raw) == value


def test_unknown_key_lists_known_keys() -> None:
    with pytest.raises(SettingError) as info:
        parse_setting_value("rag.topk", "5")
    message = str(info.value)
    assert "'rag.topk'" in message
    for key in SETTINGS:
        assert key in message


def test_secret_value_never_in_error_messages() -> None:
    with pytest.raises(SettingError) as info:
        parse_setting_value("ai.embedding.apiKey", ["sk-very-secret"])
    assert "sk-very-secret" not in str(info.value)
    assert "ai.embedding.apiKey" in str(info.value)
    with pytest.raises(SettingError) as info:
        decode_setting("ai.embedding.apiKey", "sk-very-secret")  # not JSON
    assert "sk-very-secret" not in str(info.value)


@pytest.mark.parametrize(
    ("key", "raw", "stored"),
    [
        ("rag.project.enabled", "false", "false"),
        ("rag.autoInject.enabled", "on", '"ON"'),
        ("rag.autoInject.enabled", True, '"ON"'),
        ("rag.autoInject.enabled", None, "null"),
        ("ai.embedding.provider", "openai", '"openai"'),
        ("ai.embedding.apiKey", "sk-1", '"sk-1"'),
        ("rag.topK", "7", "7"),
        ("rag.minScore", "0.4", "0.4"),
    ],
)
def test_encode_decode_round_trip(key: str, raw: object, stored: str) -> None:
    encoded = encode_setting(key, raw)
    assert json.loads(encoded) == json.loads(stored)
    assert decode_setting(key, encoded) == parse_setting_value(key, raw)


def test_encode_validates_and_decode_revalidates() -> None:
    with pytest.raises(SettingError):
        encode_setting("rag.topK", "0")
    with pytest.raises(SettingError, match=r"rag\.topK"):
        decode_setting("rag.topK", "500")
    with pytest.raises(SettingError, match="not valid JSON"):
        decode_setting("rag.topK", "{oops")
    assert decode_setting("rag.autoInject.enabled", "false") is AutoInject.OFF


@pytest.mark.parametrize(
    ("project", "tenant", "expected"),
    [
        (None, None, True),
        (None, False, False),
        (False, True, False),
        (True, False, True),
    ],
)
def test_resolve_setting_innermost_wins(project: object, tenant: object, expected: object) -> None:
    assert resolve_setting("rag.project.enabled", project, tenant) is expected


def test_resolve_setting_defaults_and_unknown_key() -> None:
    assert resolve_setting("ai.embedding.provider") == "none"
    assert resolve_setting("ai.embedding.provider", tenant_value="openai") == "openai"
    assert resolve_setting("rag.topK", 3, 9) == 3
    assert resolve_setting("rag.autoInject.enabled", AutoInject.AUTO, AutoInject.ON) == "AUTO"
    with pytest.raises(SettingError):
        resolve_setting("nope")


def test_mask_secret() -> None:
    assert mask_secret("ai.embedding.apiKey", "sk-123") == "********"
    assert mask_secret("ai.embedding.apiKey", None) is None
    assert mask_secret("ai.embedding.model", "m") == "m"
    with pytest.raises(SettingError):
        mask_secret("nope", "x")
