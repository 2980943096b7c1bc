// Live counters: polls the console's JSON and updates every [data-counter] element in place.
(function () {
  async function refresh() {
    try {
      const r = await fetch("/console/counters.json", { credentials: "same-origin" });
      if (!r.ok) return;
      const c = await r.json();
      document.querySelectorAll("[data-counter]").forEach(function (el) {
        const v = c[el.dataset.counter];
        if (v !== undefined) el.textContent = String(v);
      });
    } catch (e) { /* the next poll tries again */ }
  }
  refresh();
  setInterval(refresh, 1000);
})();
