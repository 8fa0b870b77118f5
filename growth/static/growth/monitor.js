/* The campaign monitor: the campaign list and the campaign page poll their JSON
   (growth/admin/monitor.py) and update the progress already on the page, without a reload.
   Fast while a listed campaign is sending or approved, slow otherwise (a campaign that starts
   still shows); backs off after errors; stops while the tab is hidden. */
(function () {
  "use strict";

  var FAST = 5000, SLOW = 30000, MAX_BACKOFF = 300000;

  // --- the markup of growth/templates/growth/admin/progress.html -----------------------------

  function updateProgress(progress, c) {
    var bar = progress.querySelector(".growth-bar");
    if (bar) {
      bar.setAttribute("aria-valuemax", c.total);
      bar.setAttribute("aria-valuenow", c.sent);
      bar.title = c.percent.toFixed(1) + "% sent";
      var fill = bar.querySelector("span");
      if (fill) { fill.style.width = c.percent + "%"; }
    }
    var link = progress.querySelector(".growth-progress__label a");
    if (link) {
      link.textContent = c.sent + " / " + c.total + " sent";
      while (link.nextSibling) { link.parentNode.removeChild(link.nextSibling); }
      if (c.total) { link.after(" (" + c.percent.toFixed(1) + "%)"); }
    }
    updateCounts(progress, c.counts);
  }

  function updateCounts(progress, counts) {
    var compact = progress.classList.contains("growth-progress--compact");
    var shown = counts.filter(function (pair) { return pair[1] || !compact; });
    var list = progress.querySelector(".growth-counts");
    if (!shown.length) {
      if (list) { list.remove(); }
      return;
    }
    if (!list) {
      list = document.createElement("ul");
      list.className = "growth-counts";
      progress.appendChild(list);
    }
    list.replaceChildren.apply(list, shown.map(function (pair) {
      var item = document.createElement("li"), count = document.createElement("b");
      item.className = "growth-count growth-count--" + pair[0];
      count.textContent = pair[1];
      item.append(pair[0] + " ", count);
      return item;
    }));
  }

  function setText(element, text) {
    if (element && element.textContent !== text) { element.textContent = text; }
  }

  // --- what each page polls and updates --------------------------------------------------------

  function campaignIdOfRow(row) {
    var tagged = row.querySelector("[data-campaign-id]");
    if (tagged) { return tagged.getAttribute("data-campaign-id"); }
    var box = row.querySelector("input[name=_selected_action]");
    if (box) { return box.value; }
    var link = row.querySelector("th a[href], td a[href]");
    var found = link && /\/(\d+)\/change\/$/.exec(link.getAttribute("href"));
    return found ? found[1] : null;
  }

  function listPage(panel) {
    var rows = {};
    document.querySelectorAll("#result_list tbody tr").forEach(function (row) {
      var id = campaignIdOfRow(row), progress = row.querySelector(".growth-progress");
      if (id && progress) { rows[id] = {progress: progress, state: row.querySelector("td.field-state")}; }
    });
    var ids = Object.keys(rows);
    if (!ids.length) { return null; }
    return {
      url: panel.getAttribute("data-monitor-list-url") + "?ids=" + ids.join(","),
      note: panel.querySelector("[data-monitor=note]"),
      firstDelay: FAST,
      apply: function (data) {
        ids.forEach(function (id) {
          var c = data.campaigns[id], row = rows[id];
          if (!c) { return; }
          updateProgress(row.progress, c);
          // a plain status only: a pause reason's markup stays as the page rendered it
          if (row.state && !row.state.children.length) { setText(row.state, c.status_display); }
        });
      }
    };
  }

  function campaignPage(panel) {
    var id = panel.getAttribute("data-campaign-id"), status = panel.getAttribute("data-status");
    var chart = panel.querySelector("[data-monitor=chart]"), drawn = null;
    return {
      url: panel.getAttribute("data-monitor-url"),
      note: panel.querySelector("[data-monitor=note]"),
      firstDelay: panel.getAttribute("data-active") === "true" ? FAST : SLOW,
      apply: function (data) {
        var c = data.campaigns[id];
        if (!c) { return; }
        document.querySelectorAll(".growth-progress").forEach(function (p) { updateProgress(p, c); });
        setText(document.querySelector(".field-status .readonly"), c.status_display);
        setText(panel.querySelector("[data-monitor=status_display]"), c.status_display);
        ["rate", "started", "duration", "eta", "window"].forEach(function (name) {
          setText(panel.querySelector("[data-monitor=" + name + "]"), c.display[name]);
        });
        if (chart && c.chart !== drawn) {
          chart.innerHTML = c.chart;  // rendered, and escaped, by the server
          drawn = c.chart;
        }
        if (c.status !== status) {
          return "Now " + c.status_display.toLowerCase() + ": reload the page for its actions.";
        }
      }
    };
  }

  // --- polling -----------------------------------------------------------------------------------

  function poll(page) {
    var timer = null, failures = 0, busy = false, delay = page.firstDelay;

    function schedule(ms) {
      clearTimeout(timer);
      delay = ms;
      if (document.visibilityState !== "hidden") { timer = setTimeout(run, ms); }
    }

    function run() {
      if (busy) { return; }
      busy = true;
      fetch(page.url, {credentials: "same-origin", redirect: "error", headers: {Accept: "application/json"}})
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(function (data) {
          failures = 0;
          var said = page.apply(data);
          var every = data.active ? FAST : SLOW;
          setText(page.note, said || ("Updated " + new Date().toLocaleTimeString() + "; every " +
                                      every / 1000 + " s" + (data.active ? "." : " while nothing is sending.")));
          schedule(every);
        })
        .catch(function () {
          failures += 1;
          var wait = Math.min(FAST * Math.pow(2, failures), MAX_BACKOFF);
          setText(page.note, "Live updates failed; trying again in " + Math.round(wait / 1000) + " s.");
          schedule(wait);
        })
        .finally(function () { busy = false; });
    }

    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "hidden") {
        clearTimeout(timer);
      } else if (!failures) {
        run();  // back on the tab: fresh figures at once
      } else {
        schedule(delay);
      }
    });
    schedule(page.firstDelay);
  }

  function start() {
    var panel = document.querySelector(".growth-monitor[data-monitor-url]");
    var page = panel ? campaignPage(panel) : null;
    if (!page) {
      panel = document.querySelector(".growth-monitor[data-monitor-list-url]");
      page = panel ? listPage(panel) : null;
    }
    if (page && window.fetch) { poll(page); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
