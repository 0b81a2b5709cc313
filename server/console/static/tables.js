// Fleet console: sortable tables and live regions, as progressive enhancement over server-rendered HTML
// (without this script every table still reads, in the server's order, and a reload still refreshes).
// - Each table header becomes a button: a click sorts the rows by that column (again: the other way).
//   A cell's data-sort holds its raw value (bytes, ms) when its text is humanized; numbers sort as
//   numbers, text and ISO times as text, and "—" (nothing) always last.
// - Each [data-live] element is refilled from a fresh copy of the page (console.js calls refreshLive on
//   its timer, as it redraws the charts), unless the operator is typing in it; its sort is kept.
"use strict";

const sortState = new Map(); // live region key + table index -> {column, descending}

function cellText(row, column) {
  const cell = row.cells[column];
  if (!cell) return "";
  return (cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent).trim();
}

function asNumber(text) {
  const match = text.match(/^[+-]?[\d,]*\.?\d+(e[+-]?\d+)?/i);
  if (!match || /^[\d\-:/]/.test(text.slice(match[0].length))) return NaN; // a date, a time, an id
  return Number(match[0].replace(/,/g, ""));
}

function sortRows(table, column, descending) {
  const body = table.tBodies[0];
  if (!body) return;
  const rows = [...body.rows].filter((row) => row.cells.length > 1); // not "nothing yet" rows
  const texts = rows.map((row) => cellText(row, column));
  const filled = texts.filter((t) => t !== "" && t !== "—");
  const numeric = filled.length > 0 && filled.every((t) => !Number.isNaN(asNumber(t)));
  const keyed = rows.map((row, i) => ({ row, i, text: texts[i] }));
  keyed.sort((a, b) => {
    const emptyA = a.text === "" || a.text === "—";
    const emptyB = b.text === "" || b.text === "—";
    if (emptyA !== emptyB) return emptyA ? 1 : -1;
    let order = 0;
    if (!emptyA) {
      order = numeric ? asNumber(a.text) - asNumber(b.text) : a.text.localeCompare(b.text, undefined, { numeric: true });
    }
    if (descending) order = -order;
    return order || a.i - b.i;
  });
  for (const { row } of keyed) body.appendChild(row);
  [...table.tHead.rows[0].cells].forEach((th, i) => {
    if (i === column) th.setAttribute("aria-sort", descending ? "descending" : "ascending");
    else th.removeAttribute("aria-sort");
  });
}

function tableKey(table) {
  const live = table.closest("[data-live]");
  const scope = live || document;
  return (live ? live.dataset.live : "page") + ":" + [...scope.querySelectorAll("table")].indexOf(table);
}

function makeSortable(table) {
  if (!table.tHead || !table.tBodies[0] || table.dataset.sortable === "on") return;
  table.dataset.sortable = "on";
  [...table.tHead.rows[0].cells].forEach((th, column) => {
    const label = th.textContent.trim();
    if (!label || th.dataset.nosort !== undefined) return;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "sort";
    while (th.firstChild) button.appendChild(th.firstChild);
    th.appendChild(button);
    button.addEventListener("click", () => {
      const key = tableKey(table);
      const before = sortState.get(key);
      const descending = before && before.column === column ? !before.descending : false;
      sortState.set(key, { column, descending });
      sortRows(table, column, descending);
    });
  });
  const kept = sortState.get(tableKey(table));
  if (kept) sortRows(table, kept.column, kept.descending);
}

function enhanceTables(root) {
  for (const table of root.querySelectorAll("table")) makeSortable(table);
}

function typingIn(el) {
  const active = document.activeElement;
  return active && el.contains(active) && active.matches("input, select, textarea");
}

async function refreshLive() {
  const regions = document.querySelectorAll("[data-live]");
  if (regions.length === 0) return;
  const response = await fetch(window.location.href, { credentials: "same-origin" });
  if (response.redirected && new URL(response.url).pathname === "/admin/login") {
    window.location = "/admin/login";
    return;
  }
  if (!response.ok) return;
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
  for (const region of regions) {
    const next = fresh.querySelector(`[data-live="${CSS.escape(region.dataset.live)}"]`);
    if (!next || typingIn(region)) continue;
    region.replaceChildren(...document.adoptNode(next).childNodes);
    region.dataset.refreshed = String(Number(region.dataset.refreshed || 0) + 1);
    enhanceTables(region);
  }
}

window.fleetTables = { enhanceTables, refreshLive };
document.addEventListener("DOMContentLoaded", () => enhanceTables(document));
