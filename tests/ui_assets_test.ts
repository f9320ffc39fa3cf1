/**
 * The console's committed bundle (`lib/ui_assets.ts`) is what `ui/build.ts` makes of `ui/`
 * now: a change to the sources without a rebuild fails here, not in a user's browser.
 */
import assert from "node:assert/strict";
import { buildAssets } from "../ui/build.ts";

const ROOT = new URL("../", import.meta.url).pathname;

Deno.test("lib/ui_assets.ts is up to date with ui/ (run `deno run -A ui/build.ts`)", async () => {
  const committed = await Deno.readTextFile(`${ROOT}lib/ui_assets.ts`);
  const built = await buildAssets();
  assert.ok(committed === built, "lib/ui_assets.ts is out of date: run `deno run -A ui/build.ts`");
});
