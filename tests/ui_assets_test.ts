/**
 * The console's assets and routes: the committed bundle (`lib/ui_assets.ts`) is what
 * `ui/build.ts` makes of `ui/` now (a change to the sources without a rebuild fails here, not in
 * a user's browser), and the server serves the page at every console path with a strict CSP,
 * the script and stylesheet by content-hashed URLs, and nothing at all with --no-ui.
 */
import assert from "node:assert/strict";
import { buildAssets, sourceHash } from "../ui/build.ts";
import { createApp } from "../routes/app.ts";
import { Runtime } from "../lib/runtime.ts";
import { openSqliteStore } from "../lib/store/sqlite.ts";
import { UI_CSS, UI_HTML, UI_JS, UI_SOURCE_HASH } from "../lib/ui_assets.ts";

Deno.test("lib/ui_assets.ts is up to date with ui/ (run `deno run -A ui/build.ts`)", async () => {
  assert.equal(
    UI_SOURCE_HASH,
    await sourceHash(),
    "lib/ui_assets.ts is out of date: run `deno run -A ui/build.ts`",
  );
});

Deno.test("ui/build.ts bundles ui/ into a module with the page, the script and the stylesheet", async () => {
  const built = await buildAssets();
  assert.ok(built.includes(`export const UI_SOURCE_HASH = "${UI_SOURCE_HASH}";`));
  assert.match(built, /export const UI_JS = ".{10000,}";/);
  assert.ok(built.includes(`export const UI_CSS = ${JSON.stringify(UI_CSS)};`));
});

Deno.test("the console is served at every console path with a strict CSP, and not with --no-ui", async () => {
  const dir = await Deno.makeTempDir();
  const store = await openSqliteStore(`${dir}/orbit.db`);
  await store.migrate();
  const rt = new Runtime(store, { sessionTimeoutMs: 30_000, maxActiveExecutions: null });
  try {
    const app = createApp(rt, { token: "secret", maxBodyBytes: 1 << 20, ui: true });
    for (
      const path of ["/", "/executions", "/executions/order-1", "/workflows/W/1.0.0", "/cluster"]
    ) {
      const r = await app.request(path);
      assert.equal(r.status, 200, path);
      assert.match(r.headers.get("content-type") ?? "", /^text\/html/);
      assert.match(
        r.headers.get("content-security-policy") ?? "",
        /script-src 'self'; style-src 'self'/,
      );
      assert.equal(await r.text(), UI_HTML);
    }
    const [, js] = UI_HTML.match(/src="(\/ui\/app\.js\?v=[0-9a-f]+)"/)!;
    const [, css] = UI_HTML.match(/href="(\/ui\/app\.css\?v=[0-9a-f]+)"/)!;
    const script = await app.request(js!);
    assert.match(script.headers.get("content-type") ?? "", /^text\/javascript/);
    assert.equal(await script.text(), UI_JS);
    assert.equal(await (await app.request(css!)).text(), UI_CSS);
    // The page needs no token; the API behind it does.
    assert.equal((await app.request("/v1/executions")).status, 401);

    const off = createApp(rt, { token: null, maxBodyBytes: 1 << 20, ui: false });
    for (const path of ["/", "/executions/order-1", "/ui/app.js"]) {
      assert.equal((await off.request(path)).status, 404, path);
    }
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an unknown page answers the console (its not-found view) with 404; the API answers JSON", async () => {
  const dir = await Deno.makeTempDir();
  const store = await openSqliteStore(`${dir}/orbit.db`);
  await store.migrate();
  const rt = new Runtime(store, { sessionTimeoutMs: 30_000, maxActiveExecutions: null });
  try {
    const app = createApp(rt, { token: "secret", maxBodyBytes: 1 << 20, ui: true });
    const html = { accept: "text/html,application/xhtml+xml,*/*;q=0.8" };
    for (const path of ["/nope", "/executionz/x", "/a/b/c?d=1"]) {
      for (const method of ["GET", "HEAD"]) {
        const r = await app.request(path, { method, headers: html });
        assert.equal(r.status, 404, `${method} ${path}`);
        assert.match(r.headers.get("content-type") ?? "", /^text\/html/, path);
        assert.match(r.headers.get("content-security-policy") ?? "", /script-src 'self'/, path);
        const body = await r.text();
        assert.equal(body, method === "GET" ? UI_HTML : "", `${method} ${path}`);
      }
    }
    // The API, its other versions, the assets, a write, and a client that asks for no HTML:
    // the API's JSON error.
    const json = [
      ["GET", "/v1/nope", html],
      ["GET", "/v1", html],
      ["GET", "/v2/executions", html],
      ["GET", "/ui/nope.js", html],
      ["POST", "/nope", html],
      ["GET", "/nope", {}],
      ["GET", "/nope", { accept: "application/json" }],
    ] as const;
    for (const [method, path, headers] of json) {
      const r = await app.request(path, {
        method,
        headers: { ...headers, authorization: "Bearer secret" },
      });
      assert.equal(r.status, 404, `${method} ${path}`);
      assert.match(r.headers.get("content-type") ?? "", /^application\/json/, `${method} ${path}`);
      assert.equal((await r.json()).error.code, "NOT_FOUND", `${method} ${path}`);
    }
    // Without the console: JSON everywhere.
    const off = createApp(rt, { token: null, maxBodyBytes: 1 << 20, ui: false });
    const r = await off.request("/nope", { headers: html });
    assert.equal(r.status, 404);
    assert.equal((await r.json()).error.code, "NOT_FOUND");
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});
