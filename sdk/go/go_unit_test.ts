/**
 * Runs the Go SDK's own checks as part of `deno task test`, so CI runs them: `gofmt -l` finds
 * nothing, `go vet ./...` and `go test ./...` pass (offline: no module proxy, the standard
 * library only). Skipped, loudly, where Go is not installed; CI installs it (.ci/run).
 */
import assert from "node:assert/strict";

const DIR = new URL(".", import.meta.url).pathname;
const ENV: Record<string, string> = { GOPROXY: "off", GOTOOLCHAIN: "local", GOFLAGS: "-count=1" };
// A build cache even where HOME is not set.
if (!Deno.env.get("HOME") && !Deno.env.get("GOCACHE")) ENV.GOCACHE = "/tmp/orbit-go-cache";

async function go(cmd: string, args: string[]): Promise<{ ok: boolean; text: string }> {
  const out = await new Deno.Command(cmd, {
    args,
    cwd: DIR,
    env: ENV,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { ok: out.success, text: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

let hasGo = false;
try {
  hasGo = (await new Deno.Command("go", { args: ["version"], stdout: "null", stderr: "null" })
    .output()).success;
} catch { /* not installed */ }
if (!hasGo) {
  console.warn(
    `\n${"!".repeat(78)}\n!!! SKIPPING the Go SDK's unit tests: go is not installed ` +
      `(Debian: apt-get install golang-go)\n${"!".repeat(78)}\n`,
  );
}

Deno.test({
  name: "Go SDK: gofmt, go vet and the go test suite pass",
  ignore: !hasGo,
  fn: async () => {
    const fmt = await go("gofmt", ["-l", "."]);
    assert.ok(fmt.ok, fmt.text);
    assert.equal(fmt.text.trim(), "", `gofmt would change:\n${fmt.text}`);
    const vet = await go("go", ["vet", "./..."]);
    assert.ok(vet.ok, `go vet ./... failed:\n${vet.text}`);
    const test = await go("go", ["test", "./..."]);
    assert.ok(test.ok, `go test ./... failed:\n${test.text}`);
    assert.match(test.text, /^ok\s+orbit\s/m, test.text);
  },
});
