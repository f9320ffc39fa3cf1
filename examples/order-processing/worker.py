#!/usr/bin/env python3
"""The Python side of OrderProcessing: five of its tasks (validate, charge and its refund,
ship, confirm) as the worker ``orders-python``, with the Python SDK (standard library only).
The TypeScript example worker serves the rest (reserve and its release, loyalty); with the
variant workflow ``workflow_python.json`` the charge runs only here (``language: python``).

    python3 examples/order-processing/worker.py [--server URL] [--concurrency N]

Environment: ORBIT_SERVER, ORBIT_TOKEN, ORBIT_CA_FILE (https with a private CA),
ORDER_WORKER_ID (default orders-python), ORDER_CONCURRENCY, and for tests
ORDER_CHARGE_DELAY_MS (a slow payment provider) and ORDER_TRACE=1 (one JSON line per attempt
on stdout). SIGTERM or Ctrl+C: finish running tasks (at most 30 s) and report them; a second
signal exits at once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import List

try:
    import orbit_sdk
except ImportError:  # not installed: use the SDK from this source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
    import orbit_sdk

from orbit_sdk import TaskContext, TaskError, Worker

parser = argparse.ArgumentParser(description="OrderProcessing worker (Python)")
parser.add_argument("--server", default=os.environ.get("ORBIT_SERVER", "http://127.0.0.1:7233"))
parser.add_argument("--concurrency", type=int, default=int(os.environ.get("ORDER_CONCURRENCY", "8")))
args = parser.parse_args()

logging.basicConfig(
    level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
)

CHARGE_DELAY_S = float(os.environ.get("ORDER_CHARGE_DELAY_MS", "0")) / 1000
TRACE = os.environ.get("ORDER_TRACE") == "1"

worker = Worker(
    args.server,
    os.environ.get("ORDER_WORKER_ID", "orders-python"),
    token=os.environ.get("ORBIT_TOKEN") or None,
    ca_file=os.environ.get("ORBIT_CA_FILE") or None,
    concurrency=args.concurrency,
    poll_wait_s=float(os.environ.get("ORDER_POLL_WAIT_S", "30")),
)


def trace(task: str, ctx: TaskContext) -> None:
    """With ORDER_TRACE=1, one JSON line per attempt (what the end-to-end tests read)."""
    if TRACE:
        line = {
            "event": "executing",
            "task": task,
            "execution_id": ctx.execution_id,
            "step": ctx.step,
            "attempt": ctx.attempt,
            "redelivery": ctx.redelivery,
            "idempotency_key": ctx.idempotency_key,
        }
        print(json.dumps(line, separators=(",", ":")), flush=True)


# ---- contracts: the input is checked before the handler runs (INVALID_INPUT, not retried),
# the output after it returns.


@dataclass
class Item:
    sku: str
    qty: int
    price: float

    def __post_init__(self) -> None:
        if self.qty < 1:
            raise ValueError("qty must be at least 1")
        if self.price < 0:
            raise ValueError("price must not be negative")


@dataclass
class Order:
    order_id: str
    customer: str
    items: List[Item] = field(default_factory=list)


@dataclass
class Validated:
    order_id: str
    total: float


@dataclass
class Charge:
    order_id: str
    amount: float
    customer: str


@dataclass
class Charged:
    charge_id: str
    amount: float


@dataclass
class Refund:
    charge_id: str
    amount: float


@dataclass
class Refunded:
    refunded: float


@dataclass
class Shipment:
    order_id: str
    reservation_id: str


@dataclass
class Shipped:
    tracking: str


@dataclass
class Confirmation:
    customer: str
    tracking: str


@dataclass
class Sent:
    sent: bool


# ---- tasks


@worker.task("orders.validate", contract="1")
def validate(order: Order, ctx: TaskContext) -> Validated:
    trace("orders.validate", ctx)
    if not order.items:
        raise TaskError("INVALID_ORDER", "an order needs items", retryable=False)
    total = sum(i.qty * i.price for i in order.items)
    return Validated(order_id=order.order_id, total=round(total, 2))


@worker.task("payments.charge", contract="1")
def charge(c: Charge, ctx: TaskContext) -> Charged:
    trace("payments.charge", ctx)
    if CHARGE_DELAY_S > 0:
        ctx.sleep(CHARGE_DELAY_S)  # ends early when the runtime cancels the attempt
    if c.customer == "declined":
        raise TaskError("CARD_DECLINED", "the card was declined", retryable=False)
    # The idempotency key is what a real payment provider would deduplicate on.
    return Charged(charge_id=f"ch-{ctx.idempotency_key}", amount=c.amount)


@worker.task("payments.refund", contract="1")
def refund(r: Refund, ctx: TaskContext) -> Refunded:
    trace("payments.refund", ctx)
    return Refunded(refunded=r.amount)


@worker.task("shipping.create", contract="1")
def ship(s: Shipment, ctx: TaskContext) -> Shipped:
    trace("shipping.create", ctx)
    return Shipped(tracking=f"trk-{s.order_id}")


@worker.task("email.confirm", contract="1")
def confirm(c: Confirmation, ctx: TaskContext) -> Sent:
    trace("email.confirm", ctx)
    return Sent(sent=True)


if __name__ == "__main__":
    try:
        worker.start()
    except orbit_sdk.OrbitError as err:  # a refused registration (401, 403 TASK_NOT_ALLOWED…)
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    print(
        f"order worker (python) serving {len(worker.tasks)} tasks on {args.server} "
        f"(concurrency {worker.concurrency}, orbit_sdk {orbit_sdk.__version__})",
        file=sys.stderr,
        flush=True,
    )
    worker.run(grace_s=30.0)
