// The runs list kept up to date: each run the server records is added at the top, as the
// server renders it (textContent only: nothing from a run is read as HTML).
(function () {
  "use strict";
  var body = document.getElementById("runs");
  if (!body || body.dataset.live !== "on" || !window.EventSource) {
    return;
  }
  var cell = function (row, text, className) {
    var td = document.createElement("td");
    if (className) {
      td.className = className;
    }
    td.textContent = text;
    row.appendChild(td);
    return td;
  };
  var stream = new EventSource("/console/stream");
  stream.addEventListener("end", function (message) {
    var run = JSON.parse(message.data);
    var row = document.createElement("tr");
    row.className = "status-" + run.status + " new";
    var started = cell(row, "");
    var link = document.createElement("a");
    link.href = "/console/runs/" + encodeURIComponent(run.id);
    link.textContent = run.started;
    started.appendChild(link);
    cell(row, run.status);
    cell(row, run.door);
    cell(row, run.skill);
    cell(row, run.principal);
    cell(row, (run.durationMs || 0).toFixed(1), "num");
    body.insertBefore(row, body.firstChild);
    var empty = document.getElementById("no-runs");
    if (empty) {
      empty.remove();
    }
  });
})();
