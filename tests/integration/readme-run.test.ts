/**
 * The README runs (issue 41): the commands of its quick start and of "Install and use", parsed out of
 * README.md and run in order as written, as root, against this checkout's build, in a state of their own
 * (LEASH_CONFIG, LEASH_STATE_DIR, LEASH_PID_FILE, HOME in a temp dir; the accounts renamed leash-t41*).
 * A line this lab cannot run as written is in SUBSTITUTES with what runs instead and why; every other line
 * runs verbatim (minus `sudo`), and a README line that fails fails this test.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');
const CLI = path.join(ROOT, 'dist/src/cli/main.js');
const FAKE = path.join(ROOT, 'tests/fixtures/mcp/fake-server.mjs');
const WITH_TTY = path.join(ROOT, 'tests/fixtures/mcp/with-tty.py');
const ACCOUNTS = { 'leash-fido': 'leash-t41fido', 'leash-iris': 'leash-t41iris' };

/** Lines of the ```sh blocks between two headings, comments stripped, in order. */
function commands(readme: string, from: string, to: string): string[] {
  const part = readme.slice(readme.indexOf(from), readme.indexOf(to));
  const out: string[] = [];
  for (const block of part.matchAll(/```sh\n([\s\S]*?)```/g))
    for (const raw of block[1]!.split('\n')) {
      const line = raw.replace(/\s{2,}#\s.*$/, '').trim();
      if (line) out.push(line);
    }
  return out;
}

/**
 * README line (after `sudo` is dropped) → what runs instead, and why. Kept exact: a README edit to one of
 * these lines fails the test until the substitute is looked at again.
 */
const SUBSTITUTES: Record<string, { run: string | null; why: string }> = {
  'bash scripts/demo.sh': {
    run: null,
    why: 'installs packages and creates the leash-demo account; tests/integration/network-demo.test.ts runs the same demo',
  },
  'bash .ci/run': { run: null, why: 'the whole suite (15+ minutes), of which this test is a part' },
  'bash scripts/install.sh': {
    run: 'bash -n scripts/install.sh',
    why: "building and installing the .deb on this shared host is the packaging tests' job; the leash on PATH is this checkout's build",
  },
  'systemctl enable --now leash': {
    run: null,
    why: "a started service confines every leash-* account and marks the host's filesystems (the lab's rules forbid it here); the service under its unit is tested by tests/e2e/systemd-unit.test.ts and tests/integration/service-agents.test.ts",
  },
  'leash logs': {
    run: 'leash logs; test $? -eq 3',
    why: 'no service ran (above), so the log does not exist yet: exit 3, log_unreadable, "no decisions yet"',
  },
  'leash mcp --policy tools.yaml --approval tty -- node server.js': {
    run: `printf '%s\\n' '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}' | python3 ${WITH_TTY} leash mcp --policy tools.yaml --approval tty -- node ${FAKE}`,
    why: "server.js is the reader's own server (the fake MCP server here), and a terminal is made the gate's /dev/tty",
  },
  'leash doctor --policy tools.yaml --approval tty -- npx -y @modelcontextprotocol/server-filesystem .': {
    run: `python3 ${WITH_TTY} leash doctor --policy tools.yaml --approval tty -- node ${FAKE}`,
    why: 'npx would download the server (no internet here): the fake MCP server is probed instead, with a terminal as /dev/tty',
  },
};

const isRoot = process.getuid?.() === 0;

describe.skipIf(!isRoot)('README.md runs as written', () => {
  let work = '';
  let env: NodeJS.ProcessEnv = {};
  const removeAccounts = () => {
    for (const a of Object.values(ACCOUNTS)) spawnSync('userdel', ['-r', a], { stdio: 'ignore' });
  };
  beforeAll(() => {
    expect(fs.existsSync(CLI), 'npm run build first').toBe(true);
    removeAccounts();
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-l41-readme-'));
    const bin = path.join(work, 'bin');
    fs.mkdirSync(bin);
    fs.writeFileSync(path.join(bin, 'leash'), `#!/bin/sh\nexec "${process.execPath}" "${CLI}" "$@"\n`, { mode: 0o755 });
    // What the README's commands use that it does not create itself: a fleet directory and a host file.
    fs.mkdirSync(path.join(work, 'fleet/profiles'), { recursive: true });
    fs.writeFileSync(path.join(work, 'fleet/profiles/web.yaml'), 'network:\n  allow: [api.example.com]\n');
    fs.writeFileSync(
      path.join(work, 'fleet/bindings.yaml'),
      'version: 1\nbindings:\n  agent:leash-t41iris: { profile: web, acks: ["network.allow:api.example.com"] }\n',
    );
    fs.writeFileSync(
      path.join(work, '.claude.json'),
      '{"mcpServers":{"github":{"command":"npx","args":["-y","x"]}}}\n',
    );
    env = {
      ...process.env,
      PATH: `${bin}:${process.env.PATH}`,
      HOME: work,
      LEASH_CONFIG: path.join(work, 'etc/leash.yaml'),
      LEASH_STATE_DIR: path.join(work, 'state'),
      LEASH_PID_FILE: path.join(work, 'leash.pid'),
      LEASH_SYSTEMCTL: '/nonexistent/systemctl',
      LEASH_APPROVALS_SOCKET: path.join(work, 'approvals.sock'),
    };
  });
  afterAll(() => {
    removeAccounts();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('every command of the quick start and of "Install and use", in order', () => {
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const lines = [
      ...commands(readme, '## Quick start', '## Install and use'),
      ...commands(readme, '## Install and use', '### Running without systemd'),
    ];
    expect(lines.length).toBeGreaterThan(20);
    const used = new Set<string>();
    for (const line of lines) {
      let cmd = line.replace(/^sudo /, '');
      const sub = SUBSTITUTES[cmd];
      if (sub) used.add(cmd);
      if (sub?.run === null) continue;
      cmd = sub?.run ?? cmd;
      for (const [from, to] of Object.entries(ACCOUNTS)) cmd = cmd.replaceAll(from, to);
      // A README line that needs a file in the checkout runs there; the rest in the work directory.
      const cwd = cmd.includes('scripts/') ? ROOT : work;
      const r = spawnSync('bash', ['-o', 'pipefail', '-c', cmd], { cwd, env, encoding: 'utf8', timeout: 60_000 });
      // The README says which lines exit non-zero: a block is exit 1 (check).
      const expected = /^leash check (fs \/etc\/shadow|tool )/.test(cmd) ? 1 : 0;
      expect({ line, code: r.status }, `${line}\n${r.stdout}\n${r.stderr}`).toEqual({ line, code: expected });
    }
    // Every substitute still matches a README line: none is stale.
    expect([...used].sort()).toEqual(Object.keys(SUBSTITUTES).sort());
  }, 300_000);
});
