document.querySelectorAll(".slider").forEach(function (box) {
  var range = box.querySelector("input[type=range]"), before = box.querySelector("img.before"),
      line = box.querySelector(".line"), diff = box.querySelector("input.diff");
  function place() {
    before.style.clipPath = "inset(0 " + (100 - range.value) + "% 0 0)";
    line.style.left = range.value + "%";
  }
  range.addEventListener("input", place);
  diff.addEventListener("change", function () {
    before.src = diff.checked ? before.dataset.diff : before.dataset.picture;
  });
  place();
});
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    function sort() {
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var up = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      function key(r) {
        var t = r.cells[col] ? r.cells[col].textContent.trim() : "", n = parseFloat(t.replace(/[%x\u00d7]/g, ""));
        return isNaN(n) ? t : n;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b), c = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0)
          : (typeof x === "number" ? -1 : 1);
        return up ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    }
    th.addEventListener("click", sort);
    th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); } });
  });
});
