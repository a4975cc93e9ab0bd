// Progressive enhancement only (the pages are complete without it): hovering a legend entry
// dims the other series of that chart. Keyboard and screen-reader users have each chart's table.
(function () {
  "use strict";
  document.querySelectorAll("svg.chart").forEach(function (svg) {
    var series = svg.querySelectorAll(".series");
    function show(name) {
      series.forEach(function (g) {
        g.classList.toggle("dim", name !== null && g.getAttribute("data-series") !== name);
      });
    }
    svg.querySelectorAll(".legend-item").forEach(function (item) {
      var name = item.getAttribute("data-series");
      item.addEventListener("mouseenter", function () { show(name); });
      item.addEventListener("mouseleave", function () { show(null); });
    });
  });
})();
