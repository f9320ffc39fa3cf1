/**
 * A small in-process fake of the ORBIT runtime for the SDK's tests: the worker protocol (§4)
 * and the client routes (§3) on an in-memory state, with failure injection (5xx answers,
 * 404 UNKNOWN_SESSION, and connections dropped before any answer).
 *
 * Requests reach a TCP front (Deno.listen on port 0) that can drop a connection after reading
 * the request line, and is otherwise piped to a Deno.serve server that answers with
 * `connection: close`, so every request has a connection of its own and faults apply to
 * exactly the request they were meant for.
 *
 * Tests wait for conditions with {@link FakeOrbit.waitFor}, which re-checks on every change of
 * the fake's state.
 *
 * Why one file of this size: it is a test double that SDK tests import whole; its routes share
 * one in-memory state and one fault switchboard.
 */

/** What to do to one request. */
export type Fault =
  | "drop"
  | {
    status: number;
    code?: string;
    message?: string;
    extra?: Record<string, unknown>;
    headers?: Record<string, string>;
  };

export const NOT_LEADER: Fault = {
  status: 503,
  code: "NOT_LEADER",
  message: "this server is a standby; the leader is `a` at http://127.0.0.1:1",
  extra: { leader_node: "a", leader_addr: "http://127.0.0.1:1" },
  headers: { "retry-after": "1", "x-orbit-leader": "http://127.0.0.1:1" },
};

export const UNKNOWN_SESSION: Fault = {
  status: 404,
  code: "UNKNOWN_SESSION",
  message: "unknown or expired session",
};

export interface FakeTask {
  token: string;
  execution_id: string;
  step: string;
  attempt: number;
  task: string;
  contract: string;
  input: unknown;
  idempotency_key: string;
  redelivery: boolean;
  deadline_ms: number;
}

export interface Session {
  session_id: string;
  worker_id: string;
  runtime: string;
  tasks: { name: string; contract: string; language?: string }[];
  concurrency: number;
}

export interface ResultRecord {
  kind: "complete" | "fail";
  token: string;
  output?: unknown;
  error?: { code: string; message: string; retryable: boolean; details: unknown };
  accepted: boolean;
}

interface ExecutionRecord {
  execution: Record<string, unknown> & { execution_id: string; status: string };
  events: Record<string, unknown>[];
  doc: Record<string, unknown> | undefined;
  queryResults: Record<string, unknown>;
}

export interface FakeOptions {
  /** Require `authorization: Bearer <token>`. */
  token?: string;
  /** Longest long poll or wait the fake holds, in seconds (default 60 / 300 as the spec). */
  maxPollS?: number;
  maxWaitS?: number;
  /** History page size (default 2, to exercise paging). */
  historyPageSize?: number;
  /**
   * Answer /v1/health as a server of a shared cluster whose one live node is this fake at its
   * own address: a worker then spreads its slots over it (a slot's `target` is set).
   */
  sharedNode?: boolean;
}

const TERMINAL = new Set(["completed", "failed", "cancelled", "timed_out", "continued"]);

export class FakeOrbit {
  readonly url: string;
  readonly options: FakeOptions;

  // worker protocol state
  readonly sessions = new Map<string, Session>();
  readonly registers: Record<string, unknown>[] = [];
  readonly unregisters: string[] = [];
  readonly polls: { session_id: string; max_tasks: number; wait_s: number }[] = [];
  readonly heartbeats: { session_id: string; tokens: string[] }[] = [];
  readonly results: ResultRecord[] = [];
  readonly requests: { method: string; path: string; headers: Headers; body: unknown }[] = [];
  readonly dropped: { method: string; path: string }[] = [];
  readonly queue: FakeTask[] = [];
  readonly dispatched = new Map<string, { task: FakeTask; session_id: string }>();
  readonly pendingCancel = new Set<string>();
  /** Long polls ended because the worker went away (for example stop()). */
  abortedPolls = 0;
  /** Long polls being held right now. */
  activePolls = 0;
  /** Waits (GET …/wait) served so far. */
  waitCalls = 0;
  activeWaits = 0;

  // client state
  readonly workflows = new Map<string, string>();
  readonly executions = new Map<string, ExecutionRecord>();

  readonly #faults = new Map<string, Fault[]>();
  readonly #listeners = new Set<() => void>();
  readonly #serverAbort = new AbortController();
  readonly #server: Deno.HttpServer<Deno.NetAddr>;
  readonly #front: Deno.Listener;
  readonly #conns = new Set<Deno.Conn>();
  readonly #connTasks = new Set<Promise<void>>();
  readonly #clientGone = new Map<number, AbortController>();
  #acceptLoop: Promise<void> = Promise.resolve();
  #closed = false;
  #sessionSeq = 0;

  private constructor(options: FakeOptions) {
    this.options = options;
    this.#server = Deno.serve(
      {
        hostname: "127.0.0.1",
        port: 0,
        signal: this.#serverAbort.signal,
        onListen() {},
        onError: (err) => {
          console.error("fake ORBIT server error:", err);
          return json(500, { error: { code: "FAKE_ERROR", message: String(err) } });
        },
      },
      (req, info) => this.#handle(req, info.remoteAddr.port),
    );
    this.#front = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.url = `http://127.0.0.1:${(this.#front.addr as Deno.NetAddr).port}`;
    this.#acceptLoop = this.#accept();
  }

  static start(options: FakeOptions = {}): FakeOrbit {
    return new FakeOrbit(options);
  }

  // ---- test controls --------------------------------------------------------------------

  /** Queue faults for the next requests to `path` (a URL path such as `/v1/workers/poll`). */
  inject(path: string, ...faults: Fault[]): void {
    const list = this.#faults.get(path) ?? [];
    list.push(...faults);
    this.#faults.set(path, list);
  }

  /** Faults still queued for `path`. */
  pendingFaults(path: string): number {
    return this.#faults.get(path)?.length ?? 0;
  }

  /** Queues an attempt for the workers to poll. */
  enqueue(partial: Partial<FakeTask> & { task: string; contract?: string }): FakeTask {
    const execution_id = partial.execution_id ?? `ex-${crypto.randomUUID().slice(0, 8)}`;
    const step = partial.step ?? "step";
    const task: FakeTask = {
      token: partial.token ?? `${execution_id}/${crypto.randomUUID()}`,
      execution_id,
      step,
      attempt: partial.attempt ?? 1,
      task: partial.task,
      contract: partial.contract ?? "1",
      input: partial.input ?? {},
      idempotency_key: partial.idempotency_key ?? `${execution_id}/${step}/1`,
      redelivery: partial.redelivery ?? false,
      deadline_ms: partial.deadline_ms ?? Date.now() + 60_000,
    };
    this.queue.push(task);
    this.#changed();
    return task;
  }

  /** Makes the next heartbeat that names `token` (or any, once) answer it in `cancel`. */
  cancel(token: string): void {
    this.pendingCancel.add(token);
    this.#changed();
  }

  /** Forgets a session, as a restarted or new leader would. */
  expireSession(sessionId: string): void {
    this.sessions.delete(sessionId);
    this.#changed();
  }

  resultsFor(token: string): ResultRecord[] {
    return this.results.filter((r) => r.token === token);
  }

  /** Marks an execution completed (or another terminal status). */
  finishExecution(id: string, status = "completed", output: unknown = null): void {
    const rec = this.executions.get(id);
    if (!rec) throw new Error(`no execution ${id}`);
    rec.execution.status = status;
    rec.execution.closed_ms = Date.now();
    if (status === "completed") rec.execution.output = output;
    else rec.execution.error = { code: "STEP_FAILED", message: "it failed" };
    this.#event(rec, status === "completed" ? "WorkflowCompleted" : "WorkflowFailed", {});
    this.#changed();
  }

  addEvent(id: string, type: string, fields: Record<string, unknown> = {}): void {
    const rec = this.executions.get(id);
    if (!rec) throw new Error(`no execution ${id}`);
    this.#event(rec, type, fields);
    this.#changed();
  }

  setQueryResult(id: string, name: string, value: unknown): void {
    const rec = this.executions.get(id);
    if (!rec) throw new Error(`no execution ${id}`);
    rec.queryResults[name] = value;
  }

  /**
   * Resolves with the first truthy value of `check`, re-evaluated on every change of the fake's
   * state (and every 50 ms, for conditions on things outside it); rejects after `timeoutMs`.
   */
  waitFor<T>(
    check: () => T | undefined | null | false,
    what = "condition",
    timeoutMs = 10_000,
  ): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const listener = () => {
        let value: T | undefined | null | false;
        try {
          value = check();
        } catch (err) {
          finish();
          reject(err);
          return;
        }
        if (value) {
          finish();
          resolve(value);
        }
      };
      const interval = setInterval(listener, 50);
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const finish = () => {
        this.#listeners.delete(listener);
        clearInterval(interval);
        clearTimeout(timer);
      };
      this.#listeners.add(listener);
      listener();
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#changed();
    try {
      this.#front.close();
    } catch { /* closed */ }
    await this.#acceptLoop;
    for (const conn of this.#conns) {
      try {
        conn.close();
      } catch { /* closed */ }
    }
    this.#serverAbort.abort();
    await this.#server.finished;
    await Promise.allSettled([...this.#connTasks]);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---- TCP front ------------------------------------------------------------------------

  async #accept(): Promise<void> {
    try {
      for await (const conn of this.#front) {
        const task = this.#proxy(conn).finally(() => this.#connTasks.delete(task));
        this.#connTasks.add(task);
      }
    } catch {
      // listener closed
    }
  }

  async #proxy(conn: Deno.Conn): Promise<void> {
    this.#conns.add(conn);
    let up: Deno.Conn | undefined;
    let upPort = 0;
    try {
      // Read until the request line is complete.
      const chunks: Uint8Array[] = [];
      let total = 0;
      let head = "";
      const buf = new Uint8Array(16 * 1024);
      while (!head.includes("\r\n")) {
        const n = await conn.read(buf);
        if (n === null) return;
        chunks.push(buf.slice(0, n));
        total += n;
        head = new TextDecoder().decode(concat(chunks, total));
      }
      const [method = "", target = ""] = head.split("\r\n")[0]!.split(" ");
      const path = target.split("?")[0]!;
      const faults = this.#faults.get(path);
      if (faults?.[0] === "drop") {
        faults.shift();
        this.dropped.push({ method, path });
        this.#changed();
        return; // closed in finally, without an answer
      }
      up = await Deno.connect({ hostname: "127.0.0.1", port: this.#server.addr.port });
      this.#conns.add(up);
      upPort = (up.localAddr as Deno.NetAddr).port;
      const gone = new AbortController();
      this.#clientGone.set(upPort, gone);
      await writeAll(up, concat(chunks, total));
      const upstream = up;
      const toServer = (async () => {
        try {
          while (true) {
            const n = await conn.read(buf);
            if (n === null) break;
            await writeAll(upstream, buf.subarray(0, n));
          }
        } catch { /* closed */ }
        // The client closed its side (or the answer was sent and the connection closed).
        gone.abort();
        this.#changed();
        try {
          upstream.close();
        } catch { /* closed */ }
      })();
      const toClient = (async () => {
        const back = new Uint8Array(16 * 1024);
        try {
          while (true) {
            const n = await upstream.read(back);
            if (n === null) break;
            await writeAll(conn, back.subarray(0, n));
          }
        } catch { /* closed */ }
        try {
          conn.close();
        } catch { /* closed */ }
      })();
      await Promise.allSettled([toServer, toClient]);
    } catch {
      // connection trouble: nothing to do
    } finally {
      this.#clientGone.delete(upPort);
      for (const c of [conn, up]) {
        if (!c) continue;
        try {
          c.close();
        } catch { /* closed */ }
        this.#conns.delete(c);
      }
    }
  }

  // ---- HTTP -----------------------------------------------------------------------------

  async #handle(req: Request, port: number): Promise<Response> {
    // Aborted when the client closes its connection (tracked by the TCP front, so that
    // request.signal, which Deno also aborts after every successful answer, is not needed).
    const gone = this.#clientGone.get(port)?.signal ?? new AbortController().signal;
    const url = new URL(req.url);
    const path = url.pathname;
    let body: unknown = undefined;
    const text = await req.text();
    if (text) {
      try {
        body = JSON.parse(text);
      } catch {
        return error(400, "MALFORMED_JSON", "body is not JSON");
      }
    }
    this.requests.push({ method: req.method, path, headers: req.headers, body });
    const faults = this.#faults.get(path);
    if (faults && faults.length > 0 && faults[0] !== "drop") {
      const fault = faults.shift() as Exclude<Fault, "drop">;
      this.#changed();
      return json(
        fault.status,
        {
          error: {
            code: fault.code ?? `HTTP_${fault.status}`,
            message: fault.message ?? "injected",
            ...fault.extra,
          },
        },
        fault.headers,
      );
    }
    if (this.options.token && path !== "/v1/ready") {
      if (req.headers.get("authorization") !== `Bearer ${this.options.token}`) {
        return error(401, "UNAUTHENTICATED", "missing or bad bearer token");
      }
    }
    try {
      return await this.#route(req, gone, url, body as Record<string, unknown> | undefined);
    } finally {
      this.#changed();
    }
  }

  #route(
    req: Request,
    gone: AbortSignal,
    url: URL,
    body: Record<string, unknown> | undefined,
  ): Promise<Response> | Response {
    const path = url.pathname;
    const m = req.method;
    const b = body ?? {};
    if (m === "POST" && path === "/v1/workers/register") return this.#register(b);
    if (m === "POST" && path === "/v1/workers/poll") return this.#poll(gone, b);
    if (m === "POST" && path === "/v1/workers/heartbeat") return this.#heartbeat(b);
    if (m === "POST" && path === "/v1/workers/unregister") {
      const id = String(b.session_id);
      this.unregisters.push(id);
      if (!this.sessions.delete(id)) return error(404, "UNKNOWN_SESSION", "unknown session");
      return json(200, { ok: true });
    }
    if (m === "GET" && path === "/v1/workers") {
      return json(200, { workers: [...this.sessions.values()] });
    }
    if (m === "POST" && (path === "/v1/tasks/complete" || path === "/v1/tasks/fail")) {
      return this.#result(path.endsWith("complete") ? "complete" : "fail", b);
    }
    if (m === "GET" && path === "/v1/health") {
      return json(200, {
        status: "ok",
        api_version: "orbit-api/1",
        runtime_version: "fake",
        ir_versions: ["orbit-ir/1", "orbit-ir/2"],
        active_executions: [...this.executions.values()].filter((e) =>
          !TERMINAL.has(e.execution.status)
        ).length,
        worker_sessions: this.sessions.size,
        ...(this.options.sharedNode
          ? {
            role: "shared",
            node_id: "fake-1",
            nodes: [{ node_id: "fake-1", addr: this.url, live: true }],
          }
          : { role: "single" }),
      });
    }
    if (m === "GET" && path === "/v1/ready") return json(200, { role: "single", ready: true });
    if (m === "POST" && path === "/v1/workflows") return this.#deploy(b);
    if (m === "POST" && path === "/v1/executions") return this.#start(b);
    if (m === "GET" && path === "/v1/executions") return this.#list(url);

    const ex =
      /^\/v1\/executions\/([^/]+)(?:\/(history|wait|cancel|signals|queries)(?:\/([^/]+))?)?$/
        .exec(path);
    if (ex) {
      const id = decodeURIComponent(ex[1]!);
      const rec = this.executions.get(id);
      if (!rec) return error(404, "UNKNOWN_EXECUTION", `no execution ${id}`);
      const sub = ex[2];
      const name = ex[3] === undefined ? undefined : decodeURIComponent(ex[3]);
      if (m === "GET" && !sub) return json(200, rec.execution);
      if (m === "GET" && sub === "history") return this.#history(rec, url);
      if (m === "GET" && sub === "wait") return this.#wait(gone, rec, url);
      if (m === "POST" && sub === "cancel") {
        if (!TERMINAL.has(rec.execution.status)) {
          rec.execution.status = "cancelled";
          rec.execution.closed_ms = Date.now();
          this.#event(rec, "WorkflowCancelled", { reason: b.reason ?? null });
        }
        return json(200, rec.execution);
      }
      if (m === "POST" && sub === "signals" && name) {
        const signals = (rec.doc?.signals ?? {}) as Record<string, unknown>;
        if (!(name in signals)) return error(404, "UNKNOWN_SIGNAL", `no signal ${name}`);
        if (TERMINAL.has(rec.execution.status)) {
          return error(409, "EXECUTION_FINISHED", `execution ${id} is ${rec.execution.status}`);
        }
        const seq = this.#event(rec, "SignalReceived", {
          signal: name,
          payload: b.payload ?? null,
        });
        return json(200, { seq });
      }
      if (m === "GET" && sub === "queries" && name) {
        const queries = (rec.doc?.queries ?? {}) as Record<string, unknown>;
        if (!(name in queries)) return error(404, "UNKNOWN_QUERY", `no query ${name}`);
        return json(200, { result: rec.queryResults[name] ?? queries[name] });
      }
    }
    return error(404, "NOT_FOUND", `no route ${m} ${path}`);
  }

  #register(b: Record<string, unknown>): Response {
    this.registers.push(b);
    if (typeof b.worker_id !== "string" || !Array.isArray(b.tasks)) {
      return error(422, "INVALID_REGISTRATION", "worker_id and tasks are required");
    }
    const session: Session = {
      session_id: `session-${++this.#sessionSeq}`,
      worker_id: b.worker_id,
      runtime: String(b.runtime),
      tasks: b.tasks as Session["tasks"],
      concurrency: Number(b.concurrency),
    };
    this.sessions.set(session.session_id, session);
    return json(200, { session_id: session.session_id });
  }

  async #poll(gone: AbortSignal, b: Record<string, unknown>): Promise<Response> {
    const sessionId = String(b.session_id);
    const maxTasks = typeof b.max_tasks === "number" ? b.max_tasks : 1;
    const waitS = typeof b.wait_s === "number" ? b.wait_s : 30;
    this.polls.push({ session_id: sessionId, max_tasks: maxTasks, wait_s: waitS });
    if (!this.sessions.has(sessionId)) return error(404, "UNKNOWN_SESSION", "unknown session");
    const until = Date.now() + Math.min(waitS, this.options.maxPollS ?? 60) * 1000;
    this.activePolls++;
    this.#changed();
    try {
      for (;;) {
        const session = this.sessions.get(sessionId);
        if (!session) return error(404, "UNKNOWN_SESSION", "unknown session");
        const served = new Set(session.tasks.map((t) => `${t.name}@${t.contract}`));
        const taken: FakeTask[] = [];
        for (let i = 0; i < this.queue.length && taken.length < maxTasks;) {
          const t = this.queue[i]!;
          if (served.has(`${t.task}@${t.contract}`)) {
            taken.push(t);
            this.queue.splice(i, 1);
          } else i++;
        }
        if (taken.length > 0) {
          for (const t of taken) this.dispatched.set(t.token, { task: t, session_id: sessionId });
          return json(200, { tasks: taken });
        }
        if (gone.aborted) {
          this.abortedPolls++;
          return json(200, { tasks: [] });
        }
        if (this.#closed || Date.now() >= until) return json(200, { tasks: [] });
        await this.#nextChange(until - Date.now(), gone);
      }
    } finally {
      this.activePolls--;
    }
  }

  #heartbeat(b: Record<string, unknown>): Response {
    const sessionId = String(b.session_id);
    const tokens = Array.isArray(b.tokens) ? b.tokens.map(String) : [];
    this.heartbeats.push({ session_id: sessionId, tokens });
    if (!this.sessions.has(sessionId)) return error(404, "UNKNOWN_SESSION", "unknown session");
    const cancel = tokens.filter((t) => this.pendingCancel.has(t));
    for (const t of cancel) this.pendingCancel.delete(t);
    return json(200, { cancel });
  }

  #result(kind: "complete" | "fail", b: Record<string, unknown>): Response {
    const token = String(b.token);
    if (!this.dispatched.has(token)) return error(404, "UNKNOWN_TASK", `no attempt ${token}`);
    const accepted = !this.results.some((r) => r.token === token && r.accepted);
    const rec: ResultRecord = { kind, token, accepted };
    if (kind === "complete") rec.output = b.output;
    else rec.error = b.error as ResultRecord["error"];
    this.results.push(rec);
    return json(200, { accepted });
  }

  #deploy(b: Record<string, unknown>): Response {
    if (typeof b.name !== "string" || typeof b.version !== "string" || !Array.isArray(b.steps)) {
      return error(422, "INVALID_DEFINITION", "name, version and steps are required", {
        problems: [{ path: "$", message: "not a definition" }],
      });
    }
    const key = `${b.name}@${b.version}`;
    const text = JSON.stringify(b);
    const existing = this.workflows.get(key);
    if (existing !== undefined && existing !== text) {
      return error(409, "DEFINITION_CONFLICT", `${key} exists with a different document`);
    }
    this.workflows.set(key, text);
    return json(existing === undefined ? 201 : 200, {
      name: b.name,
      version: b.version,
      created: existing === undefined,
    });
  }

  #start(b: Record<string, unknown>): Response {
    const id = typeof b.execution_id === "string" ? b.execution_id : crypto.randomUUID();
    const existing = this.executions.get(id);
    if (existing) return json(200, existing.execution);
    const name = String(b.workflow);
    const versions = [...this.workflows.keys()].filter((k) => k.startsWith(`${name}@`));
    const key = typeof b.version === "string" ? `${name}@${b.version}` : versions.sort().at(-1);
    if (!key || !this.workflows.has(key)) {
      return error(404, "UNKNOWN_WORKFLOW", `no workflow ${name}`);
    }
    const doc = JSON.parse(this.workflows.get(key)!) as Record<string, unknown>;
    const rec: ExecutionRecord = {
      execution: {
        execution_id: id,
        run_id: crypto.randomUUID(),
        root_id: id,
        workflow: name,
        version: String(doc.version),
        status: "running",
        input: b.input ?? null,
        created_ms: Date.now(),
      },
      events: [],
      doc,
      queryResults: {},
    };
    this.executions.set(id, rec);
    this.#event(rec, "WorkflowCreated", { input: b.input ?? null });
    return json(201, rec.execution);
  }

  #list(url: URL): Response {
    const workflow = url.searchParams.get("workflow");
    const status = url.searchParams.get("status");
    const limit = Number(url.searchParams.get("limit") ?? 50);
    const start = Number(url.searchParams.get("cursor") ?? 0);
    const all = [...this.executions.values()]
      .map((r) => r.execution)
      .filter((e) => (!workflow || e.workflow === workflow) && (!status || e.status === status));
    const page = all.slice(start, start + limit);
    const next = start + limit < all.length ? String(start + limit) : undefined;
    return json(200, { executions: page, ...(next ? { next_cursor: next } : {}) });
  }

  #history(rec: ExecutionRecord, url: URL): Response {
    const after = Number(url.searchParams.get("after_seq") ?? 0);
    const size = Number(url.searchParams.get("limit") ?? this.options.historyPageSize ?? 2);
    const rest = rec.events.filter((e) => (e.seq as number) > after);
    const events = rest.slice(0, size);
    const more = rest.length > size;
    return json(200, {
      events,
      ...(more ? { next_after_seq: events.at(-1)!.seq } : {}),
    });
  }

  async #wait(gone: AbortSignal, rec: ExecutionRecord, url: URL): Promise<Response> {
    this.waitCalls++;
    const timeoutS = Number(url.searchParams.get("timeout_s") ?? 30);
    const until = Date.now() + Math.min(timeoutS, this.options.maxWaitS ?? 300) * 1000;
    this.activeWaits++;
    this.#changed();
    try {
      while (
        !TERMINAL.has(rec.execution.status) && Date.now() < until && !gone.aborted &&
        !this.#closed
      ) {
        await this.#nextChange(until - Date.now(), gone);
      }
      return json(200, rec.execution);
    } finally {
      this.activeWaits--;
    }
  }

  #event(rec: ExecutionRecord, type: string, fields: Record<string, unknown>): number {
    const seq = rec.events.length + 1;
    rec.events.push({ seq, type, time_ms: Date.now(), ...fields });
    return seq;
  }

  #changed(): void {
    for (const listener of [...this.#listeners]) listener();
  }

  #nextChange(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#listeners.delete(done);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      this.#listeners.add(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }
}

function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", connection: "close", ...headers },
  });
}

function error(
  status: number,
  code: string,
  message: string,
  extra: Record<string, unknown> = {},
): Response {
  return json(status, { error: { code, message, ...extra } });
}

function concat(chunks: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

async function writeAll(conn: Deno.Conn, data: Uint8Array): Promise<void> {
  let off = 0;
  while (off < data.length) off += await conn.write(data.subarray(off));
}
