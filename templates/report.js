/* Progressive enhancement only: the page is complete without it. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  document.querySelectorAll("button.toggle-all").forEach(function (button) {
    button.addEventListener("click", function () {
      var open = button.textContent === "Expand all";
      button.closest("section").querySelectorAll("details.finding").forEach(function (d) { d.open = open; });
      button.textContent = open ? "Collapse all" : "Expand all";
    });
  });
  // A link to a trace (or finding) inside a closed <details> opens it first.
  function reveal() {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    for (var d = target; d; d = d.parentElement) { if (d.tagName === "DETAILS") { d.open = true; } }
    if (target) { target.scrollIntoView(); }
  }
  window.addEventListener("hashchange", reveal);
  reveal();
  // Tables: a click on a column's name sorts by it (numbers by their data-v value), again reverses.
  function cellKey(td) {
    var v = td && td.getAttribute("data-v");
    if (v !== null && v !== undefined) { var f = parseFloat(v); return isFinite(f) ? f : null; }
    return td ? td.textContent.trim().toLowerCase() : null;
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    if (!body) { return; }
    var rows = Array.prototype.slice.call(body.rows);
    var numeric = rows.some(function (r) { return typeof cellKey(r.cells[col]) === "number"; });
    var was = th.getAttribute("aria-sort");
    var down = was === "none" || !was ? numeric : was === "ascending";
    rows.sort(function (a, b) {
      var x = cellKey(a.cells[col]), y = cellKey(b.cells[col]);
      if (x === null || x === "") { return y === null || y === "" ? 0 : 1; }  // empty cells last
      if (y === null || y === "") { return -1; }
      var c = x < y ? -1 : x > y ? 1 : 0;
      return down ? -c : c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(th.parentElement.cells, function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", down ? "descending" : "ascending");
  }
  document.querySelectorAll("table").forEach(function (table) {
    if (!table.tHead || !table.tHead.rows.length || !table.tBodies.length) { return; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.classList.add("sort");
      th.setAttribute("aria-sort", "none");
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(table, col, th); });
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") { sortBy(table, col, th); } });
    });
  });
  // The timeline: hovering an event shows its <title> (name, duration, category) as text in a box.
  document.querySelectorAll("section.timeline").forEach(function (section) {
    var tip = section.querySelector(".tl-tip");
    section.querySelectorAll("rect.ev").forEach(function (rect) {
      rect.addEventListener("mouseenter", function (e) {
        var title = rect.querySelector("title");
        tip.textContent = title ? title.textContent : "";
        tip.hidden = false;
        var x = 0, y = 0;
        for (var el = section; el; el = el.offsetParent) { x += el.offsetLeft; y += el.offsetTop; }
        tip.style.left = Math.max(0, Math.min(e.pageX - x + 12, section.offsetWidth - 320)) + "px";
        tip.style.top = (e.pageY - y + 14) + "px";
      });
      rect.addEventListener("mouseleave", function () { tip.hidden = true; });
    });
  });
  // Perfetto: open its UI, PING until it answers PONG, then post the trace's bytes (Perfetto's
  // documented postMessage way). The bytes: the trace beside the report (fetched when the page is
  // served), else a file the reader picks.
  document.querySelectorAll("button.perfetto").forEach(function (button) {
    var box = button.parentElement;
    var pick = box.querySelector(".perfetto-pick"), input = box.querySelector("input.perfetto-file");
    var status = box.querySelector(".perfetto-status");
    var win = null;
    function say(text) { status.textContent = " " + text; }
    function send(buffer, name) {
      var origin = button.getAttribute("data-origin");
      if (!win || win.closed) { win = window.open(origin + "/", "_blank"); }
      if (!win) { say("the browser blocked the Perfetto window; allow pop-ups for this page"); return; }
      say("waiting for Perfetto UI to answer…");
      var tries = 0;
      var timer = setInterval(function () {
        if (++tries > 200) { clearInterval(timer); say("Perfetto UI did not answer: offline, or it refused this page (it may not answer pages opened as " +
              "files: serve the folder, e.g. python -m http.server, or drop the trace on ui.perfetto.dev)"); return; }
        win.postMessage("PING", origin);
      }, 100);
      function onMessage(e) {
        if (e.source !== win || e.origin !== origin || e.data !== "PONG") { return; }
        clearInterval(timer);
        window.removeEventListener("message", onMessage);
        win.postMessage({perfetto: {buffer: buffer, title: button.getAttribute("data-title"), fileName: name}},
                        origin);
        say("sent to Perfetto UI");
      }
      window.addEventListener("message", onMessage);
    }
    button.addEventListener("click", function () {
      var origin = button.getAttribute("data-origin"), path = button.getAttribute("data-trace");
      win = window.open(origin + "/", "_blank");  // now, inside the click: pop-up blockers allow it
      var name = path.split("/").pop();
      var read = location.protocol === "file:" ? Promise.reject(new Error("file page"))
        : fetch(path).then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.arrayBuffer(); });
      read.then(function (buffer) { send(buffer, name); }, function () {
        pick.hidden = false;
        say("");
      });
    });
    input.addEventListener("change", function () {
      var file = input.files && input.files[0];
      if (file) { file.arrayBuffer().then(function (buffer) { send(buffer, file.name); }); }
    });
  });
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
})();
