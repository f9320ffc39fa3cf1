/**
 * Awaits `p` for at most `ms`: past that, the returned promise rejects with a TimeoutError
 * (`p` itself goes on; its later result or rejection is ignored here).
 *
 * ```ts
 * const [r] = await withTimeout(sql.unsafe("SELECT 1"), 2000);
 * ```
 */
export class TimeoutError extends Error {
  constructor(ms: number) {
    super(`no answer within ${ms} ms`);
    this.name = "TimeoutError";
  }
}

export function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout>;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new TimeoutError(ms)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Waits for `p` until `deadline` (a `Date.now()` time): true when it settled by then (resolved
 * or rejected), false when the deadline came first (`p` goes on; its outcome is ignored).
 */
export async function settledBy(p: Promise<unknown>, deadline: number): Promise<boolean> {
  try {
    await withTimeout(p, Math.max(0, deadline - Date.now()));
    return true;
  } catch (e) {
    return !(e instanceof TimeoutError);
  }
}
