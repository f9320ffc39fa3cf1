/**
 * The gRPC binding's cost beside HTTP's: one server (SQLite, started here with `--grpc-addr`),
 * the same calls over each binding from this process, sequentially and with 32 in flight.
 * Prints calls per second and the server's CPU milliseconds per call (from /proc).
 *
 *   deno run -A bench/grpc_calls.ts [--calls 3000]
 */
import { parseArgs } from "node:util";
import { api, tempDir } from "../tests/support/server.ts";
import { startGrpcServer } from "../tests/grpc_support.ts";
import { grpcClient } from "../lib/grpc/client.ts";
import { TASKS, WORKFLOW } from "../tests/support/three_steps.ts";

const { values } = parseArgs({ args: Deno.args, options: { calls: { type: "string" } } });
const CALLS = Number(values.calls ?? 3000);

function cpuMs(pid: number): number {
  const f = Deno.readTextFileSync(`/proc/${pid}/stat`).split(") ")[1]!.split(" ");
  return (Number(f[11]) + Number(f[12])) * 10; // utime + stime, in 10 ms ticks
}

const dir = await tempDir();
const s = await startGrpcServer({ db: `${dir}/orbit.db` });
const g = grpcClient(s.grpcAddr);
const http = api(s.url);
await http.post("/v1/workflows", WORKFLOW);
await http.post("/v1/executions", { workflow: "Three", execution_id: "b-1", input: { n: 1 } });
const session = (await http.post("/v1/workers/register", { worker_id: "b", tasks: TASKS })).body
  .session_id;

const kinds: Array<[string, () => Promise<unknown>, () => Promise<unknown>]> = [
  [
    "get execution",
    () => http.get("/v1/executions/b-1"),
    () => g.call("Executions", "Get", { execution_id: "b-1" }),
  ],
  [
    "heartbeat",
    () => http.post("/v1/workers/heartbeat", { session_id: session, tokens: [] }),
    () => g.call("Workers", "Heartbeat", { session_id: session, tokens: [] }),
  ],
];

async function run(f: () => Promise<unknown>, inFlight: number) {
  // Warm-up, then the measured calls.
  for (let i = 0; i < 200; i++) await f();
  const cpu0 = cpuMs(s.pid);
  const t0 = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (next++ < CALLS) await f();
  }));
  const ms = performance.now() - t0;
  return { perSecond: Math.round(CALLS / ms * 1000), cpuMsPerCall: (cpuMs(s.pid) - cpu0) / CALLS };
}

try {
  console.log(`${CALLS} calls each; server CPU per call from /proc/${s.pid}/stat`);
  console.log("call            in flight  binding  calls/s  server CPU ms/call");
  for (const [name, h, r] of kinds) {
    for (const inFlight of [1, 32]) {
      for (const [binding, f] of [["http", h], ["grpc", r]] as const) {
        const x = await run(f, inFlight);
        console.log(
          `${name.padEnd(16)}${String(inFlight).padEnd(11)}${binding.padEnd(9)}${
            String(x.perSecond).padEnd(9)
          }${x.cpuMsPerCall.toFixed(3)}`,
        );
      }
    }
  }
} finally {
  g.close();
  await s.kill();
}
