/** The conformance suite (tests/conformance/README.md) for the rust SDK. */
import { conformanceTest } from "./conformance/suite.ts";

conformanceTest("rust");
