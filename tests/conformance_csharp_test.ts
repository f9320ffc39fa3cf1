/** The conformance suite (tests/conformance/README.md) for the csharp SDK. */
import { conformanceTest } from "./conformance/suite.ts";

conformanceTest("csharp");
