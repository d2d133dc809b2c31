// Keys & spend: read-only tables from /dashboard/api/keys and /dashboard/api/usage; with the admin key
// (kept in this page's memory only) create and revoke through the gateway's /admin/keys.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  let adminKey = null;
  const fmt = (v, digits) => (v === null || v === undefined ? "–" : typeof v === "number" ? (digits === undefined ? String(v) : v.toFixed(digits)) : String(v));

  function cell(row, text, cls) {
    const td = document.createElement(row.parentElement && row.parentElement.tagName === "THEAD" ? "th" : "td");
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function table(el, headers, rows) {
    el.textContent = "";
    const head = el.createTHead().insertRow();
    headers.forEach((h) => cell(head, h));
    const body = el.createTBody();
    rows.forEach((r) => {
      const tr = body.insertRow();
      r.forEach((v) => {
        if (v instanceof HTMLElement) tr.insertCell().appendChild(v);
        else cell(tr, v);
      });
    });
  }

  function limits(k) {
    const out = [];
    [["rpm", "rpm"], ["tpm", "tpm"], ["max_concurrency", "conc"], ["tokens_per_day", "tok/day"],
     ["tokens_per_month", "tok/month"], ["cost_per_day", "cost/day"], ["cost_per_month", "cost/month"]]
      .forEach(([f, label]) => { if (k[f] !== null && k[f] !== undefined) out.push(label + " " + k[f]); });
    return out.join(", ") || "–";
  }

  async function admin(method, path, body) {
    const resp = await fetch("../admin/keys" + path, {
      method,
      headers: { Authorization: "Bearer " + adminKey, "Content-Type": "application/json" },
      body: body ? JSON.stringify(body) : undefined,
    });
    const data = await resp.json();
    if (!resp.ok) throw new Error((data.error && data.error.message) || resp.statusText);
    return data;
  }

  async function loadKeys() {
    const err = $("keys-error");
    try {
      const resp = await fetch("api/keys");
      const data = await resp.json();
      if (!resp.ok) throw new Error((data.error && data.error.message) || resp.statusText);
      err.hidden = true;
      table($("keys"), ["id", "state", "models", "limits", "tokens today", "cost today", "cost month", "team", ""],
        data.keys.map((k) => {
          let action = "";
          if (adminKey && k.state !== "revoked") {
            action = document.createElement("button");
            action.textContent = "revoke";
            action.addEventListener("click", async () => {
              if (!confirm("Revoke " + k.id + "? Every replica refuses it within a second.")) return;
              try { await admin("DELETE", "/" + encodeURIComponent(k.id)); } catch (e) { alert(e.message); }
              refresh();
            });
          }
          return [k.id, k.state, k.models ? k.models.join(",") : "all", limits(k), fmt(k.spend.day.tokens),
            fmt(k.spend.day.cost, 4), fmt(k.spend.month.cost, 4), (k.metadata && k.metadata.team) || "–", action];
        }));
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      err.textContent = "cannot load keys: " + e.message;
      err.hidden = false;
    }
  }

  async function loadUsage() {
    const by = $("usage-by").value;
    const resp = await fetch("api/usage?by=" + by + "&since=" + $("usage-since").value);
    const data = await resp.json();
    if (!resp.ok) return;
    table($("usage"), [by, "requests", "errors", "input tokens", "output tokens", "cost"],
      data.groups.map((g) => [g[by], fmt(g.requests), fmt(g.errors), fmt(g.input_tokens), fmt(g.output_tokens), fmt(g.cost, 6)]));
  }

  function refresh() { loadKeys(); loadUsage(); }

  $("admin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const key = $("admin-key").value.trim();
    adminKey = key || null;
    $("admin-status").textContent = "";
    if (adminKey) {
      try {
        await admin("GET", "");
        $("admin-status").textContent = "unlocked";
        $("create-form").hidden = false;
      } catch (e) {
        adminKey = null;
        $("admin-status").textContent = e.message;
      }
    }
    refresh();
  });

  $("create-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { id: $("new-id").value.trim() };
    if ($("new-tpm").value) body.tpm = Number($("new-tpm").value);
    if ($("new-tokens-day").value) body.tokens_per_day = Number($("new-tokens-day").value);
    const models = $("new-models").value.trim();
    if (models && models !== "all") body.models = models.split(",").map((m) => m.trim());
    try {
      const made = await admin("POST", "", body);
      $("new-secret").textContent = "key (shown once): " + made.key;
    } catch (e) {
      $("new-secret").textContent = e.message;
    }
    refresh();
  });

  $("usage-by").addEventListener("change", loadUsage);
  $("usage-since").addEventListener("change", loadUsage);
  refresh();
  setInterval(refresh, 30000);
})();
