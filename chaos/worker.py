#!/usr/bin/env python3
"""The chaos suite's Python worker: the Python side of OrderProcessing (validate, charge and
its refund, ship, confirm) on the Python SDK, with every attempt appended to a log file (one
JSON line, one O_APPEND write) before its handler runs, in the format of chaos/worker.ts.

    python3 chaos/worker.py --server URL --log FILE [--worker-id ID] [--max-delay-ms N]

A bearer token, when the server wants one, comes from ``ORBIT_TOKEN`` (attach mode).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any, Dict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))

from orbit_sdk import TaskContext, Worker  # noqa: E402

parser = argparse.ArgumentParser(description="chaos worker (Python)")
parser.add_argument("--server", required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--worker-id", default="chaos-python")
parser.add_argument("--max-delay-ms", type=int, default=200)
# In a shared cluster the slots spread over the servers' advertised addresses (the SDK's
# default); --no-spread keeps them on --server (attach mode: only that link is the run's).
parser.add_argument("--no-spread", action="store_true")
args = parser.parse_args()

worker = Worker(
    args.server,
    args.worker_id,
    concurrency=8,
    token=os.environ.get("ORBIT_TOKEN") or None,
    spread_over_nodes=not args.no_spread,
)


def logged(task: str, ctx: TaskContext) -> None:
    line = {
        "event": "executing",
        "pid": os.getpid(),
        "at_ms": int(time.time() * 1000),
        "execution_id": ctx.execution_id,
        "step": ctx.step,
        "attempt": ctx.attempt,
        "idempotency_key": ctx.idempotency_key,
        "redelivery": ctx.redelivery,
        "token": ctx.token,
        "task": task,
    }
    fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
    finally:
        os.close(fd)
    delay = random.random() * args.max_delay_ms / 1000
    if delay > 0:
        ctx.sleep(delay)


@worker.task("orders.validate", contract="1", input=dict, output=dict)
def validate(order: Dict[str, Any], ctx: TaskContext) -> Dict[str, Any]:
    logged("orders.validate", ctx)
    total = sum(i["qty"] * i["price"] for i in order["items"])
    return {"order_id": order["order_id"], "total": round(total, 2)}


@worker.task("payments.charge", contract="1", input=dict, output=dict)
def charge(c: Dict[str, Any], ctx: TaskContext) -> Dict[str, Any]:
    logged("payments.charge", ctx)
    return {"charge_id": f"ch-{ctx.idempotency_key}", "amount": c["amount"]}


@worker.task("payments.refund", contract="1", input=dict, output=dict)
def refund(r: Dict[str, Any], ctx: TaskContext) -> Dict[str, Any]:
    logged("payments.refund", ctx)
    return {"refunded": r["amount"]}


@worker.task("shipping.create", contract="1", input=dict, output=dict)
def ship(s: Dict[str, Any], ctx: TaskContext) -> Dict[str, Any]:
    logged("shipping.create", ctx)
    return {"tracking": f"trk-{s['order_id']}"}


@worker.task("email.confirm", contract="1", input=dict, output=dict)
def confirm(_c: Dict[str, Any], ctx: TaskContext) -> Dict[str, Any]:
    logged("email.confirm", ctx)
    return {"sent": True}


if __name__ == "__main__":
    worker.start()
    worker.run(grace_s=10.0)
