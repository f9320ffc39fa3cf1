/**
 * The console (`ui/`, bundled into `lib/ui_assets.ts` so the bundle and the binary carry
 * it): the page at `/` and at every console path (an execution has its own shareable URL,
 * `/executions/{id}`), its script and stylesheet; a page a browser asks for that nothing
 * serves gets the console with 404 (`consoleNotFound`: its not-found view). A strict
 * Content-Security-Policy: only this origin's script and style, no inline code, so nothing an
 * id or a payload holds can run even if it were ever put into the page as markup.
 */
import { type Context, Hono } from "hono";
import { UI_CSS, UI_HTML, UI_JS } from "../lib/ui_assets.ts";

const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
  "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const PAGES = ["/", "/executions", "/workflows", "/schedules", "/workers", "/cluster"];

function page(c: Context, status: 200 | 404 = 200): Response {
  return c.html(UI_HTML, status, {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
  });
}

/**
 * A path nothing serves, as the console answers it: a page a browser asks for (GET or HEAD with
 * `Accept: text/html`, not under an API version like `/v1` nor the assets' `/ui/`) gets the
 * console with 404, which draws its not-found view inside the console; anything else is null
 * (the API's JSON 404 then, as a client of the API expects).
 */
export function consoleNotFound(c: Context): Response | null {
  const read = c.req.method === "GET" || c.req.method === "HEAD";
  const browser = (c.req.header("accept") ?? "").includes("text/html");
  if (!read || !browser || /^\/(v\d+|ui)(\/|$)/.test(c.req.path)) return null;
  return page(c, 404);
}

export function uiRoutes(): Hono {
  const app = new Hono();
  for (const p of PAGES) {
    app.get(p, (c) => page(c));
    if (p !== "/") app.get(`${p}/*`, (c) => page(c));
  }
  // Asset URLs carry a hash of their content (?v=…): they may be cached for good.
  const asset = (body: string, type: string) => (c: Context) =>
    c.body(body, 200, {
      "content-type": type,
      "cache-control": "public, max-age=31536000, immutable",
      "x-content-type-options": "nosniff",
    });
  app.get("/ui/app.js", asset(UI_JS, "text/javascript; charset=utf-8"));
  app.get("/ui/app.css", asset(UI_CSS, "text/css; charset=utf-8"));
  return app;
}
