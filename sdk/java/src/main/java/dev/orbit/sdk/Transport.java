package dev.orbit.sdk;

import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Sends JSON requests with a bearer token to one ORBIT runtime over an HTTP/1.1 connection pool
 * of its own, turning {@code {"error":{…}}} answers into {@link ApiException} and network
 * failures into {@link ConnectionException}. A worker gives one to each slot, so a slot's poll,
 * result and next task travel on one connection (behind a balancer that spreads connections over
 * the servers of a shared cluster, they reach the same server).
 */
final class Transport {
  final String server;
  private final String token;
  private final HttpClient http;

  Transport(String server, String token, HttpClient http) {
    this.server = checkServer(server);
    this.token = token == null || token.isEmpty() ? null : token;
    this.http = http != null ? http : newHttpClient();
  }

  /** The same token and connection pool, to another address (a node of a shared cluster). */
  Transport at(String other) {
    return new Transport(other, token, http);
  }

  static HttpClient newHttpClient() {
    return HttpClient.newBuilder()
        .version(HttpClient.Version.HTTP_1_1)
        .proxy(HttpClient.Builder.NO_PROXY)
        .connectTimeout(Duration.ofSeconds(10))
        .build();
  }

  static String checkServer(String server) {
    String s = server == null ? "" : server.strip();
    while (s.endsWith("/")) s = s.substring(0, s.length() - 1);
    if (s.isEmpty()) throw new IllegalArgumentException("orbit: the server address is required");
    try {
      URI u = URI.create(s);
      if (!("http".equals(u.getScheme()) || "https".equals(u.getScheme())) || u.getHost() == null) {
        throw new IllegalArgumentException();
      }
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "orbit: the server address \"" + server + "\" is not an http(s) URL");
    }
    return s;
  }

  static String query(Map<String, String> q) {
    if (q == null || q.isEmpty()) return "";
    StringBuilder b = new StringBuilder();
    for (Map.Entry<String, String> e : q.entrySet()) {
      b.append(b.length() == 0 ? '?' : '&')
          .append(URLEncoder.encode(e.getKey(), StandardCharsets.UTF_8))
          .append('=')
          .append(URLEncoder.encode(e.getValue(), StandardCharsets.UTF_8));
    }
    return b.toString();
  }

  /**
   * Sends one request; {@code timeout} (null: none) bounds it. A cancelled {@code ctx} (null:
   * none) ends it with {@link CancelledException}. Answers the body as JSON (JsonNull when empty).
   */
  JsonElement call(
      Cancellation ctx, String method, String path, Map<String, String> q, Object body,
      Duration timeout) {
    HttpRequest.Builder rb =
        HttpRequest.newBuilder(URI.create(server + path + query(q)))
            .header("accept", "application/json");
    if (timeout != null) rb.timeout(timeout);
    if (token != null) rb.header("authorization", "Bearer " + token);
    if (body != null) {
      rb.header("content-type", "application/json");
      rb.method(method, HttpRequest.BodyPublishers.ofString(Json.stringify(body)));
    } else {
      rb.method(method, HttpRequest.BodyPublishers.noBody());
    }
    if (ctx != null && ctx.isCancelled()) throw new CancelledException();
    CompletableFuture<HttpResponse<byte[]>> f;
    try {
      f = http.sendAsync(rb.build(), HttpResponse.BodyHandlers.ofByteArray());
    } catch (RuntimeException e) {
      throw new ConnectionException(server, String.valueOf(e.getMessage()), e);
    }
    Runnable off = ctx == null ? () -> {} : ctx.onCancel(() -> f.cancel(true));
    HttpResponse<byte[]> res;
    try {
      res =
          timeout == null
              ? f.get()
              : f.get(timeout.toMillis() + 5000, TimeUnit.MILLISECONDS);
    } catch (CancellationException e) {
      throw new CancelledException();
    } catch (InterruptedException e) {
      f.cancel(true);
      Thread.currentThread().interrupt();
      throw new CancelledException();
    } catch (TimeoutException e) {
      f.cancel(true);
      throw new ConnectionException(server, "timed out after " + Backoff.format(timeout), e);
    } catch (ExecutionException e) {
      if (ctx != null && ctx.isCancelled()) throw new CancelledException();
      Throwable c = e.getCause() == null ? e : e.getCause();
      if (c instanceof HttpTimeoutException) {
        throw new ConnectionException(server, "timed out after " + Backoff.format(timeout), c);
      }
      throw new ConnectionException(server, reason(c), c);
    } finally {
      off.run();
    }
    if (ctx != null && ctx.isCancelled() && res.statusCode() >= 300) throw new CancelledException();
    byte[] data = res.body() == null ? new byte[0] : res.body();
    int status = res.statusCode();
    if (status < 200 || status > 299) throw ApiException.fromResponse(status, data, method, path);
    String text = new String(data, StandardCharsets.UTF_8);
    if (text.isBlank()) return JsonNull.INSTANCE;
    try {
      return JsonParser.parseString(text);
    } catch (RuntimeException e) {
      throw new ApiException(
          status, ApiException.INVALID_RESPONSE,
          "the ORBIT runtime answered " + method + " " + path
              + " with a body that is not the JSON expected: " + e.getMessage(),
          null, text, method, path);
    }
  }

  private static final java.util.concurrent.atomic.AtomicBoolean WARM =
      new java.util.concurrent.atomic.AtomicBoolean();

  /**
   * Once per JVM: one request, through a client of its own, to a loopback socket that answers 503
   * (and never to the runtime). It loads the classes of the whole request and error path, so that
   * a cold JVM on a busy machine does not stretch the first retry's pause by hundreds of
   * milliseconds. Errors are ignored; it takes at most about 2 s.
   */
  static void warmUp() {
    if (!WARM.compareAndSet(false, true)) return;
    try (java.net.ServerSocket ss =
        new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      ss.setSoTimeout(2000);
      Thread answer = new Thread(() -> {
        try (java.net.Socket sock = ss.accept()) {
          sock.setSoTimeout(2000);
          java.io.InputStream in = sock.getInputStream();
          StringBuilder head = new StringBuilder();
          while (!head.toString().endsWith("\r\n\r\n")) {
            int b = in.read();
            if (b < 0) return;
            head.append((char) b);
          }
          java.util.regex.Matcher m = java.util.regex.Pattern
              .compile("(?i)content-length:\\s*(\\d+)").matcher(head);
          if (m.find()) in.readNBytes(Integer.parseInt(m.group(1)));
          byte[] body = "{\"error\":{\"code\":\"NOT_LEADER\",\"message\":\"warm-up\"}}"
              .getBytes(StandardCharsets.UTF_8);
          String res = "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
              + "content-length: " + body.length + "\r\nconnection: close\r\n\r\n";
          sock.getOutputStream().write(res.getBytes(StandardCharsets.US_ASCII));
          sock.getOutputStream().write(body);
          sock.getOutputStream().flush();
        } catch (IOException | RuntimeException ignored) {
          // a warm-up only
        }
      }, "orbit-warm-up");
      answer.setDaemon(true);
      answer.start();
      Transport t = new Transport("http://127.0.0.1:" + ss.getLocalPort(), "warm-up", null);
      JsonObject body = new JsonObject();
      body.addProperty("warm_up", true);
      try {
        t.call(new Cancellation(), "POST", "/v1/workers/register", Map.of("q", "1"), body,
            Duration.ofSeconds(2));
      } catch (ApiException | ConnectionException | CancelledException expected) {
        // the 503 it asked for
      }
      answer.join(2000);
    } catch (IOException | RuntimeException ignored) {
      // a warm-up only
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private static String reason(Throwable c) {
    if (c instanceof ConnectException) {
      return "connection refused" + (c.getMessage() == null ? "" : " (" + c.getMessage() + ")");
    }
    if (c instanceof IOException && c.getMessage() != null) return c.getMessage();
    return c.toString();
  }
}
