/**
 * Reads the workflow documents `orbit deploy` sends: JSON files (one document, or an array of
 * them) and TypeScript/JavaScript modules, whose exports that are workflow documents
 * (`{ir, name, version, steps}`) or builders (an object with a `build()` method that returns
 * one) are all deployed. Everything here fails with a usage error (exit 2).
 */
import { extname, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { usageError } from "./output.ts";

export interface LoadedDocument {
  /** The file as given on the command line. */
  file: string;
  /** Where in the file: `export foo`, `[2]`, or nothing for a whole JSON file. */
  where?: string;
  doc: unknown;
}

const MODULE_EXTS = new Set([".ts", ".mts", ".cts", ".tsx", ".js", ".mjs", ".cjs", ".jsx"]);

/** True for a value shaped like a workflow document. */
export function looksLikeDocument(v: unknown): boolean {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const o = v as Record<string, unknown>;
  return typeof o.ir === "string" && typeof o.name === "string" &&
    typeof o.version === "string" && Array.isArray(o.steps);
}

function isBuilder(v: unknown): v is { build(): unknown } {
  return typeof v === "object" && v !== null &&
    typeof (v as { build?: unknown }).build === "function";
}

export async function loadDocuments(files: string[]): Promise<LoadedDocument[]> {
  const out: LoadedDocument[] = [];
  for (const file of files) out.push(...await loadFile(file));
  return out;
}

async function loadFile(file: string): Promise<LoadedDocument[]> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(file);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) throw usageError(`${file}: no such file`);
    throw usageError(`${file}: cannot read: ${(e as Error).message}`);
  }
  if (!info.isFile) throw usageError(`${file}: not a file`);
  return MODULE_EXTS.has(extname(file).toLowerCase())
    ? await loadModule(file)
    : await loadJson(file);
}

async function loadJson(file: string): Promise<LoadedDocument[]> {
  let text: string;
  try {
    text = await Deno.readTextFile(file);
  } catch (e) {
    throw usageError(`${file}: cannot read: ${(e as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw usageError(`${file}: not valid JSON: ${(e as Error).message}`);
  }
  if (Array.isArray(value)) {
    if (value.length === 0) throw usageError(`${file}: the array holds no workflow documents`);
    return value.map((doc, i) => ({ file, where: `[${i}]`, doc }));
  }
  return [{ file, doc: value }];
}

async function loadModule(file: string): Promise<LoadedDocument[]> {
  let ns: Record<string, unknown>;
  try {
    ns = await import(pathToFileURL(resolve(file)).href);
  } catch (e) {
    throw usageError(`${file}: cannot load the module: ${(e as Error).message ?? e}`);
  }
  const out: LoadedDocument[] = [];
  const seen = new Set<unknown>();
  // Named exports first (in the namespace's order), then the default export.
  const names = Object.keys(ns).filter((n) => n !== "default");
  if ("default" in ns) names.push("default");
  for (const name of names) {
    const value = ns[name];
    if (seen.has(value)) continue;
    seen.add(value);
    let doc: unknown;
    if (looksLikeDocument(value)) {
      doc = value;
    } else if (isBuilder(value)) {
      try {
        doc = value.build();
      } catch (e) {
        throw usageError(`${file}: export ${name}: build() failed: ${(e as Error).message ?? e}`);
      }
      if (!looksLikeDocument(doc) || seen.has(doc)) continue;
      seen.add(doc);
    } else {
      continue;
    }
    out.push({ file, where: `export ${name}`, doc });
  }
  if (out.length === 0) {
    throw usageError(
      `${file}: exports no workflow document (an object with ir, name, version and steps, or a builder with build())`,
    );
  }
  return out;
}
