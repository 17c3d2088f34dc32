/**
 * `leash apply -f DIR` as configuration management runs it (the built CLI): exit 0 unchanged, 2 changed,
 * 1 refused (usage included), the running service told with SIGHUP only when something changed.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CLI = path.join(root, 'dist/src/cli/main.js');
const PASSWD = `root:x:0:0:root:/root:/bin/bash
fido:x:1000:1000:Fido:/home/fido:/bin/bash
leash-iris:x:2001:2001:Iris,,,:/home/leash-iris:/bin/sh
leash-vader:x:2002:2002:Vader:/home/leash-vader:/bin/sh
`;
const FLOOR = `user: fido
fail_mode: closed
network: { mode: whitelist, allow: ["github.com"], deny: ["evil.example"] }
commands: { mode: blacklist, deny: ["ssh", "curl"] }
`;
let tmp: string;
let dir: string;
let env: NodeJS.ProcessEnv;
let fake: ChildProcess | null = null;

beforeAll(() => {
  if (!fs.existsSync(CLI)) spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
});
beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-e2e-apply-'));
  dir = path.join(tmp, 'fleet');
  fs.mkdirSync(path.join(dir, 'profiles'), { recursive: true });
  fs.writeFileSync(path.join(tmp, 'passwd'), PASSWD);
  fs.writeFileSync(path.join(tmp, 'leash.yaml'), FLOOR);
  env = {
    ...process.env,
    LEASH_PASSWD: path.join(tmp, 'passwd'),
    LEASH_CONFIG: path.join(tmp, 'leash.yaml'),
    LEASH_STATE_DIR: path.join(tmp, 'state'),
    LEASH_PID_FILE: path.join(tmp, 'leash.pid'),
  };
});
afterEach(() => {
  if (fake && fake.exitCode === null) fake.kill('SIGKILL');
  fake = null;
  fs.rmSync(tmp, { recursive: true, force: true });
});

function leash(args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { env, encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
function writeDir(profiles: Record<string, string>, bindings: string): void {
  for (const f of fs.readdirSync(path.join(dir, 'profiles'))) fs.rmSync(path.join(dir, 'profiles', f));
  for (const [n, t] of Object.entries(profiles)) fs.writeFileSync(path.join(dir, 'profiles', `${n}.yaml`), t);
  fs.writeFileSync(path.join(dir, 'bindings.yaml'), bindings);
}
function stateSnapshot(): string {
  const out: string[] = [];
  const walk = (d: string) => {
    if (!fs.existsSync(d)) return;
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out.push(`${p} ${fs.statSync(p, { bigint: true }).mtimeNs} ${fs.readFileSync(p, 'utf8')}`);
    }
  };
  walk(path.join(tmp, 'state'));
  return out.join('\n');
}
/** A process named like the service that counts the SIGHUPs it gets (the pid file points at it). */
async function fakeService(): Promise<() => number> {
  const hups = path.join(tmp, 'hups');
  fs.writeFileSync(hups, '');
  fake = spawn(
    process.execPath,
    [
      '-e',
      // Confirms each reload through its status file (src/control/reconcile/generation.ts), as leash does.
      `const fs=require('fs');let n=0;process.on('SIGHUP',()=>{n++;fs.appendFileSync(${JSON.stringify(hups)},'h');fs.writeFileSync(${JSON.stringify(path.join(path.dirname(env.LEASH_PID_FILE!), 'reconcile.json'))},JSON.stringify({pid:process.pid,hup:n,done:n,phase:'ready',problems:[]}))});setInterval(()=>{},1e6)`,
      'leash',
    ],
    { stdio: 'ignore' },
  );
  fs.writeFileSync(env.LEASH_PID_FILE!, `${fake.pid}\n`);
  await new Promise((r) => setTimeout(r, 300));
  return () => fs.readFileSync(hups, 'utf8').length;
}

const TIGHT = 'commands: { deny: ["ssh", "curl", "nc"] }\n';
const WEB = 'network: { allow: ["github.com", "openai.com"] }\n';

describe('leash apply exit codes', () => {
  it('2 when it changed (and SIGHUPs the service), 0 the second time (no write, no signal)', async () => {
    const hups = await fakeService();
    writeDir({ tight: TIGHT }, 'version: 1\nbindings:\n  agent:leash-iris: { profile: tight }\n');
    const first = leash(['apply', '-f', dir]);
    expect(first.code, first.stderr).toBe(2);
    expect(first.stdout).toContain('+ bind agent:leash-iris -> tight');
    await new Promise((r) => setTimeout(r, 200));
    expect(hups()).toBe(1);
    const snap = stateSnapshot();
    const second = leash(['apply', '-f', dir, '--json']);
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout)).toMatchObject({ ok: true, changed: false });
    expect(stateSnapshot()).toBe(snap);
    await new Promise((r) => setTimeout(r, 200));
    expect(hups()).toBe(1);
  });

  it('1 for a loosening DIR without acks, nothing changed; --dry-run prints the diff and writes nothing', async () => {
    writeDir({ tight: TIGHT }, 'version: 1\nbindings:\n  agent:leash-iris: { profile: tight }\n');
    expect(leash(['apply', '-f', dir]).code).toBe(2);
    const snap = stateSnapshot();
    writeDir(
      { tight: TIGHT, web: WEB },
      'version: 1\nbindings:\n  agent:leash-iris: { profile: web }\n  agent:leash-vader: { profile: tight }\n',
    );
    const refused = leash(['apply', '-f', dir, '--json']);
    expect(refused.code).toBe(1);
    expect(JSON.parse(refused.stdout).error).toMatchObject({
      code: 'loosening_unacknowledged',
      details: { missing: ['agent:leash-iris=network.allow:openai.com', 'agent:leash-iris=commands.unset.deny:nc'] },
    });
    expect(stateSnapshot()).toBe(snap);
    const dry = leash(['apply', '-f', dir, '--dry-run']);
    expect(dry.code).toBe(1);
    writeDir(
      { tight: TIGHT, web: WEB },
      'version: 1\nbindings:\n  agent:leash-iris: { profile: web, acks: ["network.allow:openai.com"] }\n  agent:leash-vader: { profile: tight }\nacks:\n  agent:leash-iris: ["commands.unset.deny:nc"]\n',
    );
    const dry2 = leash(['apply', '-f', dir, '--dry-run']);
    expect(dry2.code, dry2.stderr).toBe(2);
    expect(dry2.stdout).toMatch(/\+ profile web/);
    expect(dry2.stdout).toMatch(/finding agent:leash-iris network\.allow:openai\.com/);
    expect(stateSnapshot()).toBe(snap);
    expect(leash(['apply', '-f', dir]).code).toBe(2);
    expect(leash(['apply', '-f', dir]).code).toBe(0);
  });

  it('1 for bad YAML (file and line named) and for a usage error', () => {
    writeDir({ bad: 'network:\n  allow: [github.com\n' }, 'version: 1\nbindings: {}\n');
    const r = leash(['apply', '-f', dir]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/\[apply_invalid\]/);
    expect(r.stderr).toMatch(/profiles\/bad\.yaml: line \d+, column \d+/);
    expect(leash(['apply']).code).toBe(1);
    expect(leash(['-c', env.LEASH_CONFIG!, 'apply', '-f', dir, '--bogus']).code).toBe(1);
  });
});
