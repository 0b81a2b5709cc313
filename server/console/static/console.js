// Fleet console: draws each [data-chart] with Plotly from /admin/charts/<name>, fills [data-field] from
// /admin/data/overview.json, refills each [data-live] region from a fresh copy of the page (tables.js),
// refreshes all three every few seconds while the tab is visible, and asks for confirmation on forms
// that carry data-confirm, and counts down each [data-expires-in] (seconds left when the page was made,
// so the machine's own clock does not matter). Nothing else: the pages work as plain HTML.
"use strict";
const REFRESH_MS = 3000;

function chartConfig() {
  return { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
}

async function drawChart(el) {
  const query = el.dataset.query ? "?" + el.dataset.query : "";
  const response = await fetch("/admin/charts/" + el.dataset.chart + query, { credentials: "same-origin" });
  if (response.status === 401) { window.location = "/admin/login"; return; }
  if (!response.ok) return;
  const figure = await response.json();
  el.dataset.points = figure.points;
  if (figure.points === 0) {
    el.classList.add("empty");
    figure.layout.annotations = [{ text: "no data yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }];
  } else {
    el.classList.remove("empty");
  }
  await Plotly.react(el, figure.data, figure.layout, chartConfig());
}

function formatValue(el, value) {
  if (value === null || value === undefined) return "—";
  if (el.dataset.format === "pct" && typeof value === "number") return (100 * value).toFixed(1) + "%";
  if (typeof value === "number" && !Number.isInteger(value)) return String(Number(value.toPrecision(3)));
  return String(value);
}

async function fillOverview(root) {
  const response = await fetch("/admin/data/overview.json", { credentials: "same-origin" });
  if (!response.ok) return;
  const data = await response.json();
  for (const el of root.querySelectorAll("[data-field]")) {
    el.textContent = formatValue(el, data[el.dataset.field]);
  }
}

async function refresh() {
  if (document.hidden) return;
  const work = [...document.querySelectorAll("[data-chart]")].map((el) => drawChart(el).catch(() => {}));
  for (const root of document.querySelectorAll("[data-overview]")) work.push(fillOverview(root).catch(() => {}));
  if (window.fleetTables) work.push(window.fleetTables.refreshLive().catch(() => {}));
  await Promise.all(work);
}

function countDown() {
  const now = Date.now();
  for (const el of document.querySelectorAll("[data-expires-in]")) {
    if (!el.dataset.seenAt) el.dataset.seenAt = String(now); // a live refresh brings fresh elements
    const left = Math.round(Number(el.dataset.expiresIn) - (now - Number(el.dataset.seenAt)) / 1000);
    if (Number.isNaN(left)) continue;
    const pad = (n) => String(n).padStart(2, "0");
    el.textContent = left <= 0 ? "no time" : `${Math.floor(left / 60)}:${pad(left % 60)}`;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  // delegated, so that forms a live refresh brings in ask too
  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });
  for (const el of document.querySelectorAll("[data-format='pct']")) {
    const value = parseFloat(el.textContent);
    if (!Number.isNaN(value)) el.textContent = formatValue(el, value);
  }
  if (document.querySelector("[data-expires-in]")) {
    countDown();
    setInterval(countDown, 1000);
  }
  if (document.querySelector("[data-chart], [data-overview], [data-live]")) {
    refresh();
    setInterval(refresh, REFRESH_MS);
  }
});
