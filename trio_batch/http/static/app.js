// trio-batch dashboard: a page over the service's public JSON API, nothing more.
//
// Rules this file keeps:
// - Results, URLs, errors and hints are untrusted: they reach the page only as textContent,
//   never as HTML (the server's Content-Security-Policy enforces Trusted Types, so a string
//   assigned to innerHTML would throw rather than render).
// - The token lives in this tab's sessionStorage and travels only in the Authorization header
//   (never in a URL or a cookie). The event stream is read with fetch() for that reason:
//   EventSource cannot send headers.
// - Behind a gateway that names the caller itself (serve --caller-header), no token is asked
//   for: the page finds out by reading one job without one, and sends the gateway its own
//   cookies (same origin only).
"use strict";

const TOKEN_KEY = "trio-batch.token";
const PAGE = 20; // jobs per page of the list
const MAX_PAGE = 100; // the most GET /v1/batches gives at once
const PREVIEW_CHARS = 2000; // of each result's content shown on the job page
const LIST_POLL_MS = 2000; // how often the jobs list refreshes while a job is live
const STREAM_IDLE_MS = 45000; // no bytes for this long (3 missed keep-alives): reconnect
const RECONNECT_MS = [500, 1000, 2000, 4000, 5000];
const URL_SHOWN = 120; // longer URLs show shortened in their row; the whole one on demand

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------------------------------------
// Small helpers

// Control characters and bidi marks and overrides, shown as escapes: an invisible U+202E in a
// result makes "gnp.exe" read "exe.png" (the same set the command line escapes).
const UNSEEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** ``text`` with every control or bidi character spelled as ``\x1b`` or ``\u202e``. */
function visible(text) {
  return String(text)
    .replace(/\r\n/g, "\n")
    .replace(UNSEEN, (ch) => {
      const code = ch.charCodeAt(0);
      const hex = code.toString(16);
      return code < 0x100 ? `\\x${hex.padStart(2, "0")}` : `\\u${hex.padStart(4, "0")}`;
    });
}

/** An element with text content (never HTML, controls made visible), class and children. */
function el(tag, { cls, text, label } = {}, ...children) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = visible(text);
  if (label) node.dataset.label = label;
  for (const child of children) if (child) node.append(child);
  return node;
}

function showOnly(viewId) {
  for (const id of ["sign-in-view", "jobs-view", "job-view"]) $(id).hidden = id !== viewId;
}

function notice(text) {
  $("notice").textContent = visible(text || "");
  $("notice").hidden = !text;
}

function age(seconds) {
  const s = Math.max(0, Date.now() / 1000 - seconds);
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

const isLive = (status) => status === "pending" || status === "running";

/** Fill a progress bar's done and failed segments from a job's counts. */
function setBar(bar, job) {
  const total = Math.max(1, job.targets_total);
  const [done, failed] = bar.querySelectorAll(".seg");
  done.style.width = `${(100 * job.counts.done) / total}%`; // CSSOM, allowed by the CSP
  failed.style.width = `${(100 * job.counts.failed) / total}%`;
}

function countsText(job) {
  const c = job.counts;
  return `${c.done} done · ${c.failed} failed · ${c.pending + c.running} pending of ${job.targets_total}`;
}

function badge(node, status) {
  node.textContent = status;
  node.className = `badge st-${status}`;
}

// ---------------------------------------------------------------------------------------------
// The API

class SignedOut extends Error {}

const token = () => sessionStorage.getItem(TOKEN_KEY);
let byGateway = false; // the service knows the caller without a token (serve --caller-header)

/** fetch() with the bearer token, if any; a 401 signs the tab out. */
async function api(path, init = {}) {
  const headers = new Headers(init.headers || {});
  const bearer = token();
  if (bearer !== null) headers.set("Authorization", `Bearer ${bearer}`);
  const res = await fetch(path, { ...init, headers, cache: "no-store", credentials: "same-origin" });
  if (res.status === 401) {
    byGateway = false;
    signOut(
      bearer !== null
        ? "The service did not accept the token; sign in again."
        : "The gateway in front of the service no longer names you; sign in again.",
    );
    throw new SignedOut();
  }
  return res;
}

/** Whether the service answers without a token: a gateway in front of it names the caller. */
async function probeGateway() {
  try {
    const res = await fetch("/v1/batches?limit=1", { cache: "no-store", credentials: "same-origin" });
    byGateway = res.ok;
  } catch {
    byGateway = false;
  }
}

async function body(res) {
  try {
    return await res.json();
  } catch {
    return { title: `HTTP ${res.status}`, detail: "the answer was not JSON" };
  }
}

// ---------------------------------------------------------------------------------------------
// Signing in and out

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  stopStream();
  $("sign-in-error").textContent = visible(message || "");
  route();
}

async function signIn(event) {
  event.preventDefault();
  const value = $("token").value.trim();
  $("sign-in-error").textContent = "";
  if (!value) return;
  // The smallest page of the caller's jobs: 200 for a known token, 401 for an unknown one.
  const res = await fetch("/v1/batches?limit=1", {
    headers: { Authorization: `Bearer ${value}` },
    cache: "no-store",
    credentials: "same-origin",
  });
  if (res.status === 401) {
    $("sign-in-error").textContent = "The service does not know that token.";
    return;
  }
  if (!res.ok) {
    const problem = await body(res);
    $("sign-in-error").textContent = visible(`${problem.title}: ${problem.detail}`);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, value);
  $("token").value = "";
  location.hash = "#/";
  route();
}

// ---------------------------------------------------------------------------------------------
// The jobs list (the caller's jobs, newest first, a page at a time) and the submit form

let listTimer = null;
let listShown = PAGE; // how many jobs the list holds (it grows with "More")
let listNext = null; // the next page's link
let pendingNotice = ""; // shown once the next view is up

/** Load the list's first ``listShown`` jobs; refreshed every few seconds while one is live. */
async function renderJobs() {
  clearTimeout(listTimer);
  const res = await api(`/v1/batches?limit=${Math.min(listShown, MAX_PAGE)}${filterQuery()}`);
  const page = await body(res);
  if ($("jobs-view").hidden) return; // navigated away meanwhile
  $("filter-problem").textContent = res.status === 422 ? visible(page.detail) : "";
  if (!res.ok) {
    if (res.status !== 422) notice(`${page.title}: ${page.detail}`);
    return;
  }
  $("jobs").replaceChildren(...page.jobs.map(jobItem));
  listNext = page.next;
  showListState(page.jobs);
}

/** The filter form as query parameters (``&``-prefixed), or "" without a filter. */
function filterQuery() {
  const params = new URLSearchParams();
  const status = $("filter-status").value;
  const label = $("filter-label").value.trim();
  if (status) params.append("status", status);
  if (label) params.append("label", label);
  const text = params.toString();
  return text ? `&${text}` : "";
}

/** A job's metadata as one line of ``key=value`` pairs (text only). */
function metadataText(job) {
  return Object.entries(job.metadata || {})
    .map(([key, value]) => `${key}=${value}`)
    .join(" · ");
}

async function moreJobs() {
  if (!listNext || !listNext.startsWith("/v1/batches?")) return;
  const res = await api(listNext);
  const page = await body(res);
  if (!res.ok) {
    notice(`${page.title}: ${page.detail}`);
    return;
  }
  $("jobs").append(...page.jobs.map(jobItem));
  listShown += page.jobs.length;
  listNext = page.next;
  showListState(null);
}

function showListState(jobs) {
  $("jobs-empty").hidden = $("jobs").children.length > 0;
  $("jobs-more").hidden = !listNext;
  if (jobs && jobs.some((job) => isLive(job.status))) {
    listTimer = setTimeout(() => renderJobs().catch(reportError), LIST_POLL_MS);
  }
}

function jobItem(job) {
  const link = el("a", { text: job.id });
  link.href = `#/jobs/${encodeURIComponent(job.id)}`;
  const li = el("li", {}, el("span", {}, link));
  li.dataset.job = job.id;
  const status = el("span");
  badge(status, job.status);
  li.append(status);
  li.append(el("span", { cls: "meta", text: `${countsText(job)} · ${age(job.created_at)}` }));
  const labels = metadataText(job);
  if (labels) li.append(el("span", { cls: "meta labels", text: labels }));
  const bar = el("div", { cls: "bar-progress" }, el("span", { cls: "seg done" }), el("span", { cls: "seg failed" }));
  setBar(bar, job);
  li.append(bar);
  return li;
}

/** The textarea's lines as targets, with the line number each came from. */
function parseTargets(text) {
  const targets = [];
  const lines = [];
  text.split("\n").forEach((raw, i) => {
    const line = raw.trim();
    if (!line) return;
    if (line.startsWith("{")) {
      try {
        targets.push(JSON.parse(line));
      } catch (err) {
        throw { title: "Not JSON", detail: String(err.message || err), line: i };
      }
    } else {
      targets.push({ url: line });
    }
    lines.push(i);
  });
  return { targets, lines };
}

function showProblem(problem, text) {
  $("submit-problem").hidden = !problem;
  if (!problem) return;
  $("submit-problem-title").textContent = visible(problem.title || "Error");
  let detail = problem.detail || "";
  if (problem.retryAfter) detail += ` (retry after ${problem.retryAfter} s)`;
  $("submit-problem-detail").textContent = visible(detail);
  // A 429 for a busy caller links the live job in the way.
  const blocking = /^\/v1\/batches\/([A-Za-z0-9_-]+)$/.exec(problem.job || "");
  $("submit-problem-job").hidden = !blocking;
  if (blocking) $("submit-problem-job-link").href = `#/jobs/${blocking[1]}`;
  const hasLine = Number.isInteger(problem.line);
  $("submit-problem-line").hidden = !hasLine;
  if (hasLine) {
    const all = text.split("\n");
    $("submit-problem-lineno").textContent = String(problem.line + 1);
    $("submit-problem-text").textContent = visible(all[problem.line]);
    // Select the offending line so the keyboard lands on it.
    const start = all.slice(0, problem.line).reduce((n, l) => n + l.length + 1, 0);
    $("targets").focus();
    $("targets").setSelectionRange(start, start + all[problem.line].length);
  }
}

async function submit(event) {
  event.preventDefault();
  const text = $("targets").value;
  let parsed;
  try {
    parsed = parseTargets(text);
  } catch (problem) {
    showProblem(problem, text);
    return;
  }
  showProblem(null, text);
  const button = event.submitter || $("submit-form").querySelector("button");
  button.disabled = true;
  try {
    const res = await api("/v1/batches", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ targets: parsed.targets }),
    });
    const data = await body(res);
    if (res.status === 200 || res.status === 201) {
      $("targets").value = "";
      pendingNotice = data.reused ? "The same batch was already live: this is that job." : "";
      location.hash = `#/jobs/${encodeURIComponent(data.id)}`;
      return;
    }
    if (Number.isInteger(data.index)) data.line = parsed.lines[data.index];
    data.retryAfter = res.headers.get("Retry-After");
    showProblem(data, text);
  } finally {
    button.disabled = false;
  }
}

// ---------------------------------------------------------------------------------------------
// The job page and its event stream

let current = null; // { id, job, targets: Map idx -> target, abort, timer, attempt }

function stopStream() {
  if (!current) return;
  clearTimeout(current.timer);
  if (current.abort) current.abort.abort();
  current = null;
}

function targetRow(t) {
  const row = el("tr");
  row.dataset.idx = String(t.idx);
  const status = el("span");
  badge(status, t.status);
  const error = el("td", { label: "Error" });
  if (t.error) error.append(el("span", { cls: "error", text: t.error }));
  if (t.hint) error.append(el("span", { cls: "hint", text: t.hint }));
  const result = el("td", { label: "Result" });
  if (t.result) {
    // From the event stream, which carries small results whole.
    const content = String(t.result.content);
    const details = el("details", {}, el("summary", { text: `result (${content.length} characters)` }));
    showResult(details, t.result);
    details.open = content.length <= 200; // short results show at once
    result.append(details);
  } else if (t.result_url && t.result_url.startsWith("/v1/batches/")) {
    // From the job view (or the stream, for a big result), which gives only the size: the
    // result is read when opened. result_size counts content and meta as stored, and says so;
    // the content's own length is shown once read.
    const stored = `result (${t.result_size} characters stored with its meta)`;
    const details = el("details", {}, el("summary", { text: stored }));
    details.addEventListener("toggle", () => loadResult(details, t.result_url).catch(reportError), {
      once: true,
    });
    result.append(details);
  }
  row.append(
    el("td", { label: "#", text: t.idx }),
    el("td", { label: "URL" }, urlCell(String(t.url))),
    el("td", { label: "Status" }, status),
    el("td", { label: "Attempts", cls: "attempts", text: t.attempts }),
    error,
    result,
  );
  return row;
}

/** A URL as code; a long one shortened, the whole of it shown when its summary is opened. */
function urlCell(url) {
  if (url.length <= URL_SHOWN) return el("code", { cls: "url", text: url });
  const short = `${url.slice(0, URL_SHOWN - 40)}…${url.slice(-39)}`;
  const summary = el("summary", { cls: "url-short" }, el("code", { cls: "url", text: short }));
  summary.title = `${url.length} characters: open to show the whole URL`;
  return el("details", { cls: "url-long" }, summary, el("code", { cls: "url url-whole", text: url }));
}

/** Add a result's preview (as text) and its meta to an opened ``details``. */
function showResult(details, res) {
  const content = String(res.content);
  const note =
    content.length > PREVIEW_CHARS
      ? `The first ${PREVIEW_CHARS} of ${content.length} characters of content:`
      : `${content.length} characters of content:`;
  details.append(el("p", { cls: "note", text: note }));
  details.append(el("pre", { cls: "content", text: content.slice(0, PREVIEW_CHARS) }));
  const lines = provenanceLines(res.meta);
  if (lines.length) {
    details.append(el("ul", { cls: "provenance" }, ...lines.map((line) => el("li", { text: visible(line) }))));
  }
  const meta = JSON.stringify(res.meta, null, 1);
  details.append(el("details", {}, el("summary", { text: "meta" }), el("pre", { cls: "meta", text: meta })));
}

/** Where the built-in fetcher says a result's body came from (its meta), as lines of text:
 * fetched or replayed from a snapshot, the response, its validators, when and by what. */
function provenanceLines(meta) {
  if (!meta || typeof meta !== "object" || typeof meta.sha256 !== "string") return [];
  const lines = [];
  if (meta.replayed === true) lines.push(`replayed from the snapshot of job ${meta.replay}, no network`);
  else if (meta.replay_miss) lines.push(`fetched: not in the snapshot of job ${meta.replay_miss}`);
  else lines.push("fetched from the network");
  if (meta.revalidated) lines.push(`revalidated: ${String(meta.revalidated).replace("_", " ")}`);
  lines.push(`${meta.status_code ?? "no status"} · ${meta.content_type ?? "no type"} · ${meta.bytes} bytes`);
  lines.push(`sha256 ${meta.sha256}`);
  lines.push(`final URL ${meta.url}`);
  if (Array.isArray(meta.redirect_chain) && meta.redirect_chain.length) {
    lines.push(`redirected from ${meta.redirect_chain.join(" → ")}`);
  }
  for (const [key, label] of [["etag", "ETag"], ["last_modified", "Last-Modified"], ["date", "Date"]]) {
    if (meta[key]) lines.push(`${label}: ${meta[key]}`);
  }
  if (typeof meta.fetched_at === "number") {
    lines.push(`fetched ${new Date(meta.fetched_at * 1000).toISOString()} by ${meta.fetcher}`);
  }
  return lines.map(String);
}

async function loadResult(details, url) {
  const res = await api(url);
  const data = await body(res);
  if (res.ok && data.result) {
    showResult(details, data.result);
  } else details.append(el("p", { cls: "error", text: `${data.title}: ${data.detail}` }));
}

function renderJobHead(job) {
  badge($("job-status"), job.status);
  $("job-counts").textContent = countsText(job);
  setBar($("job-bar"), job);
  $("cancel").hidden = !isLive(job.status);
  $("forget").hidden = isLive(job.status);
  // A retry is offered for an ended job with targets that failed or never ran.
  $("retry").hidden = isLive(job.status) || job.targets_done - job.targets_failed >= job.targets_total;
  const labels = metadataText(job);
  const parent = job.parent_id ? `retry of ${job.parent_id}` : "";
  $("job-meta").textContent = visible([labels, parent].filter(Boolean).join(" · "));
  $("job-meta").hidden = !$("job-meta").textContent;
  $("job-error").textContent = visible(job.error || "");
  $("job-error").hidden = !job.error;
  $("job-webhook").textContent = visible(webhookText(job.webhook));
  $("job-webhook").hidden = !job.webhook;
}

/** The job's webhook delivery state in a line (as read with the job; null: no webhook). */
function webhookText(hook) {
  if (!hook) return "";
  const tries = `${hook.attempts} attempt${hook.attempts === 1 ? "" : "s"}`;
  const last = hook.last_answer ? `, last answer: ${hook.last_answer}` : "";
  const when = (t) => new Date(t * 1000).toLocaleString();
  const text = {
    waiting: "sent when the job ends",
    pending: hook.next_attempt_at ? `next attempt ${when(hook.next_attempt_at)}` : "due",
    delivered: hook.delivered_at ? `delivered ${when(hook.delivered_at)}` : "delivered",
    gave_up: "gave up",
  }[hook.state] || hook.state;
  return `Webhook ${hook.url || ""}: ${text} (${tries}${last})`;
}

/** Counts from the targets the page holds (the stream sends the job only at its end). */
function countsFrom(targets) {
  const counts = { pending: 0, running: 0, done: 0, failed: 0 };
  for (const t of targets.values()) counts[t.status] = (counts[t.status] || 0) + 1;
  return counts;
}

/** Show ``t`` in its row (replacing what was there). */
function setRow(state, t) {
  state.targets.set(t.idx, t);
  const old = $("target-rows").querySelector(`tr[data-idx="${t.idx}"]`);
  const row = targetRow(t);
  if (old) old.replaceWith(row);
  else $("target-rows").append(row);
}

function updateTarget(state, t) {
  setRow(state, t);
  // While the job is live its first pending target is the one being fetched: the runner works
  // a job's targets in idx order, one at a time (as the service's own counts say).
  const all = [...state.targets.values()];
  if (isLive(state.job.status) && !all.some((other) => other.status === "running")) {
    const next = all.find((other) => other.status === "pending");
    if (next) setRow(state, { ...next, status: "running" });
  }
  state.job = { ...state.job, counts: countsFrom(state.targets) };
  renderJobHead(state.job);
}

/** The last target index such that every target up to it is finished here: resume after it. */
function resumePoint(state) {
  let idx = -1;
  while (state.targets.has(idx + 1) && !isLive(state.targets.get(idx + 1).status)) idx += 1;
  return idx;
}

async function openJob(id) {
  stopStream();
  const state = { id, job: null, targets: new Map(), abort: null, timer: null, attempt: 0 };
  current = state;
  showOnly("job-view");
  $("job-id").textContent = visible(id); // from the address bar: anything may be in it
  $("job-missing").hidden = true;
  $("job-body").hidden = true;
  $("stream-state").textContent = "";
  const res = await api(`/v1/batches/${encodeURIComponent(id)}`);
  if (current !== state) return;
  if (!res.ok) {
    const problem = await body(res);
    $("job-missing").textContent =
      res.status === 404
        ? "No such job: unknown, lapsed, or not yours."
        : visible(`${problem.title}: ${problem.detail}`);
    $("job-missing").hidden = false;
    return;
  }
  const job = await res.json();
  state.job = job;
  $("target-rows").replaceChildren(...job.targets.map(targetRow));
  for (const t of job.targets) state.targets.set(t.idx, t);
  renderJobHead(job);
  $("job-body").hidden = false;
  if (isLive(job.status)) follow(state);
}

function reconnect(state, why) {
  if (current !== state || !isLive(state.job.status)) return;
  const delay = RECONNECT_MS[Math.min(state.attempt, RECONNECT_MS.length - 1)];
  state.attempt += 1;
  $("stream-state").textContent = `${why}; reconnecting…`;
  state.timer = setTimeout(() => follow(state), delay);
}

/** Follow the job's event stream until its terminal job event, reconnecting after a drop. */
async function follow(state) {
  if (current !== state) return;
  const abort = new AbortController();
  state.abort = abort;
  let idle = null;
  const touch = () => {
    clearTimeout(idle);
    idle = setTimeout(() => abort.abort(), STREAM_IDLE_MS);
  };
  const headers = { Accept: "text/event-stream" };
  const after = resumePoint(state);
  if (after >= 0) headers["Last-Event-ID"] = String(after);
  let why = "stream ended";
  try {
    touch();
    const res = await api(`/v1/batches/${encodeURIComponent(state.id)}/events`, {
      headers,
      signal: abort.signal,
    });
    if (res.status === 404) {
      $("stream-state").textContent = "the job is gone";
      return;
    }
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    $("stream-state").textContent = "live";
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      touch();
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        onEvent(state, parseEvent(block));
      }
      if (current !== state || !isLive(state.job.status)) return;
    }
  } catch (err) {
    if (err instanceof SignedOut) return;
    why = abort.signal.aborted ? "stream stalled" : "connection lost";
  } finally {
    clearTimeout(idle);
  }
  reconnect(state, why);
}

function parseEvent(block) {
  const event = { event: "message", data: "" };
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const key = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (key === "data") event.data += (event.data ? "\n" : "") + value;
    else event[key] = value;
  }
  return event;
}

function onEvent(state, event) {
  if (current !== state || !event.data) return;
  const data = JSON.parse(event.data);
  state.attempt = 0;
  if (event.event === "target") {
    updateTarget(state, data);
  } else if (event.event === "job") {
    state.job = { ...state.job, ...data };
    // Targets a cancel or shutdown left unfetched stay pending; none is running any more.
    for (const t of state.targets.values()) {
      if (t.status === "running") setRow(state, { ...t, status: "pending" });
    }
    renderJobHead(state.job);
    $("stream-state").textContent = "finished";
  } else if (event.event === "shutdown") {
    $("stream-state").textContent = visible(data.detail);
  }
}

async function cancelJob() {
  const state = current;
  if (!state) return;
  $("cancel").disabled = true;
  try {
    const res = await api(`/v1/batches/${encodeURIComponent(state.id)}/cancel`, { method: "POST" });
    const data = await body(res);
    if (res.ok) {
      onEvent(state, { event: "job", data: JSON.stringify(data) });
    } else {
      notice(`${data.title}: ${data.detail}`);
    }
  } finally {
    $("cancel").disabled = false;
  }
}

async function retryJob() {
  const state = current;
  if (!state) return;
  $("retry").disabled = true;
  try {
    const res = await api(`/v1/batches/${encodeURIComponent(state.id)}/retry`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ only: ["failed", "pending"] }),
    });
    const data = await body(res);
    if (res.ok) {
      location.hash = `#/jobs/${encodeURIComponent(data.id)}`;
    } else {
      notice(`${data.title}: ${data.detail}`);
    }
  } finally {
    $("retry").disabled = false;
  }
}

async function forgetJob() {
  const state = current;
  if (!state || !window.confirm(`Forget job ${state.id} and its results? This cannot be undone.`)) {
    return;
  }
  const res = await api(`/v1/batches/${encodeURIComponent(state.id)}`, { method: "DELETE" });
  if (res.status === 204 || res.status === 404) {
    pendingNotice = `Job ${state.id} is forgotten.`;
    location.hash = "#/";
    return;
  }
  const data = await body(res);
  notice(`${data.title}: ${data.detail}`);
}

// ---------------------------------------------------------------------------------------------
// Routing: #/ is the jobs list and submit form, #/jobs/<id> one job.

function reportError(err) {
  if (err instanceof SignedOut) return;
  notice(`Something went wrong: ${err && err.message ? err.message : err}`);
}

function route() {
  const signedIn = byGateway || token() !== null;
  $("sign-out").hidden = !signedIn || byGateway; // the gateway signs people out, not this page
  $("who").textContent = byGateway ? "signed in by the gateway" : signedIn ? "signed in" : "";
  if (!signedIn) {
    stopStream();
    showOnly("sign-in-view");
    $("token").focus();
    return;
  }
  const match = /^#\/jobs\/([^/]+)$/.exec(location.hash);
  let id = null;
  if (match) {
    try {
      id = decodeURIComponent(match[1]);
    } catch {
      // A malformed escape (#/jobs/%E0%A4%A) names no job: say so, rather than throw and
      // leave the previous view up.
      notice(`The address ${location.hash} names no job: its escapes are malformed.`);
    }
  }
  if (id !== null) {
    openJob(id).catch(reportError);
    return;
  }
  stopStream();
  showOnly("jobs-view");
  listShown = PAGE;
  renderJobs().catch(reportError);
}

document.addEventListener("DOMContentLoaded", () => {
  $("sign-in-form").addEventListener("submit", (e) => signIn(e).catch(reportError));
  $("submit-form").addEventListener("submit", (e) => submit(e).catch(reportError));
  $("sign-out").addEventListener("click", () => {
    notice("");
    signOut("Signed out.");
  });
  $("cancel").addEventListener("click", () => cancelJob().catch(reportError));
  $("forget").addEventListener("click", () => forgetJob().catch(reportError));
  $("retry").addEventListener("click", () => retryJob().catch(reportError));
  $("filter-form").addEventListener("submit", (e) => {
    e.preventDefault();
    listShown = PAGE;
    renderJobs().catch(reportError);
  });
  $("jobs-more").addEventListener("click", () => moreJobs().catch(reportError));
  window.addEventListener("hashchange", () => {
    notice(pendingNotice);
    pendingNotice = "";
    route();
  });
  if (token() === null) probeGateway().finally(route);
  else route();
});
