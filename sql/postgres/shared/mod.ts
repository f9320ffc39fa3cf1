/**
 * Shared mode's named statements, one file per table (see common.ts).
 */
export * from "./commit.ts";
export * from "./common.ts";
export * from "./inbox.ts";
export * from "./nodes.ts";
export * from "./notify.ts";
export * from "./owners.ts";
export * from "./sessions.ts";
export * from "./tasks.ts";
