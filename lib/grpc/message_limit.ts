/**
 * A message over grpc-js's receive limit answered as the API answers a body too large.
 *
 * lib/grpc/server.ts sets `grpc.max_receive_message_length` above `--max-body-bytes` (the JSON
 * body a call becomes is judged by the HTTP layer, which answers BODY_TOO_LARGE), so that a
 * message past it is refused as soon as its 5-byte length prefix arrives, unread. grpc-js
 * sends that refusal itself, before any handler or interceptor runs (its call object's own
 * `sendStatus`, on the error of its stream decoder): RESOURCE_EXHAUSTED with no metadata at all,
 * so a client would not get the `orbit-error-code` every other error of the binding has.
 *
 * So the status grpc-js sends for it gets the binding's trailers: `orbit-error-code:
 * BODY_TOO_LARGE`, `orbit-http-status: 413` and the API's error in `orbit-error-bin`, the very
 * answer HTTP gives past the limit. grpc-js has no hook there: this wraps `sendStatus` of its
 * (exported) base call class, for the version the import map pins; tests/grpc_limits_test.ts
 * fails if an upgrade moves or renames it.
 */
// The class is exported by its module, not by the package's index: imported by its path (the
// import map's "@grpc/grpc-js" covers it: one copy of the package).
import { BaseServerInterceptingCall } from "@grpc/grpc-js/build/src/server-interceptors.js";
import * as grpc from "@grpc/grpc-js";
import { Buffer } from "node:buffer";

/** grpc-js's details for a message over the limit, compressed or not. */
const OVER_LIMIT = /^Received message (?:that decompresses to a size )?larger than/;

let installed = false;
let limitBytes = 0;

/**
 * Installs the translation (once per process; the server's limit is the one the answers
 * name: one gRPC server per process).
 */
export function answerOversizedMessages(maxBodyBytes: number): void {
  limitBytes = maxBodyBytes;
  if (installed) return;
  installed = true;
  const proto = BaseServerInterceptingCall.prototype;
  const send = proto.sendStatus;
  proto.sendStatus = function (this: unknown, status: Parameters<typeof send>[0]) {
    if (
      status.code === grpc.status.RESOURCE_EXHAUSTED && OVER_LIMIT.test(status.details ?? "") &&
      !status.metadata?.get("orbit-error-code").length
    ) {
      const message = `request body exceeds ${limitBytes} bytes`;
      const md = status.metadata?.clone() ?? new grpc.Metadata();
      md.set("orbit-error-code", "BODY_TOO_LARGE");
      md.set("orbit-http-status", "413");
      md.set(
        "orbit-error-bin",
        Buffer.from(
          JSON.stringify({
            error: { code: "BODY_TOO_LARGE", message, limit_bytes: limitBytes },
          }),
        ),
      );
      status = { ...status, details: message, metadata: md };
    }
    return send.call(this, status);
  };
}
