/** The conformance suite (tests/conformance/README.md) for the typescript SDK. */
import { conformanceTest } from "./conformance/suite.ts";

conformanceTest("typescript");
