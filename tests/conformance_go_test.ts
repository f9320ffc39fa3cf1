/** The conformance suite (tests/conformance/README.md) for the go SDK. */
import { conformanceTest } from "./conformance/suite.ts";

conformanceTest("go");
