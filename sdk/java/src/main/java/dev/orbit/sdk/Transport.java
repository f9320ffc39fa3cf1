package dev.orbit.sdk;

import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
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

  private static String reason(Throwable c) {
    if (c instanceof ConnectException) {
      return "connection refused" + (c.getMessage() == null ? "" : " (" + c.getMessage() + ")");
    }
    if (c instanceof IOException && c.getMessage() != null) return c.getMessage();
    return c.toString();
  }
}
