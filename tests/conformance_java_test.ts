/** The conformance suite (tests/conformance/README.md) for the java SDK. */
import { conformanceTest } from "./conformance/suite.ts";

conformanceTest("java");
