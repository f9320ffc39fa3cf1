/**
 * What the runtime, the routes' gate and health read of the cluster a server belongs to. The
 * cluster modes (cluster/standby_node.ts, cluster/shared/) implement it; lib/ knows only this.
 */

/** The leader as the election table names it (standby mode). */
export interface LeaderInfo {
  node_id: string;
  /** Its advertised HTTP address (`--advertise-addr`). */
  addr: string | null;
  /**
   * Its advertised gRPC address (`--grpc-advertise-addr`, `host:port`), present only when the
   * leader recorded one for its term: a leader without gRPC, or one of a version before the
   * record had it, has none.
   */
  grpc_addr?: string;
}

/** A server's advertised addresses: HTTP (a URL) and gRPC (`host:port`); null: none. */
export interface AdvertisedAddrs {
  http: string | null;
  grpc: string | null;
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
