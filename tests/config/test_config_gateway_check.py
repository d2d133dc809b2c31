"""`tailgate config check`: the routing report, warnings, exit codes, and no key ever printed in full."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tailgate.cli import main
from tailgate.config.check import check_file, find_warnings, is_loopback
from tailgate.config.resolve import mask_key

CANARY = "sk-CANARY-7f3a9e2b41d8c6d0"
ENV = {"LANYUN_KEY": CANARY, "BAILIAN_KEY": "sk-bailian-fedcba9876543210"}

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


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _check(path: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, ["config", "check", str(path), *args], env=ENV if env is None else env)


def _all_output(result: Result) -> str:
    return result.stdout + result.stderr + str(result.exception or "")


def test_check_prints_routes_shares_and_providers(tmp_path: Path) -> None:
    """The text report shows each route with its share, and each provider's URL, masked key, limits and notes."""
    result = _check(_write(tmp_path, EXAMPLE))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "deepseek-v3.2" in out
    assert "/maas/deepseek-ai/DeepSeek-V3.2" in out
    assert "80.0%" in out
    assert "20.0%" in out
    assert "batch" in out
    assert "https://maas-api.lanyun.net/v1" in out
    assert "https://dashscope.aliyuncs.com/compatible-mode/v1" in out
    assert mask_key(CANARY) in out
    assert "rpm 1200" in out
    assert "2 in / 3 out CNY per 1M tokens" in out
    # bailian and local have no price: no cost (NULL, docs/keys.md), not "0 in / 0 out"
    assert out.count("no price (its requests are recorded without a cost)") == 2
    assert "0 in" not in out
    assert "Request rate increased too quickly" in out  # bailian's 429 notes
    assert "routing.policy: adaptive   retry: 3 attempts" in out
    assert "not implemented" not in out


def test_check_json_has_routes_and_masked_keys(tmp_path: Path) -> None:
    """--json carries the same report as data, keys masked."""
    result = _check(_write(tmp_path, EXAMPLE), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is True
    routes = data["models"]["deepseek-v3.2"]["routes"]
    assert [(r["provider"], r["share_pct"], r["classes"]) for r in routes] == [
        ("lanyun", 80.0, []),
        ("bailian", 20.0, ["batch"]),
    ]
    assert routes[0]["base_url"] == "https://maas-api.lanyun.net/v1"
    assert data["providers"]["lanyun"]["api_keys"] == [mask_key(CANARY)]
    assert data["providers"]["lanyun"]["limits"]["rpm"] == 1200
    assert data["providers"]["local"]["preset"] is None
    assert data["routing"] == {
        "policy": "adaptive",
        "effective_policy": "adaptive",
        "policies": {"deepseek-v3.2": "adaptive"},
    }


def test_invalid_config_exits_2_with_every_located_problem(tmp_path: Path) -> None:
    """A bad config exits 2 and prints each problem as file:line: path: message on stderr."""
    path = _write(tmp_path, EXAMPLE.replace("weight: 20", "weight: -5").replace("preset: lanyun,", "preset: lanyn,"))
    result = _check(path)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"{path}:9: models.deepseek-v3.2.routes[1].weight: Input should be greater" in result.stderr
    # Schema errors come first; preset problems are found once the schema is valid.
    path = _write(tmp_path, EXAMPLE.replace("preset: lanyun,", "preset: lanyn,"))
    result = _check(path)
    assert result.exit_code == 2
    assert f"{path}:2: providers.lanyun.preset: unknown preset 'lanyn'" in result.stderr


def test_invalid_config_json_reports_problems_on_stdout(tmp_path: Path) -> None:
    """With --json a bad config still exits 2 and also prints {"ok": false, "problems": [...]}."""
    path = _write(tmp_path, EXAMPLE)
    result = _check(path, "--json", env={})
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["ok"] is False
    assert f"{path}:2: providers.lanyun.api_keys[0]: environment variable LANYUN_KEY is not set" in data["problems"]


def test_missing_file_exits_2() -> None:
    """A file that cannot be read is a config error (exit 2), not a traceback."""
    result = CliRunner().invoke(main, ["config", "check", "/nonexistent/gateway.yaml"])
    assert result.exit_code == 2
    assert "cannot read config file" in result.stderr


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    "text",
    [
        EXAMPLE,  # valid: the key is printed masked
        EXAMPLE.replace("weight: 20", "weight: -5"),  # an unrelated error while the key is loaded
        EXAMPLE.replace('api_keys: ["${LANYUN_KEY}"]', 'api_keys: "${LANYUN_KEY}"'),  # a string, not a list
        EXAMPLE.replace('api_keys: ["${LANYUN_KEY}"]', f"api_keys: [{CANARY}]"),  # written into the file
        f"keys: [{{id: a, key_sha256: {CANARY}}}]\n" + EXAMPLE,  # a raw key where its hash belongs
        f"keys: [{{id: a, key: {CANARY}, extra: 1}}]\n" + EXAMPLE,
        f"admin_key: [{CANARY}]\n" + EXAMPLE,
        EXAMPLE.replace('api_keys: ["${LANYUN_KEY}"]', f'api_keys: ["{CANARY} x"]'),  # whitespace in a key
        EXAMPLE.replace("{preset: bailian,", f'{{preset: bailian, headers: {{"Bad Name": "{CANARY}"}},'),
        EXAMPLE.replace("{preset: bailian,", f'{{preset: bailian, headers: {{"X-Key": 1}}, base_url: "{CANARY}",'),
        EXAMPLE.replace("{preset: bailian,", f'{{preset: bailian, base_url: "{CANARY}",'),  # a key pasted as URL
    ],
)
def test_canary_key_never_appears_in_any_output(tmp_path: Path, text: str, as_json: bool) -> None:
    """Whatever the config looks like, valid or not, the canary key is never printed in full."""
    result = _check(_write(tmp_path, text), *(["--json"] if as_json else []))
    assert result.exit_code in (0, 2), result.output
    assert CANARY not in _all_output(result)


def test_canary_absent_from_a_real_subprocess(tmp_path: Path) -> None:
    """`python -m tailgate config check` in its own process prints neither text nor JSON with the full key."""
    path = _write(tmp_path, EXAMPLE)
    env = {**os.environ, **ENV}
    for args in ([], ["--json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "tailgate", "config", "check", str(path), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=20,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "80.0" in proc.stdout
        assert CANARY not in proc.stdout + proc.stderr
    bad = _write(tmp_path, EXAMPLE.replace("weight: 20", "weight: -5"))
    proc = subprocess.run(
        [sys.executable, "-m", "tailgate", "config", "check", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        timeout=20,
        check=False,
    )
    assert proc.returncode == 2
    assert "routes[1].weight" in proc.stderr
    assert CANARY not in proc.stdout + proc.stderr


def test_warnings_for_open_bind_and_missing_keys(tmp_path: Path) -> None:
    """Warnings name a refused open bind and a keyless hosted provider; every policy is implemented."""
    path = _write(
        tmp_path,
        "listen: {host: 0.0.0.0}\n"
        "providers:\n"
        "  bl: {preset: bailian}\n"
        "  gpu: {preset: vllm, base_url: 'http://10.0.0.7:8000/v1'}\n"
        "models:\n  m:\n    policy: cost\n    routes:\n"
        "      - {provider: bl, model: deepseek-v3.2}\n"
        "      - {provider: gpu, model: x, weight: 0}\n"
        "routing: {policy: least-latency}\n",
    )
    warnings = check_file(path, env={}).warnings
    assert not any("policy" in w for w in warnings)
    assert any(w.startswith("listen.host: 0.0.0.0 is not a loopback address") and "refuses" in w for w in warnings)
    assert any(w.startswith("providers.bl.api_keys: none given") for w in warnings)
    assert not any(w.startswith("providers.gpu.api_keys") for w in warnings)
    assert "models.m.routes[1].weight: 0, so this route is never chosen by weight" in warnings


def test_no_warnings_for_a_clean_weighted_loopback_config(tmp_path: Path) -> None:
    """A weighted config on loopback with keyed providers, all routed, has nothing to warn about."""
    report = check_file(_write(tmp_path, EXAMPLE.replace("policy: adaptive", "policy: weighted")), env=ENV)
    assert find_warnings(report.config, report.providers) == ["providers.local: no route uses this provider"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.1.2.3", True), ("0.0.0.0", False), ("::", False)],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    """Loopback addresses and localhost count as loopback; wildcard binds do not."""
    assert is_loopback(host) is loopback
