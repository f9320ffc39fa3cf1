package dev.orbit.sdk;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

/**
 * The SDK's unit tests, JUnit-free: {@code java -cp … dev.orbit.sdk.TestMain} runs every test,
 * prints {@code ok}/{@code FAILED} per test and {@code N passed, N failed}, and exits non-zero
 * on a failure. The worker runs against {@link FakeRuntime}.
 */
public final class TestMain {
  private TestMain() {}

  interface Body {
    void run() throws Exception;
  }

  record Case(String name, Body body) {}

  static final List<Case> CASES = new ArrayList<>();

  static void test(String name, Body body) {
    CASES.add(new Case(name, body));
  }

  static void check(boolean cond, String what) {
    if (!cond) throw new AssertionError(what);
  }

  static void eq(Object want, Object got, String what) {
    if (want == null ? got != null : !want.equals(got)) {
      throw new AssertionError(what + ": want " + want + ", got " + got);
    }
  }

  /** Waits for a condition (checked every 10 ms), failing after {@code ms}. */
  static void waitFor(BooleanSupplier cond, long ms, String what) throws InterruptedException {
    long end = System.currentTimeMillis() + ms;
    while (!cond.getAsBoolean()) {
      if (System.currentTimeMillis() > end) throw new AssertionError("timed out waiting for " + what);
      Thread.sleep(10);
    }
  }

  static JsonElement json(String s) {
    return JsonParser.parseString(s);
  }

  static final Backoff FAST = new Backoff(Duration.ofMillis(20), Duration.ofMillis(100), 2, 0.2);

  /** The log lines of the workers the tests make. */
  static final List<String> LINES = new ArrayList<>();

  static boolean logged(String part) {
    return loggedSince(0, part);
  }

  /** Whether a line from number {@code from} on (a {@link #mark()}) contains {@code part}. */
  static boolean loggedSince(int from, String part) {
    synchronized (LINES) {
      for (String l : LINES.subList(from, LINES.size())) if (l.contains(part)) return true;
      return false;
    }
  }

  /** The number of lines logged so far. */
  static int mark() {
    synchronized (LINES) {
      return LINES.size();
    }
  }

  static Worker.Builder worker(FakeRuntime rt, Task<?, ?>... tasks) {
    return worker(rt.url(), tasks);
  }

  static Worker.Builder worker(String url, Task<?, ?>... tasks) {
    List<String> lines = LINES;
    return Worker.builder()
        .server(url)
        .workerId("unit-java")
        .tasks(tasks)
        .concurrency(2)
        .pollWait(Duration.ofSeconds(1))
        .heartbeatInterval(Duration.ofMillis(100))
        .backoff(FAST)
        .logger((level, msg) -> {
          synchronized (lines) {
            lines.add(level + " " + msg);
          }
        });
  }

  record EchoIn(JsonElement value, String orderId) {}

  record EchoOut(JsonElement value, String orderId, int attempt) {}

  record Checked(int qty) implements Validated {
    @Override
    public void validate() {
      if (qty < 1) throw new IllegalArgumentException("qty must be at least 1");
    }
  }

  static final Task<EchoIn, EchoOut> ECHO = Task.of("echo", "1", EchoIn.class,
      (in, a) -> new EchoOut(in.value(), in.orderId(), a.attempt()));

  static JsonObject resultOf(FakeRuntime rt, String path, String token) {
    for (FakeRuntime.Request r : rt.requests(path)) {
      if (r.body().get("token").getAsString().equals(token)) return r.body();
    }
    return null;
  }

  /** A node of a health answer. */
  static String node(String addr, boolean live) {
    return "{\"node_id\":\"n\",\"addr\":" + (addr == null ? "null" : "\"" + addr + "\"")
        + ",\"live\":" + live + "}";
  }

  /** The health answer of a shared cluster whose live nodes are {@code addrs}. */
  static JsonObject sharedHealth(String... addrs) {
    StringBuilder b = new StringBuilder("{\"role\":\"shared\",\"nodes\":[");
    for (int i = 0; i < addrs.length; i++) b.append(i == 0 ? "" : ",").append(node(addrs[i], true));
    return json(b.append("]}").toString()).getAsJsonObject();
  }

  /** A router whose log lines go to {@code lines}, whose left nodes go to {@code left}. */
  static Nodes router(int offset, java.util.function.LongSupplier now,
      List<java.util.Set<String>> left, List<String> lines) {
    return new Nodes("http://lb:7233", (level, msg) -> lines.add(level + " " + msg),
        l -> {
          if (left != null) left.add(l);
        }, now, offset);
  }

  static {
    test("backoff grows with jitter up to its max; delays print as the log lines do", () -> {
      Backoff b = Backoff.DEFAULT;
      for (int i = 0; i < 50; i++) {
        long d0 = b.delay(0).toMillis();
        check(d0 >= 200 && d0 <= 240, "first delay " + d0);
        long d2 = b.delay(2).toMillis();
        check(d2 >= 800 && d2 <= 960, "third delay " + d2);
        check(b.delay(20).toMillis() <= 5000, "capped");
      }
      eq("0.2s", Backoff.format(Duration.ofMillis(200)), "format");
      eq("5s", Backoff.format(Duration.ofSeconds(5)), "format");
      eq("12s", Backoff.format(Duration.ofSeconds(12)), "format");
    });

    test("API errors carry the code, message and details; a non-JSON 5xx is HTTP_502", () -> {
      ApiException e = ApiException.fromResponse(503,
          "{\"error\":{\"code\":\"NOT_LEADER\",\"message\":\"not the leader\",\"leader_addr\":\"http://b\"}}"
              .getBytes(StandardCharsets.UTF_8), "POST", "/v1/workers/poll");
      eq("NOT_LEADER", e.code(), "code");
      eq("not the leader", e.apiMessage(), "message");
      eq("http://b", e.leaderAddr(), "leader");
      check(e.isRetryable() && ApiException.isRetryable(e), "5xx retryable");
      ApiException bad = ApiException.fromResponse(502, "<html>bad gateway</html>".getBytes(StandardCharsets.UTF_8), "GET", "/x");
      eq("HTTP_502", bad.code(), "code");
      check(bad.isRetryable(), "502 retryable");
      ApiException us = ApiException.fromResponse(404,
          "{\"error\":{\"code\":\"UNKNOWN_SESSION\",\"message\":\"x\"}}".getBytes(StandardCharsets.UTF_8), "POST", "/p");
      check(us.isUnknownSession() && !us.isRetryable(), "unknown session");
      check(ApiException.isRetryable(new ConnectionException("http://x", "refused", null)), "conn");
    });

    test("contracts: records map camelCase to snake_case; Validated refuses; failures map to codes", () -> {
      EchoIn in = ECHO.parseInput(json("{\"value\":{\"n\":1},\"order_id\":\"o-1\"}"));
      eq("o-1", in.orderId(), "order_id");
      eq("{\"n\":1}", in.value().toString(), "value kept as it came");
      eq("{\"value\":[1,2.5],\"order_id\":\"x\",\"attempt\":3}",
          Json.stringify(new EchoOut(json("[1,2.5]"), "x", 3)), "output");
      Task<Checked, Checked> t = Task.of("c", "1", Checked.class, (c, a) -> c);
      try {
        t.parseInput(json("{\"qty\":0}"));
        throw new AssertionError("accepted qty 0");
      } catch (ValidationException e) {
        check(e.getMessage().contains("qty must be at least 1"), e.getMessage());
      }
      Worker.Failure f = Worker.failureOf(TaskException.fail("CARD_DECLINED", "declined"));
      eq("CARD_DECLINED", f.code(), "code");
      check(!f.retryable(), "fail is not retryable");
      Worker.Failure other = Worker.failureOf(new IllegalStateException("boom"));
      eq("TASK_ERROR", other.code(), "code");
      check(other.retryable(), "retryable");
      eq("boom", other.message(), "message");
    });

    test("worker: registers, polls max_tasks 1 per slot, completes, asks for the next task in the result", () -> {
      try (FakeRuntime rt = new FakeRuntime()) {
        Worker w = worker(rt, ECHO).build();
        w.start();
        try {
          eq("sess-1", w.sessionId(), "session");
          rt.enqueue("x1/a", "echo", json("{\"value\":7,\"order_id\":\"o\"}"));
          rt.enqueue("x2/a", "echo", json("{\"value\":8,\"order_id\":\"o\"}"));
          waitFor(() -> resultOf(rt, "/v1/tasks/complete", "x2/a") != null
              && resultOf(rt, "/v1/tasks/complete", "x1/a") != null, 5000, "both results");
          JsonObject r1 = resultOf(rt, "/v1/tasks/complete", "x1/a");
          eq("{\"value\":7,\"order_id\":\"o\",\"attempt\":1}", r1.get("output").toString(), "output");
          eq("sess-1", r1.get("session_id").getAsString(), "the result names the session");
          eq(1, r1.get("max_tasks").getAsInt(), "and asks for one task");
          for (FakeRuntime.Request p : rt.requests("/v1/workers/poll")) {
            eq(1, p.body().get("max_tasks").getAsInt(), "poll max_tasks");
          }
          JsonObject reg = rt.requests("/v1/workers/register").get(0).body();
          eq("java", reg.get("runtime").getAsString(), "runtime");
          eq(2, reg.get("concurrency").getAsInt(), "concurrency");
        } finally {
          w.stop(Duration.ofSeconds(5));
        }
        eq(Worker.State.STOPPED, w.state(), "stopped");
        check(rt.sessions.isEmpty(), "unregistered");
      }
    });

    test("worker: task failures report the code, retryable and details; bad input is INVALID_INPUT", () -> {
      try (FakeRuntime rt = new FakeRuntime()) {
        Task<Checked, Checked> fail = Task.of("fail", "1", Checked.class, (c, a) -> {
          throw new TaskException("OUT_OF_STOCK", "none left", false, Map.of("qty", c.qty()));
        });
        Worker w = worker(rt, fail).build();
        w.start();
        try {
          rt.enqueue("f1/a", "fail", json("{\"qty\":2}"));
          rt.enqueue("f2/a", "fail", json("{\"qty\":0}"));
          waitFor(() -> resultOf(rt, "/v1/tasks/fail", "f2/a") != null
              && resultOf(rt, "/v1/tasks/fail", "f1/a") != null, 5000, "two failures");
          JsonObject e1 = resultOf(rt, "/v1/tasks/fail", "f1/a").getAsJsonObject("error");
          eq("OUT_OF_STOCK", e1.get("code").getAsString(), "code");
          eq(false, e1.get("retryable").getAsBoolean(), "retryable");
          eq(2, e1.getAsJsonObject("details").get("qty").getAsInt(), "details");
          JsonObject e2 = resultOf(rt, "/v1/tasks/fail", "f2/a").getAsJsonObject("error");
          eq("INVALID_INPUT", e2.get("code").getAsString(), "code");
        } finally {
          w.stop(Duration.ofSeconds(5));
        }
      }
    });

    test("worker: 5xx and non-JSON answers are retried with backoff; a 401 at start is thrown", () -> {
      try (FakeRuntime rt = new FakeRuntime()) {
        rt.faults.add(new FakeRuntime.Fault("/v1/workers/register", 503,
            "{\"error\":{\"code\":\"NOT_LEADER\",\"message\":\"no\"}}"));
        rt.faults.add(new FakeRuntime.Fault("/v1/workers/register", 502, "bad gateway"));
        Worker w = worker(rt, ECHO).build();
        w.start();
        eq(3, rt.requests("/v1/workers/register").size(), "registration tries");
        rt.faults.add(new FakeRuntime.Fault("/v1/tasks/complete", 500, "{}"));
        rt.enqueue("r1/a", "echo", json("{\"value\":1}"));
        waitFor(() -> rt.requests("/v1/tasks/complete").size() >= 2, 5000, "the result retried");
        w.stop(Duration.ofSeconds(5));
      }
      try (FakeRuntime rt = new FakeRuntime()) {
        rt.faults.add(new FakeRuntime.Fault("/v1/workers/register", 401,
            "{\"error\":{\"code\":\"UNAUTHORIZED\",\"message\":\"token\"}}"));
        Worker w = worker(rt, ECHO).build();
        try {
          w.start();
          throw new AssertionError("start did not throw");
        } catch (ApiException e) {
          eq("UNAUTHORIZED", e.code(), "code");
        }
        eq(Worker.State.STOPPED, w.state(), "stopped");
      }
    });

    test("worker: 404 UNKNOWN_SESSION registers again, once, and serves on", () -> {
      try (FakeRuntime rt = new FakeRuntime()) {
        Worker w = worker(rt, ECHO).build();
        w.start();
        try {
          synchronized (rt.lock) {
            rt.sessions.clear();
            rt.lock.notifyAll();
          }
          waitFor(() -> "sess-2".equals(w.sessionId()), 5000, "a new session");
          rt.enqueue("u1/a", "echo", json("{\"value\":1}"));
          waitFor(() -> resultOf(rt, "/v1/tasks/complete", "u1/a") != null, 5000, "served");
          eq(2, rt.registrations, "registrations");
        } finally {
          w.stop(Duration.ofSeconds(5));
        }
      }
    });

    test("worker: a heartbeat's cancel interrupts the handler, reported as CANCELLED", () -> {
      try (FakeRuntime rt = new FakeRuntime()) {
        CountDownLatch began = new CountDownLatch(1);
        Task<JsonObject, JsonObject> hold = Task.of("hold", "1", JsonObject.class, (in, a) -> {
          began.countDown();
          a.awaitCancellation();
          return in;
        });
        Worker w = worker(rt, hold).build();
        w.start();
        try {
          rt.enqueue("h1/a", "hold", json("{}"));
          check(began.await(5, TimeUnit.SECONDS), "began");
          eq(List.of("h1/a"), w.runningTokens(), "running");
          synchronized (rt.lock) {
            rt.cancels.add("h1/a");
          }
          waitFor(() -> resultOf(rt, "/v1/tasks/fail", "h1/a") != null, 5000, "the failure");
          eq("CANCELLED", resultOf(rt, "/v1/tasks/fail", "h1/a").getAsJsonObject("error")
              .get("code").getAsString(), "code");
        } finally {
          w.stop(Duration.ofSeconds(5));
        }
      }
    });

    test("worker: a graceful stop finishes the running task and reports it; a short grace gives it back", () -> {
      try (FakeRuntime rt = new FakeRuntime()) {
        CountDownLatch began = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        Task<JsonObject, JsonObject> slow = Task.of("slow", "1", JsonObject.class, (in, a) -> {
          began.countDown();
          release.await();
          return in;
        });
        Worker w = worker(rt, slow).build();
        w.start();
        rt.enqueue("g1/a", "slow", json("{\"k\":1}"));
        check(began.await(5, TimeUnit.SECONDS), "began");
        Thread stopper = new Thread(() -> w.stop(Duration.ofSeconds(10)));
        stopper.start();
        waitFor(() -> w.state() == Worker.State.STOPPING, 5000, "stopping");
        release.countDown();
        stopper.join(10000);
        eq(Worker.State.STOPPED, w.state(), "stopped");
        JsonObject r = resultOf(rt, "/v1/tasks/complete", "g1/a");
        check(r != null, "the result was reported");
        check(!r.has("session_id"), "no next task asked for while stopping");
        check(rt.sessions.isEmpty(), "unregistered");
      }
      try (FakeRuntime rt = new FakeRuntime()) {
        CountDownLatch began = new CountDownLatch(1);
        Task<JsonObject, JsonObject> stuck = Task.of("stuck", "1", JsonObject.class, (in, a) -> {
          began.countDown();
          a.awaitCancellation();
          return in;
        });
        Worker w = worker(rt, stuck).build();
        w.start();
        rt.enqueue("g2/a", "stuck", json("{}"));
        check(began.await(5, TimeUnit.SECONDS), "began");
        long t0 = System.nanoTime();
        w.stop(Duration.ofMillis(300));
        check(System.nanoTime() - t0 < 5_000_000_000L, "the grace bounded the stop");
        check(rt.sessions.isEmpty(), "unregistered: the attempt goes back to the runtime");
      }
    });

    test("worker: a passed deadline interrupts the handler, reported as DEADLINE_EXCEEDED", () -> {
      try (FakeRuntime rt = new FakeRuntime()) {
        Task<JsonObject, JsonObject> hold = Task.of("hold", "1", JsonObject.class, (in, a) -> {
          a.awaitCancellation();
          return in;
        });
        Worker w = worker(rt, hold).build();
        w.start();
        try {
          rt.enqueue("d1/a", "hold", json("{}"), System.currentTimeMillis() + 300);
          waitFor(() -> resultOf(rt, "/v1/tasks/fail", "d1/a") != null, 5000, "the failure");
          eq("DEADLINE_EXCEEDED", resultOf(rt, "/v1/tasks/fail", "d1/a").getAsJsonObject("error")
              .get("code").getAsString(), "code");
        } finally {
          w.stop(Duration.ofSeconds(5));
        }
      }
    });

    test("worker: an output the runtime refuses (422) is reported as OUTPUT_REJECTED instead", () -> {
      try (FakeRuntime rt = new FakeRuntime()) {
        rt.faults.add(new FakeRuntime.Fault("/v1/tasks/complete", 422,
            "{\"error\":{\"code\":\"OUTPUT_TOO_LARGE\",\"message\":\"too big\"}}"));
        Worker w = worker(rt, ECHO).build();
        w.start();
        try {
          rt.enqueue("o1/a", "echo", json("{\"value\":1}"));
          waitFor(() -> resultOf(rt, "/v1/tasks/fail", "o1/a") != null, 5000, "the failure");
          JsonObject e = resultOf(rt, "/v1/tasks/fail", "o1/a").getAsJsonObject("error");
          eq("OUTPUT_REJECTED", e.get("code").getAsString(), "code");
          eq(false, e.get("retryable").getAsBoolean(), "retryable");
          check(e.get("message").getAsString().contains("OUTPUT_TOO_LARGE"), e.toString());
        } finally {
          w.stop(Duration.ofSeconds(5));
        }
      }
    });

    test("worker: connection refused is retried with backoff until the runtime listens", () -> {
      int port;
      try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1,
          java.net.InetAddress.getByName("127.0.0.1"))) {
        port = s.getLocalPort();
      }
      Worker w = worker("http://127.0.0.1:" + port, ECHO).build();
      Thread starter = new Thread(w::start);
      starter.start();
      waitFor(() -> logged("register failed: cannot reach ORBIT runtime at http://127.0.0.1:" + port),
          5000, "a refused registration logged");
      try (FakeRuntime rt = new FakeRuntime(port)) {
        starter.join(5000);
        eq(Worker.State.RUNNING, w.state(), "running");
        rt.enqueue("c1/a", "echo", json("{\"value\":1}"));
        waitFor(() -> resultOf(rt, "/v1/tasks/complete", "c1/a") != null, 5000, "served");
        w.stop(Duration.ofSeconds(5));
      }
    });

    test("nodes: the live shared nodes' http(s) addresses, sorted, once each; else none", () -> {
      String nodes = "[" + node("http://b:7233/", true) + "," + node("http://a:7233", true) + ","
          + node("http://c:7233", false) + "," + node(null, true) + "," + node("not a url", true)
          + "," + node("ftp://d:21", true) + "," + node("https://a:7233", true) + ","
          + node("http://a:7233", true) + ",{\"addr\":\"http://e:1\",\"live\":\"true\"},"
          + "{\"addr\":7,\"live\":true},5]";
      eq(List.of("http://a:7233", "http://b:7233", "https://a:7233"),
          Nodes.liveAddresses(json("{\"role\":\"shared\",\"nodes\":" + nodes + "}")), "shared");
      // Anything but a shared cluster: every slot stays on the configured address.
      for (String role : new String[] {"\"single\"", "\"leader\"", "\"standby\"", "null", "1"}) {
        eq(List.of(), Nodes.liveAddresses(json("{\"role\":" + role + ",\"nodes\":" + nodes + "}")),
            role);
      }
      eq(List.of(), Nodes.liveAddresses(json("{\"nodes\":" + nodes + "}")), "no role");
      eq(List.of(), Nodes.liveAddresses(json("{\"role\":\"shared\"}")), "no nodes");
      eq(List.of(), Nodes.liveAddresses(json("{\"role\":\"shared\",\"nodes\":{}}")), "not a list");
      eq(List.of(), Nodes.liveAddresses(json("\"ok\"")), "a string");
      eq(List.of(), Nodes.liveAddresses(null), "nothing");
    });

    test("nodes: slots spread evenly over the live nodes; none known, the configured address", () -> {
      Nodes n = router(5, () -> 0, null, new ArrayList<>());
      eq(null, n.targetFor(0), "no nodes: the configured address");
      n.update(List.of("http://a", "http://b", "http://c"));
      Map<String, Integer> count = new java.util.TreeMap<>();
      for (int i = 0; i < 8; i++) count.merge(String.valueOf(n.targetFor(i)), 1, Integer::sum);
      eq(java.util.Set.of("http://a", "http://b", "http://c"), count.keySet(), "every node");
      List<Integer> sizes = new ArrayList<>(count.values());
      java.util.Collections.sort(sizes);
      eq(List.of(2, 3, 3), sizes, "8 slots over 3 nodes");
      // Two slots on two nodes: one each, whatever the offset.
      for (int offset : new int[] {0, 1, 7, 1023}) {
        Nodes two = router(offset, () -> 0, null, new ArrayList<>());
        two.update(List.of("http://a", "http://b"));
        check(!two.targetFor(0).equals(two.targetFor(1)), "offset " + offset);
      }
      // A worker's own offset is random: over many workers, slot 0 starts on every node.
      java.util.Set<String> firsts = new java.util.HashSet<>();
      for (int i = 0; i < 200; i++) {
        Nodes r = new Nodes("http://lb:7233", (l, m) -> {}, left -> {});
        r.update(List.of("http://a", "http://b"));
        firsts.add(r.targetFor(0));
      }
      eq(2, firsts.size(), "slot 0's node over 200 workers");
    });

    test("nodes: a node that did not answer is left out for 10 s, then tried again", () -> {
      long[] now = {1_000};
      List<String> lines = new ArrayList<>();
      Nodes n = router(0, () -> now[0], null, lines);
      n.update(List.of("http://a", "http://b"));
      eq("http://b", n.targetFor(1), "slot 1");
      n.unreachable("http://b", "connection refused");
      n.unreachable("http://b", "connection refused"); // logged once
      eq(null, n.targetFor(1), "slot 1 meanwhile");
      eq(null, n.targetFor(3), "slot 3 meanwhile");
      eq("http://a", n.targetFor(0), "slot 0 stays");
      now[0] += Nodes.UNREACHABLE_MS - 1;
      eq(null, n.targetFor(1), "slot 1 just before the window ends");
      now[0] += 1;
      eq("http://b", n.targetFor(1), "slot 1 after the window");
      eq("http://b", n.targetFor(3), "slot 3 after the window");
      long warned = lines.stream().filter(l -> l.equals("WARN node http://b did not answer "
          + "(connection refused); its slots use http://lb:7233 for 10 s")).count();
      eq(1L, warned, "warnings in " + lines);
      // Failing again after the window: left out again (and logged again).
      n.unreachable("http://b", "timed out after 10s");
      eq(null, n.targetFor(1), "slot 1 left out again");
      check(lines.get(lines.size() - 1).contains("did not answer (timed out after 10s)"), "again");
    });

    test("nodes: the slots of nodes that left the live list are told at once", () -> {
      List<java.util.Set<String>> left = new ArrayList<>();
      List<String> lines = new ArrayList<>();
      Nodes n = router(0, () -> 0, left, lines);
      n.update(List.of("http://a", "http://b", "http://c"));
      n.update(List.of("http://a", "http://b", "http://c")); // unchanged: nothing
      eq(1, lines.size(), "one line for one change: " + lines);
      eq(List.of(), left, "nothing left yet");
      n.update(List.of("http://a", "http://c", "http://d"));
      eq(List.of(java.util.Set.of("http://b")), left, "b left");
      eq(List.of("http://a", "http://c", "http://d"), n.addresses(), "addresses");
      check(!n.isLive("http://b") && n.isLive("http://d"), "isLive");
      n.update(List.of());
      eq(java.util.Set.of("http://a", "http://c", "http://d"), left.get(1), "all left");
      eq(null, n.targetFor(0), "the configured address");
      eq(List.of("INFO slots spread over 3 node(s): http://a, http://b, http://c",
          "INFO slots spread over 3 node(s): http://a, http://c, http://d",
          "INFO slots use the configured address"), lines, "lines");
    });

    test("worker: in a shared cluster, the slots poll every live node and report to it", () -> {
      try (FakeRuntime one = new FakeRuntime(); FakeRuntime two = new FakeRuntime()) {
        two.peer = one;
        one.health = sharedHealth(one.url(), two.url() + "/");
        Worker w = worker(one, ECHO).concurrency(4).nodeRefresh(Duration.ofMillis(50)).build();
        int from = mark();
        w.start();
        try {
          List<String> both = new ArrayList<>(List.of(one.url(), two.url()));
          java.util.Collections.sort(both);
          eq(both, w.nodeAddresses(), "nodes read before the slots poll");
          check(loggedSince(from, "INFO orbit slots spread over 2 node(s): " + String.join(", ", both)),
              "the spread line");
          waitFor(() -> !two.requests("/v1/workers/poll").isEmpty()
              && !one.requests("/v1/workers/poll").isEmpty(), 5000, "polls on both");
          two.enqueue("n2/a", "echo", json("{\"value\":2}"));
          waitFor(() -> resultOf(two, "/v1/tasks/complete", "n2/a") != null, 5000, "n2's result");
          eq(null, resultOf(one, "/v1/tasks/complete", "n2/a"), "nothing on the other");
          one.enqueue("n1/a", "echo", json("{\"value\":1}"));
          waitFor(() -> resultOf(one, "/v1/tasks/complete", "n1/a") != null, 5000, "n1's result");
          eq(null, resultOf(two, "/v1/tasks/complete", "n1/a"), "nothing on the other");
          eq(1, one.requests("/v1/workers/register").size(), "registered on the configured address");
          eq(0, two.requests("/v1/workers/register").size() + two.requests("/v1/workers/heartbeat")
              .size() + two.requests("/v1/health").size(), "nothing else on the node");
          waitFor(() -> one.requests("/v1/health").size() >= 3, 5000, "the nodes read again");
        } finally {
          w.stop(Duration.ofSeconds(5));
        }
        eq(0, two.requests("/v1/workers/unregister").size(), "unregistered on the configured one");
        check(one.sessions.isEmpty(), "unregistered");
      }
    });

    test("worker: spreadOverNodes(false) keeps every slot on the configured address", () -> {
      try (FakeRuntime one = new FakeRuntime(); FakeRuntime two = new FakeRuntime()) {
        two.peer = one;
        one.health = sharedHealth(one.url(), two.url());
        Worker w = worker(one, ECHO).concurrency(4).spreadOverNodes(false).build();
        w.start();
        try {
          one.enqueue("off/a", "echo", json("{\"value\":1}"));
          waitFor(() -> resultOf(one, "/v1/tasks/complete", "off/a") != null, 5000, "result");
          eq(List.of(), w.nodeAddresses(), "no nodes");
          eq(0, one.requests("/v1/health").size(), "health not read");
          eq(0, two.requests.size(), "nothing on the other node");
        } finally {
          w.stop(Duration.ofSeconds(5));
        }
      }
    });

    test("worker: a node whose address refuses is left out; its slots use the configured one", () -> {
      int port;
      try (java.net.ServerSocket s = new java.net.ServerSocket(0, 1,
          java.net.InetAddress.getByName("127.0.0.1"))) {
        port = s.getLocalPort();
      }
      String dead = "http://127.0.0.1:" + port;
      try (FakeRuntime one = new FakeRuntime()) {
        one.health = sharedHealth(one.url(), dead);
        Worker w = worker(one, ECHO).concurrency(2).nodeRefresh(Duration.ofMillis(50)).build();
        int from = mark();
        w.start();
        try {
          waitFor(() -> loggedSince(from, "WARN orbit node " + dead
              + " did not answer (connection refused"), 5000, "the unreachable warning");
          check(loggedSince(from, "its slots use " + one.url() + " for 10 s"), "for 10 s");
          for (int i = 0; i < 4; i++) one.enqueue("d" + i + "/a", "echo", json("{\"value\":1}"));
          waitFor(() -> {
            for (int i = 0; i < 4; i++) {
              if (resultOf(one, "/v1/tasks/complete", "d" + i + "/a") == null) return false;
            }
            return true;
          }, 5000, "every result");
          check(!loggedSince(from, "poll failed"), "no backoff for an unreachable node");
        } finally {
          w.stop(Duration.ofSeconds(5));
        }
      }
    });

    test("worker: a result held by a node that leaves is cut and sent to the configured one", () -> {
      try (FakeRuntime one = new FakeRuntime(); FakeRuntime two = new FakeRuntime()) {
        two.peer = one;
        one.health = sharedHealth(one.url(), two.url());
        CountDownLatch paused = new CountDownLatch(1);
        two.holdResults = paused;
        Worker w = worker(one, ECHO).concurrency(2).nodeRefresh(Duration.ofMillis(50))
            .requestTimeout(Duration.ofSeconds(60)).build();
        int from = mark();
        w.start();
        try {
          two.enqueue("h1/a", "echo", json("{\"value\":1}"));
          waitFor(() -> resultOf(two, "/v1/tasks/complete", "h1/a") != null, 5000,
              "the result on its way to node two");
          check(resultOf(one, "/v1/tasks/complete", "h1/a") == null, "not yet on one");
          long t0 = System.nanoTime();
          one.health = sharedHealth(one.url()); // two leaves the live list
          waitFor(() -> resultOf(one, "/v1/tasks/complete", "h1/a") != null, 5000,
              "the result sent to the configured address");
          long ms = (System.nanoTime() - t0) / 1_000_000;
          check(ms < 3000, "took " + ms + " ms");
          check(loggedSince(from, "INFO orbit slots spread over 1 node(s): " + one.url()),
              "the new list");
          check(!loggedSince(from, "report result failed"), "no backoff");
          eq(List.of(one.url()), w.nodeAddresses(), "addresses");
        } finally {
          paused.countDown();
          w.stop(Duration.ofSeconds(5));
        }
      }
    });

    test("client: start, get, signal, query, cancel, history pages, pending, API codes", () -> {
      try (FakeRuntime rt = new FakeRuntime()) {
        Client c = new Client(rt.url(), "tok");
        rt.routeAnswer = json("{\"execution_id\":\"o-1\",\"workflow\":\"W\",\"status\":\"completed\","
            + "\"output\":{\"total\":3},\"created_ms\":5}").getAsJsonObject();
        Execution x = c.start("W", null, Map.of("a", 1), "o-1");
        eq("o-1", x.executionId(), "id");
        eq(5L, x.createdMs(), "created_ms");
        JsonObject start = rt.requests("/v1/executions").get(0).body();
        eq("{\"workflow\":\"W\",\"input\":{\"a\":1},\"execution_id\":\"o-1\"}", start.toString(), "body");
        record Total(int total) {}
        eq(new Total(3), c.result("o-1", Duration.ofSeconds(5), Total.class), "result");
        rt.routeAnswer = json("{\"seq\":9}").getAsJsonObject();
        eq(9L, c.signal("o-1", "go now", Map.of()), "signal seq");
        check(rt.requests("/v1/executions/o-1/signals/go%20now").size() == 1, "signal path escaped");
        rt.routeAnswer = json("{\"result\":{\"total\":4}}").getAsJsonObject();
        eq(new Total(4), c.query("o-1", "q", Total.class), "query");
        rt.routeAnswer = json("{\"events\":[{\"seq\":1,\"type\":\"ExecutionStarted\",\"time_ms\":2}],"
            + "\"next_after_seq\":null}").getAsJsonObject();
        List<HistoryEvent> events = c.historyEvents("o-1");
        eq(1, events.size(), "events");
        eq("ExecutionStarted", events.get(0).type(), "type");
        rt.routeAnswer = json("{\"items\":[]}").getAsJsonObject();
        check(c.pending("o-1").has("items"), "pending");
        rt.routeAnswer = json("{\"execution_id\":\"o-1\",\"status\":\"failed\","
            + "\"error\":{\"code\":\"CARD_DECLINED\",\"message\":\"no\"}}").getAsJsonObject();
        try {
          c.result("o-1", Duration.ofSeconds(5), Total.class);
          throw new AssertionError("no ExecutionFailedException");
        } catch (ExecutionFailedException e) {
          eq("CARD_DECLINED", e.execution().error().code(), "code");
        }
        rt.routeStatus = 404;
        rt.routeAnswer = json("{\"error\":{\"code\":\"UNKNOWN_EXECUTION\",\"message\":\"none\"}}").getAsJsonObject();
        try {
          c.cancel("nope", "why");
          throw new AssertionError("no ApiException");
        } catch (ApiException e) {
          check(e.hasCode(ApiException.UNKNOWN_EXECUTION) && e.status() == 404, e.getMessage());
        }
      }
      try {
        new Client("ftp://x");
        throw new AssertionError("accepted ftp://");
      } catch (IllegalArgumentException expected) {
        // an http(s) URL is required
      }
    });
  }

  public static void main(String[] args) {
    int passed = 0;
    int failed = 0;
    for (Case c : CASES) {
      long t0 = System.nanoTime();
      try {
        c.body().run();
        passed++;
        System.out.printf("ok      %s (%d ms)%n", c.name(), (System.nanoTime() - t0) / 1_000_000);
      } catch (Throwable t) {
        failed++;
        System.out.printf("FAILED  %s%n%s%n", c.name(), Worker.stack(t));
      }
    }
    System.out.printf("%d passed, %d failed%n", passed, failed);
    System.out.flush();
    System.exit(failed == 0 ? 0 : 1);
  }
}
