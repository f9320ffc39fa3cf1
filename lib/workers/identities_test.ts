import assert from "node:assert/strict";
import { ConfigError } from "../config.ts";
import {
  deniedTasks,
  describeTasks,
  identify,
  parseWorkersFile,
  taskAllowed,
  type WorkersFile,
} from "./identities.ts";

const ORDERS_TOKEN = "orders-token-0123456789";
const PAY_TOKEN = "payments-token-0123456789";

const GOOD = {
  workers: [
    {
      worker_id: "orders-ts",
      token: ORDERS_TOKEN,
      tasks: [{ name: "payments.charge", contract: "1" }, { name: "orders.*" }],
    },
    { worker_id: "payments", token: PAY_TOKEN, tasks: [{ name: "payments.refund" }] },
  ],
};

const parse = (doc: unknown, clientToken: string | null = null): WorkersFile =>
  parseWorkersFile(typeof doc === "string" ? doc : JSON.stringify(doc), "/etc/orbit/workers.json", {
    clientToken,
  });

/** The ConfigError message a document is refused with. */
function refusal(doc: unknown, clientToken: string | null = null): string {
  try {
    parse(doc, clientToken);
  } catch (e) {
    assert.ok(e instanceof ConfigError, `a ConfigError, got ${e}`);
    assert.match(e.message, /^workers file \/etc\/orbit\/workers\.json: /);
    return e.message;
  }
  assert.fail("the document was accepted");
}

const withWorker = (patch: Record<string, unknown>) => ({
  workers: [{ worker_id: "w", token: ORDERS_TOKEN, tasks: [{ name: "t" }], ...patch }],
});

Deno.test("parseWorkersFile() reads identities and task patterns", () => {
  const f = parse(GOOD);
  assert.equal(f.path, "/etc/orbit/workers.json");
  assert.deepEqual(f.workers.map((w) => [w.worker_id, w.tasks]), [
    ["orders-ts", [{ name: "payments.charge", contract: "1" }, {
      name: "orders.*",
      contract: null,
    }]],
    ["payments", [{ name: "payments.refund", contract: null }]],
  ]);
});

Deno.test("parseWorkersFile() keeps no token in the clear", () => {
  const f = parse(GOOD);
  const dump = JSON.stringify(f, (_k, v) => (v instanceof Uint8Array ? [...v] : v));
  assert.ok(!dump.includes(ORDERS_TOKEN) && !dump.includes(PAY_TOKEN));
  for (const w of f.workers) assert.equal(w.token_sha256.length, 32);
});

Deno.test("parseWorkersFile() refuses text that is not JSON", () => {
  assert.match(refusal('{"workers": ['), /: not valid JSON: /);
  assert.match(refusal(""), /: not valid JSON: /);
});

Deno.test("parseWorkersFile() names the JSON path of every problem", () => {
  const msg = refusal({
    workers: [
      { worker_id: "", token: ORDERS_TOKEN, tasks: [{ name: "a" }] },
      { worker_id: "b", token: PAY_TOKEN, tasks: [{ name: 5 }, { name: "x", contract: "" }] },
    ],
  });
  assert.match(msg, /\$\.workers\[0\]\.worker_id: must not be empty/);
  assert.match(msg, /\$\.workers\[1\]\.tasks\[0\]\.name: .*expected string/);
  assert.match(msg, /\$\.workers\[1\]\.tasks\[1\]\.contract: must not be empty/);
});

Deno.test("parseWorkersFile() refuses a document without workers or tasks", () => {
  assert.match(refusal([]), /\$: .*expected object/);
  assert.match(refusal({}), /\$\.workers: .*expected array/);
  assert.match(refusal({ workers: [] }), /\$\.workers: must list at least one worker/);
  assert.match(refusal(withWorker({ tasks: [] })), /\$\.workers\[0\]\.tasks: must list at least/);
  assert.match(refusal(withWorker({ tasks: undefined })), /\$\.workers\[0\]\.tasks: /);
});

Deno.test("parseWorkersFile() refuses unknown keys, so a typo grants nothing silently", () => {
  assert.match(refusal({ ...GOOD, wrokers: [] }), /\$: Unrecognized key: "wrokers"/);
  assert.match(refusal(withWorker({ taks: [] })), /\$\.workers\[0\]: Unrecognized key: "taks"/);
  assert.match(
    refusal(withWorker({ tasks: [{ name: "t", contracts: "1" }] })),
    /\$\.workers\[0\]\.tasks\[0\]: Unrecognized key: "contracts"/,
  );
});

Deno.test("parseWorkersFile() refuses duplicate worker ids", () => {
  const msg = refusal({
    workers: [
      { worker_id: "w", token: ORDERS_TOKEN, tasks: [{ name: "a" }] },
      { worker_id: "v", token: PAY_TOKEN, tasks: [{ name: "a" }] },
      { worker_id: "w", token: "third-token-0123456789", tasks: [{ name: "b" }] },
    ],
  });
  assert.match(
    msg,
    /\$\.workers\[2\]\.worker_id: duplicate worker id "w" \(also \$\.workers\[0\]\)/,
  );
});

Deno.test("parseWorkersFile() refuses one token for two workers, or the client token", () => {
  assert.match(
    refusal({
      workers: [
        { worker_id: "a", token: ORDERS_TOKEN, tasks: [{ name: "a" }] },
        { worker_id: "b", token: ORDERS_TOKEN, tasks: [{ name: "b" }] },
      ],
    }),
    /\$\.workers\[1\]\.token: same token as \$\.workers\[0\]/,
  );
  assert.match(
    refusal(GOOD, PAY_TOKEN),
    /\$\.workers\[1\]\.token: same as --token; a worker token must differ from it/,
  );
  assert.equal(parse(GOOD, "client-token-0123456789").workers.length, 2);
});

Deno.test("parseWorkersFile() refuses weak or unsendable tokens without quoting them", () => {
  for (
    const [token, re] of [
      ["short", /must be at least 16 characters/],
      ["has a space in the middle", /printable ASCII without spaces/],
      ["line\nbreak-0123456789", /printable ASCII without spaces/],
      ["ünïcode-token-0123456789", /printable ASCII without spaces/],
      [42, /expected string/],
    ] as const
  ) {
    const msg = refusal(withWorker({ token }));
    assert.match(msg, /\$\.workers\[0\]\.token: /);
    assert.match(msg, re);
    if (typeof token === "string") assert.ok(!msg.includes(token), "the token is not quoted");
  }
});

Deno.test("parseWorkersFile() allows `*` only at the end of a task pattern", () => {
  for (const name of ["*", "orders.*", "orders*"]) {
    assert.equal(parse(withWorker({ tasks: [{ name }] })).workers.length, 1);
  }
  for (const name of ["*.charge", "or*ders.*", "**"]) {
    assert.match(
      refusal(withWorker({ tasks: [{ name }] })),
      /\$\.workers\[0\]\.tasks\[0\]\.name: `\*` may only end a pattern/,
    );
  }
  assert.match(
    refusal(withWorker({ tasks: [{ name: "t", contract: "*" }] })),
    /\$\.workers\[0\]\.tasks\[0\]\.contract: must be one contract version; omit it/,
  );
});

Deno.test("parseWorkersFile() refuses control, invisible and bidirectional characters in names", () => {
  assert.match(
    refusal(withWorker({ worker_id: "w\nINFO forged" })),
    /\$\.workers\[0\]\.worker_id: must not contain U\+000A \(no control, invisible or bidirectional characters\)/,
  );
  assert.match(
    refusal(withWorker({ worker_id: "orders\u202egnp" })),
    /\$\.workers\[0\]\.worker_id: must not contain U\+202E/,
  );
  assert.match(
    refusal(withWorker({ worker_id: "orders\u200b" })),
    /\$\.workers\[0\]\.worker_id: must not contain U\+200B/,
  );
  assert.match(
    refusal(withWorker({ tasks: [{ name: "orders.\u2066x" }] })),
    /\$\.workers\[0\]\.tasks\[0\]\.name: must not contain U\+2066/,
  );
});

Deno.test("identify() finds the worker of a token, and nobody for any other string", () => {
  const f = parse(GOOD);
  assert.equal(identify(f, ORDERS_TOKEN)?.worker_id, "orders-ts");
  assert.equal(identify(f, PAY_TOKEN)?.worker_id, "payments");
  for (const t of ["", ORDERS_TOKEN.slice(0, -1), ORDERS_TOKEN + "x", ORDERS_TOKEN.toUpperCase()]) {
    assert.equal(identify(f, t), null);
  }
});

Deno.test("taskAllowed() matches exact names, `*` prefixes and optional contracts", () => {
  const [orders, payments] = parse(GOOD).workers;
  assert.ok(orders && payments);
  assert.ok(taskAllowed(orders, "payments.charge", "1"));
  assert.ok(!taskAllowed(orders, "payments.charge", "2"), "the contract is pinned");
  assert.ok(taskAllowed(orders, "orders.validate", "1"));
  assert.ok(taskAllowed(orders, "orders.validate", "7"), "no contract: every contract");
  assert.ok(taskAllowed(orders, "orders.a.b", "1"));
  assert.ok(!taskAllowed(orders, "orders", "1"), "orders.* needs the dot");
  assert.ok(!taskAllowed(orders, "ordersx.validate", "1"));
  assert.ok(!taskAllowed(orders, "payments.refund", "1"));
  assert.ok(!taskAllowed(payments, "payments.charge", "1"));
  const all = parse(withWorker({ tasks: [{ name: "*" }] })).workers[0]!;
  assert.ok(taskAllowed(all, "anything.at.all", "9"));
});

Deno.test("deniedTasks() lists the refused tasks of a registration", () => {
  const orders = parse(GOOD).workers[0]!;
  assert.deepEqual(
    deniedTasks(orders, [
      { name: "orders.validate", contract: "1", language: "typescript" },
      { name: "payments.charge", contract: "2" },
      { name: "payments.refund", contract: "1" },
    ]),
    [{ name: "payments.charge", contract: "2" }, { name: "payments.refund", contract: "1" }],
  );
  assert.deepEqual(deniedTasks(orders, [{ name: "orders.ship", contract: "3" }]), []);
  assert.equal(describeTasks(orders), "payments.charge@1, orders.*");
});
