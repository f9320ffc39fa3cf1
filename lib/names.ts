/**
 * Ids and names that people and programs read: worker ids, task names, runtimes, error codes.
 * They reach log lines, the CLI's tables and the console, so none may hold a character that
 * changes what a reader sees: a control character (a newline forges a log line, an escape
 * sequence recolours a terminal), a format character (U+202E and the other bidirectional
 * controls reorder the text around them, zero-width characters hide), or a line or paragraph
 * separator (U+2028, U+2029). Execution ids, workflow names, schedule ids, step ids and signal
 * names are plain ASCII already (their patterns in lib/engine/validate.ts, lib/executions/executions.ts,
 * lib/schedules/schedules.ts).
 */
import { z } from "zod";

const HIDDEN = /[\p{Cc}\p{Cf}\u2028\u2029]/u;

/** The first character of `s` that no name may hold, as `U+XXXX`; null when there is none. */
export function hiddenCharacter(s: string): string | null {
  const m = HIDDEN.exec(s);
  if (!m) return null;
  return `U+${m[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
}

/** A zod refinement: refuses a string with a hidden character, naming it. */
export function noHiddenCharacters(s: string, ctx: z.RefinementCtx): void {
  const hidden = hiddenCharacter(s);
  if (hidden) {
    ctx.addIssue({
      code: "custom",
      message: `must not contain ${hidden} (no control, invisible or bidirectional characters)`,
    });
  }
}

/** A name of 1 to `max` characters, none of them hidden (see above). */
export function plainName(max: number) {
  return z.string().min(1, "must not be empty").max(max, `must be at most ${max} characters`)
    .superRefine(noHiddenCharacters);
}
