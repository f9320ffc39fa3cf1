/**
 * The cross-language conformance suite (tests/conformance/README.md): every scenario of
 * tests/conformance/scenarios.ts against every SDK of tests/conformance/sdks.ts, each on real
 * server processes. An SDK whose toolchain is missing is skipped, loudly; CI installs them all.
 */
import { runScenario } from "./conformance/driver.ts";
import { SCENARIOS } from "./conformance/scenarios.ts";
import { MissingToolchain, SDKS } from "./conformance/sdks.ts";

const only = Deno.env.get("CONFORMANCE_SDK")?.split(",").filter(Boolean);
const pick = Deno.env.get("CONFORMANCE_SCENARIO")?.split(",").filter(Boolean);

async function hasPostgres(): Promise<boolean> {
  try {
    const r = await new Deno.Command("sh", {
      args: ["-c", "command -v initdb || ls /usr/lib/postgresql/*/bin/initdb"],
      stdout: "null",
      stderr: "null",
    }).output();
    return r.success;
  } catch {
    return false;
  }
}
const postgres = await hasPostgres();

for (const sdk of SDKS) {
  if (only && !only.includes(sdk.name)) continue;
  Deno.test({
    name: `conformance: the ${sdk.name} SDK passes every scenario`,
    sanitizeOps: false,
    sanitizeResources: false,
    fn: async (t) => {
      let command: string[];
      try {
        command = await sdk.prepare();
      } catch (err) {
        if (!(err instanceof MissingToolchain)) throw err;
        const line = "!".repeat(78);
        console.warn(
          `\n${line}\n!!! SKIPPING the ${sdk.name} SDK's conformance scenarios: ${err.message}\n${line}\n`,
        );
        for (const s of SCENARIOS) await t.step({ name: s.id, ignore: true, fn: () => {} });
        return;
      }
      for (const s of SCENARIOS) {
        if (pick && !pick.includes(s.id)) continue;
        if (s.postgres && !postgres) {
          console.warn(
            `!!! SKIPPING ${s.id} for ${sdk.name}: PostgreSQL (initdb) is not installed`,
          );
          await t.step({ name: s.id, ignore: true, fn: () => {} });
          continue;
        }
        await t.step(`${s.id}: ${s.title}`, () => runScenario(sdk, command, s));
      }
    },
  });
}
