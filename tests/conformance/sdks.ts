/**
 * The SDKs held to the conformance suite: one entry each. A new SDK (Java, Rust, C#) is its
 * conformance worker program (README.md, "The worker program") plus one line here.
 */
const ROOT = new URL("../../", import.meta.url).pathname;

export interface Sdk {
  /** Short name, also the column of the results table. */
  name: string;
  /** What its worker reports as `runtime` at registration. */
  runtime: string;
  /**
   * Makes the worker program ready (builds it once per run where it needs building) and
   * answers its command line (`--server URL` is appended). Throws a {@link MissingToolchain}
   * when the language's toolchain is not installed.
   */
  prepare(): Promise<string[]>;
}

/** The SDK cannot be tested here: its toolchain is not installed. */
export class MissingToolchain extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MissingToolchain";
  }
}

async function has(cmd: string, args: string[]): Promise<boolean> {
  try {
    const out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "null" }).output();
    return out.success;
  } catch {
    return false;
  }
}

/**
 * The environment of `go` commands: offline (no module proxy, the installed toolchain), with a
 * build cache even where HOME is not set.
 */
export function goEnv(): Record<string, string> {
  const env: Record<string, string> = { GOPROXY: "off", GOTOOLCHAIN: "local" };
  if (!Deno.env.get("HOME") && !Deno.env.get("GOCACHE")) env.GOCACHE = "/tmp/orbit-go-cache";
  return env;
}

/** `go build` of a program, once per test process, offline (no module proxy). */
async function goBuild(dir: string, pkg: string, name: string): Promise<string> {
  if (!(await has("go", ["version"]))) {
    throw new MissingToolchain("go is not installed (Debian: apt-get install golang-go)");
  }
  const out = `${await Deno.makeTempDir({ prefix: "orbit-conformance-" })}/${name}`;
  const r = await new Deno.Command("go", {
    args: ["build", "-o", out, pkg],
    cwd: dir,
    env: goEnv(),
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!r.success) {
    throw new Error(`go build ${pkg} failed:\n${new TextDecoder().decode(r.stderr)}`);
  }
  return out;
}

let goProgram: Promise<string> | null = null;

/**
 * The JVM's flags for the SDK's programs: a small, quick-starting JVM (the tests start many of
 * them on loaded machines).
 */
export const JAVA_FLAGS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"];

/**
 * `sdk/java/build.sh` (plain javac + jar, Gson from Debian's libgoogle-gson-java) into a temp
 * dir, once per test process; answers the classpath of the SDK, its conformance worker and its
 * example (and the dir, whose test-classes hold the unit tests).
 */
export async function javaBuild(): Promise<{ dir: string; classpath: string }> {
  const tools = ["javac", "java", "jar"];
  if (!(await Promise.all(tools.map((t) => has(t, ["--version"])))).every(Boolean)) {
    throw new MissingToolchain(
      "javac is not installed (Debian: apt-get install openjdk-17-jdk-headless)",
    );
  }
  const gson = Deno.env.get("GSON_JAR") ?? "/usr/share/java/gson.jar";
  try {
    await Deno.stat(gson);
  } catch {
    throw new MissingToolchain(
      `Gson is not installed at ${gson} (Debian: apt-get install libgoogle-gson-java)`,
    );
  }
  const dir = await Deno.makeTempDir({ prefix: "orbit-java-" });
  globalThis.addEventListener("unload", () => {
    try {
      Deno.removeSync(dir, { recursive: true });
    } catch { /* already gone */ }
  });
  const r = await new Deno.Command("sh", {
    args: [`${ROOT}sdk/java/build.sh`, dir],
    env: { GSON_JAR: gson },
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!r.success) {
    const dec = new TextDecoder();
    throw new Error(`sdk/java/build.sh failed:\n${dec.decode(r.stdout)}${dec.decode(r.stderr)}`);
  }
  const jars = ["orbit-sdk", "orbit-conformance", "orbit-examples"].map((j) => `${dir}/${j}.jar`);
  return { dir, classpath: [...jars, gson].join(":") };
}

let javaProgram: Promise<{ dir: string; classpath: string }> | null = null;

export const SDKS: Sdk[] = [
  {
    name: "typescript",
    runtime: "typescript",
    prepare: () =>
      Promise.resolve([
        Deno.execPath(),
        "run",
        "-A",
        `${ROOT}sdk/typescript/testing/conformance_worker.ts`,
      ]),
  },
  {
    name: "python",
    runtime: "python",
    prepare: async () => {
      if (!(await has("python3", ["--version"]))) {
        throw new MissingToolchain("python3 is not installed (Debian: apt-get install python3)");
      }
      return ["python3", "-u", `${ROOT}sdk/python/testing/conformance_worker.py`];
    },
  },
  {
    name: "go",
    runtime: "go",
    prepare: async () => {
      goProgram ??= goBuild(`${ROOT}sdk/go`, "./cmd/conformance", "conformance-go");
      return [await goProgram];
    },
  },
  {
    name: "java",
    runtime: "java",
    prepare: async () => {
      javaProgram ??= javaBuild();
      const { classpath } = await javaProgram;
      return ["java", ...JAVA_FLAGS, "-cp", classpath, "dev.orbit.conformance.ConformanceWorker"];
    },
  },
];
