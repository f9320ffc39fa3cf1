/**
 * What a web page can do to a server through its visitor's browser (routes/browsers.ts),
 * against real server processes: writes take JSON bodies only (a cross-origin `text/plain` POST
 * needs no preflight), and a server without a token refuses other sites' pages (`Origin`) and
 * names it does not know as its own (`Host`: DNS rebinding), except on health and ready. Every
 * refused request changes nothing.
 */
import assert from "node:assert/strict";
import { chromium } from "playwright-core";
import { api, type ServerProcess, startServer, tempDir, waitFor } from "./support/server.ts";
import { rawRequest } from "./support/raw_http.ts";
import { serverRefusal } from "./support/refusal.ts";

const FLOW = {
  ir: "orbit-ir/1",
  name: "Browser.Flow",
  version: "1.0.0",
  steps: [{ id: "charge", task: "payments.charge", contract: "1", input: "{% $input %}" }],
};

/** What a refused request must not change. */
async function state(url: string, token?: string) {
  const c = api(url, token);
  return await Promise.all(
    ["/v1/workflows", "/v1/executions", "/v1/schedules", "/v1/workers"].map(async (p) => {
      const r = await c.get(p);
      assert.equal(r.status, 200, `${p}: ${JSON.stringify(r.body)}`);
      return r.body;
    }),
  );
}

async function setUp(server: ServerProcess, token?: string) {
  const c = api(server.url, token);
  assert.equal((await c.post("/v1/workflows", FLOW)).status, 201);
  assert.equal(
    (await c.post("/v1/executions", { workflow: FLOW.name, execution_id: "b-1" })).status,
    201,
  );
  const s = await c.post("/v1/schedules", {
    schedule_id: "b-s",
    workflow: FLOW.name,
    every_s: 3600,
    paused: true,
  });
  assert.equal(s.status, 201, JSON.stringify(s.body));
}

/** The writes a page would send, as a cross-origin `fetch(…, {mode: "no-cors"})` sends them. */
const WRITES = [
  ["POST", "/v1/workflows", JSON.stringify({ ...FLOW, version: "2.0.0" })],
  ["POST", "/v1/executions", JSON.stringify({ workflow: FLOW.name, execution_id: "evil-1" })],
  ["POST", "/v1/executions/b-1/cancel", JSON.stringify({ reason: "evil" })],
  ["POST", "/v1/schedules/b-s/resume", "{}"],
  ["PATCH", "/v1/schedules/b-s", JSON.stringify({ every_s: 1 })],
  ["POST", "/v1/workers/register", JSON.stringify({ worker_id: "evil", tasks: [] })],
] as const;

Deno.test({
  name: "a server without a token refuses other sites' pages and foreign Host names",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      args: ["--allowed-hosts", "orbit.test,.corp.test"],
    });
    try {
      const warning = server.logs.find((l) => l.includes("no --token given"));
      assert.ok(warning, server.logs.join("\n"));
      assert.match(warning, /DNS rebinding/);
      assert.match(warning, /allowed_hosts=IP addresses,localhost,127\.0\.0\.1|allowed_hosts=/);
      assert.match(warning, /orbit\.test/);
      await setUp(server);
      const before = await state(server.url);
      const host = new URL(server.url).host;
      const port = new URL(server.url).port;

      // A cross-origin page: no preflight for text/plain, and the body is JSON all the same.
      for (const [method, path, body] of WRITES) {
        for (const type of ["text/plain", "text/plain;charset=UTF-8"]) {
          const a = await rawRequest(server.url, {
            method,
            path,
            headers: { host, origin: "https://evil.example", "content-type": type },
            body,
          });
          assert.equal(a.status, 403, `${method} ${path} ${type}: ${a.text}`);
          assert.equal(a.json.error.code, "FORBIDDEN_ORIGIN");
          assert.match(a.json.error.message, /--token/);
        }
        // Even declared JSON (the page would need a preflight, but the server answers none).
        const a = await rawRequest(server.url, {
          method,
          path,
          headers: { host, origin: "http://localhost:3000", "content-type": "application/json" },
          body,
        });
        assert.equal(a.status, 403, `${method} ${path} from another local page: ${a.text}`);
        assert.equal(a.json.error.code, "FORBIDDEN_ORIGIN");
        const n = await rawRequest(server.url, {
          method,
          path,
          headers: { host, origin: "null", "content-type": "application/json" },
          body,
        });
        assert.equal(n.status, 403, `${method} ${path} from a sandboxed frame: ${n.text}`);
      }

      // DNS rebinding: the page's own name now resolves to 127.0.0.1; the browser sends it.
      for (const name of [`evil.example:${port}`, `orbit.test.evil.example:${port}`, "evil"]) {
        for (const [method, path] of [["GET", "/v1/executions"], ["GET", "/"], ...WRITES]) {
          const a = await rawRequest(server.url, {
            method,
            path,
            headers: { host: name, "content-type": "application/json", origin: `http://${name}` },
            body: method === "GET" ? undefined : "{}",
          });
          assert.equal(a.status, 403, `${method} ${path} for ${name}: ${a.text}`);
          assert.equal(a.json.error.code, "FORBIDDEN_HOST");
          assert.match(a.json.error.message, /--allowed-hosts/);
        }
      }
      assert.deepEqual(await state(server.url), before, "refused requests changed nothing");

      // Probes keep working whatever Host they send.
      for (const path of ["/v1/health", "/v1/ready"]) {
        const a = await rawRequest(server.url, { path, headers: { host: "10.1.2.3:7233" } });
        assert.equal(a.status, 200, path);
        const b = await rawRequest(server.url, { path, headers: { host: "orbit-lb.internal" } });
        assert.equal(b.status, 200, `${path} for a load balancer's name: ${b.text}`);
      }

      // Names the server knows as its own, on any port; its own pages' Origin.
      for (
        const name of [
          host,
          `localhost:${port}`,
          `LOCALHOST:${port}`,
          `app.localhost:${port}`,
          `[::1]:${port}`,
          "127.0.0.1",
          "192.168.0.7:8080",
          "orbit.test",
          "ORBIT.test.:443",
          "corp.test",
          "orbit.eu.corp.test:8443",
        ]
      ) {
        const a = await rawRequest(server.url, { path: "/v1/workflows", headers: { host: name } });
        assert.equal(a.status, 200, `GET for ${name}: ${a.text}`);
        const w = await rawRequest(server.url, {
          method: "POST",
          path: "/v1/schedules/b-s/pause",
          headers: { host: name, origin: `http://${name}`, "content-type": "application/json" },
          body: "{}",
        });
        assert.equal(w.status, 200, `POST from ${name}'s own page: ${w.text}`);
      }
      // A page behind a TLS proxy listed in --allowed-hosts (Host is the proxy's upstream).
      const proxied = await rawRequest(server.url, {
        method: "POST",
        path: "/v1/schedules/b-s/pause",
        headers: { host, origin: "https://orbit.test", "content-type": "application/json" },
        body: "{}",
      });
      assert.equal(proxied.status, 200, proxied.text);
    } finally {
      await server.kill("SIGKILL");
    }
  },
});

Deno.test({
  name: "writes take JSON bodies only, on every server; a write without a body needs no type",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const TOKEN = "browser-token-0123456789";
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      args: ["--token", TOKEN],
    });
    try {
      await setUp(server, TOKEN);
      const before = await state(server.url, TOKEN);
      const auth = `Bearer ${TOKEN}`;
      const host = new URL(server.url).host;
      for (const [method, path, body] of WRITES) {
        for (
          const type of [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/json; charset=iso-8859-1",
            "application/jsonx",
            "json",
            null,
          ]
        ) {
          const headers: Record<string, string> = { host, authorization: auth };
          if (type !== null) headers["content-type"] = type;
          const a = await rawRequest(server.url, { method, path, headers, body });
          assert.equal(a.status, 415, `${method} ${path} as ${type}: ${a.text}`);
          assert.equal(a.json.error.code, "UNSUPPORTED_MEDIA_TYPE");
          assert.match(a.json.error.message, /content-type: application\/json/);
        }
      }
      // A chunked body without a type is a body.
      const chunked = await rawRequest(server.url, {
        method: "POST",
        path: "/v1/executions",
        headers: { host, authorization: auth, "transfer-encoding": "chunked" },
        body: `2\r\n{}\r\n0\r\n\r\n`,
      });
      assert.equal(chunked.status, 415, chunked.text);
      // Credentials come first: without them a client learns nothing more.
      const anon = await rawRequest(server.url, {
        method: "POST",
        path: "/v1/executions",
        headers: { host, "content-type": "text/plain" },
        body: "{}",
      });
      assert.equal(anon.status, 401);
      assert.deepEqual(await state(server.url, TOKEN), before, "refused writes changed nothing");

      // With a token neither Host nor Origin is checked (the browser cannot send the token).
      const foreign = await rawRequest(server.url, {
        path: "/v1/workflows",
        headers: { host: "orbit.example.com", authorization: auth, origin: "https://x.example" },
      });
      assert.equal(foreign.status, 200, foreign.text);

      // JSON in every spelling a client uses.
      const okTypes = [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON;charset=UTF-8",
        'application/json; charset="utf-8"',
        "application/merge-patch+json",
        "application/vnd.orbit+json; charset=utf-8",
      ];
      for (const [i, type] of okTypes.entries()) {
        const a = await rawRequest(server.url, {
          method: "PATCH",
          path: "/v1/schedules/b-s",
          headers: { host, authorization: auth, "content-type": type },
          body: JSON.stringify({ every_s: 3600 + i }),
        });
        assert.equal(a.status, 200, `${type}: ${a.text}`);
        assert.equal(a.json.every_s, 3600 + i);
      }
      // A POST or DELETE with no body needs no content-type (curl -X POST, Python's http.client).
      for (
        const [method, path, headers] of [
          ["POST", "/v1/schedules/b-s/pause", {}],
          ["POST", "/v1/schedules/b-s/resume", { "content-length": "0" }],
          ["POST", "/v1/executions/b-1/cancel", {}],
          ["DELETE", "/v1/schedules/b-s", {}],
        ] as const
      ) {
        const a = await rawRequest(server.url, {
          method,
          path,
          headers: { host, authorization: auth, ...headers },
        });
        assert.equal(a.status, 200, `${method} ${path} without a body: ${a.text}`);
      }
      const cancelled = await api(server.url, TOKEN).get("/v1/executions/b-1");
      assert.equal(cancelled.body.status, "cancelled");
    } finally {
      await server.kill("SIGKILL");
    }
  },
});

Deno.test("--allowed-hosts takes names, .domains or *, and stops the server on anything else", async () => {
  const dir = await tempDir();
  for (const bad of ["orbit.test:8080", "http://orbit.test", "a b", "orbit.test/x", "[::1]"]) {
    const r = await serverRefusal(["--db", `${dir}/orbit.db`, "--allowed-hosts", bad]);
    assert.equal(r.code, 2, bad);
    assert.match(r.stderr, /^error: --allowed-hosts takes host names/m, bad);
  }
  const r = await serverRefusal(["--db", `${dir}/orbit.db`], {
    ORBIT_ALLOWED_HOSTS: "ok.test,bad:1",
  });
  assert.equal(r.code, 2);
  assert.match(r.stderr, /got "bad:1"/);
});

Deno.test({
  name: "ORBIT_ALLOWED_HOSTS=* serves every Host; other sites' pages stay refused",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const server = await startServer({
      db: `${await tempDir()}/orbit.db`,
      env: { ORBIT_ALLOWED_HOSTS: "*" },
    });
    try {
      const a = await rawRequest(server.url, {
        path: "/v1/workflows",
        headers: { host: "anything.example" },
      });
      assert.equal(a.status, 200, a.text);
      const host = new URL(server.url).host;
      const b = await rawRequest(server.url, {
        method: "POST",
        path: "/v1/workflows",
        headers: { host, origin: "https://evil.example", "content-type": "application/json" },
        body: JSON.stringify(FLOW),
      });
      assert.equal(b.status, 403, b.text);
      assert.equal(b.json.error.code, "FORBIDDEN_ORIGIN");
      const c = await rawRequest(server.url, {
        method: "POST",
        path: "/v1/workflows",
        headers: {
          host: "anything.example",
          origin: "http://anything.example",
          "content-type": "application/json",
        },
        body: JSON.stringify(FLOW),
      });
      assert.equal(c.status, 201, c.text);
    } finally {
      await server.kill("SIGKILL");
    }
  },
});

const CHROMIUM = "/usr/bin/chromium";
const hasChromium = (() => {
  try {
    return Deno.statSync(CHROMIUM).isFile;
  } catch {
    return false;
  }
})();

Deno.test({
  name:
    "in a browser, another site's page cannot write to a server without a token; the console can",
  ignore: !hasChromium,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    const server = await startServer({ db: `${dir}/orbit.db` });
    // The attacker's page, on another origin of the same machine.
    const evil = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      () =>
        new Response(
          `<!doctype html><title>loading</title><script>
        const base = ${JSON.stringify(server.url)};
        const send = (path, body, init = {}) => fetch(base + path, {
          method: "POST", mode: "no-cors", body, ...init,
        }).catch(() => {});
        Promise.all([
          send("/v1/workflows", ${JSON.stringify(JSON.stringify({ ...FLOW, version: "6.6.6" }))}),
          send("/v1/executions", '{"workflow":"Browser.Flow","execution_id":"evil-1"}'),
          send("/v1/executions/b-1/cancel", '{"reason":"evil"}'),
          send("/v1/schedules/b-s/resume", ""),
          send("/v1/schedules/b-s/trigger", "{}", { headers: { "content-type": "text/plain" } }),
        ]).then(() => { document.title = "sent"; });
        </script>`,
          { headers: { "content-type": "text/html" } },
        ),
    );
    const browser = await chromium.launchPersistentContext(`${dir}/chromium-profile`, {
      executablePath: CHROMIUM,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
    });
    try {
      await setUp(server);
      const before = await state(server.url);
      const page = browser.pages()[0] ?? await browser.newPage();
      await page.goto(`http://127.0.0.1:${evil.addr.port}/`);
      await waitFor(async () => (await page.title()) === "sent", "the page's requests");
      assert.deepEqual(await state(server.url), before, "the page changed nothing");
      assert.equal((await api(server.url).get("/v1/executions/evil-1")).status, 404);

      // The console is the server's own page: its writes go through.
      await page.goto(`${server.url}/schedules`);
      const row = page.locator('tr[data-schedule="b-s"]');
      await row.getByRole("button", { name: "Resume" }).click();
      await row.getByRole("button", { name: "Pause" }).waitFor();
      assert.equal((await api(server.url).get("/v1/schedules/b-s")).body.paused, false);
    } finally {
      await browser.close();
      await evil.shutdown();
      await server.kill("SIGKILL");
      await Deno.remove(dir, { recursive: true });
    }
  },
});
