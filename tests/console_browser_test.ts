/**
 * The console in a real browser: Debian's chromium driven by playwright-core, against a real
 * server process started with --token and a real worker process (the OrderProcessing example
 * worker). It asks for the token, lists and filters executions, opens one by its own URL, shows
 * the timeline and the pending reason of a step no worker serves, sends a signal, runs a
 * query, cancels (compensations drawn), pauses and resumes a schedule, shows a worker id full of
 * HTML as text, shows an API error with its code, and draws a workflow's IR as a step graph.
 *
 * A third test holds what a new user hit (issue 38): a refused token shown refused, a timer's
 * date, a refused signal's problems, the console's own not-found page, and a 420 px window.
 *
 * With ORBIT_SCREENSHOTS=docs it also writes the console's screenshots (docs/operations.md, "Console") to docs/; with
 * ORBIT_NARROW_SHOTS=DIR the 420 px pages to DIR.
 * Skipped (loudly) only when /usr/bin/chromium is absent; .ci/run installs it.
 */
import assert from "node:assert/strict";
import { type BrowserContext, chromium, type Page } from "playwright-core";
import { api, type ServerProcess, startServer, tempDir, waitFor } from "./support/server.ts";
import { ORDER_WORKFLOW, orderInput, startOrderWorker } from "./support/orders.ts";
import { registerWorker } from "./support/workers.ts";

const CHROMIUM = "/usr/bin/chromium";
const TOKEN = "console-test-token";
const ROOT = new URL("../", import.meta.url).pathname;
const SHOTS = Deno.env.get("ORBIT_SCREENSHOTS") === "docs" ? `${ROOT}docs` : null;
/** ORBIT_NARROW_SHOTS=DIR: the 420 px pages as screenshots in DIR, to look at. */
const NARROW_SHOTS = Deno.env.get("ORBIT_NARROW_SHOTS") ?? null;
const hasChromium = (() => {
  try {
    return Deno.statSync(CHROMIUM).isFile;
  } catch {
    return false;
  }
})();
if (!hasChromium) {
  console.warn(
    `SKIPPED tests/console_browser_test.ts: ${CHROMIUM} is missing (apt-get install -y chromium)`,
  );
}

/** Pick (warehouse.pick) has no worker anywhere: its executions wait with a reason. */
const FULFILMENT = {
  ir: "orbit-ir/1",
  name: "Fulfilment",
  version: "1.0.0",
  steps: [
    { id: "pick", task: "warehouse.pick", contract: "1", input: "{% $input %}" },
    { id: "done", return: "{% $steps.pick %}" },
  ],
};

/** Validation, then reservation and a human approval side by side, then the charge. */
const APPROVAL = {
  ir: "orbit-ir/2",
  name: "OrderApproval",
  version: "1.0.0",
  signals: { approved: { schema: { type: "object" } }, note: {} },
  queries: { total: "{% $steps.validate.total %}", note: "{% $vars.note %}" },
  handlers: { note: [{ id: "remember", assign: { note: "{% $signal %}" } }] },
  steps: [
    { id: "validate", task: "orders.validate", contract: "1", input: "{% $input %}" },
    {
      id: "prepare",
      parallel: [
        [{
          id: "reserve",
          task: "inventory.reserve",
          contract: "1",
          input: { order_id: "{% $input.order_id %}", items: "{% $input.items %}" },
          compensate: {
            task: "inventory.release",
            contract: "1",
            input: { reservation_id: "{% $steps.reserve.reservation_id %}" },
          },
        }],
        [{ id: "approval", wait_signal: "approved", timeout_s: 86400 }],
      ],
    },
    {
      id: "charge",
      task: "payments.charge",
      contract: "1",
      input: {
        order_id: "{% $input.order_id %}",
        amount: "{% $steps.validate.total %}",
        customer: "{% $input.customer %}",
      },
    },
    { id: "done", return: { charged: "{% $steps.charge.amount %}" } },
  ],
};

/** Debian's chromium, headless, with its profile under `dir` (removed with the test's files). */
function launchChromium(
  dir: string,
  more: { locale?: string; timezoneId?: string } = {},
): Promise<BrowserContext> {
  return chromium.launchPersistentContext(`${dir}/chromium-profile`, {
    ...more,
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1360, height: 900 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

async function shot(page: Page, name: string): Promise<void> {
  if (!SHOTS) return;
  await page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: false });
}

Deno.test({
  name:
    "console: token, list and filters, an execution's timeline and pending reason, signal, query, cancel, schedules, workers, errors, graph",
  ignore: !hasChromium,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const dir = await tempDir();
    const server = await startServer({
      db: `${dir}/orbit.db`,
      args: ["--token", TOKEN, "--session-timeout", "120"],
    });
    const worker = startOrderWorker(server.url, { ORBIT_TOKEN: TOKEN, ORDER_TRACE: "0" });
    const c = api(server.url, TOKEN);
    const servers: ServerProcess[] = [];
    let context: BrowserContext | null = null;
    /** What the test was doing, for a failure's message. */
    let stage = "setting up";
    try {
      for (const doc of [ORDER_WORKFLOW, FULFILMENT, APPROVAL]) {
        assert.equal((await c.post("/v1/workflows", doc)).status, 201);
      }
      const start = async (workflow: string, id: string, input: unknown) => {
        const r = await c.post("/v1/executions", { workflow, execution_id: id, input });
        assert.equal(r.status, 201, JSON.stringify(r.body));
      };
      await start("OrderProcessing", "order-1", orderInput("order-1"));
      await start("OrderProcessing", "order-declined", {
        ...orderInput("order-declined"),
        customer: "declined",
      });
      await start("Fulfilment", "stuck-1", { order_id: "stuck-1" });
      await start("OrderApproval", "approve-1", orderInput("approve-1"));
      await start("OrderApproval", "approve-2", orderInput("approve-2"));
      for (const id of ["order-1", "order-declined"]) {
        await waitFor(async () => {
          const r = await c.get(`/v1/executions/${id}/wait?timeout_s=10`);
          return r.body.status !== "running";
        }, `${id} to finish`);
      }
      for (const id of ["approve-1", "approve-2"]) {
        await waitFor(async () => {
          const p = (await c.get(`/v1/executions/${id}/pending`)).body.pending ?? [];
          return p.length === 1 && p[0].reason === "WAITING_FOR_SIGNAL";
        }, `${id} to wait for its approval only`);
      }
      const sched = await c.post("/v1/schedules", {
        schedule_id: "nightly-fulfilment",
        workflow: "Fulfilment",
        input: {},
        every_s: 86400,
      });
      assert.equal(sched.status, 201, JSON.stringify(sched.body));
      // A worker whose id is markup: it must show as text.
      const evil = `<img src=x onerror="window.__pwned=1">ü/worker`;
      await registerWorker(c, {
        worker_id: evil,
        runtime: "python",
        tasks: [{ name: "reports.build", contract: "2" }],
        concurrency: 2,
      });

      context = await launchChromium(dir);
      const page = context.pages()[0] ?? await context.newPage();
      const pageErrors: string[] = [];
      page.on("pageerror", (e) => pageErrors.push(e.message));
      page.on("dialog", (d) => d.accept());
      page.setDefaultTimeout(30_000);

      // Without a token the API answers 401: the console asks for one.
      stage = "Without a token the API answers 401: the console asks for one.";
      await page.goto(`${server.url}/`);
      await page.getByLabel("Token", { exact: true }).fill(TOKEN);
      await page.getByRole("button", { name: "Use token" }).click();
      assert.equal(new URL(page.url()).pathname, "/executions");
      const rows = page.locator("table.list tbody tr");
      await waitFor(async () => (await rows.count()) === 5, "five executions listed");
      assert.equal(
        await page.evaluate(() => sessionStorage.getItem("orbit-token")),
        TOKEN,
        "the token is kept in sessionStorage",
      );
      await shot(page, "console-executions");

      // Filters: status, then workflow (they go into the URL).
      stage = "Filters: status, then workflow (they go into the URL).";
      await page.getByLabel("Status").selectOption("failed");
      await waitFor(async () => (await rows.count()) === 1, "one failed execution");
      assert.match(await rows.first().innerText(), /order-declined/);
      assert.match(page.url(), /status=failed/);
      await page.getByLabel("Status").selectOption("");
      await page.getByLabel("Id prefix").fill("approve-");
      await page.getByLabel("Id prefix").press("Enter");
      await waitFor(async () => (await rows.count()) === 2, "two ids with the prefix approve-");
      assert.match(page.url(), /id=approve-/);
      await page.getByLabel("Id prefix").fill("");
      await page.getByLabel("Id prefix").press("Enter");
      await page.getByLabel("Workflow").selectOption("Fulfilment");
      await waitFor(
        async () => (await rows.count()) === 1 && /stuck-1/.test(await rows.first().innerText()),
        "the Fulfilment execution alone",
      );

      // Open it: its own URL, the timeline, and why it waits.
      stage = "Open it: its own URL, the timeline, and why it waits.";
      await page.getByRole("link", { name: "stuck-1" }).click();
      assert.equal(new URL(page.url()).pathname, "/executions/stuck-1");
      const pendingBox = page.locator("section.pending");
      await pendingBox.getByText("no worker serves task warehouse.pick contract 1").waitFor();
      assert.match(await pendingBox.innerText(), /QUEUED_NO_WORKER/);
      assert.match(
        await page.locator("table.timeline").innerText(),
        /pick\s[\s\S]*warehouse\.pick@1/,
      );
      await shot(page, "console-pending");

      // The approval: timeline with parallel branches, a query, then the signal.
      stage = "The approval: timeline with parallel branches, a query, then the signal.";
      await page.goto(`${server.url}/executions/approve-1`);
      await pendingBox.getByText("waiting for signal approved").waitFor();
      const timeline = page.locator("table.timeline");
      await timeline.getByText("branch prepare[0]").waitFor();
      assert.match(await timeline.innerText(), /approval[\s\S]*branch prepare\[1\]/);
      await page.getByRole("button", { name: "Run total" }).click();
      await page.locator(".query pre.json", { hasText: "19" }).waitFor();
      await shot(page, "console-execution");
      // A signal with a handler: its run gets its own row on the timeline.
      await page.locator('select[name="signal"]').selectOption("note");
      await page.getByLabel("Payload (JSON)").fill('"call the customer"');
      await page.getByRole("button", { name: "Send signal" }).click();
      await page.getByText(/signal note recorded as event \d+/).waitFor();
      const handlerRow = timeline.locator("th", { hasText: /^remember@\d+/ });
      await handlerRow.waitFor();
      assert.match(await handlerRow.innerText(), /^remember@(\d+)\s+handler @\1$/);
      await page.getByRole("button", { name: "Run note" }).click();
      await page.locator(".query pre.json", { hasText: '"call the customer"' }).waitFor();
      await page.locator('select[name="signal"]').selectOption("approved");
      await page.getByLabel("Payload (JSON)").fill('{"by":"<b>ops</b>"}');
      await page.getByRole("button", { name: "Send signal" }).click();
      await page.locator("h1 .status", { hasText: "completed" }).waitFor();
      const history = page.locator("table.history");
      const signalRow = history.locator("tr", { hasText: "SignalReceived" }).filter({
        hasText: "approved",
      });
      await signalRow.locator("summary").click();
      assert.match(await signalRow.locator("pre").innerText(), /"by": "<b>ops<\/b>"/);
      assert.equal(await history.locator("b").count(), 0, "payload markup stays text");
      assert.equal((await c.get("/v1/executions/approve-1")).body.status, "completed");

      // Cancel the other: the reservation's compensation shows on the timeline.
      stage = "Cancel the other: the reservation's compensation shows on the timeline.";
      await page.goto(`${server.url}/executions/approve-2`);
      await page.getByRole("button", { name: "Cancel execution" }).click();
      await page.locator("h1 .status", { hasText: "cancelled" }).waitFor();
      await timeline.getByText("compensation").first().waitFor();
      assert.match(await timeline.innerText(), /reserve\.compensate/);
      assert.equal((await c.get("/v1/executions/approve-2")).body.status, "cancelled");

      // The failed order: its error and compensations.
      stage = "The failed order: its error and compensations.";
      await page.goto(`${server.url}/executions/order-declined`);
      await page.locator(".error", { hasText: "CARD_DECLINED" }).first().waitFor();
      await shot(page, "console-failed");

      // An API error is shown with its code.
      stage = "An API error is shown with its code.";
      await page.goto(`${server.url}/executions/no-such-execution`);
      await page.locator(".error", { hasText: "UNKNOWN_EXECUTION" }).waitFor();

      // Schedules: pause, then resume.
      stage = "Schedules: pause, then resume.";
      await page.getByRole("link", { name: "Schedules" }).click();
      const schedRow = page.locator('tr[data-schedule="nightly-fulfilment"]');
      await schedRow.getByRole("button", { name: "Pause" }).click();
      await schedRow.getByText("paused").waitFor();
      assert.equal((await c.get("/v1/schedules/nightly-fulfilment")).body.paused, true);
      await shot(page, "console-schedules");
      await schedRow.getByRole("button", { name: "Resume" }).click();
      await schedRow.getByRole("button", { name: "Pause" }).waitFor();
      assert.equal((await c.get("/v1/schedules/nightly-fulfilment")).body.paused, false);
      await schedRow.getByRole("button", { name: "Trigger now" }).click();
      await schedRow.getByRole("link", { name: /^nightly-fulfilment@/ }).waitFor();
      assert.equal((await c.get("/v1/schedules/nightly-fulfilment")).body.fired, 1);

      // Workers: the markup id is text, and nothing ran.
      stage = "Workers: the markup id is text, and nothing ran.";
      await page.getByRole("link", { name: "Workers" }).click();
      await page.locator("td.id", { hasText: evil }).waitFor();
      await page.locator("td.id", { hasText: "orders-typescript" }).waitFor();
      assert.equal(await page.locator("main img").count(), 0);
      assert.equal(
        await page.evaluate(() => (globalThis as { __pwned?: number }).__pwned),
        undefined,
      );
      await shot(page, "console-workers");

      // Workflows: the IR as a step graph, parallel branches side by side.
      stage = "Workflows: the IR as a step graph, parallel branches side by side.";
      await page.goto(`${server.url}/workflows/OrderApproval/1.0.0`);
      await page.locator(".node-id", { hasText: "approval" }).waitFor();
      assert.equal(await page.locator(".graph .branch").count(), 2);
      assert.match(
        await page.locator(".graph").first().innerText(),
        /compensate: inventory\.release@1/,
      );
      await page.getByRole("heading", { name: "Handler for signal note" }).waitFor();
      assert.match(await page.locator(".graph").nth(1).innerText(), /remember\s+assign/);
      await shot(page, "console-workflow");

      // Cluster and metrics (five starts, and the schedule's trigger).
      stage = "Cluster and metrics (five starts, and the schedule's trigger).";
      await page.getByRole("link", { name: "Cluster" }).click();
      await page.locator("dd", { hasText: "single" }).waitFor();
      await page.locator(".card", { hasText: "Executions started" }).locator(".big", {
        hasText: "6",
      }).waitFor();
      await shot(page, "console-cluster");

      // Keyboard: the skip link, then the first nav link, by Tab and Enter.
      stage = "Keyboard: the skip link, then the first nav link, by Tab and Enter.";
      await page.goto(`${server.url}/workers`);
      await page.keyboard.press("Tab");
      assert.equal(
        await page.evaluate("document.activeElement?.textContent"),
        "Skip to content",
      );
      await page.keyboard.press("Tab");
      await page.keyboard.press("Tab");
      assert.equal(await page.evaluate("document.activeElement?.textContent"), "Executions");
      await page.keyboard.press("Enter");
      await page.locator("h1", { hasText: "Executions" }).waitFor();
      assert.equal(new URL(page.url()).pathname, "/executions");

      // Dark mode follows the system.
      stage = "Dark mode follows the system.";
      await page.emulateMedia({ colorScheme: "dark" });
      await page.goto(`${server.url}/executions/approve-1`);
      await page.locator("table.timeline").waitFor();
      const bg = await page.evaluate("getComputedStyle(document.body).backgroundColor");
      assert.equal(bg, "rgb(13, 17, 23)");
      await shot(page, "console-execution-dark");

      // A dropped connection: the page says so and retries; the restarted server answers.
      stage = "A dropped connection: the page says so and retries; the restarted server answers.";
      await page.emulateMedia({ colorScheme: "light" });
      await page.goto(`${server.url}/executions/stuck-1`);
      await pendingBox.getByText("no worker serves task warehouse.pick").waitFor();
      const addr = server.url.replace(/^http:\/\//, "");
      await server.kill("SIGKILL");
      await page.getByText("Connection lost, retrying…").waitFor();
      servers.push(
        await startServer({ db: `${dir}/orbit.db`, addr, args: ["--token", TOKEN] }),
      );
      await page.getByText("Connection lost, retrying…").waitFor({ state: "detached" });
      await pendingBox.getByText("no worker serves task warehouse.pick").waitFor();

      assert.deepEqual(pageErrors, []);
    } catch (e) {
      const url = context?.pages()[0]?.url() ?? "-";
      throw new Error(`${stage} (page ${url}): ${(e as Error).message}`, { cause: e });
    } finally {
      await context?.close();
      await worker.kill("SIGKILL");
      for (const s of [server, ...servers]) await s.kill("SIGKILL");
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "console: a link followed before the page's first effects have run still changes the page",
  ignore: !hasChromium,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const dir = await tempDir();
    const server = await startServer({ db: `${dir}/orbit.db` });
    let context: BrowserContext | null = null;
    try {
      context = await launchChromium(dir);
      const page = context.pages()[0] ?? await context.newPage();
      page.setDefaultTimeout(10_000);
      // A busy machine, made certain: no animation frame comes, and the console's deferred
      // effects (Preact runs them after the next frame, or after 35 ms without one) wait until
      // the test has followed the link.
      await page.addInitScript(() => {
        const w = globalThis as unknown as {
          requestAnimationFrame: (f: () => void) => number;
          setTimeout: (f: () => void, ms?: number) => number;
          __release?: () => void;
        };
        const held: Array<() => void> = [];
        const orig = w.setTimeout.bind(globalThis);
        w.requestAnimationFrame = () => 0;
        w.setTimeout = (f, ms) => (ms === 35 ? (held.push(f), 0) : orig(f, ms));
        w.__release = () => held.splice(0).forEach((f) => f());
      });
      await page.goto(`${server.url}/workers`);
      await page.locator("h1", { hasText: "Workers" }).waitFor();
      await page.keyboard.press("Tab");
      await page.keyboard.press("Tab");
      await page.keyboard.press("Tab");
      assert.equal(await page.evaluate("document.activeElement?.textContent"), "Executions");
      await page.keyboard.press("Enter");
      assert.equal(new URL(page.url()).pathname, "/executions");
      await page.evaluate("globalThis.__release()");
      await page.locator("h1", { hasText: "Executions" }).waitFor();
    } finally {
      await context?.close();
      await server.kill("SIGKILL");
      await Deno.remove(dir, { recursive: true });
    }
  },
});

/**
 * Evaluated in the page: what is wider than the window, but for what scrolls inside its own box
 * (a table in its scroller): descriptions, none when the page fits.
 */
const OVERFLOWING = `(() => {
  const width = document.documentElement.clientWidth;
  const out = [];
  if (document.documentElement.scrollWidth > width) {
    out.push("the page is " + document.documentElement.scrollWidth + " px wide");
  }
  const inScroller = (el) => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const x = getComputedStyle(p).overflowX;
      if (x === "auto" || x === "scroll") return p.getBoundingClientRect().right <= width + 0.5;
    }
    return false;
  };
  for (const el of document.querySelectorAll("header *, main *")) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > width + 0.5 && !inScroller(el)) {
      out.push(el.tagName.toLowerCase() + "." + el.className + " ends at " + Math.round(r.right));
    }
  }
  return out;
})()`;

/** A signal wait with a day's timeout in a workflow with its own timeout. */
const TIMERS = {
  ir: "orbit-ir/2",
  name: "Timers",
  version: "1.0.0",
  timeout_s: 172800,
  signals: {
    approved: {
      schema: {
        type: "object",
        required: ["by"],
        properties: { by: { type: "string" } },
      },
    },
  },
  steps: [
    { id: "approval", wait_signal: "approved", timeout_s: 86400 },
    { id: "done", return: "{% $signal %}" },
  ],
};

Deno.test({
  name: "console: what a new user hit (issue 38)",
  ignore: !hasChromium,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async (t) => {
    const dir = await tempDir();
    const server = await startServer({ db: `${dir}/orbit.db`, args: ["--token", TOKEN] });
    const c = api(server.url, TOKEN);
    let context: BrowserContext | null = null;
    try {
      for (const doc of [TIMERS, APPROVAL]) {
        assert.equal((await c.post("/v1/workflows", doc)).status, 201);
      }
      const started = await c.post("/v1/executions", {
        workflow: "Timers",
        execution_id: "timer-1",
        input: {},
      });
      assert.equal(started.status, 201, JSON.stringify(started.body));
      // Long names, for the narrow window.
      await registerWorker(c, {
        worker_id: "fulfilment-worker-eu-west-1-a-7f9c2d4e-long-hostname.internal",
        runtime: "typescript",
        tasks: [
          { name: "warehouse.pick-and-pack-with-a-long-name", contract: "1" },
          { name: "warehouse.ship", contract: "2" },
        ],
        concurrency: 4,
      });
      const sched = await c.post("/v1/schedules", {
        schedule_id: "nightly-timers-for-every-region-of-the-world",
        workflow: "Timers",
        input: {},
        every_s: 86400,
      });
      assert.equal(sched.status, 201, JSON.stringify(sched.body));
      context = await launchChromium(dir, { locale: "en-US", timezoneId: "UTC" });
      const page = context.pages()[0] ?? await context.newPage();
      const pageErrors: string[] = [];
      page.on("pageerror", (e) => pageErrors.push(e.message));
      page.setDefaultTimeout(30_000);

      await t.step("a refused token is shown refused, not ✓", async () => {
        await page.goto(`${server.url}/executions`);
        const button = page.locator("header button.link");
        await page.getByLabel("Token", { exact: true }).fill("wrong-token");
        await page.getByRole("button", { name: "Use token" }).click();
        await page.locator("main .error", { hasText: "UNAUTHORIZED" }).waitFor();
        await waitFor(
          async () => (await button.innerText()) === "Token ✗ refused",
          "the token shown refused",
          10_000,
        ).catch(async (e) => {
          throw new Error(`${e.message}; the button says ${await button.innerText()}`);
        });
        await page.getByLabel("Token", { exact: true }).fill(TOKEN);
        await page.getByRole("button", { name: "Use token" }).click();
        await page.getByRole("link", { name: "timer-1" }).waitFor();
        await waitFor(async () => (await button.innerText()) === "Token ✓", "the token taken");
      });
      // The steps below have the token whatever became of the one above.
      await page.addInitScript((token) => sessionStorage.setItem("orbit-token", token), TOKEN);

      await t.step("a timer a day or two off shows its date, and how far off it is", async () => {
        const history = await c.get("/v1/executions/timer-1/history");
        const timers = history.body.events.filter((e: { type: string }) =>
          e.type === "TimerStarted"
        );
        assert.equal(timers.length, 2, JSON.stringify(history.body)); // the step's, the workflow's
        await page.goto(`${server.url}/executions/timer-1`);
        const rows = page.locator("table.history tr", { hasText: "TimerStarted" });
        await waitFor(async () => (await rows.count()) === 2, "two TimerStarted rows");
        for (const [i, timer] of timers.entries()) {
          const hours = Math.round((timer.fire_at_ms - timer.time_ms) / 3_600_000);
          const day = new Date(timer.fire_at_ms).toLocaleDateString("en-US", {
            dateStyle: "medium",
            timeZone: "UTC",
          });
          const text = await rows.nth(i).locator("summary").innerText();
          assert.ok(text.includes(`timeout until ${day}, `), `${text} (expected ${day})`);
          assert.match(text, new RegExp(`\\(in (${hours - 1} h \\d\\d|${hours} h 00) m\\)$`));
        }
      });

      await t.step("a refused signal shows its problems, each where it is", async () => {
        await page.goto(`${server.url}/executions/timer-1`);
        await page.locator('select[name="signal"]').selectOption("approved");
        await page.getByLabel("Payload (JSON)").fill('{"by": 5}');
        await page.getByRole("button", { name: "Send signal" }).click();
        const error = page.locator("form.signal .error", { hasText: "SIGNAL_PAYLOAD_INVALID" });
        await error.waitFor();
        await error.locator("li", { hasText: "$.payload.by" }).waitFor({ timeout: 5_000 })
          .catch(async (e) => {
            throw new Error(`${e.message}; the error says: ${await error.innerText()}`);
          });
        assert.match(await error.locator("li").innerText(), /^\$\.payload\.by\s+must be string$/);
        assert.equal((await c.get("/v1/executions/timer-1")).body.status, "running");
      });

      await t.step("an unknown page is the console's not-found page, with 404", async () => {
        const r = await page.goto(`${server.url}/no/such-page`);
        assert.equal(r?.status(), 404);
        await page.getByRole("heading", { name: "Page not found" }).waitFor({ timeout: 5_000 });
        assert.match(await page.locator("main").innerText(), /no page at \/no\/such-page/);
        await page.getByRole("navigation").getByRole("link", { name: "Workers" }).click();
        await page.getByRole("heading", { name: "Workers" }).waitFor();
      });

      await t.step(
        "at 420 px the page fits: the nav wraps, tables scroll in their box",
        async () => {
          await page.setViewportSize({ width: 420, height: 900 });
          const pages: Array<[string, string]> = [
            ["/executions", "table.list tbody tr a"],
            ["/executions/timer-1", "table.history tbody tr"],
            ["/workflows", "table.list tbody tr a"],
            ["/workflows/OrderApproval/1.0.0", ".graph .branch"],
            ["/workers", "table.list td.id"],
            ["/schedules", "table.list tbody tr"],
            ["/cluster", ".card"],
          ];
          const overflowing: string[] = [];
          for (const [path, ready] of pages) {
            await page.goto(`${server.url}${path}`);
            await page.locator(ready).first().waitFor();
            if (NARROW_SHOTS) {
              await page.screenshot({
                path: `${NARROW_SHOTS}/narrow${path.replaceAll("/", "_")}.png`,
                fullPage: true,
              });
            }
            const wide = await page.evaluate(OVERFLOWING) as string[];
            if (wide.length > 0) overflowing.push(`${path}: ${wide.slice(0, 5).join("; ")}`);
          }
          await page.setViewportSize({ width: 1360, height: 900 });
          assert.deepEqual(overflowing, []);
        },
      );

      assert.deepEqual(pageErrors, []);
    } finally {
      await context?.close();
      await server.kill("SIGKILL");
      await Deno.remove(dir, { recursive: true });
    }
  },
});
