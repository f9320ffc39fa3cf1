/**
 * The Python worker and client over HTTPS with a CA file and a bearer token, against a real
 * server with --tls-cert/--tls-key/--token (a self-signed certificate made here by `openssl`;
 * skipped where it is not installed): a workflow built in Python runs on the Python example
 * worker; a client without the CA file is refused by certificate verification, one with a
 * wrong token gets 401 UNAUTHORIZED.
 */
import assert from "node:assert/strict";
import { startServer, tempDir } from "./support/server.ts";
import { runPython, startPythonWorker } from "../sdk/python/testing/process.ts";
import { HAS_OPENSSL, selfSigned } from "./support/tls.ts";

const SCRIPT = `
import json, sys
from orbit_sdk import Client, OrbitApiError, OrbitConnectionError
from orbit_sdk.workflow import workflow, expr
url, ca, token = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
try:
    Client(url, token=token, get_retries=0).health()
except OrbitConnectionError as err:
    out["without_ca"] = str(err)
try:
    Client(url, token="wrong-token-0000", ca_file=ca).workflows()
except OrbitApiError as err:
    out["wrong_token"] = [err.status, err.code]
client = Client(url, token=token, ca_file=ca)
wf = (workflow("PyTls", "1.0.0")
      .task("validate", "orders.validate", contract="1", input=expr("$input"))
      .task("charge", "payments.charge", contract="1", language="python",
            input={"order_id": expr("$input.order_id"), "amount": expr("$steps.validate.total"),
                   "customer": expr("$input.customer")})
      .returns({"charge": expr("$steps.charge.charge_id")}, id="done"))
client.deploy(wf)
client.start("PyTls", {"order_id": "t-1", "customer": "ada", "items": [{"sku": "a", "qty": 2, "price": 3}]},
             execution_id="tls-1")
out["execution"] = client.wait("tls-1", timeout_s=30)
print(json.dumps(out))
`;

Deno.test({
  name: "Python worker and client over HTTPS with a CA file and a bearer token",
  ignore: !HAS_OPENSSL,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const dir = await tempDir();
    await selfSigned(dir); // server.crt and server.key in dir
    const token = "client-token-0123456789";
    const server = await startServer({
      db: `${dir}/orbit.db`,
      args: [
        "--tls-cert",
        `${dir}/server.crt`,
        "--tls-key",
        `${dir}/server.key`,
        "--token",
        token,
      ],
    });
    assert.match(server.url, /^https:/);
    const py = startPythonWorker(server.url, {
      ORBIT_CA_FILE: `${dir}/server.crt`,
      ORBIT_TOKEN: token,
    });
    try {
      await py.waitForLine(/INFO orbit worker registered worker_id=orders-python/);
      const run = await runPython(SCRIPT, [server.url, `${dir}/server.crt`, token]);
      assert.equal(run.code, 0, run.stderr);
      const out = JSON.parse(run.stdout);
      assert.match(
        out.without_ca,
        /cannot reach ORBIT runtime at https:.*certificate verify failed/,
      );
      assert.deepEqual(out.wrong_token, [401, "UNAUTHORIZED"]);
      assert.equal(out.execution.status, "completed", JSON.stringify(out.execution));
      assert.match(out.execution.output.charge, /^ch-.+:charge$/);
      assert.ok(py.traces().some((e) => e.execution_id === "tls-1" && e.step === "charge"));
    } finally {
      await py.kill("SIGKILL");
      await server.kill("SIGKILL");
    }
  },
});
