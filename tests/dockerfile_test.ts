/**
 * The Dockerfile, rehearsed without Docker (the image cannot be built where the tests run):
 * its instructions are parsed and checked, the build is replayed on a copy of the build
 * context (.dockerignore applied; every COPY copies, every RUN runs), then the CMD is started
 * with the image's ENV and the HEALTHCHECK command is run against it: exit 0 while the server
 * is ready, non-zero when it answers 503 and when it is gone.
 */
import assert from "node:assert/strict";
import { api, tempDir, waitFor } from "./support/server.ts";
import { cleanEnv, described, run } from "./support/run.ts";

const ROOT = new URL("../", import.meta.url).pathname;

interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

/** Dockerfile instructions: comments dropped, `\` continuations joined. */
function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = [];
  let current: Instruction | null = null;
  text.split("\n").forEach((raw, i) => {
    const line = raw.trim();
    if (line.startsWith("#") || (line === "" && current === null)) return;
    const continued = line.endsWith("\\");
    const body = continued ? line.slice(0, -1).trim() : line;
    if (current === null) {
      const m = body.match(/^([A-Za-z]+)\s*(.*)$/);
      assert.ok(m, `line ${i + 1}: not an instruction: ${raw}`);
      current = { keyword: m[1]!.toUpperCase(), args: m[2]!, line: i + 1 };
    } else if (body !== "") {
      current.args += ` ${body}`;
    }
    if (!continued) {
      out.push(current);
      current = null;
    }
  });
  assert.equal(current, null, "the Dockerfile ends in a continuation");
  return out;
}

/** `K=V K2=V2` (the ENV form used here; no quoting). */
function parseEnv(args: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of args.trim().split(/\s+/)) {
    const eq = pair.indexOf("=");
    assert.ok(eq > 0, `ENV ${args}: use the K=V form`);
    env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return env;
}

/** The exec form (`["deno", "run", …]`): shell form would need a shell the test cannot vouch for. */
function execForm(what: string, args: string): string[] {
  assert.ok(args.trim().startsWith("["), `${what} uses the exec form: ${args}`);
  const argv = JSON.parse(args);
  assert.ok(Array.isArray(argv) && argv.every((a) => typeof a === "string"), args);
  return argv;
}

/** .dockerignore as a predicate on context-relative paths (`*`, `?`, `**`; no `!` rules). */
function dockerignore(text: string): (path: string) => boolean {
  const patterns = text.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  assert.ok(!patterns.some((p) => p.startsWith("!")), "no exceptions: this matcher has none");
  const res = patterns.map((p) => {
    const pat = p.replace(/^\/+/, "").replace(/\/+$/, "");
    let re = "";
    for (let i = 0; i < pat.length; i++) {
      const c = pat[i]!;
      if (c === "*" && pat[i + 1] === "*") {
        i++;
        if (pat[i + 1] === "/") {
          i++;
          re += "(?:.*/)?";
        } else re += ".*";
      } else if (c === "*") re += "[^/]*";
      else if (c === "?") re += "[^/]";
      else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
    }
    // A pattern that matches a directory excludes everything in it.
    return new RegExp(`^${re}(?:/.*)?$`);
  });
  return (path) => res.some((re) => re.test(path));
}

/** Every file of the build context, relative to it. */
async function contextFiles(ignored: (p: string) => boolean): Promise<string[]> {
  const files: string[] = [];
  const walk = async (rel: string) => {
    for await (const e of Deno.readDir(`${ROOT}${rel}`)) {
      const path = rel ? `${rel}/${e.name}` : e.name;
      if (ignored(path)) continue;
      if (e.isDirectory) await walk(path);
      else if (e.isFile) files.push(path);
    }
  };
  await walk("");
  return files.sort();
}

/** The RUNs allowed as root, before `USER deno`: setting up the volume's directory. */
const ROOT_SETUP = new Set(["mkdir -p /data && chown deno:deno /data"]);

Deno.test({
  name: "the Dockerfile: its build replayed on the context, its CMD and HEALTHCHECK run",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async (t) => {
    const steps = parseDockerfile(await Deno.readTextFile(`${ROOT}Dockerfile`));
    const one = (keyword: string) => {
      const all = steps.filter((s) => s.keyword === keyword);
      assert.equal(all.length, 1, `one ${keyword} instruction`);
      return all[0]!;
    };
    const ignored = dockerignore(await Deno.readTextFile(`${ROOT}.dockerignore`));
    const image = await tempDir(); // the image's file system: /app is `${image}/app`
    const inImage = (p: string) => `${image}${p}`;
    let server: Deno.ChildProcess | undefined;
    let fake: Deno.HttpServer<Deno.NetAddr> | undefined;
    try {
      await t.step("instructions: base image, user, port, environment, volume", () => {
        assert.equal(steps[0]!.keyword, "FROM");
        // The image runs the Deno the tests run.
        assert.equal(steps[0]!.args, `denoland/deno:${Deno.version.deno}`);
        const users = steps.filter((s) => s.keyword === "USER").map((s) => s.args);
        assert.deepEqual(users, ["deno"], "one USER, the image's non-root deno user");
        const userAt = steps.findIndex((s) => s.keyword === "USER");
        assert.ok(userAt < steps.findIndex((s) => s.keyword === "CMD"));
        assert.equal(one("EXPOSE").args, "7233");
        assert.deepEqual(parseEnv(one("ENV").args), {
          ORBIT_ADDR: "0.0.0.0:7233",
          ORBIT_DB: "/data/orbit.db",
        });
        assert.equal(one("VOLUME").args, "/data");
        assert.match(one("HEALTHCHECK").args, /^(--[a-z-]+=\S+\s+)*CMD \[/);
        execForm("CMD", one("CMD").args);
      });

      let files: string[] = [];
      await t.step(".dockerignore: the source in, repository and test matter out", async () => {
        files = await contextFiles(ignored);
        for (const f of ["main.ts", "deno.json", "deno.lock", "deploy/healthcheck.ts"]) {
          assert.ok(files.includes(f), `${f} is in the build context`);
        }
        assert.ok(files.includes("examples/order-processing/worker.ts"));
        assert.ok(files.some((f) => f.startsWith("sql/sqlite/")));
        for (const f of files) {
          assert.ok(!/^(\.git|dist|tests|node_modules)\//.test(f), `${f} is in the context`);
          assert.ok(!/\.db(-wal|-shm)?$/.test(f), `${f} (a database) is in the context`);
        }
      });

      const env: Record<string, string> = {};
      let workdir = "/";
      await t.step("the build: every COPY copied, every RUN run, in order", async () => {
        let user = "root";
        for (const s of steps) {
          const at = `line ${s.line}: ${s.keyword} ${s.args}`;
          switch (s.keyword) {
            case "FROM":
            case "EXPOSE":
            case "VOLUME":
            case "HEALTHCHECK":
            case "CMD":
              break;
            case "USER":
              user = s.args;
              break;
            case "ENV":
              Object.assign(env, parseEnv(s.args));
              break;
            case "WORKDIR":
              assert.ok(s.args.startsWith("/"), at);
              workdir = s.args;
              await Deno.mkdir(inImage(workdir), { recursive: true });
              break;
            case "COPY": {
              const words = s.args.split(/\s+/);
              assert.ok(!words.some((w) => w.startsWith("--")), `${at}: no COPY flags`);
              const dest = words.pop()!;
              const to = dest.startsWith("/") ? dest : `${workdir}/${dest}`;
              for (const src of words) {
                const picked = src === "." ? files : files.filter((f) => f === src);
                assert.ok(picked.length > 0, `${at}: ${src} is not in the build context`);
                for (const f of picked) {
                  const target = inImage(`${to}/${src === "." ? f : f.split("/").pop()}`);
                  await Deno.mkdir(target.slice(0, target.lastIndexOf("/")), { recursive: true });
                  await Deno.copyFile(`${ROOT}${f}`, target);
                }
              }
              break;
            }
            case "RUN": {
              if (user === "root") {
                assert.ok(ROOT_SETUP.has(s.args), `${at}: runs as root; only ${[...ROOT_SETUP]}`);
                await Deno.mkdir(inImage("/data"), { recursive: true });
                break;
              }
              // As the deno user: a deno command, run here exactly as in the image.
              const argv = s.args.split(/\s+/);
              assert.equal(argv[0], "deno", `${at}: a deno command`);
              assert.ok(!/[&|;<>$`'"]/.test(s.args), `${at}: no shell syntax`);
              const r = await run(Deno.execPath(), argv.slice(1), {
                cwd: inImage(workdir),
                env,
              });
              assert.equal(r.code, 0, `${at}\n${described(r)}`);
              break;
            }
            default:
              assert.fail(`${at}: an instruction this rehearsal does not know`);
          }
        }
        assert.equal(user, "deno");
        assert.ok(await Deno.stat(inImage("/app/main.ts")));
      });

      const healthcheck = execForm("HEALTHCHECK", one("HEALTHCHECK").args.replace(/^.*?CMD /, ""));
      assert.equal(healthcheck[0], "deno");
      const check = (addr: string) =>
        run(Deno.execPath(), healthcheck.slice(1), {
          cwd: inImage(workdir),
          env: { ...env, ORBIT_ADDR: addr },
          guardMs: 30_000,
        });

      let addr = "";
      await t.step("CMD starts the server on the volume's database; HEALTHCHECK: 0", async () => {
        const cmd = execForm("CMD", one("CMD").args);
        assert.equal(cmd[0], "deno");
        assert.deepEqual(cmd.slice(-2), ["main.ts", "server"]);
        assert.ok(cmd.includes("--unstable-no-legacy-abort"), "the flag, config file or not");
        // The image's environment, on a free loopback port and with /data inside the copy.
        server = new Deno.Command(Deno.execPath(), {
          args: cmd.slice(1),
          cwd: inImage(workdir),
          clearEnv: true,
          env: {
            ...cleanEnv(),
            ...env,
            ORBIT_ADDR: "127.0.0.1:0",
            ORBIT_DB: inImage(env.ORBIT_DB!),
          },
          stdin: "null",
          stdout: "null",
          stderr: "piped",
        }).spawn();
        const lines: string[] = [];
        (async () => {
          let buf = "";
          for await (const chunk of server.stderr.pipeThrough(new TextDecoderStream())) {
            buf += chunk;
            let i;
            while ((i = buf.indexOf("\n")) >= 0) {
              lines.push(buf.slice(0, i));
              buf = buf.slice(i + 1);
            }
          }
        })();
        const listening = await waitFor(
          () => lines.find((l) => /ORBIT runtime listening addr=/.test(l)),
          "the server's listening line",
          30_000,
        );
        addr = listening.match(/addr=(\S+)/)![1]!;
        assert.equal((await api(`http://${addr}`).get("/v1/ready")).status, 200);
        assert.ok(await Deno.stat(inImage("/data/orbit.db")), "the database is on the volume");
        const r = await check(addr);
        assert.equal(r.code, 0, described(r));
        assert.match(r.stdout, /^ready: \{.*"ready":true/);
      });

      await t.step("HEALTHCHECK: non-zero when /v1/ready answers 503", async () => {
        fake = Deno.serve(
          { hostname: "127.0.0.1", port: 0, onListen() {} },
          () => Response.json({ ready: false, role: "standby" }, { status: 503 }),
        );
        const r = await check(`127.0.0.1:${fake.addr.port}`);
        assert.equal(r.code, 1, described(r));
        assert.match(r.stderr, /not ready: .* answered 503/);
      });

      await t.step("docker stop (SIGTERM) stops it cleanly; HEALTHCHECK: non-zero", async () => {
        server!.kill("SIGTERM");
        const status = await server!.status;
        assert.equal(status.code, 0, "graceful stop");
        server = undefined;
        const r = await check(addr);
        assert.equal(r.code, 1, described(r));
        assert.match(r.stderr, /not ready: http:\/\/127\.0\.0\.1:\d+\/v1\/ready: /);
      });
    } finally {
      if (server) {
        try {
          server.kill("SIGKILL");
        } catch { /* gone */ }
        await server.status;
      }
      await fake?.shutdown();
      await Deno.remove(image, { recursive: true }).catch(() => {});
    }
  },
});

/** Directive lines of an HAProxy or nginx file: comments and blank lines dropped, trimmed. */
function directives(text: string): string[] {
  return text.split("\n").map((l) => l.replace(/#.*$/, "").trim()).filter((l) => l !== "");
}

/** The lines of one HAProxy section (`backend orbit`), up to the next section. */
function haproxySection(text: string, header: string): string[] {
  const lines = directives(text);
  const at = lines.indexOf(header);
  assert.ok(at >= 0, `no "${header}" section`);
  const sections = /^(global|defaults|frontend|backend|listen|resolvers|peers)\b/;
  const end = lines.findIndex((l, i) => i > at && sections.test(l));
  return lines.slice(at + 1, end < 0 ? undefined : end);
}

Deno.test("deploy/: the shared-mode HAProxy, nginx and Kubernetes files are the reference page's", async (t) => {
  await t.step(
    "haproxy-shared.cfg: round robin over all, /v1/ready, retry-on conn-failure",
    async () => {
      const text = await Deno.readTextFile(`${ROOT}deploy/haproxy-shared.cfg`);
      const backend = haproxySection(text, "backend orbit");
      for (
        const line of [
          "mode http",
          "balance roundrobin",
          "option httpchk GET /v1/ready",
          "http-check expect status 200",
          "default-server inter 1s fall 2 rise 1",
          "retry-on conn-failure",
          "timeout server 330s",
        ]
      ) assert.ok(backend.includes(line), `backend orbit: ${line}`);
      const servers = backend.filter((l) => l.startsWith("server "));
      assert.deepEqual(
        servers,
        [0, 1, 2].map((i) => `server orbit-${i} orbit-${i}.orbit.internal:7233 check`),
      );
      // Shared mode keeps connections to every live server: nothing is shut down on a check.
      assert.ok(!backend.some((l) => l.includes("on-marked-down")), "no on-marked-down");
      const frontend = haproxySection(text, "frontend orbit_in");
      assert.ok(frontend.includes("default_backend orbit"));
      // The backend timeout is above the longest wait (300 s) and long poll (60 s).
      for (const l of directives(text).filter((l) => l.startsWith("timeout server"))) {
        assert.equal(l, "timeout server 330s");
      }
    },
  );

  await t.step(
    "nginx-shared.conf: all servers, no non_idempotent, and a comment saying why",
    async () => {
      const text = await Deno.readTextFile(`${ROOT}deploy/nginx-shared.conf`);
      const lines = directives(text);
      const servers = lines.filter((l) => /^server\s+orbit-/.test(l));
      assert.deepEqual(
        servers,
        [0, 1, 2].map((i) => `server orbit-${i}.orbit.internal:7233 max_fails=1 fail_timeout=2s;`),
      );
      assert.ok(lines.includes("proxy_pass http://orbit;"));
      assert.ok(lines.includes("proxy_next_upstream error timeout;"));
      assert.ok(lines.includes("proxy_read_timeout 330s;"));
      assert.ok(!lines.some((l) => l.includes("non_idempotent")), "no non_idempotent directive");
      assert.ok(!lines.some((l) => l.includes("http_503")), "503 is not a reason to retry here");
      // The comment explains why a POST must not be retried on another server.
      const comments = text.split("\n").filter((l) => l.trim().startsWith("#")).join(" ");
      assert.match(comments, /non_idempotent/);
      assert.match(comments, /may have been applied/);
      let depth = 0;
      for (const ch of text.replace(/#.*$/gm, "")) {
        if (ch === "{") depth++;
        if (ch === "}") depth--;
        assert.ok(depth >= 0, "balanced braces");
      }
      assert.equal(depth, 0, "balanced braces");
    },
  );

  await t.step(
    "kubernetes/statefulset-shared.yaml: replicas, node id, shared mode, probes",
    async () => {
      const text = await Deno.readTextFile(`${ROOT}deploy/kubernetes/statefulset-shared.yaml`);
      assert.ok(!text.includes("\t"), "YAML is indented with spaces");
      const docs = text.split(/^---$/m);
      const set = docs.find((d) => /^kind: StatefulSet$/m.test(d));
      assert.ok(set, "a StatefulSet");
      const replicas = Number(set.match(/^ {2}replicas: (\d+)$/m)?.[1]);
      assert.ok(replicas >= 2, `several replicas (${replicas})`);
      const env = (name: string) =>
        set.match(new RegExp(`- \\{ name: ${name}, value: "([^"]*)" \\}`))?.[1];
      assert.equal(env("ORBIT_CLUSTER"), "true");
      assert.equal(env("ORBIT_CLUSTER_MODE"), "shared");
      assert.match(
        set,
        /- name: ORBIT_NODE_ID\n\s+valueFrom: \{ fieldRef: \{ fieldPath: metadata\.name \} \}/,
        "ORBIT_NODE_ID from the pod name (downward API)",
      );
      const nodeTimeout = Number(env("ORBIT_NODE_TIMEOUT") ?? 5);
      assert.ok(nodeTimeout >= 2, "--node-timeout is at least 2");
      assert.match(set, /readinessProbe:\n\s+httpGet: \{ path: \/v1\/ready, port: http \}/);
      assert.match(set, /livenessProbe:\n\s+httpGet: \{ path: \/v1\/health, port: http \}/);
      const grace = Number(set.match(/terminationGracePeriodSeconds: (\d+)/)?.[1]);
      assert.ok(grace >= 30, `room for a graceful leave (${grace} s)`);
      // The Service routes to the same pods, over every ready one: no affinity needed.
      const service = docs.find((d) => /^kind: Service$/m.test(d) && !/clusterIP: None/.test(d));
      assert.ok(service);
      const app = set.match(/labels: \{ app: ([\w-]+) \}/)?.[1];
      assert.ok(
        app && service.includes(`selector: { app: ${app} }`),
        "the Service selects the pods",
      );
      assert.ok(!/sessionAffinity: ClientIP/.test(service));
      // It does not collide with the standby manifest's names.
      const standby = await Deno.readTextFile(`${ROOT}deploy/kubernetes/statefulset.yaml`);
      const names = (t: string) => [...t.matchAll(/^ {2}name: ([\w-]+)/gm)].map((m) => m[1]);
      for (const n of names(text)) {
        if (n === "orbit") continue; // the secret's name is shared on purpose
        assert.ok(!names(standby).includes(n), `${n} is also a name in the standby manifest`);
      }
    },
  );
});
