/** mayHaveCommitted: which failed commits leave their outcome unknown (issue 36). */
import assert from "node:assert/strict";
import {
  DuplicateExecutionError,
  FencedError,
  HistoryConflictError,
  InboxGoneError,
  mayHaveCommitted,
  TaskTakenError,
} from "./store.ts";

const err = (fields: Record<string, unknown>) => Object.assign(new Error("x"), fields);

Deno.test("a lost connection, an abandoned statement, an I/O error or an unknown error may have committed", () => {
  for (const code of ["CONNECTION_CLOSED", "CONNECTION_DESTROYED", "ECONNRESET", "EPIPE"]) {
    assert.equal(mayHaveCommitted(err({ code })), true, code);
  }
  for (const code of ["08006", "08003", "57P01", "57P02"]) {
    assert.equal(mayHaveCommitted(err({ code })), true, code);
  }
  for (const errcode of [10, 11, 13, 266 /* SQLITE_IOERR_READ */]) {
    assert.equal(mayHaveCommitted(err({ code: "ERR_SQLITE_ERROR", errcode })), true, `${errcode}`);
  }
  assert.equal(mayHaveCommitted(new Error("who knows")), true);
});

Deno.test("a refusal by the database or by the store wrote nothing", () => {
  for (const code of ["40001", "40P01", "23505", "22P05", "53300"]) {
    assert.equal(mayHaveCommitted(err({ code })), false, code);
  }
  for (const errcode of [5, 6, 19, 2067 /* SQLITE_CONSTRAINT_UNIQUE */]) {
    assert.equal(mayHaveCommitted(err({ code: "ERR_SQLITE_ERROR", errcode })), false, `${errcode}`);
  }
  // The store's mapping of a PostgreSQL error keeps the code in its cause.
  assert.equal(mayHaveCommitted(new Error("U+0000", { cause: err({ code: "22P05" }) })), false);
  for (
    const e of [
      new HistoryConflictError("x"),
      new DuplicateExecutionError("a"),
      new FencedError("x"),
      new TaskTakenError("x"),
      new InboxGoneError("x"),
    ]
  ) {
    assert.equal(mayHaveCommitted(e), false, e.name);
  }
});
