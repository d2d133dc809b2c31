/* tailgate dashboard: plain JavaScript over the JSON API in docs/dashboard.md; charts by the vendored uPlot.
 * Every value from the store is put into the page with textContent (never innerHTML): provider and model
 * names come from config files and must not become markup. */
(function () {
  "use strict";

  const API = "dashboard/api/";
  const LIVE_EVERY_MS = 2000;
  const DATA_EVERY_MS = 30000;
  const TZ = -new Date().getTimezoneOffset(); // minutes east of UTC, what /heatmap?tz= takes

  const state = {
    meta: null,
    adminKey: null,
    key: null, // the key typed into the form (admin or read-only dashboard key); this page's memory only
    window: "24h",
    metric: "e2e",
    source: "probe",
    lbSort: null, // {key, dir: 1 | -1}
    lbRows: [],
    heat: null,
    plots: [],
  };

  // -- helpers -------------------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  async function api(path, options) {
    options = options || {};
    if (state.key && !(options.headers && options.headers.Authorization)) {
      options.headers = { ...(options.headers || {}), Authorization: "Bearer " + state.key };
    }
    const res = await fetch(API + path, options);
    let body = null;
    try {
      body = await res.json();
    } catch (_) {
      body = null;
    }
    if (!res.ok) {
      const msg = body && body.error ? body.error.message : `${res.status} ${res.statusText}`;
      throw new Error(msg);
    }
    return body;
  }

  function showError(id, err) {
    const box = $(id);
    if (!box) return;
    box.hidden = !err;
    box.textContent = err ? String(err.message || err) : "";
  }

  // An empty section says "no samples" only when the store answered and had none: beside an error (a key the
  // data needs, a store that cannot be read) the error alone says why nothing is shown.
  function showEmpty(id, errorId, empty) {
    $(id).hidden = !empty || !$(errorId).hidden;
  }

  const isNum = (v) => typeof v === "number" && isFinite(v);
  function fmtMs(v) {
    if (!isNum(v)) return "—";
    if (v >= 10000) return (v / 1000).toFixed(1) + " s";
    if (v >= 1000) return (v / 1000).toFixed(2) + " s";
    return v >= 100 ? v.toFixed(0) + " ms" : v.toFixed(1) + " ms";
  }
  const fmtNum = (d) => (v) => (isNum(v) ? v.toFixed(d) : "—");
  const fmtInt = (v) => (isNum(v) ? Math.round(v).toLocaleString("en") : "—");
  const fmtPct = (v) => (isNum(v) ? v.toFixed(1) + "%" : "—");
  const fmtRatio = (v) => (isNum(v) ? v.toFixed(2) + "×" : "—");
  const fmtRate = (v) => (isNum(v) ? (100 * v).toFixed(1) + "%" : "—");
  const modelParam = () => $("model").value;

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
    return q.toString();
  }

  // -- leaderboard ---------------------------------------------------------------------------------

  const LB_COLUMNS = [
    { key: "provider", label: "provider", text: true },
    { key: "model", label: "model", text: true },
    { key: "samples", label: "samples", fmt: fmtInt, group: "probe" },
    { key: "snapshot_tok_s", label: "snapshot tok/s", fmt: fmtNum(1), group: "probe" },
    { key: "tok_s_avg", label: "avg tok/s", fmt: fmtNum(1), group: "probe" },
    { key: "tok_s_min", label: "min tok/s", fmt: fmtNum(1), group: "probe" },
    { key: "tok_s_max", label: "max tok/s", fmt: fmtNum(1), group: "probe" },
    { key: "peak_trough", label: "peak/trough", fmt: fmtRatio, group: "probe" },
    { key: "ttft_p50_ms", label: "TTFT P50", fmt: fmtMs, group: "probe" },
    { key: "ttft_p90_ms", label: "TTFT P90", fmt: fmtMs, group: "probe" },
    { key: "ttft_p99_ms", label: "TTFT P99", fmt: fmtMs, group: "probe" },
    { key: "e2e_p50_ms", label: "E2E P50", fmt: fmtMs, group: "probe" },
    { key: "e2e_p90_ms", label: "E2E P90", fmt: fmtMs, group: "probe" },
    { key: "e2e_p99_ms", label: "E2E P99", fmt: fmtMs, group: "probe" },
    { key: "reliability_pct", label: "reliability", fmt: fmtPct, group: "probe" },
    { key: "accuracy_pct", label: "accuracy", fmt: fmtPct, group: "probe", render: accuracyCell },
    { key: "price_output", label: "price in/out", group: "probe", render: priceCell },
    { key: "max_output_tokens", label: "max output", fmt: fmtInt, group: "probe" },
    { key: "traffic_requests", label: "requests", fmt: fmtInt, group: "traffic" },
    { key: "traffic_tok_s_avg", label: "avg tok/s", fmt: fmtNum(1), group: "traffic" },
    { key: "traffic_ttft_p50_ms", label: "TTFT P50", fmt: fmtMs, group: "traffic" },
    { key: "traffic_ttft_p90_ms", label: "TTFT P90", fmt: fmtMs, group: "traffic" },
    { key: "traffic_ttft_p99_ms", label: "TTFT P99", fmt: fmtMs, group: "traffic" },
    { key: "traffic_e2e_p50_ms", label: "E2E P50", fmt: fmtMs, group: "traffic" },
    { key: "traffic_e2e_p90_ms", label: "E2E P90", fmt: fmtMs, group: "traffic" },
    { key: "traffic_e2e_p99_ms", label: "E2E P99", fmt: fmtMs, group: "traffic" },
    { key: "traffic_reliability_pct", label: "reliability", fmt: fmtPct, group: "traffic" },
    { key: "quality_worst_pct", label: "worst quality signal", group: "traffic", render: qualityCell },
  ];

  // The CLI's `quality` column: the answer-quality signal with the highest rate over the window (of those
  // checked at least RATE_MIN times), with its 95 % Wilson interval: "tool JSON 4.0% [2.5–6.4] n=400".
  const RATE_MIN = 5;
  const SIGNAL_NAMES = {
    tool_args_invalid_json: "tool JSON", tool_args_schema_mismatch: "tool schema", tool_unknown_name: "tool name",
    empty_answer: "empty", content_filtered: "filtered", json_invalid: "json_object",
    reasoning_missing: "no reasoning", canary_wrong: "canary",
  };
  function worstSignal(row) {
    const shown = Object.entries(row.quality || {}).filter(([, q]) => q.checked >= RATE_MIN);
    if (!shown.length) return null;
    shown.sort((a, b) => b[1].pct - a[1].pct || b[1].checked - a[1].checked);
    return { name: shown[0][0], q: shown[0][1], n: Math.max(...shown.map(([, q]) => q.checked)) };
  }
  function qualityCell(row) {
    if (!row.quality || !Object.keys(row.quality).length) return "—";
    const worst = worstSignal(row);
    if (!worst) return `n<${RATE_MIN}`;
    if (!worst.q.hits) return `ok n=${worst.n}`;
    const f = (v) => v.toFixed(1);
    const name = SIGNAL_NAMES[worst.name] || worst.name;
    return `${name} ${f(worst.q.pct)}% [${f(worst.q.low_pct)}–${f(worst.q.high_pct)}] n=${worst.q.checked}`;
  }

  // The accuracy with its 95 % Wilson interval and task count, as the CLI's leaderboard shows it
  // ("88% [72–95] n=32"); withheld (the "n<K" note) below the same minimum.
  function accuracyCell(row) {
    const why = row.insufficient && row.insufficient.accuracy_pct;
    if (why) return why;
    if (!isNum(row.accuracy_pct)) return "—";
    const pct = (v) => Math.round(v);
    const interval = isNum(row.accuracy_low_pct) && isNum(row.accuracy_high_pct)
      ? ` [${pct(row.accuracy_low_pct)}–${pct(row.accuracy_high_pct)}]` : "";
    return `${pct(row.accuracy_pct)}%${interval} n=${row.accuracy_n}`;
  }

  function priceCell(row) {
    if (!isNum(row.price_input) && !isNum(row.price_output)) return "—";
    const cur = row.currency ? " " + row.currency : "";
    return `${fmtNum(2)(row.price_input)} / ${fmtNum(2)(row.price_output)}${cur}`;
  }

  function cell(col, row, tag) {
    const v = row[col.key];
    const why = row.insufficient && row.insufficient[col.key];
    const text = col.render ? col.render(row) : col.text ? String(v ?? "—") : why ? why : col.fmt(v);
    const classes = [];
    if (col.text) classes.push("text");
    if (col.group === "traffic") classes.push("traffic");
    if (!col.text && !col.render && !isNum(v)) classes.push("na");
    return el(tag || "td", {
      class: classes.join(" ") || null,
      text,
      title: why ? `too few samples (${why}) for this number to mean anything` : null,
    });
  }

  function renderLeaderboard() {
    const table = $("leaderboard");
    table.replaceChildren();
    const rows = state.lbRows.slice();
    for (const r of rows) {
      const worst = worstSignal(r);
      r.quality_worst_pct = worst ? worst.q.pct : null; // what the quality column sorts by
    }
    showEmpty("leaderboard-empty", "leaderboard-error", rows.length === 0);
    if (!rows.length) return;
    const s = state.lbSort;
    if (s) {
      rows.sort((a, b) => {
        const x = a[s.key], y = b[s.key];
        const xn = x === null || x === undefined, yn = y === null || y === undefined;
        if (xn || yn) return xn === yn ? 0 : xn ? 1 : -1; // missing values always last
        if (typeof x === "number" && typeof y === "number") return s.dir * (x - y);
        return s.dir * String(x).localeCompare(String(y));
      });
    }
    const probeN = LB_COLUMNS.filter((c) => c.group === "probe").length;
    const trafficN = LB_COLUMNS.filter((c) => c.group === "traffic").length;
    const thead = el(
      "thead",
      {},
      el(
        "tr",
        { class: "group" },
        el("th", { colspan: 2 }),
        el("th", { colspan: probeN, text: "probe (monitor)" }),
        el("th", { colspan: trafficN, class: "traffic", text: "traffic (gateway)" }),
      ),
      el(
        "tr",
        {},
        ...LB_COLUMNS.map((c) =>
          el("th", {
            class: [c.text ? "text" : "", c.group === "traffic" ? "traffic" : ""].join(" ").trim() || null,
            text: c.label,
            "data-key": c.key,
            "aria-sort": s && s.key === c.key ? (s.dir > 0 ? "ascending" : "descending") : null,
            onclick: () => {
              const same = state.lbSort && state.lbSort.key === c.key;
              state.lbSort = { key: c.key, dir: same ? -state.lbSort.dir : c.text || /ms$/.test(c.key) ? 1 : -1 };
              renderLeaderboard();
            },
          }),
        ),
      ),
    );
    const tbody = el("tbody", {}, ...rows.map((r) => el("tr", {}, ...LB_COLUMNS.map((c) => cell(c, r)))));
    table.append(thead, tbody);
  }

  async function loadLeaderboard() {
    try {
      const body = await api("leaderboard?" + query({ window: $("lb-window").value, model: modelParam() }));
      state.lbRows = body.rows || [];
      showError("leaderboard-error", null);
    } catch (err) {
      state.lbRows = [];
      showError("leaderboard-error", err);
    }
    renderLeaderboard();
  }

  // -- probe vs traffic ----------------------------------------------------------------------------

  let compareSeq = 0;
  async function loadCompare() {
    const seq = ++compareSeq; // a newer request (window switch) wins over a slower older one
    const table = $("compare");
    let rows = [];
    try {
      rows = (await api("compare?" + query({ window: state.window, model: modelParam() }))).rows || [];
    } catch (err) {
      showError("charts-error", err);
    }
    if (seq !== compareSeq) return;
    table.replaceChildren();
    showEmpty("compare-empty", "charts-error", rows.length === 0);
    if (!rows.length) return;
    const metrics = [
      ["count", "n", fmtInt],
      ["ttft_p50", "TTFT P50", fmtMs],
      ["ttft_p90", "TTFT P90", fmtMs],
      ["ttft_p99", "TTFT P99", fmtMs],
      ["e2e_p50", "E2E P50", fmtMs],
      ["e2e_p90", "E2E P90", fmtMs],
      ["e2e_p99", "E2E P99", fmtMs],
      ["tok_s", "tok/s", fmtNum(1)],
      ["error_rate", "errors", fmtRate],
    ];
    const head = el(
      "thead",
      {},
      el(
        "tr",
        { class: "group" },
        el("th", { colspan: 2 }),
        el("th", { colspan: metrics.length, text: "probe (monitor)" }),
        el("th", { colspan: metrics.length, class: "traffic", text: "traffic (gateway)" }),
      ),
      el(
        "tr",
        {},
        el("th", { class: "text", text: "provider" }),
        el("th", { class: "text", text: "model" }),
        ...metrics.map((m) => el("th", { text: m[1] })),
        ...metrics.map((m) => el("th", { class: "traffic", text: m[1] })),
      ),
    );
    const body = el(
      "tbody",
      {},
      ...rows.map((r) =>
        el(
          "tr",
          {},
          el("td", { class: "text", text: r.provider }),
          el("td", { class: "text", text: r.model }),
          ...metrics.map((m) => el("td", { class: isNum(r.probe[m[0]]) ? null : "na", text: m[2](r.probe[m[0]]) })),
          ...metrics.map((m) =>
            el("td", { class: isNum(r.traffic[m[0]]) ? "traffic" : "traffic na", text: m[2](r.traffic[m[0]]) }),
          ),
        ),
      ),
    );
    table.append(head, body);
  }

  // -- time series ---------------------------------------------------------------------------------

  function destroyPlots() {
    for (const p of state.plots) p.destroy();
    state.plots = [];
  }

  function hasData(columns) {
    return columns.some((col) => col.some(isNum));
  }

  function pointsOf(t, columns) {
    // Timestamps at which at least one series has a number: what a chart would draw.
    return t.filter((_, i) => columns.some((col) => isNum(col[i]))).length;
  }

  function makePlot(container, title, t, series, yfmt) {
    const box = el("div", { class: "chart" });
    container.append(el("h4", { text: title }), box);
    if (!hasData(series.map((s) => s.values))) {
      box.append(el("p", { class: "empty", text: "no data in this window" }));
      return;
    }
    if (pointsOf(t, series.map((s) => s.values)) < 2) {
      // One point makes no line, and uPlot's axis for a single value draws clipped labels ("00000.0").
      box.append(el("p", { class: "empty collecting", text: "collecting data (one point so far)" }));
      return;
    }
    const width = Math.max(300, box.clientWidth || container.clientWidth || 420);
    const opts = {
      width,
      height: 180,
      scales: { x: { time: true } },
      legend: { live: true },
      series: [
        { label: "time" },
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: 1.5,
          dash: s.dash || undefined,
          // Probes may come less often than a bucket is wide (24 h: 15 min buckets): join the measured
          // buckets instead of drawing dots; an outage shows in the error-rate chart, not as a gap.
          spanGaps: true,
          value: (u, v) => yfmt(v),
        })),
      ],
      axes: [{}, { size: 64, values: (u, vals) => vals.map(yfmt) }],
    };
    const plot = new uPlot(opts, [t, ...series.map((s) => s.values)], box);
    plot.root.dataset.chart = title;
    state.plots.push(plot);
  }

  // Leading buckets before the pair's first data are left out, so a demo a minute old fills its charts instead
  // of drawing one minute at the right edge of 15 empty ones (later gaps stay: they are the data).
  function trimLeading(data) {
    const n = data.t.length;
    let i = 0;
    while (i < n - 1 && !data.probe.count[i] && !data.traffic.count[i]) i++;
    if (i === 0) return data;
    const cut = (cols) => Object.fromEntries(Object.entries(cols).map(([k, v]) => [k, v.slice(i)]));
    return { ...data, t: data.t.slice(i), probe: cut(data.probe), traffic: cut(data.traffic) };
  }

  function chartCard(holder, data) {
    data = trimLeading(data);
    // In the page before the charts are made, so that they can take its width.
    const card = el("div", { class: "chart-card", "data-provider": data.provider });
    holder.append(card);
    const m = state.metric;
    const label = m === "e2e" ? "E2E" : "TTFT";
    card.append(el("h4", { text: `${data.provider} · ${data.model || "all models"}` }));
    const pr = data.probe, tr = data.traffic;
    const shades = ["#93c5fd", "#2563eb", "#1e3a8a"];
    const tshades = ["#fcd34d", "#d97706", "#78350f"];
    makePlot(
      card,
      `${label} latency P50 / P90 / P99`,
      data.t,
      [
        ...[50, 90, 99].map((q, i) => ({ label: `probe P${q}`, color: shades[i], values: pr[`${m}_p${q}`] })),
        ...[50, 90, 99].map((q, i) => ({
          label: `traffic P${q}`,
          color: tshades[i],
          dash: [6, 4],
          values: tr[`${m}_p${q}`],
        })),
      ],
      fmtMs,
    );
    makePlot(
      card,
      "tok/s per request (mean)",
      data.t,
      [
        { label: "probe", color: "#2563eb", values: pr.tok_s },
        { label: "traffic", color: "#d97706", dash: [6, 4], values: tr.tok_s },
      ],
      fmtNum(1),
    );
    makePlot(
      card,
      "error rate",
      data.t,
      [
        { label: "probe", color: "#dc2626", values: pr.error_rate },
        { label: "traffic", color: "#f97316", dash: [6, 4], values: tr.error_rate },
      ],
      fmtRate,
    );
  }

  let chartSeq = 0;
  async function loadCharts() {
    const seq = ++chartSeq;
    const window_ = state.window;
    const holder = $("charts");
    try {
      const cat = await api("catalog?" + query({ window: window_ }));
      const model = modelParam();
      const pairs = (cat.pairs || []).filter((p) => !model || p.model === model);
      const all = await Promise.all(
        pairs.map((p) =>
          api("series?" + query({ provider: p.provider, model: p.model, window: window_ })),
        ),
      );
      if (seq !== chartSeq) return;
      destroyPlots();
      holder.replaceChildren();
      showEmpty("charts-empty", "charts-error", all.length === 0);
      for (const data of all) chartCard(holder, data);
      showError("charts-error", null);
    } catch (err) {
      if (seq !== chartSeq) return;
      destroyPlots();
      holder.replaceChildren();
      showError("charts-error", err);
      showEmpty("charts-empty", "charts-error", false);
    }
    document.body.dataset.charts = window_; // which window the charts on screen show (tests wait on it)
  }

  // -- heatmap -------------------------------------------------------------------------------------

  function heatColor(v, lo, hi) {
    // green (fast) → red (slow) on a log scale: a 2× slower hour should look as far as any other 2×.
    const f = hi > lo ? (Math.log(v) - Math.log(lo)) / (Math.log(hi) - Math.log(lo)) : 0;
    return `hsl(${Math.round(120 * (1 - f))}, 70%, ${Math.round(82 - 14 * f)}%)`;
  }

  function renderHeatmap() {
    const table = $("heatmap");
    table.replaceChildren();
    const h = state.heat;
    const values = h ? h[state.source] || {} : {};
    const counts = h ? h[`${state.source}_n`] || {} : {};
    const providers = Object.keys(values).sort();
    showEmpty("heatmap-empty", "heatmap-error", providers.length === 0);
    if (!providers.length) return;
    const all = providers.flatMap((p) => values[p].filter((v) => isNum(v) && v > 0));
    const lo = Math.min(...all), hi = Math.max(...all);
    const head = el(
      "thead",
      {},
      el("tr", {}, el("th", { class: "row", text: "provider \\ hour" }), ...h.hours.map((x) => el("th", { text: String(x).padStart(2, "0") }))),
    );
    const body = el(
      "tbody",
      {},
      ...providers.map((p) =>
        el(
          "tr",
          {},
          el("th", { class: "row", text: p }),
          ...values[p].map((v, hour) => {
            const n = counts[p] ? counts[p][hour] : 0;
            const hh = String(hour).padStart(2, "0");
            if (!isNum(v)) return el("td", { class: "nodata", text: "·", title: `${p} ${hh}:00 — no data` });
            const td = el("td", {
              class: "cell",
              text: fmtMs(v).replace(" ms", ""),
              title: `${p} ${hh}:00–${hh}:59 — P90 E2E ${fmtMs(v)} over ${n} ${state.source === "probe" ? "probes" : "requests"}`,
            });
            td.style.background = heatColor(Math.max(v, 1e-3), Math.max(lo, 1e-3), Math.max(hi, 1e-3));
            return td;
          }),
        ),
      ),
    );
    table.append(head, body);
  }

  async function loadHeatmap() {
    try {
      state.heat = await api("heatmap?" + query({ window: "7d", tz: TZ, model: modelParam() }));
      showError("heatmap-error", null);
    } catch (err) {
      state.heat = null;
      showError("heatmap-error", err);
    }
    renderHeatmap();
  }

  // -- live state and controls ---------------------------------------------------------------------

  function weightsOf(live, provider) {
    // A drained provider takes no new request whatever its policy weight: count it as 0 in every share.
    const drained = new Set((live.providers || []).filter((p) => p.state === "drained").map((p) => p.name));
    const out = [];
    for (const [alias, routes] of Object.entries(live.aliases || {})) {
      const mine = routes.filter((r) => r.provider === provider);
      if (!mine.length) continue;
      const explained = (live.routing && live.routing[alias] && live.routing[alias].weights) || null;
      const eff = (r) =>
        drained.has(r.provider) ? 0 : explained && explained[r.provider] ? explained[r.provider].effective_weight : r.weight;
      const total = routes.reduce((s, r) => s + (isNum(eff(r)) ? eff(r) : 0), 0);
      for (const r of mine) {
        const e = eff(r);
        const share = total > 0 && isNum(e) ? ` (${((100 * e) / total).toFixed(0)}%)` : "";
        const reason = drained.has(r.provider)
          ? "drained"
          : explained && explained[r.provider]
            ? explained[r.provider].reason
            : "static weight";
        out.push({
          text: `${alias}: ${isNum(e) ? +e.toFixed(2) : "—"}${share}`,
          title: `configured ${r.weight}; ${reason}`,
          // the router's promise in force for this route (docs/routing.md), in words
          why: `${alias}: ${reason}`,
        });
      }
    }
    return out;
  }

  async function control(name, action) {
    try {
      await api(`providers/${encodeURIComponent(name)}/${action}`, {
        method: "POST",
        headers: { Authorization: "Bearer " + state.adminKey },
      });
      showError("live-error", null);
    } catch (err) {
      showError("live-error", err);
    }
    await loadLive();
  }

  // The prompt cache's hit rate over the window: per route (upstream model) when the provider serves more than one,
  // else the provider's; the title gives the token counts, per route.
  function cacheCell(p) {
    const routes = Object.entries(p.cache_routes || {});
    const counts = (c) => `${c.cached_tokens} of ${c.prompt_tokens} prompt tokens cached`;
    return {
      text: routes.length > 1
        ? routes.map(([model, c]) => `${model} ${fmtRate(c.hit_rate)}`).join(", ")
        : fmtRate(p.cache && p.cache.hit_rate),
      title: p.cache && p.cache.prompt_tokens
        ? [`${counts(p.cache)} (window)`, ...routes.map(([model, c]) => `${model}: ${counts(c)}`)].join("\n")
        : "the provider reported no cached tokens in the window",
    };
  }

  function renderLive(live) {
    const table = $("live");
    const head = el(
      "thead",
      {},
      el(
        "tr",
        {},
        ...["provider", "state", "effective weight", "routing: promise in force", "breaker", "in flight", "attempts", "error rate", "TTFT P90", "E2E P90", "cache hit", "controls"].map(
          (t, i) => el("th", { class: i < 5 || i === 11 ? "text" : null, text: t }),
        ),
      ),
    );
    const unlocked = !!state.adminKey;
    const rows = (live.providers || []).map((p) => {
      const breaker = (p.breaker && p.breaker.state) || "—";
      const weights = weightsOf(live, p.name);
      const drained = p.state === "drained";
      const btn = el("button", {
        type: "button",
        class: "act",
        "data-provider": p.name,
        "data-action": drained ? "enable" : "drain",
        disabled: !unlocked,
        title: unlocked ? null : "enter the admin key above to enable controls",
        text: drained ? "enable" : "drain",
        onclick: () => control(p.name, drained ? "enable" : "drain"),
      });
      return el(
        "tr",
        { "data-provider": p.name },
        el("td", { class: "text", text: p.name }),
        el("td", { class: `text state-${p.state}`, text: p.state + (p.paused_for_s > 0 ? ` ${p.paused_for_s}s` : "") }),
        el("td", { class: "text" }, ...weights.map((w, i) => el("span", { title: w.title, text: (i ? ", " : "") + w.text }))),
        el("td", { class: "text why" }, ...weights.map((w, i) => el("span", { text: (i ? "; " : "") + w.why }))),
        el("td", { class: `text state-${breaker}`, text: breaker }),
        el("td", { text: fmtInt(p.in_flight) }),
        el("td", { text: fmtInt(p.attempts) }),
        el("td", { text: fmtRate(p.error_rate) }),
        el("td", { text: fmtMs(p.ttft_ms && p.ttft_ms.p90) }),
        el("td", { text: fmtMs(p.e2e_ms && p.e2e_ms.p90) }),
        el("td", cacheCell(p)),
        el("td", { class: "text" }, btn),
      );
    });
    table.replaceChildren(head, el("tbody", {}, ...rows));
    renderFleet(live.fleet);
    const list = $("cutovers");
    const cuts = live.cutovers || [];
    list.replaceChildren(
      ...(cuts.length
        ? cuts.map((c) =>
            el("li", {
              text: `${isNum(c.ago_s) ? Math.round(c.ago_s) + " s ago" : "?"} · ${c.provider}: ${c.from} → ${c.to}` + (c.reason ? ` (${c.reason})` : ""),
            }),
          )
        : [el("li", { class: "empty", text: "none since this gateway started" })]),
    );
  }

  function renderFleet(fleet) {
    // Behind a load balancer each refresh may reach another replica: say which one answered, show every
    // replica, and read the windows routing reads (fleet-merged on Redis).
    if (!fleet) return;
    const replicas = fleet.replicas || [];
    $("live-scope").textContent = fleet.shared
      ? `answered by replica ${fleet.replica} · a fleet of ${replicas.length} · windows merged across the fleet · refreshed every 2 s`
      : `this gateway process (replica ${fleet.replica}) · last 60 s · refreshed every 2 s`;
    $("windows-scope").textContent =
      fleet.windows_scope === "fleet" ? "last 60 s, every replica's samples merged" : "last 60 s, this process's samples";
    const now = Date.now() / 1000;
    const cols = ["replica", "", "seen", "in flight", "providers", "breakers", "config"];
    const head = el("thead", {}, el("tr", {}, ...cols.map((t, i) => el("th", { class: i === 3 ? null : "text", text: t }))));
    const rows = replicas.map((r) => {
      const states = Object.entries(r.providers || {}).map(([n, s]) => `${n} ${s}`).join(", ");
      const open = Object.entries(r.breakers || {}).filter(([, s]) => s !== "closed").map(([n, s]) => `${n} ${s}`);
      const inFlight = Object.values(r.in_flight || {}).reduce((s, v) => s + (isNum(v) ? v : 0), 0);
      const age = isNum(r.at) ? Math.max(0, now - r.at) : null;
      return el(
        "tr",
        { "data-replica": r.replica, class: r.answering ? "answering" : null },
        el("td", { class: "text", text: r.replica }),
        el("td", { class: "text", text: r.answering ? "answered this refresh" : "" }),
        el("td", { class: "text", text: r.answering ? "now" : isNum(age) ? `${age.toFixed(1)} s ago` : "—" }),
        el("td", { text: fmtInt(inFlight) }),
        el("td", { class: "text", text: states || "—" }),
        el("td", { class: "text", text: open.length ? open.join(", ") : "all closed" }),
        el("td", { class: "text", text: String(r.config || "—").slice(0, 12) }),
      );
    });
    $("replicas").replaceChildren(head, el("tbody", {}, ...rows));
    const whead = el(
      "thead",
      {},
      el("tr", {}, ...["provider", "model", "n", "TTFT P50", "TTFT P90", "E2E P50", "E2E P90", "E2E P99"].map(
        (t, i) => el("th", { class: i < 2 ? "text" : null, text: t }),
      )),
    );
    const wrows = (fleet.windows || []).map((w) => {
      const t = w.ttft_ms || {}, e = w.e2e_ms || {};
      return el(
        "tr",
        { "data-provider": w.provider },
        el("td", { class: "text", text: w.provider }),
        el("td", { class: "text", text: w.model }),
        el("td", { text: fmtInt(e.count) }),
        el("td", { text: fmtMs(t.p50) }),
        el("td", { text: fmtMs(t.p90) }),
        el("td", { text: fmtMs(e.p50) }),
        el("td", { text: fmtMs(e.p90) }),
        el("td", { text: fmtMs(e.p99) }),
      );
    });
    $("windows").replaceChildren(whead, el("tbody", {}, ...wrows));
  }

  let liveBusy = false;
  async function loadLive() {
    if (!state.meta || !state.meta.live || liveBusy) return;
    liveBusy = true;
    try {
      renderLive(await api("live"));
      showError("live-error", null);
    } catch (err) {
      showError("live-error", err);
    } finally {
      liveBusy = false;
    }
  }

  async function unlock(ev) {
    ev.preventDefault();
    const key = $("admin-key").value.trim();
    const status = $("admin-status");
    if (state.meta && state.meta.auth_required) {
      try {
        const who = await api("auth", { headers: { Authorization: "Bearer " + key } });
        state.key = key;
        state.adminKey = who.admin ? key : null;
        status.textContent = who.admin ? "controls unlocked" : "read-only key accepted";
      } catch (err) {
        state.key = state.adminKey = null;
        status.textContent = String(err.message || err);
      }
      await pickWindow();
      await loadData();
      await loadLive();
      return;
    }
    if (!state.meta || !state.meta.controls) {
      status.textContent = state.meta && state.meta.live ? "controls are off: no admin_key in the config" : "no controls without a gateway";
      return;
    }
    if (!key) {
      state.adminKey = null;
      status.textContent = "read-only";
      await loadLive();
      return;
    }
    try {
      const who = await api("auth", { headers: { Authorization: "Bearer " + key } });
      if (!who.admin) throw new Error("that is not the admin key: controls stay off");
      state.adminKey = key; // kept in this page's memory only, never stored
      status.textContent = "controls unlocked";
    } catch (err) {
      state.adminKey = null;
      status.textContent = String(err.message || err);
    }
    await loadLive();
  }

  // -- wiring --------------------------------------------------------------------------------------

  async function loadModels() {
    try {
      const cat = await api("catalog?window=7d");
      const select = $("model");
      const current = select.value;
      const models = [...new Set((cat.pairs || []).map((p) => p.model))].sort();
      select.replaceChildren(el("option", { value: "", text: "all models" }), ...models.map((m) => el("option", { value: m, text: m })));
      if (models.includes(current)) select.value = current;
    } catch (_) {
      /* the sections show their own errors */
    }
  }

  async function loadData() {
    await loadModels();
    await Promise.all([loadLeaderboard(), loadCompare(), loadCharts(), loadHeatmap()]);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  }

  function switchButtons(id, attr, onPick) {
    const box = $(id);
    box.addEventListener("click", (ev) => {
      const b = ev.target.closest("button");
      if (!b) return;
      for (const x of box.querySelectorAll("button")) x.classList.toggle("on", x === b);
      onPick(b.dataset[attr]);
    });
  }

  // A store younger than 15 minutes (a fresh demo) opens on the 15 min window, whose 10 s buckets draw lines
  // from the first 20 s; one with older data opens on 24 h. A failed check keeps 24 h (the sections say why).
  async function pickWindow() {
    if (state.windowPicked) return;
    try {
      const older = await api("catalog?" + query({ window: "7d", now: String(state.meta.now - 900) }));
      const recent = await api("catalog?" + query({ window: "15m" }));
      if ((older.pairs || []).length || !(recent.pairs || []).length) return;
    } catch (_) {
      return;
    }
    state.window = "15m";
    for (const b of $("window-switch").querySelectorAll("button")) b.classList.toggle("on", b.dataset.window === "15m");
  }

  async function main() {
    try {
      state.meta = await api("meta");
    } catch (err) {
      $("mode").textContent = "store unavailable";
      showError("leaderboard-error", err);
      return;
    }
    $("mode").textContent = state.meta.mode === "gateway" ? "gateway" : "monitor only";
    $("live-section").hidden = !state.meta.live;
    $("admin-form").hidden = !state.meta.controls && !state.meta.live && !state.meta.auth_required;
    // The key box says what a key does here, truthfully: with gateway keys (or a dashboard_key) the data itself
    // needs one; otherwise the data is open and the admin key only unlocks the controls.
    const keyBox = $("admin-key"), keyButton = $("admin-form").querySelector("button[type=submit]");
    if (state.meta.auth_required) {
      $("admin-status").textContent = "this gateway shows its data with a key: enter the admin key or the dashboard key";
      keyBox.placeholder = "admin or dashboard key: shows the data";
      keyButton.textContent = "show data";
    } else if (state.meta.controls) {
      keyBox.placeholder = "admin key: enables drain / enable";
    } else {
      keyBox.placeholder = state.meta.live ? "controls off: no admin_key in the config" : "no controls without a gateway";
      keyBox.disabled = keyButton.disabled = true;
    }
    await pickWindow();
    $("admin-form").addEventListener("submit", unlock);
    $("lb-window").addEventListener("change", loadLeaderboard);
    $("model").addEventListener("change", loadData);
    $("metric").addEventListener("change", (ev) => {
      state.metric = ev.target.value;
      loadCharts();
    });
    switchButtons("window-switch", "window", (w) => {
      state.window = w;
      state.windowPicked = true; // the reader's choice: never replaced by pickWindow
      loadCompare();
      loadCharts();
    });
    switchButtons("source-switch", "source", (s) => {
      state.source = s;
      renderHeatmap();
    });
    window.addEventListener("resize", () => {
      for (const p of state.plots) {
        const w = p.root.parentElement.clientWidth;
        if (w > 0) p.setSize({ width: w, height: 180 });
      }
    });
    if (state.meta.live) {
      await loadLive();
      setInterval(loadLive, LIVE_EVERY_MS);
    }
    await loadData();
    setInterval(loadData, DATA_EVERY_MS);
  }

  main();
})();
