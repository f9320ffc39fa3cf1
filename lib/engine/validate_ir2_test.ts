import assert from "node:assert/strict";
import type { Problem } from "./ir.ts";
import { validateWorkflow } from "./validate.ts";
import { httpAllowed } from "./http_allow.ts";

const t = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  task: "t.x",
  contract: "1",
  ...extra,
});

/** The SPEC §2 example, with its placeholder branches filled in. */
const SPEC_EXAMPLE = {
  ir: "orbit-ir/2",
  name: "OrderProcessing",
  version: "1.0.0",
  input_schema: { type: "object", required: ["order_id"] },
  timeout_s: 3600,
  signals: { address_changed: { schema: { type: "object" } }, approved: {} },
  queries: { status: "{% $vars.status %}" },
  steps: [
    t("validate", { input: "{% $input %}", timeout_s: 30 }),
    t("charge", {
      input: { amount: "{% $steps.validate.total %}" },
      compensate: { task: "payments.refund", contract: "1", input: "{% $steps.charge %}" },
    }),
    { id: "approval", wait_signal: "approved", timeout_s: 86400 },
    { id: "cool_off", sleep_s: 60 },
    {
      id: "notify",
      http: { method: "POST", url: "https://hooks.example/x", body: "{% $steps %}" },
    },
    { id: "ship", child: { workflow: "Shipping", version: "1.0.0", input: "{% $input %}" } },
    { id: "both", parallel: [[t("left")], [t("right", { input: "{% $steps.ship %}" })]] },
    {
      id: "big",
      if: "{% $input.total > 1000 %}",
      then: [{ id: "mark", assign: { big: true } }],
      else: [],
    },
    { id: "again", continue_as_new: { input: "{% $steps.left %}" } },
  ],
  handlers: { address_changed: [{ id: "set", assign: { address: "{% $signal %}" } }] },
};

function problems(doc: unknown, opts = {}): Problem[] {
  const r = validateWorkflow(doc, opts);
  assert.equal(r.ok, false, "expected the document to be refused");
  return r.ok ? [] : r.problems;
}

const doc2 = (steps: unknown[], extra: Record<string, unknown> = {}) => ({
  ir: "orbit-ir/2",
  name: "W",
  version: "1.0.0",
  steps,
  ...extra,
});

Deno.test("validateWorkflow() accepts the SPEC orbit-ir/2 example", () => {
  const r = validateWorkflow(SPEC_EXAMPLE, { httpAllow: ["hooks.example"] });
  assert.deepEqual(r, { ok: true, doc: SPEC_EXAMPLE });
});

Deno.test("validateWorkflow() finds duplicate ids across nested lists and handlers", () => {
  const found = problems(doc2([
    t("a"),
    { id: "p", parallel: [[t("b")], [t("a")]] },
    { id: "i", if: true, then: [t("b")] },
  ], { signals: { s: {} }, handlers: { s: [{ id: "i", assign: { x: 1 } }] } }));
  assert.deepEqual(found, [
    { path: "$.steps[1].parallel[1][0].id", message: 'duplicate step id "a" (also $.steps[0])' },
    {
      path: "$.steps[2].then[0].id",
      message: 'duplicate step id "b" (also $.steps[1].parallel[0][0])',
    },
    { path: "$.handlers.s[0].id", message: 'duplicate step id "i" (also $.steps[2])' },
  ]);
});

Deno.test("validateWorkflow() checks every ir/2 kind's fields with JSON paths", () => {
  const found = problems(doc2([
    { id: "w", wait_signal: "", timeout_s: 0 },
    { id: "s", sleep_s: -1 },
    { id: "s2", sleep_s: "soon" },
    { id: "h", http: { method: "FETCH", url: "", extra: 1 } },
    { id: "c", child: { workflow: "9x", version: "one" } },
    { id: "p", parallel: [] },
    { id: "i", if: 3, then: [{ id: "x" }] },
    { id: "v", assign: {} },
    { id: "v2", assign: { "bad-name": 1 } },
    { id: "n", continue_as_new: { input: 1, more: 2 } },
  ]));
  assert.deepEqual(
    found.map((p) => p.path).sort(),
    [
      "$.steps[0].timeout_s",
      "$.steps[0].wait_signal",
      "$.steps[1].sleep_s",
      "$.steps[2].sleep_s",
      "$.steps[3].http.extra",
      "$.steps[3].http.method",
      "$.steps[3].http.url",
      "$.steps[4].child.version",
      "$.steps[4].child.workflow",
      "$.steps[5].parallel",
      "$.steps[6].if",
      "$.steps[6].then[0]",
      "$.steps[7].assign",
      "$.steps[8].assign.bad-name",
      "$.steps[9].continue_as_new.more",
    ].sort(),
  );
});

Deno.test("validateWorkflow() requires declared signals for waits and handlers", () => {
  const found = problems(doc2([{ id: "w", wait_signal: "approved" }], {
    signals: { other: {} },
    handlers: { ghost: [{ id: "g", assign: { x: 1 } }] },
  }));
  assert.deepEqual(found, [
    {
      path: "$.steps[0].wait_signal",
      message: 'unknown signal "approved"; declare it under $.signals',
    },
    {
      path: "$.handlers.ghost",
      message: 'handler for undeclared signal "ghost"; declare it under $.signals',
    },
  ]);
});

Deno.test("validateWorkflow() lets handlers hold any step but return and continue_as_new", () => {
  assert.equal(
    validateWorkflow(doc2([t("a")], {
      signals: { s: {} },
      handlers: {
        s: [
          t("b", { input: "{% $steps.a %}" }),
          {
            id: "i",
            if: true,
            then: [{ id: "z", sleep_s: 1 }, t("y", { input: "{% $steps.b %}" })],
          },
        ],
      },
    })).ok,
    true,
  );
  const found = problems(doc2([t("a")], {
    signals: { s: {} },
    handlers: {
      s: [{ id: "i", if: true, then: [{ id: "r", return: 1 }] }, { id: "n", continue_as_new: {} }],
    },
  }));
  assert.deepEqual(found.map((p) => p.path), ["$.handlers.s[0].then[0]", "$.handlers.s[1]"]);
  assert.match(found[0]!.message, /a handler cannot end the run: `return` is not allowed/);
});

Deno.test("validateWorkflow() $steps visibility follows branches", () => {
  const ok = validateWorkflow(doc2([
    t("a"),
    {
      id: "p",
      parallel: [
        [t("b", { input: "{% $steps.a %}" }), t("c", { input: "{% $steps.b %}" })],
        [t("d", { input: "{% $steps.a %}" })],
      ],
    },
    { id: "i", if: "{% $steps.p[0] %}", then: [t("e", { input: "{% $steps.c %}" })] },
    t("f", { input: ["{% $steps.e %}", "{% $steps.d %}", "{% $steps.i %}"] }),
  ], {
    signals: { s: {} },
    queries: { q: "{% $steps.f %}", r: "{% $steps.e %}" },
    handlers: { s: [{ id: "h", assign: { x: "{% $steps.f %}" } }] },
  }));
  assert.equal(ok.ok, true, JSON.stringify(ok));

  const found = problems(doc2([
    {
      id: "p",
      parallel: [[t("b", { input: "{% $steps.d %}" })], [t("d")]],
    },
    { id: "i", if: "{% $steps.e %}", then: [t("e", { input: "{% $steps.i %}" })] },
    t("g", { input: "{% $steps.h %}" }),
  ], {
    signals: { s: {} },
    queries: { q: "{% $steps.nope %}" },
    handlers: { s: [{ id: "h", assign: { x: 1 } }] },
  }));
  assert.deepEqual(found, [
    {
      path: "$.steps[0].parallel[0][0].input",
      message:
        'step "d" runs in another branch of parallel step "p"; branches cannot read each other\'s steps',
    },
    {
      path: "$.steps[1].if",
      message: 'step "e" runs later; an expression can only read steps that ran before it',
    },
    {
      path: "$.steps[1].then[0].input",
      message: 'step "i" runs later; an expression can only read steps that ran before it',
    },
    {
      path: "$.steps[2].input",
      message:
        'step "h" belongs to the handler of signal "s": only the later steps of that handler can read it',
    },
    { path: "$.queries.q", message: 'unknown step "nope" in $steps.nope' },
  ]);
});

Deno.test("validateWorkflow() requires return and continue_as_new last in their list", () => {
  const found = problems(doc2([
    { id: "i", if: true, then: [{ id: "r", return: 1 }, t("x")] },
    { id: "n", continue_as_new: {} },
    t("y"),
  ]));
  assert.deepEqual(found, [
    { path: "$.steps[0].then[0]", message: "a return step must be the last step" },
    { path: "$.steps[1]", message: "a continue_as_new step must be the last step of its list" },
  ]);
});

Deno.test("validateWorkflow() refuses a literal http URL outside --http-allow, naming the flag", () => {
  const doc = doc2([
    { id: "h", http: { url: "https://evil.example/x" } },
    { id: "dyn", http: { url: "{% $input.url %}" } },
  ]);
  const [p, ...rest] = problems(doc, { httpAllow: [] });
  assert.deepEqual(rest, [], "an expression URL is checked at run time only");
  assert.equal(p!.path, "$.steps[0].http.url");
  assert.match(p!.message, /^HTTP_NOT_ALLOWED: host evil\.example:443 is not in --http-allow/);
  assert.match(p!.message, /--http-allow evil\.example$/);
  assert.equal(validateWorkflow(doc, { httpAllow: ["*.example"] }).ok, true);
  assert.equal(validateWorkflow(doc).ok, true, "no allow list given: not checked");
  assert.deepEqual(
    problems(doc2([{ id: "h", http: { url: "ftp://x" } }]), { httpAllow: ["*"] }).map((x) =>
      x.path
    ),
    ["$.steps[0].http.url"],
  );
});

Deno.test("validateWorkflow() refuses ir/2 top-level keys in an orbit-ir/1 document", () => {
  const found = problems({
    ir: "orbit-ir/1",
    name: "W",
    version: "1.0.0",
    timeout_s: 5,
    signals: {},
    steps: [t("a")],
  });
  assert.deepEqual(found, [
    { path: "$.timeout_s", message: "`timeout_s` needs orbit-ir/2" },
    { path: "$.signals", message: "`signals` needs orbit-ir/2" },
  ]);
});

Deno.test("validateWorkflow() checks signal schemas and query expressions", () => {
  const found = problems(doc2([t("a")], {
    signals: { s: { schema: { type: "nope" } } },
    queries: { q: "{% ( %}" },
  }));
  assert.deepEqual(found.map((p) => p.path), ["$.signals.s.schema", "$.queries.q"]);
});

Deno.test("httpAllowed() matches hosts, subdomains, ports and nothing by default", () => {
  const cases: Array<[string, string[], boolean]> = [
    ["https://example.com/a", ["example.com"], true],
    ["http://EXAMPLE.com:8080/a", ["example.com"], true],
    ["https://a.example.com", ["example.com"], false],
    ["https://a.example.com", ["*.example.com"], true],
    ["https://a.b.example.com", ["*.example.com"], true],
    ["https://example.com", ["*.example.com"], false],
    ["http://127.0.0.1:8080/x", ["127.0.0.1:8080"], true],
    ["http://127.0.0.1:8081/x", ["127.0.0.1:8080"], false],
    ["https://example.com", ["example.com:443"], true],
    ["http://[::1]:9000/", ["[::1]:9000"], true],
    ["https://example.com", [], false],
    ["https://anything.test", ["*"], true],
    ["file:///etc/passwd", ["*"], false],
    ["not a url", ["*"], false],
  ];
  for (const [url, allow, ok] of cases) {
    assert.equal(httpAllowed(url, allow).ok, ok, `${url} under ${allow.join(",")}`);
  }
});
