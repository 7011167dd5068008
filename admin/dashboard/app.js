// trendgate dashboard: polls GET /summary every two seconds and renders it.
// The admin token, when the listener needs one, is asked for in a form,
// kept in this variable only, and sent as an Authorization header; it is
// never put in a URL.
"use strict";

const POLL_MS = 2000;
let token = "";
let timer = 0;

const $ = (sel) => document.querySelector(sel);
const figure = (name) => document.querySelector('[data-figure="' + name + '"]');

function setFigure(name, text) {
  const el = figure(name);
  if (el) el.textContent = text;
}

function fixed(x, digits) {
  return typeof x === "number" ? x.toFixed(digits) : "–";
}

function cell(tag, text, cls, fig) {
  const el = document.createElement(tag);
  el.textContent = text;
  if (cls) el.className = cls;
  if (fig) el.dataset.figure = fig;
  return el;
}

function bar(pct, label) {
  const outer = document.createElement("div");
  outer.className = "bar" + (pct >= 100 ? " full" : pct >= 80 ? " high" : "");
  outer.setAttribute("role", "img");
  outer.setAttribute("aria-label", label);
  const inner = document.createElement("span");
  inner.style.width = Math.min(Math.max(pct, 0), 100) + "%";
  outer.appendChild(inner);
  return outer;
}

function setBar(id, pct) {
  const el = document.getElementById(id);
  el.className = "bar" + (pct >= 100 ? " full" : pct >= 80 ? " high" : "");
  el.firstElementChild.style.width = Math.min(Math.max(pct, 0), 100) + "%";
}

function emptyRow(tbody, cols, text) {
  const tr = document.createElement("tr");
  const td = cell("td", text, "empty");
  td.colSpan = cols;
  tr.appendChild(td);
  tbody.appendChild(tr);
}

// setStatus changes the announced status only when it differs, so screen
// readers hear state changes, not every poll.
function setStatus(text) {
  const el = $("#status");
  if (el.textContent !== text) el.textContent = text;
}

// duration renders whole seconds as its two largest units: 3d 4h, 2h 5m,
// 5m 3s, 42s.
function duration(sec) {
  const units = [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]];
  const parts = [];
  for (const [name, size] of units) {
    if (sec >= size || (name === "s" && parts.length === 0)) {
      parts.push(Math.floor(sec / size) + name);
      sec %= size;
    }
    if (parts.length === 2) break;
  }
  return parts.join(" ");
}

function mib(bytes) {
  return (bytes / 1048576).toFixed(1);
}

// quotaCell is one key's use of one quota window: "used / limit" over a
// bar, or "no quota".
function quotaCell(id, q, window, fig) {
  const td = document.createElement("td");
  if (q) {
    td.appendChild(cell("span", q.used + " / " + q.limit, "sub", fig));
    td.appendChild(bar(q.pct, id + ": " + fixed(q.pct, 1) + "% of its " + window + " quota"));
  } else {
    td.appendChild(cell("span", "no quota", "sub", fig));
  }
  return td;
}

function render(s) {
  setFigure("rate_window", String(s.rate_window_seconds));
  setFigure("version", s.version);
  setFigure("uptime", duration(s.uptime_seconds));
  const outcomes = $("#outcomes");
  outcomes.replaceChildren();
  for (const o of s.outcomes) {
    const tr = document.createElement("tr");
    tr.appendChild(cell("th", o.outcome, "o-" + o.outcome)).scope = "row";
    tr.appendChild(cell("td", fixed(o.per_second, 1), "num", "rate." + o.outcome));
    tr.appendChild(cell("td", String(o.total), "num", "total." + o.outcome));
    outcomes.appendChild(tr);
  }
  setFigure("hit_ratio", s.hit_ratio_pct === null ? "–" : fixed(s.hit_ratio_pct, 1) + "%");
  setFigure("hit_ratio_total", s.hit_ratio_total_pct === null ? "–" : fixed(s.hit_ratio_total_pct, 1) + "%");

  const up = s.upstream;
  const br = figure("breaker");
  br.textContent = up.breaker;
  br.className = "state-" + up.breaker;
  setFigure("up_minute", String(up.calls_last_minute));
  setFigure("up_minute_limit", up.per_minute_limit ? String(up.per_minute_limit) : "unlimited");
  setBar("up-minute-bar", up.per_minute_limit ? 100 * up.calls_last_minute / up.per_minute_limit : 0);
  setFigure("up_day_left", up.day_left === null ? "unknown" : up.day_left < 0 ? "unlimited" : String(up.day_left));
  setFigure("up_day_limit", up.per_day_limit ? String(up.per_day_limit) : "unlimited");
  setBar("up-day-bar", up.per_day_limit && up.day_left !== null && up.day_left >= 0 ? 100 * (up.per_day_limit - up.day_left) / up.per_day_limit : 0);
  setFigure("up_total", String(up.calls_total));
  const shares = $("#shares");
  shares.replaceChildren();
  (up.shares || []).forEach((sh, i) => {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.scope = "row";
    th.appendChild(cell("span", sh.account, "", "share." + i + ".account"));
    if (!sh.active) {
      // Not counted in this minute's split: it stopped asking, or its own
      // limits refuse it.
      th.appendChild(document.createTextNode(" "));
      th.appendChild(cell("span", "idle", "badge"));
    }
    tr.appendChild(th);
    tr.appendChild(cell("td", String(sh.used), "num", "share." + i + ".used"));
    tr.appendChild(cell("td", sh.active ? String(sh.guaranteed) : "–", "num", "share." + i + ".guaranteed"));
    shares.appendChild(tr);
  });
  if (!(up.shares || []).length) emptyRow(shares, 3, "no account asking");

  setFigure("p50", fixed(s.latency.p50_ms, 2));
  setFigure("p99", fixed(s.latency.p99_ms, 2));
  setFigure("latency_samples", String(s.latency.samples));

  const keys = $("#keys");
  keys.replaceChildren();
  s.top_keys.forEach((k, i) => {
    const tr = document.createElement("tr");
    if (k.state !== "active") tr.className = "key-" + k.state;
    const th = document.createElement("th");
    th.scope = "row";
    th.appendChild(cell("span", k.id, "", "key." + i + ".id"));
    if (k.state !== "active") {
      // Marked in words, not only by colour: refused with 401 until the
      // config changes.
      th.appendChild(document.createTextNode(" "));
      th.appendChild(cell("span", k.state, "badge", "key." + i + ".state"));
    }
    tr.appendChild(th);
    // A key of an account shows it: the quotas are the account's.
    tr.appendChild(cell("td", k.account && k.account !== k.id ? k.plan + " · " + k.account : k.plan, "opt"));
    tr.appendChild(quotaCell(k.id, k.daily, "daily", "key." + i + ".day"));
    tr.appendChild(quotaCell(k.id, k.monthly, "monthly", "key." + i + ".month"));
    keys.appendChild(tr);
  });
  if (!s.top_keys.length) emptyRow(keys, 4, "no keys configured");

  const accounts = $("#accounts");
  accounts.replaceChildren();
  (s.top_accounts || []).forEach((a, i) => {
    const tr = document.createElement("tr");
    tr.appendChild(cell("th", a.id, "", "account." + i + ".id")).scope = "row";
    tr.appendChild(cell("td", a.plan + " · " + a.keys.join(", "), "opt", "account." + i + ".keys"));
    tr.appendChild(quotaCell(a.id, a.daily, "daily", "account." + i + ".day"));
    tr.appendChild(quotaCell(a.id, a.monthly, "monthly", "account." + i + ".month"));
    accounts.appendChild(tr);
  });
  if (!(s.top_accounts || []).length) emptyRow(accounts, 4, "no accounts configured");

  const c = s.cache;
  setFigure("cache_fill", fixed(c.fill_pct, 1) + "%");
  setBar("cache-bar", c.fill_pct);
  setFigure("cache_mib", mib(c.bytes + c.pinned_bytes));
  setFigure("cache_max_mib", mib(c.max_bytes));
  setFigure("cache_entries", String(c.entries));
  setFigure("cache_rate_window", String(s.rate_window_seconds));
  setFigure("cache_hit_ratio", s.hit_ratio_pct === null ? "–" : fixed(s.hit_ratio_pct, 1) + "%");

  const rl = s.reload;
  const rr = figure("reload_result");
  rr.textContent = rl.result || "none since start";
  rr.className = rl.result === "refused" ? "state-open" : "";
  setFigure("reload_at", rl.at ? rl.at.slice(0, 19).replace("T", " ") + " UTC" : "–");
  setFigure("reload_error", rl.result === "refused" ? rl.error : "–");
  setFigure("restart_pending", rl.restart_pending.length ? rl.restart_pending.join(", ") : "nothing");

  const topics = (id, list, first, prefix) => {
    const tbody = document.getElementById(id);
    tbody.replaceChildren();
    list.forEach((t, i) => {
      const tr = document.createElement("tr");
      tr.appendChild(cell("th", t.topic, "", prefix + i + ".topic")).scope = "row";
      const a = first === "requests" ? [t.requests, t.upstream_calls] : [t.upstream_calls, t.requests];
      tr.appendChild(cell("td", String(a[0]), "num", prefix + i + ".n"));
      tr.appendChild(cell("td", String(a[1]), "num"));
      tbody.appendChild(tr);
    });
    if (!list.length) emptyRow(tbody, 3, "none yet");
  };
  topics("topics-req", s.top_topics.by_requests, "requests", "topic_req.");
  topics("topics-up", s.top_topics.by_upstream, "upstream", "topic_up.");

  const refusals = $("#refusals");
  refusals.replaceChildren();
  s.refusals.by_code.forEach((c, i) => {
    const tr = document.createElement("tr");
    tr.appendChild(cell("th", c.code, "", "refusal." + i + ".code")).scope = "row";
    tr.appendChild(cell("td", String(c.count), "num", "refusal." + i + ".n"));
    refusals.appendChild(tr);
  });
  if (!s.refusals.by_code.length) emptyRow(refusals, 2, "none");

  const at = new Date(s.generated_at);
  setStatus("Live" + (s.cluster ? " · cluster mode" : ""));
  // Not in the live region: a screen reader would announce it every poll.
  $("#updated").textContent = "· updated " + at.toISOString().slice(11, 19) + " UTC";
  document.body.dataset.state = "live";
  document.body.dataset.generatedAt = s.generated_at;
}

async function poll() {
  clearTimeout(timer);
  const headers = { "Accept": "application/json" };
  if (token) headers["Authorization"] = "Bearer " + token;
  try {
    const resp = await fetch("/summary", { headers: headers, cache: "no-store", credentials: "omit" });
    if (resp.status === 401) {
      askToken(token ? "That token was refused." : "This admin listener needs its token.");
      return;
    }
    const body = await resp.json();
    if (resp.status === 403 && body.code === "missing_scope") {
      // A token that may not read: polling on would only be refused again.
      askToken("That token lacks the read scope the dashboard needs.");
      return;
    }
    if (!resp.ok) {
      setStatus("Error " + resp.status + ": " + (body.error || "unexpected answer"));
      document.body.dataset.state = "error";
    } else {
      $("#token-form").hidden = true;
      $("#figures").hidden = false;
      render(body);
    }
  } catch (e) {
    setStatus("Disconnected; retrying…");
    document.body.dataset.state = "error";
  }
  timer = setTimeout(poll, POLL_MS);
}

function askToken(why) {
  document.body.dataset.state = "token";
  setStatus("Token needed");
  $("#token-why").textContent = why;
  $("#figures").hidden = true;
  $("#token-form").hidden = false;
  $("#token").focus();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("#token").value;
    $("#token").value = "";
    poll();
  });
  poll();
});
