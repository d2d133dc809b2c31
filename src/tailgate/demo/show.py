"""What the demo prints: where everything is, the live line, and the drill's results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tailgate.demo.drill import CUTOVER_SHARE, PhaseReport, configured_shares
from tailgate.demo.stack import MODEL, PRIMARY, Stack
from tailgate.demo.traffic import LiveStats, TrafficShape

BATCH_SHARE = TrafficShape().batch_share


def _s(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def banner(console: Console, stack: Stack, batch_share: float = BATCH_SHARE) -> None:
    """Providers, gateway, dashboard, metrics, store, and a copy-paste snippet for the official SDK."""
    for name, p in stack.cluster.providers.items():
        console.print(f"simulated provider [bold]{name}[/] ({p.spec.preset}) on [cyan]{p.url}[/]")
    routes = stack.config["models"][MODEL]["routes"]
    split = " / ".join(f"{r['provider']} {r['weight']:g}" for r in routes)
    configured = configured_shares(stack.gateway.aliases[MODEL], batch_share)
    overall = " / ".join(f"{n} {_pct(v)}" for n, v in configured.items() if v > 0)
    console.print(
        f"gateway     [bold cyan]{stack.url}[/]   (policy adaptive; interactive requests by weight {split}; "
        f"batch, {_pct(batch_share)} of the traffic, → secondary: of all requests {overall})",
        soft_wrap=True,
    )
    if stack.dashboard:
        console.print(f"dashboard   [bold cyan]{stack.root_url}/dashboard[/]")
    console.print(
        f"metrics     [cyan]{stack.root_url}/metrics[/]   providers: [cyan]{stack.root_url}/admin/providers[/]"
    )
    console.print(f"store       {stack.db}" + ("  (temporary; --db PATH keeps it)" if stack.temporary else ""))
    if stack.monitor is not None:
        console.print(
            f"monitor     probing every provider into the store; [bold]tailgate leaderboard --db {stack.db}[/]"
        )
    console.print(
        "Try it with the official SDK:\n"
        f'[green]from openai import OpenAI\nclient = OpenAI(base_url="{stack.url}", api_key="any")\n'
        f'print(client.chat.completions.create(model="{MODEL}", '
        'messages=[{"role": "user", "content": "hi"}]).choices[0].message.content)[/]',
        soft_wrap=True,
    )


def live_line(phase: str, stats: LiveStats, *, ended: bool = False, window: float = 5.0) -> Text:
    """One line over the requests completed in the last ``window`` seconds: req/s, P99 TTFT and E2E, the
    share each provider served (the primary first), errors. ``ended``: the line that closes a phase, which
    says so (the phase's whole numbers are in the drill table)."""
    names = [PRIMARY, *sorted(n for n in stats.served if n != PRIMARY)]
    share = " / ".join(f"{name} {_pct(stats.served.get(name, 0.0))}" for name in names) if stats.served else "–"
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"[{phase}{' ended' if ended else ''}] ", style="bold yellow")
    text.append(
        f"completed in the last {window:g} s: {stats.rate:4.1f} req/s  "
        f"P99 TTFT {_s(stats.ttft_p99)} s E2E {_s(stats.e2e_p99)} s  "
        f"served {share}  errors {stats.errors}  in flight {stats.in_flight}"
    )
    return text


def drill_table(reports: Sequence[PhaseReport], configured: Mapping[str, float] | None = None) -> Table:
    """One row per phase; with ``configured`` (provider → share, ``drill.configured_shares``) the served
    split is set against the configured one, provider by provider in the order the headers name them (so the
    table stays within 120 columns: the cells hold the shares, the header the providers)."""
    table = Table(
        title="failover drill (interactive latencies in s from the intended send; shares of successes)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    names = [n for n, v in (configured or {}).items() if v > 0]
    for r in reports:
        names += [n for n in r.served if n not in names]
    who = " / ".join(names)
    split = (f"configured\n{who}", f"served (phase)\n{who}") if configured else ("served by",)
    for col in ("phase", "s", "sent", "failed", "P90 TTFT", "P99 TTFT", "P99 E2E", *split, "to primary"):
        table.add_column(col, justify="left" if col == "phase" or col in split else "right")
    for r in reports:
        failed = f"{r.failed}" if not r.failed else f"{r.failed} ({r.failed_before_stream} before stream)"
        cells: tuple[str, ...]
        if configured:
            cells = (
                " / ".join(_pct(configured.get(n, 0.0)) for n in names),
                " / ".join(_pct(r.served.get(n, 0.0)) for n in names),
            )
        else:
            cells = (", ".join(f"{name} {_pct(v)}" for name, v in r.served.items()) or "–",)
        table.add_row(
            r.name,
            f"{r.duration:.1f}",
            str(r.sent),
            failed,
            _s(r.ttft_p90),
            _s(r.ttft_p99),
            _s(r.e2e_p99),
            *cells,
            _pct(r.primary_attempt_share),
        )
    return table


def drill_legend(configured: Mapping[str, float], batch_share: float) -> list[str]:
    """What each derived column of :func:`drill_table` measures, said once under it."""
    split = " / ".join(f"{n} {_pct(v)}" for n, v in configured.items() if v > 0)
    return [
        f"configured: the split the weights give all requests while every route meets its SLO ({split}: the "
        f"interactive {_pct(1 - batch_share)} by weight, batch ({_pct(batch_share)}) to the secondary); "
        "served (phase): who answered the phase's successful requests, counted by intended send time (the "
        "live lines above count the requests completed in their last 5 s, whichever phase sent them); "
        "to primary: requests that reached the primary ÷ requests sent, "
        "from its own log (attempts retried elsewhere included, the monitor's probes not)."
    ]


def drill_verdict(reports: Sequence[PhaseReport]) -> str:
    """One line: did the failover hold (no request failed; the outage cut over)?"""
    by = {r.name: r for r in reports}
    failed, sent = sum(r.failed for r in reports), sum(r.sent for r in reports)
    outage = by.get("outage")
    cut = outage.cutover_s if outage is not None else None
    if failed == 0 and cut is not None:
        return (
            f"verdict: PASS — failover held: 0 of {sent} requests failed, "
            f"the outage cut over in {cut:.2f} s (our users' manual drill: 7 minutes)"
        )
    why = [f"{failed} of {sent} requests failed"] if failed else []
    if cut is None:
        why.append("the outage never cut over")
    return f"verdict: CHECK — {'; '.join(why)} (see the table and lines above)"


def drill_summary(reports: Sequence[PhaseReport]) -> list[str]:
    """The drill's findings, one plain line each (the test parses ``outage cut-over: N s``)."""
    by = {r.name: r for r in reports}
    lines: list[str] = []
    under = f"< {100 * CUTOVER_SHARE:.0f}% of new requests reach the {PRIMARY}"
    if (d := by.get("degraded")) is not None:
        warm = by.get("warm-up")
        before = _pct(warm.primary_attempt_share) if warm else "–"
        cut = f"{d.cutover_s:.2f} s" if d.cutover_s is not None else "not reached in this phase"
        lines.append(
            f"degraded (latency x5): {PRIMARY} share of new requests {before} -> {_pct(d.primary_attempt_share)} "
            f"(last quarter of the phase: {_pct(d.primary_share_end)}); "
            f"P99 TTFT {_s(warm.ttft_p99 if warm else None)} -> {_s(d.ttft_p99)} s; cut-over ({under}): {cut}"
        )
    if (o := by.get("outage")) is not None:
        cut = f"{o.cutover_s:.2f} s" if o.cutover_s is not None else "not reached"
        lines.append(f"outage cut-over: {cut} ({under}, counted from the moment the outage began)")
        lines.append(
            f"outage errors: {o.failed} of {o.sent} requests failed "
            f"({o.failed_before_stream} before streaming started, {o.failed_mid_stream} mid-stream)"
            + (f": {dict(o.errors)}" if o.errors else "")
        )
    if (r := by.get("restored")) is not None:
        back = f"{r.readmitted_s:.2f} s" if r.readmitted_s is not None else "not within the phase"
        half = f"{r.recovered_s:.1f} s" if r.recovered_s is not None else "not within the phase"
        lines.append(
            f"restored: {PRIMARY} serving again after {back}; back to half its warm-up share after {half} "
            "(the breaker's cool-down and its probe trials, then the adaptive weight's slow start)"
        )
    total = sum(r.failed for r in reports)
    lines.append(
        f"errors over the whole drill: {total} of {sum(r.sent for r in reports)} requests "
        f"({sum(r.failed_before_stream for r in reports)} before streaming started). "
        "Our users' manual drill took 7 minutes to cut over."
    )
    return lines
