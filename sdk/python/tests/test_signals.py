"""Graceful shutdown of a worker process: SIGTERM lets the running task finish and reports it,
then unregisters (exit 0); a second signal exits at once (status 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_server import FakeOrbit  # noqa: E402

SDK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = """
import logging, sys, time
from orbit_sdk import Worker
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
worker = Worker(sys.argv[1], "sig-test", heartbeat_s=0.1, poll_wait_s=1)

@worker.task("work", contract="1")
def work(inp, ctx):
    print("started", flush=True)
    ctx.cancelled.wait(float(inp["seconds"]))  # ignores everything but its own timer
    time.sleep(float(inp["seconds"]) if not ctx.cancelled.is_set() else 0)
    return {"slept": inp["seconds"]}

worker.run(grace_s=30)
"""


@unittest.skipIf(sys.platform == "win32", "POSIX signals")
class SignalTest(unittest.TestCase):
    def setUp(self) -> None:
        self.fake = FakeOrbit()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, self.fake.url],
            env=dict(os.environ, PYTHONPATH=SDK),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def tearDown(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()
        self.fake.close()

    def started(self) -> None:
        self.assertEqual(self.proc.stdout.readline().strip(), "started")

    def test_sigterm_finishes_the_running_task_reports_it_and_unregisters(self) -> None:
        self.fake.wait_for("registration", lambda: self.fake.of("/v1/workers/register"))
        task = self.fake.add_task(task="work", input={"seconds": 0.5})
        self.started()
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(15), 0)
        done = self.fake.of("/v1/tasks/complete")
        self.assertEqual([(r.body["token"], r.body["output"]) for r in done], [(task["token"], {"slept": 0.5})])
        self.assertEqual(len(self.fake.of("/v1/workers/unregister")), 1)
        err = self.proc.stderr.read()
        self.assertIn("received SIGTERM: stopping", err)
        self.assertIn("INFO orbit worker stopped worker_id=sig-test", err)

    def test_a_second_signal_exits_at_once(self) -> None:
        self.fake.wait_for("registration", lambda: self.fake.of("/v1/workers/register"))
        self.fake.add_task(task="work", input={"seconds": 60})
        self.started()
        self.proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        self.assertIsNone(self.proc.poll(), "the first signal waits for the running task")
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(10), 130)
        self.assertLess(time.monotonic() - began, 5)
        self.assertEqual(self.fake.results(), [])


if __name__ == "__main__":
    unittest.main()
