#!/usr/bin/env python3
"""The Python SDK's conformance worker: the program the language-neutral conformance suite
(tests/conformance/README.md) drives. It serves the suite's four tasks with the SDK (standard
library only) and prints one JSON line per event on standard output.

    python3 sdk/python/testing/conformance_worker.py --server http://127.0.0.1:7233

Environment: ORBIT_SERVER, ORBIT_TOKEN, CONFORMANCE_WORKER_ID, CONFORMANCE_TASKS (names,
comma-separated; default all), CONFORMANCE_CONCURRENCY (default 2), CONFORMANCE_HEARTBEAT_MS
(default 500), CONFORMANCE_POLL_WAIT_S (default 10), CONFORMANCE_STOP_GRACE_MS (default
30000). SIGTERM or SIGINT: stop gracefully, print {"event":"stopped"}, exit 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from orbit_sdk import OrbitError, TaskContext, TaskError, Worker  # noqa: E402


def env_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


_out = threading.Lock()


def emit(event: str, **fields: Any) -> None:
    fields["event"] = event
    with _out:
        print(json.dumps(fields, separators=(",", ":")), flush=True)


def attempt_fields(task: str, ctx: TaskContext) -> dict:
    return {
        "task": task,
        "execution_id": ctx.execution_id,
        "step": ctx.step,
        "attempt": ctx.attempt,
        "redelivery": ctx.redelivery,
        "idempotency_key": ctx.idempotency_key,
        "token": ctx.token,
    }


class Cancelled(Exception):
    """Raised by a handler that saw its attempt cancelled (the SDK reports CANCELLED)."""


@dataclass
class EchoIn:
    value: Any = None


@dataclass
class EchoOut:
    value: Any
    attempt: int
    redelivery: bool
    idempotency_key: str
    runtime: str


@dataclass
class FailIn:
    code: str
    message: str = ""
    retryable: bool = False
    succeed_on_attempt: int = 0


@dataclass
class AttemptOut:
    attempt: int


@dataclass
class SleepIn:
    ms: int


@dataclass
class SleepOut:
    slept_ms: int


@dataclass
class HoldOut:
    redelivered: bool


def echo(value: EchoIn, ctx: TaskContext) -> EchoOut:
    emit("executing", **attempt_fields("conformance.echo", ctx))
    return EchoOut(value.value, ctx.attempt, ctx.redelivery, ctx.idempotency_key, "python")


def fail(spec: FailIn, ctx: TaskContext) -> AttemptOut:
    emit("executing", **attempt_fields("conformance.fail", ctx))
    if spec.succeed_on_attempt > 0 and ctx.attempt >= spec.succeed_on_attempt:
        return AttemptOut(ctx.attempt)
    raise TaskError(spec.code, spec.message, retryable=spec.retryable, details={"attempt": ctx.attempt})


def sleep(spec: SleepIn, ctx: TaskContext) -> SleepOut:
    emit("executing", **attempt_fields("conformance.sleep", ctx))
    if ctx.sleep(spec.ms / 1000):
        emit("cancelled", **attempt_fields("conformance.sleep", ctx))
        raise Cancelled(ctx.cancel_reason or "cancelled")
    return SleepOut(spec.ms)


def hold(_value: Optional[dict], ctx: TaskContext) -> HoldOut:
    emit("executing", **attempt_fields("conformance.hold", ctx))
    if ctx.redelivery:
        return HoldOut(True)
    ctx.cancelled.wait()
    emit("cancelled", **attempt_fields("conformance.hold", ctx))
    raise Cancelled(ctx.cancel_reason or "cancelled")


ALL = {
    "conformance.echo": echo,
    "conformance.fail": fail,
    "conformance.sleep": sleep,
    "conformance.hold": hold,
}


def main() -> None:
    parser = argparse.ArgumentParser(description="ORBIT conformance worker (Python)")
    parser.add_argument("--server", default=os.environ.get("ORBIT_SERVER") or "http://127.0.0.1:7233")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    worker_id = os.environ.get("CONFORMANCE_WORKER_ID") or "conformance-python"
    wanted = [n.strip() for n in os.environ.get("CONFORMANCE_TASKS", "").split(",") if n.strip()]
    worker = Worker(
        args.server,
        worker_id,
        token=os.environ.get("ORBIT_TOKEN") or None,
        concurrency=env_int("CONFORMANCE_CONCURRENCY", 2),
        heartbeat_s=env_int("CONFORMANCE_HEARTBEAT_MS", 500) / 1000,
        poll_wait_s=env_int("CONFORMANCE_POLL_WAIT_S", 10),
    )
    for name, handler in ALL.items():
        if not wanted or name in wanted:
            worker.add_task(name, handler, contract="1")
    try:
        worker.start()
    except OrbitError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    emit("ready", sdk="python", worker_id=worker_id, runtime="python", tasks=len(worker.tasks))
    worker.run(grace_s=env_int("CONFORMANCE_STOP_GRACE_MS", 30000) / 1000)
    emit("stopped")


if __name__ == "__main__":
    main()
