/// <reference lib="dom" />
/**
 * Workflows: every name with its versions; one version's IR drawn as a step graph (a step
 * per box, in order; parallel branches and if/else side by side; compensations, retries and
 * timeouts noted on the box; signal handlers as their own graphs) and the document as JSON.
 */
import { type Definition, enc, get, type Step } from "../api.ts";
import { ErrorBox, html, Json, short, Time, useLoad } from "../ui.ts";

interface Summary {
  name: string;
  version: string;
  ir: string;
  created_ms: number;
}

export function WorkflowsPage() {
  const list = useLoad(() => get<{ workflows: Summary[] }>("/v1/workflows"), []);
  const byName = new Map<string, Summary[]>();
  for (const w of list.data?.workflows ?? []) {
    byName.set(w.name, [...(byName.get(w.name) ?? []), w]);
  }
  return html`
    <h1>Workflows</h1>
    <${ErrorBox} error=${list.error} />
    <div class="table-scroll">
      <table class="list">
        <thead>
          <tr>
            <th>Workflow</th>
            <th>Versions</th>
            <th>Deployed</th>
            <th></th>
          </tr>
        </thead>
        <tbody>
            ${[...byName].map(([name, versions]) =>
              html`
                <tr key=${name}>
                  <td><a href=${`/workflows/${enc(name)}`}>${name}</a></td>
                  <td>${versions.map((v) =>
                    html`
                      <a class="chip" href=${`/workflows/${enc(name)}/${enc(v.version)}`}>${v
                        .version}</a>
                    `
                  )}</td>
                  <td>
                    <${Time} ms=${versions.at(-1)!.created_ms} />
                  </td>
                  <td><a href=${`/executions?workflow=${enc(name)}`}>executions</a></td>
                </tr>
              `
            )}
            ${!list.loading && byName.size === 0
              ? html`
                <tr>
                  <td colspan="4" class="muted">Nothing deployed yet
                              (<code>orbit deploy FILE</code>).</td>
                </tr>
              `
              : null}
          </tbody>
      </table>
    </div>
  `;
}

export function WorkflowPage({ name, version }: { name: string; version?: string }) {
  const versions = useLoad(
    () => get<{ versions: Summary[] }>(`/v1/workflows/${enc(name)}`),
    [name],
  );
  const chosen = version ?? versions.data?.versions.at(-1)?.version;
  const def = useLoad(
    () =>
      chosen ? get<Definition>(`/v1/workflows/${enc(name)}/${enc(chosen)}`) : Promise.resolve(null),
    [name, chosen],
  );
  const doc = def.data?.document;
  return html`<h1>${name} <span class="muted">${chosen ?? ""}</span></h1>
    <${ErrorBox} error=${versions.error ?? def.error} />
    <p>Versions: ${
    (versions.data?.versions ?? []).map((v) =>
      html`
        <a class="chip" aria-current=${v.version === chosen ? "page" : undefined}
          href=${`/workflows/${enc(name)}/${enc(v.version)}`}>${v.version}</a>
      `
    )
  }
      · <a href=${`/executions?workflow=${enc(name)}`}>executions</a></p>
    ${
    doc
      ? html`
        <p class="muted">${doc.ir}${doc.timeout_s ? ` · times out after ${doc.timeout_s} s` : ""}
          ${doc.signals ? ` · signals: ${Object.keys(doc.signals).join(", ")}` : ""}
          ${doc.queries ? ` · queries: ${Object.keys(doc.queries).join(", ")}` : ""}</p>
        <section aria-labelledby="graph-h">
          <h2 id="graph-h">Steps</h2>
          <div class="graph">
            <div class="node terminal">start</div>
            <${Steps} steps=${doc.steps} />
            <div class="node terminal">end</div>
          </div>
        </section>
        ${Object.entries(doc.handlers ?? {}).map(([signal, steps]) =>
          html`
            <section key=${signal}>
              <h2>Handler for signal <code>${signal}</code></h2>
              <div class="graph">
                <${Steps} steps=${steps} />
              </div>
            </section>
          `
        )}
        <details>
          <summary>Document (JSON)</summary>
          <${Json} value=${doc} />
        </details>
      `
      : null
  }`;
}

function Steps({ steps }: { steps: Step[] }) {
  return html`<ol class="steps">${
    steps.map((s) =>
      html`
        <li key=${s.id}>
          <${StepNode} step=${s} />
        </li>
      `
    )
  }</ol>`;
}

function kindOf(s: Step): string {
  for (
    const k of [
      "task",
      "wait_signal",
      "sleep_s",
      "http",
      "child",
      "parallel",
      "if",
      "assign",
      "continue_as_new",
      "return",
    ]
  ) {
    if (s[k] !== undefined) return k;
  }
  return "step";
}

function StepNode({ step: s }: { step: Step }) {
  const kind = kindOf(s);
  const notes: string[] = [];
  const retry = s.retry as { max_attempts?: number } | undefined;
  if (retry?.max_attempts) notes.push(`retry ×${retry.max_attempts}`);
  if (s.timeout_s !== undefined) notes.push(`timeout ${s.timeout_s} s`);
  if (s.language) notes.push(`language ${s.language}`);
  const comp = s.compensate as { task?: string; contract?: string } | undefined;
  const label = kind === "task"
    ? `${s.task}@${s.contract}`
    : kind === "wait_signal"
    ? `wait for signal ${s.wait_signal}`
    : kind === "sleep_s"
    ? `sleep ${short(s.sleep_s, 30)} s`
    : kind === "http"
    ? `${(s.http as { method?: string }).method ?? "GET"} ${
      short((s.http as { url?: unknown }).url, 40)
    }`
    : kind === "child"
    ? `child ${(s.child as { workflow?: string }).workflow}`
    : kind === "if"
    ? `if ${short(s.if, 40)}`
    : kind === "return"
    ? `return ${short(s.return, 40)}`
    : kind;
  const box = html`<div class=${`node k-${kind}`}>
    <div class="node-id">${s.id}</div>
    <div class="node-label">${label}</div>
    ${notes.length ? html`<div class="muted small">${notes.join(" · ")}</div>` : null}
    ${comp ? html`<div class="comp-note">↺ compensate: ${comp.task}@${comp.contract}</div>` : null}
  </div>`;
  if (kind === "parallel") {
    const branches = s.parallel as Step[][];
    return html`${box}<div class="branches">${
      branches.map((b, i) =>
        html`
          <div class="branch">
            <div class="muted small">branch ${i}</div>
            <${Steps} steps=${b} />
          </div>
        `
      )
    }</div>`;
  }
  if (kind === "if") {
    return html`
      ${box}<div class="branches">
        <div class="branch">
          <div class="muted small">then</div>
          <${Steps} steps=${(s.then as Step[]) ?? []} />
        </div>
        <div class="branch">
          <div class="muted small">else</div>
          <${Steps} steps=${(s.else as Step[]) ?? []} />
        </div>
      </div>
    `;
  }
  return box;
}
