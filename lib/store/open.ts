/** Opens the store a `--db` value names: `postgres://…` is PostgreSQL, anything else a SQLite file. */
import type { Store } from "./store.ts";
import { openSqliteStore } from "./sqlite.ts";
import { openPostgresStore } from "./postgres.ts";

/** With `fence` (standby mode, PostgreSQL only), every append checks the cluster term. */
export async function openStore(
  db: string,
  opts: {
    fence?: () => number | null;
    max?: number;
    applicationName?: string;
    settings?: Record<string, string>;
    afterCommit?: (info: { queued: number; closed: string[] }) => void;
  } = {},
): Promise<Store> {
  const store = /^postgres(ql)?:\/\//.test(db)
    ? await openPostgresStore(db, opts)
    : await openSqliteStore(db);
  await store.migrate();
  return store;
}
