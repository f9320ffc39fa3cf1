/**
 * SQLite schema, as an ordered list of versioned migrations. They are TypeScript strings so
 * that they are embedded in the bundle and the compiled binary (no file reads at run time).
 * Never edit a released migration: add the next version. `lib/store/sqlite.ts` applies the
 * missing ones in one `BEGIN IMMEDIATE` transaction and records them in `orbit_migrations`.
 *
 * Conventions: times are integer milliseconds since the epoch (`*_ms`), JSON is TEXT, ids are
 * TEXT. Tables named `orbit_*` after `orbit_cluster` serve the cluster modes and schedules;
 * a single server creates them and leaves them empty.
 */

export interface Migration {
  /** 1, 2, 3…: strictly increasing, never reused. */
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

/** Created before any migration runs, outside the numbered list. */
export const CREATE_MIGRATIONS_TABLE = `
CREATE TABLE IF NOT EXISTS orbit_migrations (
  version    INTEGER PRIMARY KEY,
  applied_ms INTEGER NOT NULL
)`;

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "initial schema",
    sql: `
-- The append-only history; data is the whole event object (seq, type and time_ms included).
CREATE TABLE execution_events (
  run_id       TEXT    NOT NULL,
  seq          INTEGER NOT NULL,
  execution_id TEXT    NOT NULL,
  type         TEXT    NOT NULL,
  time_ms      INTEGER NOT NULL,
  data         TEXT    NOT NULL,
  PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE INDEX execution_events_execution_idx ON execution_events (execution_id);

-- One row per execution: its current run and the state the API shows.
CREATE TABLE workflow_executions (
  execution_id TEXT    NOT NULL PRIMARY KEY,
  run_id       TEXT    NOT NULL,
  root_id      TEXT    NOT NULL,
  parent_id    TEXT,
  workflow     TEXT    NOT NULL,
  version      TEXT    NOT NULL,
  status       TEXT    NOT NULL,
  input        TEXT,
  output       TEXT,
  error        TEXT,
  created_ms   INTEGER NOT NULL,
  closed_ms    INTEGER,
  updated_ms   INTEGER NOT NULL,
  last_seq     INTEGER NOT NULL
);
CREATE INDEX workflow_executions_created_idx
  ON workflow_executions (created_ms DESC, execution_id DESC);
CREATE INDEX workflow_executions_workflow_idx
  ON workflow_executions (workflow, created_ms DESC, execution_id DESC);
CREATE INDEX workflow_executions_status_idx
  ON workflow_executions (status, created_ms DESC, execution_id DESC);
CREATE INDEX workflow_executions_root_idx ON workflow_executions (root_id);

CREATE TABLE workflow_definitions (
  name       TEXT    NOT NULL,
  version    TEXT    NOT NULL,
  ir         TEXT    NOT NULL,
  document   TEXT    NOT NULL,
  hash       TEXT    NOT NULL,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (name, version)
);

CREATE TABLE orbit_schedules (
  schedule_id      TEXT    NOT NULL PRIMARY KEY,
  spec             TEXT    NOT NULL,
  workflow         TEXT    NOT NULL,
  next_fire_ms     INTEGER,
  paused           INTEGER NOT NULL DEFAULT 0,
  fired            INTEGER NOT NULL DEFAULT 0,
  skipped          INTEGER NOT NULL DEFAULT 0,
  claimed_by       TEXT,
  claimed_until_ms INTEGER,
  created_ms       INTEGER NOT NULL,
  updated_ms       INTEGER NOT NULL
);
CREATE INDEX orbit_schedules_next_fire_idx ON orbit_schedules (next_fire_ms);

-- One row (id = 1): the leadership term that fences writers.
CREATE TABLE orbit_cluster (
  id          INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
  term        INTEGER NOT NULL,
  leader_node TEXT,
  leader_addr TEXT,
  since_ms    INTEGER
);
INSERT INTO orbit_cluster (id, term) VALUES (1, 0);

CREATE TABLE orbit_nodes (
  node_id      TEXT    NOT NULL PRIMARY KEY,
  addr         TEXT,
  heartbeat_ms INTEGER NOT NULL,
  started_ms   INTEGER NOT NULL
);

CREATE TABLE orbit_owners (
  execution_id TEXT    NOT NULL PRIMARY KEY,
  root_id      TEXT    NOT NULL,
  node_id      TEXT    NOT NULL,
  epoch        INTEGER NOT NULL,
  since_ms     INTEGER NOT NULL
);
CREATE INDEX orbit_owners_node_idx ON orbit_owners (node_id);
CREATE INDEX orbit_owners_root_idx ON orbit_owners (root_id);

CREATE TABLE orbit_tasks (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  execution_id     TEXT    NOT NULL,
  token            TEXT,
  task_name        TEXT    NOT NULL,
  contract_version TEXT    NOT NULL,
  language         TEXT,
  state            TEXT    NOT NULL,
  enqueued_ms      INTEGER NOT NULL,
  claimed_by       TEXT,
  payload          TEXT
);
CREATE INDEX orbit_tasks_claim_idx ON orbit_tasks (state, task_name, enqueued_ms);
CREATE INDEX orbit_tasks_execution_idx ON orbit_tasks (execution_id);

CREATE TABLE orbit_inbox (
  seq          INTEGER PRIMARY KEY AUTOINCREMENT,
  node_id      TEXT    NOT NULL,
  execution_id TEXT,
  kind         TEXT    NOT NULL,
  payload      TEXT,
  created_ms   INTEGER NOT NULL
);
CREATE INDEX orbit_inbox_node_idx ON orbit_inbox (node_id, seq);

CREATE TABLE orbit_sessions (
  session_id      TEXT    NOT NULL PRIMARY KEY,
  worker_id       TEXT    NOT NULL,
  runtime         TEXT    NOT NULL,
  tasks           TEXT    NOT NULL,
  concurrency     INTEGER NOT NULL,
  last_contact_ms INTEGER NOT NULL,
  created_ms      INTEGER NOT NULL
);
`,
  },
  {
    version: 2,
    name: "schedule occurrences",
    sql: `
-- buffered_ms: the occurrence an overlap policy of buffer_one holds until the running one ends.
-- last_fired_ms: the occurrence of the schedule's latest start (trigger included).
ALTER TABLE orbit_schedules ADD COLUMN buffered_ms INTEGER;
ALTER TABLE orbit_schedules ADD COLUMN last_fired_ms INTEGER;
`,
  },
  {
    version: 3,
    name: "no index on execution_events.execution_id",
    sql: `
-- No query reads events by execution_id (histories are read by run_id, the primary key's
-- first column); the index cost one more B-tree insert, and more WAL pages, per event.
DROP INDEX IF EXISTS execution_events_execution_idx;
`,
  },
  {
    version: 4,
    name: "execution wake-ups",
    sql: `
-- wake_at_ms: when the engine must hold the execution in memory again (lib/executions.ts):
-- 0 while it has work in flight, the time of its next timer, NULL when only an outside event
-- (a signal, a cancel) moves it, or it is closed. Start-up loads the running rows due soon;
-- a poll loads those whose timer comes due. Rows written before this version load at start.
ALTER TABLE workflow_executions ADD COLUMN wake_at_ms INTEGER DEFAULT 0;
UPDATE workflow_executions SET wake_at_ms = NULL WHERE status NOT IN ('running', 'continued');
CREATE INDEX workflow_executions_wake_idx ON workflow_executions (wake_at_ms)
  WHERE wake_at_ms IS NOT NULL;
`,
  },
  {
    version: 5,
    name: "history rows appended in commit order",
    sql: `
-- Keyed by (run_id, seq) WITHOUT ROWID, every event landed inside its run's stretch of the
-- table: a commit touching six executions dirtied ~15 leaf pages (with the splits of full
-- pages in the middle of the tree), half of the WAL frames a commit writes. Rows now go to
-- the end of a rowid table (one or two pages per commit) and a narrow unique index keeps
-- (run_id, seq) in order for the history reads and refuses a second event with the same seq.
CREATE TABLE execution_events_v5 (
  id           INTEGER PRIMARY KEY,
  run_id       TEXT    NOT NULL,
  seq          INTEGER NOT NULL,
  execution_id TEXT    NOT NULL,
  type         TEXT    NOT NULL,
  time_ms      INTEGER NOT NULL,
  data         TEXT    NOT NULL
);
INSERT INTO execution_events_v5 (run_id, seq, execution_id, type, time_ms, data)
  SELECT run_id, seq, execution_id, type, time_ms, data FROM execution_events
  ORDER BY run_id, seq;
DROP TABLE execution_events;
ALTER TABLE execution_events_v5 RENAME TO execution_events;
CREATE UNIQUE INDEX execution_events_run_seq_idx ON execution_events (run_id, seq);
`,
  },
  {
    version: 6,
    name: "no index on workflow_executions.root_id",
    sql: `
-- No SQLite query reads executions by root_id (trees matter to shared mode's takeover, which
-- runs on PostgreSQL); the index cost a B-tree write per start and per row update.
DROP INDEX IF EXISTS workflow_executions_root_idx;
`,
  },
];
