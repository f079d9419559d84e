// The emulator dashboard: draws /_emulator/ui/api/* data, stays live through the SSE stream, and acts
// through the ordinary control plane (/_emulator/clock, /faults, /scenarios). No framework, no build.
"use strict";
(() => {
  const BASE = "/_emulator/ui";
  const ADMIN = "/_emulator";
  const adminToken = new URLSearchParams(location.search).get("admin_token");
  const tenantMatch = location.pathname.match(/^\/_emulator\/ui\/tenants\/([^/]+)\/?$/);
  const project = tenantMatch ? decodeURIComponent(tenantMatch[1]) : null;
  const PALETTE = ["#2f6fdf", "#d9453b", "#2e9d5b", "#ef8a3c", "#8d6ac8", "#13a3b5", "#b5467a", "#6b7480"];
  const STATUSES = ["PENDING", "CREATING", "READY", "RUNNING", "COMPLETED", "STOPPING", "STOPPED", "EXPIRED", "FAILED", "ERROR"];
  const FAULT_EXAMPLES = {
    "overloaded: the next 2 session creates answer 429": {
      name: "overloaded", match: {operation_id: "createSession"}, trigger: {first_n: 2},
      effect: {status: 429, code: "rate_limited", retry_after: 2}},
    "nan-loss: the 3rd forward-backward fails": {
      name: "nan-loss", match: {operation_id: "createForwardBackward"}, trigger: {nth: [3]},
      effect: {operation_fails: "TRAINING_OPERATION_ERROR_CODE_NON_FINITE_LOSS"}},
    "gpu-queue: the next resource waits at position 6": {
      name: "gpu-queue", match: {operation_id: "createModelResources"}, trigger: {first_n: 1},
      effect: {queue_position: 6}},
    "flaky: 10% of GETs answer 503": {
      name: "flaky", match: {method: "GET"}, trigger: {probability: 0.1},
      effect: {status: 503, latency_ms: 200, retry_after: 1}},
  };

  const $ = (id) => document.getElementById(id);
  const state = {view: null, clock: null, events: [], lastSeq: 0, faults: [], chart: null, chartKey: "",
                 collapsed: new Set(), expanded: new Set(),
                 openSamples: new Set(), charts: new Map(), failedMarks: []};

  // --- helpers ---------------------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const short = (status) => (status || "").replace(/^.*_STATUS_/, "");
  const badge = (status) => el("span", {class: `badge st-${short(status)}`, title: status}, short(status));
  const shortId = (id, n = 12) => (id && id.length > n + 2 ? `${id.slice(0, n)}…` : id || "");
  const idCell = (id) => el("td", {class: "id", title: id}, shortId(id));
  function time(iso) {
    if (!iso) return "";
    const sameDay = state.clock && state.clock.now.slice(0, 10) === iso.slice(0, 10);
    return sameDay ? iso.slice(11, 23) : iso.replace("T", " ").slice(0, 23);
  }
  const timeCell = (iso) => el("td", {class: "mono", title: iso || ""}, time(iso));
  // A name (a fault rule's, an operationId) that may wrap only between its words: after - _ . / : and between
  // camelCase humps ("create|Model|Resources"), never inside one; a word wider than its box ends in an
  // ellipsis, the whole name on hover.
  function words(text) {
    const parts = String(text).split(/(\s+)/).filter(Boolean).flatMap((chunk) => (/^\s+$/.test(chunk) ? [" "]
      : chunk.split(/(?<=[-_./:=,])|(?<=[a-z0-9])(?=[A-Z])/).filter(Boolean)
        .flatMap((p, i) => [i ? el("wbr") : null, el("span", {class: "w"}, p)])));
    return el("span", {class: "words", title: text}, parts);
  }
  function withToken(path) {
    if (!adminToken) return path;
    return `${path}${path.includes("?") ? "&" : "?"}admin_token=${encodeURIComponent(adminToken)}`;
  }
  const tenantUrl = (p) => withToken(`${BASE}/tenants/${encodeURIComponent(p)}`);
  function fill(tableId, rows, emptyId) {
    $(tableId).querySelector("tbody").replaceChildren(...rows);
    if (emptyId) $(emptyId).hidden = rows.length > 0;
  }

  async function call(method, url, body) {
    const headers = {};
    if (adminToken) headers["X-Emulator-Admin-Token"] = adminToken;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const resp = await fetch(url, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!resp.ok) {
      const error = new Error(data && data.error ? data.error.message : `${resp.status} ${text}`);
      error.status = resp.status;
      throw error;
    }
    return data;
  }

  let messageTimer = null;
  function say(text, isError) {
    const box = $("message");
    box.textContent = text;
    box.className = isError ? "error" : "";
    box.hidden = false;
    clearTimeout(messageTimer);
    messageTimer = setTimeout(() => { box.hidden = true; }, isError ? 8000 : 3000);
  }
  const fail = (err) => say(err.message || String(err), true);

  // --- loading ---------------------------------------------------------------------------------
  // One fetch at a time; changes arriving meanwhile ask for one more afterwards.
  let inflight = false, again = false, lastLoad = 0, soon = null;
  function refresh() {
    if (inflight) { again = true; return; }
    inflight = true;
    again = false;
    lastLoad = Date.now();
    load().catch(fail).finally(() => {
      inflight = false;
      if (again) setTimeout(refresh, 150);
    });
  }
  // What the stream reports redraws at most once a second: a busy client makes events all the time,
  // and a view of a big tenant costs the server tens of milliseconds.
  function refreshSoon() {
    if (soon) return;
    soon = setTimeout(() => { soon = null; refresh(); }, Math.max(0, lastLoad + 1000 - Date.now()));
  }

  async function load() {
    if (project) {
      let view;
      try {
        view = await call("GET", `${BASE}/api/tenants/${encodeURIComponent(project)}`);
      } catch (err) {
        if (err.status === 404) { $("gone").hidden = false; return; }
        throw err;
      }
      $("gone").hidden = true;
      state.view = view;
      $("crumb").textContent = view.label ? `${project} · ${view.label}` : project;
      showReplay(view.replay);
      showClock(view.clock);
      mergeEvents(view.events, view.seq);
      showFaults(view.faults);
      drawTenant(view);
    } else {
      const data = await call("GET", `${BASE}/api/tenants`);
      showReplay(data.replay);
      showClock(data.clock);
      mergeEvents(data.events, data.seq);
      showFaults(data.faults);
      drawTenants(data.data);
      // A cluster: the list is every shard's, the event stream this shard's only, so the list is also
      // reloaded every few seconds; a shard that did not answer is named.
      if (data.shards) {
        const down = data.shards.filter((s) => s.status !== "ok").map((s) => s.shard);
        if (down.length) say(`shard(s) ${down.join(", ")} did not answer: their tenants are missing from the list`, true);
        if (!clusterTimer) clusterTimer = setInterval(refresh, 3000);
      }
    }
    document.body.dataset.seq = String(state.lastSeq);
  }

  // --- tenants ---------------------------------------------------------------------------------
  function counts(byStatus) {
    const parts = Object.entries(byStatus).map(([s, n]) => el("span", {class: `badge st-${s}`, title: s}, `${n} ${s}`));
    return parts.length ? parts.flatMap((p) => [p, " "]) : ["0"];
  }

  let clusterTimer = null;
  // Default tenancy makes user and project ids from a hash of the key: they name no one, so they are not listed
  // as users (the project id still links the page).
  const HASHED = /^(user|proj)_[0-9a-f]{16}$/;
  function drawTenants(rows) {
    // (default tenancy: no row names a user, so the column goes)
    $("tenants").classList.toggle("no-users", !rows.some((t) => (t.users || []).some((u) => !HASHED.test(u))));
    fill("tenants", rows.map((t) => el("tr", {dataset: {project: t.project}},
      el("td", {class: "tenant"},
        t.label ? el("div", {class: "label"}, t.label) : null,
        el("a", {class: "mono", href: tenantUrl(t.project)}, t.project),
        t.shard === undefined ? null : el("span", {class: "muted"}, ` shard ${t.shard}`)),
      el("td", {class: "names"}, sessionNames(t)),
      el("td", {class: "mono"}, (t.users || []).filter((u) => !HASHED.test(u)).join(", ")),
      el("td", null, counts(t.resources)), el("td", null, counts(t.sessions)),
      el("td", {class: "num"}, t.operations), el("td", {class: "num"}, t.checkpoints))), "tenants-empty");
  }

  function sessionNames(t) {
    const names = t.session_names || [];
    const more = t.session_names_more ? ` and ${t.session_names_more} more` : "";
    if (names.length) return [names.join(", "), more];
    const models = t.base_models || [];
    return models.length ? el("span", {class: "muted"}, `no named session (${models.join(", ")})`) : "";
  }

  async function openKey(key) {
    const found = await call("GET", `${BASE}/api/lookup?api_key=${encodeURIComponent(key)}`);
    if (!found.exists) throw new Error(`API key ${key} (project ${found.project}) has no state yet`);
    location.assign(tenantUrl(found.project));
  }

  // --- one tenant ------------------------------------------------------------------------------
  function drawTenant(v) {
    const sessionsOf = {};
    for (const s of v.sessions) sessionsOf[s.model_resources_id] = (sessionsOf[s.model_resources_id] || 0) + 1;
    fill("resources", v.resources.map((r) => el("tr", {dataset: {id: r.id, status: r.status}},
      idCell(r.id), el("td", null, r.base_model), el("td", {class: "status"}, badge(r.status)),
      el("td", {class: "num"}, r.status_details && r.status_details.queue_position),
      timeCell(r.expires_at), el("td", {class: "num"}, sessionsOf[r.id] || 0), timeCell(r.updated_at))), "resources-empty");
    fill("sessions", v.sessions.map((s) => el("tr", {dataset: {id: s.id, status: s.status}},
      idCell(s.id), el("td", null, s.display_name || ""), idCell(s.model_resources_id),
      el("td", {class: "status"}, badge(s.status), s.error ? el("div", {class: "err"}, s.error.code) : null),
      el("td", {class: "num"}, s.step),
      el("td", {class: "num"}, `${s.policy_state.applied_weights_version} / ${s.policy_state.target_weights_version}`),
      el("td", {class: "num"}, s.queued_operations), timeCell(s.updated_at))), "sessions-empty");
    $("ops-count").textContent = v.operations_total > v.operations.length
      ? `latest ${v.operations.length} of ${v.operations_total}` : `${v.operations_total}`;
    fill("operations", v.operations.map((op) => el("tr", {dataset: {id: op.id, status: op.status}},
      idCell(op.id), el("td", {class: "id", title: op.session_id}, sessionName(v, op.session_id)), el("td", null, op.kind), el("td", {class: "status"}, badge(op.status)),
      el("td", {class: op.error ? "err" : "mono", title: op.error ? op.error.message : ""}, result(op)),
      timeCell(op.created_at), timeCell(op.updated_at))), "operations-empty");
    fill("samples", v.samples.map((smp) => el("tr", {dataset: {id: smp.id}},
      timeCell(smp.at), el("td", {class: "id", title: smp.session_id}, sessionName(v, smp.session_id)),
      el("td", {class: "num"}, smp.weights_version),
      el("td", {class: "prompt"}, smp.results.map((r) => tokens(r.prompt, r.prompt_text))),
      el("td", {class: "completions"}, completions(smp)))), "samples-empty");
    fill("checkpoints", v.checkpoints.map((c) => el("tr", {dataset: {id: c.id}},
      idCell(c.id), el("td", {class: "id", title: c.session_id}, sessionName(v, c.session_id)), el("td", null, c.type.replace("CHECKPOINT_TYPE_", "").toLowerCase()),
      el("td", {class: "num"}, c.step), timeCell(c.created_at))), "checkpoints-empty");
    drawLoss(v.losses);
    drawMetrics(v.losses);
    drawSampling(v.sampling || []);
    drawTimeline();
  }

  // A prompt or a completion: its text where the model's tokenizer is installed (the ids on hover), else its
  // first ids (all of them on hover), each one unbreakable so that a line wraps between ids, never inside one.
  const FIRST_TOKENS = 12;
  function tokens(ids, text, suffix) {
    ids = ids || [];
    if (text != null) {
      return el("div", {class: "seq text", title: ids.join(" ")}, text, suffix);
    }
    const shown = ids.slice(0, FIRST_TOKENS);
    const parts = shown.flatMap((t, i) => (i ? [" ", el("span", {class: "tok"}, String(t))] : [el("span", {class: "tok"}, String(t))]));
    const rest = ids.length - shown.length;
    return el("div", {class: "seq ids mono", title: ids.join(" ")}, parts,
              rest > 0 ? el("span", {class: "more muted"}, ` … +${rest}`) : null, suffix);
  }

  const stopName = (reason) => (reason || "").replace("STOP_REASON_", "").toLowerCase();
  // A sample operation's completions, folded: one line says how many, how long and why they stopped; opened
  // (a click; it stays open across redraws), one line per completion: its length, stop reason and first tokens.
  function completions(smp) {
    const seqs = smp.results.flatMap((r) => r.sequences);
    const lengths = seqs.map((q) => (q.tokens || []).length);
    const reasons = {};
    for (const q of seqs) reasons[stopName(q.stop_reason)] = (reasons[stopName(q.stop_reason)] || 0) + 1;
    const range = lengths.length ? (Math.min(...lengths) === Math.max(...lengths) ? `${lengths[0]}`
      : `${Math.min(...lengths)}–${Math.max(...lengths)}`) : "0";
    const summary = el("summary", null, el("b", null, `${seqs.length} completion${seqs.length === 1 ? "" : "s"}`),
      ` · ${range} tokens · `, Object.entries(reasons).map(([r, n]) => `${n} ${r}`).join(", "));
    const box = el("details", {class: "completion-list", dataset: {id: smp.id}}, summary,
      seqs.map((q) => el("div", {class: "completion"},
        el("span", {class: "len"}, `${(q.tokens || []).length} tok`), " ",
        el("span", {class: `stop stop-${stopName(q.stop_reason)}`}, stopName(q.stop_reason)), " ",
        tokens(q.tokens, q.text))));
    box.open = state.openSamples.has(smp.id);
    box.addEventListener("toggle", () => {
      if (box.open) state.openSamples.add(smp.id); else state.openSamples.delete(smp.id);
    });
    return box;
  }

  // A session by its display name, or its short id.
  function sessionName(v, id) {
    const s = (v.sessions || []).find((x) => x.id === id);
    return (s && s.display_name) || shortId(id, 8);
  }

  // Losses fall towards 0 as a model memorises its data: small ones keep their significant digits.
  function fmtLoss(x) {
    if (typeof x !== "number") return "-";
    return x !== 0 && Math.abs(x) < 0.001 ? x.toExponential(2) : x.toFixed(4);
  }

  function result(op) {
    if (op.error) return op.error.code.replace(/^.*_ERROR_CODE_/, "");
    if (typeof op.loss === "number") return `loss ${fmtLoss(op.loss)}`;
    if (op.step !== undefined) return `step ${op.step}`;
    if (op.weights_version !== undefined) return `weights v${op.weights_version}`;
    return "";
  }

  // --- loss chart (uPlot) ----------------------------------------------------------------------
  // x numbers every forward-backward a session submitted, so a failed one keeps its place: the line runs
  // through the completed ones and a red ✕ with a dashed rule marks each failure.
  function drawLoss(curves) {
    const box = $("loss-chart");
    const points = curves.reduce((n, c) => n + c.loss.length, 0);
    const failed = curves.flatMap((c) => (c.failed || []).map((f) => ({...f, label: c.label})));
    box.dataset.points = String(points);
    box.dataset.series = String(curves.length);
    box.dataset.failed = [...new Set(failed.map((f) => f.x))].sort((a, b) => a - b).join(" ");
    state.failedMarks = failed;
    const note = $("loss-failed");
    note.hidden = !failed.length;
    if (failed.length) {
      const bySession = curves.filter((c) => (c.failed || []).length).map((c) => {
        const codes = [...new Set(c.failed.map((f) => (f.code || "").replace(/^.*_ERROR_CODE_/, "")))].join(", ");
        return `${c.label}: #${c.failed.map((f) => f.x).join(", #")}${codes ? ` (${codes})` : ""}`;
      });
      note.textContent = `✕ ${failed.length} failed forward-backward${failed.length === 1 ? "" : "s"}: ${bySession.join("; ")}`;
    }
    $("loss-empty").hidden = points > 0 || failed.length > 0;
    if (!points && !failed.length) {
      if (state.chart) { state.chart.destroy(); state.chart = null; state.chartKey = ""; }
      return;
    }
    const xs = [...new Set([...curves.flatMap((c) => c.x), ...failed.map((f) => f.x)])].sort((a, b) => a - b);
    const data = [xs, ...curves.map((c) => {
      const at = new Map(c.x.map((x, i) => [x, c.loss[i]]));
      return xs.map((x) => (at.has(x) ? at.get(x) : null));
    })];
    const key = curves.map((c) => `${c.session_id}:${c.label}:${c.loss[c.loss.length - 1]}`).join(",");
    const width = Math.max(300, box.clientWidth);
    if (state.chart && state.chartKey === key && state.chart.width === width) {
      state.chart.setData(data);
      return;
    }
    if (state.chart) state.chart.destroy();
    // Steps are whole numbers: integer ticks only. The legend names each curve (display name or short id)
    // with its latest loss; it is not live, so there is no "step: --" row for the x values.
    state.chart = new uPlot({
      width, height: 240,
      scales: {x: {time: false}, y: {range: safeRange}},
      legend: {live: false},
      axes: [{label: "forward-backward # (every one submitted)", stroke: "#6b7480", incrs: INTEGER_STEPS,
              values: (u, ticks) => {
                const shown = ticks.map((t) => (Number.isInteger(t) ? String(t) : ""));
                box.dataset.xticks = shown.filter(Boolean).join(" ");  // what the axis reads, for tests
                return shown;
              }},
             {label: "loss", stroke: "#6b7480", size: 60, values: (u, ticks) => ticks.map((t) => fmtAxis(t))}],
      series: [{label: "step"}, ...curves.map((c, i) => ({
        label: `${c.label}  (last ${fmtLoss(c.loss[c.loss.length - 1])})`,
        stroke: PALETTE[i % PALETTE.length], width: 2, spanGaps: true,
      }))],
      hooks: {draw: [drawFailed]},
    }, data, box);
    state.chartKey = key;
  }
  const INTEGER_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];

  function drawFailed(u) {
    const ctx = u.ctx, {top, height} = u.bbox, px = window.devicePixelRatio || 1;
    ctx.save();
    ctx.strokeStyle = ctx.fillStyle = "#d9453b";
    ctx.lineWidth = 1.5 * px;
    ctx.font = `${Math.round(13 * px)}px system-ui, sans-serif`;
    ctx.textAlign = "center";
    for (const f of state.failedMarks) {
      const x = u.valToPos(f.x, "x", true);
      ctx.setLineDash([4 * px, 3 * px]);
      ctx.beginPath();
      ctx.moveTo(x, top + 14 * px);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillText("✕", x, top + 12 * px);
    }
    ctx.restore();
  }

  // A y range uPlot can tick: values that differ only in their ninth digit (an on-policy ratio of 0.99999999)
  // make it step by 1e-9 from 1 and fail; such a range is widened to a thousandth of its size.
  function safeRange(u, min, max) {
    if (min == null || max == null) return [0, 1];
    const mid = (min + max) / 2, least = Math.max(Math.abs(mid) * 1e-4, 1e-12);
    if (max - min < least) {
      const pad = Math.max(Math.abs(mid) * 1e-3, 1e-9);
      return [mid - pad, mid + pad];
    }
    return uPlot.rangeNum(min, max, 0.1, true);
  }

  function fmtAxis(t) {
    return t !== 0 && Math.abs(t) < 0.001 ? t.toExponential(0) : String(+t.toPrecision(6));
  }

  // --- small charts: the loss metrics and the sampling per weights version ---------------------
  // What each metric of emulator/compute/losses.py means, for a chart's caption.
  const METRICS = {
    "loss/mean": "the loss per counted token (cross-entropy: the sum over the weights' sum)",
    "loss/ratio/mean": "mean importance ratio p(new) / p(sampler) over counted tokens: 1 on-policy, moves as the policy learns",
    "loss/clip/high_fraction": "share of counted tokens whose gradient the upper clip (or trust region) removed",
    "loss/clip/low_fraction": "share of counted tokens whose gradient the lower clip (or trust region) removed",
    "loss/kl_sample/mean": "mean log p(sampler) − log p(new): how far the trained policy moved from the one that sampled",
    "loss/kl_ref/mean": "mean KL (k3 estimator) to the reference policy (reference_logprobs)",
    "loss/penalty/mean": "DRO's quadratic penalty, mean over counted tokens",
    "loss/num_tokens": "tokens the loss counted (non-zero weights or mask): grows with completion lengths",
    "loss/weight_sum": "sum of the weights",
  };
  const METRIC_ORDER = Object.keys(METRICS);

  // One small uPlot per key, made again only when its series or width change; otherwise its data is replaced.
  function smallChart(container, key, title, caption, xLabel, series, data, opts) {
    let box = container.querySelector(`[data-chart="${CSS.escape(key)}"]`);
    if (!box) {
      box = el("div", {class: "chart", dataset: {chart: key}}, el("h3", null, title),
               el("p", {class: "muted caption"}, caption), el("div", {class: "plot"}));
      container.append(box);
    }
    const plot = box.querySelector(".plot");
    box.dataset.points = String(data[0].length);
    box.dataset.series = String(series.length);
    const width = Math.max(220, box.clientWidth - 4);
    const shape = `${width}|${series.map((s) => s.label).join("|")}`;
    const old = state.charts.get(key);
    if (old && old.shape === shape) { old.chart.setData(data); return box; }
    if (old) old.chart.destroy();
    const chart = new uPlot({
      width, height: 150, legend: {live: false}, scales: {x: {time: false}, y: {range: safeRange}, ...(opts.scales || {})},
      axes: [{label: xLabel, stroke: "#6b7480", incrs: INTEGER_STEPS, labelSize: 18, size: 30,
              values: (u, ticks) => ticks.map((t) => (Number.isInteger(t) ? String(t) : ""))},
             {stroke: "#6b7480", size: 50, values: (u, ticks) => ticks.map((t) => fmtAxis(t))}],
      series: [{label: "x"}, ...series],
    }, data, plot);
    state.charts.set(key, {chart, shape});
    return box;
  }

  function dropCharts(container, keep) {
    for (const box of [...container.querySelectorAll("[data-chart]")]) {
      if (keep.has(box.dataset.chart)) continue;
      const old = state.charts.get(box.dataset.chart);
      if (old) old.chart.destroy();
      state.charts.delete(box.dataset.chart);
      box.remove();
    }
  }

  // Union of the curves' x values, and each curve's values on it (null where it has none).
  function align(curves, valuesOf) {
    const xs = [...new Set(curves.flatMap((c) => c.x))].sort((a, b) => a - b);
    return [xs, ...curves.map((c) => {
      const at = new Map(c.x.map((x, i) => [x, valuesOf(c)[i]]));
      return xs.map((x) => (at.has(x) && at.get(x) !== undefined ? at.get(x) : null));
    })];
  }

  function drawMetrics(curves) {
    const container = $("metrics-charts");
    const names = [...new Set(curves.flatMap((c) => Object.keys(c.metrics || {})))]
      .sort((a, b) => (METRIC_ORDER.indexOf(a) + 1 || 99) - (METRIC_ORDER.indexOf(b) + 1 || 99) || a.localeCompare(b));
    $("metrics-empty").hidden = names.length > 0;
    for (const name of names) {
      const mine = curves.filter((c) => c.metrics && c.metrics[name] && c.metrics[name].some((v) => v !== null));
      if (!mine.length) continue;
      const box = smallChart(container, `metric:${name}`, name, METRICS[name] || "a metric the loss returned",
        "forward-backward #", mine.map((c) => ({label: c.label, stroke: colorOf(curves, c), width: 1.5, spanGaps: true})),
        align(mine, (c) => c.metrics[name]), {});
      box.dataset.metric = name;
    }
    dropCharts(container, new Set(names.map((n) => `metric:${n}`)));
  }

  function drawSampling(groups) {
    const container = $("sampling-charts");
    $("sampling-empty").hidden = groups.length > 0;
    if (!groups.length) { dropCharts(container, new Set()); return; }
    // Lengths: the mean as a line, the shortest and longest thin and dashed, in the session's colour.
    const lengths = groups.flatMap((g, i) => [
      {label: `${g.label} mean`, stroke: PALETTE[i % PALETTE.length], width: 2},
      {label: "min", stroke: PALETTE[i % PALETTE.length], width: 1, dash: [3, 3]},
      {label: "max", stroke: PALETTE[i % PALETTE.length], width: 1, dash: [3, 3]}]);
    const xs = [...new Set(groups.flatMap((g) => g.x))].sort((a, b) => a - b);
    const on = (g, values) => { const at = new Map(g.x.map((x, i) => [x, values[i]])); return xs.map((x) => (at.has(x) ? at.get(x) : null)); };
    smallChart(container, "length", "completion length (tokens)",
      "mean, shortest and longest completion sampled from each weights version", "weights version",
      lengths, [xs, ...groups.flatMap((g) => [on(g, g.length_mean), on(g, g.length_min), on(g, g.length_max)])], {});
    // Stop reasons: the share of each version's completions that stopped for each reason.
    const reasons = [...new Set(groups.flatMap((g) => Object.keys(g.stop || {})))].sort();
    const series = [], data = [xs];
    groups.forEach((g, i) => reasons.forEach((r, j) => {
      if (!(g.stop || {})[r]) return;
      series.push({label: `${groups.length > 1 ? `${g.label} ` : ""}${r.toLowerCase()} %`, stroke: PALETTE[(i + j * 3) % PALETTE.length],
                   width: 1.5, dash: j ? [5, 3] : undefined});
      data.push(on(g, g.stop[r].map((n, k) => (100 * n) / g.completions[k])));
    }));
    smallChart(container, "stop", "stop reasons (% of completions)",
      "length: the completion hit max_tokens; stop: it ended on a stop token or sequence", "weights version",
      series, data, {scales: {y: {range: [0, 100]}}});
  }

  const colorOf = (curves, c) => PALETTE[curves.indexOf(c) % PALETTE.length];

  // --- timeline (SVG) --------------------------------------------------------------------------
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // One lane per resource and per session (under its resource); a session's operations are marks on its lane,
  // coloured by status, its own status a thin band beneath them. A resource's sessions fold away (click its
  // name); a session unfolds into one row per kind of operation (click its name).
  const END_STATUSES = new Set(["STOPPED", "EXPIRED", "ERROR", "FAILED", "COMPLETED"]);
  function drawTimeline() {
    const v = state.view;
    const box = $("timeline");
    if (!v || !state.clock) return;
    const rows = v.timeline.rows;
    if (!rows.length) { box.replaceChildren(el("p", {class: "empty"}, "Nothing has happened yet.")); return; }
    const now = Date.parse(state.clock.now);
    const windowSeconds = Number($("timeline-window").value);
    const firsts = rows.flatMap((r) => [Date.parse(r.segments[0].start), ...(r.marks || []).slice(0, 1).map((m) => Date.parse(m.start))]);
    // A finished run (every resource and session in an end status, no operation still to finish) ends at its last
    // event: the window stops there instead of stretching to a clock that has moved on without it.
    const finished = rows.every((r) => END_STATUSES.has(short(r.segments[r.segments.length - 1].status)))
      && rows.every((r) => (r.marks || []).every((m) => m.end));
    const last = Math.max(...rows.flatMap((r) => [...r.segments.map((g) => Date.parse(g.end || g.start)),
                                                   ...(r.marks || []).map((m) => Date.parse(m.end || m.start))]));
    let end = finished ? Math.min(now, last) : now;
    let start = windowSeconds ? end - windowSeconds * 1000 : Math.min(...firsts);
    if (end - start < 1000) start = end - 1000;
    const span = end - start;
    end += span * 0.01;  // room for the newest marks at the right edge
    const width = Math.max(400, box.clientWidth), labelW = 230, top = 18;
    const plotW = width - labelW - 8;
    const x = (t) => labelW + ((t - start) / (end - start)) * plotW;
    // Lay the lanes out first: [kind, row, height, extra]
    const lanes = [];
    let hiddenUnder = null;
    for (const row of rows) {
      if (row.kind === "model_resources") {
        hiddenUnder = state.collapsed.has(row.id) ? row.id : null;
        const n = rows.filter((r) => r.parent === row.id).length;
        lanes.push({row, h: 20, n});
      } else if (!hiddenUnder) {
        lanes.push({row, h: 26});
        if (state.expanded.has(row.id)) {
          const kinds = [...new Set((row.marks || []).map((m) => m.kind))]
            .sort((a, b) => v.timeline.kinds.indexOf(a) - v.timeline.kinds.indexOf(b));  // (the server's order)
          for (const kind of kinds) lanes.push({row, kind, h: 15});
        }
      }
    }
    const height = top + lanes.reduce((n, l) => n + l.h, 0) + 4;
    const root = svg("svg", {width, height, viewBox: `0 0 ${width} ${height}`, "data-start": new Date(start).toISOString(),
                             "data-end": new Date(end).toISOString(), "data-finished": String(finished)});
    $("timeline-finished").hidden = !(finished && now > end);
    if (finished && now > end) {
      $("timeline-finished").textContent = `Finished: everything here ended by ${new Date(end).toISOString().slice(0, 23).replace("T", " ")};`
        + " the window ends there (the clock has moved on since).";
    }
    const precise = span < 10_000;
    for (let i = 0; i <= 4; i++) {
      const t = start + (span * i) / 4;
      const gx = x(t);
      root.append(svg("line", {class: "grid", x1: gx, x2: gx, y1: top - 4, y2: height - 4}));
      const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
      root.append(svg("text", {class: "axis", x: gx, y: 11, "text-anchor": anchor},
                      new Date(t).toISOString().slice(11, precise ? 23 : 19)));
    }
    const label = (g, text, suffix, y, indent, toggle, open) => {
      const room = 34 - suffix.length;
      const name = (text.length > room ? `${text.slice(0, room - 1)}…` : text) + suffix;
      const t = svg("text", {class: toggle ? "label toggle" : "label", x: indent, y}, `${toggle ? (open ? "▾ " : "▸ ") : ""}${name}`);
      if (toggle) {
        t.setAttribute("role", "button");
        t.setAttribute("data-toggle", toggle);
        t.setAttribute("aria-expanded", String(open));
        t.addEventListener("click", () => {
          const set = toggle === "resource" ? state.collapsed : state.expanded;
          const id = g.getAttribute("data-id");
          if (set.has(id)) set.delete(id); else set.add(id);
          drawTimeline();
        });
      }
      g.append(t);
    };
    const bar = (g, seg, y, h, kind) => {
      const s = Math.max(start, Date.parse(seg.start));
      const e = Math.min(seg.end ? Date.parse(seg.end) : now, end);
      if (e < start) return;
      const rect = svg("rect", {class: `st-${short(seg.status)}`, x: x(s), y, height: h, width: Math.max(1.5, x(e) - x(s)), rx: 2});
      rect.append(svg("title", {}, `${kind ? `${kind} ` : ""}${short(seg.status)}  ${seg.start} → ${seg.end || "now"}`));
      g.append(rect);
    };
    const mark = (g, m, y, h) => {
      const s = Math.max(start, Date.parse(m.start));
      const e = Math.min(m.end ? Date.parse(m.end) : now, end);
      if (e < start) return;
      const rect = svg("rect", {class: `mark st-${short(m.status)}`, "data-kind": m.kind, x: x(s) - 1, y, height: h,
                                width: Math.max(2, x(e) - x(s) + 1)});
      rect.append(svg("title", {}, `${m.kind} ${short(m.status)}  ${m.start} → ${m.end || "now"}`));
      g.append(rect);
    };
    let y = top;
    for (const lane of lanes) {
      const row = lane.row;
      if (row.kind === "model_resources") {
        const g = svg("g", {class: "lane lane-resource", "data-id": row.id});
        const open = !state.collapsed.has(row.id);
        label(g, `${row.label} ${shortId(row.id, 8)}`, open ? "" : ` (${lane.n} session${lane.n === 1 ? "" : "s"})`,
              y + 13, 0, lane.n ? "resource" : null, open);
        for (const seg of row.segments) bar(g, seg, y + 3, 13);
        root.append(g);
      } else if (!lane.kind) {
        const g = svg("g", {class: "lane lane-session", "data-id": row.id, "data-marks": String((row.marks || []).length)});
        const open = state.expanded.has(row.id);
        const name = row.label === row.id ? shortId(row.id, 8) : row.label;
        label(g, name, ` · ${(row.marks || []).length + (row.more || 0)} ops`, y + 15, 10,
              (row.marks || []).length ? "session" : null, open);
        for (const seg of row.segments) bar(g, seg, y + 19, 4);
        if (!open) for (const m of row.marks || []) mark(g, m, y + 3, 14);
        root.append(g);
      } else {
        const g = svg("g", {class: "lane lane-kind", "data-id": row.id, "data-kind": lane.kind});
        g.append(svg("text", {class: "label axis", x: 26, y: y + 11}, lane.kind));
        for (const m of row.marks.filter((mm) => mm.kind === lane.kind)) mark(g, m, y + 2, 11);
        root.append(g);
      }
      y += lane.h;
    }
    if (now <= end) root.append(svg("line", {class: "nowline", x1: x(now), x2: x(now), y1: top - 4, y2: height - 4}));
    box.replaceChildren(root);
  }

  // --- clock -----------------------------------------------------------------------------------
  // A tenant with a clock of its own shows that clock; the buttons still move the global one, which such a
  // tenant does not follow (move its clock with /_emulator/clock and X-Emulator-Tenant).
  const ownClock = () => state.clock && state.clock.scope === "tenant";
  const clockEdits = new Set();  // ids of the clock form's fields changed since it was last set

  function showClock(clock) {
    state.clock = clock;
    $("clock-scope").textContent = clock.scope === "tenant"
      ? "this tenant's own (the buttons move the global clock, which every other tenant follows)"
      : "global: every tenant's time";
    $("clock-now").textContent = clock.now.replace("T", " ").replace("Z", " UTC");
    $("clock-mode").textContent = clock.mode;
    $("clock-speed").textContent = String(clock.speed);
    document.body.dataset.clock = clock.now;
    // The form follows the clock, but a field the user changed keeps its value until the form is set: with
    // a running clock the page hears of it many times a second, and focus moves on between the fields.
    for (const [id, value] of [["clock-mode-input", clock.mode], ["clock-speed-input", String(clock.speed)]]) {
      if (!clockEdits.has(id) && document.activeElement !== $(id)) $(id).value = value;
    }
  }

  async function advance(seconds) {
    const global = await call("POST", `${ADMIN}/clock/advance`, {seconds});
    if (!ownClock()) showClock(global);
    refresh();  // the stream would notice within a tick; this shows the result at once
  }

  // --- replay (a replay server's page: no faults or scenarios, its progress and a rewind) -----------
  function showReplay(replay) {
    state.replay = replay || null;
    $("replay-panel").hidden = !replay;
    if (!replay) return;
    $("faults-panel").hidden = true;
    $("scenarios-panel").hidden = true;
    $("replay-progress").textContent = `answered ${replay.answered} of ${replay.recorded} recorded requests`
      + `, ${replay.unanswered_total} unanswered, ${replay.rewinds} rewind(s)${replay.loop ? ", looping" : ""}`
      + (replay.pace ? `, paced at ${replay.pace}×` : "");
  }

  async function rewind() {
    await call("POST", `${ADMIN}/replay/rewind`);
    say("Rewound: the recording answers from its start again");
    refresh();
  }

  // --- faults ----------------------------------------------------------------------------------
  function showFaults(faults) {
    state.faults = faults;
    fill("faults", faults.map((f) => el("tr", {dataset: {name: f.name}},
      el("td", {class: "rule", title: JSON.stringify(f, null, 1)}, el("div", {class: "name mono"}, words(f.name)), describeRule(f)),
      el("td", {class: "num", title: `fired on ${f.fired} request(s) of the ${f.matched} it matched`},
         el("b", {class: "fired"}, f.fired), " / ", el("span", {class: "matched"}, f.matched)),
      el("td", null, el("button", {type: "button", class: "remove", title: `remove ${f.name}`,
                                   onclick: () => removeFault(f.name).catch(fail)}, "Remove")))), "faults-empty");
  }

  function describeRule(f) {
    // An operationId reads as itself; the other keys are named.
    const match = Object.entries(f.match || {}).flatMap(([k, v]) => [" ", k === "operation_id" ? words(v) : words(`${k}=${v}`)]).slice(1);
    if (!match.length) match.push("every request");
    const t = f.trigger || {};
    const when = "first_n" in t ? `first ${t.first_n}` : "nth" in t ? `call ${t.nth.join(", ")}`
      : "probability" in t ? `p=${t.probability}` : "always";
    const effect = Object.entries(f.effect || {})
      .map(([k, v]) => `${k} ${String(v).replace(/^.*_ERROR_CODE_/, "")}`).join(", ");
    return [el("div", {class: "mono match"}, match), el("div", {class: "muted"}, `${when} → `, words(effect))];
  }

  async function removeFault(name) {
    await call("DELETE", `${ADMIN}/faults/${encodeURIComponent(name)}`);
    say(`Removed fault rule ${name}`);
    showFaults((await call("GET", `${ADMIN}/faults`)).data);
  }

  async function addFault(text) {
    let rule;
    try { rule = JSON.parse(text); } catch (e) { throw new Error(`the rule is not valid JSON: ${e.message}`); }
    const added = await call("POST", `${ADMIN}/faults`, rule);
    say(`Added fault rule ${added.data.map((r) => r.name).join(", ")}`);
    showFaults((await call("GET", `${ADMIN}/faults`)).data);
  }

  // --- scenarios -------------------------------------------------------------------------------
  async function loadScenarios() {
    const list = (await call("GET", `${ADMIN}/scenarios`)).data;
    $("scenario").replaceChildren(...list.map((s) => el("option", {value: s.name, title: s.description}, s.name)));
    const describe = () => {
      const s = list.find((x) => x.name === $("scenario").value);
      $("scenario-description").textContent = s ? s.description : "";
    };
    $("scenario").addEventListener("change", describe);
    describe();
  }

  async function loadScenario(name) {
    const loaded = await call("POST", `${ADMIN}/scenarios/${encodeURIComponent(name)}`);
    const found = await call("GET", `${BASE}/api/lookup?api_key=${encodeURIComponent(loaded.token)}`);
    say(`Loaded scenario ${name} into the tenant of API key ${loaded.token}`);
    if (found.project === project) refresh();
    else location.assign(tenantUrl(found.project));
  }

  // --- events ----------------------------------------------------------------------------------
  function mergeEvents(events, seq) {
    const fresh = events.filter((e) => e.seq > state.lastSeq);
    if (fresh.length) {
      state.events = state.events.concat(fresh).slice(-200);
      drawEvents();
    }
    state.lastSeq = Math.max(state.lastSeq, seq || 0, ...fresh.map((e) => e.seq));
  }

  function describeEvent(e) {
    if (e.type === "transition") {
      const what = e.op_kind ? `${e.kind} ${e.op_kind}` : e.kind;
      return [el("span", {class: "t"}, time(e.at)), `${what} `, el("span", {class: "nowrap", title: e.id}, shortId(e.id)), " ",
              e.from ? `${short(e.from)} → ` : "", el("b", null, short(e.to)),
              e.reason ? ` (${e.reason})` : "", project ? "" : el("span", {class: "muted"}, `  ${e.project}`)];
    }
    if (e.type === "warning") {
      return [el("span", {class: "t"}, time(e.at)), el("span", {class: "warning"}, "warning "),
              words(`${e.operation_id}`), `: ${e.message}`, project ? "" : el("span", {class: "muted"}, `  ${e.project}`)];
    }
    if (e.type === "fault") {
      return [el("span", {class: "t"}, "fault"), el("span", {class: "fault"}, words(e.rule)), " ", words(`${e.operation_id || e.path}`)];
    }
    return [JSON.stringify(e)];
  }

  function drawEvents() {
    $("events").replaceChildren(...state.events.slice().reverse().map((e) => el("li", {dataset: {seq: e.seq}}, describeEvent(e))));
  }

  // --- the stream ------------------------------------------------------------------------------
  function connect() {
    const query = new URLSearchParams({since: String(state.lastSeq)});
    if (project) query.set("project", project);
    if (adminToken) query.set("admin_token", adminToken);
    const source = new EventSource(`${BASE}/api/stream?${query}`);
    const live = $("live");
    source.onopen = () => { live.dataset.state = "live"; live.textContent = "live"; };
    // A stream ends every few seconds and the browser reconnects with Last-Event-ID.
    // A refused stream (the server's cap on open streams: 429) closes it for good: try again later.
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        live.dataset.state = "offline"; live.textContent = "offline";
        setTimeout(connect, 5000);
      }
    };
    source.addEventListener("log", (msg) => {
      const events = JSON.parse(msg.data);
      mergeEvents(events, 0);
      refreshSoon();
    });
    source.addEventListener("clock", (msg) => { showClock(JSON.parse(msg.data)); drawTimeline(); });
    source.addEventListener("faults", (msg) => showFaults(JSON.parse(msg.data)));
    source.addEventListener("tenant", (msg) => {
      const exists = JSON.parse(msg.data).exists;
      $("gone").hidden = exists;
      if (exists) refreshSoon();
    });
  }

  // --- wiring ----------------------------------------------------------------------------------
  function wire() {
    $("home").href = withToken(BASE);
    if (project) {
      $("crumb").textContent = project;
      document.title = `${project} - RL emulator`;
      $("tenant-panel").hidden = false;
    } else {
      $("tenants-panel").hidden = false;
    }
    for (const button of document.querySelectorAll("[data-advance]")) {
      button.addEventListener("click", () => advance(Number(button.dataset.advance)).catch(fail));
    }
    $("advance-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const seconds = Number($("advance-seconds").value);
      if ($("advance-seconds").value === "" || !(seconds >= 0)) { say("seconds must be a number >= 0", true); return; }
      advance(seconds).catch(fail);
    });
    for (const id of ["clock-mode-input", "clock-speed-input"]) $(id).addEventListener("input", () => clockEdits.add(id));
    $("clock-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      clockEdits.clear();
      const body = {mode: $("clock-mode-input").value};
      if ($("clock-speed-input").value !== "") body.speed = Number($("clock-speed-input").value);
      call("POST", `${ADMIN}/clock`, body).then((clock) => { if (!ownClock()) showClock(clock); refresh(); }).catch(fail);
    });
    const examples = $("fault-example");
    examples.replaceChildren(el("option", {value: ""}, "example rules…"),
      ...Object.keys(FAULT_EXAMPLES).map((k) => el("option", {value: k}, k)));
    examples.addEventListener("change", () => {
      if (examples.value) $("fault-rule").value = JSON.stringify(FAULT_EXAMPLES[examples.value], null, 1);
    });
    $("fault-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      addFault($("fault-rule").value).catch(fail);
    });
    $("scenario-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      loadScenario($("scenario").value).catch(fail);
    });
    $("lookup").addEventListener("submit", (ev) => {
      ev.preventDefault();
      openKey($("lookup-key").value.trim()).catch(fail);
    });
    $("timeline-window").addEventListener("change", drawTimeline);
    $("rewind").addEventListener("click", () => rewind().catch(fail));
    let resizeTimer = null;
    window.addEventListener("resize", () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => {
        if (state.view) { drawLoss(state.view.losses); drawMetrics(state.view.losses); drawSampling(state.view.sampling || []); drawTimeline(); }
      }, 150);
    });
    $("timeline-legend").replaceChildren(...STATUSES.flatMap((s) => [el("span", {class: `badge st-${s}`}, s), " "]));
  }

  wire();
  load().then(() => { if (!state.replay) loadScenarios().catch(fail); }).catch(fail).finally(connect);
})();
