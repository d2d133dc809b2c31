"""The modes, hops and targets of ``gateway_overhead.py``, and its tables."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from bench_sim import _cores, _verdict

console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)
TARGET_RPS_RATIO = 0.70
TARGET_ADDED_P50_RATIO = 1.25
TARGET_ADDED_P99_MS = 2.0
TARGET_RSS_GROWTH = 0.05
HOPS = ("direct", "floor", "tailgate")
"""The hops every run has: the claims compare tailgate with the floor and both with direct."""
EXTRA_HOPS = ("litellm", "workers2", "redis", "aiohttp-front", "baseline", "otel", "baseline-otel")
MODES: dict[str, tuple[bool, int]] = {
    "nonstream-c1": (False, 1),
    "nonstream-c50": (False, 50),
    "stream-c1": (True, 1),
    "stream-c50": (True, 50),
}
"""mode -> (stream, connections)."""
HOP_MODES: dict[str, tuple[str, ...]] = {
    "litellm": ("nonstream-c1", "nonstream-c50"),
    "workers2": ("nonstream-c50", "stream-c50"),  # at one connection one worker serves it all
    "redis": tuple(MODES),
    "otel": ("nonstream-c50", "stream-c50"),  # the claim is at c=50
    "baseline-otel": ("nonstream-c50", "stream-c50"),
}
"""The modes an extra hop runs in (direct, floor and tailgate run in every mode)."""
TARGET_OTEL_CPU_RATIO = 1.05
"""Issue 43: with OpenTelemetry export on (to a sink collector), CPU per request <= 1.05 x export off, c=50."""
TARGET_VS_LITELLM = 45.0
"""Issue 15: tailgate serves >= 45x the requests per second of LiteLLM's proxy (non-stream, c=50)."""
ONLY = (*MODES, "rss")


def _kib(rss: dict[str, int] | None, key: str = "VmRSS") -> int | None:
    return None if rss is None else rss.get(key)


# -- tables ----------------------------------------------------------------------------------------


def print_mode(mode: str, sc: dict[str, Any], enforced: bool) -> None:
    h = sc["hops"]
    names = list(h)
    stream, conns = MODES[mode]
    title = f"{'stream' if stream else 'non-stream'}, c={conns} ({len(h['direct']['rounds'])} rounds)"
    table = Table("", *names, "tailgate / floor", "target", "result", title=title)
    t = sc["targets"]
    table.add_row(
        "req/s",
        *(f"{h[x]['rps']:,.0f}" for x in names),
        f"{sc['rps_ratio']:.3f}",
        f">= {TARGET_RPS_RATIO}",
        _verdict(t["rps_ratio"]["passed"], enforced),
    )
    table.add_row("latency P50 ms", *(f"{h[x]['p50_ms']:.2f}" for x in names), "", "", "")
    table.add_row("latency P99 ms", *(f"{h[x]['p99_ms']:.2f}" for x in names), "", "", "")
    a50, a99 = sc["added_p50_ms"], sc["added_p99_ms"]
    ratio50 = f"{a50['tailgate'] / a50['floor']:.2f}" if a50["floor"] > 0 else "-"
    table.add_row(
        "added P50 ms",
        *(f"{a50[x]:.3f}" if x in a50 else "-" for x in names),
        ratio50,
        f"<= {t['added_p50']['limit']:.3f}" if "added_p50" in t else "",
        _verdict(t["added_p50"]["passed"], enforced) if "added_p50" in t else "",
    )
    table.add_row(
        "added P99 ms",
        *(f"{a99[x]:.3f}" if x in a99 else "-" for x in names),
        "",
        f"<= {TARGET_ADDED_P99_MS}" if "added_p99" in t else "",
        _verdict(t["added_p99"]["passed"], enforced) if "added_p99" in t else "",
    )
    cpu_ratio = sc["cpu_per_request_ratio"]
    table.add_row(
        "hop CPU µs / request",
        *(f"{h[x]['cpu_us_per_request']:.0f}" for x in names),
        f"{cpu_ratio:.2f}" if cpu_ratio is not None else "-",
        "",
        "",
    )
    table.add_row("hop process CPU (cores)", *(_cores(h[x]["hop_cpu"]) for x in names), "", "", "")
    table.add_row("simulator CPU (cores)", *(_cores(h[x]["sim_cpu"]) for x in names), "", "", "")
    table.add_row("wrk CPU (cores)", *(_cores(h[x]["wrk_cpu"]) for x in names), "", "", "")
    if "redis" in names:
        table.add_row("redis-server CPU (cores)", *(_cores(h[x]["helper_cpu"]) for x in names), "", "", "")
    table.add_row("rest of the machine (cores)", *(_cores(h[x]["others_cpu"]) for x in names), "", "", "")
    table.add_row("errors", *(str(h[x]["errors"]) for x in names), "", "0", _verdict(sc["errors"] == 0, True))
    console.print(table)
    ratios = ", ".join(f"{x:.3f}" for x in sc["rps_ratio_rounds"])
    console.print(f"  tailgate / floor per round: {ratios}", markup=False)
    for name, vs in sc["vs_tailgate"].items():
        per_round = ", ".join(f"{x:.3f}" for x in vs["rps_ratio_rounds"])
        line = f"  {name} / tailgate req/s: {vs['rps_ratio']} (per round {per_round})"
        line += f"; CPU per request {vs['cpu_per_request_ratio']}x tailgate's"
        if name == "litellm":
            line += f"; tailgate / litellm req/s: {vs['tailgate_over_hop']}x"
            if "vs_litellm" in t:
                ok = t["vs_litellm"]["passed"]
                verdict = "PASS" if ok else "FAIL" if enforced else "miss (not enforced)"
                line += f" (target >= {TARGET_VS_LITELLM:g}x: {verdict})"
        if name == "otel" and "otel_cpu" in t:
            ok = t["otel_cpu"]["passed"]
            verdict = "PASS" if ok else "FAIL" if enforced else "miss (not enforced)"
            line += f" (export on / off, target <= {TARGET_OTEL_CPU_RATIO:g}x: {verdict})"
        console.print(line, markup=False)
    if sc["gateway_self_overhead_mean_ms"] is not None:
        console.print(
            f"  gateway's own x-tailgate-overhead-ms, mean: {sc['gateway_self_overhead_mean_ms']:.3f} ms "
            "(to the first token, excluding HTTP parsing and per-chunk relaying)",
            markup=False,
        )


def print_rss(sc: dict[str, Any], enforced: bool) -> None:
    table = Table("", "value", "target", "result", title="gateway RSS")
    growth = sc["growth"]
    table.add_row(
        f"RSS growth over {sc['requests']:,} requests",
        f"{growth:+.2%}" if growth is not None else "-",
        f"within +-{TARGET_RSS_GROWTH:.0%}",
        _verdict(sc["target"]["passed"], enforced),
    )
    anon = sc["growth_anon"]
    table.add_row("  of which heap (RssAnon)", f"{anon:+.2%}" if anon is not None else "-", "", "")
    table.add_row(
        "VmRSS MiB: start / baseline / end / max",
        _mib(_kib(sc["first_kib"]), _kib(sc["start_kib"]), _kib(sc["end_kib"]), sc["max_kib"]),
        "",
        "",
    )
    table.add_row(
        "RssAnon MiB: start / baseline / end",
        _mib(_kib(sc["first_kib"], "RssAnon"), _kib(sc["start_kib"], "RssAnon"), _kib(sc["end_kib"], "RssAnon")),
        "",
        "",
    )
    warm = sc["warmup_growth"]
    table.add_row("requests the gateway served before the baseline", f"{sc['served_before_baseline']:,}", "", "")
    table.add_row(
        f"growth during the {sc['warmup_requests']:,}-request warm-up",
        f"{warm:+.2%}" if warm is not None else "-",
        "",
        "",
    )
    table.add_row("time", f"{sc['seconds']:.0f} s", "", "")
    table.add_row("errors", str(sc["errors"]), "0", _verdict(sc["errors"] == 0, True))
    console.print(table)


def _mib(*kib: int | None) -> str:
    return " / ".join("-" if k is None else f"{k / 1024:.1f}" for k in kib)


# -- main ------------------------------------------------------------------------------------------
