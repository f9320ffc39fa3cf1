/**
 * The documentation's relative links hold: every `[label](target)` and `![alt](target)` in
 * README.md, docs/*.md, sdk/*\/README.md and tests/conformance/README.md (outside code blocks and
 * code spans) names a file or directory that exists, and a `#anchor` names a heading of the target
 * Markdown file under GitHub's slug rules (lower case; every character but letters, digits, `_`,
 * `-` and spaces dropped; spaces become `-`; a repeated slug gets `-1`, `-2`, …).
 *
 * One exception, written narrowly: the SDKs other branches are adding (PENDING_SDKS) may be linked
 * as `sdk/<name>/README.md` before their directory exists. Once `sdk/<name>/` exists the link is
 * checked like any other, and nothing else about them is tolerated (no anchor, no other path).
 */
import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);

/** SDKs being added on other branches: `sdk/<name>/README.md` may be linked before it exists. */
const PENDING_SDKS = ["java", "rust", "csharp"];

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(new URL(path, ROOT));
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}

/** The Markdown files whose links are checked, as paths from the repository root. */
async function documents(): Promise<string[]> {
  const out = ["README.md", "tests/conformance/README.md"];
  for await (const e of Deno.readDir(new URL("docs/", ROOT))) {
    if (e.isFile && e.name.endsWith(".md")) out.push(`docs/${e.name}`);
  }
  for await (const e of Deno.readDir(new URL("sdk/", ROOT))) {
    if (e.isDirectory && await exists(`sdk/${e.name}/README.md`)) {
      out.push(`sdk/${e.name}/README.md`);
    }
  }
  return out.sort();
}

/** The lines outside fenced code blocks, with their line numbers (1-based). */
function proseLines(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let fence: string | null = null;
  text.split("\n").forEach((l, i) => {
    const m = /^\s*(`{3,}|~{3,})/.exec(l);
    if (m) {
      if (fence === null) fence = m[1]![0]!;
      else if (m[1]![0] === fence) fence = null;
      return;
    }
    if (fence === null) out.push({ line: i + 1, text: l });
  });
  return out;
}

/** GitHub's anchor for a heading's text. */
export function slug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1") // a link reads as its label
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, "")
    .replace(/ /g, "-");
}

/** Every anchor a Markdown file's headings give, repeated slugs numbered as GitHub does. */
export function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const { text: l } of proseLines(text)) {
    const m = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(l);
    if (!m) continue;
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The relative link targets of a Markdown file (absolute URLs left out). */
export function links(text: string): { line: number; target: string }[] {
  const out: { line: number; target: string }[] = [];
  for (const { line, text: l } of proseLines(text)) {
    const prose = l.replace(/(`+)[^`]*?\1/g, ""); // code spans hold no links
    for (const m of prose.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      out.push({ line, target: m[1]! });
    }
    const ref = /^ {0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)/.exec(prose);
    if (ref) out.push({ line, target: ref[1]! });
  }
  return out.filter((l) => !/^[a-z][a-z0-9+.-]*:/i.test(l.target));
}

/** The repository path a link in `from` names (`..` resolved), without its anchor. */
function resolve(from: string, path: string): string {
  const parts = from.split("/").slice(0, -1);
  for (const p of path.split("/")) {
    if (p === "" || p === ".") continue;
    if (p === "..") parts.pop();
    else parts.push(p);
  }
  return parts.join("/");
}

Deno.test("slugs follow GitHub's rules", () => {
  assert.equal(
    slug("Worker identities (`--workers-file`)"),
    "worker-identities---workers-file",
  );
  assert.equal(
    slug("Why is it waiting? (`GET /v1/executions/{id}/pending`)"),
    "why-is-it-waiting-get-v1executionsidpending",
  );
  assert.equal(
    slug("Python SDK (`sdk/python`, package `orbit_sdk`)"),
    "python-sdk-sdkpython-package-orbit_sdk",
  );
  assert.equal(slug("C#"), "c");
  assert.deepEqual(
    [...anchors("# A\n\n## A\n\n```\n# not a heading\n```\n\n### A\n")],
    ["a", "a-1", "a-2"],
  );
  assert.deepEqual(
    links("[x](a.md#b) `[y](c.md)` ![i](d.png) [u](https://e.org)\n```\n[z](f.md)\n```\n"),
    [{ line: 1, target: "a.md#b" }, { line: 1, target: "d.png" }],
  );
});

Deno.test("every relative link in the README, docs/ and the SDK READMEs reaches a file and heading", async () => {
  const docs = await documents();
  assert.ok(docs.includes("README.md") && docs.some((d) => d.startsWith("docs/")), docs.join());
  const cache = new Map<string, Set<string>>();
  const anchorsOf = async (path: string) => {
    if (!cache.has(path)) cache.set(path, anchors(await Deno.readTextFile(new URL(path, ROOT))));
    return cache.get(path)!;
  };
  const broken: string[] = [];
  let checked = 0;
  for (const doc of docs) {
    for (const { line, target } of links(await Deno.readTextFile(new URL(doc, ROOT)))) {
      checked++;
      const hash = target.indexOf("#");
      const path = hash < 0 ? target : target.slice(0, hash);
      const anchor = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
      const file = path === "" ? doc : resolve(doc, decodeURIComponent(path));
      const where = `${doc}:${line}: ${target}`;
      if (!await exists(file)) {
        const pending = /^sdk\/([a-z]+)\/README\.md$/.exec(file);
        if (
          pending && PENDING_SDKS.includes(pending[1]!) && anchor === null &&
          !await exists(`sdk/${pending[1]}`)
        ) continue; // being added on another branch
        broken.push(`${where} (no file ${file})`);
        continue;
      }
      if (anchor === null) continue;
      if (!file.endsWith(".md")) {
        broken.push(`${where} (an anchor into a file that is not Markdown)`);
      } else if (!(await anchorsOf(file)).has(anchor)) {
        broken.push(`${where} (no heading #${anchor} in ${file})`);
      }
    }
  }
  assert.deepEqual(broken, [], `broken links:\n${broken.join("\n")}`);
  assert.ok(checked > 20, `only ${checked} links found: is the extraction broken?`);
});
