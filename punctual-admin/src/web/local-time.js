// punctual-admin: shows every <time datetime="...Z"> in the viewer's time
// zone (2025-06-01 14:00:03 CEST); its title keeps the time in UTC, and
// without this script the page reads UTC throughout. No build step, no
// dependency.
(function () {
  "use strict";
  function two(n) {
    return (n < 10 ? "0" : "") + n;
  }
  function zone(d) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(d);
      for (var i = 0; i < parts.length; i++) {
        if (parts[i].type === "timeZoneName") return parts[i].value;
      }
    } catch (e) {}
    var off = -d.getTimezoneOffset();
    return "UTC" + (off < 0 ? "−" : "+") + two(Math.floor(Math.abs(off) / 60)) + ":" + two(Math.abs(off) % 60);
  }
  function local(d) {
    return d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) + " " +
      two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds()) + " " + zone(d);
  }
  function rewrite() {
    var times = document.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var t = times[i];
      if (t.hasAttribute("data-local")) continue;
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d.getTime())) continue;
      t.textContent = local(d);
      t.setAttribute("data-local", "");
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", rewrite);
  } else {
    rewrite();
  }
})();
