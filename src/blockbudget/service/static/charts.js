// blockbudget dashboard charts: SVG heatmaps, the colour legend and the line chart, drawn here
// (no library, nothing loaded from elsewhere). Exposes window.BBCharts.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const PALETTE = ["#1f6fb4", "#d9480f", "#2b8a3e", "#862e9c", "#c92a2a", "#5c940d", "#0b7285", "#a61e4d"];

  function svg(tag, attrs = {}, text = "") {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text) node.textContent = text;
    return node;
  }

  // 0 → pale green, 0.5 → amber, 1 → red: the consumed fraction of a block's budget.
  function colour(f) {
    const t = Math.max(0, Math.min(1, f));
    const r = Math.round(t < 0.5 ? 120 + 270 * t : 255);
    const g = Math.round(t < 0.5 ? 200 - 20 * t : 190 - 150 * (t - 0.5) * 2);
    const b = Math.round(120 - 90 * t);
    return `rgb(${r},${g},${b})`;
  }

  const RETIRED = "#444";

  function pad2(n) { return String(n).padStart(2, "0"); }

  // "2026-11-24 03:10:05 UTC"
  function utc(ts) {
    const d = new Date(ts * 1000);
    return `${d.getUTCFullYear()}-${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())} ` +
      `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}:${pad2(d.getUTCSeconds())} UTC`;
  }

  // A short tick label: "03:10:05" when the axis stays within one UTC day ("03:10:05.3" when it
  // spans less than a minute), else "11-24 03:10".
  function tick(ts, oneDay, short) {
    const d = new Date(ts * 1000);
    const hm = `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}`;
    if (!oneDay) return `${pad2(d.getUTCMonth() + 1)}-${pad2(d.getUTCDate())} ${hm}`;
    const sec = short ? (d.getUTCSeconds() + d.getUTCMilliseconds() / 1000).toFixed(1).padStart(4, "0")
      : pad2(d.getUTCSeconds());
    return `${hm}:${sec}`;
  }

  function sameDay(a, b) { return utc(a).slice(0, 10) === utc(b).slice(0, 10); }

  function pct(f) { return `${(100 * f).toFixed(1)}%`; }

  // Indices of at most `n` evenly spaced ticks among `count` positions (first and last kept).
  function ticks(count, n) {
    if (count <= n) return [...Array(count).keys()];
    const out = new Set();
    for (let i = 0; i < n; i++) out.add(Math.round((i * (count - 1)) / (n - 1)));
    return [...out];
  }

  // The time axis under a chart: tick labels at x(i) and the title "time (UTC)".
  function timeAxis(g, { x, y, width, stamps, label }) {
    const oneDay = stamps.length ? sameDay(stamps[0], stamps[stamps.length - 1]) : true;
    const short = stamps.length > 1 && stamps[stamps.length - 1] - stamps[0] < 60;
    g.appendChild(svg("line", { x1: x(0) - 4, x2: x(0) - 4 + width, y1: y, y2: y, class: "axis-line" }));
    for (const i of ticks(stamps.length, 6)) {
      g.appendChild(svg("line", { x1: x(i), x2: x(i), y1: y, y2: y + 4, class: "axis-line" }));
      g.appendChild(svg("text", { x: x(i), y: y + 16, class: "tick x-tick", "text-anchor": "middle" },
        tick(stamps[i], oneDay, short)));
    }
    const day = stamps.length && oneDay ? ` on ${utc(stamps[0]).slice(0, 10)}` : "";
    g.appendChild(svg("text", { x: x(0) + width / 2, y: y + 34, class: "axis-title x-title", "text-anchor": "middle" },
      label + day));
  }

  // One heatmap: rows are blocks (names on the left axis), columns the time buckets.
  function heatmap(hm, ctx, onHover) {
    const rows = hm.contexts[ctx];
    const left = hm.remaining[ctx] || [];
    const n = hm.times.length;
    const cw = Math.max(8, Math.min(28, Math.floor(560 / Math.max(1, n))));
    const rh = Math.max(10, Math.min(20, Math.floor(420 / Math.max(1, hm.blocks.length))));
    const labelW = Math.min(240, 12 + 7 * Math.max(5, ...hm.blocks.map((b) => b.length)));
    const top = 8;
    const width = labelW + cw * n + 40;
    const height = top + rh * hm.blocks.length + 48;
    const root = svg("svg", {
      width, height, viewBox: `0 0 ${width} ${height}`, class: "heatmap", "data-context": ctx,
      role: "group", "aria-label": `consumed budget per block and time bucket in context ${ctx}`,
    });
    root.appendChild(svg("text", { x: 10, y: top + (rh * hm.blocks.length) / 2, class: "axis-title y-title",
      transform: `rotate(-90 10 ${top + (rh * hm.blocks.length) / 2})`, "text-anchor": "middle" }, "block"));
    const step = Math.max(1, Math.ceil(12 / rh));
    hm.blocks.forEach((b, i) => {
      if (i % step === 0) {
        root.appendChild(svg("text", { x: labelW - 6, y: top + rh * i + rh / 2 + 4, class: "tick y-tick",
          "text-anchor": "end", "data-block": b }, b));
      }
    });
    const start = (k) => (k === 0 ? hm.start : hm.times[k - 1]);
    rows.forEach((row, i) => row.forEach((f, k) => {
      const block = hm.blocks[i];
      const gone = hm.retired_at[block];
      const retired = gone !== undefined && k >= gone;
      const remaining = (left[i] || [])[k] || "";
      const text = `block ${block} · context ${ctx} · ${utc(start(k))} – ${utc(hm.times[k])} · ` +
        (retired ? "retired · " : "") + `remaining ${remaining} (${pct(1 - f)} left, ${pct(f)} consumed)`;
      const cell = svg("rect", {
        x: labelW + k * cw, y: top + i * rh, width: cw, height: rh, class: "cell",
        fill: retired ? RETIRED : colour(f), "data-block": block, "data-context": ctx,
        "data-bucket": k, "data-remaining": remaining, "aria-label": text,
      });
      cell.appendChild(svg("title", {}, text));
      cell.addEventListener("mouseenter", (ev) => onHover(ev, text));
      root.appendChild(cell);
    }));
    timeAxis(root, {
      x: (k) => labelW + k * cw + cw / 2, y: top + rh * hm.blocks.length + 4,
      width: cw * n + 8, stamps: hm.times, label: "time (UTC, end of bucket)",
    });
    return root;
  }

  // The colour legend: consumed fraction 0–100%, and the retired colour.
  function legend() {
    const width = 360;
    const root = svg("svg", { width: width + 150, height: 46, class: "legend-svg", role: "img",
      "aria-label": "colour legend: consumed fraction of a block's budget, 0% green to 100% red; dark grey: retired" });
    const defs = svg("defs");
    const grad = svg("linearGradient", { id: "bb-consumed", x1: "0", x2: "1", y1: "0", y2: "0" });
    for (let i = 0; i <= 10; i++) grad.appendChild(svg("stop", { offset: i / 10, "stop-color": colour(i / 10) }));
    defs.appendChild(grad);
    root.appendChild(defs);
    root.appendChild(svg("text", { x: 0, y: 12, class: "axis-title" }, "consumed fraction of a block's budget"));
    root.appendChild(svg("rect", { x: 0, y: 18, width, height: 10, fill: "url(#bb-consumed)" }));
    for (const f of [0, 0.25, 0.5, 0.75, 1]) {
      root.appendChild(svg("text", { x: f * width, y: 42, class: "tick legend-tick",
        "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" }, `${100 * f}%`));
    }
    root.appendChild(svg("rect", { x: width + 24, y: 18, width: 14, height: 10, fill: RETIRED }));
    root.appendChild(svg("text", { x: width + 44, y: 27, class: "tick" }, "retired"));
    return root;
  }

  // The line chart: one path per context, y = remaining fraction (0–100%), x = bucket end.
  function lines(series) {
    const ctxs = Object.keys(series.contexts);
    const n = series.times.length;
    const W = 680, H = 260, L = 56, R = 48, T = 12, B = 48;
    const x = (k) => L + (n > 1 ? (k * (W - L - R)) / (n - 1) : (W - L - R) / 2);
    const y = (f) => T + (1 - f) * (H - T - B);
    const root = svg("svg", { width: W, height: H + 24 * ctxs.length, class: "trend-svg", role: "img",
      "aria-label": "remaining budget over time per context" });
    for (const f of [0, 0.25, 0.5, 0.75, 1]) {
      root.appendChild(svg("line", { x1: L - 4, x2: W - R, y1: y(f), y2: y(f), class: f === 0 ? "axis-line" : "grid" }));
      root.appendChild(svg("text", { x: L - 8, y: y(f) + 4, class: "tick y-tick", "text-anchor": "end" }, `${100 * f}%`));
    }
    root.appendChild(svg("line", { x1: L - 4, x2: L - 4, y1: T, y2: y(0), class: "axis-line" }));
    root.appendChild(svg("text", { x: 12, y: T + (H - T - B) / 2, class: "axis-title y-title", "text-anchor": "middle",
      transform: `rotate(-90 12 ${T + (H - T - B) / 2})` }, "remaining budget (%)"));
    timeAxis(root, { x, y: y(0), width: W - L - R + 4, stamps: series.times, label: "time (UTC)" });
    ctxs.forEach((ctx, j) => {
      const colourOf = PALETTE[j % PALETTE.length];
      const pts = series.contexts[ctx].map((v, k) => [k, v]).filter(([, v]) => v !== null);
      const last = pts.length ? pts[pts.length - 1][1] : null;
      const d = pts.map(([k, v], i) => `${i ? "L" : "M"}${x(k).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      const path = svg("path", { d, class: "series", stroke: colourOf, fill: "none", "data-context": ctx,
        "data-last": last === null ? "" : String(last) });
      path.appendChild(svg("title", {}, `context ${ctx}: ${last === null ? "no blocks" : pct(last)} left now`));
      root.appendChild(path);
      for (const [k, v] of pts) {
        const dot = svg("circle", { cx: x(k), cy: y(v), r: 2.5, fill: colourOf, class: "point" });
        dot.appendChild(svg("title", {}, `context ${ctx} · ${utc(series.times[k])} · ${pct(v)} left`));
        root.appendChild(dot);
      }
      const ly = H + 6 + 24 * j;
      root.appendChild(svg("line", { x1: L, x2: L + 24, y1: ly + 8, y2: ly + 8, stroke: colourOf, "stroke-width": 3 }));
      root.appendChild(svg("text", { x: L + 32, y: ly + 12, class: "series-label", "data-context": ctx },
        `context ${ctx}: ${last === null ? "no blocks" : pct(last)} left now`));
    });
    return root;
  }

  window.BBCharts = { colour, heatmap, legend, lines, utc, pct };
})();
