/** Workflow definitions: deploy and read. */
import { Hono } from "hono";
import type { Runtime } from "../lib/runtime.ts";
import { invalid, notFound } from "../lib/errors.ts";
import { NAME_RE, SEMVER_RE } from "../lib/engine/ir.ts";
import type { DefinitionRow } from "../lib/store/store.ts";
import { rawJson } from "./util.ts";

const summary = (r: DefinitionRow) => ({
  name: r.name,
  version: r.version,
  ir: r.ir,
  hash: r.hash,
  created_ms: r.created_ms,
});

export function workflowRoutes(rt: Runtime): Hono {
  const app = new Hono();
  app.post("/", async (c) => {
    const { created, row } = await rt.definitions.deploy(await rawJson(c));
    return c.json({ ...summary(row), created }, created ? 201 : 200);
  });
  app.get("/", async (c) => {
    const rows = await rt.definitions.list();
    return c.json({ workflows: rows.map(summary) });
  });
  app.get("/:name", async (c) => {
    const name = c.req.param("name");
    // A name deploy refuses is never deployed (and a NUL is not even a PostgreSQL string).
    if (!NAME_RE.test(name)) throw notFound("UNKNOWN_WORKFLOW", `workflow ${name} is not deployed`);
    const rows = await rt.definitions.list(name);
    if (rows.length === 0) throw notFound("UNKNOWN_WORKFLOW", `workflow ${name} is not deployed`);
    return c.json({ name, versions: rows.map(summary) });
  });
  app.get("/:name/:version", async (c) => {
    const { name, version } = c.req.param();
    if (!NAME_RE.test(name)) throw notFound("UNKNOWN_WORKFLOW", `workflow ${name} is not deployed`);
    if (!SEMVER_RE.test(version)) {
      throw invalid("INVALID_VERSION", `version "${version}" is not a semantic version`);
    }
    const row = await rt.definitions.row(name, version);
    if (!row) {
      throw notFound("UNKNOWN_WORKFLOW", `workflow ${name} version ${version} is not deployed`);
    }
    return c.json({ ...summary(row), document: row.document });
  });
  return app;
}
