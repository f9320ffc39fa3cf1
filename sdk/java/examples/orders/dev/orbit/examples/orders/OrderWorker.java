package dev.orbit.examples.orders;

import dev.orbit.sdk.ApiException;
import dev.orbit.sdk.Attempt;
import dev.orbit.sdk.Handler;
import dev.orbit.sdk.Task;
import dev.orbit.sdk.TaskException;
import dev.orbit.sdk.Validated;
import dev.orbit.sdk.Worker;
import com.google.gson.JsonObject;
import java.time.Duration;
import java.util.List;

/**
 * The Java side of the OrderProcessing example (examples/order-processing): all six tasks and
 * both compensations, as the worker orders-java, with the Java SDK.
 *
 * <pre>
 * java -cp orbit-sdk.jar:orbit-examples.jar:gson.jar dev.orbit.examples.orders.OrderWorker \
 *     --server http://127.0.0.1:7233 [--concurrency 8]
 * </pre>
 *
 * Environment: ORBIT_SERVER, ORBIT_TOKEN, ORDER_WORKER_ID (default orders-java),
 * ORDER_CONCURRENCY, and for tests ORDER_CHARGE_DELAY_MS (a slow payment provider) and
 * ORDER_TRACE=1 (one JSON line per attempt on stdout). SIGTERM or Ctrl+C: finish running tasks
 * (at most 30 s), report them, exit 0.
 */
public final class OrderWorker {
  private OrderWorker() {}

  // ---- contracts: records whose camelCase components are the API's snake_case members. The
  // input is decoded and checked (validate) before the handler runs (INVALID_INPUT, not retried).

  public record Item(String sku, int qty, double price) {}

  public record Order(String orderId, String customer, List<Item> items) implements Validated {
    @Override
    public void validate() {
      if (orderId == null || orderId.isEmpty() || customer == null || customer.isEmpty()) {
        throw new IllegalArgumentException("order_id and customer are required");
      }
      for (Item i : items == null ? List.<Item>of() : items) {
        if (i.qty() < 1) throw new IllegalArgumentException("item " + i.sku() + ": qty must be at least 1");
        if (i.price() < 0) {
          throw new IllegalArgumentException("item " + i.sku() + ": price must not be negative");
        }
      }
    }
  }

  public record ValidOrder(String orderId, double total) {}

  public record Reservation(String orderId, List<Item> items) {}

  public record Reserved(String reservationId) {}

  public record Release(String reservationId) {}

  public record Released(boolean released) {}

  public record Charge(String orderId, double amount, String customer) {}

  public record Charged(String chargeId, double amount) {}

  public record Refund(String chargeId, double amount) {}

  public record Refunded(double refunded) {}

  public record Shipment(String orderId, String reservationId) {}

  public record Shipped(String tracking) {}

  public record Confirmation(String customer, String tracking) {}

  public record Sent(boolean sent) {}

  public record Points(String customer, double points) {}

  public record Loyalty(double points) {}

  static final boolean TRACE = "1".equals(System.getenv("ORDER_TRACE"));

  /** With ORDER_TRACE=1, every attempt is one JSON line on stdout. */
  static <I, O> Handler<I, O> traced(String task, Handler<I, O> fn) {
    return (in, a) -> {
      if (TRACE) {
        JsonObject o = new JsonObject();
        o.addProperty("event", "executing");
        o.addProperty("task", task);
        o.addProperty("execution_id", a.executionId());
        o.addProperty("step", a.step());
        o.addProperty("attempt", a.attempt());
        o.addProperty("redelivery", a.redelivery());
        o.addProperty("idempotency_key", a.idempotencyKey());
        synchronized (System.out) {
          System.out.println(o);
          System.out.flush();
        }
      }
      return fn.handle(in, a);
    };
  }

  static List<Task<?, ?>> tasks(Duration chargeDelay) {
    return List.of(
        Task.of("orders.validate", "1", Order.class, traced("orders.validate", (o, a) -> {
          if (o.items() == null || o.items().isEmpty()) {
            throw TaskException.fail("INVALID_ORDER", "an order needs items");
          }
          double total = 0;
          for (Item i : o.items()) total += i.qty() * i.price();
          return new ValidOrder(o.orderId(), Math.round(total * 100) / 100.0);
        })),
        Task.of("inventory.reserve", "1", Reservation.class, traced("inventory.reserve",
            (r, a) -> new Reserved("res-" + r.orderId()))),
        Task.of("inventory.release", "1", Release.class, traced("inventory.release",
            (r, a) -> new Released(true))),
        Task.of("payments.charge", "1", Charge.class, traced("payments.charge",
            (c, a) -> charge(c, a, chargeDelay))),
        Task.of("payments.refund", "1", Refund.class, traced("payments.refund",
            (r, a) -> new Refunded(r.amount()))),
        Task.of("shipping.create", "1", Shipment.class, traced("shipping.create",
            (s, a) -> new Shipped("trk-" + s.orderId()))),
        Task.of("email.confirm", "1", Confirmation.class, traced("email.confirm",
            (c, a) -> new Sent(true))),
        Task.of("loyalty.update", "1", Points.class, traced("loyalty.update",
            (p, a) -> new Loyalty(p.points()))));
  }

  static Charged charge(Charge c, Attempt a, Duration delay) throws InterruptedException {
    if (!delay.isZero()) a.sleep(delay); // ends early when the runtime cancels the attempt
    if ("declined".equals(c.customer())) {
      throw TaskException.fail("CARD_DECLINED", "the card was declined");
    }
    // The idempotency key is what a real payment provider would deduplicate on.
    return new Charged("ch-" + a.idempotencyKey(), c.amount());
  }

  static String env(String name, String def) {
    String v = System.getenv(name);
    return v == null || v.isEmpty() ? def : v;
  }

  public static void main(String[] args) throws InterruptedException {
    String server = env("ORBIT_SERVER", "http://127.0.0.1:7233");
    Integer concurrency = null;
    for (int i = 0; i < args.length; i++) {
      String arg = args[i];
      if (arg.equals("--server") && i + 1 < args.length) server = args[++i];
      else if (arg.startsWith("--server=")) server = arg.substring(9);
      else if (arg.equals("--concurrency") && i + 1 < args.length) concurrency = Integer.valueOf(args[++i]);
      else if (arg.startsWith("--concurrency=")) concurrency = Integer.valueOf(arg.substring(14));
      else {
        System.err.println("usage: OrderWorker [--server URL] [--concurrency N]");
        System.exit(2);
      }
    }
    if (concurrency == null) concurrency = Integer.valueOf(env("ORDER_CONCURRENCY", "8"));
    long delayMs = Long.parseLong(env("ORDER_CHARGE_DELAY_MS", "0"));
    List<Task<?, ?>> served = tasks(Duration.ofMillis(delayMs));
    Worker w = Worker.builder()
        .server(server)
        .token(System.getenv("ORBIT_TOKEN"))
        .workerId(env("ORDER_WORKER_ID", "orders-java"))
        .tasks(served)
        .concurrency(concurrency)
        .shutdownGrace(Duration.ofSeconds(30))
        .build();
    // SIGTERM or Ctrl+C: stop gracefully, then exit 0 (halt keeps this status, not the 143 of
    // a JVM ended by a signal).
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      w.stop(Duration.ofSeconds(30));
      System.out.flush();
      Runtime.getRuntime().halt(0);
    }, "orders-stop"));
    try {
      w.start();
    } catch (ApiException e) { // a refused registration (401, 403 TASK_NOT_ALLOWED…)
      System.err.println("error: " + e.getMessage());
      Runtime.getRuntime().halt(1);
    }
    System.err.printf("order worker (java) serving %d tasks on %s (concurrency %d)%n",
        served.size(), server, concurrency);
    w.awaitStopped(Duration.ofDays(3650));
  }
}
