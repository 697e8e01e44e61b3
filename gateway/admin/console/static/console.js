// Sluicegate admin console: the only script, vendored with the package (no CDN, no build step).
// 1. Elements with data-refresh="<url>" (or data-refresh-page: this page's own URL) re-fetch their content every
//    data-refresh-s seconds: the server renders it, this only swaps it in. Paused while the tab is hidden; stopped
//    when the session has ended (the fetch is redirected to the login page).
// 2. Forms with data-confirm="<question>" ask before they submit (delete, revoke, drain, remove).
"use strict";

function refresh(el) {
  const url = el.dataset.refresh || window.location.href;
  const everyMs = 1000 * (parseFloat(el.dataset.refreshS) || 5);
  async function tick() {
    if (document.hidden) {
      setTimeout(tick, everyMs);
      return;
    }
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (!response.ok || response.redirected) {
        el.classList.add("stale");
        return; // logged out or gone: stop, the next navigation shows why
      }
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const same = el.id ? doc.getElementById(el.id) : null;
      el.innerHTML = (same || doc.body).innerHTML;
      el.classList.remove("stale");
    } catch (err) {
      el.classList.add("stale"); // the gateway is unreachable for now: keep trying
    }
    setTimeout(tick, everyMs);
  }
  setTimeout(tick, everyMs);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-refresh], [data-refresh-page]").forEach(refresh);
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
});
