/**
 * Workflow definitions: deploy (validate, then insert once; a deployed version is immutable)
 * and lookup, with an in-memory cache of parsed documents.
 */
import { canonicalJson, SEMVER_RE, type WorkflowDoc } from "./engine/ir.ts";
import { validateWorkflow } from "./engine/validate.ts";
import type { DefinitionRow, Store } from "./store/store.ts";
import { conflict, invalid, notFound } from "./errors.ts";
import semver from "semver";

async function sha256(text: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(d), (b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Semantic-version precedence (semver.org §11, via npm `semver`): numeric pre-release
 * identifiers compare as numbers (`alpha.2` < `alpha.10`), a pre-release sorts before its
 * release, and build metadata (`+build`) does not count. Versions equal in precedence but
 * different as text (`1.0.0+a`, `1.0.0+b`) are ordered by text, so the order is total. A
 * version `semver` cannot read (deployed before deploy checked number sizes, such as
 * `9007199254740993.0.0`) sorts below every other, so it never poisons "the latest".
 */
export function compareSemver(a: string, b: string): number {
  const va = semver.valid(a) !== null, vb = semver.valid(b) !== null;
  const byText = a < b ? -1 : a > b ? 1 : 0;
  if (!va || !vb) return va === vb ? byText : va ? 1 : -1;
  return semver.compare(a, b) || byText;
}

export class Definitions {
  #docs = new Map<string, WorkflowDoc>();
  /** Highest deployed version per workflow name; dropped on every deploy of that name. */
  #latest = new Map<string, string>();

  /** `httpAllow`: the `--http-allow` patterns; deploy refuses literal http URLs outside them. */
  constructor(
    readonly store: Store,
    readonly now: () => number,
    readonly opts: { httpAllow?: readonly string[] } = {},
  ) {}

  /**
   * Another server deployed a version of `name` (shared mode: NOTIFY orbit_defs, which the
   * PostgreSQL store sends in the deploy's own transaction).
   */
  forget(name: string): void {
    this.#latest.delete(name);
  }

  /**
   * Every workflow's latest version is read again at its next start without a version (shared
   * mode: the listening connection was (re)established, and what was announced while it was
   * down is lost).
   */
  forgetAll(): void {
    this.#latest.clear();
  }

  /** Deploys a document: `created` true on first deploy, false for an identical one (200). */
  async deploy(raw: unknown): Promise<{ created: boolean; row: DefinitionRow }> {
    const v = validateWorkflow(raw, { httpAllow: this.opts.httpAllow ?? [] });
    if (!v.ok) {
      throw invalid("INVALID_WORKFLOW", `workflow document has ${v.problems.length} problem(s)`, {
        problems: v.problems,
      });
    }
    const doc = v.doc;
    const hash = await sha256(canonicalJson(doc));
    const { created, stored } = await this.store.putDefinition({
      name: doc.name,
      version: doc.version,
      ir: doc.ir,
      document: doc,
      hash,
      created_ms: this.now(),
    });
    if (!created && stored.hash !== hash) {
      throw conflict(
        "WORKFLOW_VERSION_EXISTS",
        `workflow ${doc.name} version ${doc.version} is already deployed with a different document; deploy a new version`,
        { workflow: doc.name, version: doc.version },
      );
    }
    this.#docs.set(`${doc.name}@${doc.version}`, stored.document as WorkflowDoc);
    this.#latest.delete(doc.name);
    return { created, row: stored };
  }

  /** The stored row of one version (for reads: its hash and deploy time), or null. */
  row(name: string, version: string): Promise<DefinitionRow | null> {
    return this.store.getDefinition(name, version);
  }

  /** The document of one version (cached; deployed versions never change). */
  async get(name: string, version: string): Promise<WorkflowDoc | null> {
    const key = `${name}@${version}`;
    const hit = this.#docs.get(key);
    if (hit) return hit;
    const row = await this.store.getDefinition(name, version);
    if (!row) return null;
    const doc = row.document as WorkflowDoc;
    this.#docs.set(key, doc);
    return doc;
  }

  /** Resolves a start request's workflow and optional version (default: highest version). */
  async resolve(name: string, version?: string): Promise<WorkflowDoc> {
    if (version !== undefined) {
      if (!SEMVER_RE.test(version)) {
        throw invalid("INVALID_VERSION", `version "${version}" is not a semantic version`);
      }
      const doc = await this.get(name, version);
      if (!doc) {
        throw notFound("UNKNOWN_WORKFLOW", `workflow ${name} version ${version} is not deployed`);
      }
      return doc;
    }
    const cached = this.#latest.get(name);
    if (cached) return (await this.get(name, cached))!;
    const rows = await this.store.listDefinitions(name);
    if (rows.length === 0) throw notFound("UNKNOWN_WORKFLOW", `workflow ${name} is not deployed`);
    const latest = rows.map((r) => r.version).sort(compareSemver).at(-1)!;
    this.#latest.set(name, latest);
    return (await this.get(name, latest))!;
  }

  list(name?: string): Promise<DefinitionRow[]> {
    return this.store.listDefinitions(name);
  }
}
