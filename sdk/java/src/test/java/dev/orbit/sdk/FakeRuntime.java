package dev.orbit.sdk;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.Executors;

/**
 * An in-memory fake of the runtime's worker protocol (and a few client routes) for the unit
 * tests: it records every request, hands out queued tasks, and answers scripted faults.
 */
final class FakeRuntime implements AutoCloseable {
  record Request(String method, String path, JsonObject body) {}

  /** A scripted answer: the next request to {@code path} gets {@code status} and {@code body}. */
  record Fault(String path, int status, String body) {}

  final HttpServer server;
  final Object lock = new Object();
  final List<Request> requests = new ArrayList<>();
  final Deque<JsonObject> queue = new ArrayDeque<>();
  final Deque<Fault> faults = new ArrayDeque<>();
  final Set<String> sessions = new HashSet<>();
  final Set<String> cancels = new HashSet<>();
  int registrations;
  JsonObject routeAnswer; // answer of the client routes (GET/POST /v1/executions/…)
  int routeStatus = 200;
  /** The answer of GET /v1/health (null: {}). */
  volatile JsonObject health;
  /** Another server of the same (fake) cluster whose sessions this one knows too. */
  volatile FakeRuntime peer;
  /** While set, results are held (a paused server) until it is counted down. */
  volatile java.util.concurrent.CountDownLatch holdResults;

  FakeRuntime() throws IOException {
    this(0);
  }

  FakeRuntime(int port) throws IOException {
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 0);
    server.setExecutor(Executors.newCachedThreadPool(r -> {
      Thread t = new Thread(r, "fake-runtime");
      t.setDaemon(true);
      return t;
    }));
    server.createContext("/", this::handle);
    server.start();
  }

  String url() {
    return "http://127.0.0.1:" + server.getAddress().getPort();
  }

  @Override
  public void close() {
    server.stop(0);
  }

  void enqueue(String token, String task, JsonElement input) {
    enqueue(token, task, input, null);
  }

  void enqueue(String token, String task, JsonElement input, Long deadlineMs) {
    JsonObject t = new JsonObject();
    t.addProperty("token", token);
    t.addProperty("execution_id", token.split("/")[0]);
    t.addProperty("step", "s1");
    t.addProperty("attempt", 1);
    t.addProperty("task", task);
    t.addProperty("contract", "1");
    t.add("input", input);
    t.addProperty("idempotency_key", "key-" + token);
    t.addProperty("redelivery", false);
    if (deadlineMs != null) t.addProperty("deadline_ms", deadlineMs);
    synchronized (lock) {
      queue.add(t);
      lock.notifyAll();
    }
  }

  List<Request> requests(String path) {
    synchronized (lock) {
      List<Request> out = new ArrayList<>();
      for (Request r : requests) if (r.path().equals(path)) out.add(r);
      return out;
    }
  }

  private void handle(HttpExchange ex) throws IOException {
    String path = ex.getRequestURI().getPath();
    byte[] raw = ex.getRequestBody().readAllBytes();
    JsonObject body = new JsonObject();
    if (raw.length > 0) body = JsonParser.parseString(new String(raw, StandardCharsets.UTF_8)).getAsJsonObject();
    Fault fault = null;
    synchronized (lock) {
      requests.add(new Request(ex.getRequestMethod(), ex.getRequestURI().toString(), body));
      for (Fault f : faults) {
        if (f.path().equals(path)) {
          fault = f;
          break;
        }
      }
      if (fault != null) faults.remove(fault);
    }
    if (fault != null) {
      reply(ex, fault.status(), fault.body());
      return;
    }
    String session = body.has("session_id") ? body.get("session_id").getAsString() : null;
    switch (path) {
      case "/v1/workers/register": {
        String id;
        synchronized (lock) {
          id = "sess-" + (++registrations);
          sessions.add(id);
        }
        reply(ex, 200, "{\"session_id\":\"" + id + "\"}");
        return;
      }
      case "/v1/workers/unregister":
        synchronized (lock) {
          sessions.remove(session);
        }
        reply(ex, 200, "{}");
        return;
      case "/v1/workers/heartbeat": {
        if (!known(session)) {
          unknownSession(ex);
          return;
        }
        JsonArray c = new JsonArray();
        synchronized (lock) {
          for (String t : cancels) c.add(t);
          cancels.clear();
        }
        reply(ex, 200, "{\"cancel\":" + c + "}");
        return;
      }
      case "/v1/workers/poll": {
        if (!known(session)) {
          unknownSession(ex);
          return;
        }
        long end = System.currentTimeMillis() + Math.min(1000, body.get("wait_s").getAsLong() * 1000);
        JsonObject task;
        synchronized (lock) {
          while ((task = queue.pollFirst()) == null && System.currentTimeMillis() < end && known(session)) {
            try {
              lock.wait(Math.max(1, end - System.currentTimeMillis()));
            } catch (InterruptedException e) {
              break;
            }
          }
        }
        if (!known(session)) {
          unknownSession(ex);
          return;
        }
        reply(ex, 200, "{\"tasks\":[" + (task == null ? "" : task.toString()) + "]}");
        return;
      }
      case "/v1/health": {
        JsonObject h = health;
        reply(ex, 200, h == null ? "{}" : h.toString());
        return;
      }
      case "/v1/tasks/complete":
      case "/v1/tasks/fail": {
        java.util.concurrent.CountDownLatch hold = holdResults;
        if (hold != null) {
          try {
            hold.await();
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
        }
        JsonObject next = null;
        if (session != null && known(session)) {
          synchronized (lock) {
            next = queue.pollFirst();
          }
        }
        reply(ex, 200, "{\"accepted\":true,\"tasks\":[" + (next == null ? "" : next.toString()) + "]}");
        return;
      }
      default:
        synchronized (lock) {
          reply(ex, routeStatus, routeAnswer == null ? "{}" : routeAnswer.toString());
        }
    }
  }

  private boolean known(String session) {
    synchronized (lock) {
      if (session != null && sessions.contains(session)) return true;
    }
    FakeRuntime p = peer;
    return p != null && p.known(session);
  }

  private static void unknownSession(HttpExchange ex) throws IOException {
    reply(ex, 404, "{\"error\":{\"code\":\"UNKNOWN_SESSION\",\"message\":\"unknown session\"}}");
  }

  static void reply(HttpExchange ex, int status, String body) throws IOException {
    byte[] data = body.getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("content-type", "application/json");
    ex.sendResponseHeaders(status, data.length == 0 ? -1 : data.length);
    if (data.length > 0) ex.getResponseBody().write(data);
    ex.close();
  }
}
