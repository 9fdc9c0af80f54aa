// EchoMQ dashboard: a checkbox with data-select-all="NAME" ticks or clears every
// checkbox named NAME on the page (the dead letters' "select all"). Loaded by src: the
// Content-Security-Policy allows no inline script. The listener sits on the document,
// so it keeps working after htmx swaps the list.
document.addEventListener("change", function (event) {
  var box = event.target;
  if (!box.matches || !box.matches("input[data-select-all]")) { return; }
  var name = box.getAttribute("data-select-all");
  document.querySelectorAll('input[type="checkbox"][name="' + CSS.escape(name) + '"]')
    .forEach(function (one) { one.checked = box.checked; });
});
