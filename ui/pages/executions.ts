/// <reference lib="dom" />
/**
 * Executions: filters (workflow, status, id prefix) in the URL, cursor paging (the cursors
 * of the pages before are kept to go back), auto-refresh of the page shown, and "open by id".
 */
import { useEffect, useState } from "preact/hooks";
import { enc, type Execution, get } from "../api.ts";
import { ErrorBox, html, navigate, Status, Time, useLoad } from "../ui.ts";

const STATUSES = ["running", "completed", "failed", "cancelled", "timed_out", "continued"];

interface Page {
  executions: Execution[];
  next_cursor: string | null;
}

function fetchPage(workflow: string, status: string, cursor: string | undefined, limit: number) {
  const q = new URLSearchParams({ limit: String(limit) });
  if (workflow) q.set("workflow", workflow);
  if (status) q.set("status", status);
  if (cursor) q.set("cursor", cursor);
  return get<Page>(`/v1/executions?${q}`);
}

export function ExecutionsPage({ query }: { query: URLSearchParams }) {
  const workflow = query.get("workflow") ?? "";
  const status = query.get("status") ?? "";
  const prefix = query.get("id") ?? "";
  // What is typed, kept apart from the applied prefix: a refresh must not wipe it.
  const [draft, setDraft] = useState(prefix);
  useEffect(() => setDraft(prefix), [prefix]);
  const [cursors, setCursors] = useState<string[]>([]);
  const [auto, setAuto] = useState(true);
  const cursor = cursors.at(-1);
  const workflows = useLoad(
    () => get<{ workflows: Array<{ name: string }> }>("/v1/workflows"),
    [],
  );
  const names = [...new Set((workflows.data?.workflows ?? []).map((w) => w.name))];
  const page = useLoad(
    async () => {
      if (!prefix) return await fetchPage(workflow, status, cursor, 50);
      // The API filters by workflow and status; an id prefix is matched here, reading on
      // (at most 10 pages of 500) until a page's worth of matches is found.
      const out: Execution[] = [];
      let next = cursor ?? null;
      for (let i = 0; i < 10 && out.length < 50; i++) {
        const p = await fetchPage(workflow, status, next ?? undefined, 500);
        out.push(...p.executions.filter((e) => e.execution_id.startsWith(prefix)));
        next = p.next_cursor;
        if (!next) break;
      }
      return { executions: out, next_cursor: next };
    },
    [workflow, status, prefix, cursor],
    auto ? 3000 : 0,
  );

  const setFilter = (key: string, value: string) => {
    const q = new URLSearchParams(location.search);
    if (value) q.set(key, value);
    else q.delete(key);
    setCursors([]);
    const s = q.toString();
    navigate(`/executions${s ? `?${s}` : ""}`);
  };
  const rows = page.data?.executions ?? [];
  const openById = (e: Event) => {
    e.preventDefault();
    const id = new FormData(e.target as HTMLFormElement).get("open")?.toString().trim();
    if (id) navigate(`/executions/${enc(id)}`);
  };

  return html`
    <h1>Executions</h1>
    <div class="toolbar">
      <label>Workflow
        <select name="workflow" value=${workflow}
          onChange=${(e: Event) => setFilter("workflow", (e.target as HTMLSelectElement).value)}>
          <option value="">any</option>
          ${(workflow && !names.includes(workflow) ? [...names, workflow] : names).map((n) =>
            html`<option value=${n}>${n}</option>`
          )}
        </select>
      </label>
      <label>Status
        <select name="status" value=${status}
          onChange=${(e: Event) => setFilter("status", (e.target as HTMLSelectElement).value)}>
          <option value="">any</option>
          ${STATUSES.map((s) => html`<option value=${s}>${s}</option>`)}
        </select>
      </label>
      <label>Id prefix
        <input name="id" type="search" value=${draft} placeholder="order-"
          onInput=${(e: Event) => setDraft((e.target as HTMLInputElement).value)}
          onChange=${(e: Event) => setFilter("id", (e.target as HTMLInputElement).value)} />
      </label>
      <label class="check"><input type="checkbox" checked=${auto}
        onChange=${() => setAuto(!auto)} /> auto-refresh</label>
      <button type="button" onClick=${() => page.reload()}>Refresh</button>
      <form class="open" onSubmit=${openById}>
        <label>Open id <input name="open" placeholder="execution id" /></label>
        <button type="submit">Open</button>
      </form>
    </div>
    <${ErrorBox} error=${page.error} />
    ${prefix
      ? html`<p class="muted small">The id prefix is matched by the console over up to 5,000
          executions per page; the API filters by workflow and status.</p>`
      : null}
    <div class="table-scroll">
      <table class="list" aria-busy=${page.loading}>
        <thead>
          <tr>
            <th>Execution</th>
            <th>Workflow</th>
            <th>Status</th>
            <th>Created</th>
            <th>Closed</th>
          </tr>
        </thead>
        <tbody>
        ${rows.map((e) =>
          html`
            <tr key=${e.execution_id}>
              <td><a href=${`/executions/${enc(e.execution_id)}`}>${e.execution_id}</a></td>
              <td><a href=${`/workflows/${enc(e.workflow)}/${enc(e.version)}`}>${e.workflow}</a>
                          <span class="muted">${e.version}</span></td>
              <td>
                <${Status} status=${e.status} />
              </td>
              <td>
                <${Time} ms=${e.created_ms} />
              </td>
              <td>
                <${Time} ms=${e.closed_ms} />
              </td>
            </tr>
          `
        )}
        ${!page.loading && rows.length === 0
          ? html`
            <tr>
              <td colspan="5" class="muted">No executions match.</td>
            </tr>
          `
          : null}
      </tbody>
      </table>
    </div>
    <div class="pager">
      <button type="button" disabled=${cursors.length === 0}
        onClick=${() => setCursors(cursors.slice(0, -1))}>← Newer</button>
      <span class="muted">page ${cursors.length + 1}</span>
      <button type="button" disabled=${!page.data?.next_cursor}
        onClick=${() => setCursors([...cursors, page.data!.next_cursor!])}>Older →</button>
    </div>
  `;
}
