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
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
})();
