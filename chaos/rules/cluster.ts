/**
 * The cluster modes' rules: 10, `leader-term` (standby: no two servers lead one term), and 11,
 * `append-epoch` (shared: one writer per execution and epoch, epochs never back along a run).
 */
import type { Snapshot } from "../history_db.ts";
import type { AppendRecord, CheckInput } from "../check_input.ts";
import type { Add } from "./common.ts";

export function checkLeaders(input: CheckInput, add: Add): void {
  const { snapshot } = input;
  // 10. Standby: one leader per term.
  if (input.mode === "standby") {
    const leaders = new Map<number, Set<string>>();
    for (const { node, line } of input.serverLogs) {
      const m = line.match(/leader is serving node_id=(\S+) term=(\d+)/);
      if (!m) continue;
      const term = Number(m[2]);
      let set = leaders.get(term);
      if (!set) leaders.set(term, set = new Set());
      set.add(`${m[1]} (process of ${node})`);
      if (m[1] !== node) {
        add("leader-term", null, `${node} logged leadership as ${m[1]} in term ${term}`);
      }
    }
    for (const [term, set] of leaders) {
      const ids = new Set([...set].map((s) => s.split(" ")[0]));
      if (ids.size > 1) {
        add("leader-term", null, `term ${term} had ${ids.size} leaders: ${[...set].join(", ")}`);
      }
    }
    const c = snapshot.cluster;
    if (c && c.term > 0 && !leaders.has(c.term)) {
      add(
        "leader-term",
        null,
        `orbit_cluster is at term ${c.term} (leader ${c.leader_node}) but no server logged serving in it`,
      );
    }
  }
}

export function checkAppends(
  appends: AppendRecord[],
  snapshot: Snapshot,
  eventCount: number,
  add: Add,
): void {
  if (appends.length === 0 && eventCount > 0) {
    add("append-epoch", null, `${eventCount} events in the history but no server logged an append`);
    return;
  }
  const what = (a: AppendRecord) =>
    `${a.node_id} (process of ${a.node}) at epoch ${a.epoch}, seqs ${a.from_seq}..${a.to_seq}`;
  const runLength = new Map<string, number>();
  for (const events of snapshot.events.values()) {
    for (const e of events) runLength.set(e.run_id, Math.max(runLength.get(e.run_id) ?? 0, e.seq));
  }
  const ours = new Set(snapshot.executions.map((e) => e.execution_id));
  const writers = new Map<string, AppendRecord>();
  const runs = new Map<string, AppendRecord[]>();
  for (const a of appends) {
    // An execution outside this run (another tag) is not ours to judge.
    if (!ours.has(a.execution_id)) continue;
    if (a.node_id !== a.node) {
      add("append-epoch", a.execution_id, `${a.node} logged an append as ${what(a)}`, a.at_ms);
    }
    const key = `${a.execution_id} ${a.epoch}`;
    const first = writers.get(key);
    if (!first) writers.set(key, a);
    else if (first.node_id !== a.node_id) {
      add(
        "append-epoch",
        a.execution_id,
        `two nodes appended at epoch ${a.epoch}: ${what(first)} and ${what(a)}`,
        a.at_ms,
      );
    }
    let l = runs.get(a.run_id);
    if (!l) runs.set(a.run_id, l = []);
    l.push(a);
  }
  for (const [runId, list] of runs) {
    list.sort((a, b) => a.from_seq - b.from_seq);
    const id = list[0]!.execution_id;
    for (let i = 1; i < list.length; i++) {
      const a = list[i - 1]!;
      const b = list[i]!;
      if (b.from_seq <= a.to_seq) {
        add(
          "append-epoch",
          id,
          `run ${runId}: seqs appended twice: ${what(a)} and ${what(b)}`,
          b.at_ms,
        );
      }
      if (b.epoch < a.epoch) {
        add(
          "append-epoch",
          id,
          `run ${runId}: a lower epoch after a higher one: ${what(a)}, then ${what(b)}`,
          b.at_ms,
        );
      }
    }
    const last = list.reduce((m, a) => a.to_seq > m.to_seq ? a : m);
    const have = runLength.get(runId) ?? 0;
    if (last.to_seq > have) {
      add(
        "append-epoch",
        id,
        `run ${runId}: ${what(last)} was logged as appended, the history has ${have} events`,
        last.at_ms,
      );
    }
  }
}
