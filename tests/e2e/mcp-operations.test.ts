/**
 * The operations layer, output redaction and the audit against real servers from npm (installed
 * in this test's own temporary prefix), driven by the MCP SDK client through `leash mcp`.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI } from './mcp-helpers.js';

const SERVERS = ['@modelcontextprotocol/server-filesystem@2026.8.31', '@modelcontextprotocol/server-memory@2026.8.31'];
const SECRET = 'ghp_' + 'Zq81' + 'x7Lm'.repeat(8);

let prefix: string;
let root: string;
let ws: string;

beforeAll(() => {
  if (!fs.existsSync(CLI)) throw new Error(`the CLI is not built (${CLI}): npm run build`);
  prefix = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-npm-'));
  try {
    execFileSync('npm', ['install', '--prefix', prefix, '--no-audit', '--no-fund', '--loglevel=error', ...SERVERS], {
      stdio: ['ignore', 'ignore', 'pipe'],
      timeout: 240_000,
    });
  } catch (e) {
    throw new Error(`npm could not install ${SERVERS.join(' ')} into ${prefix}: ${String((e as Error).message)}`);
  }
  root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'leash-ops-e2e-')));
  ws = path.join(root, 'ws');
  fs.mkdirSync(ws);
  fs.writeFileSync(path.join(ws, 'a.txt'), 'inside\n');
  fs.writeFileSync(path.join(ws, '.env'), 'X=1\n');
  fs.writeFileSync(path.join(root, 'outside.txt'), 'outside\n');
  fs.symlinkSync(path.join(root, 'outside.txt'), path.join(ws, 'link.txt'));
}, 300_000);

afterAll(() => {
  if (prefix) fs.rmSync(prefix, { recursive: true, force: true });
  if (root) fs.rmSync(root, { recursive: true, force: true });
});

const bin = (pkg: string) => path.join(prefix, 'node_modules', '@modelcontextprotocol', pkg, 'dist', 'index.js');

async function connect(policy: string, server: string[], env: Record<string, string> = {}) {
  const dir = fs.mkdtempSync(path.join(root, 'run-'));
  const pf = path.join(dir, 'policy.yaml');
  fs.writeFileSync(pf, policy.replaceAll('AUDIT', path.join(dir, 'audit.jsonl')));
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, 'mcp', '--policy', pf, '--log', path.join(dir, 'decisions.jsonl'), '--', ...server],
    env: { ...(process.env as Record<string, string>), ...env },
    stderr: 'pipe',
  });
  const client = new Client({ name: 'leash-e2e', version: '1.0.0' });
  await client.connect(transport);
  return {
    client,
    audit: () =>
      fs
        .readFileSync(path.join(dir, 'audit.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>),
    auditText: () => fs.readFileSync(path.join(dir, 'audit.jsonl'), 'utf8'),
    decisionsText: () => fs.readFileSync(path.join(dir, 'decisions.jsonl'), 'utf8'),
    close: () => client.close(),
  };
}

/** The error a denied call gets (the SDK throws an McpError carrying code and data). */
async function denied(p: Promise<unknown>): Promise<{ code: number; reason: string }> {
  try {
    await p;
  } catch (e) {
    const err = e as { code: number; data?: { reason: string } };
    return { code: err.code, reason: err.data?.reason ?? '' };
  }
  throw new Error('the call was not denied');
}

const text = (r: unknown) => (r as { content: { type: string; text: string }[] }).content.map((c) => c.text).join('');

const FS_POLICY = `
tools:
  default: deny
  workspace: WS
  audit: AUDIT
  rules:
    - { id: no-env, effect: deny, operations: [fs.read, fs.write], resources: ["**/.env"] }
    - { id: ws-read, effect: allow, operations: [fs.read], resources: ["\${workspace}/**"] }
    - { id: ws-write, effect: allow, operations: [fs.write], resources: ["\${workspace}/**"] }
`;

describe('leash mcp with rules over operations, in front of @modelcontextprotocol/server-filesystem', () => {
  it('reads inside, denies ../ and symlink escapes, denies a multi-file read with one protected path whole', async () => {
    // The server may serve all of root: what keeps the agent in ws is the gate.
    const s = await connect(FS_POLICY.replace('WS', ws), [process.execPath, bin('server-filesystem'), root]);
    try {
      expect(
        text(await s.client.callTool({ name: 'read_text_file', arguments: { path: path.join(ws, 'a.txt') } })),
      ).toBe('inside\n');
      expect(
        await denied(s.client.callTool({ name: 'read_text_file', arguments: { path: `${ws}/../outside.txt` } })),
      ).toEqual({
        code: -32001,
        reason: 'operation_default_denied',
      });
      expect(
        await denied(s.client.callTool({ name: 'read_text_file', arguments: { path: path.join(ws, 'link.txt') } })),
      ).toEqual({
        code: -32001,
        reason: 'operation_default_denied',
      });
      expect(
        await denied(
          s.client.callTool({
            name: 'read_multiple_files',
            arguments: { paths: [path.join(ws, 'a.txt'), path.join(ws, '.env')] },
          }),
        ),
      ).toEqual({ code: -32001, reason: 'operation_denied' });
      const recs = s.audit();
      expect(recs.map((r) => [r.tool, r.operation, r.decision, r.rule])).toEqual([
        ['read_text_file', 'fs.read', 'allow', 'ws-read'],
        ['read_text_file', 'fs.read', 'deny', null],
        ['read_text_file', 'fs.read', 'deny', null],
        ['read_multiple_files', 'fs.read', 'deny', 'no-env'],
      ]);
      expect(recs[1]!.resources).toEqual([path.join(root, 'outside.txt')]);
      expect(recs[0]!.server).toBe('secure-filesystem-server');
      expect(recs[0]!.result_sha256).toMatch(/^[0-9a-f]{64}$/);
      expect(recs[3]!.dispatch).toBe('not-forwarded');
    } finally {
      await s.close();
    }
  }, 60_000);

  it('denies a write outside the workspace before the server sees it; a secret read back reaches the client masked', async () => {
    const s = await connect(FS_POLICY.replace('WS', ws), [process.execPath, bin('server-filesystem'), root]);
    const evil = path.join(root, 'evil.txt');
    const creds = path.join(ws, 'creds.txt');
    try {
      expect(
        await denied(s.client.callTool({ name: 'write_file', arguments: { path: evil, content: 'pwned' } })),
      ).toEqual({ code: -32001, reason: 'operation_default_denied' });
      // The server's side: nothing was written.
      expect(fs.existsSync(evil)).toBe(false);
      // Writing it through the gate would be blocked by input inspection; it is the server's
      // answer that carries it back.
      fs.writeFileSync(creds, `GITHUB_TOKEN is ${SECRET}\n`);
      const r = await s.client.callTool({ name: 'read_text_file', arguments: { path: creds } });
      expect(text(r)).not.toContain(SECRET);
      expect(text(r)).toContain('****');
      expect(JSON.stringify(r.structuredContent)).not.toContain(SECRET);
      const rec = s.audit().find((x) => x.tool === 'read_text_file')!;
      expect(rec).toMatchObject({ decision: 'allow', outcome: 'ok', redacted: true });
      expect(rec.result_sha256).toMatch(/^[0-9a-f]{64}$/);
      expect(s.auditText()).not.toContain(SECRET);
      expect(s.auditText()).not.toContain('GITHUB_TOKEN');
      expect(s.decisionsText()).not.toContain(SECRET);
    } finally {
      await s.close();
    }
  }, 60_000);
});

describe('leash mcp with rules, in front of @modelcontextprotocol/server-memory (no mapping table)', () => {
  it('an unknown tool is never allowed by the default: asked, and without an approver denied; the server never ran it', async () => {
    const memory = path.join(root, 'memory.jsonl');
    const s = await connect(
      `
tools:
  default: allow
  audit: AUDIT
  rules:
    - { id: reads, effect: allow, operations: [fs.read], resources: ["/**"] }
`,
      [process.execPath, bin('server-memory')],
      { MEMORY_FILE_PATH: memory },
    );
    try {
      const list = await s.client.listTools();
      expect(list.tools.map((t) => t.name)).toContain('create_entities');
      expect(
        await denied(
          s.client.callTool({
            name: 'create_entities',
            arguments: { entities: [{ name: 'x', entityType: 't', observations: ['o'] }] },
          }),
        ),
      ).toEqual({ code: -32001, reason: 'approval_unavailable' });
      expect(fs.existsSync(memory)).toBe(false);
      expect(s.audit()[0]).toMatchObject({ server: 'memory-server', operation: 'unknown', decision: 'deny' });
    } finally {
      await s.close();
    }
  }, 60_000);
});
