"""The worker against a fake runtime: the protocol, results exactly once, and survival of a
runtime that answers garbage, closes connections, hands out unknown tasks or forgets sessions."""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import threading
import time
import unittest
from dataclasses import dataclass
from typing import List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_server import FakeOrbit  # noqa: E402

from orbit_sdk import OrbitApiError, TaskContext, TaskError, Worker  # noqa: E402
from orbit_sdk._http import Backoff  # noqa: E402


def _call(fn):
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - the test looks at it
        return err
    return None


def fast_backoff() -> Backoff:
    return Backoff(initial_s=0.02, max_s=0.1)


@dataclass
class Item:
    sku: str
    qty: int


@dataclass
class Order:
    order_id: str
    items: List[Item]


@dataclass
class Total:
    order_id: str
    count: int


class WorkerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.fake = FakeOrbit()
        self.workers: List[Worker] = []

    def tearDown(self) -> None:
        for w in self.workers:
            w.shutdown(grace_s=1)
        self.fake.close()

    def worker(self, **kwargs) -> Worker:
        options = dict(concurrency=2, poll_wait_s=1, heartbeat_s=0.05, backoff=fast_backoff)
        options.update(kwargs)
        w = Worker(self.fake.url, "w-test", **options)
        self.workers.append(w)
        return w

    def test_registers_polls_and_completes(self) -> None:
        w = self.worker(concurrency=3, token="worker-token-0123456789")

        @w.task("orders.total", contract="1")
        def total(order: Order, ctx: TaskContext) -> Total:
            return Total(order_id=order.order_id, count=sum(i.qty for i in order.items))

        w.start()
        reg = self.fake.of("/v1/workers/register")[0].body
        self.assertEqual(reg["worker_id"], "w-test")
        self.assertEqual(reg["runtime"], "python")
        self.assertEqual(reg["concurrency"], 3)
        self.assertEqual(reg["tasks"], [{"name": "orders.total", "contract": "1"}])
        self.assertEqual(
            self.fake.of("/v1/workers/register")[0].headers.get("authorization"),
            "Bearer worker-token-0123456789",
        )
        self.fake.wait_for("a poll", lambda: self.fake.of("/v1/workers/poll"))
        self.assertEqual(self.fake.of("/v1/workers/poll")[0].body["max_tasks"], 1)

        task = self.fake.add_task(
            task="orders.total", input={"order_id": "o-1", "items": [{"sku": "a", "qty": 2}]}
        )
        done = self.fake.wait_for("the result", lambda: self.fake.results())
        self.assertEqual(done[0].path, "/v1/tasks/complete")
        self.assertEqual(done[0].body["token"], task["token"])
        self.assertEqual(done[0].body["output"], {"order_id": "o-1", "count": 2})
        # The report asks for the next attempt in the same request (eager dispatch).
        self.assertEqual(done[0].body["max_tasks"], 1)
        self.assertEqual(done[0].body["session_id"], w.session_id)

    def test_every_slot_holds_a_poll_of_its_own_on_its_own_connection(self) -> None:
        w = self.worker(concurrency=4, poll_wait_s=30)
        self.fake.poll_hold_s = 30

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            return {}

        w.start()
        held = self.fake.wait_for("four polls held at once", lambda: len(self.fake.held) == 4 and list(self.fake.held))
        self.assertEqual(len({r.port for r in held}), 4, [r.port for r in held])
        for poll in held:
            self.assertEqual(poll.body["max_tasks"], 1)
            self.assertEqual(poll.body["session_id"], w.session_id)
        self.assertEqual(len(self.fake.of("/v1/workers/register")), 1)
        time.sleep(0.2)
        self.assertEqual(len(self.fake.held), 4)  # no more than one poll per slot

    def test_a_slot_reports_on_the_connection_it_polled_on_and_runs_what_the_answer_carries(self) -> None:
        w = self.worker(concurrency=3, poll_wait_s=30)
        self.fake.poll_hold_s = 30
        ran = []

        @w.task("t", contract="1")
        def t(_inp, ctx: TaskContext):
            ran.append((ctx.token, threading.current_thread().name))
            return {"ok": 1}

        follow = self.fake.new_task(task="t")
        first_token: List[str] = []

        def complete(rec):
            if rec.body["token"] in first_token:  # eager dispatch: the next step comes along
                return ("json", 200, {"accepted": True, "tasks": [follow]})
            return None

        self.fake.handlers["/v1/tasks/complete"] = complete
        w.start()
        self.fake.wait_for("a poll held", lambda: self.fake.held)
        first = self.fake.add_task(task="t")
        first_token.append(first["token"])
        done = self.fake.wait_for("two results", lambda: len(self.fake.results()) >= 2 and self.fake.results())
        poll = [r for r in self.fake.of("/v1/workers/poll") if first["token"] in r.handed]
        self.assertEqual(len(poll), 1)
        self.assertEqual([r.body["token"] for r in done], [first["token"], follow["token"]])
        # Both results go out on the connection the attempt was polled on.
        self.assertEqual([r.port for r in done], [poll[0].port, poll[0].port])
        self.assertEqual(done[0].body["session_id"], w.session_id)
        self.assertEqual(done[0].body["max_tasks"], 1)
        # The attempt the answer carried ran in the same slot, with no poll in between.
        self.assertEqual([tok for tok, _ in ran], [first["token"], follow["token"]])
        self.assertEqual(ran[0][1], ran[1][1])
        between = self.fake.requests[self.fake.requests.index(done[0]) : self.fake.requests.index(done[1])]
        self.assertEqual([r for r in between if r.path == "/v1/workers/poll" and r.port == poll[0].port], [])

    def test_stop_cuts_every_held_poll_at_once(self) -> None:
        w = self.worker(concurrency=4, poll_wait_s=30)
        self.fake.poll_hold_s = 30

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            return {}

        w.start()
        held = self.fake.wait_for("four polls held at once", lambda: len(self.fake.held) == 4 and list(self.fake.held))
        began = time.monotonic()
        w.stop(grace_s=10)
        self.assertTrue(w.wait(5))
        self.assertLess(time.monotonic() - began, 2)
        self.fake.wait_for("every held poll cut", lambda: all(r.cut for r in held), timeout=2)
        self.assertEqual(self.fake.held, [])
        self.assertEqual(len(self.fake.of("/v1/workers/unregister")), 1)
        self.assertEqual([t.name for t in w._threads if t.is_alive() and t.name.startswith("orbit-task")], [])

    def test_slots_that_see_unknown_session_at_once_register_once(self) -> None:
        w = self.worker(concurrency=6, poll_wait_s=30)
        self.fake.poll_hold_s = 30

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            return {"ok": 1}

        w.start()
        first = w.session_id
        self.fake.wait_for("six polls held", lambda: len(self.fake.held) == 6)
        # A slow registration: every slot needs the new session while it is being made.
        self.fake.handlers["/v1/workers/register"] = lambda rec: time.sleep(0.3)
        with self.assertLogs("orbit", level="INFO") as logs:
            with self.fake.lock:
                self.fake.sessions.clear()  # the runtime restarted: every held poll answers 404
            self.fake.wait_for("a new registration", lambda: len(self.fake.of("/v1/workers/register")) >= 2)
            second = self.fake.wait_for("the new session", lambda: w.session_id not in (None, first) and w.session_id)
            self.fake.wait_for(
                "six polls of the new session held",
                lambda: len([r for r in self.fake.held if r.body["session_id"] == second]) == 6,
            )
            time.sleep(0.3)
        self.assertEqual(len(self.fake.of("/v1/workers/register")), 2)
        self.assertEqual(w.session_id, second)
        text = "\n".join(logs.output)
        self.assertEqual(text.count("worker registered worker_id=w-test"), 1, text)
        self.assertEqual(text.count("(UNKNOWN_SESSION); registering again"), 1, text)
        self.fake.add_task(task="t")
        self.fake.wait_for("a completion", lambda: self.fake.of("/v1/tasks/complete"))

    def test_a_task_that_raises_is_one_fail(self) -> None:
        w = self.worker()

        @w.task("boom", contract="1")
        def boom(_inp, _ctx):
            raise ZeroDivisionError("division by zero")

        w.start()
        task = self.fake.add_task(task="boom")
        self.fake.wait_for("the fail", lambda: self.fake.results())
        # Later attempts run too, and the first one is never reported again.
        self.fake.add_task(task="boom")
        self.fake.wait_for("the second fail", lambda: len(self.fake.results()) >= 2)
        time.sleep(0.2)
        results = self.fake.results()
        mine = [r for r in results if r.body["token"] == task["token"]]
        self.assertEqual(len(mine), 1, results)
        self.assertEqual(mine[0].path, "/v1/tasks/fail")
        err = mine[0].body["error"]
        self.assertEqual(err["code"], "ZeroDivisionError")
        self.assertEqual(err["message"], "division by zero")
        self.assertIs(err["retryable"], True)
        self.assertIn("ZeroDivisionError", err["details"]["traceback"])

    def test_task_error_carries_code_retryable_and_details(self) -> None:
        w = self.worker()

        @w.task("pay", contract="2")
        def pay(_inp: dict, _ctx) -> dict:
            raise TaskError("CARD_DECLINED", "declined", retryable=False, details={"bank": "x"})

        w.start()
        self.fake.add_task(task="pay", contract="2")
        fail = self.fake.wait_for("the fail", lambda: self.fake.of("/v1/tasks/fail"))[0]
        self.assertEqual(
            fail.body["error"],
            {"code": "CARD_DECLINED", "message": "declined", "retryable": False, "details": {"bank": "x"}},
        )

    def test_input_that_does_not_fit_the_contract_is_invalid_input(self) -> None:
        w = self.worker()
        ran = []

        @w.task("orders.total", contract="1")
        def total(order: Order) -> Total:
            ran.append(order)
            return Total(order.order_id, 0)

        w.start()
        self.fake.add_task(task="orders.total", input={"order_id": 7, "items": [{"sku": "a", "qty": "2"}]})
        fail = self.fake.wait_for("the fail", lambda: self.fake.of("/v1/tasks/fail"))[0]
        err = fail.body["error"]
        self.assertEqual(err["code"], "INVALID_INPUT")
        self.assertIs(err["retryable"], False)
        paths = [i["path"] for i in err["details"]["issues"]]
        self.assertEqual(paths, ["$.order_id", "$.items[0].qty"])
        self.assertEqual(ran, [])

    def test_output_that_does_not_fit_is_invalid_output(self) -> None:
        w = self.worker()

        @w.task("t", contract="1")
        def bad(_inp) -> Total:
            return {"order_id": "x"}  # type: ignore[return-value]

        w.start()
        self.fake.add_task(task="t")
        fail = self.fake.wait_for("the fail", lambda: self.fake.of("/v1/tasks/fail"))[0]
        self.assertEqual(fail.body["error"]["code"], "INVALID_OUTPUT")

    def test_unknown_task_is_failed_and_the_worker_goes_on(self) -> None:
        w = self.worker()

        @w.task("known", contract="1")
        def known(_inp, _ctx):
            return {"ok": True}

        with self.assertLogs("orbit", level="ERROR") as logs:
            w.start()
            unknown = self.fake.add_task(task="nobody.serves", contract="9")
            self.fake.wait_for("the fail", lambda: self.fake.of("/v1/tasks/fail"))
        fail = self.fake.of("/v1/tasks/fail")[0]
        self.assertEqual(fail.body["token"], unknown["token"])
        self.assertEqual(fail.body["error"]["code"], "UNKNOWN_TASK")
        self.assertTrue(any("does not serve" in line for line in logs.output), logs.output)
        self.fake.add_task(task="known")
        self.fake.wait_for("a completion", lambda: self.fake.of("/v1/tasks/complete"))

    def test_garbage_answers_are_logged_and_survived(self) -> None:
        w = self.worker()

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            return {"ok": 1}

        self.fake.script(
            "/v1/workers/poll",
            ("raw", 200, b"<html>not json</html>"),
            ("json", 200, {"no": "tasks"}),
            ("json", 200, [1, 2, 3]),
            ("json", 200, {"tasks": [42, {"no": "token"}, None]}),
            ("raw", 502, b"Bad Gateway"),
        )
        with self.assertLogs("orbit", level="WARNING") as logs:
            w.start()
            self.fake.wait_for("the garbage to be served", lambda: len(self.fake.of("/v1/workers/poll")) >= 6)
            self.fake.add_task(task="t")
            self.fake.wait_for("a completion", lambda: self.fake.of("/v1/tasks/complete"))
            # Each slot polls on its own: the one that got the 502 may log it after another
            # slot's completion.
            self.fake.wait_for("the 502 to be logged", lambda: any("HTTP_502" in line for line in logs.output))
        text = "\n".join(logs.output)
        self.assertIn("not JSON", text)
        self.assertIn("task without a token", text)
        self.assertIn("answered 502 HTTP_502", text)
        self.assertEqual(self.fake.of("/v1/tasks/fail"), [])
        self.assertEqual(w.state, "running")

    def test_connections_closed_before_or_mid_response_are_retried(self) -> None:
        w = self.worker()

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            return {"ok": 1}

        self.fake.script("/v1/workers/poll", ("close",), ("partial",))
        self.fake.script("/v1/tasks/complete", ("close",), ("partial",))
        with self.assertLogs("orbit", level="WARNING") as logs:
            w.start()
            task = self.fake.add_task(task="t")
            self.fake.wait_for(
                "the result after two broken reports",
                lambda: len(self.fake.of("/v1/tasks/complete")) >= 3,
            )
        text = "\n".join(logs.output)
        self.assertRegex(
            text,
            r"WARNING:orbit:poll failed: cannot reach ORBIT runtime at http://127\.0\.0\.1:\d+: "
            r"Remote end closed connection without response; retrying in \d(\.\d)?s",
        )
        self.assertIn("connection closed mid-response", text)
        self.assertIn("report result failed", text)
        reports = self.fake.of("/v1/tasks/complete")
        self.assertEqual({r.body["token"] for r in reports}, {task["token"]})
        self.assertEqual(len(reports), 3)
        time.sleep(0.2)
        self.assertEqual(len(self.fake.of("/v1/tasks/complete")), 3)

    def test_every_5xx_including_not_leader_is_retried(self) -> None:
        w = self.worker()

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            return {"ok": 1}

        not_leader = (
            "json",
            503,
            {"error": {"code": "NOT_LEADER", "message": "standby", "leader_addr": "http://x"}},
        )
        self.fake.script("/v1/workers/register", not_leader, ("json", 500, {"error": {"code": "STORAGE_ERROR", "message": "db"}}))
        self.fake.script("/v1/tasks/complete", not_leader)
        with self.assertLogs("orbit", level="WARNING") as logs:
            w.start()
            self.fake.add_task(task="t")
            self.fake.wait_for("the result", lambda: len(self.fake.of("/v1/tasks/complete")) >= 2)
        self.assertEqual(len(self.fake.of("/v1/workers/register")), 3)
        text = "\n".join(logs.output)
        self.assertIn("register failed: ORBIT runtime at", text)
        self.assertIn("answered 503 NOT_LEADER", text)
        self.assertIn("report result failed", text)

    def test_a_refused_registration_raises(self) -> None:
        w = self.worker()

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            return None

        self.fake.script(
            "/v1/workers/register",
            ("json", 403, {"error": {"code": "TASK_NOT_ALLOWED", "message": "no", "tasks": []}}),
        )
        with self.assertRaises(OrbitApiError) as caught:
            w.start()
        self.assertEqual(caught.exception.code, "TASK_NOT_ALLOWED")
        self.assertEqual(caught.exception.status, 403)
        self.assertEqual(w.state, "stopped")

    def test_unknown_session_registers_again(self) -> None:
        w = self.worker()

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            return {"ok": 1}

        with self.assertLogs("orbit", level="INFO") as logs:
            w.start()
            first = w.session_id
            self.fake.sessions.clear()  # the runtime restarted
            self.fake.wait_for("a new registration", lambda: len(self.fake.of("/v1/workers/register")) >= 2)
            self.fake.add_task(task="t")
            self.fake.wait_for("a completion", lambda: self.fake.of("/v1/tasks/complete"))
        self.assertNotEqual(w.session_id, first)
        self.assertIn("UNKNOWN_SESSION", "\n".join(logs.output))
        self.assertIn("worker registered worker_id=w-test runtime=python tasks=1", "\n".join(logs.output))

    def test_a_running_task_still_reports_after_the_session_is_lost(self) -> None:
        w = self.worker()
        release = threading.Event()

        @w.task("slow", contract="1")
        def slow(_inp, _ctx):
            release.wait(5)
            return {"done": True}

        w.start()
        task = self.fake.add_task(task="slow")
        self.fake.wait_for(
            "a heartbeat naming the token",
            lambda: [r for r in self.fake.of("/v1/workers/heartbeat") if task["token"] in r.body["tokens"]],
        )
        first = w.session_id
        self.fake.sessions.clear()
        new_session = self.fake.wait_for(
            "a new session", lambda: w.session_id not in (None, first) and w.session_id
        )
        # The new session's heartbeats name the running attempt (the runtime adopts it).
        self.fake.wait_for(
            "a heartbeat of the new session naming the token",
            lambda: [
                r
                for r in self.fake.of("/v1/workers/heartbeat")
                if r.body["session_id"] == new_session and task["token"] in r.body["tokens"]
            ],
        )
        release.set()
        done = self.fake.wait_for("the result", lambda: self.fake.of("/v1/tasks/complete"))
        self.assertEqual([r.body["token"] for r in done], [task["token"]])

    def test_with_every_slot_busy_the_heartbeat_registers_again_and_keeps_the_attempt(self) -> None:
        # One slot, busy: no slot polls, so only the heartbeat can register again after the
        # runtime forgot the session (a restart); otherwise the attempt goes unlisted and is
        # redelivered while it still runs.
        w = self.worker(concurrency=1)
        release = threading.Event()

        @w.task("slow", contract="1")
        def slow(_inp, _ctx):
            release.wait(10)
            return {"done": True}

        w.start()
        task = self.fake.add_task(task="slow")
        self.fake.wait_for(
            "a heartbeat naming the token",
            lambda: [r for r in self.fake.of("/v1/workers/heartbeat") if task["token"] in r.body["tokens"]],
        )
        first = w.session_id
        self.fake.sessions.clear()
        new_session = self.fake.wait_for(
            "a new session while the only slot is busy",
            lambda: w.session_id not in (None, first) and w.session_id,
            timeout=3,
        )
        self.fake.wait_for(
            "a heartbeat of the new session naming the token",
            lambda: [
                r
                for r in self.fake.of("/v1/workers/heartbeat")
                if r.body["session_id"] == new_session and task["token"] in r.body["tokens"]
            ],
            timeout=3,
        )
        self.assertEqual(len(self.fake.of("/v1/workers/register")), 2)
        release.set()
        done = self.fake.wait_for("the result", lambda: self.fake.of("/v1/tasks/complete"))
        self.assertEqual([r.body["token"] for r in done], [task["token"]])
        # The report asks for the next attempt with the new session.
        self.assertEqual(done[0].body.get("session_id"), new_session)

    # ---- results the runtime cannot take ------------------------------------------------

    def strict_results(self) -> None:
        """The fake answers result reports as the runtime does: 400 BAD_JSON for NaN/Infinity
        (not JSON), 422 for an error code that is empty or longer than 200 characters or a
        message longer than 100,000."""

        def check(rec):
            if not isinstance(rec.body, dict):
                return ("json", 400, {"error": {"code": "BAD_JSON", "message": "not JSON"}})
            try:
                json.dumps(rec.body, allow_nan=False)
            except ValueError:
                return ("json", 400, {"error": {"code": "BAD_JSON", "message": "not JSON"}})
            error = rec.body.get("error")
            if rec.path == "/v1/tasks/fail" and not (
                isinstance(error, dict)
                and isinstance(error.get("code"), str)
                and 1 <= len(error["code"]) <= 200
                and len(error.get("message", "")) <= 100_000
            ):
                return ("json", 422, {"error": {"code": "INVALID_REQUEST", "message": "body breaks the contract"}})
            return None

        self.fake.handlers["/v1/tasks/complete"] = check
        self.fake.handlers["/v1/tasks/fail"] = check

    def one_result(self, handler) -> "tuple":
        """Runs one attempt of ``handler``; answers its token and the result requests sent."""
        w = self.worker(concurrency=1)
        w.add_task("t", handler, contract="1")
        w.start()
        task = self.fake.add_task(task="t")
        self.fake.wait_for("a result", lambda: self.fake.results())
        self.fake.wait_for("the attempt to end", lambda: not w.running_tokens)
        time.sleep(0.2)  # no more requests come
        return task["token"], self.fake.results()

    def test_an_output_with_nan_is_reported_as_a_failure_not_dropped(self) -> None:
        self.strict_results()
        token, results = self.one_result(lambda _inp: {"ratio": float("nan")})
        self.assertEqual([(r.path, r.body["token"]) for r in results], [("/v1/tasks/fail", token)])
        error = results[0].body["error"]
        self.assertEqual((error["code"], error["retryable"]), ("RESULT_NOT_JSON", False))
        self.assertIn("ValueError", error["message"])

    def test_a_failure_whose_details_are_not_json_is_reported_not_lost(self) -> None:
        self.strict_results()

        def h(_inp):
            raise TaskError("DECLINED", "no", retryable=False, details={"at": datetime.datetime(2026, 1, 1)})

        token, results = self.one_result(h)
        self.assertEqual([(r.path, r.body["token"]) for r in results], [("/v1/tasks/fail", token)])
        error = results[0].body["error"]
        self.assertEqual((error["code"], error["retryable"]), ("RESULT_NOT_JSON", False))
        self.assertIn("DECLINED", error["message"])
        self.assertIn("datetime", error["message"])

    def assert_refused_then_small(self, token, results) -> None:
        self.assertEqual([r.path for r in results], ["/v1/tasks/fail"] * 2)
        self.assertEqual({r.body["token"] for r in results}, {token})
        error = results[1].body["error"]
        self.assertEqual((error["code"], error["retryable"]), ("RESULT_REJECTED", False))
        self.assertLessEqual(len(error["message"]), 2000)
        self.assertIn("INVALID_REQUEST", error["message"])
        self.assertIn(error.get("details"), (None, {}))

    def test_a_failure_with_a_message_over_100000_characters_is_reported_as_a_small_one(self) -> None:
        self.strict_results()

        def h(_inp):
            raise ValueError("x" * 200_000)

        self.assert_refused_then_small(*self.one_result(h))

    def test_a_failure_with_an_empty_code_is_reported_as_a_small_one(self) -> None:
        self.strict_results()

        def h(_inp):
            raise TaskError("")

        self.assert_refused_then_small(*self.one_result(h))

    def test_an_output_the_runtime_refuses_with_400_is_reported_as_a_failure(self) -> None:
        self.fake.script(
            "/v1/tasks/complete", ("json", 400, {"error": {"code": "BAD_JSON", "message": "not JSON"}})
        )
        token, results = self.one_result(lambda _inp: {"ok": True})
        self.assertEqual([r.path for r in results], ["/v1/tasks/complete", "/v1/tasks/fail"])
        error = results[1].body["error"]
        self.assertEqual((error["code"], error["retryable"]), ("OUTPUT_REJECTED", False))
        self.assertEqual(results[1].body["token"], token)

    def test_when_even_the_small_failure_is_refused_the_result_is_dropped_once(self) -> None:
        refused = ("json", 422, {"error": {"code": "INVALID_REQUEST", "message": "no"}})
        self.fake.handlers["/v1/tasks/fail"] = lambda _rec: refused

        def h(_inp):
            raise TaskError("E", "m")

        with self.assertLogs("orbit", level="ERROR") as logs:
            token, results = self.one_result(h)
        self.assertEqual([r.path for r in results], ["/v1/tasks/fail"] * 2)
        self.assertEqual(results[1].body["error"]["code"], "RESULT_REJECTED")
        self.assertTrue([m for m in logs.output if "dropping the result of " + token in m], logs.output)

    def test_a_handler_that_finishes_despite_a_cancel_reports_its_output_once(self) -> None:
        w = self.worker()
        started = threading.Event()

        @w.task("stubborn", contract="1")
        def stubborn(_inp, ctx: TaskContext):
            started.set()
            ctx.cancelled.wait(5)
            return {"finished": True}

        w.start()
        task = self.fake.add_task(task="stubborn")
        self.assertTrue(started.wait(5))
        self.fake.cancel.append(task["token"])
        done = self.fake.wait_for("the result", lambda: self.fake.results())
        time.sleep(0.2)
        self.assertEqual([(r.path, r.body["output"]) for r in self.fake.results()], [("/v1/tasks/complete", {"finished": True})])
        self.assertEqual(done[0].body["token"], task["token"])

    def test_stop_during_a_registration_that_keeps_failing_ends_the_worker(self) -> None:
        w = self.worker()

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            return {}

        self.fake.script("/v1/workers/register", *[("raw", 503, b"unavailable")] * 1000)
        errors = []
        thread = threading.Thread(target=lambda: errors.append(_call(w.start)))
        with self.assertLogs("orbit", level="WARNING"):
            thread.start()
            self.fake.wait_for("a few registrations", lambda: len(self.fake.of("/v1/workers/register")) >= 3)
            w.stop()
            thread.join(5)
        self.assertFalse(thread.is_alive())
        self.assertEqual(errors, [None])
        self.assertTrue(w.wait(5))
        self.assertEqual(w.state, "stopped")

    def test_cancellation_reaches_the_task(self) -> None:
        w = self.worker()
        started = threading.Event()
        seen = []

        @w.task("long", contract="1")
        def long(_inp, ctx: TaskContext):
            started.set()
            cancelled = ctx.sleep(10)
            seen.append((cancelled, ctx.cancel_reason))
            raise RuntimeError("stopped early")

        w.start()
        task = self.fake.add_task(task="long")
        self.assertTrue(started.wait(5))
        beats = self.fake.wait_for(
            "a heartbeat naming the token",
            lambda: [r for r in self.fake.of("/v1/workers/heartbeat") if task["token"] in r.body["tokens"]],
        )
        self.assertTrue(beats)
        self.fake.cancel.append(task["token"])
        fail = self.fake.wait_for("the fail", lambda: self.fake.of("/v1/tasks/fail"))[0]
        self.assertEqual(seen, [(True, "cancel")])
        self.assertEqual(fail.body["error"]["code"], "CANCELLED")

    def test_a_passed_deadline_cancels_the_task(self) -> None:
        w = self.worker()
        seen = []

        @w.task("slow", contract="1")
        def slow(_inp, ctx: TaskContext):
            seen.append(ctx.time_left() is not None and ctx.time_left() < 1)
            if ctx.sleep(10):
                seen.append(ctx.cancel_reason)
                raise TimeoutError("gave up")
            return {}

        w.start()
        self.fake.add_task(task="slow", deadline_ms=int(time.time() * 1000) + 300)
        fail = self.fake.wait_for("the fail", lambda: self.fake.of("/v1/tasks/fail"))[0]
        self.assertEqual(seen, [True, "deadline"])
        self.assertEqual(fail.body["error"]["code"], "DEADLINE_EXCEEDED")
        self.assertIs(fail.body["error"]["retryable"], True)

    def test_context_heartbeat_answers_cancellation(self) -> None:
        w = self.worker(heartbeat_s=60)
        answers = []

        @w.task("long", contract="1")
        def long(_inp, ctx: TaskContext):
            answers.append(ctx.heartbeat())
            self.fake.cancel.append(ctx.token)
            answers.append(ctx.heartbeat())
            return {"done": True}

        w.start()
        self.fake.add_task(task="long")
        self.fake.wait_for("the result", lambda: self.fake.results())
        self.assertEqual(answers, [False, True])

    def test_concurrency_bounds_running_tasks(self) -> None:
        w = self.worker(concurrency=2)
        lock = threading.Lock()
        running = [0, 0]  # now, peak
        release = threading.Event()

        @w.task("t", contract="1")
        def t(_inp, _ctx):
            with lock:
                running[0] += 1
                running[1] = max(running[1], running[0])
            release.wait(5)
            with lock:
                running[0] -= 1
            return {}

        w.start()
        for _ in range(5):
            self.fake.add_task(task="t")
        self.fake.wait_for("two running", lambda: running[0] == 2)
        time.sleep(0.2)
        self.assertEqual(running[1], 2)
        release.set()
        self.fake.wait_for("five results", lambda: len(self.fake.results()) == 5)
        for poll in self.fake.of("/v1/workers/poll"):
            self.assertLessEqual(poll.body["max_tasks"], 2)
            self.assertGreaterEqual(poll.body["max_tasks"], 1)

    def test_graceful_stop_finishes_and_reports_running_tasks(self) -> None:
        w = self.worker()
        started = threading.Event()

        @w.task("slow", contract="1")
        def slow(_inp, ctx: TaskContext):
            started.set()
            time.sleep(0.3)
            return {"finished": not ctx.cancelled.is_set()}

        w.start()
        task = self.fake.add_task(task="slow")
        self.assertTrue(started.wait(5))
        w.stop(grace_s=10)
        polls = len(self.fake.of("/v1/workers/poll"))
        self.assertTrue(w.wait(10))
        done = self.fake.of("/v1/tasks/complete")
        self.assertEqual([(r.body["token"], r.body["output"]) for r in done], [(task["token"], {"finished": True})])
        self.assertNotIn("session_id", done[0].body)  # stopping: no new work asked for
        self.assertEqual(len(self.fake.of("/v1/workers/unregister")), 1)
        self.assertLessEqual(len(self.fake.of("/v1/workers/poll")), polls + 1)
        self.assertEqual(w.state, "stopped")

    def test_grace_period_abandons_a_task_that_does_not_finish(self) -> None:
        w = self.worker()
        started = threading.Event()
        reasons = []

        @w.task("stuck", contract="1")
        def stuck(_inp, ctx: TaskContext):
            started.set()
            ctx.cancelled.wait(10)
            reasons.append(ctx.cancel_reason)
            return {}

        w.start()
        self.fake.add_task(task="stuck")
        self.assertTrue(started.wait(5))
        began = time.monotonic()
        w.shutdown(grace_s=0.3)
        self.assertLess(time.monotonic() - began, 3)
        self.assertEqual(reasons, ["shutdown"])
        self.assertEqual(len(self.fake.of("/v1/workers/unregister")), 1)


if __name__ == "__main__":
    logging.basicConfig(level=logging.DEBUG)
    unittest.main()
