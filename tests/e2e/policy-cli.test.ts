import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { afterEach, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CLI = path.join(root, 'dist/src/cli/main.js');

const AGENTS = Array.from({ length: 10 }, (_, i) => `leash-tp${i}`);
const PASSWD = [
  'root:x:0:0:root:/root:/bin/bash',
  'fido:x:1000:1000:Fido:/home/fido:/bin/bash',
  'leash-iris:x:2001:2001:Iris,,,:/home/leash-iris:/bin/sh',
  'leash-vader:x:2002:2002:Vader:/home/leash-vader:/bin/sh',
  ...AGENTS.map((a, i) => `${a}:x:${3000 + i}:${3000 + i}::/home/${a}:/bin/sh`),
].join('\n');
const FLOOR = `user: fido
fail_mode: closed
network: { mode: whitelist, allow: ["github.com"], deny: ["evil.example"] }
filesystem: { mode: whitelist, allow: ["/home"], deny: ["/home/fido/.ssh"] }
commands: { mode: blacklist, deny: ["ssh", "curl"] }
`;

let dir: string;
let env: NodeJS.ProcessEnv;

beforeAll(() => {
  if (!fs.existsSync(CLI)) spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
});
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-e2e-policy-'));
  fs.writeFileSync(path.join(dir, 'passwd'), `${PASSWD}\n`);
  fs.writeFileSync(path.join(dir, 'leash.yaml'), FLOOR);
  env = {
    ...process.env,
    LEASH_PASSWD: path.join(dir, 'passwd'),
    LEASH_CONFIG: path.join(dir, 'leash.yaml'),
    LEASH_STATE_DIR: path.join(dir, 'state'),
    // Never the host's systemd: a pid file the test controls (absent = service not running).
    LEASH_PID_FILE: path.join(dir, 'leash.pid'),
  };
  delete env.LEASH_TEST_SLOW_WRITE;
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function leash(args: string[], extraEnv: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, [CLI, ...args], {
    env: { ...env, ...extraEnv },
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
function file(name: string, text: string): string {
  const p = path.join(dir, name);
  fs.writeFileSync(p, text);
  return p;
}
function bindings(): Record<string, { profile: string; acks: string[] }> {
  const doc = YAML.parse(fs.readFileSync(path.join(dir, 'state/bindings.yaml'), 'utf8')) as {
    bindings: Record<string, { profile: string; acks: string[] }>;
  };
  return doc.bindings;
}
/** Runs a printed `leash ...` line through sh, with leash meaning this build. */
function rerun(line: string) {
  const r = spawnSync('sh', ['-c', line.replace(/^leash /, `"${process.execPath}" "${CLI}" `)], {
    env,
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const WIDE = `fail_mode: open
network: { allow: ["github.com", "openai.com", "10.0.0.0/8"], deny: [] }
commands: { deny: ["ssh"] }
tools: { inspect: { secrets: log } }
`;
const WIDE_TOKENS = [
  'fail_mode:open',
  'network.allow:openai.com',
  'network.allow:10.0.0.0/8',
  'network.unset.deny:evil.example',
  'commands.unset.deny:curl',
  'tools.inspect.secrets:log',
];
const TIGHT = 'commands: { deny: ["ssh", "curl", "nc"] }\n';

describe('leash bind: consent', () => {
  it('refuses a loosening listing every token and the whole command, and accepts that command', () => {
    expect(leash(['profile', 'save', 'wide', '--from', file('wide.yaml', WIDE), '--no-reconcile']).code).toBe(0);
    const r = leash(['bind', 'agent:leash-iris', 'wide', '--no-reconcile']);
    expect(r.code).toBe(2);
    for (const t of WIDE_TOKENS) expect(r.stderr).toContain(`--ack '${t}'`);
    const line =
      r.stderr
        .split('\n')
        .find((l) => l.trim().startsWith('leash bind'))
        ?.trim() ?? '';
    expect(line).toContain('leash bind agent:leash-iris wide --no-reconcile');
    expect(fs.existsSync(path.join(dir, 'state/bindings.yaml'))).toBe(false);

    // All but one token: still refused, naming the one missing.
    const partial = leash([
      'bind',
      'agent:leash-iris',
      'wide',
      '--no-reconcile',
      '--json',
      ...WIDE_TOKENS.slice(1).flatMap((t) => ['--ack', t]),
    ]);
    expect(partial.code).toBe(2);
    expect((JSON.parse(partial.stdout) as { error: { details: { missing: string[] } } }).error.details.missing).toEqual(
      ['fail_mode:open'],
    );

    const ok = rerun(line);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(bindings()['agent:leash-iris']).toEqual({ profile: 'wide', acks: WIDE_TOKENS });
  });

  it('an edit of a bound profile is refused per agent, and the printed command carries each agent consent', () => {
    leash([
      'profile',
      'save',
      'web',
      '--from',
      file('w.yaml', 'network: { allow: ["github.com"] }\n'),
      '--no-reconcile',
    ]);
    leash(['bind', 'agent:leash-iris', 'web', '--no-reconcile']);
    leash(['bind', 'agent:leash-vader', 'web', '--no-reconcile']);
    const wider = file('w2.yaml', 'network: { allow: ["github.com", "openai.com"] }\n');
    const r = leash(['profile', 'save', 'web', '--from', wider, '--no-reconcile']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`--ack 'agent:leash-iris=network.allow:openai.com'`);
    expect(r.stderr).toContain(`--ack 'agent:leash-vader=network.allow:openai.com'`);
    const line =
      r.stderr
        .split('\n')
        .find((l) => l.trim().startsWith('leash profile save'))
        ?.trim() ?? '';
    const ok = rerun(line);
    expect(ok.code).toBe(0);
    expect(bindings()['agent:leash-iris']?.acks).toEqual(['network.allow:openai.com']);
    expect(bindings()['agent:leash-vader']?.acks).toEqual(['network.allow:openai.com']);
  });

  it('refuses a display name, naming the real account', () => {
    leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT), '--no-reconcile']);
    const r = leash(['bind', 'agent:Iris', 'tight', '--no-reconcile']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('agent:leash-iris');
  });

  it('bind global says it changes the floor for every subject', () => {
    leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT), '--no-reconcile']);
    const r = leash(['bind', 'global', 'tight', '--no-reconcile']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/changes the floor for every subject/);
    const j = JSON.parse(leash(['bindings', '--json']).stdout) as { bindings: { scope: string; subjects: string[] }[] };
    expect(j.bindings[0]?.subjects).toContain('fido');
    expect(j.bindings[0]?.subjects).toContain('leash-iris');
  });
});

describe('leash unbind: the ledger first', () => {
  it('keeps the binding when unbinds.jsonl cannot be written', () => {
    leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT), '--no-reconcile']);
    expect(leash(['bind', 'agent:leash-iris', 'tight', '--no-reconcile']).code).toBe(0);
    const refused = leash(['unbind', 'agent:leash-iris', '--no-reconcile']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(`--ack 'commands.unset.deny:nc'`);
    // Root ignores file modes, so the ledger is made unwritable by putting a directory in its place.
    fs.mkdirSync(path.join(dir, 'state/unbinds.jsonl'));
    const r = leash(['unbind', 'agent:leash-iris', '--ack', 'commands.unset.deny:nc', '--no-reconcile', '--json']);
    expect(r.code).toBe(3);
    expect((JSON.parse(r.stdout) as { error: { code: string } }).error.code).toBe('ledger_unwritable');
    expect(bindings()['agent:leash-iris']?.profile).toBe('tight');
    fs.rmdirSync(path.join(dir, 'state/unbinds.jsonl'));
    expect(leash(['unbind', 'agent:leash-iris', '--ack', 'commands.unset.deny:nc', '--no-reconcile']).code).toBe(0);
    expect(bindings()['agent:leash-iris']).toBeUndefined();
    const rec = JSON.parse(fs.readFileSync(path.join(dir, 'state/unbinds.jsonl'), 'utf8')) as Record<string, unknown>;
    expect(rec).toMatchObject({ op: 'unbind', scope: 'agent:leash-iris', acks: ['commands.unset.deny:nc'] });
  });

  it('a writer killed between the ledger and the removal leaves the record and the binding', async () => {
    leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT), '--no-reconcile']);
    leash(['bind', 'agent:leash-iris', 'tight', '--no-reconcile']);
    const bfile = path.join(dir, 'state/bindings.yaml');
    await killAt(
      ['unbind', 'agent:leash-iris', '--ack', 'commands.unset.deny:nc', '--no-reconcile'],
      'after-ledger',
      bfile,
    );
    expect(fs.readFileSync(path.join(dir, 'state/unbinds.jsonl'), 'utf8')).toContain('"op":"unbind"');
    expect(bindings()['agent:leash-iris']?.profile).toBe('tight');
    // The dead writer's lock is broken by the next one.
    expect(leash(['unbind', 'agent:leash-iris', '--ack', 'commands.unset.deny:nc', '--no-reconcile']).code).toBe(0);
  });
});

/** Starts a CLI writer slowed at `point`, waits until it is there, SIGKILLs it. */
async function killAt(args: string[], point: string, target: string): Promise<void> {
  const marker = `${target}.${point}.paused`;
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...env, LEASH_TEST_SLOW_WRITE: `${point}:20000` },
    stdio: 'ignore',
  });
  onTestFinished(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const deadline = Date.now() + 15_000;
  while (!fs.existsSync(marker)) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`writer never reached ${point}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
  fs.rmSync(marker);
}

describe('concurrent and interrupted writers', () => {
  it('serialises 10 parallel binds: every binding present, the file valid', async () => {
    leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT), '--no-reconcile']);
    const runs = AGENTS.map(
      (a) =>
        new Promise<number | null>((resolve) => {
          const c: ChildProcess = spawn(process.execPath, [CLI, 'bind', `agent:${a}`, 'tight', '--no-reconcile'], {
            env,
            stdio: 'ignore',
          });
          c.on('exit', (code) => resolve(code));
        }),
    );
    expect(await Promise.all(runs)).toEqual(AGENTS.map(() => 0));
    const b = bindings();
    expect(Object.keys(b).sort()).toEqual(AGENTS.map((a) => `agent:${a}`).sort());
    expect(fs.existsSync(path.join(dir, 'state/bindings.yaml.lock'))).toBe(false);
  });

  it('a save killed between the bindings write and the profile write leaves inert consent, reported stale', async () => {
    leash([
      'profile',
      'save',
      'web',
      '--from',
      file('w.yaml', 'network: { allow: ["github.com"] }\n'),
      '--no-reconcile',
    ]);
    leash(['bind', 'agent:leash-iris', 'web', '--no-reconcile']);
    const wider = file('w2.yaml', 'network: { allow: ["github.com", "openai.com"] }\n');
    const bfile = path.join(dir, 'state/bindings.yaml');
    await killAt(
      [
        'profile',
        'save',
        'web',
        '--from',
        wider,
        '--ack',
        'agent:leash-iris=network.allow:openai.com',
        '--no-reconcile',
      ],
      'between-writes',
      bfile,
    );
    // Bindings first: consent is there, the profile is still the old one (never the reverse).
    expect(bindings()['agent:leash-iris']?.acks).toEqual(['network.allow:openai.com']);
    expect(JSON.parse(leash(['profile', 'show', 'web', '--json']).stdout)).toMatchObject({
      fragment: { network: { allow: ['github.com'] } },
    });
    const list = JSON.parse(leash(['bindings', '--json']).stdout) as { bindings: { profileStatus: string }[] };
    expect(list.bindings[0]?.profileStatus).toBe('ok');
    // The next writer breaks the dead lock and completes the save.
    const r = leash([
      'profile',
      'save',
      'web',
      '--from',
      wider,
      '--ack',
      'agent:leash-iris=network.allow:openai.com',
      '--no-reconcile',
    ]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(leash(['profile', 'show', 'web', '--json']).stdout)).toMatchObject({
      fragment: { network: { allow: ['github.com', 'openai.com'] } },
    });
  });

  it('a save killed before its rename leaves the old profile and no stray profile', async () => {
    leash([
      'profile',
      'save',
      'web',
      '--from',
      file('w.yaml', 'network: { allow: ["github.com"] }\n'),
      '--no-reconcile',
    ]);
    const pfile = path.join(dir, 'state/profiles/web.yaml');
    await killAt(
      ['profile', 'save', 'web', '--from', file('w2.yaml', 'network: { allow: [] }\n'), '--no-reconcile'],
      'before-rename',
      pfile,
    );
    expect(fs.readFileSync(pfile, 'utf8')).toBe('network: { allow: ["github.com"] }\n');
    expect(JSON.parse(leash(['profile', 'list', '--json']).stdout)).toMatchObject({
      profiles: [{ name: 'web', status: 'ok' }],
    });
  });
});

describe('signalling the service', () => {
  it('sends SIGHUP to the pid file after a write; --no-reconcile skips it', async () => {
    const got = path.join(dir, 'hup');
    const svc = spawn(
      process.execPath,
      [
        '-e',
        // A service that confirms each reload through its status file (src/control/reconcile/generation.ts), as leash does.
        `const fs = require('fs'); let n = 0; process.on('SIGHUP', () => { n++; fs.appendFileSync(${JSON.stringify(got)}, 'x'); fs.writeFileSync(${JSON.stringify(path.join(path.dirname(env.LEASH_PID_FILE as string), 'reconcile.json'))}, JSON.stringify({ pid: process.pid, hup: n, done: n, phase: 'ready', problems: [] })); }); setInterval(() => {}, 1000);`,
        'leash-fake-service',
      ],
      {
        stdio: 'ignore',
      },
    );
    onTestFinished(() => {
      svc.kill('SIGKILL');
    });
    await new Promise((r) => setTimeout(r, 300));
    fs.writeFileSync(env.LEASH_PID_FILE as string, `${svc.pid}\n`);
    const r = leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT)]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('signalled the service');
    leash(['bind', 'agent:leash-iris', 'tight', '--no-reconcile']);
    await new Promise((r) => setTimeout(r, 200));
    expect(fs.readFileSync(got, 'utf8')).toBe('x');
  });

  it('never signals a process that is not leash (a stale pid file with a reused pid)', async () => {
    const other = spawn('sleep', ['30'], { stdio: 'ignore' });
    onTestFinished(() => {
      other.kill('SIGKILL');
    });
    fs.writeFileSync(env.LEASH_PID_FILE as string, `${other.pid}\n`);
    const r = leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT)]);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('not a leash process');
    await new Promise((res) => setTimeout(res, 100));
    expect(other.exitCode).toBeNull();
    expect(other.signalCode).toBeNull();
  });

  it('a failed signal exits non-zero with the command to run by hand', () => {
    fs.writeFileSync(env.LEASH_PID_FILE as string, '999999999\n');
    const r = leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT)]);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('kill -HUP');
    expect(r.stderr).toContain('not in force');
    // The write itself happened.
    expect(leash(['profile', 'show', 'tight', '--json']).code).toBe(0);
  });
});

describe('leash validate: the policy store', () => {
  beforeEach(() => {
    // validate resolves the configured user through the host's own getent: use an account every host has.
    fs.writeFileSync(path.join(dir, 'leash.yaml'), FLOOR.replace('user: fido', 'user: nobody'));
    fs.appendFileSync(path.join(dir, 'passwd'), 'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n');
  });

  it('is clean for a store with nothing wrong, and with no store at all', () => {
    expect(leash(['validate']).code).toBe(0);
    leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT), '--no-reconcile']);
    leash(['bind', 'agent:leash-iris', 'tight', '--no-reconcile']);
    const r = leash(['validate', '--json']);
    expect(r.code).toBe(0);
    expect((JSON.parse(r.stdout) as { policy_store: unknown[] }).policy_store).toEqual([]);
  });

  it('exits 1 on an inert deny in a profile and reports stale acks, dangling bindings and bindings for nobody', () => {
    leash([
      'profile',
      'save',
      'web',
      '--from',
      file('w.yaml', 'network: { allow: ["github.com", "openai.com"] }\n'),
      '--no-reconcile',
    ]);
    leash(['bind', 'agent:leash-iris', 'web', '--ack', 'network.allow:openai.com', '--no-reconcile']);
    leash([
      'profile',
      'save',
      'web',
      '--from',
      file('w2.yaml', 'network: { allow: ["github.com"] }\n'),
      '--no-reconcile',
    ]);
    leash(['profile', 'save', 'gone', '--from', file('g.yaml', TIGHT), '--no-reconcile']);
    leash(['bind', 'agent:leash-vader', 'gone', '--no-reconcile']);
    leash(['profile', 'delete', 'gone', '--no-reconcile']);
    const warn = JSON.parse(leash(['validate', '--json']).stdout) as { policy_store: { code: string; path: string }[] };
    expect(warn.policy_store.map((f) => f.code).sort()).toEqual([
      'ack_stale',
      'binding_dangling',
      'subject_unresolvable',
    ]);
    // An inert deny cannot be saved through the CLI; one written by hand is critical.
    fs.writeFileSync(path.join(dir, 'state/profiles/bad.yaml'), 'network: { deny: ["https://evil.example/x"] }\n');
    const r = leash(['validate']);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/critical inert_deny profiles\/bad.yaml:network.deny\[0\]/);
    expect(r.stdout).toMatch(/warning ack_stale bindings.yaml:agent:leash-iris/);
    expect(r.stdout).toMatch(/warning binding_dangling bindings.yaml:agent:leash-vader/);
  });
});

describe('--json on every policy command', () => {
  it('prints one JSON document per command', () => {
    const outs = [
      leash(['profile', 'save', 'tight', '--from', file('t.yaml', TIGHT), '--json', '--no-reconcile']),
      leash(['profile', 'list', '--json']),
      leash(['profile', 'show', 'tight', '--json']),
      leash(['bind', 'agent:leash-iris', 'tight', '--json', '--no-reconcile']),
      leash(['bindings', '--json']),
      leash(['unbind', 'agent:leash-iris', '--ack', 'commands.unset.deny:nc', '--json', '--no-reconcile']),
      leash(['profile', 'delete', 'tight', '--json', '--no-reconcile']),
    ];
    for (const o of outs) {
      expect(o.code).toBe(0);
      expect(() => JSON.parse(o.stdout) as unknown).not.toThrow();
    }
    expect(JSON.parse(outs[3]!.stdout)).toMatchObject({
      ok: true,
      scope: 'agent:leash-iris',
      reconcile: { sent: false },
    });
    expect(JSON.parse(outs[1]!.stdout)).toMatchObject({ profiles: [{ name: 'tight', bound_to: [] }] });
  });
});

describe('leash check and status judge what the service enforces (floor + global + agent bindings)', () => {
  it('after bind global, check follows the bound list, not the floor, and names the layer', () => {
    // A fragment whose network list replaces the floor's: github.com is no longer allowed, example.org is.
    expect(
      leash(['profile', 'save', 'web', '--from', file('web.yaml', 'network: { allow: ["example.org"] }\n')]).code,
    ).toBe(0);
    const bind = leash(['bind', 'global', 'web', '--no-reconcile', '--ack', 'network.allow:example.org']);
    expect(bind.code, bind.stderr).toBe(0);
    const gh = leash(['check', 'net', 'github.com:443', '--json']);
    expect(gh.code).toBe(1);
    expect(JSON.parse(gh.stdout)).toMatchObject({ action: 'block', reason: 'not_allowed', layer: 'floor' });
    const ex = leash(['check', 'net', 'example.org:443']);
    expect(ex.code).toBe(0);
    expect(ex.stdout).toMatch(/^allow network example\.org:443: allow_entry \(rule example\.org from global=web\)/);
    // The floor's deny list was not replaced: still from the floor, still enforced.
    expect(JSON.parse(leash(['check', 'net', 'evil.example:443', '--json']).stdout)).toMatchObject({
      action: 'block',
      rule: 'evil.example',
      layer: 'floor',
    });
    const st = JSON.parse(leash(['status', '--json']).stdout) as {
      subject: { account: string; layers: string[] };
      surfaces: Record<string, { allow: number; from: Record<string, string> }>;
    };
    expect(st.subject).toMatchObject({ account: 'fido', layers: ['floor', 'global=web'] });
    expect(st.surfaces.network).toMatchObject({ allow: 1, from: { allow: 'global=web', deny: 'floor' } });
  });

  it('--subject resolves an agent binding on top; an unknown account is subject_unknown (exit 2)', () => {
    expect(
      leash(['profile', 'save', 'narrow', '--from', file('n.yaml', 'filesystem: { allow: ["/home/leash-iris"] }\n')])
        .code,
    ).toBe(0);
    expect(leash(['bind', 'agent:leash-iris', 'narrow', '--no-reconcile']).code).toBe(0);
    expect(leash(['check', 'fs', '/home/fido/notes', '--subject', 'leash-iris']).code).toBe(1);
    expect(leash(['check', 'fs', '/home/fido/notes']).code).toBe(0);
    expect(leash(['check', 'fs', '/home/fido/notes', '--subject', 'leash-vader']).code).toBe(0);
    const ok = JSON.parse(leash(['check', 'fs', '/home/leash-iris/x', '--subject', 'leash-iris', '--json']).stdout);
    expect(ok).toMatchObject({ action: 'allow', layer: 'agent:leash-iris=narrow' });
    const st = JSON.parse(leash(['status', '--subject', 'leash-iris', '--json']).stdout);
    expect(st.subject).toMatchObject({
      account: 'leash-iris',
      kind: 'agent',
      layers: ['floor', 'agent:leash-iris=narrow'],
    });
    const none = leash(['check', 'fs', '/x', '--subject', 'nobody-here', '--json']);
    expect(none.code).toBe(2);
    expect(JSON.parse(none.stdout)).toMatchObject({ error: { code: 'subject_unknown' } });
  });

  it('a subject whose profile is gone is reported as held fail-closed, not judged against the floor', () => {
    expect(
      leash(['profile', 'save', 'gone', '--from', file('g.yaml', 'commands: { deny: ["ssh", "curl", "nc"] }\n')]).code,
    ).toBe(0);
    expect(leash(['bind', 'agent:leash-vader', 'gone', '--no-reconcile']).code).toBe(0);
    fs.rmSync(path.join(dir, 'state/profiles/gone.yaml'));
    const c = leash(['check', 'fs', '/home/x', '--subject', 'leash-vader', '--json']);
    expect(c.code).toBe(1);
    expect(JSON.parse(c.stdout)).toMatchObject({ action: 'block', reason: 'dangling_profile', source: 'subject' });
    expect(leash(['status', '--subject', 'leash-vader']).stdout).toMatch(/FAILED +dangling_profile/);
  });
});
