// Millstream's web UI: one page over the JobManager's REST API (Flink's paths), hash routes,
// refreshed every `refresh-interval` ms of GET /config (web.refresh-interval). Vanilla JS, no build step. Elements carry ids, classes and data-
// attributes for tests (e.g. `.vertex[data-status]`).
"use strict";

const TOKEN_KEY = "millstream.rest.token";
const TERMINAL = new Set(["FINISHED", "FAILED", "CANCELED", "CANCELLED"]);
const SVG_NS = "http://www.w3.org/2000/svg";
let generation = 0;

class Unauthorized extends Error {}

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v); else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function s(tag, attrs, text) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = String(text);
  return el;
}

async function api(path, method, payload) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  const init = { method: method || "GET", headers };
  if (payload !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(payload);
  }
  const response = await fetch(path, init);
  if (response.status === 401 || response.status === 403) {
    askForToken(response.status === 403 ? "That token is not the client token." : null);
    throw new Unauthorized();
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = new Error((body.errors && body.errors.join("; ")) || response.statusText);
    err.status = response.status;
    throw err;
  }
  return body;
}

// A text path (a log's tail); errors still come as JSON.
async function apiText(path) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  const response = await fetch(path, { headers });
  if (response.status === 401 || response.status === 403) {
    askForToken(response.status === 403 ? "That token is not the client token." : null);
    throw new Unauthorized();
  }
  const text = await response.text();
  if (!response.ok) {
    let message = response.statusText;
    try { message = JSON.parse(text).errors.join("; "); } catch (_) { /* not JSON */ }
    const err = new Error(message);
    err.status = response.status;
    throw err;
  }
  return text;
}

function askForToken(note) {
  const form = document.getElementById("token-form");
  if (!form.hidden) return;
  form.hidden = false;
  if (note) showError(note);
  document.getElementById("token-input").focus();
}

function showError(message) {
  const el = document.getElementById("error");
  el.hidden = !message;
  el.textContent = message || "";
}

function fmtDuration(ms) {
  if (ms === undefined || ms === null || ms < 0) return "-";
  const sec = Math.floor(ms / 1000), m = Math.floor(sec / 60), hr = Math.floor(m / 60);
  if (hr) return `${hr}h ${m % 60}m ${sec % 60}s`;
  if (m) return `${m}m ${sec % 60}s`;
  return `${(ms / 1000).toFixed(1)}s`;
}

function fmtTime(ms) {
  return ms && ms > 0 ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "-";
}

function stateSpan(state, id) {
  return h("span", { class: `state state-${state}`, id, "data-state": state }, state);
}

function stat(field, label, value) {
  return h("div", { class: "stat", "data-field": field }, h("span", { class: "value" }, value), label);
}

// ---- pages ---------------------------------------------------------------------------------

function jobsTable(jobs) {
  const rows = jobs
    .slice()
    .sort((a, b) => b["start-time"] - a["start-time"])
    .map((j) => h("tr", { class: "job-row", "data-jid": j.jid, "data-state": j.state },
      h("td", {}, h("a", { href: `#/jobs/${j.jid}`, class: "job-link" }, j.name)),
      h("td", {}, stateSpan(j.state)),
      h("td", {}, fmtTime(j["start-time"])),
      h("td", {}, fmtDuration(j.duration)),
      h("td", {}, `${j.tasks.finished}/${j.tasks.total}`)));
  return h("table", { id: "jobs-table" },
    h("thead", {}, h("tr", {}, ["Name", "State", "Start", "Duration", "Tasks finished"].map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 5 }, "No jobs."))));
}

async function overviewPage() {
  const [o, jobs] = await Promise.all([api("/overview"), api("/jobs/overview")]);
  document.getElementById("version").textContent = `version ${o["flink-version"]}`;
  return h("section", { id: "overview" },
    h("h2", {}, "Cluster overview"),
    h("div", { class: "stats" },
      stat("taskmanagers", "TaskManagers", o.taskmanagers),
      stat("slots-total", "Slots total", o["slots-total"]),
      stat("slots-available", "Slots available", o["slots-available"]),
      stat("jobs-running", "Jobs running", o["jobs-running"]),
      stat("jobs-finished", "Jobs finished", o["jobs-finished"]),
      stat("jobs-cancelled", "Jobs canceled", o["jobs-cancelled"]),
      stat("jobs-failed", "Jobs failed", o["jobs-failed"])),
    h("h2", {}, "Jobs"), jobsTable(jobs.jobs));
}

async function jobsPage() {
  const jobs = await api("/jobs/overview");
  return h("section", { id: "jobs" }, h("h2", {}, "Jobs"), jobsTable(jobs.jobs));
}

// Vertices left to right by topological level (longest path from a source), edges labelled
// with their ship strategy.
function jobGraph(details) {
  const nodes = (details.plan && details.plan.nodes) || [];
  const byId = new Map(details.vertices.map((v) => [v.id, v]));
  const level = new Map();
  const levelOf = (id, seen) => {
    if (level.has(id)) return level.get(id);
    const node = nodes.find((n) => n.id === id);
    let l = 0;
    if (node && node.inputs && !seen.has(id)) {
      seen.add(id);
      for (const input of node.inputs) l = Math.max(l, levelOf(input.id, seen) + 1);
    }
    level.set(id, l);
    return l;
  };
  const ids = nodes.length ? nodes.map((n) => n.id) : details.vertices.map((v) => v.id);
  ids.forEach((id) => levelOf(id, new Set()));
  const columns = [];
  ids.forEach((id) => { const l = level.get(id); (columns[l] = columns[l] || []).push(id); });
  const W = 210, H = 90, DX = 300, DY = 126, PAD = 20;
  const pos = new Map();
  columns.forEach((col, l) => col.forEach((id, r) => pos.set(id, { x: PAD + l * DX, y: PAD + r * DY })));
  const rows = Math.max(1, ...columns.map((c) => c.length));
  const svg = s("svg", { id: "job-graph", width: PAD * 2 + (columns.length - 1) * DX + W,
    height: PAD * 2 + (rows - 1) * DY + H });
  const defs = s("defs");
  const marker = s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8,
    markerHeight: 8, orient: "auto-start-reverse" });
  marker.append(s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#555" }));
  defs.append(marker);
  svg.append(defs);
  for (const node of nodes) {
    for (const input of node.inputs || []) {
      const a = pos.get(input.id), b = pos.get(node.id);
      if (!a || !b) continue;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      svg.append(s("path", { class: "edge", "data-source": input.id, "data-target": node.id,
        "data-ship-strategy": input.ship_strategy, d: `M ${x1} ${y1} C ${x1 + 40} ${y1}, ${x2 - 40} ${y2}, ${x2} ${y2}` }));
      svg.append(s("text", { class: "edge-label", "data-source": input.id, "data-target": node.id,
        x: (x1 + x2) / 2 - 20, y: (y1 + y2) / 2 - 6 }, input.ship_strategy));
    }
  }
  for (const id of ids) {
    const v = byId.get(id) || { name: id, status: "CREATED", parallelism: "?", metrics: {} };
    const p = pos.get(id);
    const g = s("g", { class: "vertex", "data-id": id, "data-name": v.name, "data-status": v.status,
      transform: `translate(${p.x},${p.y})` });
    g.append(s("rect", { width: W, height: H }));
    g.append(s("title", {}, v.name));
    const name = v.name.length > 30 ? v.name.slice(0, 29) + "…" : v.name;
    g.append(s("text", { class: "vertex-name", x: 8, y: 18 }, name));
    g.append(s("text", { class: "vertex-status", x: 8, y: 36 }, `${v.status} · parallelism ${v.parallelism}`));
    g.append(s("text", { class: "vertex-records", x: 8, y: 54,
      "data-in": v.metrics["read-records"], "data-out": v.metrics["write-records"] },
      `in ${v.metrics["read-records"] ?? 0} · out ${v.metrics["write-records"] ?? 0}`));
    // The busiest and the most backpressured subtask's share of the last second (Flink colours by these).
    const busy = v.metrics["busy-ratio"], pressured = v.metrics["backpressured-ratio"];
    g.append(s("text", { class: "vertex-load", x: 8, y: 72, "data-busy": busy ?? "", "data-backpressured": pressured ?? "" },
      busy === undefined ? "busy – · backpressured –" : `busy ${pct(busy)} · backpressured ${pct(pressured)}`));
    if (busy !== undefined) g.dataset.load = pressured > 0.5 ? "backpressured" : busy > 0.5 ? "busy" : "ok";
    const link = s("a", { href: `#/jobs/${details.jid}/vertices/${id}`, class: "vertex-link" });
    link.append(g);
    svg.append(link);
  }
  return svg;
}

// A vertex's busiest and most backpressured subtask's share of the last second, 0..1: the
// subtasks' metrics aggregated by max, as Flink's dashboard asks for them.
async function vertexLoad(jid, vertex) {
  const ids = ["busyTimeMsPerSecond", "backPressuredTimeMsPerSecond"];
  try {
    const values = await api(`/jobs/${jid}/vertices/${vertex.id}/subtasks/metrics?get=${ids.join(",")}&agg=max`);
    const max = (id) => { const m = values.find((x) => x.id === id); return m ? m.max / 1000 : undefined; };
    vertex.metrics["busy-ratio"] = max(ids[0]);
    vertex.metrics["backpressured-ratio"] = max(ids[1]);
  } catch (err) { /* shown as unknown */ }
}

async function jobPage(jid) {
  const details = await api(`/jobs/${jid}`);
  if (!TERMINAL.has(details.state)) await Promise.all(details.vertices.map((v) => vertexLoad(jid, v)));
  const [exceptions, checkpoints, rescales] = await Promise.all([
    api(`/jobs/${jid}/exceptions`).catch(() => null),
    api(`/jobs/${jid}/checkpoints`).catch(() => null),
    api(`/jobs/${jid}/rescale-events`).catch(() => null),
  ]);
  const cancel = TERMINAL.has(details.state) ? null : h("button", { id: "cancel-job", onclick: async (e) => {
    e.target.disabled = true;
    try { await api(`/jobs/${jid}?mode=cancel`, "PATCH"); } catch (err) { showError(String(err.message)); }
    render();
  } }, "Cancel job");
  const section = h("section", { id: "job", "data-jid": jid, "data-state": details.state },
    h("h2", { id: "job-name" }, details.name),
    h("p", {}, "State: ", stateSpan(details.state, "job-state"),
      " · Duration: ", h("span", { id: "job-duration" }, fmtDuration(details.duration)),
      " · Started: ", fmtTime(details["start-time"]), " · ", details["job-type"], " ", cancel),
    h("h3", {}, "Job graph"), jobGraph(details),
    h("h3", {}, "Subtask output"), subtaskLinks(jid, details));
  section.append(...timelineSection(details, rescales));
  section.append(...savepointSection(jid, savepointPossible(details, checkpoints)));
  if (checkpoints) section.append(...checkpointsSection(checkpoints));
  section.append(...exceptionsSection(exceptions));
  return section;
}

// ---- a job's timeline: when it entered each status, and each rescale -------------------------

// Events oldest first: the job's status timestamps (Flink's `timestamps` of /jobs/:id, 0 = never)
// and the adaptive scheduler's rescales (/jobs/:id/rescale-events, each with old and new parallelism).
function timelineEvents(details, rescales) {
  const events = Object.entries(details.timestamps || {}).filter(([, t]) => t > 0)
    .map(([state, t]) => ({ t, kind: "status", label: state }));
  for (const r of (rescales && rescales.rescales) || []) {
    events.push({ t: r.timestamp, kind: "rescale", label: `${r.from} → ${r.to}`, title: r.reason });
  }
  return events.sort((a, b) => a.t - b.t || (a.kind === "status" ? -1 : 1));
}

function timelineSection(details, rescales) {
  const events = timelineEvents(details, rescales);
  if (!events.length) return [];
  const start = events[0].t;
  const end = Math.max(details["end-time"] > 0 ? details["end-time"] : details.now || 0, events[events.length - 1].t);
  const span = Math.max(1, end - start);
  const bar = h("div", { id: "timeline-bar", class: "timeline-bar" },
    events.map((e) => h("span", { class: `timeline-mark timeline-${e.kind}`, "data-kind": e.kind,
      style: `left: ${(100 * (e.t - start) / span).toFixed(2)}%`, title: `${fmtTime(e.t)} ${e.label}${e.title ? ": " + e.title : ""}` },
      e.kind === "rescale" ? e.label : "")));
  const list = h("ol", { id: "timeline" }, events.map((e) => h("li", {
    class: `timeline-${e.kind}`, "data-kind": e.kind, title: e.title || null },
    `+${fmtDuration(e.t - start)} `, e.kind === "rescale" ? h("b", {}, `rescaled ${e.label}`) : e.label)));
  return [h("h3", {}, "Timeline"), bar, list];
}

// ---- a job's checkpoints, exceptions and savepoints ----------------------------------------

function pct(ratio) {
  return `${Math.round((ratio || 0) * 100)}%`;
}

// ---- a vertex's subtasks: status, records, bytes and busy / backpressured / idle time ----------

async function vertexPage(jid, vid) {
  const [vertex, pressure] = await Promise.all([
    api(`/jobs/${jid}/vertices/${vid}`),
    api(`/jobs/${jid}/vertices/${vid}/backpressure`).catch(() => ({ status: "deprecated" })),
  ]);
  const load = new Map((pressure.subtasks || []).map((p) => [p.subtask, p]));
  const ratio = (p, field) => (p ? pct(p[field]) : "–");
  const rows = vertex.subtasks.map((t) => {
    const p = load.get(t.subtask), m = t.metrics;
    return h("tr", { class: "subtask", "data-subtask": String(t.subtask), "data-status": t.status },
      h("td", {}, String(t.subtask)), h("td", {}, stateSpan(t.status)), h("td", {}, String(t.attempt)),
      h("td", {}, t["taskmanager-id"]), h("td", {}, fmtDuration(t.duration)),
      h("td", { class: "records-in" }, String(m["read-records"])), h("td", { class: "records-out" }, String(m["write-records"])),
      h("td", {}, fmtBytes(m["read-bytes"])), h("td", {}, fmtBytes(m["write-bytes"])),
      h("td", { class: "busy" }, ratio(p, "busyRatio")), h("td", { class: "backpressured" }, ratio(p, "ratio")),
      h("td", { class: "idle" }, ratio(p, "idleRatio")),
      h("td", { class: "backpressure-level" }, p ? p["backpressure-level"] : "–"),
      h("td", {}, h("a", { href: `#/jobs/${jid}/vertices/${vid}/subtasks/${t.subtask}/output` }, "output")));
  });
  return h("section", { id: "vertex", "data-vid": vid },
    h("p", {}, h("a", { href: `#/jobs/${jid}` }, "← job")),
    h("h2", { id: "vertex-name" }, vertex.name),
    h("p", {}, `Parallelism ${vertex.parallelism} (max ${vertex.maxParallelism}) · backpressure: `,
      h("span", { id: "vertex-backpressure" }, pressure["backpressure-level"] || "no figures yet")),
    h("table", { id: "subtasks-table" },
      h("tr", {}, ...["Subtask", "Status", "Attempt", "TaskManager", "Duration", "Records in", "Records out",
        "Bytes in", "Bytes out", "Busy", "Backpressured", "Idle", "Level", ""].map((c) => h("th", {}, c))),
      ...rows));
}

function fmtBytes(n) {
  if (n === undefined || n === null || n < 0) return "-";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024, i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(1)} ${units[i]}`;
}

function checkpointsSection(checkpoints) {
  const c = checkpoints.counts;
  const latest = checkpoints.latest || {};
  const parts = [h("h3", {}, "Checkpoints"), h("div", { id: "checkpoints", class: "stats" },
    stat("completed", "Completed", c.completed), stat("failed", "Failed", c.failed),
    stat("in_progress", "In progress", c.in_progress), stat("restored", "Restored", c.restored))];
  const done = latest.completed;
  parts.push(done
    ? h("p", { id: "latest-completed", "data-id": done.id }, `Latest completed: #${done.id} · triggered `,
      fmtTime(done.trigger_timestamp), ` · duration ${fmtDuration(done.end_to_end_duration)}`,
      ` · size ${fmtBytes(done.state_size)}`, done.external_path ? ` · ${done.external_path}` : "")
    : h("p", { id: "latest-completed", class: "none" }, "No completed checkpoint yet."));
  if (latest.failed) {
    parts.push(h("p", { id: "latest-failed" }, "Latest failed: ",
      latest.failed.id !== undefined ? `#${latest.failed.id} · ` : "", latest.failed.failure_message || "-"));
  }
  if (latest.restored) {
    parts.push(h("p", { id: "latest-restored" }, `Restored from #${latest.restored.id} at `,
      fmtTime(latest.restored.restore_timestamp), latest.restored.external_path ? ` · ${latest.restored.external_path}` : ""));
  }
  const rows = (checkpoints.history || []).map((cp) => h("tr", { class: "checkpoint-row", "data-id": cp.id, "data-status": cp.status },
    h("td", {}, cp.id), h("td", {}, stateSpan(cp.status)), h("td", {}, cp.is_savepoint ? "savepoint" : "checkpoint"),
    h("td", {}, fmtTime(cp.trigger_timestamp)), h("td", {}, fmtDuration(cp.end_to_end_duration)),
    h("td", {}, fmtBytes(cp.state_size)), h("td", {}, cp.failure_message || "")));
  parts.push(h("table", { id: "checkpoint-history" },
    h("thead", {}, h("tr", {}, ["Id", "Status", "Type", "Triggered", "Duration", "Size", "Failure"].map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 7 }, "No checkpoints yet.")))));
  return parts;
}

// Which exception entries the user expanded: kept across the page's refreshes.
const openExceptions = new Set();

function exceptionsSection(exceptions) {
  const parts = [h("h3", {}, "Exceptions")];
  const history = (exceptions && exceptions.exceptionHistory) || { entries: [] };
  if (!history.entries.length) {
    parts.push(h("p", { id: "no-exception" }, "No exceptions."));
    return parts;
  }
  // The newest entry: the job's root cause once it failed, else the latest restart's.
  parts.push(h("p", {}, "Root exception:"), h("pre", { id: "root-exception" }, history.entries[0].stacktrace));
  const entries = history.entries.map((e, i) => {
    const key = `${e.timestamp}|${e.taskName}|${e.exceptionName}`;
    const item = h("details", { class: "exception-entry", "data-index": i, open: openExceptions.has(key) ? "" : null,
      ontoggle: (ev) => { if (ev.target.open) openExceptions.add(key); else openExceptions.delete(key); } },
      h("summary", {}, fmtTime(e.timestamp), " · ", h("b", {}, e.exceptionName), e.taskName ? ` · ${e.taskName}` : "",
        e.endpoint ? ` · ${e.endpoint}` : "", e.taskManagerId ? ` (${e.taskManagerId})` : ""),
      h("pre", { class: "stacktrace" }, e.stacktrace));
    return item;
  });
  parts.push(h("h4", {}, `Exception history (${entries.length}${history.truncated ? ", truncated" : ""}, newest first)`),
    h("div", { id: "exception-history" }, entries));
  return parts;
}

// Per job: the savepoint directory typed in, and the last savepoint's progress and result.
const savepoints = new Map();

function savepointState(jid) {
  if (!savepoints.has(jid)) savepoints.set(jid, { dir: "", busy: false, location: null, error: null, needsDir: false });
  return savepoints.get(jid);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function triggerSavepoint(jid) {
  const st = savepointState(jid);
  st.busy = true; st.location = null; st.error = null;
  render();
  try {
    const body = { "cancel-job": false };
    if (st.dir) body["target-directory"] = st.dir;
    const trigger = (await api(`/jobs/${jid}/savepoints`, "POST", body))["request-id"];
    for (;;) {
      await sleep(500);
      const result = await api(`/jobs/${jid}/savepoints/${trigger}`);
      if (result.status.id !== "COMPLETED") continue;
      if (result.operation.location) st.location = result.operation.location;
      else st.error = (result.operation["failure-cause"] || {})["stack-trace"] || "the savepoint failed";
      break;
    }
  } catch (err) {
    if (err instanceof Unauthorized) { st.busy = false; return; }
    // No directory given and the cluster has no default: ask for one.
    st.needsDir = err.status === 400 && !st.dir;
    st.error = st.needsDir ? `${err.message} Enter a target directory and trigger again.` : err.message;
  }
  st.busy = false;
  render();
}

// Where POST /jobs/:id/savepoints can succeed, as the JobManager decides it: a RUNNING job that
// takes checkpoints (/checkpoints answers; 404 without) and whose tasks all run or finished.
function savepointPossible(details, checkpoints) {
  if (details.state !== "RUNNING" || !checkpoints) return false;
  return details.vertices.every((v) =>
    Object.entries(v.tasks).every(([state, n]) => n === 0 || state === "RUNNING" || state === "FINISHED"));
}

function savepointSection(jid, possible) {
  const st = savepointState(jid);
  const parts = [];
  if (possible) {
    parts.push(h("div", { id: "savepoint", class: "savepoint" },
      h("input", { id: "savepoint-dir", type: "text", size: 50, value: st.dir, class: st.needsDir ? "needed" : null,
        placeholder: st.needsDir ? "target directory (required: no cluster default)" : "target directory (empty: the cluster's default)",
        oninput: (e) => { st.dir = e.target.value.trim(); } }),
      h("button", { id: "trigger-savepoint", disabled: st.busy ? "" : null, onclick: () => triggerSavepoint(jid) },
        st.busy ? "Taking savepoint…" : "Trigger savepoint")));
  }
  if (st.location) parts.push(h("p", { id: "savepoint-location" }, "Savepoint completed: ", h("code", {}, st.location)));
  if (st.error) parts.push(h("p", { id: "savepoint-error", class: "error" }, st.error));
  return parts;
}

// The page refreshes every few seconds; not while the user types into one of its fields.
function editing() {
  const el = document.activeElement;
  return !!el && el.tagName === "INPUT" && el.id !== "token-input" && document.getElementById("content").contains(el);
}

async function taskManagersPage() {
  const tms = (await api("/taskmanagers")).taskmanagers;
  // Each one's details (Flink's TaskManagerDetailsInfo) and its process tree's memory (the
  // TaskManager, its Spark JVM and workers: the metric Status.ProcessTree.Memory.RSS).
  const treeRss = "Status.ProcessTree.Memory.RSS";
  const details = await Promise.all(tms.map(async (tm) => {
    const id = encodeURIComponent(tm.id);
    const [d, m] = await Promise.all([api(`/taskmanagers/${id}`).catch(() => tm),
      api(`/taskmanagers/${id}/metrics?get=${treeRss}`).catch(() => [])]);
    const tree = m.find((x) => x.id === treeRss);
    return { ...d, treeRss: tree ? Number(tree.value) : null };
  }));
  const rows = details.map((tm) => h("tr", { class: "taskmanager", "data-id": tm.id },
    h("td", {}, tm.id, " ", h("a", { class: "tm-log-link", href: `#/taskmanagers/${encodeURIComponent(tm.id)}/log` }, "log")),
    h("td", {}, tm.path), h("td", { class: "slots" }, tm.slotsNumber),
    h("td", { class: "free-slots" }, tm.freeSlots), h("td", {}, fmtTime(tm.timeSinceLastHeartbeat)),
    h("td", { class: "cpu-cores" }, tm.hardware ? tm.hardware.cpuCores : "–"),
    h("td", { class: "memory", "data-bytes": tm.treeRss ?? "" }, tm.treeRss ? fmtBytes(tm.treeRss) : "–"),
    h("td", {}, tm.hardware ? `${fmtBytes(tm.hardware.freeMemory)} of ${fmtBytes(tm.hardware.physicalMemory)}` : "–"),
    h("td", {}, (tm.allocatedSlots || []).map((sl) => h("div", { class: "slot", "data-tasks": sl.assignedTasks },
      `${sl.assignedTasks} task(s) of `, sl.jobId ? h("a", { href: `#/jobs/${sl.jobId}` }, sl.jobId.slice(0, 8)) : "–"))))); 
  return h("section", { id: "taskmanagers" }, h("h2", {}, "TaskManagers"),
    h("table", { id: "taskmanagers-table" },
      h("thead", {}, h("tr", {}, ["Id", "Address", "Slots", "Free slots", "Last heartbeat", "CPU cores", "Memory (with Spark)", "Host memory free", "Allocated slots"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 9 }, "No TaskManagers.")))));
}

// Log pages: a tail of the chosen file and a Refresh button; they are not re-rendered every
// REFRESH_MS (that would reset the reader's scroll position), only on Refresh.
function logView(id, title, sources, listPath) {
  const pre = h("pre", { id: "log-text", class: "log" }, "Loading...");
  const chooser = h("select", { id: "log-source" }, sources.map((src, i) => h("option", { value: String(i) }, src.label)));
  const load = async () => {
    const src = sources[Number(chooser.value)];
    try {
      pre.textContent = (await src.read()) || "(empty)";
      pre.dataset.loaded = String(Date.now());
      pre.scrollTop = pre.scrollHeight;
      showError(null);
    } catch (err) {
      if (!(err instanceof Unauthorized)) { pre.textContent = ""; showError(err.message || String(err)); }
    }
  };
  chooser.addEventListener("change", load);
  const section = h("section", { id }, h("h2", {}, title),
    h("p", {}, chooser, " ", h("button", { id: "log-refresh", onclick: load }, "Refresh")), pre);
  if (listPath) {  // the rotated files too, once listed
    api(listPath).then((listing) => {
      for (const f of listing.logs.slice(1)) {
        sources.push({ label: `${f.name} (${f.size} bytes)`, read: () => apiText(`${listPath}/${encodeURIComponent(f.name)}`) });
        chooser.append(h("option", { value: String(sources.length - 1) }, sources[sources.length - 1].label));
      }
    }).catch(() => {});
  }
  load();
  return section;
}

async function jobManagerLogPage() {
  return logView("jobmanager-log", "JobManager log", [
    { label: "Log", read: () => apiText("/jobmanager/log") },
    { label: "Stdout", read: () => apiText("/jobmanager/stdout") },
  ], "/jobmanager/logs");
}

async function taskManagerLogPage(id) {
  const tm = encodeURIComponent(id);
  return logView("taskmanager-log", `TaskManager ${id}`, [
    { label: "Log", read: () => apiText(`/taskmanagers/${tm}/log`) },
    { label: "Stdout", read: () => apiText(`/taskmanagers/${tm}/stdout`) },
  ], `/taskmanagers/${tm}/logs`);
}

async function subtaskOutputPage(jid, vid, index) {
  const read = async () => {
    const out = await api(`/jobs/${jid}/vertices/${vid}/subtasks/${index}/output`);
    const head = `${out["vertex-name"]} subtask ${out.subtask}, attempt ${out.attempt}, ${out.status}` +
      (out["taskmanager-id"] ? ` on ${out["taskmanager-id"]}` : "");
    if (!out.available) return `${head}\n(no output: ${out.reason})`;
    const dropped = out["dropped-lines"] ? `(${out["dropped-lines"]} earlier lines dropped)\n` : "";
    return `${head}\n${dropped}${out.lines.join("\n")}`;
  };
  const section = logView("subtask-output", `Subtask output`, [{ label: `subtask ${index}`, read }], null);
  section.prepend(h("p", {}, h("a", { href: `#/jobs/${jid}` }, "← job")));
  return section;
}

function subtaskLinks(jid, details) {
  return h("div", { id: "subtask-outputs" }, (details.vertices || []).map((v) => h("p", { class: "vertex-outputs" },
    `${v.name}: `, Array.from({ length: v.parallelism }, (_, i) => [h("a", {
      class: "subtask-output-link", "data-vertex": v.id, "data-subtask": String(i),
      href: `#/jobs/${jid}/vertices/${v.id}/subtasks/${i}/output` }, `subtask ${i}`), " "]).flat())));
}

function isLogPage() {
  return /^#\/(jobmanager\/log|taskmanagers\/.+\/log|jobs\/.+\/output)$/.test(location.hash);
}

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const output = hash.match(/^\/jobs\/([0-9a-fA-F]{32})\/vertices\/([0-9a-fA-F]+)\/subtasks\/(\d+)\/output$/);
  if (output) return ["jobs", () => subtaskOutputPage(output[1], output[2], output[3])];
  if (hash === "/jobmanager/log") return ["logs", jobManagerLogPage];
  const tmLog = hash.match(/^\/taskmanagers\/(.+)\/log$/);
  if (tmLog) return ["taskmanagers", () => taskManagerLogPage(decodeURIComponent(tmLog[1]))];
  const vertex = hash.match(/^\/jobs\/([0-9a-fA-F]{32})\/vertices\/([0-9a-fA-F]+)$/);
  if (vertex) return ["jobs", () => vertexPage(vertex[1], vertex[2])];
  const job = hash.match(/^\/jobs\/([0-9a-fA-F]{32})$/);
  if (job) return ["jobs", () => jobPage(job[1])];
  if (hash === "/jobs") return ["jobs", jobsPage];
  if (hash === "/taskmanagers") return ["taskmanagers", taskManagersPage];
  return ["overview", overviewPage];
}

async function render() {
  const mine = ++generation;
  const [nav, page] = route();
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.id === `nav-${nav}`);
  try {
    const content = await page();
    if (mine !== generation) return;
    document.getElementById("content").replaceChildren(content);
    document.body.dataset.page = nav;
    document.body.dataset.rendered = String(Date.now());
    showError(null);
  } catch (err) {
    if (mine !== generation || err instanceof Unauthorized) return;
    showError(err.message || String(err));
  }
}

document.getElementById("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token-input").value.trim());
  document.getElementById("token-form").hidden = true;
  showError(null);
  render();
});
window.addEventListener("hashchange", render);
// The refresh interval is the cluster's (web.refresh-interval), as GET /config reports it.
api("/config").catch(() => ({})).then((config) => {
  setInterval(() => { if (!editing() && !isLogPage()) render(); }, config["refresh-interval"] || 3000);
});
render();
