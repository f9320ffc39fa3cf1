/**
 * bench/cgroup.ts (the bench's `--server-cpus`) against temporary directories laid out as a
 * cgroup hierarchy, so that no root and no real cgroup is needed: the quota for a cap, the
 * parsing of cpu.stat (v1 and v2) and cpuacct.usage, which version is detected, the groups made
 * and removed, and the refusal where no group can be made.
 */
import assert from "node:assert/strict";
import {
  CgroupRefusal,
  CpuCaps,
  detectCpuController,
  parseCpuacctUsage,
  parseCpuStat,
  quotaUs,
  refusalMessage,
} from "../bench/cgroup.ts";

/** The CgroupRefusal `fn` throws. */
function refusal(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof CgroupRefusal, `not a refusal: ${e}`);
    return e.message;
  }
  assert.fail("not refused");
}

async function fakeRoot(version: "v1" | "v2" | "none"): Promise<string> {
  const root = await Deno.makeTempDir({ prefix: "orbit-cgroup-test-" });
  if (version === "v1") {
    await Deno.mkdir(`${root}/cpu`);
    await Deno.writeTextFile(`${root}/cpu/cpu.cfs_quota_us`, "-1\n");
    await Deno.writeTextFile(`${root}/cpu/cpu.cfs_period_us`, "100000\n");
  } else if (version === "v2") {
    await Deno.writeTextFile(`${root}/cgroup.controllers`, "cpuset cpu io memory pids\n");
    await Deno.writeTextFile(`${root}/cgroup.subtree_control`, "memory\n");
  } else {
    // A hybrid host's unified mount with no controllers, and no cpu mount.
    await Deno.writeTextFile(`${root}/cgroup.controllers`, "\n");
  }
  return root;
}

Deno.test("the quota is the cap's share of a 100 ms period", () => {
  assert.equal(quotaUs(0.25), 25_000);
  assert.equal(quotaUs(1), 100_000);
  assert.equal(quotaUs(1.5), 150_000);
  assert.equal(quotaUs(0.333), 33_300);
  assert.equal(quotaUs(0.5, 50_000), 25_000);
  assert.throws(() => quotaUs(0), RangeError);
  assert.throws(() => quotaUs(-1), RangeError);
  assert.throws(() => quotaUs(NaN), RangeError);
  assert.throws(() => quotaUs(0.001), /smallest quota/); // 100 µs < the kernel's 1 ms
});

Deno.test("cpu.stat of cgroup v1 and v2, and cpuacct.usage, are parsed", () => {
  // v1 (kernel 6.x): throttled_time in nanoseconds, no usage.
  assert.deepEqual(
    parseCpuStat(
      "nr_periods 120\nnr_throttled 87\nthrottled_time 4350000000\nnr_bursts 0\nburst_time 0\n",
    ),
    { usageUs: null, nrPeriods: 120, nrThrottled: 87, throttledUs: 4_350_000 },
  );
  // v2: microseconds, with usage.
  assert.deepEqual(
    parseCpuStat(
      "usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\nnr_periods 50\n" +
        "nr_throttled 10\nthrottled_usec 250000\nnr_bursts 0\nburst_usec 0\n",
    ),
    { usageUs: 3_000_000, nrPeriods: 50, nrThrottled: 10, throttledUs: 250_000 },
  );
  assert.deepEqual(parseCpuStat(""), {
    usageUs: null,
    nrPeriods: 0,
    nrThrottled: 0,
    throttledUs: 0,
  });
  assert.equal(parseCpuacctUsage("123456789\n"), 123456.789);
  assert.throws(() => parseCpuacctUsage(""));
});

Deno.test("the cpu controller is detected: v2 where cgroup.controllers lists cpu, else v1", async () => {
  const v1 = await fakeRoot("v1");
  const v2 = await fakeRoot("v2");
  const none = await fakeRoot("none");
  try {
    assert.deepEqual(detectCpuController(v1), { version: "v1", dir: `${v1}/cpu` });
    assert.deepEqual(detectCpuController(v2), { version: "v2", dir: v2 });
    assert.equal(detectCpuController(none), null);
    assert.equal(detectCpuController(`${none}/missing`), null);
  } finally {
    for (const d of [v1, v2, none]) await Deno.remove(d, { recursive: true });
  }
});

Deno.test("v1: a group per server with period and quota, removed at the end", async () => {
  const root = await fakeRoot("v1");
  try {
    const caps = CpuCaps.make(0.25, 3, { root, prefix: "orbit-bench-t" });
    assert.equal(caps.groups.length, 3);
    assert.equal(caps.quotaUs, 25_000);
    assert.match(caps.describe(), /cgroup v1 cpu\.cfs_quota_us 25000 \/ cpu\.cfs_period_us 100000/);
    for (const [i, g] of caps.groups.entries()) {
      assert.equal(g.path, `${root}/cpu/orbit-bench-t-${i}`);
      assert.equal(await Deno.readTextFile(`${g.path}/cpu.cfs_period_us`), "100000\n");
      assert.equal(await Deno.readTextFile(`${g.path}/cpu.cfs_quota_us`), "25000\n");
    }
    caps.groups[1]!.add(4242);
    assert.deepEqual(caps.groups[1]!.procs(), [4242]);
    await Deno.writeTextFile(
      `${caps.groups[1]!.path}/cpu.stat`,
      "nr_periods 9\nnr_throttled 4\nthrottled_time 2000000\n",
    );
    assert.deepEqual(caps.groups[1]!.stat(), {
      usageUs: null,
      nrPeriods: 9,
      nrThrottled: 4,
      throttledUs: 2000,
    });
    assert.deepEqual(caps.removeSync(), []);
    for (const g of caps.groups) {
      await assert.rejects(Deno.stat(g.path), Deno.errors.NotFound);
    }
    assert.deepEqual(caps.removeSync(), []); // twice is harmless
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("v2: cpu enabled for the children, cpu.max written", async () => {
  const root = await fakeRoot("v2");
  try {
    const caps = CpuCaps.make(0.5, 2, { root, prefix: "orbit-bench-t" });
    assert.equal(await Deno.readTextFile(`${root}/cgroup.subtree_control`), "+cpu\n");
    assert.equal(await Deno.readTextFile(`${root}/orbit-bench-t-0/cpu.max`), "50000 100000\n");
    assert.equal(await Deno.readTextFile(`${root}/orbit-bench-t-1/cpu.max`), "50000 100000\n");
    assert.match(caps.describe(), /cgroup v2 cpu\.max "50000 100000"/);
    assert.deepEqual(caps.removeSync(), []);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("no cpu controller: refused with a message saying why and what to do", async () => {
  const root = await fakeRoot("none");
  try {
    const message = refusal(() => CpuCaps.make(0.25, 3, { root }));
    assert.match(message, /^--server-cpus 0\.25: cannot give each ORBIT server a CPU cap/);
    assert.match(message, /nothing was started/);
    assert.match(message, new RegExp(`no cpu controller under ${root}`));
    assert.match(message, /as root/);
    assert.match(message, /leave out --server-cpus/);
    assert.doesNotMatch(message, /\n/); // one paragraph
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("a group that cannot be made: refused, and the groups made before are removed", async () => {
  const root = await fakeRoot("v1");
  try {
    if (Deno.uid() === 0) {
      // Root ignores permission bits: the third group's name is taken by a file instead.
      await Deno.writeTextFile(`${root}/cpu/orbit-bench-t-2`, "");
    } else {
      await Deno.chmod(`${root}/cpu`, 0o555);
    }
    const message = refusal(() => CpuCaps.make(0.25, 3, { root, prefix: "orbit-bench-t" }));
    assert.match(message, /making a cgroup v1 group in .* failed/);
    assert.match(message, /leave out --server-cpus/);
    await Deno.chmod(`${root}/cpu`, 0o755);
    const left = [...Deno.readDirSync(`${root}/cpu`)].filter((d) => d.isDirectory);
    assert.deepEqual(left, []);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("the refusal names the cap and the reason", () => {
  const m = refusalMessage(0.25, "EACCES");
  assert.match(m, /^--server-cpus 0\.25: .*: EACCES\. /);
  assert.match(m, /cpu\.cfs_quota_us/);
  assert.match(m, /cpu\.max/);
});
