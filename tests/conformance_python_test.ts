/** The conformance suite (tests/conformance/README.md) for the python SDK. */
import { conformanceTest } from "./conformance/suite.ts";

conformanceTest("python");
