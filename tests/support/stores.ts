/**
 * The two backends as test targets: every end-to-end test that touches a store runs once on a
 * fresh SQLite file and once on a fresh database of the PostgreSQL the harness started.
 */
import { sharedPostgres, stopSharedPostgres } from "./pg.ts";
import { tempDir } from "./server.ts";

export interface StoreTarget {
  name: "sqlite" | "postgres";
  /** A fresh, empty database: a file path or a postgres:// URL. */
  newDb(): Promise<string>;
}

export const STORES: StoreTarget[] = [
  { name: "sqlite", newDb: async () => `${await tempDir()}/orbit.db` },
  { name: "postgres", newDb: async () => await (await sharedPostgres()).createDatabase() },
];

/** Registers one Deno.test per store; the PostgreSQL server is stopped after the last one. */
export function testEachStore(
  name: string,
  fn: (store: StoreTarget) => Promise<void>,
  opts: { ignore?: boolean } = {},
): void {
  for (const store of STORES) {
    Deno.test({
      name: `${name} [${store.name}]`,
      ignore: opts.ignore ?? false,
      sanitizeOps: false,
      sanitizeResources: false,
      fn: () => fn(store),
    });
  }
}

export { stopSharedPostgres };
