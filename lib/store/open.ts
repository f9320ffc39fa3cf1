/** Opens the store a `--db` value names: `postgres://…` is PostgreSQL, anything else a SQLite file. */
import type { Store } from "./store.ts";
import { openSqliteStore } from "./sqlite.ts";
import { openPostgresStore } from "./postgres.ts";

export async function openStore(db: string): Promise<Store> {
  const store = /^postgres(ql)?:\/\//.test(db)
    ? await openPostgresStore(db)
    : await openSqliteStore(db);
  await store.migrate();
  return store;
}
