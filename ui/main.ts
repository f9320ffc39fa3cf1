/// <reference lib="dom" />
/**
 * The ORBIT console: a single-page app served by the server itself at `/` (bundled by
 * `ui/build.ts` into `lib/ui_assets.ts`). Pages: executions (list, one execution), workflows
 * (versions, the IR as a step graph), schedules, workers, cluster and metrics.
 */
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import {
  authNeeded,
  connection,
  getToken,
  getTokenState,
  setToken,
  type TokenState,
  tokenStates,
} from "./api.ts";
import { html, interceptLinks, useRoute } from "./ui.ts";
import { ExecutionsPage } from "./pages/executions.ts";
import { ExecutionPage } from "./pages/execution.ts";
import { WorkflowPage, WorkflowsPage } from "./pages/workflows.ts";
import { SchedulesPage } from "./pages/schedules.ts";
import { WorkersPage } from "./pages/workers.ts";
import { ClusterPage } from "./pages/cluster.ts";

const NAV: Array<[string, string]> = [
  ["/executions", "Executions"],
  ["/workflows", "Workflows"],
  ["/schedules", "Schedules"],
  ["/workers", "Workers"],
  ["/cluster", "Cluster"],
];

function TokenForm({ onDone }: { onDone: () => void }) {
  const [value, setValue] = useState(getToken());
  const submit = (e: Event) => {
    e.preventDefault();
    setToken(value.trim());
    onDone();
  };
  return html`
    <form class="token" onSubmit=${submit} aria-label="API token">
      <p>This server needs a bearer token (<code>--token</code>). It is kept in this tab only
        (sessionStorage).</p>
      <label>Token <input type="password" name="token" autocomplete="off" autofocus
          value=${value} onInput=${(e: Event) =>
            setValue((e.target as HTMLInputElement).value)} /></label>
      <button type="submit">Use token</button>
    </form>
  `;
}

/** The nav's token button: what the server made of the token, not merely that one is kept. */
const TOKEN_LABEL: Record<TokenState, { text: string; title: string }> = {
  none: { text: "Token", title: "No token is set" },
  unchecked: { text: "Token", title: "A token is set; the server has not answered it yet" },
  accepted: { text: "Token ✓", title: "The server takes this token" },
  refused: { text: "Token ✗ refused", title: "The server refused this token (UNAUTHORIZED)" },
};

function Page({ path, query }: { path: string; query: URLSearchParams }) {
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  switch (parts[0] ?? "executions") {
    case "executions":
      return parts[1] !== undefined
        ? html`<${ExecutionPage} id=${parts.slice(1).join("/")} />`
        : html`<${ExecutionsPage} query=${query} />`;
    case "workflows":
      return parts[1] !== undefined
        ? html`<${WorkflowPage} name=${parts[1]} version=${parts[2]} />`
        : html`<${WorkflowsPage} />`;
    case "schedules":
      return html`<${SchedulesPage} />`;
    case "workers":
      return html`<${WorkersPage} />`;
    case "cluster":
      return html`<${ClusterPage} />`;
    default:
      // The server answers such a path with 404 and this page: the console says so itself.
      return html`
        <h1>Page not found</h1>
        <p>The console has no page at <code>${path}</code>. <a href="/executions">Executions</a></p>
      `;
  }
}

function App() {
  const { path, query } = useRoute();
  const [askToken, setAskToken] = useState(false);
  const [down, setDown] = useState(false);
  const [tokenState, setTokenState] = useState(getTokenState());
  // Bumped when the token changes: every page loads again.
  const [epoch, setEpoch] = useState(0);
  useEffect(() => {
    const ask = () => setAskToken(true);
    const conn = (d: boolean) => setDown(d);
    authNeeded.add(ask);
    connection.add(conn);
    tokenStates.add(setTokenState);
    return () => {
      authNeeded.delete(ask);
      connection.delete(conn);
      tokenStates.delete(setTokenState);
    };
  }, []);
  const section = "/" + (path.split("/")[1] || "executions");
  return html`
    <a class="skip" href="#main">Skip to content</a>
    <header>
      <a class="brand" href="/executions">ORBIT</a>
      <nav aria-label="Main">
        ${NAV.map(([href, label]) =>
          html`<a href=${href} aria-current=${section === href ? "page" : undefined}>${label}</a>`
        )}
      </nav>
      <button type="button" class=${`link token-${tokenState}`} title=${TOKEN_LABEL[tokenState]
        .title} onClick=${() => setAskToken(!askToken)}>${TOKEN_LABEL[tokenState].text}</button>
    </header>
    ${down ? html`<div class="banner" role="status">Connection lost, retrying…</div>` : null}
    ${askToken
      ? html`<${TokenForm} onDone=${() => {
        setAskToken(false);
        setEpoch(epoch + 1);
      }} />`
      : null}
    <main id="main" tabindex="-1" key=${epoch}>
      <${Page} path=${path} query=${query} />
    </main>
  `;
}

interceptLinks();
if (location.pathname === "/") history.replaceState(null, "", "/executions");
render(html`<${App} />`, document.getElementById("app")!);
