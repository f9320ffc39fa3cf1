package dev.orbit.sdk;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.net.http.HttpClient;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * Serves tasks to an ORBIT runtime: it registers, long-polls in {@code concurrency} slots
 * ({@code max_tasks: 1} each, the next task asked for in each result's report), runs each attempt
 * on its slot's thread, interrupting it when the runtime cancels the attempt (heartbeats carry
 * cancellations) or its deadline passes, reports each result until it is delivered, retries every
 * connection error and 5xx with backoff and jitter, registers again after 404 UNKNOWN_SESSION,
 * and stops gracefully.
 *
 * <p>Why one file of this size: the worker's parts (its builder, the session, the slot threads,
 * execution, reports and the heartbeat thread) share the worker's private state under one
 * monitor; Java would make every such field package-visible to split them into classes. The
 * sections follow those roles.
 *
 * <pre>{@code
 * Worker w = Worker.builder()
 *     .server("http://127.0.0.1:7233").workerId("orders-java")
 *     .tasks(charge, refund)
 *     .build();
 * w.run(); // until SIGTERM (a shutdown hook): stop polling, finish running tasks, report them
 * }</pre>
 */
public final class Worker implements AutoCloseable {
  /** Worker states. */
  public enum State {
    NEW,
    STARTING,
    RUNNING,
    STOPPING,
    STOPPED
  }

  /** The options of a worker; {@link #builder()} makes one. */
  public static final class Builder {
    private String server;
    private String token;
    private String workerId;
    private String runtime = "java";
    private final List<Task<?, ?>> tasks = new ArrayList<>();
    private int concurrency = 8;
    private Duration pollWait = Duration.ofSeconds(30);
    private Duration heartbeatInterval = Duration.ofSeconds(2);
    private Duration requestTimeout = Duration.ofSeconds(30);
    private Backoff backoff = Backoff.DEFAULT;
    private Duration shutdownGrace = Duration.ofSeconds(30);
    private Logger logger;
    private boolean debug;
    private Supplier<HttpClient> httpClient;
    private boolean spreadOverNodes = true;
    private Duration nodeRefresh = Duration.ofSeconds(5);

    /** The runtime's base URL (or the load balancer's in front of a cluster). Required. */
    public Builder server(String v) {
      server = v;
      return this;
    }

    /** The bearer token (a worker's own token when the server has a workers file). */
    public Builder token(String v) {
      token = v;
      return this;
    }

    /** This worker's identity (worker_id of registration). Required. */
    public Builder workerId(String v) {
      workerId = v;
      return this;
    }

    /** Reported at registration (default {@code java}). */
    public Builder runtime(String v) {
      runtime = v;
      return this;
    }

    /** The tasks served. At least one. */
    public Builder tasks(Task<?, ?>... v) {
      tasks.addAll(List.of(v));
      return this;
    }

    public Builder tasks(List<? extends Task<?, ?>> v) {
      tasks.addAll(v);
      return this;
    }

    /** How many attempts run at once (default 8): one slot each, each its own connection pool. */
    public Builder concurrency(int v) {
      concurrency = v;
      return this;
    }

    /** The long-poll wait (default 30 s, at most 60 s). */
    public Builder pollWait(Duration v) {
      pollWait = v;
      return this;
    }

    /** The time between heartbeats (default 2 s). */
    public Builder heartbeatInterval(Duration v) {
      heartbeatInterval = v;
      return this;
    }

    /** Bounds every request but the long poll (default 30 s). */
    public Builder requestTimeout(Duration v) {
      requestTimeout = v;
      return this;
    }

    /** Spaces the retries of connection errors and 5xx answers. */
    public Builder backoff(Backoff v) {
      backoff = v;
      return this;
    }

    /** How long a graceful stop lets running tasks finish and report (default 30 s). */
    public Builder shutdownGrace(Duration v) {
      shutdownGrace = v;
      return this;
    }

    /** Receives log lines (default: standard error with timestamps). */
    public Builder logger(Logger v) {
      logger = v;
      return this;
    }

    /** Adds debug lines. */
    public Builder debug(boolean v) {
      debug = v;
      return this;
    }

    /** Makes the HTTP client of each slot and of the session's own requests. */
    public Builder httpClient(Supplier<HttpClient> v) {
      httpClient = v;
      return this;
    }

    /**
     * In a cluster in shared mode, spreads the slots over the live servers at the addresses they
     * advertise (read from {@code /v1/health} of {@link #server}), so that each slot polls a
     * server and reports its results to it (default true; docs/clusters.md, "Workers connect to
     * every server"). Off, or with a single server, every slot uses {@link #server}.
     */
    public Builder spreadOverNodes(boolean v) {
      spreadOverNodes = v;
      return this;
    }

    /** How often the live servers are read again when spreading (default 5 s). */
    public Builder nodeRefresh(Duration v) {
      nodeRefresh = v;
      return this;
    }

    public Worker build() {
      return new Worker(this);
    }
  }

  public static Builder builder() {
    return new Builder();
  }

  /** One attempt as POST /v1/workers/poll hands it out. */
  record PolledTask(
      String token, String executionId, String step, int attempt, String task, String contract,
      JsonElement input, String idempotencyKey, boolean redelivery, Double deadlineMs) {}

  /** The error object of POST /v1/tasks/fail. */
  record Failure(String code, String message, boolean retryable, Object details) {}

  /** A handler's outcome: an output or a failure. */
  record Outcome(JsonElement output, Failure failure) {}

  private static final class Inflight {
    final PolledTask task;
    Thread thread;
    Attempt attempt;
    String reason; // why it was cancelled: cancel, deadline, shutdown
    boolean handlerDone;

    Inflight(PolledTask task) {
      this.task = task;
    }
  }

  /** One concurrency slot. Its fields but {@code index} and {@code home} are under {@code mu}. */
  private static final class Slot {
    final int index;
    /** The configured address, on the slot's own HttpClient (a connection pool of its own). */
    final Transport home;
    /** Where the slot talks now: {@code home}, or {@code target} on the same HttpClient. */
    Transport tr;
    /** The node's address the slot talks to (see {@link Nodes}), or null: the configured one. */
    String target;
    String pollSession;
    Cancellation pollCtx;
    /** Ends the first delivery of a result to the slot's node when that node leaves. */
    Cancellation delivery;

    Slot(int index, Transport home) {
      this.index = index;
      this.home = home;
      this.tr = home;
    }
  }

  private final String workerId;
  private final String runtime;
  private final List<Task<?, ?>> taskList;
  private final Map<String, Task<?, ?>> tasks = new HashMap<>();
  private final int concurrency;
  private final Duration pollWait;
  private final Duration heartbeatInterval;
  private final Duration requestTimeout;
  private final Backoff backoff;
  private final Duration shutdownGrace;
  private final Logger logger;
  private final boolean debug;
  private final Transport main;
  private final List<Slot> slots = new ArrayList<>();
  private final boolean spread;
  private final Duration nodeRefresh;
  private final Nodes nodes;
  private volatile Thread nodesThread;

  private final Object mu = new Object();
  private State state = State.NEW;
  private String session;
  private final Map<String, Inflight> inflight = new LinkedHashMap<>();
  private final Deque<PolledTask> backlog = new ArrayDeque<>();
  private final Object regMu = new Object();
  private boolean regOnce;
  private boolean hbPending;
  private int active; // slot threads and background deliveries still going

  private final Cancellation stopCtx = new Cancellation();
  private final Cancellation abandonCtx = new Cancellation();
  private final Cancellation hbCtx = new Cancellation();
  private final ScheduledExecutorService timers;
  private Thread hbThread;
  private final CountDownLatch done = new CountDownLatch(1);
  private boolean stopBegun;

  private Worker(Builder b) {
    if (b.workerId == null || b.workerId.isEmpty()) {
      throw new IllegalArgumentException("Worker: workerId is required");
    }
    if (b.tasks.isEmpty()) {
      throw new IllegalArgumentException("Worker: tasks must list at least one task");
    }
    workerId = b.workerId;
    runtime = b.runtime == null || b.runtime.isEmpty() ? "java" : b.runtime;
    concurrency = b.concurrency <= 0 ? 8 : b.concurrency;
    Duration pw = positive(b.pollWait, Duration.ofSeconds(30));
    pollWait = pw.compareTo(Duration.ofSeconds(60)) > 0 ? Duration.ofSeconds(60) : pw;
    heartbeatInterval = positive(b.heartbeatInterval, Duration.ofSeconds(2));
    requestTimeout = positive(b.requestTimeout, Duration.ofSeconds(30));
    shutdownGrace = positive(b.shutdownGrace, Duration.ofSeconds(30));
    backoff = b.backoff == null ? Backoff.DEFAULT : b.backoff;
    logger = b.logger == null ? Logger.stderr() : b.logger;
    debug = b.debug;
    Supplier<HttpClient> newClient = b.httpClient == null ? Transport::newHttpClient : b.httpClient;
    main = new Transport(b.server, b.token, newClient.get());
    for (int i = 0; i < concurrency; i++) {
      slots.add(new Slot(i, new Transport(b.server, b.token, newClient.get())));
    }
    spread = b.spreadOverNodes;
    nodeRefresh = positive(b.nodeRefresh, Duration.ofSeconds(5));
    nodes = new Nodes(main.server, this::log, this::nodesLeft);
    taskList = List.copyOf(b.tasks);
    for (Task<?, ?> t : taskList) {
      String k = key(t.name(), t.contract());
      if (tasks.putIfAbsent(k, t) != null) {
        throw new IllegalArgumentException(
            "Worker: task " + t.name() + " contract " + t.contract() + " is listed twice");
      }
    }
    warmUp();
    timers =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread t = new Thread(r, "orbit-timers");
              t.setDaemon(true);
              return t;
            });
  }

  /**
   * Loads the classes of the retry path (an error answer parsed, a delay and a log line
   * formatted, a backoff sleep) before the first request, so that a cold JVM does not stretch
   * the first retry's pause.
   */
  private void warmUp() {
    ApiException e = ApiException.fromResponse(503,
        "{\"error\":{\"code\":\"NOT_LEADER\",\"message\":\"warm-up\"}}"
            .getBytes(java.nio.charset.StandardCharsets.UTF_8), "POST", "/v1/workers/register");
    ApiException.fromResponse(502, new byte[] {'<'}, "POST", "/v1/workers/register");
    String line = "register failed: " + describe(e) + "; retrying in "
        + Backoff.format(backoff.delay(0));
    Logger.line("WARN", line);
    new ConnectionException(main.server, "warm-up", null).getMessage();
    new Backoff.Retrier(backoff).next();
    stopCtx.child().release();
    new Cancellation().sleep(Duration.ofMillis(1));
  }

  private static Duration positive(Duration d, Duration def) {
    return d == null || d.isNegative() || d.isZero() ? def : d;
  }

  private static String key(String name, String contract) {
    return name + "\u0000" + contract;
  }

  /** The runtime's URL. */
  public String server() {
    return main.server;
  }

  public String workerId() {
    return workerId;
  }

  /** The current session, or null while the worker is not registered. */
  public String sessionId() {
    synchronized (mu) {
      return session;
    }
  }

  public State state() {
    synchronized (mu) {
      return state;
    }
  }

  /**
   * The live servers' addresses the slots are spread over, as last read (empty: every slot uses
   * {@link #server}).
   */
  public List<String> nodeAddresses() {
    return nodes.addresses();
  }

  /** The tokens of the attempts being run or reported. */
  public List<String> runningTokens() {
    synchronized (mu) {
      return new ArrayList<>(new TreeSet<>(inflight.keySet()));
    }
  }

  /** Waits until the worker has stopped, at most {@code d}; true when it has. */
  public boolean awaitStopped(Duration d) throws InterruptedException {
    return done.await(d.toMillis(), TimeUnit.MILLISECONDS);
  }

  /**
   * Registers (retrying connection errors and 5xx until it succeeds or the worker is stopped) and
   * sets the slots and the heartbeat going. The runtime's refusal (401, 403, 422) is thrown as
   * an {@link ApiException}.
   */
  public void start() {
    synchronized (mu) {
      if (state != State.NEW) throw new IllegalStateException("Worker.start: the worker is " + state);
      state = State.STARTING;
    }
    Transport.warmUp();
    try {
      ensureSession(stopCtx);
    } catch (CancelledException e) {
      // stopped meanwhile: its shutdown finishes the job
    } catch (RuntimeException e) {
      synchronized (mu) {
        state = State.STOPPED;
        stopBegun = true;
      }
      stopCtx.cancel();
      timers.shutdownNow();
      done.countDown();
      throw e;
    }
    // In a shared cluster, the live servers to spread the slots over (one health read).
    if (spread) refreshNodes(stopCtx);
    synchronized (mu) {
      if (state == State.STOPPING || stopCtx.isCancelled()) return;
      state = State.RUNNING;
      active += slots.size();
    }
    for (Slot s : slots) {
      Thread t = new Thread(() -> slotLoop(s), "orbit-slot-" + s.index);
      t.setDaemon(true);
      t.start();
    }
    hbThread = new Thread(this::heartbeatLoop, "orbit-heartbeat");
    hbThread.setDaemon(true);
    hbThread.start();
    if (spread) {
      nodesThread = new Thread(this::nodesLoop, "orbit-nodes");
      nodesThread.setDaemon(true);
      nodesThread.start();
    }
  }

  /**
   * Starts the worker and serves until the JVM is asked to exit (SIGTERM, SIGINT), then stops
   * gracefully within the shutdown grace before the JVM exits.
   */
  public void run() throws InterruptedException {
    Thread hook = new Thread(() -> stop(shutdownGrace), "orbit-shutdown");
    Runtime.getRuntime().addShutdownHook(hook);
    start();
    done.await();
  }

  /** {@link #stop(Duration)} with the configured shutdown grace. */
  @Override
  public void close() {
    stop(shutdownGrace);
  }

  /**
   * Shuts the worker down gracefully: it stops polling, lets running tasks finish and report
   * their results, stops heartbeating and unregisters. When {@code grace} passes first, the
   * running handlers are interrupted, undelivered results are given up, and the unregistration
   * gives their attempts back to the runtime, which hands them out again at once. Safe to call
   * more than once; every call returns when the worker has stopped.
   */
  public void stop(Duration grace) {
    boolean first;
    synchronized (mu) {
      first = !stopBegun;
      stopBegun = true;
    }
    if (first) shutdown(grace);
    try {
      done.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private void shutdown(Duration grace) {
    boolean started;
    synchronized (mu) {
      started = state == State.RUNNING || state == State.STARTING;
      state = State.STOPPING;
    }
    stopCtx.cancel();
    if (!started) {
      synchronized (mu) {
        state = State.STOPPED;
      }
      timers.shutdownNow();
      done.countDown();
      return;
    }
    int n = runningTokens().size();
    if (n > 0) log("INFO", "stopping: waiting for " + n + " running task(s)");
    long end = System.nanoTime() + grace.toNanos();
    if (!waitDrained(end)) {
      List<Inflight> running;
      synchronized (mu) {
        running = new ArrayList<>(inflight.values());
        backlog.clear();
      }
      log("WARN", "stopping: " + running.size()
          + " task(s) still running; abandoning them (the runtime hands their attempts out again)");
      for (Inflight e : running) cancelAttempt(e.task.token(), "shutdown", false);
      abandonCtx.cancel();
      // Handlers that heed the interrupt end now; one that ignores it is not waited for.
      waitDrained(System.nanoTime() + 200_000_000L);
    }
    hbCtx.cancel();
    for (Thread t : new Thread[] {hbThread, nodesThread}) {
      if (t == null) continue;
      try {
        t.join(requestTimeout.toMillis() + 1000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    unregister();
    synchronized (mu) {
      state = State.STOPPED;
    }
    timers.shutdownNow();
    log("INFO", "worker stopped worker_id=" + workerId);
    done.countDown();
  }

  private boolean waitDrained(long endNanos) {
    synchronized (mu) {
      while (active > 0) {
        long left = endNanos - System.nanoTime();
        if (left <= 0) return false;
        try {
          mu.wait(Math.max(1, left / 1_000_000));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return false;
        }
      }
      return true;
    }
  }

  private void release() {
    synchronized (mu) {
      active--;
      mu.notifyAll();
    }
  }

  void log(String level, String message) {
    if ("DEBUG".equals(level) && !debug) return;
    logger.log(level, "orbit " + message);
  }

  private String describe(Throwable t) {
    if (t instanceof ApiException) {
      ApiException a = (ApiException) t;
      return "ORBIT runtime at " + main.server + " answered " + a.status() + " " + a.code() + ": "
          + a.apiMessage();
    }
    return t.getMessage() == null ? t.toString() : t.getMessage();
  }

  // ---- the session ----------------------------------------------------------------------

  /** The current session, registering (one caller at a time) when there is none. */
  private String ensureSession(Cancellation ctx) {
    String s = sessionId();
    if (s != null) return s;
    synchronized (regMu) {
      s = sessionId();
      if (s != null) return s;
      return register(ctx);
    }
  }

  private String register(Cancellation ctx) {
    JsonObject body = new JsonObject();
    body.addProperty("worker_id", workerId);
    body.addProperty("runtime", runtime);
    body.addProperty("concurrency", concurrency);
    JsonArray list = new JsonArray();
    for (Task<?, ?> t : taskList) {
      JsonObject o = new JsonObject();
      o.addProperty("name", t.name());
      o.addProperty("contract", t.contract());
      if (t.language() != null && !t.language().isEmpty()) o.addProperty("language", t.language());
      list.add(o);
    }
    body.add("tasks", list);
    Backoff.Retrier r = new Backoff.Retrier(backoff);
    while (true) {
      RuntimeException err;
      try {
        JsonElement res = main.call(ctx, "POST", "/v1/workers/register", null, body, requestTimeout);
        String id = str(res, "session_id");
        if (id != null && !id.isEmpty()) {
          synchronized (mu) {
            session = id;
            regOnce = true;
          }
          log("INFO", "worker registered worker_id=" + workerId + " runtime=" + runtime + " tasks="
              + taskList.size() + " session_id=" + id);
          return id;
        }
        err = new ApiException(200, ApiException.INVALID_RESPONSE,
            "register answered without a session_id", null, String.valueOf(res), "POST",
            "/v1/workers/register");
      } catch (CancelledException e) {
        throw e;
      } catch (ApiException | ConnectionException e) {
        err = e;
      }
      if (ctx.isCancelled()) throw new CancelledException();
      boolean once;
      synchronized (mu) {
        once = regOnce;
      }
      // Before the first success, a refusal (401, 403, 422) is the caller's to see.
      if (!ApiException.isRetryable(err) && !once) throw err;
      Duration d = r.next();
      log(ApiException.isRetryable(err) ? "WARN" : "ERROR",
          "register failed: " + describe(err) + "; retrying in " + Backoff.format(d));
      if (!ctx.sleep(d)) throw new CancelledException();
    }
  }

  private static String str(JsonElement o, String name) {
    if (o == null || !o.isJsonObject()) return null;
    JsonElement v = o.getAsJsonObject().get(name);
    return v != null && v.isJsonPrimitive() ? v.getAsString() : null;
  }

  /** Drops a session the runtime no longer knows and ends the polls held on it. */
  private void forgetSession(String lost, String op) {
    List<Cancellation> polls = new ArrayList<>();
    synchronized (mu) {
      if (session == null || !session.equals(lost)) return;
      session = null;
      for (Slot s : slots) {
        if (lost.equals(s.pollSession) && s.pollCtx != null) polls.add(s.pollCtx);
      }
    }
    log("WARN", op + ": the runtime does not know session " + lost
        + " (UNKNOWN_SESSION); registering again");
    for (Cancellation c : polls) c.cancel();
  }

  private void unregister() {
    String s = sessionId();
    if (s == null) return;
    Backoff.Retrier r = new Backoff.Retrier(backoff);
    JsonObject body = new JsonObject();
    body.addProperty("session_id", s);
    for (int attempt = 1; ; attempt++) {
      try {
        main.call(null, "POST", "/v1/workers/unregister", null, body, requestTimeout);
        synchronized (mu) {
          session = null;
        }
        return;
      } catch (ApiException | ConnectionException e) {
        if (ApiException.isUnknownSession(e)) {
          synchronized (mu) {
            session = null;
          }
          return;
        }
        if (ApiException.isRetryable(e) && attempt < 4) {
          Duration d = r.next();
          log("WARN", "unregister failed: " + describe(e) + "; retrying in " + Backoff.format(d));
          new Cancellation().sleep(d);
          continue;
        }
        log("WARN", "unregister failed: " + describe(e) + "; giving up");
        return;
      }
    }
  }

  // ---- heartbeats -------------------------------------------------------------------------

  private void heartbeatLoop() {
    Backoff.Retrier r = new Backoff.Retrier(backoff);
    Duration delay = heartbeatInterval;
    while (true) {
      if (!hbCtx.sleep(delay)) return;
      delay = heartbeatInterval;
      String s = sessionId();
      if (s == null) {
        registerInBackground();
        continue;
      }
      JsonObject body = new JsonObject();
      body.addProperty("session_id", s);
      JsonArray tokens = new JsonArray();
      for (String t : runningTokens()) tokens.add(t);
      body.add("tokens", tokens);
      try {
        JsonElement res = main.call(hbCtx, "POST", "/v1/workers/heartbeat", null, body, requestTimeout);
        r.reset();
        if (res.isJsonObject() && res.getAsJsonObject().get("cancel") instanceof JsonArray) {
          for (JsonElement t : res.getAsJsonObject().getAsJsonArray("cancel")) {
            if (t.isJsonPrimitive()) cancelAttempt(t.getAsString(), "cancel", true);
          }
        }
      } catch (CancelledException e) {
        return;
      } catch (ApiException | ConnectionException e) {
        if (hbCtx.isCancelled()) return;
        if (ApiException.isUnknownSession(e)) {
          forgetSession(s, "heartbeat");
          registerInBackground();
          continue;
        }
        delay = r.next();
        log(ApiException.isRetryable(e) ? "WARN" : "ERROR",
            "heartbeat failed: " + describe(e) + "; retrying in " + Backoff.format(delay));
      }
    }
  }

  /** Registers again in the background (unless stopping: there is nothing to keep alive). */
  private void registerInBackground() {
    if (stopCtx.isCancelled()) return;
    synchronized (mu) {
      if (hbPending) return;
      hbPending = true;
    }
    Thread t = new Thread(() -> {
      try {
        ensureSession(stopCtx);
      } catch (RuntimeException ignored) {
        // stopping, or logged by register
      } finally {
        synchronized (mu) {
          hbPending = false;
        }
      }
    }, "orbit-register");
    t.setDaemon(true);
    t.start();
  }

  /** Cancels a running attempt: its handler's thread is interrupted. */
  private void cancelAttempt(String token, String reason, boolean logIt) {
    Inflight e;
    synchronized (mu) {
      e = inflight.get(token);
      if (e == null || e.handlerDone || e.reason != null) return;
      e.reason = reason;
      if (e.attempt != null) e.attempt.cancelled.complete(reason);
      if (e.thread != null) e.thread.interrupt();
    }
    if (logIt) {
      log("INFO", "task cancelled by the runtime token=" + token + " step=" + e.task.step());
    }
  }

  // ---- the router: which server each slot talks to (see Nodes) ------------------------------

  /** One read of {@code /v1/health} of the configured address; a failed read keeps the list. */
  private void refreshNodes(Cancellation ctx) {
    JsonElement health;
    try {
      Duration t = requestTimeout.compareTo(Duration.ofSeconds(10)) < 0
          ? requestTimeout : Duration.ofSeconds(10);
      health = main.call(ctx, "GET", "/v1/health", null, null, t);
    } catch (ApiException | ConnectionException | CancelledException e) {
      log("DEBUG", "cannot read the cluster's nodes: " + describe(e));
      return;
    }
    nodes.update(Nodes.liveAddresses(health));
  }

  /** Reads the live servers every {@code nodeRefresh} until the heartbeats stop. */
  private void nodesLoop() {
    while (hbCtx.sleep(nodeRefresh)) {
      try {
        refreshNodes(hbCtx);
      } catch (RuntimeException e) { // never let the router's thread die
        log("ERROR", "reading the cluster's nodes failed: " + stack(e));
      }
    }
  }

  /**
   * Servers left the live list: the polls of their slots end (the slots move at once) and the
   * results on their way to them are cut (sent to the configured address instead).
   */
  private void nodesLeft(Set<String> left) {
    List<Cancellation> ends = new ArrayList<>();
    synchronized (mu) {
      for (Slot s : slots) {
        if (s.target == null || !left.contains(s.target)) continue;
        if (s.pollCtx != null) ends.add(s.pollCtx);
        if (s.delivery != null) ends.add(s.delivery);
      }
    }
    for (Cancellation c : ends) c.cancel();
  }

  /**
   * Points the slot at the server it should talk to now: a node's address on the slot's own
   * HttpClient (one pool, a connection per address), or the configured address.
   */
  private void route(Slot s) {
    String target = nodes.targetFor(s.index);
    synchronized (mu) {
      if (Objects.equals(target, s.target)) return;
      s.target = target;
      s.tr = target == null ? s.home : s.home.at(target);
    }
    log("DEBUG", "slot " + s.index + " talks to " + (target == null ? main.server : target));
  }

  // ---- the slots --------------------------------------------------------------------------

  /**
   * One concurrency slot: a long poll for one task on the slot's connection, the task run, its
   * result reported on the same connection asking for the next task (eager dispatch), and so on
   * while answers carry one.
   */
  private void slotLoop(Slot s) {
    try {
      Backoff.Retrier r = new Backoff.Retrier(backoff);
      while (!stopCtx.isCancelled()) {
        PolledTask task = takeBacklog();
        if (task == null) {
          route(s);
          try {
            task = poll(s);
          } catch (CancelledException e) {
            if (stopCtx.isCancelled()) return;
            continue;
          } catch (ApiException | ConnectionException e) {
            if (stopCtx.isCancelled()) return;
            String target;
            synchronized (mu) {
              target = s.target;
            }
            if (target != null && e instanceof ConnectionException) {
              // The node's address does not answer: the configured address meanwhile, at once.
              nodes.unreachable(target, ((ConnectionException) e).reason());
              continue;
            }
            Duration d = r.next();
            log(ApiException.isRetryable(e) ? "WARN" : "ERROR",
                "poll failed: " + describe(e) + "; retrying in " + Backoff.format(d));
            if (!stopCtx.sleep(d)) return;
            continue;
          }
          r.reset();
        }
        while (task != null) task = runTask(s, task);
      }
    } catch (RuntimeException | Error e) {
      log("ERROR", "slot stopped by an unexpected error: " + stack(e));
    } finally {
      release();
    }
  }

  private PolledTask takeBacklog() {
    synchronized (mu) {
      return backlog.pollFirst();
    }
  }

  /** The first task of an answer; the others (a runtime that ignores max_tasks) are queued. */
  private PolledTask firstOf(JsonElement res) {
    if (res == null || !res.isJsonObject()) return null;
    JsonElement list = res.getAsJsonObject().get("tasks");
    if (!(list instanceof JsonArray) || ((JsonArray) list).size() == 0) return null;
    JsonArray a = (JsonArray) list;
    if (a.size() > 1) {
      log("WARN", "the runtime answered " + a.size() + " tasks for max_tasks=1");
      synchronized (mu) {
        for (int i = 1; i < a.size(); i++) backlog.add(Json.fromTree(a.get(i), PolledTask.class));
      }
    }
    return Json.fromTree(a.get(0), PolledTask.class);
  }

  /** One long poll for one task; null when it ran out or its session was lost. */
  private PolledTask poll(Slot s) {
    String sess = ensureSession(stopCtx);
    Cancellation ctx = stopCtx.child();
    try {
      Transport tr;
      synchronized (mu) {
        if (!sess.equals(session)) return null; // lost between ensureSession and here
        // Its node left the live list since the slot was routed (nodesLeft missed this poll).
        if (s.target != null && !nodes.isLive(s.target)) return null;
        s.pollSession = sess;
        s.pollCtx = ctx;
        tr = s.tr;
      }
      JsonObject body = new JsonObject();
      body.addProperty("session_id", sess);
      body.addProperty("max_tasks", 1);
      body.addProperty("wait_s", pollWait.toSeconds());
      JsonElement res;
      try {
        res = tr.call(ctx, "POST", "/v1/workers/poll", null, body, pollWait.plusSeconds(15));
      } catch (ApiException e) {
        if (e.isUnknownSession()) {
          forgetSession(sess, "poll");
          return null;
        }
        throw e;
      } catch (CancelledException e) {
        // The session was found unknown elsewhere, or the slot's node left the live list.
        if (!stopCtx.isCancelled()) return null;
        throw e;
      }
      return firstOf(res);
    } finally {
      synchronized (mu) {
        s.pollSession = null;
        s.pollCtx = null;
      }
      ctx.release();
    }
  }

  /**
   * Runs one attempt and reports it; answers the next task the report's answer carried (to run
   * on this slot), or null. A report whose first try fails is retried in the background and the
   * slot freed.
   */
  private PolledTask runTask(Slot s, PolledTask task) {
    if (task == null || task.token() == null || task.token().isEmpty()) {
      log("ERROR", "poll answered a task without a token; ignoring it");
      return null;
    }
    Instant deadline = deadlineOf(task.deadlineMs());
    Inflight e = new Inflight(task);
    synchronized (mu) {
      if (inflight.containsKey(task.token())) {
        log("DEBUG", "task " + task.token() + " handed out again while it runs here; ignoring");
        return null;
      }
      inflight.put(task.token(), e);
    }
    Outcome o = execute(e, deadline);
    boolean take = !stopCtx.isCancelled();
    // The first delivery goes on the slot's connection, to the server that handed the task out.
    // To a node's own address, it is cut when that node leaves the live list (a paused server
    // would hold it until the request's timeout, past the new owner's redelivery of the attempt).
    Transport tr;
    String target;
    Cancellation cut = null;
    synchronized (mu) {
      tr = s.tr;
      target = s.target;
      if (target != null) {
        cut = abandonCtx.child();
        s.delivery = cut;
      }
    }
    if (cut != null && !nodes.isLive(target)) cut.cancel(); // left before nodesLeft could see it
    try {
      JsonElement res = send(tr, cut != null ? cut : abandonCtx, task, o, take);
      finished(task.token());
      return take ? firstOf(res) : null;
    } catch (ApiException | ConnectionException | CancelledException err) {
      // A node's own address that did not answer (it left or died): the configured address
      // reaches a live server at once, which hands the result to the execution's new owner.
      boolean atOnce = target != null && !abandonCtx.isCancelled()
          && (err instanceof ConnectionException || err instanceof CancelledException);
      if (atOnce) {
        if (err instanceof ConnectionException) {
          nodes.unreachable(target, ((ConnectionException) err).reason());
        }
        log("DEBUG", "the result of " + task.token() + " did not reach " + target + " ("
            + (err instanceof CancelledException ? "the node left" : describe(err))
            + "); sending it to " + main.server);
      }
      synchronized (mu) {
        active++;
      }
      Thread t = new Thread(() -> {
        try {
          deliver(s.home, task, o, err, atOnce);
        } finally {
          finished(task.token());
          release();
        }
      }, "orbit-deliver");
      t.setDaemon(true);
      t.start();
      return null;
    } finally {
      if (cut != null) {
        synchronized (mu) {
          if (s.delivery == cut) s.delivery = null;
        }
        cut.release();
      }
    }
  }

  private void finished(String token) {
    synchronized (mu) {
      inflight.remove(token);
    }
  }

  /** deadline_ms: epoch milliseconds, or a small value as a duration from now. */
  static Instant deadlineOf(Double v) {
    if (v == null || v <= 0) return null;
    if (v > 1e11) return Instant.ofEpochMilli(v.longValue());
    return Instant.now().plusMillis(v.longValue());
  }

  private Outcome execute(Inflight e, Instant deadline) {
    PolledTask task = e.task;
    JsonObject info = new JsonObject();
    info.addProperty("execution_id", task.executionId());
    info.addProperty("step", task.step());
    info.addProperty("attempt", task.attempt());
    info.addProperty("task", task.task());
    info.addProperty("redelivery", task.redelivery());
    log("INFO", "executing " + info);
    Task<?, ?> def = tasks.get(key(task.task(), task.contract()));
    if (def == null) {
      return new Outcome(null, new Failure("UNKNOWN_TASK",
          "worker " + workerId + " does not serve task " + task.task() + " contract "
              + task.contract(), true, Map.of()));
    }
    Attempt a = new Attempt(task.token(), task.executionId(), task.step(), task.attempt(),
        task.task(), task.contract(), task.idempotencyKey(), task.redelivery(), deadline, logger);
    ScheduledFuture<?> timer = null;
    synchronized (mu) {
      e.thread = Thread.currentThread();
      e.attempt = a;
      if (e.reason != null) { // given up on before it began (a stop's grace passed)
        a.cancelled.complete(e.reason);
        e.thread.interrupt();
      }
    }
    if (deadline != null) {
      long ms = Math.max(0, deadline.toEpochMilli() - System.currentTimeMillis());
      timer = timers.schedule(() -> cancelAttempt(task.token(), "deadline", false), ms,
          TimeUnit.MILLISECONDS);
    }
    JsonElement out = null;
    Throwable err = null;
    try {
      out = def.run(a, task.input());
    } catch (Throwable t) {
      err = t;
    } finally {
      if (timer != null) timer.cancel(false);
      synchronized (mu) {
        e.handlerDone = true;
      }
      Thread.interrupted(); // a cancellation's interrupt is the handler's, not the report's
    }
    if (err == null) {
      if (out == null) out = com.google.gson.JsonNull.INSTANCE;
      return new Outcome(out, null);
    }
    if (err instanceof TaskException) return new Outcome(null, failureOf(err));
    String reason;
    synchronized (mu) {
      reason = e.reason;
    }
    String msg = err.getMessage() == null ? err.toString() : err.getMessage();
    if ("cancel".equals(reason)) {
      return new Outcome(null, new Failure("CANCELLED",
          "task cancelled by the ORBIT runtime: " + msg, true, Map.of()));
    }
    if ("deadline".equals(reason)) {
      return new Outcome(null, new Failure("DEADLINE_EXCEEDED",
          "the attempt's deadline passed: " + msg, true, Map.of()));
    }
    if ("shutdown".equals(reason)) {
      return new Outcome(null, new Failure("WORKER_STOPPED",
          "the worker stopped before the task finished: " + msg, true, Map.of()));
    }
    return new Outcome(null, failureOf(err));
  }

  /** A handler's exception as the error object of POST /v1/tasks/fail. */
  static Failure failureOf(Throwable err) {
    if (err instanceof TaskException) {
      TaskException te = (TaskException) err;
      return new Failure(te.code(), te.getMessage() == null ? "" : te.getMessage(), te.retryable(),
          te.details() == null ? Map.of() : te.details());
    }
    Map<String, Object> details = new LinkedHashMap<>();
    details.put("type", err.getClass().getName());
    details.put("stack", clip(stack(err), 4000));
    String msg = err.getMessage() == null ? err.toString() : err.getMessage();
    return new Failure("TASK_ERROR", msg, true, details);
  }

  static String stack(Throwable t) {
    StringWriter w = new StringWriter();
    t.printStackTrace(new PrintWriter(w));
    return w.toString();
  }

  static String clip(String s, int n) {
    return s.length() <= n ? s : s.substring(0, n - 3) + "...";
  }

  /**
   * Reports a result once; with {@code take} it asks for the slot's next task in the same
   * request. A cancelled {@code ctx} ends it.
   */
  private JsonElement send(
      Transport tr, Cancellation ctx, PolledTask task, Outcome o, boolean take) {
    JsonObject body = new JsonObject();
    body.addProperty("token", task.token());
    String path = "/v1/tasks/complete";
    if (o.failure() != null) {
      path = "/v1/tasks/fail";
      body.add("error", Json.toTree(o.failure()));
    } else {
      body.add("output", o.output());
    }
    String sess = sessionId();
    if (take && sess != null) {
      body.addProperty("session_id", sess);
      body.addProperty("max_tasks", 1);
    }
    JsonElement res = tr.call(ctx, "POST", path, null, body, requestTimeout);
    JsonElement accepted = res.isJsonObject() ? res.getAsJsonObject().get("accepted") : null;
    if (accepted != null && accepted.isJsonPrimitive() && !accepted.getAsBoolean()) {
      log("INFO", "result not accepted (the step already has one) token=" + task.token()
          + " step=" + task.step());
    } else if (o.failure() != null) {
      log("INFO", "task failed execution_id=" + task.executionId() + " step=" + task.step()
          + " attempt=" + task.attempt() + " code=" + o.failure().code());
    }
    return res;
  }

  /**
   * Retries a report whose first try failed with {@code err} until it is delivered, the runtime
   * refuses it for good, or the worker gives up (a stop's grace passed). With {@code atOnce} the
   * first retry goes without a backoff (the first try went to a node that left or did not answer).
   */
  private void deliver(
      Transport tr, PolledTask task, Outcome o, RuntimeException err, boolean atOnce) {
    Backoff.Retrier r = new Backoff.Retrier(backoff);
    boolean substituted = false;
    while (true) {
      if (abandonCtx.isCancelled()) {
        log("WARN", "giving up reporting the result of " + task.token() + " (worker stopped)");
        return;
      }
      ApiException ae = err instanceof ApiException ? (ApiException) err : null;
      boolean refused =
          ae != null && (ae.status() == 400 || ae.status() == 413 || ae.status() == 422);
      if (atOnce) {
        atOnce = false;
      } else if (ApiException.isRetryable(err)) {
        Duration d = r.next();
        log("WARN", "report result failed: " + describe(err) + "; retrying in " + Backoff.format(d));
        if (!abandonCtx.sleep(d)) continue;
      } else if (refused && !substituted) {
        // A result the runtime refuses would be dropped and its attempt redelivered for ever:
        // it is reported as a small failure instead, once.
        String what = o.failure() != null ? "failure" : "output";
        String code = o.failure() != null ? "RESULT_REJECTED" : "OUTPUT_REJECTED";
        String reason = "the runtime refused the " + what + ": " + ae.code() + ": " + ae.apiMessage();
        log("ERROR", reason + " (" + task.token() + "); reporting a failure instead");
        o = new Outcome(null, new Failure(code, clip(reason, 2000), false, Map.of()));
        substituted = true;
      } else if (err instanceof CancelledException) {
        continue; // the abandon check above ends it
      } else {
        log("ERROR", "report result failed: " + describe(err) + "; dropping the result of "
            + task.token());
        return;
      }
      try {
        send(tr, abandonCtx, task, o, false);
        return;
      } catch (ApiException | ConnectionException | CancelledException e) {
        err = e;
      }
    }
  }
}
