/**
 * User regular expressions on a linear-time engine (RE2, through re2js): a pattern in a JSONata
 * expression (`$match($input, /…/)`) or in a user's JSON Schema (`pattern`,
 * `patternProperties`) cannot backtrack, so `^(a+)+$` against a long string costs microseconds,
 * not the server's event loop. RE2 has no backreferences or lookarounds: a pattern that needs
 * them is refused at deploy with RE2's own message.
 */
import { RE2JS } from "re2js";

/**
 * ECMAScript escapes RE2 spells differently: `\uXXXX` is `\x{XXXX}` in RE2. An escape only
 * counts when it follows an even number of backslashes (`\\u0041` is a backslash and "u0041").
 */
function toRe2Syntax(source: string): string {
  return source.replace(/(^|[^\\])((?:\\\\)*)\\u([0-9a-fA-F]{4})/g, "$1$2\\x{$3}");
}

function flagsOf(flags: string): number {
  let f = 0;
  if (flags.includes("i")) f |= RE2JS.CASE_INSENSITIVE;
  if (flags.includes("m")) f |= RE2JS.MULTILINE;
  if (flags.includes("s")) f |= RE2JS.DOTALL;
  return f;
}

/** Compiles `source` with RE2; throws `SyntaxError` with RE2's message when it cannot. */
export function compileLinear(source: string, flags = ""): RE2JS {
  try {
    return RE2JS.compile(toRe2Syntax(source), flagsOf(flags));
  } catch (e) {
    throw new SyntaxError(
      `${(e as Error).message} (patterns run on a linear-time engine, RE2: no backreferences ` +
        "or lookarounds)",
    );
  }
}

/** What `exec` answers: the match and its groups, with `index` (UTF-16 units, as RegExp). */
type ExecResult = string[] & { index: number };

/**
 * The regex class JSONata's `RegexEngine` option takes: built from the RegExp its parser made of
 * a `/…/flags` literal, used through `lastIndex` and `exec` only (jsonata.js evaluateRegex).
 */
export class LinearRegExp {
  lastIndex = 0;
  readonly #re: RE2JS;

  constructor(re: RegExp | string, flags = "") {
    const source = typeof re === "string" ? re : re.source;
    this.#re = compileLinear(source, typeof re === "string" ? flags : re.flags);
  }

  exec(str: string): ExecResult | null {
    const m = this.#re.matcher(str);
    if (this.lastIndex > str.length || !m.find(this.lastIndex)) {
      this.lastIndex = 0;
      return null;
    }
    const out = [] as unknown as ExecResult;
    for (let i = 0; i <= m.groupCount(); i++) out.push(m.group(i) ?? (undefined as never));
    out.index = m.start();
    this.lastIndex = m.end();
    return out;
  }

  test(str: string): boolean {
    return this.exec(str) !== null;
  }
}

/**
 * The `code.regExp` engine Ajv takes for `pattern` and `patternProperties`: called with the
 * pattern and Ajv's flags ("u"), used through `test`. Ajv shares one compiled pattern per
 * `toString()` among schemas, so it must name the pattern. `code` names the engine for Ajv's
 * standalone output, which ORBIT does not use.
 */
export const ajvLinearRegExp = Object.assign(
  (pattern: string, flags: string) => {
    const re = compileLinear(pattern);
    return {
      test: (s: string) => re.matcher(s).find(0),
      toString: () => `/${pattern}/${flags}`,
    };
  },
  { code: "re2js" },
);
