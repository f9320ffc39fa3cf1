"""Drives a real ORBIT server with the Python client and builder (run by
tests/python_client_e2e_test.ts): deploys orbit-ir/1 and orbit-ir/2 documents built in
Python, starts, signals, queries, waits, pages through history, cancels, manages a schedule,
and checks the API's error codes. Prints a JSON summary; exits non-zero on the first surprise.

    PYTHONPATH=sdk/python python3 sdk/python/testing/client_walk.py http://127.0.0.1:7233
"""

from __future__ import annotations

import json
import sys
import time

from orbit_sdk import Client, OrbitApiError
from orbit_sdk.workflow import expr, workflow


def expect_error(code: str, fn, *args, **kwargs) -> OrbitApiError:
    try:
        fn(*args, **kwargs)
    except OrbitApiError as err:
        assert err.code == code, f"expected {code}, got {err.code}: {err.message}"
        return err
    raise AssertionError(f"expected {code}, got no error")


def main(server: str) -> None:
    client = Client(server)
    summary = {}

    ir1 = (
        workflow("PyOrders", "1.0.0")
        .input({"type": "object", "required": ["order_id"]})
        .task(
            "validate",
            "orders.validate",
            contract="1",
            input=expr("$input"),
            retry={"max_attempts": 3, "initial_ms": 200, "non_retryable": ["INVALID_ORDER"]},
            timeout_s=30,
        )
        .task(
            "charge",
            "payments.charge",
            contract="1",
            language="python",
            input={"amount": expr("$steps.validate.total")},
            compensate={"task": "payments.refund", "contract": "1", "input": expr("$steps.charge")},
        )
        .returns(expr("$steps"), id="done")
    )
    deployed = client.deploy(ir1)
    summary["ir1"] = deployed["ir"]
    assert client.deploy(ir1)["name"] == "PyOrders"  # identical again: idempotent

    changed = workflow("PyOrders", "1.0.0").task("other", "x.y", contract="1")
    summary["conflict"] = expect_error("WORKFLOW_VERSION_EXISTS", client.deploy, changed).status
    broken = workflow("PyBroken", "1.0.0").task("a", "t", contract="1", input=expr("$steps.nope.x"))
    invalid = expect_error("INVALID_WORKFLOW", client.deploy, broken)
    summary["invalid_problems"] = len(invalid.details.get("problems") or [])

    shipping = workflow("PyShipping", "1.0.0").ir("orbit-ir/2").returns(
        {"tracking": expr("'trk-' & $input.order_id")}, id="label"
    )
    approval = (
        workflow("PyApproval", "1.0.0")
        .timeout(600)
        .signal("approve", {"type": "object", "required": ["by"], "properties": {"by": {"type": "string"}}})
        .query("status", expr("$vars.status"))
        .query("comments", expr("$vars.comments"))
        .handler("comment", lambda h: h.assign("keep", comments=expr("$append($vars.comments, $signal)")))
        .assign("init", status="waiting", comments=[])
        .sleep("settle", 0.1)
        .if_(
            "again",
            "$input.again = true",
            lambda t: t.continue_as_new("restart", input={"order_id": expr("$input.order_id"), "total": expr("$input.total")}),
        )
        .parallel(
            "both",
            lambda b: b.sleep("nap", 0.2).assign("rested", rested=True),
            lambda b: b.wait_signal("approval", "approve", timeout_s=60),
        )
        .if_(
            "big",
            "$input.total > 1000",
            lambda t: t.assign("gold", tier="gold"),
            lambda e: e.assign("std", tier="standard").http(
                "notify", "http://127.0.0.1:8099/hooks", method="POST", body={"tier": "standard"}
            ),
        )
        .child("ship", "PyShipping", input={"order_id": expr("$input.order_id")})
        .assign("finish", status=expr("'approved by ' & $steps.approval.by"))
        .returns(
            {"tier": expr("$vars.tier"), "tracking": expr("$steps.ship.tracking"), "by": expr("$steps.approval.by")},
            id="done",
        )
    )
    summary["ir2"] = [client.deploy(shipping)["ir"], client.deploy(approval)["ir"]]

    ex = client.start("PyApproval", {"order_id": "o-9", "total": 1500}, execution_id="ap-1")
    assert ex["status"] == "running", ex
    assert client.start("PyApproval", {"order_id": "o-9", "total": 1500}, execution_id="ap-1")["run_id"] == ex["run_id"]
    client.signal("ap-1", "comment", "looks fine")
    summary["comments"] = client.query("ap-1", "comments")
    summary["status_query"] = client.query("ap-1", "status")
    expect_error("SIGNAL_PAYLOAD_INVALID", client.signal, "ap-1", "approve", {"by": 42})
    expect_error("UNKNOWN_SIGNAL", client.signal, "ap-1", "nope")
    summary["signal_seq"] = client.signal("ap-1", "approve", {"by": "ada"})["seq"]
    done = client.wait("ap-1", timeout_s=30)
    assert done["status"] == "completed", done
    summary["output"] = done["output"]
    summary["final_status_query"] = client.query("ap-1", "status")
    expect_error("EXECUTION_FINISHED", client.signal, "ap-1", "comment", "late")

    events = list(client.history_events("ap-1", limit=3))
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    summary["history_events"] = len(events)
    summary["history_last"] = events[-1]["type"]
    summary["first_page"] = len(client.history("ap-1", limit=3)["events"])

    client.start("PyApproval", {"order_id": "o-10", "total": 5}, execution_id="ap-2")
    cancelled = client.cancel("ap-2", "changed my mind")
    summary["cancelled"] = client.wait("ap-2", timeout_s=30)["status"]
    assert cancelled["execution_id"] == "ap-2"
    summary["listed"] = sorted(e["execution_id"] for e in client.list_all(workflow="PyApproval"))

    first = client.start("PyApproval", {"order_id": "o-11", "total": 5, "again": True}, execution_id="ap-3")
    deadline = time.monotonic() + 20
    while True:  # the second run has started (the row shows the current run)
        current = client.get("ap-3")
        if current["run_id"] != first["run_id"] and current["status"] == "running":
            break
        assert time.monotonic() < deadline, current
        time.sleep(0.05)
    client.cancel("ap-3")
    summary["continued_then_cancelled"] = client.wait("ap-3", timeout_s=30)["status"]

    client.create_schedule({"schedule_id": "py-hourly", "workflow": "PyShipping", "input": {"order_id": "s"}, "every_s": 3600})
    triggered = client.trigger_schedule("py-hourly")
    summary["scheduled_run"] = client.wait(triggered["execution_id"], timeout_s=30)["output"]
    client.pause_schedule("py-hourly")
    summary["schedule"] = {k: client.schedule("py-hourly")[k] for k in ("fired", "paused")}
    summary["schedules"] = [s["schedule_id"] for s in client.schedules()]
    client.delete_schedule("py-hourly")
    expect_error("UNKNOWN_SCHEDULE", client.schedule, "py-hourly")
    expect_error("UNKNOWN_EXECUTION", client.get, "nope")
    summary["health"] = client.health()["status"]
    client.close()
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1])
