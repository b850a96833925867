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

  // ---- the app ---------------------------------------------------------------
  // The app the page shows is in its URL (?app=db, absent: the fleet's
  // default app), so that a link or a reload shows the same app; every
  // API request names it.
  const app = new URLSearchParams(location.search).get("app") || "";
  function api(path, q) {
    q = q || new URLSearchParams();
    if (app) q.set("app", app);
    const qs = q.toString();
    return qs ? path + "?" + qs : path;
  }
  // The link to an app's page.
  function appHref(name) {
    const q = new URLSearchParams(location.search);
    q.set("app", name);
    return "?" + q.toString();
  }

  // The app selector and the all-apps overview: one row per app, its
  // state in a word, target, groups done, agents on the target, failed,
  // and its bad news under it, whichever app the page shows. Both hidden
  // when the fleet has one app.
  let manyApps = false, currentApp = "";
  function renderApps(apps, current) {
    const many = apps.length > 1;
    manyApps = many;
    currentApp = current;
    const pick = $("app-pick"), sel = $("app-select"), card = $("apps-card");
    pick.hidden = !many;
    card.hidden = !many;
    card.dataset.count = apps.length;
    document.body.dataset.app = current || "";
    if (!many) return;
    // Rebuilt only when the apps change: not under an open list.
    const names = apps.map((a) => a.app).join(",");
    if (sel.dataset.apps !== names) {
      sel.dataset.apps = names;
      sel.replaceChildren(...apps.map((a) => {
        const o = el("option", null, a.app + (a.default ? " (default)" : ""));
        o.value = a.app;
        return o;
      }));
    }
    sel.value = current;
    const body = $("apps").tBodies[0];
    const out = document.createDocumentFragment();
    for (const a of apps) {
      const tr = el("tr", "app-row" + (a.app === current ? " current" : ""));
      tr.dataset.app = a.app;
      const state = (a.fleet && a.fleet.state) || "no_plan";
      tr.dataset.state = state;
      const name = el("td", "name");
      const link = el("a", null, a.app);
      link.href = appHref(a.app);
      name.appendChild(link);
      if (a.default) name.appendChild(el("span", "small muted", " default"));
      name.appendChild(el("span", "small muted installer", " " + a.installer));
      const st = el("td", "state");
      const pill = el("span", "fleet-state", (a.fleet && a.fleet.text) || "no plan");
      pill.dataset.state = state.replace(/[^a-z_]/g, "");
      st.appendChild(pill);
      const target = a.target ? (a.start ? a.start + " \u2192 " : "") + a.target : "no plan";
      tr.append(name, st, el("td", "target", target),
        el("td", "num groups-done", a.groups_done + " / " + a.groups),
        el("td", "num on-target", a.on_target + " / " + a.agents),
        el("td", "num failed" + (a.failed > 0 ? " bad" : ""), a.failed));
      out.appendChild(tr);
      // The app shown has its bad news in the banners below: the
      // others' go under their rows, so that no app's halt is out of sight.
      if (a.app !== current && ((a.banners || []).length || a.error)) {
        const nr = el("tr", "app-news");
        nr.dataset.app = a.app;
        const td = el("td");
        td.colSpan = 6;
        for (const b of a.banners || []) {
          const d = el("div", "app-banner banner-" + String(b.kind).replace(/[^a-z_]/g, ""), b.text);
          d.dataset.kind = b.kind;
          if (b.group) d.dataset.group = b.group;
          td.appendChild(d);
        }
        if (a.error) td.appendChild(el("div", "app-banner banner-halt", a.error));
        nr.appendChild(td);
        out.appendChild(nr);
      }
    }
    body.replaceChildren(out);
  }
  $("app-select").addEventListener("change", (e) => { location.search = appHref(e.target.value).slice(1); });

  // An answer that is not the numbers (an app the config does not list):
  // said where the numbers go.
  function renderError(msg) {
    const fs = $("fleet-state");
    fs.dataset.state = "error";
    fs.textContent = "error";
    $("plan-version").textContent = app ? "app " + app : "";
    const ready = $("ready");
    ready.hidden = false;
    ready.textContent = msg;
    const body = $("groups").tBodies[0];
    const tr = el("tr");
    const td = el("td", "muted", msg);
    td.colSpan = 7;
    tr.appendChild(td);
    body.replaceChildren(tr);
  }

  // ---- the rollout -------------------------------------------------------
  function renderStatus(ov) {
    renderApps(ov.apps || [], ov.app || "");
    const h = ov.header;
    $("plan-version").textContent = h ? h.version : "no plan: fleetctl plan set --target VERSION";
    const fs = $("fleet-state");
    const fleet = ov.fleet || { state: "no_plan", text: "no plan" };
    fs.dataset.state = fleet.state;
    fs.textContent = fleet.text;
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
    renderBanners(ov.banners || []);
    const held = new Map();
    for (const g of (ov.status && ov.status.groups) || []) {
      if (g.rollout && g.rollout.held) held.set(g.group || g.name, g.rollout.held);
    }
    renderGroups(ov.rows || [], held);
    renderVersions(ov.versions || []);
    renderReleases(ov.releases || null);
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
    a.title = "fleetctl approve" + (manyApps && currentApp ? " --app " + currentApp : "") + " --group G --reason TEXT";
  }

  // The bad news at the top of the page: a paused or disabled rollout,
  // halted and rolled back groups, quarantined versions. Text only.
  function renderBanners(banners) {
    const box = $("banners");
    const out = document.createDocumentFragment();
    for (const b of banners) {
      const d = el("div", "banner banner-" + String(b.kind).replace(/[^a-z_]/g, ""));
      d.dataset.kind = b.kind;
      if (b.group) d.dataset.group = b.group;
      if (b.version) d.dataset.version = b.version;
      d.appendChild(el("strong", "banner-kind", String(b.kind).replace("_", " ")));
      d.appendChild(el("span", "banner-text", b.text));
      out.appendChild(d);
    }
    box.replaceChildren(out);
    box.dataset.count = banners.length;
  }

  function stateClass(row, held) {
    if (row.halted) return "halted";
    if (row.awaiting_approval) return "awaiting";
    if (held) return "held";
    return (row.raw_state || "none").replace(/[^a-z_]/g, "");
  }

  function renderGroups(rows, heldBy) {
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
      const held = heldBy.get(r.group) || "";
      if (held) tr.dataset.held = "true";
      tr.appendChild(el("td", "name", r.group));
      const st = el("td", "state");
      const badge = el("span", "badge " + stateClass(r, held), held && !r.halted ? r.state + " (held)" : r.state);
      if (held) badge.title = "held: " + held;
      st.appendChild(badge);
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
      // FAILED as fleetctl status prints it: the agents of the group not on
      // the target that rolled back or report an error, the failed counts
      // of the versions below summed. What failure_threshold counts (the
      // failures of this rollout of the target) and tolerates comes after.
      const ftd = el("td", "num failed-cell" + (r.split && r.split.failed > 0 || r.failed_count > 0 || r.halted ? " bad" : ""));
      ftd.appendChild(el("span", "failed-main", r.failed));
      let tip = "agents not on the target that rolled back or report an error";
      if (r.failure_limit !== undefined && r.failure_limit !== null) {
        const limit = Math.floor(r.failure_limit + 1e-9);
        const counted = r.split && r.failed_count === r.split.failed ? "" : r.failed_count + " counted, ";
        ftd.appendChild(el("span", "failed-limit small muted", " (" + counted + "tolerates " + limit + ")"));
        tip += "; failure_threshold counts the failures of this rollout (" + r.failed_count + ") and tolerates " + limit + ": one more halts the group";
      }
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

  // A version's colour says what it is to its group (the controller's
  // role): the target, what the group holds until its turn, another
  // version, nothing installed; its failed agents are drawn apart, in red.
  const roles = ["target", "previous", "other", "none"];
  function roleOf(v) { return roles.includes(v.role) ? v.role : "other"; }

  function renderVersions(groups) {
    const box = $("versions");
    const out = document.createDocumentFragment();
    if (groups.length === 0) out.appendChild(el("p", "muted", "No agents counted yet."));
    for (const g of groups) {
      const row = el("div", "vrow");
      row.dataset.group = g.group;
      row.appendChild(el("span", "vname", g.group));
      // What the release repository says of the group's versions, under
      // its bar.
      const badges = el("div", "vbadges");
      if (g.end_of_life > 0) {
        const b = el("span", "rbadge r-eol", g.end_of_life + (g.end_of_life === 1 ? " host" : " hosts") + " end of life");
        b.dataset.kind = "end_of_life";
        badges.appendChild(b);
      }
      if (g.behind_security > 0) {
        const b = el("span", "rbadge r-security", g.behind_security + (g.behind_security === 1 ? " host" : " hosts") + " behind security release " + g.security_release);
        b.dataset.kind = "behind_security";
        badges.appendChild(b);
      }
      const stack = el("div", "vstack");
      const legend = el("span", "vlegend small");
      const width = (n) => (n / Math.max(g.agents, 1) * 100).toFixed(2) + "%";
      for (const v of g.versions) {
        const role = roleOf(v);
        const failed = v.failed || 0;
        // Red is for the failures of this rollout: not agents on the
        // target (they run it), nor, in a group that has not started on
        // the target, rollbacks from an earlier one (FAILED leaves both out).
        const red = role === "target" || !g.started ? 0 : failed;
        const seg = el("div", "vseg v-" + role);
        seg.dataset.version = v.version;
        seg.dataset.role = role;
        seg.style.width = width(v.count - red);
        seg.title = v.version + " (" + role + "): " + v.count + " agents" + (failed ? ", " + failed + " failed" : "");
        stack.appendChild(seg);
        if (red > 0) {
          const f = el("div", "vseg v-failed");
          f.dataset.version = v.version;
          f.dataset.role = "failed";
          f.style.width = width(red);
          f.title = v.version + ": " + red + " failed" + (g.started ? "" : " (an earlier target: this group has not started on " + g.target + ")");
          stack.appendChild(f);
        }
        const item = el("span", "vitem");
        item.dataset.version = v.version;
        item.dataset.role = role;
        const label = role === "target" ? " (target)" : role === "previous" ? " (held)" : "";
        let text = v.version + label + " " + v.count;
        if (v.end_of_life) text += " (end of life)";
        if (v.security_release) text += " (behind " + v.security_release + ")";
        if (failed) text += " (" + failed + " failed" + (g.started || role === "target" ? "" : " earlier") + ")";
        item.append(el("span", "sw v-" + role), document.createTextNode(text));
        legend.appendChild(item);
      }
      row.append(stack, legend);
      if (badges.childElementCount > 0) row.appendChild(badges);
      out.appendChild(row);
    }
    box.replaceChildren(out);
  }

  // ---- the release repository ----------------------------------------------
  // The app's releases with their flags, and the catalog's age and error.
  // Versions and notes are the repository's data: text only.
  function renderReleases(p) {
    const card = $("releases-card");
    card.hidden = !p;
    if (!p) return;
    let meta = "from " + p.url + ", " + (p.at ? "read " + p.age + " ago" : "never read");
    if (p.targets_version) meta += " (targets v" + p.targets_version + ")";
    if (p.expires) meta += "; metadata expires " + fmtTime(p.expires);
    if (p.skipped) meta += "; " + p.skipped + " targets name no release";
    $("releases-meta").textContent = meta;
    const err = $("releases-error");
    err.hidden = !p.error;
    err.textContent = p.error ? "last read failed " + fmtTime(p.checked) + ": " + p.error + (p.at ? " (the list is from the last good read)" : "") : "";
    card.dataset.error = p.error ? "true" : "false";
    const body = $("releases").tBodies[0];
    const out = document.createDocumentFragment();
    if (p.releases.length === 0) {
      const tr = el("tr");
      const td = el("td", "muted", "No release of this app in the repository.");
      td.colSpan = 5;
      tr.appendChild(td);
      out.appendChild(tr);
    }
    for (const r of p.releases) {
      const tr = el("tr", "release-row");
      tr.dataset.version = r.version;
      tr.appendChild(el("td", "name", r.version));
      const flags = el("td", "flags");
      if (r.security) flags.appendChild(el("span", "rbadge r-security", "security"));
      if (r.end_of_life) flags.appendChild(el("span", "rbadge r-eol", "end of life"));
      tr.appendChild(flags);
      tr.appendChild(el("td", "small muted", (r.platforms || []).join(", ")));
      tr.appendChild(el("td", "num", r.hosts));
      tr.appendChild(el("td", "small release-notes", r.notes || ""));
      out.appendChild(tr);
    }
    body.replaceChildren(out);
  }

  // ---- the timeline --------------------------------------------------------
  const seen = new Set();
  const maxTimeline = 200;
  // Times in UTC, 24-hour, with the zone, as the terminal and the logs
  // say them: "07:03:09 UTC" today, "2026-11-28 23:59:01 UTC" before.
  function fmtTime(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return "";
    const s = d.toISOString(); // 2026-11-29T07:03:09.123Z
    const day = s.slice(0, 10), hms = s.slice(11, 19) + " UTC";
    return day === new Date().toISOString().slice(0, 10) ? hms : day + " " + hms;
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
    const time = el("time", "muted", fmtTime(r.at));
    time.dateTime = r.at || "";
    head.append(time, el("span", "tl-actor", r.actor), el("span", "tl-what", r.what),
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
      const res = await fetch(api("/api/v1/agents", filterQuery()), { headers: { Accept: "application/json" } });
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
        const st = el("td", "agent-state");
        if (a.class === "unreachable") {
          // What it last said is not what it is now: unreachable, since
          // its last heartbeat, and what that said, secondary.
          st.appendChild(el("span", "badge a-unreachable", "unreachable since " + fmtTime(a.last_seen) + " (" + a.seen + " ago)"));
          if (a.last_state) st.appendChild(el("span", "last-state small muted", " last: " + a.last_state));
        } else {
          st.appendChild(el("span", "badge a-" + String(a.class).replace(/[^a-z_]/g, ""), a.state));
        }
        if (a.error) {
          st.title = a.error;
          st.appendChild(el("div", "agent-error small", a.error));
        }
        if (a.output) {
          // The app's own last lines (cut by the agent and the controller;
          // cut again here): text, in a box of its own.
          const lines = String(a.output).slice(0, 4096).split("\n").slice(-10).join("\n");
          const det = el("details", "agent-output");
          det.append(el("summary", "small muted", "output"), el("pre", "output", lines));
          st.appendChild(det);
        }
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
    const es = new EventSource(api("/api/v1/stream"));
    es.addEventListener("open", () => setLive("open", "connected"));
    es.addEventListener("status", (e) => {
      gotStatus = true;
      setLive("open", "connected");
      renderStatus(JSON.parse(e.data));
      // the agents table follows the numbers, at most every 5s
      if (Date.now() - lastAgentsFetch > 5000 && !document.hidden) agentsSoon(0);
    });
    es.addEventListener("timeline", (e) => addTimeline(JSON.parse(e.data)));
    es.addEventListener("error", () => {
      setLive("closed", "reconnecting…");
      // A stream refused (an unknown app, too many pages) is not tried
      // again by the browser: say why, from the same answer as JSON.
      if (es.readyState === EventSource.CLOSED) {
        setLive("closed", "disconnected");
        loadStatus();
      }
    });
  }
  function loadStatus() {
    fetch(api("/api/v1/status")).then((r) => r.json().then((body) => {
      if (r.ok) renderStatus(body);
      else renderError(body.error || r.statusText);
    })).catch(() => {});
  }

  fetch(api("/api/v1/timeline")).then((r) => r.ok ? r.json() : []).then((rows) => rows.forEach(addTimeline)).catch(() => {});
  // The stream sends the numbers at once; ask for them only if it does not
  // (a proxy that buffers event streams).
  setTimeout(() => {
    if (!gotStatus) loadStatus();
  }, 2000);
  loadAgents();
  connect();
})();
