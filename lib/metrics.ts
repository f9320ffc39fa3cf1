/**
 * Prometheus text metrics: counters and histograms kept in memory (they start from zero
 * when the server starts, as the reference page says).
 */
type Labels = Record<string, string>;

function labelPair(k: string, v: string): string {
  return `${k}="${v.replace(/["\\\n]/g, (c) => (c === "\n" ? "\\n" : `\\${c}`))}"`;
}

/** Keys of one-label sets (`{code: "2xx"}`, counted per request), by label and value. */
const singleLabelKeys = new Map<string, Map<string, string>>();

function labelKey(labels: Labels): string {
  const keys = Object.keys(labels);
  if (keys.length === 0) return "";
  if (keys.length === 1) {
    const k = keys[0]!;
    const v = labels[k]!;
    let byValue = singleLabelKeys.get(k);
    if (!byValue) singleLabelKeys.set(k, byValue = new Map());
    let key = byValue.get(v);
    if (key === undefined) {
      key = labelPair(k, v);
      if (byValue.size < 1000) byValue.set(v, key);
    }
    return key;
  }
  return keys.sort().map((k) => labelPair(k, labels[k]!)).join(",");
}

class Counter {
  readonly values = new Map<string, number>();
  constructor(readonly name: string, readonly help: string) {}
  inc(labels: Labels = {}, by = 1): void {
    const k = labelKey(labels);
    this.values.set(k, (this.values.get(k) ?? 0) + by);
  }
  get(labels: Labels = {}): number {
    return this.values.get(labelKey(labels)) ?? 0;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    if (this.values.size === 0) lines.push(`${this.name} 0`);
    for (const [k, v] of this.values) lines.push(`${this.name}${k ? `{${k}}` : ""} ${v}`);
    return lines.join("\n");
  }
}

const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

class Histogram {
  readonly counts = new Array<number>(BUCKETS.length).fill(0);
  sum = 0;
  count = 0;
  constructor(readonly name: string, readonly help: string) {}
  observe(seconds: number): void {
    this.sum += seconds;
    this.count++;
    for (let i = 0; i < BUCKETS.length; i++) if (seconds <= BUCKETS[i]!) this.counts[i]!++;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    BUCKETS.forEach((b, i) => lines.push(`${this.name}_bucket{le="${b}"} ${this.counts[i]}`));
    lines.push(`${this.name}_bucket{le="+Inf"} ${this.count}`);
    lines.push(`${this.name}_sum ${this.sum}`, `${this.name}_count ${this.count}`);
    return lines.join("\n");
  }
}

export class Metrics {
  readonly executionsStarted = new Counter("orbit_executions_started_total", "Executions started.");
  readonly executionsClosed = new Counter(
    "orbit_executions_closed_total",
    "Executions that reached a terminal status, by status.",
  );
  readonly eventsAppended = new Counter("orbit_events_appended_total", "History events committed.");
  readonly commits = new Counter("orbit_commits_total", "Store transactions that appended events.");
  readonly tasksDispatched = new Counter(
    "orbit_tasks_dispatched_total",
    "Task attempts handed to workers.",
  );
  readonly tasksSucceeded = new Counter(
    "orbit_tasks_succeeded_total",
    "Task results applied as success.",
  );
  readonly tasksFailed = new Counter(
    "orbit_tasks_failed_total",
    "Task results applied as failure.",
  );
  readonly tasksRedelivered = new Counter(
    "orbit_tasks_redelivered_total",
    "Attempts marked uncertain and queued for redelivery.",
  );
  readonly resultsIgnored = new Counter(
    "orbit_task_results_ignored_total",
    "Results answered accepted=false (late or duplicate).",
  );
  readonly executionsEvicted = new Counter(
    "orbit_executions_evicted_total",
    "Waiting executions that left memory past --cache-executions.",
  );
  readonly executionsLoaded = new Counter(
    "orbit_executions_loaded_total",
    "Running executions rebuilt from history into memory (at start, at a takeover, on demand).",
  );
  readonly memoryBehindHistory = new Counter(
    "orbit_memory_behind_history_total",
    "Executions whose memory missed a landed commit, found by the audit and rebuilt from history.",
  );
  readonly staleClaimsRequeued = new Counter(
    "orbit_stale_claims_requeued_total",
    "Shared mode: claimed tasks whose dispatch the owner never recorded, put back on the queue.",
  );
  readonly commandsForwarded = new Counter(
    "orbit_commands_forwarded_total",
    "Shared mode: commands sent to the inbox of the node that owns the execution, by kind.",
  );
  readonly taskClaims = new Counter(
    "orbit_task_claims_total",
    "Shared mode: claim statements run on the shared queue, by whether they found tasks.",
  );
  readonly takesRefused = new Counter(
    "orbit_task_takes_refused_total",
    "Shared mode: dispatches from this server's queue that their commit refused (the row was " +
      "claimed elsewhere first, or an older row of the task waits); the step stays queued here.",
  );
  readonly notificationsSent = new Counter(
    "orbit_notifications_sent_total",
    "Shared mode: notifications sent (NOTIFY), by channel.",
  );
  readonly notificationsReceived = new Counter(
    "orbit_notifications_received_total",
    "Shared mode: notifications this node's listener received for it, by channel.",
  );
  readonly schedulesFired = new Counter(
    "orbit_schedules_fired_total",
    "Schedule occurrences started.",
  );
  readonly httpRequests = new Counter(
    "orbit_http_requests_total",
    "HTTP requests by status class.",
  );
  readonly pollLatency = new Histogram(
    "orbit_poll_latency_seconds",
    "Time a poll waited for tasks.",
  );
  readonly appendLatency = new Histogram("orbit_append_latency_seconds", "Time a commit took.");
  readonly batchSize = new Histogram(
    "orbit_commit_batch_executions",
    "Executions per commit (as a count).",
  );

  render(gauges: Record<string, number>): string {
    const parts = [
      this.executionsStarted,
      this.executionsClosed,
      this.eventsAppended,
      this.commits,
      this.tasksDispatched,
      this.tasksSucceeded,
      this.tasksFailed,
      this.tasksRedelivered,
      this.resultsIgnored,
      this.executionsEvicted,
      this.executionsLoaded,
      this.memoryBehindHistory,
      this.staleClaimsRequeued,
      this.commandsForwarded,
      this.taskClaims,
      this.takesRefused,
      this.notificationsSent,
      this.notificationsReceived,
      this.schedulesFired,
      this.httpRequests,
      this.pollLatency,
      this.appendLatency,
    ].map((m) => m.render());
    for (const [name, v] of Object.entries(gauges)) {
      parts.push(`# HELP ${name} Current value.\n# TYPE ${name} gauge\n${name} ${v}`);
    }
    return parts.join("\n") + "\n";
  }
}
