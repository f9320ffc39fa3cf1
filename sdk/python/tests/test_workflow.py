"""The authoring builder: orbit-ir/1 while only ir/1 features are used, orbit-ir/2 after."""

from __future__ import annotations

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from orbit_sdk.workflow import expr, workflow  # noqa: E402


class WorkflowTest(unittest.TestCase):
    def test_tasks_retries_and_compensations_are_ir1(self) -> None:
        doc = (
            workflow("OrderProcessing", "1.0.0")
            .input({"type": "object", "required": ["order_id"]})
            .task(
                "validate",
                "orders.validate",
                contract="1",
                input=expr("$input"),
                retry={"max_attempts": 3, "non_retryable": ["INVALID_ORDER"]},
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
            .build()
        )
        self.assertEqual(doc["ir"], "orbit-ir/1")
        self.assertEqual(doc["steps"][0]["input"], "{% $input %}")
        self.assertEqual(doc["steps"][1]["language"], "python")
        self.assertEqual(doc["steps"][1]["compensate"]["task"], "payments.refund")
        self.assertEqual(doc["steps"][2], {"id": "done", "return": "{% $steps %}"})
        json.dumps(doc)

    def test_ir2_features_switch_the_version(self) -> None:
        wf = (
            workflow("Approval", "1.0.0")
            .signal("approve", {"type": "object"})
            .query("status", expr("$vars.status"))
            .handler("comment", lambda h: h.assign("keep", comments=expr("$append($vars.comments, $signal)")))
            .assign("init", status="waiting", comments=[])
            .wait_signal("approval", "approve", timeout_s=60)
            .sleep("cool", 1)
            .parallel("both", lambda b: b.sleep("nap", 1), [{"id": "pick", "wait_signal": "approve"}])
            .if_("big", "$input.total > 1000", lambda t: t.assign("gold", tier="gold"), lambda e: e.assign("std", tier="std"))
            .child("ship", "Shipping", input=expr("$input"))
            .http("notify", "http://127.0.0.1:8099/x", method="POST", body={"a": 1})
            .continue_as_new("again", input=expr("$input"))
        )
        doc = wf.build()
        self.assertEqual(doc["ir"], "orbit-ir/2")
        self.assertEqual(doc["signals"], {"approve": {"schema": {"type": "object"}}, "comment": {}})
        self.assertEqual(doc["handlers"]["comment"][0]["id"], "keep")
        big = next(s for s in doc["steps"] if s["id"] == "big")
        self.assertEqual(big["if"], "{% $input.total > 1000 %}")
        self.assertEqual(big["else"], [{"id": "std", "assign": {"tier": "std"}}])
        both = next(s for s in doc["steps"] if s["id"] == "both")
        self.assertEqual(both["parallel"][0], [{"id": "nap", "sleep_s": 1}])

    def test_duplicate_ids_and_bad_versions_are_refused(self) -> None:
        wf = workflow("W", "1.0.0").task("a", "t", contract="1").parallel("p", lambda b: b.task("a", "t", contract="1"))
        with self.assertRaisesRegex(ValueError, "step id 'a' is used twice"):
            wf.build()
        with self.assertRaisesRegex(ValueError, "semver"):
            workflow("W", "1.0")
        with self.assertRaisesRegex(ValueError, "forced"):
            workflow("W", "1.0.0").ir("orbit-ir/1").sleep("s", 1).build()
        self.assertEqual(workflow("W", "1.0.0").ir("orbit-ir/2").returns(1).build()["ir"], "orbit-ir/2")


if __name__ == "__main__":
    unittest.main()
