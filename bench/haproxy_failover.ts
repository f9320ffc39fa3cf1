/**
 * The reference page's failover timeline by hand, with HAProxy from Debian's packages
 * (`apt-get install haproxy`) in front of two servers in standby mode:
 *
 *   deno run -A bench/haproxy_failover.ts
 *
 * Starts a PostgreSQL, two servers, HAProxy with deploy/haproxy.cfg's backend settings, and the
 * example worker (a 3 s payment) through HAProxy; starts an order, SIGKILLs the leader while
 * the payment is in flight, and prints the time to the new leader serving, to the order
 * completing through HAProxy, and to the first order started after the kill completing.
 */
import { api, startServer, waitFor } from "../tests/support/server.ts";
import { startPostgres } from "../tests/support/pg.ts";
import { ORDER_WORKFLOW, orderInput, retrying, startOrderWorker } from "../tests/support/orders.ts";

const pg = await startPostgres();
const db = await pg.createDatabase();
const args = (id: string) => ["--cluster", "--node-id", id, "--session-timeout", "10"];
const one = await startServer({ db, args: args("node-1") });
await one.waitForLog(/leader is serving/);
const two = await startServer({ db, args: args("node-2") });
await two.waitForLog(/following the leader/);

const port = 20000 + Math.floor(Math.random() * 20000);
const cfg = (await Deno.readTextFile(new URL("../deploy/haproxy.cfg", import.meta.url)))
  .replace("bind *:7233", `bind 127.0.0.1:${port}`)
  .replace("orbit-0.orbit.internal:7233", new URL(one.url).host)
  .replace("orbit-1.orbit.internal:7233", new URL(two.url).host);
const cfgPath = await Deno.makeTempFile({ suffix: ".cfg" });
await Deno.writeTextFile(cfgPath, cfg);
const haproxy = new Deno.Command("haproxy", {
  args: ["-db", "-f", cfgPath],
  stdout: "null",
  stderr: "inherit",
}).spawn();
const lb = `http://127.0.0.1:${port}`;
const worker = startOrderWorker(lb, { ORDER_CHARGE_DELAY_MS: "3000" });
try {
  // HAProxy starts with every server up until its first check: wait until it routes to the
  // leader alone (several answers in a row).
  let streak = 0;
  await waitFor(
    async () => {
      streak = (await api(lb).get("/v1/ready")).status === 200 ? streak + 1 : 0;
      return streak >= 6;
    },
    "HAProxy to route to the leader",
    30_000,
    200,
  );
  const deployed = await api(lb).post("/v1/workflows", ORDER_WORKFLOW);
  const started = await api(lb).post("/v1/executions", {
    workflow: "OrderProcessing",
    execution_id: "ha-1",
    input: orderInput("ha-1"),
  });
  if (started.status !== 201) {
    throw new Error(
      `deploy ${deployed.status}, start ${started.status}: ${JSON.stringify(started.body)}`,
    );
  }
  await waitFor(
    () => worker.lines.some((l) => l.includes('"step":"charge"')),
    "the charge in flight",
  )
    .catch((e) => {
      console.error(worker.lines.join("\n"));
      throw e;
    });
  const killed = Date.now();
  await one.kill("SIGKILL");
  await waitFor(
    async () => (await api(two.url).get("/v1/ready")).status === 200,
    "node-2 serving",
    15_000,
    10,
  );
  const serving = Date.now() - killed;
  await waitFor(
    async () => {
      try {
        return (await api(lb).get("/v1/ready")).status === 200;
      } catch {
        return false;
      }
    },
    "HAProxy to switch",
    15_000,
    10,
  );
  const switched = Date.now() - killed;
  const first = await retrying(() => api(lb).get("/v1/executions/ha-1/wait?timeout_s=30"));
  const inFlightDone = Date.now() - killed;
  await retrying(() =>
    api(lb).post("/v1/executions", {
      workflow: "OrderProcessing",
      execution_id: "ha-2",
      input: orderInput("ha-2"),
    })
  );
  const second = await retrying(() => api(lb).get("/v1/executions/ha-2/wait?timeout_s=30"));
  const newDone = Date.now() - killed;
  const history = (await api(lb).get("/v1/executions/ha-1/history")).body.events;
  const charges = history.filter((e: { type: string; step?: string }) =>
    e.type === "StepSucceeded" && e.step === "charge"
  ).length;
  console.log(JSON.stringify({
    new_leader_serving_ms: serving,
    haproxy_switched_ms: switched,
    in_flight_order: first.body.status,
    in_flight_order_completed_ms: inFlightDone,
    charge_step_succeeded_events: charges,
    new_order: second.body.status,
    first_new_order_completed_ms: newDone,
  }));
} finally {
  await worker.kill("SIGKILL");
  haproxy.kill("SIGKILL");
  await haproxy.status;
  await one.kill("SIGKILL");
  await two.kill("SIGKILL");
  await pg.stop();
}
