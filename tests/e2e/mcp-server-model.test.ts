/**
 * Issue #38: the gate judges the path the server will open. The real @modelcontextprotocol/server-filesystem
 * (a pinned devDependency) behind `leash mcp`, driven by the official SDK client; the gate and the server
 * are started from different directories, with and without client roots; marker files lie outside the
 * workspace. A case passes only if no marker reaches the client and the disk outside the workspace is
 * unchanged.
 */
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, ROOT } from './mcp-helpers.js';

const FS_SERVER = path.join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-filesystem', 'dist', 'index.js');
const MARKERS = ['L38-OUTSIDE-MARKER', 'l38-outdir-marker', 'l38-top-marker', 'L38-PRIVE-MARKER'];
const NFC = 'priv\u00e9';
const NFD = 'prive\u0301';

let root: string;
let ws: string;
let home: string;
/** A real PKCS#8 private key (PEM, 64-character lines) and the secrets the issue names. */
const PEM = crypto.generateKeyPairSync('rsa', {
  modulusLength: 2048,
  privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  publicKeyEncoding: { type: 'spki', format: 'pem' },
}).privateKey;
const BODY = PEM.split('\n').filter((l) => /^[A-Za-z0-9+/=]{16,}$/.test(l));
const TOKENS = [
  'AKIA' + 'QX7LM2NP4RT6VW8Y',
  'ghp_' + 'Zq81' + 'x7Lm'.repeat(8),
  'sk-' + 'proj' + 'Ab3Cd5Ef7Gh9'.repeat(4),
];

/** What lies outside the workspace: names and contents (the run directories of the logs left out). */
function outsideSnapshot(): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (p === ws || p === home || e.name.startsWith('l38-run-')) continue;
      if (e.isDirectory()) {
        out.push(`${p}/`);
        walk(p);
      } else out.push(`${p} ${fs.readFileSync(p, 'utf8')}`);
    }
  };
  walk(root);
  return out.sort();
}

beforeAll(() => {
  if (!fs.existsSync(CLI)) throw new Error(`the CLI is not built (${CLI}): npm run build`);
  if (!fs.existsSync(FS_SERVER)) throw new Error(`${FS_SERVER} is missing: npm install`);
  root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'l38-model-')));
  ws = path.join(root, 'ws');
  home = path.join(root, 'home');
  for (const d of [ws, home, path.join(root, 'sub'), path.join(root, 'outdir'), path.join(ws, 'sub')])
    fs.mkdirSync(d, { recursive: true });
  fs.writeFileSync(path.join(root, 'outside.txt'), 'L38-OUTSIDE-MARKER\n');
  fs.writeFileSync(path.join(root, 'l38-top-marker.txt'), 'top\n');
  fs.writeFileSync(path.join(root, 'outdir', 'l38-outdir-marker.txt'), 'x\n');
  fs.writeFileSync(path.join(ws, 'a.txt'), 'inside\n');
  fs.mkdirSync(path.join(ws, '.ssh'));
  fs.writeFileSync(path.join(ws, '.ssh', 'id_ed25519'), 'not a key\n');
  fs.mkdirSync(path.join(ws, NFC));
  fs.writeFileSync(path.join(ws, NFC, 'notes.txt'), 'L38-PRIVE-MARKER\n');
  fs.writeFileSync(path.join(ws, 'deploy-notes.txt'), `deploy notes\n${PEM}trailer\n`);
  fs.writeFileSync(path.join(ws, 'config-dump.txt'), `aws ${TOKENS[0]}\ngh ${TOKENS[1]}\nopenai ${TOKENS[2]}\n${PEM}`);
}, 60_000);

afterAll(() => {
  if (root) fs.rmSync(root, { recursive: true, force: true });
});

/** The filesystem recipe's rules, writes allowed in the workspace, and a deny on the NFC-named directory. */
const POLICY = `
tools:
  mapping: filesystem
  default: deny
  rules:
    - { id: no-secrets-files, effect: deny, operations: ["fs.*"], resources: ["**/.env", "**/.ssh", "**/*.pem", "**/id_rsa*"] }
    - { id: no-prive, effect: deny, operations: ["fs.*"], resources: ["\${workspace}/${NFC}"] }
    - { id: workspace-read, effect: allow, operations: [fs.read], resources: ["\${workspace}/**"] }
    - { id: workspace-write, effect: allow, operations: [fs.write], resources: ["\${workspace}/**"] }
`;

interface Run {
  client: Client;
  /** Resolves once the server has logged `n` updates of its directories from the client's roots. */
  rootsApplied(n: number): Promise<void>;
  decisions(): string;
  setRoots(dirs: string[]): void;
  close(): Promise<void>;
}

async function start(o: { serverDirs: string[]; gateCwd: string; workspace?: string; roots?: string[] }): Promise<Run> {
  const dir = fs.mkdtempSync(path.join(root, 'l38-run-'));
  const pf = path.join(dir, 'policy.yaml');
  fs.writeFileSync(pf, POLICY);
  const log = path.join(dir, 'decisions.jsonl');
  const args = [CLI, 'mcp', '--policy', pf, '--log', log];
  if (o.workspace !== undefined) args.push('--workspace', o.workspace);
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [...args, '--', process.execPath, FS_SERVER, ...o.serverDirs],
    cwd: o.gateCwd,
    env: { ...(process.env as Record<string, string>), HOME: home },
    stderr: 'pipe',
  });
  let errText = '';
  const waiters: (() => void)[] = [];
  transport.stderr?.on('data', (c: Buffer) => {
    errText += c.toString('utf8');
    for (const w of waiters.splice(0)) w();
  });
  let roots = o.roots ?? [];
  const client = new Client(
    { name: 'l38-e2e', version: '1.0.0' },
    { capabilities: o.roots !== undefined ? { roots: { listChanged: true } } : {} },
  );
  if (o.roots !== undefined)
    client.setRequestHandler(ListRootsRequestSchema, () => ({
      roots: roots.map((d) => ({ uri: pathToFileURL(d).href, name: path.basename(d) })),
    }));
  await client.connect(transport);
  return {
    client,
    async rootsApplied(n) {
      const count = () => errText.split('Updated allowed directories from MCP roots').length - 1;
      const until = Date.now() + 15_000;
      while (count() < n) {
        if (Date.now() > until) throw new Error(`the server did not apply the roots: ${errText}`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 200);
        });
      }
    },
    decisions: () => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : ''),
    setRoots(d) {
      roots = d;
    },
    close: () => client.close(),
  };
}

/** What the client received for a call: the result, or the error it was refused with. */
async function outcome(c: Client, name: string, args: Record<string, unknown>): Promise<string> {
  try {
    return JSON.stringify(await c.callTool({ name, arguments: args }));
  } catch (e) {
    return `error ${String((e as Error).message)}`;
  }
}

/** The calls of the issue that reach outside the workspace when read against the wrong base. */
const ESCAPES: [string, Record<string, unknown>][] = [
  ['read_text_file', { path: 'outside.txt' }],
  ['read_text_file', { path: './outside.txt' }],
  ['read_text_file', { path: 'sub/../outside.txt' }],
  ['read_multiple_files', { paths: ['outside.txt'] }],
  ['list_directory', { path: 'outdir/.' }],
  ['directory_tree', { path: '.' }],
  ['search_files', { path: '.', pattern: '**/*marker*' }],
  ['list_directory_with_sizes', { path: '.' }],
  ['get_file_info', { path: 'outside.txt' }],
  ['write_file', { path: 'l38-new.txt', content: 'x' }],
  ['move_file', { source: 'outside.txt', destination: 'ws/l38-moved.txt' }],
  ['create_directory', { path: 'l38-newdir' }],
];

async function expectNoEscape(r: Run): Promise<void> {
  const before = outsideSnapshot();
  for (const [name, args] of ESCAPES) {
    const got = await outcome(r.client, name, args);
    for (const m of MARKERS) expect(got, `${name} ${JSON.stringify(args)}`).not.toContain(m);
  }
  expect(outsideSnapshot()).toEqual(before);
  expect(fs.existsSync(path.join(ws, 'l38-moved.txt'))).toBe(false);
}

describe.skipIf(!fs.existsSync(FS_SERVER))('the gate reads a call as server-filesystem will (issue #38)', () => {
  it('server rooted above the workspace, gate started from another directory with --workspace', async () => {
    const r = await start({ serverDirs: [root], gateCwd: home, workspace: ws });
    try {
      await expectNoEscape(r);
      // The denial says what was judged: the path the server would have opened, not the string sent.
      expect(r.decisions()).toContain(JSON.stringify(path.join(root, 'outside.txt')));
    } finally {
      await r.close();
    }
  }, 90_000);

  it('server rooted above the workspace, gate started in the workspace (no --workspace)', async () => {
    const r = await start({ serverDirs: [root], gateCwd: ws });
    try {
      await expectNoEscape(r);
    } finally {
      await r.close();
    }
  }, 90_000);

  it('two server roots: the server resolves against the first', async () => {
    const r = await start({ serverDirs: [root, ws], gateCwd: home, workspace: ws });
    try {
      await expectNoEscape(r);
    } finally {
      await r.close();
    }
  }, 90_000);

  it("the client's roots move the server: the gate follows, at start and on roots/list_changed", async () => {
    const r = await start({ serverDirs: [ws], gateCwd: home, workspace: ws, roots: [root] });
    try {
      await r.rootsApplied(1);
      await expectNoEscape(r);
      // Back to the workspace, then out again through list_changed.
      r.setRoots([ws]);
      await r.client.sendRootsListChanged();
      await r.rootsApplied(2);
      r.setRoots([root]);
      await r.client.sendRootsListChanged();
      await r.rootsApplied(3);
      await expectNoEscape(r);
    } finally {
      await r.close();
    }
  }, 120_000);

  it('server rooted at the workspace: relative reads work, listings leave out what a rule protects, NFD meets the NFC deny', async () => {
    const r = await start({ serverDirs: [ws], gateCwd: home, workspace: ws });
    try {
      const a = await outcome(r.client, 'read_text_file', { path: 'a.txt' });
      expect(a).toContain('inside');
      for (const [name, args] of [
        ['directory_tree', { path: '.' }],
        ['search_files', { path: '.', pattern: '**/*' }],
        ['list_directory', { path: '.' }],
        ['list_directory_with_sizes', { path: '.' }],
      ] as const) {
        const got = await outcome(r.client, name, args);
        expect(got, name).toContain('a.txt');
        expect(got, name).not.toContain('.ssh');
        expect(got, name).not.toContain('id_ed25519');
        expect(got, name).not.toContain('priv');
      }
      for (const p of [`${NFD}/notes.txt`, path.join(ws, NFD, 'notes.txt'), `./${NFD}/./notes.txt`]) {
        const got = await outcome(r.client, 'read_text_file', { path: p });
        expect(got, p).not.toContain('L38-PRIVE-MARKER');
        expect(got, p).toContain('operation_denied');
      }
      const before = fs.readdirSync(path.join(ws, NFC));
      expect(await outcome(r.client, 'write_file', { path: `${NFD}/l38-w.txt`, content: 'x' })).toContain(
        'operation_denied',
      );
      expect(fs.readdirSync(path.join(ws, NFC))).toEqual(before);
    } finally {
      await r.close();
    }
    // The allow line of the relative read names the path the server opened (written by the gate's end).
    let allow: { subject: { resources?: string[] } } | undefined;
    for (let i = 0; i < 50 && allow === undefined; i++) {
      allow = r
        .decisions()
        .split('\n')
        .filter((l) => l.includes('"action":"allow"') && l.includes('read_text_file'))
        .map((l) => JSON.parse(l) as { subject: { resources?: string[] } })[0];
      if (allow === undefined) await new Promise((res) => setTimeout(res, 100));
    }
    expect(allow?.subject.resources).toEqual([path.join(ws, 'a.txt')]);
  }, 90_000);

  it('a server whose base the gate cannot learn: a relative path is unknown, never allowed', async () => {
    // A wrapper moves the server: its command line names no directory the gate can read.
    const pf = path.join(fs.mkdtempSync(path.join(root, 'l38-run-')), 'policy.yaml');
    fs.writeFileSync(pf, POLICY);
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [
        CLI,
        'mcp',
        '--policy',
        pf,
        '--workspace',
        ws,
        '--',
        '/bin/sh',
        '-c',
        `cd "${root}" && exec "${process.execPath}" "${FS_SERVER}" .`,
      ],
      cwd: home,
      stderr: 'pipe',
    });
    const client = new Client({ name: 'l38-e2e', version: '1.0.0' });
    await client.connect(transport);
    try {
      const got = await outcome(client, 'read_text_file', { path: 'outside.txt' });
      expect(got).not.toContain('L38-OUTSIDE-MARKER');
      expect(got).toContain('operation_default_denied');
      // An absolute path in the workspace is still judged and allowed.
      expect(await outcome(client, 'read_text_file', { path: path.join(ws, 'a.txt') })).toContain('inside');
    } finally {
      await client.close();
    }
  }, 90_000);

  it('redaction over every form: a base64 blob, the tail of a key, a dry-run diff of a key file', async () => {
    const r = await start({ serverDirs: [ws], gateCwd: home, workspace: ws });
    const leaks = (got: string, what: string) => {
      // Every base64 payload the client got, decoded, is searched too.
      const decoded = [...got.matchAll(/"(?:blob|data)":"([A-Za-z0-9+/=]+)"/g)].map((m) =>
        Buffer.from(m[1]!, 'base64').toString('utf8'),
      );
      for (const text of [got, ...decoded]) {
        for (const t of TOKENS) expect(text, what).not.toContain(t);
        for (const l of BODY.slice(1)) expect(text, what).not.toContain(l);
      }
    };
    try {
      const media = await outcome(r.client, 'read_media_file', { path: 'config-dump.txt' });
      expect(media).toContain('"blob"');
      leaks(media, 'read_media_file');
      const tail = await outcome(r.client, 'read_text_file', { path: 'deploy-notes.txt', tail: 6 });
      expect(tail).toContain('END PRIVATE KEY');
      leaks(tail, 'tail');
      const head = await outcome(r.client, 'read_text_file', { path: 'deploy-notes.txt', head: 4 });
      leaks(head, 'head');
      const before = fs.readFileSync(path.join(ws, 'deploy-notes.txt'), 'utf8');
      const diff = await outcome(r.client, 'edit_file', {
        path: 'deploy-notes.txt',
        edits: [{ oldText: 'trailer', newText: 'trailer 2' }],
        dryRun: true,
      });
      expect(diff).toContain('trailer 2');
      leaks(diff, 'edit_file dry run');
      expect(fs.readFileSync(path.join(ws, 'deploy-notes.txt'), 'utf8')).toBe(before);
    } finally {
      await r.close();
    }
  }, 90_000);

  it('the gate and leash doctor warn on a workspace of /, one outside every server directory, unknown directories', async () => {
    const pf = path.join(fs.mkdtempSync(path.join(root, 'l38-run-')), 'policy.yaml');
    fs.writeFileSync(pf, POLICY);
    const gateWarnings = async (cwd: string, extra: string[], server: string[]) => {
      const transport = new StdioClientTransport({
        command: process.execPath,
        args: [CLI, 'mcp', '--policy', pf, ...extra, '--', ...server],
        cwd,
        stderr: 'pipe',
      });
      let err = '';
      transport.stderr?.on('data', (c: Buffer) => (err += c.toString('utf8')));
      const client = new Client({ name: 'l38-e2e', version: '1.0.0' });
      await client.connect(transport);
      await client.listTools();
      await client.close();
      return err.split('\n').filter((l) => l.startsWith('leash mcp: warning: '));
    };
    const fsServer = (dir: string) => [process.execPath, FS_SERVER, dir];
    const slash = await gateWarnings('/', [], fsServer(ws));
    expect(slash.some((l) => l.includes('the workspace is /'))).toBe(true);
    const outside = await gateWarnings(home, ['--workspace', ws], fsServer(path.join(root, 'outdir')));
    expect(outside.some((l) => l.includes(`the workspace ${ws} lies outside`))).toBe(true);
    const unknown = await gateWarnings(
      home,
      ['--workspace', ws],
      ['/bin/sh', '-c', `cd "${root}" && exec "${process.execPath}" "${FS_SERVER}" .`],
    );
    expect(unknown.some((l) => l.includes('allowed directories are unknown'))).toBe(true);
    // Rooted at the workspace: nothing to say.
    expect(await gateWarnings(home, ['--workspace', ws], fsServer(ws))).toEqual([]);

    const pw = path.join(path.dirname(pf), 'policy-ws.yaml');
    fs.writeFileSync(pw, POLICY.replace('  mapping: filesystem', `  mapping: filesystem\n  workspace: ${ws}`));
    const doctor = spawnSync(
      process.execPath,
      [
        CLI,
        'doctor',
        '--policy',
        pw,
        '--socket',
        path.join(root, 'l38-none.sock'),
        '--',
        ...fsServer(path.join(root, 'outdir')),
      ],
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(doctor.stdout).toMatch(new RegExp(`warn server +the workspace ${ws} lies outside`));
  }, 120_000);

  it("leash terminal's cwd lands in its --jail, not in the gate's workspace", async () => {
    const jail = path.join(root, 'l38-jail');
    const side = fs.mkdtempSync(path.join(root, 'l38-run-'));
    fs.mkdirSync(path.join(jail, 'secret'), { recursive: true });
    fs.mkdirSync(path.join(jail, 'open'));
    fs.writeFileSync(path.join(jail, 'marker.txt'), 'L38-JAIL-ROOT\n');
    fs.writeFileSync(path.join(jail, 'secret', 'marker.txt'), 'L38-JAIL-SECRET\n');
    fs.writeFileSync(path.join(jail, 'open', 'marker.txt'), 'open note\n');
    const termPolicy = path.join(side, 'commands.yaml');
    fs.writeFileSync(termPolicy, 'commands:\n  mode: whitelist\n  allow: [cat, ls]\n  deny: []\n');
    const gatePolicy = path.join(side, 'gate.yaml');
    fs.writeFileSync(
      gatePolicy,
      `tools:\n  mapping: terminal\n  default: deny\n  rules:\n    - { id: open, effect: allow, operations: [shell.exec], resources: ["\${workspace}/**"] }\n`,
    );
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [
        CLI,
        'mcp',
        '--policy',
        gatePolicy,
        '--workspace',
        path.join(jail, 'open'),
        '--',
        process.execPath,
        CLI,
        'terminal',
        '--jail',
        jail,
        '--policy',
        termPolicy,
        '--audit',
        path.join(side, 'audit.jsonl'),
        '--decision-log',
        path.join(side, 'decisions.jsonl'),
      ],
      cwd: home,
      stderr: 'pipe',
    });
    const client = new Client({ name: 'l38-e2e', version: '1.0.0' });
    await client.connect(transport);
    try {
      for (const args of [{ command: 'cat marker.txt', cwd: 'secret' }, { command: 'cat marker.txt' }]) {
        const got = await outcome(client, 'run_command', args);
        expect(got, JSON.stringify(args)).not.toContain('L38-JAIL');
        expect(got, JSON.stringify(args)).toContain('operation_default_denied');
      }
      expect(await outcome(client, 'run_command', { command: 'cat marker.txt', cwd: 'open' })).toContain('open note');
    } finally {
      await client.close();
    }
  }, 90_000);
});
