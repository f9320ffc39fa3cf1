"""The client against a fake runtime: routes and bodies, error codes, NOT_LEADER followed once
to the advertised leader, history paging, bearer token, and TLS with a CA file."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import unittest
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_server import FakeOrbit, Recorded  # noqa: E402

from orbit_sdk import Client, OrbitApiError, OrbitConnectionError, OrbitExecutionError  # noqa: E402
from orbit_sdk.workflow import expr, workflow  # noqa: E402

EXECUTION = {
    "execution_id": "o-1",
    "run_id": "r-1",
    "root_id": "o-1",
    "workflow": "OrderProcessing",
    "version": "1.0.0",
    "status": "running",
    "input": {},
    "created_ms": 1,
}


@dataclass
class Out:
    points: int


class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.fake = FakeOrbit()
        self.client = Client(self.fake.url, token="secret-token")
        self.addCleanup(self.client.close)

    def tearDown(self) -> None:
        self.fake.close()

    def test_start_sends_the_documented_body_and_the_token(self) -> None:
        self.fake.script("/v1/executions", ("json", 201, EXECUTION))
        ex = self.client.start("OrderProcessing", {"order_id": "o-1"}, execution_id="o-1", version="1.0.0")
        self.assertEqual(ex["execution_id"], "o-1")
        req = self.fake.of("/v1/executions")[0]
        self.assertEqual(req.method, "POST")
        self.assertEqual(
            req.body,
            {"workflow": "OrderProcessing", "version": "1.0.0", "input": {"order_id": "o-1"}, "execution_id": "o-1"},
        )
        self.assertEqual(req.headers.get("authorization"), "Bearer secret-token")

    def test_a_builder_can_be_deployed_and_started(self) -> None:
        wf = workflow("Tiny", "2.0.0").task("a", "t.a", contract="1", input=expr("$input")).returns(expr("$steps.a"))
        self.fake.script("/v1/workflows", ("json", 201, {"name": "Tiny", "version": "2.0.0"}))
        self.fake.script("/v1/executions", ("json", 201, dict(EXECUTION, workflow="Tiny")))
        self.client.deploy(wf)
        self.client.start(wf, {"x": 1})
        self.assertEqual(self.fake.of("/v1/workflows")[0].body["ir"], "orbit-ir/1")
        self.assertEqual(self.fake.of("/v1/executions")[0].body, {"workflow": "Tiny", "version": "2.0.0", "input": {"x": 1}})

    def test_api_errors_carry_the_code_and_details(self) -> None:
        self.fake.script(
            "/v1/executions/o-1/signals/approve",
            ("json", 422, {"error": {"code": "SIGNAL_PAYLOAD_INVALID", "message": "bad", "problems": [{"path": "$.payload.by"}]}}),
        )
        with self.assertRaises(OrbitApiError) as caught:
            self.client.signal("o-1", "approve", {"by": 42})
        err = caught.exception
        self.assertEqual((err.status, err.code, err.message), (422, "SIGNAL_PAYLOAD_INVALID", "bad"))
        self.assertEqual(err.details["problems"], [{"path": "$.payload.by"}])
        self.assertEqual(self.fake.of("/v1/executions/o-1/signals/approve")[0].body, {"payload": {"by": 42}})

    def test_a_non_json_error_answer_is_http_status_code(self) -> None:
        self.fake.script("/v1/executions/x", ("raw", 502, b"Bad Gateway"))
        with self.assertRaises(OrbitApiError) as caught:
            self.client.get("x")
        self.assertEqual((caught.exception.code, caught.exception.message), ("HTTP_502", "Bad Gateway"))

    def test_not_leader_is_repeated_once_against_the_leader(self) -> None:
        leader = FakeOrbit()
        try:
            not_leader = {"error": {"code": "NOT_LEADER", "message": "standby", "leader_node": "a", "leader_addr": leader.url}}
            self.fake.script("/v1/executions", ("json", 503, not_leader, {"retry-after": "1"}))
            leader.script("/v1/executions", ("json", 201, EXECUTION))
            ex = self.client.start("OrderProcessing", execution_id="o-1")
            self.assertEqual(ex["execution_id"], "o-1")
            self.assertEqual(len(leader.of("/v1/executions")), 1)
            self.assertEqual(leader.of("/v1/executions")[0].headers.get("authorization"), "Bearer secret-token")
            # Only once: a leader that answers NOT_LEADER too is the caller's to see.
            self.fake.script("/v1/executions/o-1/cancel", ("json", 503, not_leader))
            leader.script("/v1/executions/o-1/cancel", ("json", 503, not_leader))
            with self.assertRaises(OrbitApiError) as caught:
                self.client.cancel("o-1", "test")
            self.assertEqual(caught.exception.code, "NOT_LEADER")
            self.assertEqual(leader.of("/v1/executions/o-1/cancel")[0].body, {"reason": "test"})
        finally:
            leader.close()

    def test_history_events_follow_the_pages(self) -> None:
        def page(rec: Recorded):
            after = int(dict(p.split("=") for p in rec.query.split("&") if p).get("after_seq", 0))
            events = [{"seq": s, "type": "X", "time_ms": 0} for s in range(after + 1, min(after + 3, 6) + 0)]
            body = {"events": events}
            if events and events[-1]["seq"] < 5:
                body["next_after_seq"] = events[-1]["seq"]
            return ("json", 200, body)

        self.fake.handlers["/v1/executions/o-1/history"] = page
        seqs = [e["seq"] for e in self.client.history_events("o-1")]
        self.assertEqual(seqs, [1, 2, 3, 4, 5])
        self.assertEqual(len(self.fake.of("/v1/executions/o-1/history")), 3)
        self.assertEqual(self.client.history("o-1", after_seq=2, limit=2)["events"][0]["seq"], 3)
        self.assertIn("limit=2", self.fake.of("/v1/executions/o-1/history")[-1].query)

    def test_wait_and_result(self) -> None:
        self.fake.script(
            "/v1/executions/o-1/wait",
            ("json", 200, dict(EXECUTION, status="completed", output={"points": 25})),
            ("json", 200, dict(EXECUTION, status="failed", error={"code": "CARD_DECLINED", "message": "no"})),
        )
        self.assertEqual(self.client.result("o-1", timeout_s=5, output=Out), Out(points=25))
        self.assertIn("timeout_s=5", self.fake.of("/v1/executions/o-1/wait")[0].query)
        with self.assertRaises(OrbitExecutionError) as caught:
            self.client.result("o-1", timeout_s=5)
        self.assertEqual(caught.exception.status, "failed")
        self.assertIn("CARD_DECLINED", str(caught.exception))

    def test_query_cancel_and_schedules(self) -> None:
        self.fake.script("/v1/executions/o-1/queries/status", ("json", 200, {"result": "approved"}))
        self.assertEqual(self.client.query("o-1", "status"), "approved")
        self.fake.script("/v1/schedules", ("json", 201, {"schedule_id": "s"}), ("json", 200, {"schedules": [{"schedule_id": "s"}]}))
        self.client.create_schedule({"schedule_id": "s", "workflow": "W", "every_s": 60})
        self.assertEqual(self.client.schedules(), [{"schedule_id": "s"}])
        self.fake.script("/v1/schedules/s", ("json", 200, {"schedule_id": "s", "every_s": 300}), ("json", 200, {"deleted": True}))
        self.client.update_schedule("s", {"every_s": 300})
        self.client.delete_schedule("s")
        methods = [(r.method, r.path) for r in self.fake.requests if r.path.startswith("/v1/schedules")]
        self.assertEqual(
            methods,
            [("POST", "/v1/schedules"), ("GET", "/v1/schedules"), ("PATCH", "/v1/schedules/s"), ("DELETE", "/v1/schedules/s")],
        )
        self.fake.script("/v1/schedules/s%2F1/trigger", ("json", 201, EXECUTION))
        self.client.trigger_schedule("s/1")  # ids are escaped as one path segment
        self.assertEqual(len(self.fake.of("/v1/schedules/s%2F1/trigger")), 1)

    def test_gets_are_repeated_after_connection_errors_posts_are_not(self) -> None:
        self.fake.script("/v1/executions/o-1", ("close",), ("json", 200, EXECUTION))
        self.assertEqual(self.client.get("o-1")["execution_id"], "o-1")
        self.fake.script("/v1/executions/o-1/cancel", ("close",))
        with self.assertRaises(OrbitConnectionError) as caught:
            self.client.cancel("o-1")
        self.assertIn("cannot reach ORBIT runtime at", str(caught.exception))
        self.assertEqual(len(self.fake.of("/v1/executions/o-1/cancel")), 1)


@unittest.skipUnless(shutil.which("openssl"), "openssl is needed to make a certificate")
class TlsTest(unittest.TestCase):
    def test_https_with_a_ca_file(self) -> None:
        tmp = tempfile.mkdtemp()
        cert, key = os.path.join(tmp, "server.crt"), os.path.join(tmp, "server.key")
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                "-keyout", key, "-out", cert,
            ],
            check=True,
            capture_output=True,
        )
        fake = FakeOrbit()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        fake.server.socket = ctx.wrap_socket(fake.server.socket, server_side=True)
        url = fake.url.replace("http://", "https://")
        try:
            fake.script("/v1/health", ("json", 200, {"status": "ok"}))
            self.assertEqual(Client(url, ca_file=cert).health(), {"status": "ok"})
            with self.assertRaises(OrbitConnectionError) as caught:
                Client(url, get_retries=0).health()  # not trusted without the CA file
            self.assertIn("certificate verify failed", str(caught.exception).lower())
        finally:
            fake.close()
            shutil.rmtree(tmp)


if __name__ == "__main__":
    unittest.main()
