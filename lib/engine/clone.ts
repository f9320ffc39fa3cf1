/**
 * A deep copy of plain JSON-like data (objects, arrays, primitives; `undefined` members are
 * kept). Execution state is such data, and copying it this way is several times cheaper than
 * `structuredClone`, which `decide` would otherwise pay on every command.
 */
export function cloneJson<T>(v: T): T {
  if (v === null || typeof v !== "object") return v;
  if (Array.isArray(v)) {
    const out = new Array(v.length);
    for (let i = 0; i < v.length; i++) out[i] = cloneJson(v[i]);
    return out as T;
  }
  const out: Record<string, unknown> = {};
  for (const k in v) {
    if (Object.hasOwn(v, k)) out[k] = cloneJson((v as Record<string, unknown>)[k]);
  }
  return out as T;
}
