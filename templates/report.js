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
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
})();
