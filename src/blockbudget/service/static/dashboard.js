// blockbudget live dashboard: no dependencies, no network access but this service's own API.
"use strict";

const REFRESH_MS = 2000;
const state = { key: "", stream: null, timer: null };

function params() {
  const out = new URLSearchParams(window.location.hash.slice(1));
  return { key: out.get("key") || "", stream: out.get("stream") };
}

function colour(f) {
  // 0 → pale green, 0.5 → amber, 1 → red: consumed fraction of the block's budget.
  const t = Math.max(0, Math.min(1, f));
  const r = Math.round(t < 0.5 ? 120 + 270 * t : 255);
  const g = Math.round(t < 0.5 ? 200 - 20 * t : 190 - 150 * (t - 0.5) * 2);
  const b = Math.round(120 - 90 * t);
  return `rgb(${r},${g},${b})`;
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

function drawHeatmaps(hm) {
  const box = document.getElementById("heatmaps");
  box.replaceChildren();
  const cell = Math.max(6, Math.min(24, Math.floor(480 / Math.max(1, hm.times.length))));
  const rowH = Math.max(4, Math.min(18, Math.floor(360 / Math.max(1, hm.blocks.length))));
  for (const [ctx, rows] of Object.entries(hm.contexts)) {
    const wrap = el("div", { class: "heat", "data-context": ctx });
    wrap.appendChild(el("h3", {}, `context ${ctx}`));
    const canvas = el("canvas", {
      width: String(cell * hm.times.length), height: String(rowH * hm.blocks.length),
      "aria-label": `heatmap of consumed budget in context ${ctx}`,
    });
    const g = canvas.getContext("2d");
    rows.forEach((row, i) => row.forEach((f, k) => {
      const gone = hm.retired_at[hm.blocks[i]];
      g.fillStyle = gone !== undefined && k >= gone ? "#444" : colour(f);
      g.fillRect(k * cell, i * rowH, cell, rowH);
    }));
    wrap.appendChild(canvas);
    const last = rows.map((r) => r[r.length - 1] || 0);
    const max = last.length ? Math.max(...last) : 0;
    wrap.appendChild(el("div", { class: "legend" },
      `${hm.blocks.length} blocks × ${hm.times.length} buckets; most consumed block: ${(100 * max).toFixed(1)}%`));
    box.appendChild(wrap);
  }
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
    tr.appendChild(el("td", b.retired ? { class: "retired" } : {},
      b.retired ? "retired" : b.sealed ? "sealed" : "open"));
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

function drawRetiring(data) {
  const list = document.getElementById("retiring");
  list.replaceChildren();
  const retired = data.blocks.filter((b) => b.retired).map((b) => b.block_id);
  for (const id of data.retiring) list.appendChild(el("li", {}, `${id} — under 10% left in every context`));
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
    const q = state.stream ? `?stream=${encodeURIComponent(state.stream)}` : "";
    const data = await api(`/v1/dashboard${q}`);
    state.stream = data.stream;
    const select = document.getElementById("stream");
    if (select.options.length !== data.streams.length) {
      select.replaceChildren(...data.streams.map((s) => el("option", { value: s }, s)));
    }
    select.value = data.stream;
    const summary = document.getElementById("summary");
    summary.replaceChildren(el("div", {},
      `stream ${data.stream}: ${data.blocks.length} blocks, policy ε=${data.policy.epsilon}, ` +
      `δ=${data.policy.delta}; ${data.retiring.length} retiring`));
    drawHeatmaps(data.heatmap);
    drawBlocks(data);
    drawRetiring(data);
    drawExtras(data);
    document.body.dataset.loaded = "true";
    status.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (err) {
    status.textContent = String(err.message || err);
    document.body.dataset.error = String(err.message || err);
  }
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
    sessionStorage.setItem("blockbudget-key", state.key);
    start();
  });
  document.getElementById("stream").addEventListener("change", (ev) => {
    state.stream = ev.target.value;
    refresh();
  });
  if (state.key) start();
});
