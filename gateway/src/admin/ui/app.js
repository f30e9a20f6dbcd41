// Switchyard's status page: polls this node's /api/v1/status,
// /api/v1/throughput and /api/v1/apps (and, on a fleet coordinator,
// /api/v1/cluster) and draws them. No libraries, nothing from elsewhere.
"use strict";

const POLL_MS = 2000;
// Finished applications shown (newest first); /api/v1/apps keeps more.
const FINISHED_SHOWN = 50;
const COLORS = { uniffle: "#3b6fd6", celeborn: "#d6813b", flink: "#2e9e6a" };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function duration(seconds) {
  const d = Math.floor(seconds / 86400), h = Math.floor(seconds / 3600) % 24;
  const m = Math.floor(seconds / 60) % 60, s = Math.floor(seconds % 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function cell(text, cls) {
  return el("td", cls ? { class: cls } : {}, text);
}

// The store names each application "<namespace>/<the client's id>";
// Celeborn's Flink client is told apart by what the node says of it (as
// `ctl apps` and the migration report do).
function splitApp(id, client) {
  const slash = id.indexOf("/");
  if (slash < 0) return ["other", id];
  let protocol = id.slice(0, slash);
  if (protocol === "celeborn" && (client || "").startsWith("flink")) protocol = "flink";
  return [protocol, id.slice(slash + 1)];
}

function renderStatus(s) {
  const node = s.node, st = s.storage;
  document.getElementById("node-id").textContent = `node ${node.id}`;
  const ready = document.getElementById("ready");
  ready.textContent = st.ready ? "ready" : "not ready";
  ready.className = "badge " + (st.ready ? "ok" : "bad");

  const uniffle = node.uniffle ? `coordinator ${node.uniffle.coordinator ?? "none"}, server ${node.uniffle.server_grpc ?? "none"}` : "off";
  const celeborn = node.celeborn ? `master ${node.celeborn.master ?? "none"}, worker ${node.celeborn.worker_id ?? "none"}` : "off";
  fill(document.querySelector("#nodes tbody"), [
    el("tr", { "data-node": node.id },
      cell(node.id), cell(s.version), cell(duration(s.uptime_seconds)),
      cell(uniffle), cell(celeborn), cell(node.admin)),
  ]);

  const m = st.memory;
  const used = m.capacity ? m.used / m.capacity : 0;
  document.getElementById("memory-bar").style.width = (100 * Math.min(used, 1)).toFixed(1) + "%";
  document.getElementById("memory-text").textContent =
    `${bytes(m.used)} of ${bytes(m.capacity)} used (${bytes(m.reserved)} reserved, ${bytes(m.flushing)} flushing)`;

  fill(document.querySelector("#tiers tbody"), ["memory", "disk", "cold"].map(
    (t) => el("tr", {}, cell(t), cell(bytes(st.tiers[t]), "num"))));

  fill(document.querySelector("#disks tbody"), st.disks.map((d) =>
    el("tr", {},
      cell(d.dir), cell(d.health, "health-" + d.health),
      cell((100 * d.used_ratio).toFixed(0) + "%", "num"),
      cell(bytes(d.available_bytes), "num"), cell(bytes(d.stored_bytes), "num"))));
  document.getElementById("cold").textContent = st.cold
    ? `cold tier: ${st.cold.service}, ${bytes(st.cold.stored_bytes)} stored, ${st.cold.healthy ? "healthy" : "failing"}`
    : "no cold tier";
  const r = st.recovery;
  document.getElementById("recovery").textContent = !r.enabled
    ? "restart recovery off"
    : `at start: ${r.partitions} committed partitions recovered (${bytes(r.bytes)}) in ${r.duration_ms} ms, ` +
      `${r.discarded_partitions} discarded; ` +
      (r.swept ? `${r.orphan_files} orphaned files removed (${bytes(r.orphan_bytes)})` : "orphan sweep pending") +
      (r.record_failures ? `; ${r.record_failures} commits not recorded` : "") +
      (r.manifest_stalled ? "; manifest write stalled (metadata disk hung?)" : "");

  // An application's waits for the node's shared resources (fair shares).
  const waited = (w) => !w ? "-" :
    [w.memory_seconds, w.flush_seconds, w.read_seconds].map((x) => x.toFixed(1) + " s").join(" / ");
  const apps = st.applications.slice().sort((a, b) => a.id.localeCompare(b.id));
  const rows = apps.map((a) => {
    const [protocol, id] = splitApp(a.id, a.client);
    return el("tr", { "data-app": id, "data-protocol": protocol },
      cell(protocol), cell(id), cell(a.client || "-"),
      cell(bytes(a.written_bytes || 0), "num"), cell(bytes(a.read_bytes || 0), "num"),
      cell(a.shuffles, "num"), cell(a.partitions, "num"),
      cell(bytes(a.bytes.memory), "num"), cell(bytes(a.bytes.disk), "num"),
      cell(bytes(a.bytes.cold), "num"), cell(duration(a.idle_ms / 1000), "num"),
      cell(waited(a.waits), "num"), cell(a.waits ? a.waits.share_refusals : 0, "num"));
  });
  if (rows.length === 0) {
    rows.push(el("tr", {}, el("td", { colspan: 13, class: "muted" }, "no applications")));
  }
  fill(document.querySelector("#apps tbody"), rows);
}

// Applications that ended here, newest first: how they ended
// (unregistered by their client; lost: Celeborn's name for a lease that ran
// out; expired: Uniffle's), with their figures.
function renderFinished(a) {
  document.getElementById("finished-note").textContent =
    `(last ${a.finished.length} of ${a.finished_kept} kept for ${duration(a.retention_seconds)}, at most ${a.max_kept})`;
  const rows = a.finished.map((f) =>
    el("tr", { "data-app": f.id, "data-protocol": f.protocol, "data-ended": f.ended },
      cell(f.protocol), cell(f.id), cell(f.client || "-"),
      cell(bytes(f.written_bytes), "num"), cell(bytes(f.read_bytes), "num"),
      cell(duration(f.duration_ms / 1000), "num"), cell(bytes(f.peak_memory_bytes), "num"),
      cell(f.ended, "ended-" + f.ended),
      cell(new Date(f.removed.unix_ms).toLocaleTimeString(), "num")));
  if (rows.length === 0) {
    rows.push(el("tr", {}, el("td", { colspan: 9, class: "muted" }, "none yet")));
  }
  fill(document.querySelector("#finished tbody"), rows);
}

// The fleet as this coordinator sees it; null on a node that coordinates
// no fleet, which hides the section.
function renderFleet(c) {
  const section = document.getElementById("fleet-section");
  section.hidden = !c;
  if (!c) return;
  document.getElementById("fleet-note").textContent =
    `(as coordinator ${c.coordinator} sees it${c.warming ? ", warming up" : ""})`;
  const workers = c.workers.slice().sort((a, b) => a.node_id.localeCompare(b.node_id));
  const rows = workers.map((w) => {
    const admin = el("a", { href: `http://${w.admin}/` }, w.admin);
    return el("tr", { "data-node": w.node_id, "data-state": w.state },
      cell(w.node_id), cell(w.state, "state-" + w.state),
      cell(w.healthy ? "healthy" : "unhealthy", w.healthy ? "health-healthy" : "health-faulted"),
      cell(`${bytes(w.memory_used)} of ${bytes(w.memory_capacity)}`, "num"),
      cell(bytes(w.disk_free), "num"), cell(w.partitions, "num"),
      cell(duration(w.last_heartbeat_ms_ago / 1000) + " ago", "num"), el("td", {}, admin));
  });
  if (rows.length === 0) {
    rows.push(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no worker heartbeats yet")));
  }
  fill(document.querySelector("#fleet tbody"), rows);
}

function renderThroughput(h) {
  const svg = document.getElementById("throughput");
  const ns = "http://www.w3.org/2000/svg";
  const W = 800, H = 200, samples = h.samples;
  const series = [];
  for (const protocol of Object.keys(COLORS)) {
    for (const dir of ["pushed", "fetched"]) {
      series.push({ protocol, dir, values: samples.map((s) => (s.protocols[protocol] || {})[dir + "_bytes_per_second"] || 0) });
    }
  }
  const max = Math.max(1, ...series.flatMap((s) => s.values));
  // A fixed 10-minute axis, newest sample at the right edge.
  const slots = Math.max(600 / (h.interval_seconds || 5) - 1, samples.length - 1, 1);
  const x = (i) => W - (samples.length - 1 - i) * W / slots;
  const shapes = [];
  const axis = document.createElementNS(ns, "text");
  axis.setAttribute("x", "6");
  axis.setAttribute("y", "14");
  axis.setAttribute("font-size", "12");
  axis.setAttribute("fill", "#6b7385");
  axis.textContent = `max ${bytes(max)}/s`;
  shapes.push(axis);
  for (const s of series) {
    if (s.values.length < 2) continue;
    const line = document.createElementNS(ns, "polyline");
    const points = s.values.map((v, i) => `${x(i).toFixed(1)},${(H - 4 - v / max * (H - 24)).toFixed(1)}`);
    line.setAttribute("points", points.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", COLORS[s.protocol]);
    line.setAttribute("stroke-width", "2");
    if (s.dir === "fetched") line.setAttribute("stroke-dasharray", "6 4");
    line.setAttribute("data-series", `${s.protocol}-${s.dir}`);
    shapes.push(line);
  }
  svg.replaceChildren(...shapes);
  const last = samples.length ? samples[samples.length - 1].protocols : {};
  document.getElementById("legend").replaceChildren(...Object.entries(COLORS).map(([p, c]) => {
    const r = last[p] || { pushed_bytes_per_second: 0, fetched_bytes_per_second: 0 };
    const swatch = el("i");
    swatch.style.background = c;
    return el("span", {}, swatch,
      `${p}: push ${bytes(r.pushed_bytes_per_second)}/s, fetch ${bytes(r.fetched_bytes_per_second)}/s`);
  }), el("span", { class: "muted" }, "solid: pushed, dashed: fetched"));
}

async function poll() {
  const error = document.getElementById("error");
  try {
    const [status, throughput, apps] = await Promise.all([
      fetch("/api/v1/status").then((r) => { if (!r.ok) throw new Error(`status: HTTP ${r.status}`); return r.json(); }),
      fetch("/api/v1/throughput").then((r) => { if (!r.ok) throw new Error(`throughput: HTTP ${r.status}`); return r.json(); }),
      fetch(`/api/v1/apps?finished=${FINISHED_SHOWN}`).then((r) => { if (!r.ok) throw new Error(`apps: HTTP ${r.status}`); return r.json(); }),
    ]);
    const cluster = status.fleet_coordinator
      ? await fetch("/api/v1/cluster").then((r) => { if (!r.ok) throw new Error(`cluster: HTTP ${r.status}`); return r.json(); })
      : null;
    renderStatus(status);
    renderThroughput(throughput);
    renderFinished(apps);
    renderFleet(cluster);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    error.hidden = true;
    document.body.dataset.loaded = "true";
  } catch (e) {
    error.textContent = `cannot reach this node's admin API: ${e.message}`;
    error.hidden = false;
  }
}

poll();
setInterval(poll, POLL_MS);
