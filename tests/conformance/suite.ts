/**
 * The cross-language conformance suite (README.md): every scenario of scenarios.ts against one
 * SDK of sdks.ts, on real server processes; one test file per SDK
 * (tests/conformance_<sdk>_test.ts), so that `deno test --parallel` runs the SDKs side by side.
 * An SDK whose toolchain is missing is skipped, loudly; CI installs them all.
 */
import { runScenario } from "./driver.ts";
import { SCENARIOS } from "./scenarios.ts";
import { MissingToolchain, SDKS } from "./sdks.ts";

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
const postgres = hasPostgres();

/** Registers the conformance test of the SDK `name` (a row of SDKS). */
export function conformanceTest(name: string): void {
  const sdk = SDKS.find((s) => s.name === name);
  if (!sdk) throw new Error(`no SDK ${name} in tests/conformance/sdks.ts`);
  if (only && !only.includes(sdk.name)) return;
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
        if (s.postgres && !(await postgres)) {
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
