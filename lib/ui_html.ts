/** The web UI: one page that lists executions and shows their history through the API. */
export const UI_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ORBIT</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f8fa}
header{background:#1b1f24;color:#fff;padding:10px 16px;display:flex;gap:12px;align-items:center}
header h1{font-size:16px;margin:0}main{display:grid;grid-template-columns:1fr 1fr;gap:16px;padding:16px}
section{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:12px;overflow:auto;max-height:80vh}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:4px 6px;border-bottom:1px solid #eee;font-size:13px}
tr.x{cursor:pointer}tr.x:hover{background:#f0f6ff}.s-completed{color:#1a7f37}.s-failed,.s-timed_out{color:#cf222e}.s-running{color:#0969da}
pre{white-space:pre-wrap;font-size:12px}input,select,button{font:inherit}
</style></head><body>
<header><h1>ORBIT</h1><span id="health"></span>
<label>token <input id="token" type="password" size="16"></label>
<select id="status"><option value="">any status</option><option>running</option><option>completed</option>
<option>failed</option><option>cancelled</option><option>timed_out</option></select>
<button id="refresh">Refresh</button></header>
<main><section><h2>Executions</h2><table><thead><tr><th>id</th><th>workflow</th><th>status</th><th>created</th></tr></thead>
<tbody id="list"></tbody></table></section>
<section><h2 id="title">History</h2><table><tbody id="history"></tbody></table><pre id="detail"></pre></section></main>
<script>
const $ = (id) => document.getElementById(id);
$("token").value = localStorage.getItem("orbit-token") || "";
function headers() { const t = $("token").value; localStorage.setItem("orbit-token", t);
  return t ? { authorization: "Bearer " + t } : {}; }
async function api(path) { const r = await fetch(path, { headers: headers() });
  const b = await r.json(); if (!r.ok) throw new Error(b.error ? b.error.code + ": " + b.error.message : r.status); return b; }
function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); }
async function refresh() {
  try { const h = await api("/v1/health"); $("health").textContent = h.role + " · " + h.active_executions + " active · " + h.worker_sessions + " workers"; } catch (e) {}
  const list = $("list"); list.textContent = "";
  try {
    const s = $("status").value; const page = await api("/v1/executions?limit=200" + (s ? "&status=" + s : ""));
    for (const e of page.executions) { const tr = document.createElement("tr"); tr.className = "x";
      cell(tr, e.execution_id); cell(tr, e.workflow + " " + e.version); cell(tr, e.status, "s-" + e.status);
      cell(tr, new Date(e.created_ms).toLocaleString()); tr.onclick = () => show(e.execution_id); list.appendChild(tr); }
  } catch (e) { const tr = document.createElement("tr"); cell(tr, String(e.message)); list.appendChild(tr); }
}
async function show(id) {
  $("title").textContent = id; const tb = $("history"); tb.textContent = "";
  const ex = await api("/v1/executions/" + encodeURIComponent(id)); $("detail").textContent = JSON.stringify(ex, null, 2);
  let after = 0; for (;;) { const h = await api("/v1/executions/" + encodeURIComponent(id) + "/history?after_seq=" + after);
    for (const e of h.events) { const tr = document.createElement("tr"); cell(tr, e.seq); cell(tr, new Date(e.time_ms).toISOString().slice(11, 23));
      cell(tr, e.type); cell(tr, (e.step || "") + (e.attempt ? " #" + e.attempt : "")); tb.appendChild(tr); }
    if (!h.next_after_seq) break; after = h.next_after_seq; }
}
$("refresh").onclick = refresh; $("status").onchange = refresh; refresh();
</script></body></html>`;
