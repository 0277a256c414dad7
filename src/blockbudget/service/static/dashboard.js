// blockbudget live dashboard: no dependencies, no network access but this service's own API.
"use strict";

const REFRESH_MS = 2000;
const state = { key: "", stream: null, timer: null, below: null, drawn: "" };

function params() {
  const out = new URLSearchParams(window.location.hash.slice(1));
  return { key: out.get("key") || "", stream: out.get("stream") };
}

function remainingColour(f) {
  return f > 0.5 ? "#2e9e5b" : f > 0.15 ? "#d9a21b" : "#d0312d";
}

async function api(path) {
  const res = await fetch(path, { headers: { Authorization: "Bearer " + state.key } });
  const body = await res.json();
  if (!res.ok) throw new Error(`${res.status} ${body.error || ""}: ${body.detail || ""}`);
  return body;
}

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

function showTooltip(ev, text) {
  const tip = document.getElementById("tooltip");
  tip.textContent = text;
  tip.hidden = false;
  tip.style.left = `${ev.pageX + 12}px`;
  tip.style.top = `${ev.pageY + 12}px`;
}

function hideTooltip() {
  document.getElementById("tooltip").hidden = true;
}

function drawCharts(data) {
  // Redraw only when the history changed: a refresh must not pull a cell from under the mouse.
  const drawn = JSON.stringify([data.stream, data.heatmap, data.series]);
  if (drawn === state.drawn) return;
  state.drawn = drawn;
  const hm = data.heatmap;
  const legend = document.getElementById("legend");
  legend.replaceChildren(BBCharts.legend());
  const box = document.getElementById("heatmaps");
  box.replaceChildren();
  for (const ctx of Object.keys(hm.contexts)) {
    const wrap = el("div", { class: "heat", "data-context": ctx });
    wrap.appendChild(el("h3", {}, `context ${ctx}`));
    const chart = BBCharts.heatmap(hm, ctx, showTooltip);
    chart.addEventListener("mouseleave", hideTooltip);
    wrap.appendChild(chart);
    const last = hm.contexts[ctx].map((r) => r[r.length - 1] || 0);
    const max = last.length ? Math.max(...last) : 0;
    wrap.appendChild(el("div", { class: "legend" },
      `${hm.blocks.length} blocks × ${hm.times.length} buckets; most consumed block: ${BBCharts.pct(max)}`));
    box.appendChild(wrap);
  }
  const trend = document.getElementById("trend");
  trend.replaceChildren(data.series ? BBCharts.lines(data.series) : el("p", { class: "note" }, "no history"));
}

function drawAlert(data) {
  const box = document.getElementById("alert");
  box.replaceChildren();
  box.dataset.below = String(data.alert_below);
  if (!data.alerts.length) {
    box.hidden = true;
    return;
  }
  box.appendChild(el("strong", {}, `Low budget: under ${BBCharts.pct(data.alert_below)} left`));
  const list = el("ul");
  for (const a of data.alerts) {
    const shown = a.blocks.slice(0, 12).join(", ") + (a.blocks.length > 12 ? `, … (${a.blocks.length} in all)` : "");
    list.appendChild(el("li", { "data-stream": a.stream, "data-context": a.context },
      `${a.stream} / ${a.context}: ${a.blocks.length} block(s), lowest ${BBCharts.pct(a.lowest)} left — ${shown}`));
  }
  box.appendChild(list);
  box.hidden = false;
}

function drawBlocks(data) {
  const ctxs = Object.keys(data.heatmap.contexts);
  const head = document.querySelector("#blocks thead");
  const body = document.querySelector("#blocks tbody");
  const hasRows = data.blocks.some((b) => b.rows !== null);
  const hr = el("tr");
  ["block", "state", ...(hasRows ? ["rows"] : []), ...ctxs.map((c) => `remaining in ${c}`)]
    .forEach((h) => hr.appendChild(el("th", {}, h)));
  head.replaceChildren(hr);
  body.replaceChildren();
  for (const b of data.blocks) {
    const tr = el("tr", { "data-block": b.block_id });
    tr.appendChild(el("td", {}, b.block_id));
    const retiringIn = Object.entries(b.retiring_in || {}).filter(([, v]) => v).map(([c]) => c);
    tr.appendChild(el("td", b.retired ? { class: "retired" } : retiringIn.length ? { class: "retiring" } : {},
      (b.retired ? "retired" : b.sealed ? "sealed" : "open") +
      (retiringIn.length ? `, retiring in ${retiringIn.join(", ")}` : "")));
    if (hasRows) tr.appendChild(el("td", { class: "num" }, b.rows === null ? "" : String(b.rows)));
    for (const c of ctxs) {
      const f = b.remaining_fraction[c];
      const td = el("td", { "data-context": c });
      const bar = el("span", { class: "bar" });
      const fill = el("span");
      fill.style.width = `${(100 * f).toFixed(1)}%`;
      fill.style.background = remainingColour(f);
      bar.appendChild(fill);
      td.appendChild(bar);
      td.appendChild(el("span", { class: "remaining" }, b.remaining_display[c]));
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function retiringSummary(data) {
  const parts = Object.entries(data.retiring).map(([c, ids]) => `${ids.length} in ${c}`);
  if (data.retiring_everywhere) parts.push(`${data.retiring_everywhere.length} in every open context`);
  return parts.join(", ") || "none";
}

function drawRetiring(data) {
  const list = document.getElementById("retiring");
  list.replaceChildren();
  const retired = data.blocks.filter((b) => b.retired).map((b) => b.block_id);
  // per context: a block is retiring in a context when it is live and under 10% left there
  for (const [c, ids] of Object.entries(data.retiring)) {
    for (const id of ids) list.appendChild(el("li", { class: "retiring" }, `${id} — under 10% left in ${c}`));
  }
  for (const id of data.retiring_everywhere || []) {
    list.appendChild(el("li", { class: "retiring-everywhere" }, `${id} — under 10% left in every open context`));
  }
  for (const id of retired) list.appendChild(el("li", { class: "retired" }, `${id} — retired`));
  if (!list.children.length) list.appendChild(el("li", {}, "none"));
}

function drawExtras(data) {
  const box = document.getElementById("extras");
  box.replaceChildren();
  for (const [name, value] of Object.entries(data.extras)) {
    if (!Array.isArray(value)) continue;
    box.appendChild(el("h2", {}, name.replaceAll("_", " ")));
    if (!value.length) {
      box.appendChild(el("p", { id: `extra-${name}`, class: "note" }, "none"));
      continue;
    }
    const table = el("table", { id: `extra-${name}` });
    const keys = value.length ? Object.keys(value[0]) : [];
    const hr = el("tr");
    keys.forEach((k) => hr.appendChild(el("th", {}, k)));
    table.appendChild(hr);
    for (const row of value) {
      const tr = el("tr");
      keys.forEach((k) => tr.appendChild(el("td", {}, String(row[k]))));
      table.appendChild(tr);
    }
    box.appendChild(table);
  }
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const q = new URLSearchParams();
    if (state.stream) q.set("stream", state.stream);
    if (state.below !== null) q.set("alert_below", String(state.below));
    const data = await api(`/v1/dashboard?${q}`);
    state.stream = data.stream;
    const select = document.getElementById("stream");
    if (select.options.length !== data.streams.length) {
      select.replaceChildren(...data.streams.map((s) => el("option", { value: s }, s)));
    }
    select.value = data.stream;
    const summary = document.getElementById("summary");
    summary.replaceChildren(el("div", {},
      `stream ${data.stream}: ${data.blocks.length} blocks, policy ε=${data.policy.epsilon}, ` +
      `δ=${data.policy.delta}; retiring: ${retiringSummary(data)}`));
    const input = document.getElementById("alert-below");
    if (state.below === null && document.activeElement !== input) {
      input.value = String(+(100 * data.alert_below).toFixed(4));
    }
    drawAlert(data);
    drawCharts(data);
    drawBlocks(data);
    drawRetiring(data);
    drawExtras(data);
    document.body.dataset.loaded = "true";
    document.body.dataset.refreshes = String(+(document.body.dataset.refreshes || 0) + 1);
    status.textContent = "updated " + BBCharts.utc(Date.now() / 1000);
  } catch (err) {
    status.textContent = String(err.message || err);
    document.body.dataset.error = String(err.message || err);
  }
}

// The alert threshold typed in (a percentage); empty or out of range: the server's default.
function readThreshold() {
  const input = document.getElementById("alert-below");
  const v = Number(input.value);
  state.below = input.value === "" || !(v >= 0 && v <= 100) ? null : v / 100;
}

function start() {
  if (state.timer) clearInterval(state.timer);
  refresh();
  state.timer = setInterval(refresh, REFRESH_MS);
}

window.addEventListener("DOMContentLoaded", () => {
  const p = params();
  state.key = p.key || sessionStorage.getItem("blockbudget-key") || "";
  state.stream = p.stream;
  document.getElementById("key").value = state.key;
  document.getElementById("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.key = document.getElementById("key").value.trim();
    state.stream = document.getElementById("stream").value || null;
    readThreshold();
    sessionStorage.setItem("blockbudget-key", state.key);
    start();
  });
  document.getElementById("alert-below").addEventListener("change", () => {
    readThreshold();
    refresh();
  });
  document.getElementById("stream").addEventListener("change", (ev) => {
    state.stream = ev.target.value;
    state.drawn = "";
    refresh();
  });
  if (state.key) start();
});
