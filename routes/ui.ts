/** `GET /`: the web UI, embedded as a module so the bundle and binary carry it. */
import { Hono } from "hono";
import { UI_HTML } from "../lib/ui_html.ts";

export function uiRoutes(): Hono {
  const app = new Hono();
  app.get("/", (c) => c.html(UI_HTML));
  return app;
}
