import { openSqliteStore } from "./sqlite.ts";
import type { Store } from "./store.ts";
import { runStoreConformance } from "./store_conformance.ts";

const dir = Deno.makeTempDirSync({ prefix: "orbit-sqlite-test-" });
globalThis.addEventListener("unload", () => Deno.removeSync(dir, { recursive: true }));
const paths = new WeakMap<Store, string>();
let n = 0;

async function open(path = `${dir}/${++n}.db`): Promise<Store> {
  const store = await openSqliteStore(path);
  paths.set(store, path);
  return store;
}

runStoreConformance("sqlite", () => open(), { reopen: (store) => open(paths.get(store)) });
