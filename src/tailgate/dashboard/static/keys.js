// Keys & spend: read-only tables from /dashboard/api/keys, /dashboard/api/usage and /dashboard/api/batches. The key typed into the
// header (the admin key or the read-only dashboard key) is sent with every call and kept for this tab's
// session only (sessionStorage: gone when the tab closes); with the admin key the page also creates and
// revokes keys through the gateway's /admin/keys. Every value reaches the page through textContent.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const STORED = "tailgate.dashboard.key";
  let key = sessionStorage.getItem(STORED) || null;
  let admin = false; // the gateway said this key is the admin key (/dashboard/api/auth)
  let currency = null;

  const dash = "–";
  const number = (v, digits) =>
    v === null || v === undefined ? dash
      : digits === undefined ? Number(v).toLocaleString("en-US")
        : Number(v).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  const money = (v) => (v === null || v === undefined ? dash : number(v, 4));

  function authHeaders(extra) {
    return key ? { ...(extra || {}), Authorization: "Bearer " + key } : { ...(extra || {}) };
  }

  async function call(path, options) {
    const resp = await fetch(path, { ...(options || {}), headers: authHeaders((options || {}).headers) });
    let data = null;
    try { data = await resp.json(); } catch (_) { data = null; }
    if (!resp.ok) {
      const err = new Error((data && data.error && data.error.message) || resp.status + " " + resp.statusText);
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  // What to tell the reader when a call was refused: a missing key, a wrong one, or the gateway's own words.
  function explain(e) {
    if (e.status === 401 && !key) return "this gateway shows its keys and spend with a key: enter the admin key or the read-only dashboard key above";
    if (e.status === 401) return "the key entered is not the admin key or the dashboard key (" + e.message + ")";
    return e.message;
  }

  // columns: [{title, cls}]; cls "text" aligns left, numbers stay right (tabular figures).
  function table(el, columns, rows, foot) {
    el.textContent = "";
    const head = el.createTHead().insertRow();
    columns.forEach((c) => {
      const th = document.createElement("th");
      th.textContent = c.title;
      if (c.cls) th.className = c.cls;
      head.appendChild(th);
    });
    const body = el.createTBody();
    const fill = (tr, r) => r.forEach((v, i) => {
      const td = tr.insertCell();
      if (columns[i] && columns[i].cls) td.className = columns[i].cls;
      if (v instanceof HTMLElement) td.appendChild(v);
      else td.textContent = v;
    });
    rows.forEach((r) => fill(body.insertRow(), r));
    if (foot) {
      const tr = el.createTFoot().insertRow();
      tr.className = "total";
      fill(tr, foot);
    }
  }

  function limits(k) {
    const out = [];
    [["rpm", "rpm"], ["tpm", "tpm"], ["max_concurrency", "conc"]]
      .forEach(([f, label]) => { if (k[f] !== null && k[f] !== undefined) out.push(label + " " + number(k[f])); });
    return out.join(", ") || dash;
  }

  // Each budget of the key: what its period has used and what is left (never below 0).
  function budgets(k) {
    const box = document.createElement("span");
    const parts = [
      ["tokens_per_day", "tokens/day", k.spend.day.tokens, false],
      ["tokens_per_month", "tokens/month", k.spend.month.tokens, false],
      ["cost_per_day", "cost/day", k.spend.day.cost, true],
      ["cost_per_month", "cost/month", k.spend.month.cost, true],
    ].filter(([f]) => k[f] !== null && k[f] !== undefined);
    if (!parts.length) { box.textContent = dash; return box; }
    parts.forEach(([f, label, used, isMoney], i) => {
      const span = document.createElement("span");
      span.className = "budget";
      span.dataset.budget = f;
      const fmt = isMoney ? money : number;
      const left = Math.max(0, k[f] - used);
      span.textContent = label + ": " + fmt(used) + " used of " + fmt(k[f]) + ", " + fmt(left) + " left" + (isMoney && currency ? " " + currency : "");
      if (i) box.appendChild(document.createElement("br"));
      box.appendChild(span);
    });
    return box;
  }

  async function manage(method, path, body) {
    return call("../admin/keys" + path, {
      method,
      headers: { "Content-Type": "application/json" },
      body: body ? JSON.stringify(body) : undefined,
    });
  }

  async function loadKeys() {
    const err = $("keys-error");
    try {
      const data = await call("api/keys");
      err.hidden = true;
      currency = data.currency || null;
      $("currency-note").textContent = currency ? " · costs in " + currency : "";
      admin = !!data.admin;
      $("create-form").hidden = !admin;
      const cur = currency ? " (" + currency + ")" : "";
      const columns = [
        { title: "id", cls: "text" }, { title: "state", cls: "text" }, { title: "models", cls: "text" },
        { title: "limits", cls: "text" }, { title: "requests today" }, { title: "refused today" },
        { title: "tokens today" }, { title: "cost today" + cur }, { title: "cost month" + cur },
        { title: "budgets", cls: "text" }, { title: "team", cls: "text" }, { title: "", cls: "text" },
      ];
      table($("keys"), columns, data.keys.map((k) => {
        let action = "";
        if (admin && k.state !== "revoked") {
          action = document.createElement("button");
          action.textContent = "revoke";
          action.addEventListener("click", async () => {
            if (!confirm("Revoke " + k.id + "? Every replica refuses it within a second.")) return;
            try { await manage("DELETE", "/" + encodeURIComponent(k.id)); } catch (e) { alert(e.message); }
            refresh();
          });
        }
        return [k.id, k.state, k.models ? k.models.join(", ") : "all", limits(k), number(k.spend.day.requests),
          number(k.spend.day.refused || 0), number(k.spend.day.tokens), money(k.spend.day.cost),
          money(k.spend.month.cost), budgets(k), (k.metadata && k.metadata.team) || dash, action];
      }));
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      $("keys").textContent = "";
      err.textContent = "cannot load keys: " + explain(e);
      err.hidden = false;
    }
  }

  async function loadUsage() {
    const err = $("usage-error");
    const by = $("usage-by").value;
    try {
      const data = await call("api/usage?by=" + encodeURIComponent(by) + "&since=" + encodeURIComponent($("usage-since").value));
      err.hidden = true;
      const cur = data.currency ? " (" + data.currency + ")" : "";
      const sum = (f) => data.groups.reduce((a, g) => a + (g[f] || 0), 0);
      const columns = [{ title: by, cls: "text" }, { title: "requests" }, { title: "errors" }, { title: "refused" },
        { title: "input tokens" }, { title: "output tokens" }, { title: "cost" + cur }];
      table($("usage"), columns,
        data.groups.map((g) => [g[by], number(g.requests), number(g.errors), number(g.refused || 0),
          number(g.input_tokens), number(g.output_tokens), money(g.cost)]),
        data.groups.length ? ["total", number(sum("requests")), number(sum("errors")), number(sum("refused")),
          number(sum("input_tokens")), number(sum("output_tokens")), money(sum("cost"))] : null);
    } catch (e) {
      $("usage").textContent = "";
      err.textContent = "cannot load spend: " + explain(e);
      err.hidden = false;
    }
  }

  // One batch's price tier mix: "provider-batch · batch: 12 lines, 0.0012" per lane and tier, dearest first.
  function tierMix(b) {
    const box = document.createElement("span");
    if (!b.tiers.length) { box.textContent = dash; return box; }
    b.tiers.forEach((t, i) => {
      const span = document.createElement("span");
      span.className = "tier";
      span.dataset.lane = t.lane;
      span.textContent = t.lane + (t.price_tier ? " · " + t.price_tier : "") + ": " + number(t.lines) + " lines, " + money(t.cost);
      if (i) box.appendChild(document.createElement("br"));
      box.appendChild(span);
    });
    return box;
  }

  async function loadBatches() {
    const err = $("batches-error");
    try {
      const data = await call("api/batches");
      err.hidden = true;
      const cur = data.currency ? " (" + data.currency + ")" : "";
      const columns = [{ title: "batch", cls: "text" }, { title: "key", cls: "text" }, { title: "status", cls: "text" },
        { title: "done" }, { title: "failed" }, { title: "total" }, { title: "cost so far" + cur },
        { title: "lanes and price tiers", cls: "text" }, { title: "created", cls: "text" }];
      table($("batches"), columns, data.batches.map((b) => [b.id, b.key_id || dash, b.status,
        number(b.request_counts.completed), number(b.request_counts.failed), number(b.request_counts.total),
        money(b.cost), tierMix(b), new Date(b.created_at * 1000).toLocaleString()]));
    } catch (e) {
      $("batches").textContent = "";
      err.textContent = "cannot load batches: " + explain(e);
      err.hidden = false;
    }
  }

  async function refresh() {
    await Promise.all([loadKeys(), loadUsage(), loadBatches()]);
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  }

  // Ask the gateway what this key may do; forget a key it refuses.
  async function useKey(candidate) {
    const status = $("admin-status");
    key = candidate || null;
    admin = false;
    if (!key) {
      sessionStorage.removeItem(STORED);
      status.textContent = "";
    } else {
      try {
        const who = await call("api/auth");
        sessionStorage.setItem(STORED, key);
        admin = !!who.admin;
        status.textContent = admin ? "admin key: create and revoke unlocked" : "read-only dashboard key accepted";
      } catch (e) {
        status.textContent = e.status === 401 ? "wrong key: it is neither the admin key nor the dashboard key" : e.message;
        key = null;
        sessionStorage.removeItem(STORED);
      }
    }
    $("forget-key").hidden = !key;
    $("create-form").hidden = !admin;
    await refresh();
  }

  $("admin-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    useKey($("admin-key").value.trim());
  });
  $("forget-key").addEventListener("click", () => {
    $("admin-key").value = "";
    useKey(null);
  });

  $("create-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { id: $("new-id").value.trim() };
    if ($("new-tpm").value) body.tpm = Number($("new-tpm").value);
    if ($("new-tokens-day").value) body.tokens_per_day = Number($("new-tokens-day").value);
    const models = $("new-models").value.trim();
    if (models && models !== "all") body.models = models.split(",").map((m) => m.trim());
    try {
      const made = await manage("POST", "", body);
      $("new-secret").textContent = "key (shown once): " + made.key + " · models: " + (made.models ? made.models.join(", ") : "all");
    } catch (e) {
      $("new-secret").textContent = e.message;
    }
    refresh();
  });

  $("usage-by").addEventListener("change", loadUsage);
  $("usage-since").addEventListener("change", loadUsage);
  useKey(key);
  setInterval(refresh, 30000);
})();
