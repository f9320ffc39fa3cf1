/// <reference lib="dom" />
/**
 * Shared pieces of the console: `html` (htm bound to preact: escapes every value, so ids with
 * HTML in them stay text), the router, times, errors, JSON, and `useLoad` (a fetch that
 * re-runs on a timer and keeps the last good value while a refresh fails).
 */
import { h } from "preact";
import { useCallback, useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import htmModule from "htm";
import { ApiError } from "./api.ts";

// htm's typings are CommonJS-shaped; at run time (bundled as ESM) the default is htm itself.
// deno-lint-ignore no-explicit-any
type Tag = (strings: TemplateStringsArray, ...values: any[]) => any;
const htm = htmModule as unknown as { bind(f: typeof h): Tag };
export const html: Tag = htm.bind(h);

// ------------------------------------------------------------------------------------------
// Routing: real paths (an execution has its own shareable URL), pushState, one listener.

const routeListeners = new Set<() => void>();
addEventListener("popstate", () => routeListeners.forEach((f) => f()));

export function navigate(to: string): void {
  if (to === location.pathname + location.search) return;
  history.pushState(null, "", to);
  routeListeners.forEach((f) => f());
  scrollTo(0, 0);
}

/**
 * Re-renders on navigation; answers the current path and query. It subscribes in a layout
 * effect (run as the render commits, not after the next paint), and re-renders if the location
 * moved between its render and its subscription: a link clicked in the page's first frame (a
 * keyboard user pressing Enter at once) would otherwise change the URL and not the page.
 */
export function useRoute(): { path: string; query: URLSearchParams } {
  const [, set] = useState(0);
  const rendered = location.pathname + location.search;
  useLayoutEffect(() => {
    const f = () => set((n) => n + 1);
    routeListeners.add(f);
    if (location.pathname + location.search !== rendered) f();
    return () => void routeListeners.delete(f);
  }, []);
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}

/** Same-origin link clicks (without modifier keys) navigate in place. */
export function interceptLinks(): void {
  document.addEventListener("click", (e) => {
    const a = (e.target as Element | null)?.closest?.("a");
    if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) {
      return;
    }
    const href = a.getAttribute("href");
    if (!href || !href.startsWith("/") || a.target) return;
    e.preventDefault();
    navigate(href);
  });
}

// ------------------------------------------------------------------------------------------
// Display helpers

const DATE_TIME = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

/**
 * A date and time in local time, the month by name: "Dec 7, 2026, 6:01:22 PM" (never a time of
 * day alone, and never 07/12 that reads as July in another locale).
 */
export function dateTime(ms: number): string {
  return DATE_TIME.format(new Date(ms));
}

/** A time in local time, the ISO value on hover (and in `datetime`). */
export function Time({ ms }: { ms: number | null | undefined }) {
  if (typeof ms !== "number") return html`<span class="muted">–</span>`;
  const iso = new Date(ms).toISOString();
  return html`<time datetime=${iso} title=${iso}>${dateTime(ms)}</time>`;
}

export function duration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} m`;
}

/** "in 3 m 02 s" / "4.2 s ago" relative to now. */
export function relative(ms: number, now = Date.now()): string {
  return ms >= now ? `in ${duration(ms - now)}` : `${duration(now - ms)} ago`;
}

export function Status({ status }: { status: string }) {
  return html`<span class="status s-${status}">${status}</span>`;
}

/**
 * An API error as its code and message, and each of its problems (a refused payload: where,
 * and what is wrong there); anything else as its message.
 */
export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  const code = error instanceof ApiError ? error.code : "ERROR";
  const message = error instanceof Error ? error.message : String(error);
  const problems = error instanceof ApiError ? error.problems : [];
  const list = problems.length === 0
    ? null
    : html`<ul class="problems">${
      problems.map((p) => html`<li><code>${p.path}</code> ${p.message}</li>`)
    }</ul>`;
  return html`<div class="error" role="alert"><code class="code">${code}</code> ${message}${list}</div>`;
}

/** Pretty JSON as text (never HTML). */
export function Json({ value }: { value: unknown }) {
  return html`<pre class="json">${JSON.stringify(value, null, 2)}</pre>`;
}

export function short(v: unknown, max = 80): string {
  if (v === undefined) return "";
  const s = JSON.stringify(v) ?? String(v);
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

// ------------------------------------------------------------------------------------------
// Loading

export interface Loaded<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => Promise<void>;
}

/**
 * Runs `fn` now, whenever `deps` change, and every `everyMs` (0: never) while the page is
 * visible. A failed refresh keeps the last data and shows the error next to it.
 */
export function useLoad<T>(fn: () => Promise<T>, deps: unknown[], everyMs = 0): Loaded<T> {
  const [state, setState] = useState<{ data: T | undefined; error: unknown; loading: boolean }>(
    { data: undefined, error: null, loading: true },
  );
  const gen = useRef(0);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  const reload = useCallback(async () => {
    const mine = ++gen.current;
    try {
      const data = await fnRef.current();
      if (mine === gen.current) setState({ data, error: null, loading: false });
    } catch (error) {
      if (mine === gen.current) setState((s) => ({ ...s, error, loading: false }));
    }
  }, []);
  useEffect(() => {
    setState({ data: undefined, error: null, loading: true });
    reload();
  }, deps);
  useEffect(() => {
    if (!everyMs) return;
    const t = setInterval(() => {
      if (document.visibilityState === "visible") reload();
    }, everyMs);
    return () => clearInterval(t);
  }, [everyMs, ...deps]);
  return { ...state, reload };
}

/** A button that runs an async action, shows that it runs, and reports its error. */
export function ActionButton(
  { label, run, confirm: ask, className }: {
    label: string;
    run: () => Promise<unknown>;
    confirm?: string;
    className?: string;
  },
) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const click = async () => {
    if (ask && !confirm(ask)) return;
    setBusy(true);
    setError(null);
    try {
      await run();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return html`
    <span class="action">
      <button type="button" class=${className ?? ""} disabled=${busy}
        onClick=${click}>${label}</button>
      <${ErrorBox} error=${error} />
    </span>
  `;
}
