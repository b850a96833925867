// fleetwave dashboard. Everything it shows comes from the controller's
// /api/v1 as JSON and is put on the page as text (textContent), never as
// HTML: hostnames and errors come from the hosts.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };

  // ---- the rollout -------------------------------------------------------
  function renderStatus(ov) {
    const h = ov.header;
    $("plan-version").textContent = h ? h.version : "no plan: fleetctl plan set --target VERSION";
    $("plan-mode").textContent = h ? h.mode : "";
    $("plan-holds").textContent = h ? h.holds : "-";
    $("plan-strategy").textContent = h ? h.strategy : "-";
    $("plan-schedule").textContent = h ? h.schedule : "-";
    $("plan-critical").textContent = h ? h.critical : "-";
    $("plan-agents").textContent = ov.agents + " in the inventory";
    $("controller").textContent = "controller " + ov.controller + (ov.leader ? " (leader)" : " (not leading)");
    const ready = $("ready");
    ready.hidden = !ov.ready;
    ready.textContent = ov.ready ? "numbers may be old: " + ov.ready : "";
    renderApprovals(ov.pending_approvals || []);
    renderGroups(ov.rows || []);
    renderVersions(ov.versions || []);
    mark("fleetwave-status");
  }

  // User Timing marks of the first paint of each part (the browser's
  // performance panel shows them; the benchmark reads them).
  const marked = new Set();
  function mark(name) {
    if (marked.has(name) || !window.performance || !performance.mark) return;
    marked.add(name);
    performance.mark(name);
  }

  // Groups awaiting an operator's approval, in the header: they wait for
  // someone to run fleetctl approve.
  function renderApprovals(pending) {
    const a = $("approvals");
    a.hidden = pending.length === 0;
    a.dataset.count = pending.length;
    a.textContent = pending.length === 0 ? "" : (pending.length === 1 ? "1 approval pending: " : pending.length + " approvals pending: ") +
      pending.map((p) => p.group + " (" + p.stage.replace("_", " ") + ", " + p.for + ")").join(", ");
    a.title = "fleetctl approve --group G --reason TEXT";
  }

  function stateClass(row) {
    if (row.halted) return "halted";
    if (row.awaiting_approval) return "awaiting";
    return (row.raw_state || "none").replace(/[^a-z_]/g, "");
  }

  function renderGroups(rows) {
    const body = $("groups").tBodies[0];
    const out = document.createDocumentFragment();
    if (rows.length === 0) {
      const tr = el("tr");
      const td = el("td", "muted", "No rollout yet. Set a plan: fleetctl plan set --target VERSION");
      td.colSpan = 7;
      tr.appendChild(td);
      out.appendChild(tr);
    }
    for (const r of rows) {
      const tr = el("tr", "group-row");
      tr.dataset.group = r.group;
      tr.dataset.state = r.raw_state || "";
      tr.dataset.halted = r.halted ? "true" : "false";
      if (r.awaiting_approval) tr.dataset.awaiting = r.awaiting_approval;
      tr.appendChild(el("td", "name", r.group));
      const st = el("td", "state");
      st.appendChild(el("span", "badge " + stateClass(r), r.state));
      if (r.waiting_until) st.appendChild(el("div", "small muted next-start", "next start " + fmtTime(r.waiting_until)));
      tr.appendChild(st);
      const bar = el("td", "bar-col");
      const track = el("div", "progress");
      track.dataset.allowed = r.allowed_fraction;
      track.dataset.updated = r.updated_fraction;
      track.setAttribute("role", "progressbar");
      track.setAttribute("aria-valuenow", Math.floor(r.updated_fraction * 100));
      track.title = "allowed " + r.allowed + ", updated " + r.updated;
      const allowed = el("div", "allowed");
      allowed.style.width = (r.allowed_fraction * 100).toFixed(1) + "%";
      const updated = el("div", "updated");
      updated.style.width = (r.updated_fraction * 100).toFixed(1) + "%";
      track.append(allowed, updated);
      bar.appendChild(track);
      bar.appendChild(el("span", "allowed-text muted small", "allowed " + r.allowed));
      tr.appendChild(bar);
      tr.appendChild(el("td", "num updated-cell", r.updated));
      let inflight = r.updating;
      if (r.in_flight_bound) inflight += " / " + r.in_flight_bound;
      tr.appendChild(el("td", "num", inflight));
      let failed = r.failed;
      let tip = "agents not on the target that rolled back or report an error";
      if (r.failure_limit !== undefined && r.failure_limit !== null) {
        // the group halts when more than failure_limit fail
        failed = r.failed_count + " / " + Math.floor(r.failure_limit + 1e-9);
        tip = "failed agents counted against failure_threshold / how many it tolerates (one more halts the group)";
      }
      const ftd = el("td", "num" + (r.failed_count > 0 || r.halted ? " bad" : ""), failed);
      ftd.title = tip;
      tr.appendChild(ftd);
      tr.appendChild(el("td", "num muted", r.since));
      out.appendChild(tr);
      for (const sr of r.sites || []) out.appendChild(siteRow(r.group, sr));
      if (r.notes && r.notes.length) {
        const nr = el("tr", "notes-row");
        nr.dataset.group = r.group;
        const td = el("td", "notes");
        td.colSpan = 7;
        for (const n of r.notes) {
          const halt = n.startsWith("halted ");
          const approval = n.startsWith("awaiting approval ");
          // one line per metric analysis check (view.AnalysisNotes)
          const check = n.startsWith("check ");
          const p = el("div", halt ? "note halt-reason" : approval ? "note approval-note" : check ? "note check" : "note", n);
          td.appendChild(p);
        }
        nr.appendChild(td);
        out.appendChild(nr);
      }
    }
    body.replaceChildren(out);
  }

  // One site's counts under its group's row (fleetctl status, "Agents by
  // site").
  function siteRow(group, sr) {
    const tr = el("tr", "site-row");
    tr.dataset.group = group;
    tr.dataset.site = sr.site;
    tr.appendChild(el("td", "name site-name", "\u21b3 " + sr.site));
    tr.appendChild(el("td", "small muted", sr.unreachable !== "0" ? sr.unreachable + " unreachable" : ""));
    const bar = el("td", "bar-col");
    const track = el("div", "progress");
    track.dataset.updated = sr.updated_fraction;
    track.title = sr.agents + " agents at site " + sr.site + ", updated " + sr.updated;
    const updated = el("div", "updated");
    updated.style.width = (sr.updated_fraction * 100).toFixed(1) + "%";
    track.appendChild(updated);
    bar.appendChild(track);
    tr.appendChild(bar);
    tr.appendChild(el("td", "num updated-cell", sr.updated));
    tr.appendChild(el("td", "num", sr.updating));
    tr.appendChild(el("td", "num" + (sr.failed !== "0" ? " bad" : ""), sr.failed));
    tr.appendChild(el("td", "num muted", ""));
    return tr;
  }

  const palette = ["#2f7ed8", "#8bbc21", "#f28f43", "#77a1e5", "#c42525", "#a6c96a", "#910000", "#492970", "#0d233a", "#1aadce"];
  const versionColors = new Map();
  function colorOf(v) {
    if (v === "none") return "#9aa3ad";
    if (!versionColors.has(v)) versionColors.set(v, palette[versionColors.size % palette.length]);
    return versionColors.get(v);
  }

  function renderVersions(groups) {
    const box = $("versions");
    const out = document.createDocumentFragment();
    if (groups.length === 0) out.appendChild(el("p", "muted", "No agents counted yet."));
    for (const g of groups) {
      const row = el("div", "vrow");
      row.dataset.group = g.group;
      row.appendChild(el("span", "vname", g.group));
      const stack = el("div", "vstack");
      const legend = el("span", "vlegend small");
      for (const v of g.versions) {
        const seg = el("div", "vseg");
        seg.style.width = (v.count / Math.max(g.agents, 1) * 100).toFixed(2) + "%";
        seg.style.background = colorOf(v.version);
        seg.title = v.version + ": " + v.count + " agents" + (v.failed ? ", " + v.failed + " failed" : "");
        stack.appendChild(seg);
        const item = el("span", "vitem");
        const sw = el("span", "sw");
        sw.style.background = colorOf(v.version);
        item.append(sw, document.createTextNode(v.version + " " + v.count + (v.failed ? " (" + v.failed + " failed)" : "")));
        legend.appendChild(item);
      }
      row.append(stack, legend);
      out.appendChild(row);
    }
    box.replaceChildren(out);
  }

  // ---- the timeline --------------------------------------------------------
  const seen = new Set();
  const maxTimeline = 200;
  function fmtTime(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return "";
    const today = new Date();
    const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    return d.toDateString() === today.toDateString() ? hm : d.toLocaleDateString() + " " + hm;
  }
  // An entry is named by its stream and sequence (r.id: FLEET_AUDIT-7,
  // FLEET_EVENTS-42), and ordered by the time the bus stored it.
  function storedMs(r) { const t = Date.parse(r.stored || r.at); return isNaN(t) ? 0 : t; }
  function newer(a, b) {
    if (a.ms !== b.ms) return a.ms > b.ms;
    if (a.stream !== b.stream) return a.stream > b.stream; // FLEET_EVENTS after FLEET_AUDIT
    return a.seq > b.seq;
  }
  function addTimeline(r) {
    const id = r.id || String(r.seq);
    if (seen.has(id)) return;
    seen.add(id);
    const li = el("li", "tl " + (r.kind === "audit" ? "tl-audit" : "tl-event") + (r.what === "halt" ? " tl-halt" : ""));
    li.dataset.seq = r.seq;
    li.dataset.ms = storedMs(r);
    li.dataset.stream = r.stream || "";
    li.dataset.kind = r.kind;
    li.dataset.what = r.what;
    li.dataset.group = r.group || "";
    const head = el("div", "tl-head");
    head.append(el("time", "muted", fmtTime(r.at)), el("span", "tl-actor", r.actor), el("span", "tl-what", r.what),
      el("span", "tl-group", r.group || "(fleet)"));
    li.appendChild(head);
    if (r.change) li.appendChild(el("div", "tl-change", r.change));
    if (r.reason) li.appendChild(el("div", "tl-reason", r.reason));
    const list = $("timeline");
    // newest first, in the order the bus stored them
    let before = null;
    const me = { ms: storedMs(r), stream: r.stream || "", seq: Number(r.seq) };
    for (const c of list.children) {
      if (newer(me, { ms: Number(c.dataset.ms), stream: c.dataset.stream, seq: Number(c.dataset.seq) })) { before = c; break; }
    }
    list.insertBefore(li, before);
    // At most maxTimeline of each kind: a flood of events never pushes the
    // operators' records off the page.
    const ofKind = list.querySelectorAll('li[data-kind="' + (r.kind === "audit" ? "audit" : "event") + '"]');
    for (let i = ofKind.length - 1; i >= maxTimeline; i--) ofKind[i].remove();
  }

  // ---- the agents table -----------------------------------------------------
  let page = 1, pages = 1, agentsTimer = null, lastAgentsFetch = 0, gotStatus = false;
  function filterQuery() {
    const q = new URLSearchParams();
    const add = (k, v) => { if (v) q.set(k, v); };
    add("group", $("f-group").value);
    add("version", $("f-version").value);
    add("state", $("f-state").value);
    add("q", $("f-q").value.trim());
    q.set("page", page);
    return q;
  }
  function setOptions(sel, values) {
    const cur = sel.value;
    const keep = [sel.options[0]];
    for (const v of values) {
      const o = el("option", null, v);
      o.value = v;
      keep.push(o);
    }
    if (cur && !values.includes(cur)) {
      const o = el("option", null, cur);
      o.value = cur;
      keep.push(o);
    }
    sel.replaceChildren(...keep);
    sel.value = cur;
  }
  async function loadAgents() {
    lastAgentsFetch = Date.now();
    const table = $("agents");
    table.dataset.loading = "true";
    try {
      const res = await fetch("/api/v1/agents?" + filterQuery().toString(), { headers: { Accept: "application/json" } });
      const body = await res.json();
      if (!res.ok) throw new Error(body.error || res.statusText);
      page = body.page;
      pages = body.pages;
      setOptions($("f-group"), body.groups || []);
      setOptions($("f-version"), body.versions || []);
      const out = document.createDocumentFragment();
      for (const a of body.agents) {
        const tr = el("tr");
        tr.dataset.agent = a.id;
        tr.dataset.class = a.class;
        tr.append(el("td", "mono", a.id), el("td", null, a.group), el("td", null, a.hostname), el("td", null, a.version));
        const st = el("td");
        st.appendChild(el("span", "badge a-" + a.class, a.state));
        if (a.error) st.title = a.error;
        tr.append(st, el("td", "num muted", a.seen + " ago"));
        out.appendChild(tr);
      }
      if (body.agents.length === 0) {
        const tr = el("tr");
        const td = el("td", "muted", "No agents match.");
        td.colSpan = 6;
        tr.appendChild(td);
        out.appendChild(tr);
      }
      table.tBodies[0].replaceChildren(out);
      $("agents-total").textContent = body.total + (body.total === 1 ? " agent" : " agents");
      $("page-info").textContent = "page " + body.page + " of " + body.pages;
      $("prev").disabled = body.page <= 1;
      $("next").disabled = body.page >= body.pages;
      table.dataset.total = body.total;
      mark("fleetwave-agents");
    } catch (e) {
      $("agents-total").textContent = "cannot load the agents: " + e.message;
    } finally {
      table.dataset.loading = "false";
    }
  }
  function agentsSoon(delay) {
    clearTimeout(agentsTimer);
    agentsTimer = setTimeout(loadAgents, delay);
  }
  for (const id of ["f-group", "f-version", "f-state"]) {
    $(id).addEventListener("change", () => { page = 1; agentsSoon(0); });
  }
  $("f-q").addEventListener("input", () => { page = 1; agentsSoon(250); });
  $("agent-filters").addEventListener("submit", (e) => { e.preventDefault(); page = 1; agentsSoon(0); });
  $("prev").addEventListener("click", () => { if (page > 1) { page--; agentsSoon(0); } });
  $("next").addEventListener("click", () => { if (page < pages) { page++; agentsSoon(0); } });

  // ---- live updates ---------------------------------------------------------
  function setLive(state, text) {
    const l = $("live");
    l.dataset.state = state;
    l.textContent = text;
  }
  function connect() {
    const es = new EventSource("/api/v1/stream");
    es.addEventListener("open", () => setLive("open", "live"));
    es.addEventListener("status", (e) => {
      gotStatus = true;
      setLive("open", "live");
      renderStatus(JSON.parse(e.data));
      // the agents table follows the numbers, at most every 5s
      if (Date.now() - lastAgentsFetch > 5000 && !document.hidden) agentsSoon(0);
    });
    es.addEventListener("timeline", (e) => addTimeline(JSON.parse(e.data)));
    es.addEventListener("error", () => setLive("closed", "reconnecting…"));
  }

  fetch("/api/v1/timeline").then((r) => r.ok ? r.json() : []).then((rows) => rows.forEach(addTimeline)).catch(() => {});
  // The stream sends the numbers at once; ask for them only if it does not
  // (a proxy that buffers event streams).
  setTimeout(() => {
    if (!gotStatus) fetch("/api/v1/status").then((r) => r.json()).then(renderStatus).catch(() => {});
  }, 2000);
  loadAgents();
  connect();
})();
