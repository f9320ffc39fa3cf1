/**
 * The architecture's import rules (STYLE.md, "What that means here"), checked on the sources:
 * the engine core imports nothing with I/O and touches no clock, randomness or runtime API;
 * routes reach storage only through the store interface; only main.ts reads the environment.
 */
import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url).pathname;

async function sources(dir: string): Promise<Array<{ path: string; text: string }>> {
  const out = [];
  for await (const e of Deno.readDir(`${ROOT}${dir}`)) {
    const path = `${dir}/${e.name}`;
    if (e.isDirectory) out.push(...await sources(path));
    else if (e.name.endsWith(".ts") && !e.name.endsWith("_test.ts")) {
      out.push({ path, text: await Deno.readTextFile(`${ROOT}${path}`) });
    }
  }
  return out;
}

function imports(text: string): string[] {
  return [...text.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s+"([^"]+)"/gms)].map((m) => m[1]!);
}

Deno.test("the engine core (lib/engine) imports no I/O and reads no clock, randomness or runtime API", async () => {
  const allowed = /^(\.\/[a-z_0-9]+\.ts|\.\.\/jsonschema\.ts|jsonata|re2js|zod)$/;
  let seen = 0;
  for (const { path, text } of await sources("lib/engine")) {
    if (path.endsWith("/testing.ts")) continue; // the tests' driver, not the core
    for (const spec of imports(text)) {
      seen++;
      assert.match(spec, allowed, `${path} imports ${spec}`);
    }
    const code = text.replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "");
    for (
      const banned of [
        "Deno.",
        "Date.now",
        "new Date(",
        "Math.random",
        "randomUUID",
        "performance.now",
        "setTimeout",
        "fetch(",
      ]
    ) {
      assert.ok(!code.includes(banned), `${path} uses ${banned}`);
    }
  }
  assert.ok(seen > 20, `only ${seen} imports found: the scan is broken`);
});

Deno.test("routes reach storage only through the store interface, never a driver or SQL", async () => {
  for (const { path, text } of await sources("routes")) {
    for (const spec of imports(text)) {
      assert.ok(
        !/store\/(sqlite|postgres|open)\.ts$|\/sql\//.test(spec),
        `${path} imports ${spec}`,
      );
    }
  }
});

Deno.test("only main.ts reads the environment (lib, routes, cluster, cli)", async () => {
  for (const dir of ["lib", "routes", "cluster", "cli"]) {
    for (const { path, text } of await sources(dir)) {
      assert.ok(!text.includes("Deno.env"), `${path} reads Deno.env`);
    }
  }
});

Deno.test("lib imports nothing from cluster/ or routes/: the cluster modes are strategies over lib", async () => {
  let seen = 0;
  for (const { path, text } of await sources("lib")) {
    for (const spec of imports(text)) {
      seen++;
      if (!spec.startsWith(".")) continue;
      const target = new URL(spec, `file:///${path}`).pathname.slice(1);
      assert.ok(
        !target.startsWith("cluster/") && !target.startsWith("routes/") && target !== "main.ts",
        `${path} imports ${spec}`,
      );
    }
  }
  assert.ok(seen > 100, `only ${seen} imports found: the scan is broken`);
});

Deno.test("no import circles among the sources (type imports included)", async () => {
  const graph = new Map<string, string[]>();
  for (const dir of ["lib", "cluster", "routes", "cli", "chaos", "sdk/typescript", "ui", "bench"]) {
    for (const { path, text } of await sources(dir)) {
      graph.set(
        path,
        imports(text).filter((s) => s.startsWith("."))
          .map((s) => new URL(s, `file:///${path}`).pathname.slice(1)),
      );
    }
  }
  assert.ok(graph.size > 100, `only ${graph.size} files: the scan is broken`);
  // Depth-first search; a grey node met again closes a circle.
  const state = new Map<string, "grey" | "black">();
  const circles: string[] = [];
  const visit = (node: string, stack: string[]) => {
    state.set(node, "grey");
    for (const next of graph.get(node) ?? []) {
      if (!graph.has(next)) continue;
      if (state.get(next) === "grey") {
        circles.push([...stack.slice(stack.indexOf(next)), node, next].join(" -> "));
      } else if (!state.has(next)) visit(next, [...stack, node]);
    }
    state.set(node, "black");
  };
  for (const node of [...graph.keys()].sort()) if (!state.has(node)) visit(node, []);
  assert.deepEqual(circles, []);
});
