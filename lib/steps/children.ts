/**
 * Child workflows of orbit-ir/2 `child` steps: the shell half. The pure core records what to
 * start (StepStarted kind `child`, with the child's deterministic execution id); once that is
 * committed this coordinator starts the child (parent_id = the parent, root_id = the parent's
 * root), reports ChildStarted, and when the child's run ends hands its result to the parent as
 * a `child_result` command. A child step that closes without the child's result (the parent
 * was cancelled, failed elsewhere, timed out, or the step's own timeout fired) cancels the
 * child.
 *
 * Trust and failure handling: starting a child is idempotent (the id is deterministic and a
 * start of an existing id is a no-op), so every step is simply redone after a crash: on
 * recovery each open child step is checked against the child's row — missing: start it;
 * finished: deliver its result; running: its own end will deliver. Children whose parent no
 * longer waits for them are cancelled after recovery. A start refused by the child's
 * definition (unknown workflow, invalid input or id) fails the step with CHILD_START_FAILED;
 * storage errors and 429 (`--max-active-executions`: the child is held, CHILD_HELD in
 * `/pending`) are retried every second.
 *
 * Hostile trees (a workflow that starts itself): the pure core refuses a child past
 * `--max-child-depth` or `--max-children-per-execution`; this coordinator refuses one that
 * would make a root's tree run more than `--max-descendants` executions (CHILD_LIMIT, given to
 * the parent as the child's result, so it is in the parent's history). A child starts only if,
 * in the start's own turn, its parent still waits for it and no ancestor held here ended or is
 * being cancelled: a cancel of the root stops the tree from growing at once, and reaches every
 * child started before it level by level (each child's cancel queues behind its start).
 */
import type { ErrorInfo } from "../engine/events.ts";
import { type ExecutionState, isOpenStatus, openSteps, type StepState } from "../engine/state.ts";
import type { Executions } from "../executions/executions.ts";
import type { ExecutionObserver } from "../executions/types.ts";
import { OrbitError } from "../errors.ts";
import type { ExecutionRow } from "../store/store.ts";
import { log } from "../log.ts";

const RETRY_MS = 1000;

/** The server's limits on child workflows; null: none. */
export interface ChildLimitOptions {
  /** `--max-child-depth`: deepest child (a root execution is depth 0). */
  maxDepth: number | null;
  /** `--max-children-per-execution`: children one run has running at once. */
  maxChildren: number | null;
  /** `--max-descendants`: running children, grandchildren … of one root execution. */
  maxDescendants: number | null;
}

export const DEFAULT_CHILD_LIMITS: ChildLimitOptions = {
  maxDepth: 32,
  maxChildren: 1000,
  maxDescendants: 10_000,
};

/** The start of a child whose parent no longer waits for it: nothing to do. */
class ParentGone extends Error {}

export class Children implements ExecutionObserver {
  #busy = new Set<string>();
  #timers = new Set<ReturnType<typeof setTimeout>>();
  #stopped = false;
  /**
   * Whether the start-up recovery is over (`afterRecovery()`): before, the children of the
   * executions it loads are not looked at, since an ancestor loaded later would read as ended
   * (#admit); afterRecovery looks at every one.
   */
  #recovered = false;
  /**
   * Running children held here, by root: what `--max-descendants` counts (ids memory no
   * longer holds are pruned when a count nears the limit), and starts admitted but not
   * committed yet.
   */
  #trees = new Map<string, Set<string>>();
  #admitted = new Map<string, number>();
  /** When each root's set was last pruned (a prune walks the whole tree: once a second). */
  #pruned = new Map<string, number>();

  /** `maxDescendants`: `--max-descendants`, running descendants of one root (null: none). */
  constructor(readonly executions: Executions, readonly maxDescendants: number | null = null) {}

  stop(): void {
    this.#stopped = true;
    for (const t of this.#timers) clearTimeout(t);
  }

  installed(prev: ExecutionState | null, next: ExecutionState): void {
    if (this.#stopped) return;
    if (next.parent_id !== null) this.#count(next);
    // This run is a child and ended: its parent's step gets the result.
    if (next.phase === "closed" && next.parent_id !== null && next.status !== "continued") {
      this.#deliver(next.parent_id, next.execution_id, {
        run_id: next.run_id,
        status: next.status,
        output: next.output,
        error: next.error,
      });
    }
    if (prev) {
      for (const before of openSteps(prev, "child")) {
        const st = next.steps[before.id];
        const abandoned = !st || st.status === "cancelled" ||
          (st.status === "failed" && st.error?.code === "CHILD_TIMEOUT");
        if (abandoned && before.child) this.#cancel(before.child.execution_id, next.execution_id);
      }
    }
    if (!this.#recovered) return;
    for (const st of openSteps(next, "child")) {
      if (prev === null || st.child_run_id === undefined) this.#ensure(next, st);
    }
  }

  /** Keeps the running children of each root (see #trees). */
  #count(s: ExecutionState): void {
    const root = s.root_id;
    let set = this.#trees.get(root);
    if (s.phase === "closed" && s.status !== "continued") {
      set?.delete(s.execution_id);
      if (set?.size === 0) {
        this.#trees.delete(root);
        this.#pruned.delete(root);
      }
      return;
    }
    if (!set) this.#trees.set(root, set = new Set());
    set.add(s.execution_id);
  }

  /** Running descendants of `root` (held here, or admitted and being committed). */
  #treeSize(root: string): number {
    const set = this.#trees.get(root);
    const admitted = this.#admitted.get(root) ?? 0;
    if (!set) return admitted;
    const now = performance.now();
    if (
      this.maxDescendants !== null && set.size + admitted >= this.maxDescendants &&
      now - (this.#pruned.get(root) ?? -Infinity) >= 1000
    ) {
      // Taken over by another node since (shared mode): not counted any more.
      this.#pruned.set(root, now);
      for (const id of set) if (!this.executions.holds(id)) set.delete(id);
    }
    return set.size + admitted;
  }

  /**
   * In the child's start turn: the parent still waits for the child and no ancestor held here
   * ended or is being cancelled (else ParentGone), and the tree stays within
   * `--max-descendants` (else CHILD_LIMIT). Reserves the child's place in its tree until
   * `release`.
   */
  #admit(parentId: string, step: string, root: string): void {
    // One server holds every running ancestor of a running child (a parent waiting for a
    // child stays in memory): one it does not hold has ended. In shared mode one may be
    // loading, or held by another node: only the ones held here are checked.
    const shared = this.executions.ownership !== null;
    const parent = this.executions.stateOf(parentId);
    if (parent) {
      const st = parent.steps[step];
      if (!st || !isOpenStatus(st.status)) throw new ParentGone();
    } else if (!shared) throw new ParentGone();
    for (let s = parent, hops = 0; s && hops <= 10_000; hops++) {
      if (s.phase !== "running" || s.cancel_reason !== null) throw new ParentGone();
      if (s.parent_id === null) break;
      const up = this.executions.stateOf(s.parent_id);
      if (!up && !shared) throw new ParentGone();
      s = up;
    }
    const max = this.maxDescendants;
    if (max !== null) {
      const size = this.#treeSize(root);
      if (size >= max) {
        throw new OrbitError(
          422,
          "CHILD_LIMIT",
          `the tree of root execution ${root} runs ${size} child executions, the server's ` +
            `limit of ${max} (--max-descendants)`,
          { limit: "max_descendants", max, running: size },
        );
      }
    }
    this.#admitted.set(root, (this.#admitted.get(root) ?? 0) + 1);
  }

  #release(root: string): void {
    const n = (this.#admitted.get(root) ?? 0) - 1;
    if (n > 0) this.#admitted.set(root, n);
    else this.#admitted.delete(root);
  }

  /** Shared mode: an execution another node took over leaves its tree's count here. */
  dropped(last: ExecutionState): void {
    this.#trees.get(last.root_id)?.delete(last.execution_id);
  }

  /**
   * After recovery, or a takeover of `ids` (shared mode): cancel running children whose parent
   * no longer waits for them (the parent ended, and the node that ended it stopped before the
   * child's cancel committed).
   */
  afterRecovery(ids?: Iterable<string>): void {
    if (!ids && !this.#recovered) {
      // Every execution of the start-up recovery is held now: their children are looked at.
      this.#recovered = true;
      for (const s of [...this.executions.heldStates()]) {
        for (const st of openSteps(s, "child")) this.#ensure(s, st);
      }
    }
    const states = ids
      ? [...ids].map((id) => this.executions.stateOf(id)).filter((s) => s !== undefined)
      : [...this.executions.heldStates()];
    for (const s of states) {
      const id = s.execution_id;
      const parentId = s.parent_id;
      if (parentId === null) continue;
      const parent = this.executions.stateOf(parentId);
      const waits = parent &&
        Object.values(parent.steps).some((st) =>
          st.kind === "child" && isOpenStatus(st.status) && st.child?.execution_id === id
        );
      if (waits) continue;
      // Shared mode: a parent memory does not hold may be loading (a takeover loads a tree in
      // parts) or run by another node: only its row tells that it ended.
      if (!parent && this.executions.ownership) this.#cancelIfParentEnded(id, parentId);
      else this.#cancel(id, parentId);
    }
  }

  #cancelIfParentEnded(childId: string, parentId: string): void {
    this.executions.store.getExecution(parentId).then((p) => {
      if (p && (p.status === "running" || p.status === "continued")) return;
      this.#cancel(childId, parentId);
    }, (e) => {
      log.engine.warn("cannot read a child's parent; trying again", {
        execution_id: childId,
        parent_id: parentId,
        error: (e as Error).message,
      });
      this.#later(() => this.#cancelIfParentEnded(childId, parentId));
    });
  }

  #later(fn: () => void): void {
    if (this.#stopped) return;
    const t = setTimeout(() => {
      this.#timers.delete(t);
      fn();
    }, RETRY_MS);
    this.#timers.add(t);
  }

  #cancel(childId: string, parentId: string): void {
    this.executions.cancel(childId, `parent execution ${parentId} no longer waits for it`)
      .catch((e) => {
        // Finished or never started: nothing to cancel. Anything else (the store, an owner
        // that did not answer) is tried again: a child left running would run for ever.
        if (e instanceof OrbitError && e.status < 500) return;
        log.engine.warn("cannot cancel a child its parent no longer waits for; retrying", {
          execution_id: childId,
          parent_id: parentId,
          error: (e as Error).message,
        });
        this.#later(() => this.#cancel(childId, parentId));
      });
  }

  #deliver(
    parentId: string,
    childId: string,
    r: { run_id: string; status: ExecutionRow["status"]; output: unknown; error: unknown },
  ): void {
    const parent = this.executions.stateOf(parentId);
    const st = parent &&
      Object.values(parent.steps).find((x) =>
        x.kind === "child" && isOpenStatus(x.status) && x.child?.execution_id === childId
      );
    if (!st) return;
    this.executions.command(parentId, {
      type: "child_result",
      step: st.id,
      execution_id: childId,
      run_id: r.run_id,
      status: r.status,
      output: r.output,
      error: (r.error as ErrorInfo | null) ?? null,
    }).catch((e) => {
      log.engine.error("cannot deliver a child's result; retrying", {
        execution_id: parentId,
        child: childId,
        error: (e as Error).message,
      });
      this.#later(() => this.#deliver(parentId, childId, r));
    });
  }

  #fail(
    parentId: string,
    st: StepState,
    message: string,
    cause?: string,
    code = "CHILD_START_FAILED",
    details?: unknown,
  ): Promise<unknown> {
    return this.executions.command(parentId, {
      type: "child_result",
      step: st.id,
      execution_id: st.child!.execution_id,
      status: "failed",
      error: {
        code,
        message,
        ...(details !== undefined ? { details } : cause ? { details: { cause } } : {}),
      },
    });
  }

  /** Makes sure the child of an open step exists, and delivers its result if it ended. */
  #ensure(parent: ExecutionState, st: StepState): void {
    const spec = st.child!;
    const parentId = parent.execution_id;
    const key = `${parentId}\u0000${st.id}`;
    if (this.#busy.has(key)) return;
    this.#busy.add(key);
    (async () => {
      let row = await this.executions.store.getExecution(spec.execution_id);
      if (!row) {
        const root = parent.root_id;
        let admitted = false;
        try {
          row = (await this.executions.start(
            {
              workflow: spec.workflow,
              ...(spec.version !== null ? { version: spec.version } : {}),
              input: spec.input,
              execution_id: spec.execution_id,
            },
            { parent_id: parentId, root_id: root, depth: parent.depth + 1 },
            () => {
              this.#admit(parentId, st.id, root);
              admitted = true;
            },
          )).row;
        } catch (e) {
          if (e instanceof ParentGone) return;
          if (e instanceof OrbitError && e.code === "CHILD_LIMIT") {
            await this.#fail(parentId, st, e.message, undefined, e.code, e.fields);
            return;
          }
          if (e instanceof OrbitError && e.status < 500 && e.status !== 429) {
            await this.#fail(
              parentId,
              st,
              `cannot start child ${spec.workflow} as ${spec.execution_id}: ${e.message}`,
              e.code,
            );
            return;
          }
          throw e;
        } finally {
          if (admitted) this.#release(root);
        }
      }
      if (row.parent_id !== parentId) {
        await this.#fail(
          parentId,
          st,
          `execution id ${spec.execution_id} is already used by another execution`,
          "EXECUTION_ID_TAKEN",
        );
        return;
      }
      await this.executions.command(parentId, {
        type: "child_started",
        step: st.id,
        execution_id: row.execution_id,
        run_id: row.run_id,
      });
      if (row.status !== "running" && row.status !== "continued") {
        this.#deliver(parentId, row.execution_id, row);
      }
      // The parent may have stopped waiting while the child started (its cancel of the child
      // then found nothing to cancel). A parent memory no longer holds has ended; in shared
      // mode it may instead have been taken over (this node lost the tree), and then its new
      // owner decides about the child: the parent's row tells which.
      const held = this.executions.stateOf(parentId);
      const step = held?.steps[st.id];
      if (!held && this.executions.ownership) {
        this.#cancelIfParentEnded(row.execution_id, parentId);
      } else if (!step || !isOpenStatus(step.status)) this.#cancel(row.execution_id, parentId);
    })().catch((e) => {
      // Held back by --max-active-executions: expected at the limit, and `/pending` says it.
      const held = e instanceof OrbitError && e.status === 429;
      log.engine[held ? "debug" : "error"]("cannot start a child execution; retrying", {
        execution_id: parentId,
        step: st.id,
        error: (e as Error).message,
      });
      this.#later(() => {
        const p = this.executions.stateOf(parentId);
        const again = p?.steps[st.id];
        if (p && again && isOpenStatus(again.status)) this.#ensure(p, again);
      });
    }).finally(() => this.#busy.delete(key));
  }
}
