/**
 * Shared mode's placement and timing rules: which live node takes a root (rendezvous hashing),
 * and how long a pool's or the heartbeat's statement may go unanswered. Pure: no I/O.
 */

/** Rendezvous hashing: the live node with the highest score for a root takes it. */
function score(node: string, root: string): number {
  let h = 0x811c9dc5;
  const s = `${node}\u0000${root}`;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  // One more round of mixing: FNV's low bits are weak for short keys.
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  return h >>> 0;
}

/**
 * How long a statement of the requests' pool (claims, forwards, sessions: milliseconds each when
 * the database answers) may go without an answer before the pool is replaced: three node
 * timeouts, 10 s at least. With the store's 30 s, one claim sent on a connection PostgreSQL
 * never answered (a drop during the chaos suite's database faults) held its worker's poll, and
 * the statements queued behind it on that connection, for 34 s; at twice the node timeout (6 s)
 * a database link delaying every packet by a quarter of a second (the chaos suite's db-delay)
 * replaced pools whose statements were only slow.
 */
export function requestsStuckMs(nodeTimeoutMs: number): number {
  return Math.max(10_000, 3 * nodeTimeoutMs);
}

/**
 * How long a heartbeat may go unanswered before its connection is replaced: twice the node
 * timeout, 5 s at least (seen wedged after connect timeouts while PostgreSQL restarts under
 * load). Shorter than requestsStuckMs: a node whose heartbeat cannot be written is taken over.
 */
export function heartbeatStuckMs(nodeTimeoutMs: number): number {
  return Math.max(5_000, 2 * nodeTimeoutMs);
}

export function rendezvousOwner(root: string, nodes: readonly string[]): string | null {
  let best: string | null = null;
  let bestScore = -1;
  for (const n of nodes) {
    const sc = score(n, root);
    if (sc > bestScore || (sc === bestScore && best !== null && n < best)) {
      best = n;
      bestScore = sc;
    }
  }
  return best;
}
