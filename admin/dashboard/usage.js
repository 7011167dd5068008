"use strict";
// The usage history on the dashboard: per account, its units by day over
// the last 30 UTC days against its daily quota (an inline SVG), and the
// top accounts by units this month. It reads GET /usage and GET /accounts
// with the page's token (app.js) once the summary is live, then every
// minute: their first page each (PAGE accounts in id order), so a gateway
// with more accounts than that draws the first PAGE of them.
// Days are the gateway's: "today" is the summary's generated_at.

const USAGE_MS = 60000;
const PAGE = 1000; // the admin API's largest page
const SVG = "http://www.w3.org/2000/svg";

function dayString(d) { return d.toISOString().slice(0, 10); }

async function usageGet(path) {
  const headers = { "Accept": "application/json" };
  if (token) headers["Authorization"] = "Bearer " + token;
  const resp = await fetch(path, { headers: headers, cache: "no-store", credentials: "omit" });
  if (!resp.ok) throw new Error(path + ": " + resp.status);
  return resp.json();
}

function svgEl(name, attrs) {
  const e = document.createElementNS(SVG, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}

// chart draws one account's 30 days (from first, a Date) as bars, with the
// daily quota as a line when it has one.
function chart(series, first, quota) {
  const W = 300, H = 80, n = 30, bw = W / n;
  const units = new Map(series.days.map(d => [d.date, d.units]));
  let top = quota || 0;
  for (const u of units.values()) top = Math.max(top, u);
  top = Math.max(top, 1);
  const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
    "data-account": series.account, "aria-label": series.account + ": units by day, last 30 days" });
  for (let i = 0; i < n; i++) {
    const d = new Date(first.getTime() + i * 86400000);
    const u = units.get(dayString(d)) || 0;
    const h = Math.round(u / top * (H - 4));
    const r = svgEl("rect", { x: (i * bw + 1).toFixed(1), y: H - h, width: (bw - 2).toFixed(1), height: h,
      class: "usage-bar", "data-date": dayString(d), "data-units": u });
    const title = svgEl("title", {});
    title.textContent = dayString(d) + ": " + u + " units";
    r.appendChild(title);
    svg.appendChild(r);
  }
  if (quota > 0) {
    const y = H - Math.round(quota / top * (H - 4));
    svg.appendChild(svgEl("line", { x1: 0, x2: W, y1: y, y2: y, class: "usage-quota", "data-quota": quota }));
  }
  return svg;
}

async function drawUsage() {
  if (document.body.dataset.state !== "live" || !document.body.dataset.generatedAt) return;
  const today = new Date(document.body.dataset.generatedAt.slice(0, 10) + "T00:00:00Z");
  const first = new Date(today.getTime() - 29 * 86400000);
  const monthStart = dayString(today).slice(0, 8) + "01";
  try {
    const [days, month, keys] = await Promise.all([
      usageGet("/usage?from=" + dayString(first) + "&to=" + dayString(today) + "&limit=" + PAGE),
      usageGet("/usage?from=" + monthStart + "&to=" + dayString(today) + "&limit=" + PAGE),
      usageGet("/accounts?limit=" + PAGE),
    ]);
    const quotas = new Map((keys.accounts || []).map(a => [a.id, a.daily.limit]));
    const charts = document.getElementById("usage-charts");
    charts.replaceChildren();
    for (const s of days.series) {
      const fig = document.createElement("figure");
      const cap = document.createElement("figcaption");
      const q = quotas.get(s.account) || 0;
      cap.textContent = s.account + " · " + s.total.units + " units in 30 days" + (q > 0 ? " · daily quota " + q : "");
      fig.append(cap, chart(s, first, q));
      charts.appendChild(fig);
    }
    const top = month.series.slice().sort((a, b) => b.total.units - a.total.units || (a.account < b.account ? -1 : 1)).slice(0, 10);
    const body = document.getElementById("usage-top");
    body.replaceChildren();
    for (const s of top) {
      const tr = document.createElement("tr");
      tr.dataset.account = s.account;
      for (const [text, cls] of [[s.account, ""], [s.total.units, "num"], [s.total.requests, "num"]]) {
        const td = document.createElement("td");
        td.textContent = text;
        if (cls) td.className = cls;
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    document.getElementById("usage-empty").hidden = days.series.length > 0;
    document.body.dataset.usage = "drawn";
  } catch (e) {
    document.body.dataset.usage = "error";
  }
}

// Draw once the summary went live (app.js sets data-state), then every minute.
new MutationObserver(() => { if (!document.body.dataset.usage) drawUsage(); })
  .observe(document.body, { attributes: true, attributeFilter: ["data-state"] });
setInterval(drawUsage, USAGE_MS);
