/* Progressive enhancement only: the page is complete without it. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");
  var all = function () { return document.querySelectorAll("details.finding"); };
  var button = document.getElementById("toggle-all");
  if (button) {
    button.addEventListener("click", function () {
      var open = button.textContent === "Expand all";
      all().forEach(function (d) { d.open = open; });
      button.textContent = open ? "Collapse all" : "Expand all";
    });
  }
  window.addEventListener("beforeprint", function () {
    all().forEach(function (d) { d.open = true; });
  });
})();
