// kernforge's dashboard: sortable and filterable tables, a search tree that pans and zooms, and
// the runs list's choice of two runs to compare. Plain JavaScript over the server's HTML, no
// library. The page's parts are swapped in again by htmx on every event of the run, so all state
// (sort column and direction, filter text, status, the tree's view, the ticked runs) lives here,
// keyed by the table's or tree's name, and is put back on each new copy after a swap.
"use strict";

(() => {
  // Kept for the tab's life under the page's path (sessionStorage), so that coming back from a
  // node to its task finds the candidates as they were sorted and filtered.
  const KEY = `kernforge:${window.location.pathname}`;
  const saved = (() => {
    try { return JSON.parse(sessionStorage.getItem(KEY)) || {}; } catch { return {}; }
  })();
  const tables = saved.tables || {};  // data-table name -> {col, dir, text, status}
  const views = saved.views || {};    // tree name (the task's id) -> {k, x, y}
  const picked = new Set();  // run names ticked for /compare
  let saving = 0;
  const save = () => {  // at most once a frame: a drag or the wheel changes the view many times
    if (saving) return;
    saving = requestAnimationFrame(() => {
      saving = 0;
      try { sessionStorage.setItem(KEY, JSON.stringify({tables, views})); } catch { /* full or off */ }
    });
  };

  // ------------------------------------------------------------ tables

  const tableState = (name) => (tables[name] ??= {col: -1, dir: 1, text: "", status: ""});

  // "1.92x", "37.5%", "0.0521", "3/4 correct": the leading number; "-" or "": NaN, sorted last
  function cellValue(cell, numeric) {
    const raw = cell ? (cell.dataset.sort ?? cell.textContent.trim()) : "";
    if (!numeric) return raw.toLowerCase();
    const match = raw.match(/-?\d+(\.\d+)?(e[-+]?\d+)?/i);
    return match && raw !== "-" ? parseFloat(match[0]) : NaN;
  }

  function compare(a, b, numeric) {
    if (numeric) {
      if (Number.isNaN(a) || Number.isNaN(b)) return Number.isNaN(a) - Number.isNaN(b);
      return a - b;
    }
    return a.localeCompare(b, undefined, {numeric: true});
  }

  function bodyRows(table) {
    return Array.from(table.tBodies).flatMap((body) => Array.from(body.rows));
  }

  function sortTable(table, state) {
    const heads = table.tHead ? Array.from(table.tHead.rows[0].cells) : [];
    heads.forEach((th, i) => {
      if (th.hasAttribute("data-nosort")) return;
      th.classList.add("sortable");
      th.tabIndex = 0;  // reachable by Tab; Enter or Space sorts (below)
      th.setAttribute("aria-sort", i === state.col ? (state.dir > 0 ? "ascending" : "descending") : "none");
    });
    if (state.col < 0 || state.col >= heads.length) return;
    const numeric = heads[state.col].classList.contains("num");
    const rows = bodyRows(table).map((row, i) => ({row, i, v: cellValue(row.cells[state.col], numeric)}));
    rows.sort((a, b) => {
      const missing = numeric && (Number.isNaN(a.v) || Number.isNaN(b.v));  // no figure: last either way
      const order = missing ? compare(a.v, b.v, true) : state.dir * compare(a.v, b.v, numeric);
      return order || a.i - b.i;
    });
    const body = table.tBodies[0];
    rows.forEach(({row}) => body.appendChild(row));
  }

  function matchesStatus(row, status) {
    if (!status) return true;
    const own = row.dataset.status || "";
    return status === "!ok" ? own !== "ok" && own !== "running" : own === status;
  }

  function filterTable(table, state) {
    const text = state.text.trim().toLowerCase();
    let shown = 0;
    const rows = bodyRows(table);
    for (const row of rows) {
      row.hidden = !(row.textContent.toLowerCase().includes(text) && matchesStatus(row, state.status));
      shown += !row.hidden;
    }
    for (const count of document.querySelectorAll(`.table-tools[data-for="${table.dataset.table}"] .shown`)) {
      const noun = rows.length === 1 ? "row" : "rows";
      count.textContent = shown === rows.length ? `${rows.length} ${noun}` : `${shown} of ${rows.length} ${noun}`;
    }
  }

  function applyTable(table) {
    const state = tableState(table.dataset.table);
    sortTable(table, state);
    filterTable(table, state);
    save();
  }

  function restoreTools(tools) {
    const state = tableState(tools.dataset.for);
    const text = tools.querySelector(".table-filter");
    const status = tools.querySelector(".status-filter");
    if (text && text.value !== state.text) text.value = state.text;  // a new copy, focused again by htmx
    if (status) status.value = state.status;
  }

  document.addEventListener("click", (event) => {
    const th = event.target.closest("table[data-table] > thead th");
    if (!th || th.hasAttribute("data-nosort") || event.target.closest("a, input, button")) return;
    const table = th.closest("table");
    const state = tableState(table.dataset.table);
    state.dir = state.col === th.cellIndex ? -state.dir : 1;
    state.col = th.cellIndex;
    applyTable(table);
  });

  document.addEventListener("keydown", (event) => {
    if ((event.key === "Enter" || event.key === " ") && event.target.matches("th.sortable")) {
      event.preventDefault();
      event.target.click();
    }
  });

  document.addEventListener("input", (event) => {
    const tools = event.target.closest(".table-tools");
    if (!tools) return;
    const state = tableState(tools.dataset.for);
    if (event.target.classList.contains("table-filter")) state.text = event.target.value;
    if (event.target.classList.contains("status-filter")) state.status = event.target.value;
    document.querySelectorAll(`table[data-table="${tools.dataset.for}"]`).forEach(applyTable);
  });

  // ------------------------------------------------------------ the runs list: two runs to compare

  function restorePicks() {
    for (const box of document.querySelectorAll("input.pick")) box.checked = picked.has(box.value);
    const button = document.querySelector("#compare-form button");
    if (button) {
      button.disabled = picked.size !== 2;
      button.textContent = picked.size === 2 ? "compare the two ticked runs" : `tick two runs to compare (${picked.size} ticked)`;
    }
  }

  document.addEventListener("change", (event) => {
    if (!event.target.matches("input.pick")) return;
    if (event.target.checked) picked.add(event.target.value); else picked.delete(event.target.value);
    restorePicks();
  });

  document.addEventListener("submit", (event) => {  // /compare?a=..&b=.. in the order ticked
    if (event.target.id !== "compare-form" || picked.size !== 2) return;
    event.preventDefault();
    const [a, b] = Array.from(picked);
    window.location.href = `/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`;
  });

  // ------------------------------------------------------------ the search tree: pan and zoom

  const ZOOM_STEP = 1.25, MIN_ZOOM = 0.05, MAX_ZOOM = 8;
  const BOX_MIN_PX = 220, BOX_MAX_PX = 620;  // the tree's box: as tall as the tree, within these

  function setView(tree, view) {
    tree.viewport.setAttribute("transform", `translate(${view.x.toFixed(1)} ${view.y.toFixed(1)}) scale(${view.k.toFixed(4)})`);
    tree.wrap.dataset.zoom = view.k.toFixed(2);
    save();
    const label = tree.wrap.querySelector(".zoom-level");
    if (label) label.textContent = `${Math.round(view.k * 100)}%`;
  }

  function zoomAt(tree, view, factor, px, py) {  // keep the point (px, py) of the box where it is
    const k = Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, view.k * factor));
    view.x = px - (px - view.x) * (k / view.k);
    view.y = py - (py - view.y) * (k / view.k);
    view.k = k;
    setView(tree, view);
  }

  function fit(tree, view) {
    const box = tree.svg.getBoundingClientRect();
    view.k = Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, Math.min(box.width / tree.width, box.height / tree.height, 2)));
    view.x = (box.width - tree.width * view.k) / 2;
    view.y = (box.height - tree.height * view.k) / 2;
    setView(tree, view);
  }

  function toolbar(tree, view) {
    const bar = document.createElement("div");
    bar.className = "tree-tools";
    const buttons = [["in", "+", "zoom in"], ["out", "\u2212", "zoom out"], ["fit", "fit", "the whole tree in the box"],
                     ["reset", "1:1", "actual size, from the top left"]];
    for (const [action, text, title] of buttons) {
      const button = document.createElement("button");
      Object.assign(button, {type: "button", textContent: text, title});
      button.dataset.zoom = action;
      bar.appendChild(button);
    }
    const level = document.createElement("span");
    level.className = "zoom-level muted";
    bar.appendChild(level);
    bar.addEventListener("click", (event) => {
      const action = event.target.dataset?.zoom;
      const box = tree.svg.getBoundingClientRect();
      if (action === "in" || action === "out") {
        zoomAt(tree, view, action === "in" ? ZOOM_STEP : 1 / ZOOM_STEP, box.width / 2, box.height / 2);
      } else if (action === "fit") {
        fit(tree, view);
      } else if (action === "reset") {
        Object.assign(view, {k: 1, x: 0, y: 0});
        setView(tree, view);
      }
    });
    return bar;
  }

  function initTree(wrap) {
    const svg = wrap.querySelector("svg.tree");
    if (!svg || svg.querySelector("g.viewport")) return;
    const width = parseFloat(svg.getAttribute("width")), height = parseFloat(svg.getAttribute("height"));
    const viewport = document.createElementNS("http://www.w3.org/2000/svg", "g");
    viewport.setAttribute("class", "viewport");
    while (svg.firstChild) viewport.appendChild(svg.firstChild);
    svg.appendChild(viewport);
    svg.removeAttribute("viewBox");  // one user unit is one pixel; the transform does the rest
    svg.setAttribute("width", "100%");
    svg.setAttribute("height", String(Math.min(BOX_MAX_PX, Math.max(BOX_MIN_PX, height))));
    wrap.classList.add("pannable");
    const tree = {wrap, svg, viewport, width, height};
    const key = wrap.dataset.tree || "tree";
    const view = (views[key] ??= {k: 1, x: 0, y: 0});
    wrap.prepend(toolbar(tree, view));
    setView(tree, view);

    svg.addEventListener("wheel", (event) => {
      event.preventDefault();
      const box = svg.getBoundingClientRect();
      zoomAt(tree, view, Math.exp(-event.deltaY * 0.0015), event.clientX - box.left, event.clientY - box.top);
    }, {passive: false});

    let drag = null;  // where a press began; a press that moved is a drag, not a click on a node
    svg.addEventListener("pointerdown", (event) => {
      if (event.button !== 0) return;
      drag = {x: event.clientX, y: event.clientY, vx: view.x, vy: view.y, moved: false, id: event.pointerId};
    });
    svg.addEventListener("pointermove", (event) => {
      if (!drag) return;
      const dx = event.clientX - drag.x, dy = event.clientY - drag.y;
      if (!drag.moved && Math.hypot(dx, dy) < 4) return;
      if (!drag.moved) svg.setPointerCapture(drag.id);
      drag.moved = true;
      svg.classList.add("dragging");
      view.x = drag.vx + dx;
      view.y = drag.vy + dy;
      setView(tree, view);
    });
    const end = () => {
      svg.classList.remove("dragging");
      if (drag && drag.moved) {
        svg.dataset.dragged = "1";
        setTimeout(() => delete svg.dataset.dragged, 0);  // the click comes before this, if at all
      }
      drag = null;
    };
    svg.addEventListener("pointerup", end);
    svg.addEventListener("pointercancel", end);
    svg.addEventListener("click", (event) => {  // the click that ends a drag opens no node
      if (svg.dataset.dragged) {
        event.preventDefault();
        event.stopPropagation();
        delete svg.dataset.dragged;
      }
    }, true);
  }

  // ------------------------------------------------------------ on load and after every swap

  function refresh() {
    document.querySelectorAll(".table-tools").forEach(restoreTools);
    document.querySelectorAll("table[data-table]").forEach(applyTable);
    document.querySelectorAll(".tree-wrap[data-tree]").forEach(initTree);
    restorePicks();
  }

  document.addEventListener("DOMContentLoaded", refresh);
  document.addEventListener("htmx:afterSwap", refresh);
  window.kernforge = {tables, views, refresh};  // for the browser tests and a curious console
})();
