/**
 * A worker of the expression sandbox (lib/expressions/sandbox.ts): takes the budget, then evaluates
 * one expression at a time and answers its result or its error. Run as a module of its own from
 * the sources, or through main.ts in the bundle.
 */
import {
  configureExpressions,
  evaluateJsonata,
  ExpressionError,
  ExpressionLimitError,
} from "../engine/expr.ts";
import type { FromWorker, ToWorker } from "./sandbox.ts";

/** Starts answering the sandbox's messages in this worker. */
export function runExpressionWorker(): void {
  const scope = globalThis as unknown as {
    onmessage: ((ev: MessageEvent<ToWorker>) => void) | null;
    postMessage(m: FromWorker): void;
  };
  scope.onmessage = async (ev) => {
    const m = ev.data;
    if (m.kind === "budget") {
      configureExpressions({ budget: m.budget, sandbox: null });
      return;
    }
    try {
      scope.postMessage({ id: m.id, ok: true, value: await evaluateJsonata(m.text, m.scope) });
    } catch (e) {
      scope.postMessage({
        id: m.id,
        ok: false,
        limit: e instanceof ExpressionLimitError,
        message: e instanceof ExpressionError ? e.message : String(e),
      });
    }
  };
  scope.postMessage({ ready: true });
}

if (import.meta.main) runExpressionWorker();
