/**
 * The built-in mapping tables (./mappings/*.json): which tool of which server does which operation
 * on which of its arguments. Data, versioned per table (`id`, `version`), each naming the server
 * version it was checked against; docs/tools.md lists them. A table is selected by the server's
 * `serverInfo.name` (from its initialize answer) or declared in the policy (`tools.mapping`).
 */
import { z } from 'zod';
import filesystem from './mappings/filesystem.json' with { type: 'json' };
import git from './mappings/git.json' with { type: 'json' };
import fetchTable from './mappings/fetch.json' with { type: 'json' };
import terminal from './mappings/terminal.json' with { type: 'json' };
import github from './mappings/github.json' with { type: 'json' };
import sqlite from './mappings/sqlite.json' with { type: 'json' };
import postgres from './mappings/postgres.json' with { type: 'json' };

export const OPERATIONS = [
  'fs.read',
  'fs.write',
  'fs.delete',
  'shell.exec',
  'git.read',
  'git.write',
  'git.remote',
  'net.request',
  'db.read',
  'db.write',
  'unknown',
] as const;
export type Operation = (typeof OPERATIONS)[number];

const pathArg = z.strictObject({
  arg: z.string().min(1),
  /** The argument is an array of paths. */
  array: z.boolean().optional(),
  /** Relative paths are resolved against this other argument (itself resolved against the workspace). */
  base: z.string().min(1).optional(),
});

const toolMapping = z.strictObject({
  operation: z.enum(OPERATIONS),
  paths: z.array(pathArg).optional(),
  /** A URL argument: its host and the method below become the action's hosts and methods. */
  url: z.strictObject({ arg: z.string().min(1) }).optional(),
  /** The one host a server talks to whatever the arguments (an API client such as the GitHub server). */
  host: z.string().min(1).optional(),
  method: z.string().min(1).optional(),
  /** A SQL text argument (./sql.ts): its statement decides db.read or db.write, or makes the call ambiguous. */
  sql: z.strictObject({ arg: z.string().min(1) }).optional(),
  /** A command line run without a shell by leash terminal's own parser; `cwd` names the directory argument. */
  command: z.strictObject({ arg: z.string().min(1), cwd: z.string().min(1).optional() }).optional(),
  /**
   * What the answer lists below its path (./listing.ts): `lines` one entry name per line (`[DIR] x`),
   * `tree` a JSON tree of names, `paths` one absolute path per line. Entries a rule protects are taken out.
   */
  listing: z.enum(['lines', 'tree', 'paths']).optional(),
});

/** How the server reads a relative path (./model.ts). */
const relative = z.union([
  z.strictObject({ from: z.literal('allowed_dirs'), tool: z.string().min(1).optional() }),
  z.strictObject({ from: z.literal('cwd') }),
  z.strictObject({ from: z.literal('option'), option: z.string().min(1) }),
]);

export const mappingTableSchema = z.strictObject({
  id: z.string().min(1),
  version: z.number().int().positive(),
  package: z.string(),
  checked: z.string(),
  server_names: z.array(z.string().min(1)),
  /** Absent: the model cannot know where a relative path lands, and such a call is unknown. */
  relative: relative.optional(),
  /** The server opens a missing name through an entry equal to it once both are in Unicode NFC. */
  unicode_equivalent: z.boolean().optional(),
  tools: z.record(z.string().min(1), toolMapping),
});

export type ToolMapping = z.output<typeof toolMapping>;
export type MappingTable = z.output<typeof mappingTableSchema>;

/** The built-in tables, checked against the schema when this module loads (a bad table is a bug). */
export const MAPPINGS: ReadonlyMap<string, MappingTable> = new Map(
  [filesystem, git, fetchTable, terminal, github, sqlite, postgres].map((t) => {
    const m = mappingTableSchema.parse(t);
    return [m.id, m];
  }),
);

export const MAPPING_IDS = [...MAPPINGS.keys()];

/** The table whose server_names hold this serverInfo.name (exactly), or null. */
export function mappingForServer(serverName: string): MappingTable | null {
  for (const m of MAPPINGS.values()) if (m.server_names.includes(serverName)) return m;
  return null;
}
