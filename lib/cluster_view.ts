/**
 * What the runtime, the routes' gate and health read of the cluster a server belongs to. The
 * cluster modes (cluster/standby_node.ts, cluster/shared/) implement it; lib/ knows only this.
 */

/** The leader as the election table names it (standby mode). */
export interface LeaderInfo {
  node_id: string;
  addr: string | null;
}

/** What the runtime, the gate and health read of the cluster. */
export interface ClusterView {
  role(): "leader" | "standby" | "shared";
  nodeId: string;
  /** Shared mode: this process (its ownership rows and schedule claims name it). */
  readonly instance?: string;
  term(): number | null;
  leader(): LeaderInfo | null;
  serving(): boolean;
  /** Shared mode: the fields health and ready add (owned executions, nodes, …). */
  details?(): Promise<Record<string, unknown>>;
}
