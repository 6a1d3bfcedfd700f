// nika-brain console: live updates from the bus (server-sent events), no reload, no framework.
(function () {
  "use strict";
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const page = document.body.dataset.page;
  const live = document.getElementById("live");
  const kernelPage = (document.querySelector("[data-kernel-page]") || {dataset: {}}).dataset.kernelPage;
  window.nikaConsole = {events: 0, refreshes: 0, lastEvent: null};

  // Confirmation of every form that asks for one (kernel actions, rejections, spawns).
  document.addEventListener("submit", function (ev) {
    const form = ev.target;
    const btn = ev.submitter;
    const ask = (btn && btn.dataset.confirm) || form.dataset.confirm;
    if (ask && !window.confirm(ask)) ev.preventDefault();
  });

  // Ages ("12s", "3m") tick without a request.
  function ageOf(iso) {
    const t = Date.parse(iso);
    if (isNaN(t)) return "";
    let s = Math.max(0, Math.round((Date.now() - t) / 1000));
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d) return d + "d" + (h ? h + "h" : "");
    if (h) return h + "h" + (m ? m + "m" : "");
    if (m) return m + "m";
    return s + "s";
  }
  function tick() {
    document.querySelectorAll(".age[data-at]").forEach(function (el) {
      if (el.dataset.at) el.textContent = ageOf(el.dataset.at);
    });
  }
  setInterval(tick, 5000);

  // A heartbeat updates its kernel's row in place.
  function heartbeat(msg) {
    const row = document.querySelector('tr[data-kernel="' + CSS.escape(msg.kernel || "") + '"]');
    if (!row) return false;
    const at = row.querySelector(".hb-at");
    if (at) { at.textContent = String(msg.at || "").slice(11, 19); at.title = msg.at; }
    const age = row.querySelector(".hb .age");
    if (age) { age.dataset.at = msg.at; age.textContent = ageOf(msg.at); }
    const hb = row.querySelector(".hb");
    if (hb) { hb.classList.remove("flash-new"); void hb.offsetWidth; hb.classList.add("flash-new"); }
    if (msg.context_pct !== null && msg.context_pct !== undefined) {
      const pct = Math.max(0, Math.min(100, Number(msg.context_pct)));
      const fill = row.querySelector(".fill");
      if (fill) { fill.style.width = pct + "%"; fill.classList.toggle("high", pct > 70); }
      const label = row.querySelector(".pct");
      if (label) label.textContent = Math.round(pct) + "%";
    }
    const q = row.querySelector(".queue");
    if (q && msg.queue_depth !== undefined) q.textContent = msg.queue_depth;
    const st = row.querySelector(".state");
    if (st && (st.textContent === "stale" || st.textContent === "alive")) {
      st.textContent = "alive"; st.className = "state s-alive";
    }
    return true;
  }

  function signal(s) {
    const list = document.getElementById("signals");
    if (!list) return;
    const li = document.createElement("li");
    li.className = "new";
    const parts = [["at", (s.at || "").slice(11, 19)], ["kind k-" + s.kind, s.kind]];
    parts.forEach(function (p) {
      const span = document.createElement("span"); span.className = p[0]; span.textContent = p[1];
      li.appendChild(span); li.appendChild(document.createTextNode(" "));
    });
    if (s.kernel) {
      const a = document.createElement("a"); a.href = "/kernels/" + encodeURIComponent(s.kernel);
      a.textContent = s.kernel; li.appendChild(a); li.appendChild(document.createTextNode(" "));
    }
    const line = document.createElement("span"); line.className = "line";
    line.textContent = (s.workflow ? s.workflow + " " : "") + (s.line || "");
    li.appendChild(line);
    list.insertBefore(li, list.firstChild);
    while (list.children.length > 50) list.removeChild(list.lastChild);
  }

  // Anything else (a gate opened or decided, a kernel spawned or dead, a step done): the live
  // sections are fetched again and swapped in place (the page itself is not reloaded).
  let pending = null;
  function refresh() {
    if (pending) return;
    pending = setTimeout(function () {
      pending = null;
      fetch(location.pathname + location.search, {credentials: "same-origin"}).then(function (r) {
        return r.ok ? r.text() : null;
      }).then(function (html) {
        if (!html) return;
        const doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live][id]").forEach(function (el) {
          if (el.contains(document.activeElement) && document.activeElement.tagName === "INPUT" &&
              document.activeElement.value) return;  // the operator is typing a note here
          const fresh = doc.getElementById(el.id);
          if (fresh) el.replaceWith(document.importNode(fresh, true));
        });
        const badge = doc.getElementById("pending-count");
        const mine = document.getElementById("pending-count");
        if (badge && mine) mine.replaceWith(document.importNode(badge, true));
        window.nikaConsole.refreshes += 1;
        tick();
      });
    }, 250);
  }

  function connect() {
    const es = new EventSource("/events");
    es.addEventListener("hello", function () { live.className = "live on"; });
    es.onmessage = function (ev) {
      const data = JSON.parse(ev.data);
      window.nikaConsole.events += 1;
      if (data.event === "bus") {
        live.className = data.ok ? "live on" : "live off";
        live.title = data.ok ? "live updates from the bus" : "bus: " + data.error;
        return;
      }
      const s = data.summary, msg = data.message;
      window.nikaConsole.lastEvent = {kind: s.kind, kernel: s.kernel, at: s.at, received: Date.now()};
      if (s.kind !== "heartbeat") signal(s);
      if (s.kind === "heartbeat") {
        const found = heartbeat(msg);
        if (!found && page === "overview") refresh();
        if (kernelPage && s.kernel === kernelPage) refresh();
      } else {
        refresh();
      }
    };
    es.onerror = function () { live.className = "live off"; };
  }
  connect();

  // The kernel page's vault stats come after the page (the vault store may take a moment to open).
  const vault = document.getElementById("vault-stats");
  if (vault) {
    fetch(vault.dataset.src, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (d) {
      if (d.error) { vault.textContent = d.error; return; }
      const k = (d.kernels || {})[kernelPage];
      vault.textContent = k ? (k.records + " records (" + k.live + " live, " + k.super + " super-chunks, " +
        k.duplicates_dropped + " duplicates dropped, " + (k.summaries || 0) + " summaries)") :
        "no records (" + d.store + " store)";
    }).catch(function () { vault.textContent = "vault stats unavailable"; });
  }
  window.nikaConsole.csrf = csrf;
})();
