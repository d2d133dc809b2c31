"""Gateway config: the 80/20 example resolves, presets merge under user fields, errors are located, keys masked."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tailgate.config import ConfigError
from tailgate.config.presets import PRESETS, get_preset, known_presets
from tailgate.config.resolve import (
    ResolvedProvider,
    display_url,
    hash_key,
    load_resolved,
    mask_key,
    resolve_providers,
)
from tailgate.config.schema import GatewayConfig, LimitsConfig, PriceConfig, TimeoutsConfig, load_gateway_config

LANYUN = "sk-lanyun-0123456789abcdef"
BAILIAN = "sk-bailian-fedcba9876543210"
ENV = {"LANYUN_KEY": LANYUN, "BAILIAN_KEY": BAILIAN}

# The example of DESIGN.md, verbatim: lanyun 80 / bailian 20 (batch), a self-hosted vLLM, adaptive routing.
EXAMPLE = """\
providers:
  lanyun:   {preset: lanyun,   api_keys: ["${LANYUN_KEY}"], limits: {rpm: 1200}, price: {input: 2.0, output: 3.0}}
  bailian:  {preset: bailian,  api_keys: ["${BAILIAN_KEY}"]}
  local:    {base_url: "http://127.0.0.1:8000/v1"}           # a self-hosted vLLM/SGLang
models:
  deepseek-v3.2:                                              # the alias clients send
    routes:
      - {provider: lanyun,  model: "/maas/deepseek-ai/DeepSeek-V3.2", weight: 80}
      - {provider: bailian, model: "deepseek-v3.2",                  weight: 20, classes: [batch]}
routing: {policy: adaptive, slo: {ttft_p90: 1.0s, e2e_p90: 3s}, hedge: {after: p90, budget: 5%}}
"""

MINIMAL_MODELS = """\
models:
  m:
    routes:
      - {provider: p, model: x}
"""


def _write(tmp_path: Path, text: str, name: str = "gateway.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _problems(path: Path, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_resolved(path, env=ENV if env is None else env)
    return exc.value.problems


def test_design_example_loads_and_resolves(tmp_path: Path) -> None:
    """The DESIGN.md 80/20 example validates and resolves every provider with its preset merged in."""
    cfg, providers = load_resolved(_write(tmp_path, EXAMPLE), env=ENV)
    assert set(providers) == {"lanyun", "bailian", "local"}
    lanyun, bailian, local = providers["lanyun"], providers["bailian"], providers["local"]
    assert lanyun.preset == "lanyun"
    assert lanyun.base_url == "https://maas-api.lanyun.net/v1"
    assert lanyun.api_keys == (LANYUN,)
    assert lanyun.limits.rpm == 1200
    assert (lanyun.price.input, lanyun.price.output, lanyun.price.currency) == (2.0, 3.0, "CNY")
    assert bailian.base_url == "https://dashscope.aliyuncs.com/compatible-mode/v1"
    assert bailian.api_keys == (BAILIAN,)
    assert local.preset is None
    assert local.base_url == "http://127.0.0.1:8000/v1"
    assert local.api_keys == ()
    assert local.timeouts == TimeoutsConfig()
    routes = cfg.models["deepseek-v3.2"].routes
    assert [(r.provider, r.model, r.weight, r.classes) for r in routes] == [
        ("lanyun", "/maas/deepseek-ai/DeepSeek-V3.2", 80, []),
        ("bailian", "deepseek-v3.2", 20, ["batch"]),
    ]
    assert cfg.routing.policy == "adaptive"
    assert cfg.routing.slo.ttft_p90 == 1.0
    assert cfg.routing.hedge is not None
    assert cfg.routing.hedge.budget == pytest.approx(0.05)


def test_preset_fills_base_url_and_user_base_url_wins(tmp_path: Path) -> None:
    """A preset supplies base_url; a user's base_url replaces it, trailing slash stripped; aliases work."""
    path = _write(
        tmp_path,
        "providers:\n"
        "  a: {preset: deepseek}\n"
        "  b: {preset: deepseek, base_url: 'https://api.deepseek.com/v1/'}\n"
        "  c: {preset: DashScope}\n"
        "  d: {preset: vllm, base_url: 'http://10.0.0.5:8000/v1'}\n"
        "models:\n  m:\n    routes:\n      - {provider: a, model: deepseek-chat}\n",
    )
    _, providers = load_resolved(path, env={})
    assert providers["a"].base_url == "https://api.deepseek.com"
    assert providers["b"].base_url == "https://api.deepseek.com/v1"
    assert providers["c"].preset == "bailian"
    assert providers["c"].base_url == PRESETS["bailian"].base_url
    assert providers["d"].base_url == "http://10.0.0.5:8000/v1"


def test_per_key_preset_limits_scale_and_user_limits_win(tmp_path: Path) -> None:
    """Lanyun's per-key default rpm scales with the keys; a user's rpm wins; an explicit null clears it."""
    path = _write(
        tmp_path,
        "providers:\n"
        "  two: {preset: lanyun, api_keys: [sk-aaaaaaaaaaaa, sk-bbbbbbbbbbbb]}\n"
        "  mine: {preset: lanyun, limits: {rpm: 300, max_connections: 8}}\n"
        "  none: {preset: lanyun, limits: {rpm: null}}\n"
        "  usd: {preset: openai, price: {input: 1.25}}\n"
        "models:\n  m:\n    routes:\n      - {provider: two, model: x}\n",
    )
    _, providers = load_resolved(path, env={})
    assert providers["two"].limits.rpm == 2400
    assert providers["mine"].limits.rpm == 300
    assert providers["mine"].limits.max_connections == 8
    assert providers["none"].limits.rpm is None
    assert (providers["usd"].price.input, providers["usd"].price.currency) == (1.25, "USD")


def test_negative_weight_names_exact_path_and_line(tmp_path: Path) -> None:
    """A negative weight on the second route is reported at its line as models.deepseek-v3.2.routes[1].weight."""
    path = _write(tmp_path, EXAMPLE.replace("weight: 20", "weight: -5"))
    assert _problems(path) == [
        f"{path}:9: models.deepseek-v3.2.routes[1].weight: Input should be greater than or equal to 0 (got -5)"
    ]


def test_unknown_provider_in_route_is_located(tmp_path: Path) -> None:
    """A route naming no defined provider is reported at that route's line, listing the known ones."""
    path = _write(tmp_path, EXAMPLE.replace("provider: bailian,", "provider: bailain,"))
    problems = _problems(path)
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}:9: models.deepseek-v3.2.routes[1].provider: ")
    assert "known: bailian, lanyun, local" in problems[0]
    assert "'bailain'" in problems[0]


def test_unknown_keys_anywhere_are_errors(tmp_path: Path) -> None:
    """Misspelt keys at the top, in a provider and in a route are all reported, each at its own line, with the
    closest field of that place (difflib)."""
    text = (
        EXAMPLE.replace("routing:", "routnig:")
        .replace("limits: {rpm: 1200}", "limit: {rpm: 1200}")
        .replace("weight: 80}", "weight: 80, clases: [x]}")
    )
    path = _write(tmp_path, text)
    problems = _problems(path)
    tail = "(unknown keys are errors, not ignored)"
    assert f"{path}:10: routnig: unknown field: did you mean 'routing'? {tail}" in problems
    assert f"{path}:2: providers.lanyun.limit: unknown field: did you mean 'limits'? {tail}" in problems
    assert f"{path}:8: models.deepseek-v3.2.routes[0].clases: unknown field: did you mean 'classes'? {tail}" in problems


def test_an_unknown_field_far_from_any_known_one_says_check_the_spelling(tmp_path: Path) -> None:
    """No close field: no guess, and the line that a newer tailgate may know the field."""
    path = _write(tmp_path, EXAMPLE.replace("routing:", "zzqx: 1\nrouting:"))
    problems = _problems(path)
    assert f"{path}:10: zzqx: unknown field (check the spelling; unknown keys are errors, not ignored)" in problems
    assert any("a field documented for a newer version" in p for p in problems)


def test_every_problem_comes_in_one_run(tmp_path: Path) -> None:
    """Five typos of different rounds — an unset variable, two unknown fields, a route's unknown provider and an
    unknown preset — are all reported at once (they took three runs), each with its closest spelling."""
    text = (
        "providers:\n"
        "  lanyun: {preset: lanyn, api_keys: ['${NOPE_KEY}']}\n"
        "models:\n"
        "  chat: {routes: [{provider: lanyn, model: m, wieght: 3}]}\n"
        "routnig: {policy: adaptive}\n"
    )
    path = _write(tmp_path, text)
    problems = _problems(path, env={})
    assert problems == [
        f"{path}:2: providers.lanyun.api_keys[0]: environment variable NOPE_KEY is not set",
        f"{path}:4: models.chat.routes[0].wieght: unknown field: did you mean 'weight'? "
        "(unknown keys are errors, not ignored)",
        f"{path}:5: routnig: unknown field: did you mean 'routing'? (unknown keys are errors, not ignored)",
        f"{path}:4: models.chat.routes[0].provider: no provider of this name under 'providers' "
        "(known: lanyun; did you mean 'lanyun'?) (got 'lanyn')",
        f"{path}:2: providers.lanyun.preset: unknown preset 'lanyn' (did you mean 'lanyun'? known: {known_presets()})",
    ]


def test_missing_env_vars_are_all_reported_with_their_lines(tmp_path: Path) -> None:
    """Every unset ${VAR} is reported at once, with the line and path of the key that needs it."""
    path = _write(tmp_path, EXAMPLE)
    problems = _problems(path, env={})
    assert problems == [
        f"{path}:2: providers.lanyun.api_keys[0]: environment variable LANYUN_KEY is not set",
        f"{path}:3: providers.bailian.api_keys[0]: environment variable BAILIAN_KEY is not set",
    ]


def test_empty_env_value_is_an_empty_key_error(tmp_path: Path) -> None:
    """A key variable set to an empty string is refused rather than sent as an empty bearer token."""
    path = _write(tmp_path, EXAMPLE)
    problems = _problems(path, env={**ENV, "BAILIAN_KEY": ""})
    assert problems == [
        f"{path}:3: providers.bailian.api_keys[0]: empty key (is its environment variable set but empty?)"
    ]


def test_a_key_or_header_the_upstream_client_cannot_write_is_refused_at_load(tmp_path: Path) -> None:
    """A provider key with a pasted "…" or a header value outside printable ASCII would fail every request to the
    provider at send time (the upstream client writes headers as Latin-1): both are refused at load, naming where,
    and the key itself is never printed."""
    bailian = 'api_keys: ["${BAILIAN_KEY}"]}'
    path = _write(tmp_path, EXAMPLE.replace(bailian, 'api_keys: ["${BAILIAN_KEY}"], headers: {X-Team: 团队}}', 1))
    problems = _problems(path, env={**ENV, "BAILIAN_KEY": "sk-bailian-0123…"})
    assert problems == [
        f"{path}:3: providers.bailian.api_keys[0]: key contains a character outside ASCII (pasted from a page?)",
        f"{path}:3: providers.bailian.headers.X-Team: header value has a character outside printable ASCII",
    ], problems
    assert not any("sk-bailian-0123" in p for p in problems)


def test_unknown_preset_lists_known_presets(tmp_path: Path) -> None:
    """An unknown preset names providers.NAME.preset, the closest known one and every known preset."""
    path = _write(tmp_path, "providers:\n  p:\n    preset: lanyn\n" + MINIMAL_MODELS)
    problems = _problems(path)
    assert problems[0] == (
        f"{path}:3: providers.p.preset: unknown preset 'lanyn' (did you mean 'lanyun'? known: {known_presets()})"
    )
    assert "lanyun" in problems[0]
    assert "dashscope" in problems[0]


@pytest.mark.parametrize("provider", ["{}", "{preset: vllm}", "{preset: sglang, api_keys: []}"])
def test_base_url_required_without_preset_and_for_self_hosted(tmp_path: Path, provider: str) -> None:
    """No preset, or a self-hosted preset, without base_url is providers.NAME.base_url: required."""
    path = _write(tmp_path, f"providers:\n  p: {provider}\n" + MINIMAL_MODELS)
    problems = _problems(path)
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}:2: providers.p.base_url: required")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/v1", "http:// or https://"),
        ("api.deepseek.com", "http:// or https://"),
        ("https://api.qnaigc.com/v1/chat/completions", "not an endpoint URL"),
        ("http://host/v1#x", "fragment"),
    ],
)
def test_base_url_must_be_an_http_api_root(tmp_path: Path, url: str, why: str) -> None:
    """A base_url that is not an http(s) API root is refused with a reason."""
    path = _write(tmp_path, f"providers:\n  p: {{base_url: '{url}'}}\n" + MINIMAL_MODELS)
    (problem,) = _problems(path)
    assert problem.startswith(f"{path}:2: providers.p.base_url: base_url ")
    assert why in problem


def test_duplicate_gateway_key_ids_are_located(tmp_path: Path) -> None:
    """Two client keys with one id are reported at the second one's id."""
    path = _write(
        tmp_path,
        "keys:\n  - {id: team, key: aaaaaaaaaaaaaaaa}\n  - {id: team, key: bbbbbbbbbbbbbbbb}\n"
        "providers:\n  p: {base_url: 'http://127.0.0.1:1/v1'}\n" + MINIMAL_MODELS,
    )
    assert _problems(path) == [f"{path}:3: keys[1].id: another key already has this id (got 'team')"]


def test_schema_loader_reports_the_same_located_route_error(tmp_path: Path) -> None:
    """load_gateway_config (schema only, no presets) also locates an unknown route provider."""
    path = _write(
        tmp_path, "providers:\n  p: {base_url: 'http://127.0.0.1:1/v1'}\n" + MINIMAL_MODELS.replace("p,", "q,")
    )
    with pytest.raises(ConfigError) as exc:
        load_gateway_config(path)
    assert exc.value.problems[0].startswith(f"{path}:6: models.m.routes[0].provider: no provider of this name")


def test_resolve_providers_without_a_file_names_the_source() -> None:
    """resolve_providers on an in-memory config prefixes its problems with the given source."""
    cfg = GatewayConfig.model_validate(
        {"providers": {"p": {"preset": "nope"}}, "models": {"m": {"routes": [{"provider": "p", "model": "x"}]}}}
    )
    with pytest.raises(ConfigError) as exc:
        resolve_providers(cfg, source="inline")
    assert exc.value.problems == [f"inline: providers.p.preset: unknown preset 'nope' (known: {known_presets()})"]
    cfg = GatewayConfig.model_validate(
        {"providers": {"p": {}}, "models": {"m": {"routes": [{"provider": "p", "model": "x"}]}}}
    )
    with pytest.raises(ConfigError) as exc:
        resolve_providers(cfg)
    assert exc.value.problems[0].startswith("config: providers.p.base_url: required")


@pytest.mark.parametrize(
    ("key", "masked"),
    [
        ("sk-0123456789abcdef", "sk-…cdef"),
        ("0123456789abcdef", "…cdef"),
        ("sk-short", "***"),
        ("elevenchars", "***"),
        ("twelve-chars", "…hars"),
        ("", "***"),
    ],
)
def test_mask_key_shows_at_most_the_last_four(key: str, masked: str) -> None:
    """Masks show a short prefix and the last 4 characters, and nothing at all of keys under 12."""
    assert mask_key(key) == masked


def test_hash_key_is_sha256_hex() -> None:
    """hash_key matches hashlib's sha256 hex digest (what keys[].key_sha256 stores)."""
    assert hash_key("secret") == hashlib.sha256(b"secret").hexdigest()
    assert len(hash_key("x")) == 64


def test_resolved_provider_repr_hides_keys_and_header_values() -> None:
    """repr() of a resolved provider shows masked keys and header names only."""
    rp = ResolvedProvider(
        name="p",
        preset=None,
        base_url="https://user:pw@example.com/v1?token=zzz",
        api_keys=("sk-supersecretvalue1234",),
        timeouts=TimeoutsConfig(),
        limits=LimitsConfig(),
        price=PriceConfig(),
        max_output_tokens=None,
        headers={"X-Api-Secret": "hidden-header-value"},
    )
    text = repr(rp)
    assert "sk-supersecretvalue1234" not in text
    assert "sk-…1234" in text
    assert "hidden-header-value" not in text
    assert "X-Api-Secret" in text
    assert "pw" not in text.replace("https://user:***@", "")
    assert "zzz" not in text


def test_display_url_hides_password_and_query() -> None:
    """display_url keeps scheme, host and path but hides a password and the query string."""
    assert display_url("https://u:p@h.example/v1?key=1") == "https://u:***@h.example/v1?…"
    assert display_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_every_preset_is_consistent() -> None:
    """Presets are keyed by name, hosted ones have an http(s) URL and sources, self-hosted ones need no key."""
    for name, preset in PRESETS.items():
        assert preset.name == name
        assert get_preset(name.upper()) is preset
        if preset.self_hosted:
            assert not preset.requires_key
        else:
            assert preset.base_url is not None
            assert preset.base_url.startswith("https://")
            assert not preset.base_url.endswith("/")
        for url in preset.sources:
            assert url.startswith("https://")
    assert get_preset("dashscope") is PRESETS["bailian"]
    assert get_preset("ark") is PRESETS["volcengine"]
    assert get_preset("nope") is None


def test_docs_preset_table_matches_the_code() -> None:
    """docs/config.md carries the preset table generated from PRESETS, so the page cannot drift."""
    from tailgate.config.presets import presets_markdown

    doc = (Path(__file__).parents[2] / "docs" / "config.md").read_text(encoding="utf-8")
    assert presets_markdown() in doc, "regenerate the table in docs/config.md from presets_markdown()"


def test_anthropic_endpoint_from_preset_user_override_and_checks(tmp_path: Path) -> None:
    """DeepSeek's and Bailian's presets fill anthropic_base_url; the user's wins; others have none; an
    endpoint URL (…/v1/messages) or a non-http value is refused at its path."""
    path = _write(
        tmp_path,
        """\
providers:
  deepseek: {preset: deepseek, api_keys: ["k1"]}
  bailian:  {preset: bailian,  api_keys: ["k2"], anthropic_base_url: "https://dashscope-intl.aliyuncs.com/apps/anthropic/"}
  lanyun:   {preset: lanyun,   api_keys: ["k3"]}
"""
        + MINIMAL_MODELS.replace("provider: p", "provider: deepseek"),
    )
    _, providers = load_resolved(path, env={})
    assert providers["deepseek"].anthropic_base_url == "https://api.deepseek.com/anthropic"
    assert providers["bailian"].anthropic_base_url == "https://dashscope-intl.aliyuncs.com/apps/anthropic"
    assert providers["lanyun"].anthropic_base_url is None
    assert "anthropic_base_url='https://api.deepseek.com/anthropic'" in repr(providers["deepseek"])
    bad = _write(
        tmp_path,
        """\
providers:
  p: {base_url: "http://127.0.0.1:8000/v1", anthropic_base_url: "https://api.deepseek.com/anthropic/v1/messages"}
  q: {base_url: "http://127.0.0.1:8000/v1", anthropic_base_url: "ftp://x"}
"""
        + MINIMAL_MODELS,
        name="bad.yaml",
    )
    problems = _problems(bad, env={})
    assert any("providers.p.anthropic_base_url" in p and "not an endpoint URL" in p for p in problems), problems
    assert any("providers.q.anthropic_base_url" in p and "http:// or https://" in p for p in problems), problems
    for preset in ("deepseek", "bailian"):
        url = PRESETS[preset].anthropic_base_url
        assert url is not None
        assert any("anthropic" in source for source in PRESETS[preset].sources)
