package dev.orbit.sdk;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import java.net.URI;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.BiConsumer;
import java.util.function.Consumer;
import java.util.function.LongSupplier;

/**
 * The worker's router: in a cluster in shared mode, which server each slot talks to.
 *
 * <p>Every server of a shared cluster accepts every request, and one whose poll hands out a task
 * prefers the executions it owns; the result then goes back on the same connection, to the owner.
 * The worker reads {@code /v1/health} of the address it was given, learns the live servers and
 * their advertised addresses ({@code nodes[].addr}), and spreads its slots over them: slot
 * {@code i} talks to node {@code (i + offset) % n}, the offset random per worker. A node whose address does
 * not answer is left out for {@link #UNREACHABLE_MS} (its slots use the configured address
 * meanwhile); a node that leaves the live list has its slots told at once ({@code onLeft}: their
 * polls end and the results on their way to it go to the configured address instead). A single
 * server, a standby cluster or a health answer without addresses keeps every slot on the
 * configured address. The TypeScript SDK's {@code worker/nodes.ts} and the Python SDK's
 * {@code _worker/nodes.py} do the same.
 */
final class Nodes {
  /** How long a node whose address failed is left out before its slots try it again. */
  static final long UNREACHABLE_MS = 10_000;

  private final String server;
  private final BiConsumer<String, String> log;
  private final Consumer<Set<String>> onLeft;
  private final LongSupplier now;
  private final int offset;
  private List<String> addrs = List.of();
  private final Map<String, Long> unreachable = new HashMap<>();

  /**
   * @param server the configured address (named in the log lines)
   * @param log receives a level and a line
   * @param onLeft called (outside this router's lock) with the addresses that left the live list
   * @param now the clock of the unreachable window, in milliseconds
   * @param offset where slot 0 starts (random per worker; tests fix it)
   */
  Nodes(String server, BiConsumer<String, String> log, Consumer<Set<String>> onLeft,
      LongSupplier now, int offset) {
    this.server = server;
    this.log = log;
    this.onLeft = onLeft;
    this.now = now;
    this.offset = offset;
  }

  Nodes(String server, BiConsumer<String, String> log, Consumer<Set<String>> onLeft) {
    this(server, log, onLeft, () -> System.nanoTime() / 1_000_000,
        ThreadLocalRandom.current().nextInt(1024));
  }

  /**
   * The live nodes' advertised addresses ({@code http:}/{@code https:} URLs, without a trailing
   * {@code /}) of a health answer of a shared cluster, sorted, once each; empty for anything
   * else.
   */
  static List<String> liveAddresses(JsonElement health) {
    if (health == null || !health.isJsonObject()) return List.of();
    JsonObject h = health.getAsJsonObject();
    if (!isString(h.get("role")) || !"shared".equals(h.get("role").getAsString())) return List.of();
    if (!(h.get("nodes") instanceof JsonArray)) return List.of();
    TreeSet<String> out = new TreeSet<>();
    for (JsonElement n : h.getAsJsonArray("nodes")) {
      if (!n.isJsonObject()) continue;
      JsonElement live = n.getAsJsonObject().get("live");
      JsonElement addr = n.getAsJsonObject().get("addr");
      if (live == null || !live.isJsonPrimitive() || !live.getAsJsonPrimitive().isBoolean()
          || !live.getAsBoolean() || !isString(addr)) {
        continue;
      }
      String a = addr.getAsString();
      try {
        URI u = new URI(a);
        if (!("http".equals(u.getScheme()) || "https".equals(u.getScheme()))
            || u.getHost() == null) {
          continue;
        }
      } catch (java.net.URISyntaxException e) {
        continue;
      }
      while (a.endsWith("/")) a = a.substring(0, a.length() - 1);
      out.add(a);
    }
    return List.copyOf(out);
  }

  private static boolean isString(JsonElement e) {
    return e instanceof JsonPrimitive && ((JsonPrimitive) e).isString();
  }

  /** The live nodes' addresses as last read (empty: every slot uses the configured address). */
  synchronized List<String> addresses() {
    return addrs;
  }

  /** Whether {@code addr} is in the live list. */
  synchronized boolean isLive(String addr) {
    return addrs.contains(addr);
  }

  /** Takes a new live list; the slots of nodes that left it are told at once. */
  void update(List<String> next) {
    List<String> before;
    synchronized (this) {
      before = addrs;
      if (before.equals(next)) return;
      addrs = List.copyOf(next);
    }
    log.accept("INFO", next.isEmpty()
        ? "slots use the configured address"
        : "slots spread over " + next.size() + " node(s): " + String.join(", ", next));
    Set<String> left = new HashSet<>(before);
    left.removeAll(next);
    if (!left.isEmpty()) onLeft.accept(left);
  }

  /** The address slot {@code index} talks to, or null for the configured address. */
  synchronized String targetFor(int index) {
    int n = addrs.size();
    if (n == 0) return null;
    String addr = addrs.get(Math.floorMod(index + offset, n));
    Long until = unreachable.get(addr);
    if (until == null) return addr;
    if (now.getAsLong() < until) return null;
    unreachable.remove(addr);
    return addr;
  }

  /** A request to {@code addr} failed to connect: its slots use the configured address a while. */
  void unreachable(String addr, String why) {
    synchronized (this) {
      if (unreachable.containsKey(addr)) return;
      unreachable.put(addr, now.getAsLong() + UNREACHABLE_MS);
    }
    log.accept("WARN", "node " + addr + " did not answer (" + why + "); its slots use " + server
        + " for " + UNREACHABLE_MS / 1000 + " s");
  }
}
