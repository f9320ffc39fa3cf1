/** Version order of deployed definitions: semver precedence, not text order. */
import assert from "node:assert/strict";
import { compareSemver, Definitions } from "./definitions.ts";
import { openSqliteStore } from "./store/sqlite.ts";

Deno.test("compareSemver() orders numeric pre-release parts as numbers and ignores +build", () => {
  const sorted = [
    "1.0.0",
    "1.0.0-alpha.10",
    "1.0.0-beta",
    "1.0.0-alpha.2",
    "1.0.0-alpha",
    "0.9.12",
    "0.9.2",
    "1.0.0-rc.1",
    "10.0.0",
    "2.0.0",
  ].sort(compareSemver);
  assert.deepEqual(sorted, [
    "0.9.2",
    "0.9.12",
    "1.0.0-alpha",
    "1.0.0-alpha.2",
    "1.0.0-alpha.10",
    "1.0.0-beta",
    "1.0.0-rc.1",
    "1.0.0",
    "2.0.0",
    "10.0.0",
  ]);
  // Build metadata is not a pre-release: 1.0.0+build is a release, above every 1.0.0-x.
  assert.ok(compareSemver("1.0.0+build.5", "1.0.0-rc.9") > 0);
  assert.ok(compareSemver("1.0.0+build.5", "1.0.1-alpha") < 0);
  // Equal precedence, different text: still a total order.
  assert.ok(compareSemver("1.0.0+a", "1.0.0+b") < 0);
  assert.equal(compareSemver("1.0.0", "1.0.0"), 0);
});

Deno.test("a start without a version runs the highest deployed version by semver", async () => {
  const dir = await Deno.makeTempDir();
  const store = await openSqliteStore(`${dir}/orbit.db`);
  try {
    await store.migrate();
    const defs = new Definitions(store, Date.now);
    const doc = (version: string) => ({
      ir: "orbit-ir/1",
      name: "Versions",
      version,
      steps: [{ id: "done", return: version }],
    });
    for (const v of ["1.0.0-alpha.2", "1.0.0-alpha.10", "1.0.0-alpha.9"]) await defs.deploy(doc(v));
    assert.equal(
      (await new Definitions(store, Date.now).resolve("Versions")).version,
      "1.0.0-alpha.10",
    );
    await defs.deploy(doc("1.0.0+build.1"));
    assert.equal((await defs.resolve("Versions")).version, "1.0.0+build.1");
    await defs.deploy(doc("1.0.1-rc.1"));
    assert.equal((await defs.resolve("Versions")).version, "1.0.1-rc.1");
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("deploy refuses a version npm semver cannot read: numbers past 15 digits, leading zeros, empty parts", async () => {
  const dir = await Deno.makeTempDir();
  const store = await openSqliteStore(`${dir}/orbit.db`);
  try {
    await store.migrate();
    const defs = new Definitions(store, Date.now);
    const doc = (version: string) => ({
      ir: "orbit-ir/1",
      name: "Huge",
      version,
      steps: [{ id: "done", return: version }],
    });
    for (
      const v of [
        "9007199254740993.0.0",
        "1.9999999999999999.0",
        "1.0.0-01",
        "1.0.0-a..b",
        "1.0.0+x..y",
        `1.0.0-${"a".repeat(130)}`,
      ]
    ) {
      await assert.rejects(() => defs.deploy(doc(v)), (e: Error & { code?: string }) => {
        assert.equal(e.code, "INVALID_WORKFLOW", v);
        return true;
      });
    }
    await defs.deploy(doc("999999999999999.0.0"));
    assert.equal((await defs.resolve("Huge")).version, "999999999999999.0.0");
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a version semver cannot read, already in the database, sorts lowest and poisons nothing", () => {
  const sorted = ["2.0.0", "9007199254740993.0.0", "1.0.0", "1.0.0-01"].sort(compareSemver);
  assert.deepEqual(sorted, ["1.0.0-01", "9007199254740993.0.0", "1.0.0", "2.0.0"]);
});
