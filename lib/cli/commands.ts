/** The client CLI (SPEC §7): subcommands registered on the `orbit` program. */
import type { Command } from "commander";

export function registerClientCommands(_program: Command): void {
}
