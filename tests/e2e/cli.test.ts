import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { mountOf, parseMountinfo } from '../../src/dataplane/watcher/policy.js';
import { CLI, configFile, ensureBuilt, leash, tmpDir } from './helpers.js';

beforeAll(() => ensureBuilt(), 120_000);

const isRoot = process.getuid?.() === 0;
const NOBODY_GID = 65534;

const POLICY = (decisions: string) => `user: nobody
fail_mode: closed
network:
  mode: whitelist
  allow: [github.com, "10.0.0.0/8", "[2001:db8::1]:443"]
  deny: [evil.github.com]
filesystem:
  mode: whitelist
  allow: [/home/nobody/work]
  deny: [/home/nobody/work/secrets]
commands:
  mode: whitelist
  allow: [git, /usr/bin/ls]
tools:
  mode: whitelist
  allow: [read_file]
logging:
  decisions: ${decisions}
`;

const noStack = (s: string) => expect(s).not.toMatch(/\n\s+at .+\(.+:\d+:\d+\)/);

describe('leash init', () => {
  it('creates the config from the shipped default, 0640 root:<user group>', async () => {
    const file = path.join(tmpDir(), 'etc', 'leash.yaml');
    const r = await leash(['-c', file, 'init', '--user', 'nobody', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ created: true, user: 'nobody', uid: 65534 });
    const st = fs.statSync(file);
    expect(st.mode & 0o777).toBe(0o640);
    if (isRoot) expect([st.uid, st.gid]).toEqual([0, NOBODY_GID]);
    const text = fs.readFileSync(file, 'utf8');
    expect(text).toContain('user: nobody');
    expect(text).toContain('# The leashed Linux account'); // comments of the default survive
    const v = await leash(['-c', file, 'validate', '--json']);
    expect(JSON.parse(v.stdout).valid).toBe(true);
  });

  it('re-running init on an existing config keeps it and re-states the mode', async () => {
    const file = configFile('# mine\nuser: nobody\nnetwork: { allow: [a.com] }\n');
    fs.chmodSync(file, 0o666);
    const r = await leash(['-c', file, 'init', '--user', 'nobody']);
    expect(r.code).toBe(0);
    expect(fs.readFileSync(file, 'utf8')).toContain('# mine');
    expect(fs.statSync(file).mode & 0o777).toBe(0o640);
  });

  it.each([
    [['--user', 'leash-tno-such-account'], 'user_unknown'],
    [['--user', 'Fido Dog'], 'user_invalid'],
  ])('refuses %j with %s, exit 2', async (args, code) => {
    const file = path.join(tmpDir(), 'leash.yaml');
    const r = await leash(['-c', file, 'init', ...args, '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout).error.code).toBe(code);
    expect(fs.existsSync(file)).toBe(false);
  });

  it('--user is required (usage error, exit 2)', async () => {
    const r = await leash(['-c', path.join(tmpDir(), 'x.yaml'), 'init']);
    expect(r.code).toBe(2);
    noStack(r.stderr);
  });
});

describe('leash status', () => {
  it('--json reports user, each surface, enforcers and the sink; a switch with no service behind it is not "on"', async () => {
    const file = configFile(POLICY('stdout') + 'enforcers: { tools: false }\n');
    const r = await leash(['-c', file, 'status', '--json']);
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout);
    expect(s).toMatchObject({
      config: file,
      user: 'nobody',
      uid: 65534,
      fail_mode: 'closed',
      decisions: 'stdout',
      enforcers: { network: true, filesystem: true, tools: false },
    });
    expect(s.surfaces.network).toEqual({
      mode: 'whitelist',
      allow: 3,
      deny: 1,
      // No service runs for this config and the host's nft map does not hold nobody's UID: switched on, not confined.
      enforced: false,
      not_confined: expect.any(String),
      from: { mode: 'floor', allow: 'floor', deny: 'floor' },
    });
    expect(s.surfaces.commands).toEqual({
      mode: 'whitelist',
      allow: 2,
      deny: 0,
      enforced: false,
      not_confined: expect.any(String),
      from: { mode: 'floor', allow: 'floor', deny: 'floor' },
    });
    expect(s.surfaces.tools.enforced).toBe(false);
    expect(s.surfaces.tools.not_confined).toBeUndefined();
    expect(s.findings.critical).toBeGreaterThanOrEqual(3);
  });

  it('--json reports host.memfd_noexec: configured, and what the kernel reads now (status changes nothing)', async () => {
    const kernel = fs.existsSync('/proc/sys/vm/memfd_noexec')
      ? Number(fs.readFileSync('/proc/sys/vm/memfd_noexec', 'utf8').trim())
      : null;
    for (const [text, configured] of [
      ['', false],
      ['host: { memfd_noexec: true }\n', true],
    ] as const) {
      const r = await leash(['-c', configFile(POLICY('stdout') + text), 'status', '--json']);
      expect(r.code).toBe(0);
      const users = Number(fs.readFileSync('/proc/sys/user/max_user_namespaces', 'utf8').trim());
      expect(JSON.parse(r.stdout).host).toEqual({
        memfd_noexec: { configured, current: kernel, enforced: kernel !== null && kernel >= 2 },
        max_user_namespaces: { configured: false, current: users, enforced: users === 0 },
      });
    }
  });

  it('--json: filesystem.namespaces as enforced (deny under a whitelist, unless set), and the BPF LSM probe', async () => {
    const r = await leash(['-c', configFile(POLICY('stdout')), 'status', '--json']);
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout) as {
      namespaces: string;
      bpf_lsm: { probed: boolean; loadable: boolean; code: string | null; control: boolean | null };
    };
    expect(s.namespaces).toBe('deny');
    const allow = await leash([
      '-c',
      configFile(POLICY('stdout').replace('filesystem:', 'filesystem:\n  namespaces: allow')),
      'status',
      '--json',
    ]);
    expect(JSON.parse(allow.stdout).namespaces).toBe('allow');
    if (process.getuid?.() === 0) {
      // The probe ran, and the loader itself works (the socket filter control loads): a refusal is the kernel's
      // answer for LSM programs (EPERM on the machines this is tested on), never the probe's own failure.
      expect(s.bpf_lsm.probed).toBe(true);
      expect(s.bpf_lsm.control).toBe(true);
      if (!s.bpf_lsm.loadable) expect(s.bpf_lsm.code).toMatch(/^E[A-Z0-9]+$/);
      const text = await leash(['-c', configFile(POLICY('stdout')), 'status']);
      expect(text.stdout).toMatch(/^bpf lsm +(refused \(E[A-Z0-9]+\)|an LSM program loads)/m);
    }
  });

  it('reads LEASH_CONFIG when -c is absent', async () => {
    const file = configFile(POLICY('stdout'));
    const r = await leash(['status', '--json'], { env: { LEASH_CONFIG: file } });
    expect(JSON.parse(r.stdout).config).toBe(file);
  });

  it('a missing config is exit 2, config_missing', async () => {
    const r = await leash(['-c', path.join(tmpDir(), 'absent.yaml'), 'status', '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout).error.code).toBe('config_missing');
  });
});

/** The findings about the file itself (mark coverage depends on this host's mounts; tested on its own). */
// Findings judged against this host (its mounts, its programs' start-up files), not the file alone.
const HOST_FINDINGS = new Set(['marks_partial_coverage', 'command_cannot_start']);
const ofFile = (findings: { code: string }[]) => findings.filter((f) => !HOST_FINDINGS.has(f.code));

describe('leash validate', () => {
  it.skipIf(!isRoot)(
    'an operator who cannot read the 0640 floor is refused with permission_denied and told to use sudo',
    async () => {
      const dir = tmpDir();
      fs.chmodSync(dir, 0o755);
      const file = path.join(dir, 'leash.yaml');
      expect((await leash(['-c', file, 'init', '--user', 'nobody'])).code).toBe(0);
      // An account that is neither root nor in the agent's group: the read-only commands do not widen who reads it.
      const as = (args: string[]) =>
        spawnSync(
          'setpriv',
          ['--reuid=65534', '--regid=64999', '--clear-groups', process.execPath, CLI, '-c', file, ...args],
          {
            encoding: 'utf8',
            env: { ...process.env, LEASH_STATE_DIR: dir },
          },
        );
      for (const cmd of [['validate'], ['check', 'net', 'github.com:443'], ['status']]) {
        const j = as([...cmd, '--json']);
        expect(j.status, `${cmd.join(' ')}: ${j.stdout}${j.stderr}`).toBe(2);
        expect(JSON.parse(j.stdout)).toMatchObject({
          error: { code: 'permission_denied', details: { errno: 'EACCES', was: 'config_unreadable' } },
        });
      }
      const t = as(['validate']);
      expect(t.stderr).toMatch(/^leash: cannot read config file .*run it with sudo\) \[permission_denied\]$/m);
      noStack(t.stderr);
    },
  );

  it.skipIf(!isRoot)(
    'the agent (it reads the floor, not the state) gets permission_denied, exit 2, from every command it tries',
    async () => {
      const dir = tmpDir();
      fs.chmodSync(dir, 0o755);
      const file = path.join(dir, 'leash.yaml');
      expect((await leash(['-c', file, 'init', '--user', 'nobody'])).code).toBe(0);
      // The state as root leaves it: the directory and the commit record root's alone.
      const state = path.join(dir, 'state');
      fs.mkdirSync(path.join(state, 'profiles'), { recursive: true, mode: 0o700 });
      fs.chmodSync(state, 0o700);
      fs.writeFileSync(path.join(state, 'apply.pending.json'), '{}', { mode: 0o600 });
      const as = (args: string[]) =>
        spawnSync(
          'setpriv',
          ['--reuid=65534', `--regid=${NOBODY_GID}`, '--clear-groups', process.execPath, CLI, '-c', file, ...args],
          { encoding: 'utf8', env: { ...process.env, LEASH_STATE_DIR: state } },
        );
      for (const cmd of [
        ['profile', 'list'],
        ['profile', 'show', 'p1'],
        ['status'],
        ['net', 'allow', 'x.test'],
        ['validate'],
      ]) {
        const j = as([...cmd, '--json']);
        expect(j.status, `${cmd.join(' ')}: ${j.stdout}${j.stderr}`).toBe(2);
        expect(JSON.parse(j.stdout), cmd.join(' ')).toMatchObject({ error: { code: 'permission_denied' } });
        const t = as(cmd);
        expect(t.status, cmd.join(' ')).toBe(2);
        expect(t.stderr, cmd.join(' ')).toMatch(/run it with sudo\) \[permission_denied\]\n$/);
        expect(t.stderr.match(/\[[a-z_]+\]/g), cmd.join(' ')).toEqual(['[permission_denied]']);
        noStack(t.stderr);
      }
      // Nothing was written: the floor is as init left it.
      expect(fs.readFileSync(file, 'utf8')).not.toContain('x.test');
    },
  );

  it('a clean config is valid, exit 0', async () => {
    // Its commands whitelist comes with host.memfd_noexec (else commands_memfd_unguarded); validate applies nothing.
    const r = await leash([
      '-c',
      configFile(`${POLICY('stdout')}host: { memfd_noexec: true }\n`),
      'validate',
      '--json',
    ]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ valid: true });
    expect(ofFile(JSON.parse(r.stdout).findings)).toEqual([]);
  });

  it('a commands whitelist without host.memfd_noexec is valid with the commands_memfd_unguarded warning', async () => {
    const r = await leash(['-c', configFile(POLICY('stdout')), 'validate', '--json']);
    expect(r.code).toBe(0);
    expect(ofFile(JSON.parse(r.stdout).findings)).toEqual([
      expect.objectContaining({ code: 'commands_memfd_unguarded', severity: 'warning', path: 'host.memfd_noexec' }),
    ]);
  });

  it.each([
    [
      'a blacklist surface with an allow list',
      'network: { mode: blacklist, allow: [github.com] }\n',
      'blacklist_allow_ignored',
    ],
    ['an inert deny entry', 'network: { deny: ["https://evil.com/"] }\n', 'inert_deny'],
    ['an unknown user', 'user: leash-tno-such-account\n', 'user_unknown'],
  ])('exits 1 on %s (critical)', async (_what, text, code) => {
    const r = await leash([
      '-c',
      configFile(text.startsWith('user:') ? text : `user: nobody\n${text}`),
      'validate',
      '--json',
    ]);
    expect(r.code).toBe(1);
    const out = JSON.parse(r.stdout);
    expect(out.valid).toBe(false);
    expect(out.findings).toContainEqual(expect.objectContaining({ code, severity: 'critical' }));
  });

  it('an inert allow entry is a warning, exit 0', async () => {
    const r = await leash([
      '-c',
      configFile('user: nobody\nfilesystem: { allow: ["~/work"] }\n'),
      'validate',
      '--json',
    ]);
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(ofFile(out.findings)).toEqual([expect.objectContaining({ code: 'inert_allow', severity: 'warning' })]);
    expect(out.inert_entries[0]).toMatchObject({
      surface: 'filesystem',
      list: 'allow',
      problem: { code: 'home_path' },
    });
  });

  it('an invalid config is exit 2 with path: message lines and no stack trace', async () => {
    const r = await leash(['-c', configFile('network:\n  mode: greylist\n  alow: []\n'), 'validate']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^ {2}network\.mode: \S/m);
    expect(r.stderr).toMatch(/^ {2}network\.alow: .*"allow"/m);
    noStack(r.stderr);
  });

  it('--json on an invalid config gives the code and the issues', async () => {
    const r = await leash(['-c', configFile('user: a\nuser: b\n'), 'validate', '--json']);
    expect(r.code).toBe(2);
    const out = JSON.parse(r.stdout);
    expect(out).toMatchObject({ valid: false, error: { code: 'config_invalid' } });
    expect(out.error.details.issues).toEqual([expect.objectContaining({ path: 'user' })]);
  });

  it('warns when a whitelist names an interpreter, the loader or a launcher', async () => {
    const r = await leash([
      '-c',
      configFile('user: nobody\ncommands: { allow: [git, python3, /lib64/ld-linux-x86-64.so.2, xargs] }\n'),
      'validate',
      '--json',
    ]);
    expect(r.code).toBe(0);
    const hits = JSON.parse(r.stdout).findings.filter(
      (f: { code: string }) => f.code === 'commands_interpreter_allowed',
    );
    expect(hits.map((f: { entry: string }) => f.entry)).toEqual(['python3', '/lib64/ld-linux-x86-64.so.2', 'xargs']);
  });

  it('warns when the marks cover only part of a whitelist on this host, not when / is covered', async () => {
    const mounts = parseMountinfo(fs.readFileSync('/proc/self/mountinfo', 'utf8'));
    // The policy's roots: /home/nobody/work (+ secrets) and /usr/bin (from /usr/bin/ls).
    const markedDevs = new Set(['/home/nobody/work', '/usr/bin'].map((p) => mountOf(mounts, p)?.dev));
    // Another real filesystem than the ones holding the policy's paths: its opens would pass unjudged.
    const REAL = new Set(['tmpfs', 'devtmpfs', 'ext4', 'xfs', 'btrfs', 'overlay', 'vfat', '9p', 'virtiofs']);
    const others = mounts.filter(
      (m) => !markedDevs.has(m.dev) && REAL.has(m.fsType) && !/^\/(home\/nobody\/work|usr\/bin)\//.test(m.mountPoint),
    );
    const partial = await leash(['-c', configFile(POLICY('stdout')), 'validate', '--json']);
    expect(partial.code).toBe(0);
    const cov = JSON.parse(partial.stdout).findings.filter(
      (f: { code: string }) => f.code === 'marks_partial_coverage',
    );
    if (others.length > 0) {
      expect(cov.map((f: { path: string }) => f.path)).toEqual(['filesystem.mode', 'commands.mode']);
      expect(cov[0].severity).toBe('warning');
      expect(cov[0].unmarked).toContain(others[0]!.mountPoint);
      const human = await leash(['-c', configFile(POLICY('stdout')), 'validate']);
      expect(human.stdout).toMatch(/marks_partial_coverage/);
    }
    // A whitelist rooted at / marks every filesystem (and the ones mounted beneath it).
    const whole = await leash([
      '-c',
      configFile('user: nobody\nfilesystem: { allow: [/] }\ncommands: { allow: [/usr/bin/git] }\n'),
      'validate',
      '--json',
    ]);
    expect(JSON.parse(whole.stdout).findings.map((f: { code: string }) => f.code)).not.toContain(
      'marks_partial_coverage',
    );
    // The filesystem enforcer switched off: no marks at all, and nothing to warn about them.
    const off = await leash([
      '-c',
      configFile(`${POLICY('stdout')}enforcers: { filesystem: false }\n`),
      'validate',
      '--json',
    ]);
    expect(JSON.parse(off.stdout).findings.map((f: { code: string }) => f.code)).not.toContain(
      'marks_partial_coverage',
    );
  });

  it('a fail_mode typo is a warning, not an error', async () => {
    const r = await leash(['-c', configFile('user: nobody\nfail_mode: opne\n'), 'validate', '--json']);
    expect(r.code).toBe(0);
    expect(ofFile(JSON.parse(r.stdout).findings)).toEqual([expect.objectContaining({ code: 'fail_mode_invalid' })]);
  });
});

describe('leash <surface> allow|deny|mode', () => {
  it.each([
    ['net', 'allow', 'pypi.org', 'network'],
    ['network', 'deny', '203.0.113.0/24', 'network'],
    ['fs', 'allow', '/srv/data', 'filesystem'],
    ['filesystem', 'deny', '/srv/data/**/*.key', 'filesystem'],
    ['cmd', 'allow', 'make', 'commands'],
    ['commands', 'deny', '/usr/bin/curl', 'commands'],
    ['tool', 'allow', 'search', 'tools'],
    ['tools', 'deny', 'shell', 'tools'],
  ])('%s %s %s writes %s', async (alias, list, entry, surface) => {
    const file = configFile(POLICY('stdout'));
    const r = await leash(['-c', file, alias, list, entry, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ surface, list, entry, added: true });
    const s = await leash(['-c', file, 'validate', '--json']);
    expect(s.code).toBe(0);
    expect(fs.readFileSync(file, 'utf8')).toContain(entry);
    expect(fs.statSync(file).mode & 0o777).toBe(0o640);
    const again = await leash(['-c', file, alias, list, entry, '--json']);
    expect(JSON.parse(again.stdout).added).toBe(false);
  });

  it('remove takes an entry out of its list, keeps comments, and refuses one that is not there', async () => {
    const file = configFile(POLICY('stdout'));
    expect((await leash(['-c', file, 'net', 'allow', 'pypi.org'])).code).toBe(0);
    expect((await leash(['-c', file, 'net', 'deny', 'pypi.org'])).code).toBe(0);
    fs.writeFileSync(file, `# operator's note\n${fs.readFileSync(file, 'utf8')}`);
    expect((await leash(['-c', file, 'check', 'network', 'pypi.org:443'])).code).toBe(1); // deny wins
    const r = await leash(['-c', file, 'net', 'remove', 'deny', 'pypi.org', '--json', '--no-reconcile']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ surface: 'network', list: 'deny', entry: 'pypi.org', removed: 1 });
    expect(fs.readFileSync(file, 'utf8')).toContain("# operator's note");
    expect((await leash(['-c', file, 'check', 'network', 'pypi.org:443'])).code).toBe(0); // the deny is gone
    expect(fs.statSync(file).mode & 0o777).toBe(0o640);
    // Not there: refused, exit 2, with a suggestion, and the file is untouched.
    const before = fs.readFileSync(file, 'utf8');
    const miss = await leash(['-c', file, 'net', 'remove', 'allow', 'PyPI.org', '--json']);
    expect(miss.code).toBe(2);
    expect(JSON.parse(miss.stdout)).toMatchObject({ error: { code: 'entry_not_found' } });
    expect(miss.stdout).toContain('did you mean');
    expect(fs.readFileSync(file, 'utf8')).toBe(before);
    const bad = await leash(['-c', file, 'net', 'remove', 'both', 'pypi.org']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('allow or deny');
  });

  it.each([
    ['net', 'allow', 'https://github.com/', 'url'],
    ['net', 'deny', 'evil.com/path', 'host_path'],
    ['net', 'allow', 'user@host.com', 'userinfo'],
    ['net', 'allow', 'github.com:99999', 'bad_port'],
    ['net', 'allow', '.github.com', 'leading_dot'],
    ['fs', 'allow', 'relative/dir', 'relative_path'],
    ['fs', 'deny', '~/.ssh', 'home_path'],
    ['cmd', 'deny', 'rm -rf', 'arguments'],
  ])('refuses %s %s %j (%s), exit 2, file untouched', async (alias, list, entry, problem) => {
    const file = configFile(POLICY('stdout'));
    const before = fs.readFileSync(file, 'utf8');
    const r = await leash(['-c', file, alias, list, entry, '--json']);
    expect(r.code).toBe(2);
    const out = JSON.parse(r.stdout);
    expect(out.error.code).toBe('entry_inert');
    expect(out.error.details.kind).toBe('entry');
    expect(out.error.details.inert_entries[0].problem.code).toBe(problem);
    expect(fs.readFileSync(file, 'utf8')).toBe(before);
  });

  it('mode switches a surface; a bad mode is exit 2 mode_invalid', async () => {
    const file = configFile(POLICY('stdout'));
    const r = await leash(['-c', file, 'cmd', 'mode', 'blacklist', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ surface: 'commands', mode: 'blacklist', changed: true });
    const bad = await leash(['-c', file, 'cmd', 'mode', 'greylist', '--json']);
    expect(bad.code).toBe(2);
    expect(JSON.parse(bad.stdout).error.code).toBe('mode_invalid');
  });

  it('switching to blacklist with an allow list warns (the list is never consulted)', async () => {
    const file = configFile(POLICY('stdout'));
    const r = await leash(['-c', file, 'net', 'mode', 'blacklist']);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain('blacklist_allow_ignored');
    expect((await leash(['-c', file, 'validate'])).code).toBe(1);
  });

  it('concurrent writers from separate processes lose no entry', async () => {
    const file = configFile(POLICY('stdout'));
    const rs = await Promise.all(
      Array.from({ length: 6 }, (_, i) => leash(['-c', file, 'net', 'allow', `h${i}.example.com`])),
    );
    expect(rs.map((r) => r.code)).toEqual([0, 0, 0, 0, 0, 0]);
    const text = fs.readFileSync(file, 'utf8');
    for (let i = 0; i < 6; i++) expect(text).toContain(`h${i}.example.com`);
    expect(fs.existsSync(`${file}.lock`)).toBe(false);
  });
});

describe('leash check', () => {
  it.each([
    ['network', 'github.com:443', 0, 'allow_entry', 'github.com'],
    ['net', 'api.github.com:443', 0, 'allow_entry', 'github.com'],
    ['net', 'evil.github.com:443', 1, 'deny_entry', 'evil.github.com'],
    ['net', 'evilgithub.com:443', 1, 'not_allowed', null],
    ['net', '10.1.2.3:22', 0, 'allow_entry', '10.0.0.0/8'],
    ['net', '[2001:db8::1]:443', 0, 'allow_entry', '[2001:db8::1]:443'],
    ['net', '[2001:db8::1]:80', 1, 'not_allowed', null],
    ['fs', '/home/nobody/work/a.txt', 0, 'allow_entry', '/home/nobody/work'],
    ['fs', '/home/nobody/work/secrets/k', 1, 'deny_entry', '/home/nobody/work/secrets'],
    ['fs', '/home/nobody/workshop', 1, 'not_allowed', null],
    ['cmd', '/usr/local/bin/git', 0, 'allow_entry', 'git'],
    ['cmd', '/usr/bin/curl', 1, 'not_allowed', null],
    ['tool', 'read_file', 0, 'allow_entry', 'read_file'],
    ['tool', 'shell', 1, 'not_allowed', null],
  ])('check %s %s -> exit %i %s', async (surface, subject, code, reason, rule) => {
    const r = await leash(['-c', configFile(POLICY('stdout')), 'check', surface, subject, '--json']);
    expect(r.code).toBe(code);
    const v = JSON.parse(r.stdout);
    expect(v).toMatchObject({ action: code === 0 ? 'allow' : 'block', reason, rule, enforced: true });
  });

  it('the human form names the verdict and the reason', async () => {
    const r = await leash(['-c', configFile(POLICY('stdout')), 'check', 'net', 'example.com:443']);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^block network example\.com:443: not_allowed/);
  });

  it.each([
    ['net', 'github.com'],
    ['net', 'github.com:0'],
    ['net', 'github.com:https'],
    ['net', '2001:db8::1:443'],
    ['net', '[not-v6]:443'],
    ['net', 'https://github.com/'],
    ['fs', 'relative/path'],
  ])('refuses subject %s %j with subject_invalid, exit 2', async (surface, subject) => {
    const r = await leash(['-c', configFile(POLICY('stdout')), 'check', surface, subject, '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout).error.code).toBe('subject_invalid');
  });

  it('an unknown surface is surface_unknown, exit 2', async () => {
    const r = await leash(['-c', configFile(POLICY('stdout')), 'check', 'dns', 'x', '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout).error.code).toBe('surface_unknown');
  });
});

describe('leash logs', () => {
  function logFile(lines: string[]): { file: string; cfg: string } {
    const dir = tmpDir();
    const file = path.join(dir, 'decisions.jsonl');
    fs.writeFileSync(file, lines.map((l) => `${l}\n`).join(''));
    return { file, cfg: configFile(POLICY(file)) };
  }

  it('--tail N prints the last N lines, with control characters and bidi overrides escaped', async () => {
    const { cfg } = logFile(['{"n":1}', '{"n":2}', '{"n":3,"s":"\u001b[2J"}', '{"n":4,"s":"abc\u202edcba\u2066"}']);
    const r = await leash(['-c', cfg, 'logs', '--tail', '2']);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('{"n":3,"s":"\\u{1b}[2J"}\n{"n":4,"s":"abc\\u{202e}dcba\\u{2066}"}\n');
    expect(r.stdout).not.toMatch(/[\u001b\u202e\u2066]/);
  });

  it('--follow prints lines appended later', async () => {
    const { file, cfg } = logFile(['{"n":1}']);
    const { spawn } = await import('node:child_process');
    const { CLI } = await import('./helpers.js');
    const child = spawn(process.execPath, [CLI, '-c', cfg, 'logs', '--follow', '--tail', '1']);
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    const waitFor = async (s: string) => {
      for (let i = 0; i < 100 && !out.includes(s); i++) await new Promise((r) => setTimeout(r, 50));
      expect(out).toContain(s);
    };
    try {
      await waitFor('{"n":1}');
      fs.appendFileSync(file, '{"n":2,"x":"\u202e"}\n');
      await waitFor('{"n":2,"x":"\\u{202e}"}');
    } finally {
      child.kill('SIGTERM');
    }
    const code = await new Promise((r) => child.on('close', r));
    expect(code).toBe(0);
  });

  it('a stdout sink has no file to read: log_sink_stdout, exit 2', async () => {
    const r = await leash(['-c', configFile(POLICY('stdout')), 'logs']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/\[log_sink_stdout\]$/m);
  });

  it("--action block --subject UID prints only that subject's blocks, as text or as the JSON lines", async () => {
    const d = (ref: string, uid: number, action: string, path: string) =>
      JSON.stringify({
        ts: '2026-12-06T05:00:00.000Z',
        ref,
        uid,
        surface: 'filesystem',
        action,
        reason: 'r',
        subject: { path },
        rule: null,
      });
    const { cfg } = logFile([
      d('aaaaaaaa', 4201, 'block', '/etc/shadow'),
      ...Array.from({ length: 50 }, (_, i) => d(`allow${String(i).padStart(3, '0')}`, 4201, 'allow', '/usr/lib/x')),
      d('bbbbbbbb', 4202, 'block', '/root/.ssh/id_rsa'),
    ]);
    const r = await leash(['-c', cfg, 'logs', '--action', 'block', '--subject', '4201']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(r.stdout).toMatch(/block .*\(4201\) +\/etc\/shadow .*aaaaaaaa/);
    const j = await leash(['-c', cfg, 'logs', '--action', 'block', '--json', '--tail', '5']);
    expect(
      j.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).ref),
    ).toEqual(['aaaaaaaa', 'bbbbbbbb']);
  });

  it('--follow with a filter prints only the matching lines appended later', async () => {
    const d = (ref: string, action: string) =>
      JSON.stringify({
        ts: new Date().toISOString(),
        ref,
        uid: 4201,
        surface: 'network',
        action,
        reason: 'r',
        subject: { domain: 'x.lab', port: 443 },
        rule: null,
      });
    const { file, cfg } = logFile([d('aaaaaaaa', 'allow')]);
    const { spawn } = await import('node:child_process');
    const { CLI } = await import('./helpers.js');
    const child = spawn(process.execPath, [CLI, '-c', cfg, 'logs', '--follow', '--action', 'block', '--json']);
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    try {
      await new Promise((r) => setTimeout(r, 1500));
      fs.appendFileSync(file, `${d('bbbbbbbb', 'allow')}\n${d('cccccccc', 'block')}\n`);
      for (let i = 0; i < 100 && !out.includes('cccccccc'); i++) await new Promise((r) => setTimeout(r, 50));
    } finally {
      child.kill('SIGTERM');
    }
    await new Promise((r) => child.on('close', r));
    expect(
      out
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).ref),
    ).toEqual(['cccccccc']);
  });

  it.each([
    ['--action', 'blocked'],
    ['--surface', 'disk'],
    ['--since', 'yesterday'],
    ['--subject', 'leash-t42-no-such-account'],
  ])('%s %s is log_filter_invalid, exit 2', async (flag, value) => {
    const { cfg } = logFile(['{"n":1}']);
    const r = await leash(['-c', cfg, 'logs', flag, value]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/\[log_filter_invalid\]$/m);
  });

  it('a missing log file is log_unreadable, exit 3', async () => {
    const r = await leash(['-c', configFile(POLICY(path.join(tmpDir(), 'none.jsonl'))), 'logs']);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/\[log_unreadable\]$/m);
  });
});

describe('usage errors', () => {
  it('an unknown command is exit 2 with a suggestion and no stack trace', async () => {
    const r = await leash(['-c', configFile(POLICY('stdout')), 'stauts']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/status.*\[usage\]$/m);
    noStack(r.stderr);
  });

  it('an unknown option is exit 2, usage in --json', async () => {
    const r = await leash(['status', '--frobnicate']);
    expect(r.code).toBe(2);
    noStack(r.stderr);
    const j = await leash(['status', '--json', '--frobnicate']);
    expect(j.code).toBe(2);
    expect(JSON.parse(j.stdout).error.code).toBe('usage');
  });

  it('--help and --version exit 0', async () => {
    expect((await leash(['--help'])).code).toBe(0);
    expect((await leash(['--version'])).code).toBe(0);
  });
});

describe('reload after an edit', () => {
  /** A fake systemctl that records its arguments and answers is-active with $ACTIVE. */
  function fakeSystemctl(active: boolean, killFails = false): { bin: string; calls: () => string[] } {
    const dir = tmpDir();
    const bin = path.join(dir, 'systemctl');
    const rec = path.join(dir, 'calls');
    fs.writeFileSync(
      bin,
      `#!/bin/sh\necho "$*" >> ${rec}\ncase "$1" in is-active) exit ${active ? 0 : 3};; kill) ${killFails ? 'echo "Failed to kill unit" >&2; exit 1' : 'exit 0'};; esac\n`,
      { mode: 0o755 },
    );
    return { bin, calls: () => (fs.existsSync(rec) ? fs.readFileSync(rec, 'utf8').trim().split('\n') : []) };
  }

  it('signals the main PID of a running service with SIGHUP after a change, and fails unless it confirms', async () => {
    // A systemd that names no main PID and a service that never writes its generation: the change was signalled but
    // is not known to be in force, so the write exits 3 (reload_unconfirmed), never 0.
    const sc = fakeSystemctl(true);
    const r = await leash(['-c', configFile(POLICY('stdout')), 'net', 'allow', 'pypi.org', '--json'], {
      env: { LEASH_SYSTEMCTL: sc.bin, LEASH_RELOAD_TIMEOUT_S: '1', LEASH_STATUS_FILE: path.join(tmpDir(), 's.json') },
    });
    expect(r.code).toBe(3);
    expect(JSON.parse(r.stdout).error.code).toBe('reload_unconfirmed');
    expect(sc.calls()).toEqual([
      'is-active --quiet leash.service',
      'show -p MainPID --value leash.service',
      'kill --kill-whom=main --signal=HUP leash.service',
    ]);
  });

  it('does not signal when nothing changed, with --no-reconcile, or when the service is not running', async () => {
    const file = configFile(POLICY('stdout'));
    const running = fakeSystemctl(true);
    await leash(['-c', file, 'net', 'allow', 'github.com'], { env: { LEASH_SYSTEMCTL: running.bin } });
    await leash(['-c', file, 'net', 'allow', 'a.example', '--no-reconcile'], { env: { LEASH_SYSTEMCTL: running.bin } });
    expect(running.calls()).toEqual([]);
    const stopped = fakeSystemctl(false);
    const r = await leash(['-c', file, 'cmd', 'mode', 'blacklist', '--json'], {
      env: { LEASH_SYSTEMCTL: stopped.bin },
    });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).service.signalled).toBe(false);
    expect(stopped.calls()).toEqual(['is-active --quiet leash.service']);
  });

  it('leash restart runs systemctl restart leash.service; a failure is exit 3 service_failed', async () => {
    const ok = fakeSystemctl(true);
    const r = await leash(['restart'], { env: { LEASH_SYSTEMCTL: ok.bin } });
    expect(r.code).toBe(0);
    expect(ok.calls()).toEqual(['restart leash.service']);
    const r2 = await leash(['restart'], { env: { LEASH_SYSTEMCTL: '/nonexistent/systemctl' } });
    expect(r2.code).toBe(3);
    expect(r2.stderr).toMatch(/\[service_failed\]$/m);
  });

  it('a failed signal is exit 3 service_signal_failed: the policy is written but not in force', async () => {
    const file = configFile(POLICY('stdout'));
    const sc = fakeSystemctl(true, true);
    const r = await leash(['-c', file, 'net', 'deny', 'bad.example', '--json'], { env: { LEASH_SYSTEMCTL: sc.bin } });
    expect(r.code).toBe(3);
    const out = JSON.parse(r.stdout);
    expect(out.error.code).toBe('service_signal_failed');
    expect(out.error.details.command).toBe('systemctl kill --kill-whom=main --signal=HUP leash.service');
    expect(fs.readFileSync(file, 'utf8')).toContain('bad.example');
  });
});

describe('leash check tools with inputs', () => {
  const cfg = () =>
    configFile(
      'user: nobody\ntools: { allow: [run, read_file], inspect: { secrets: block, pii: log, priv_esc: block } }\n',
    );

  it('blocks privilege escalation in the inputs (inspect_priv_esc), exit 1', async () => {
    const r = await leash(['-c', cfg(), 'check', 'tool', 'run', '--inputs', '{"cmd":"sudo rm -rf /"}', '--json']);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ action: 'block', reason: 'inspect_priv_esc' });
  });

  it('blocks a secret and never prints it unmasked', async () => {
    const key = 'AKIAIOSFODNN7EXAMPLE';
    const r = await leash(['-c', cfg(), 'check', 'tool', 'run', '--inputs', JSON.stringify({ env: `AWS=${key}` })]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('inspect_secrets');
    expect(r.stdout).not.toContain(key);
    const j = await leash([
      '-c',
      cfg(),
      'check',
      'tool',
      'run',
      '--inputs',
      JSON.stringify({ env: `AWS=${key}` }),
      '--json',
    ]);
    expect(JSON.parse(j.stdout).reason).toBe('inspect_secrets');
    expect(j.stdout).not.toContain(key);
  });

  it('bad --inputs JSON is subject_invalid, exit 2', async () => {
    const r = await leash(['-c', cfg(), 'check', 'tool', 'run', '--inputs', '{nope', '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout).error.code).toBe('subject_invalid');
  });
});

describe('leash check tool with the gate argument rules', () => {
  const cfg = () =>
    configFile(`user: nobody
tools:
  allow: [read_file, run, ping]
  strict_args: true
  args:
    read_file:
      allow: { path: ["^/work/[^/]+$"] }
      deny: ["\\\\.env$"]
    run:
      allow: "*"
      deny: { cmd: ["^git push --force"] }
`);

  it('an args deny rule blocks (arg_denied, the rule and where), exit 1', async () => {
    const r = await leash(['-c', cfg(), 'check', 'tool', 'read_file', '--inputs', '{"path":"/work/.env"}', '--json']);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({
      surface: 'tools',
      action: 'block',
      reason: 'arg_denied',
      source: 'args',
      at: 'path',
      enforced: true,
    });
    const h = await leash(['-c', cfg(), 'check', 'tool', 'run', '--inputs', '{"cmd":"git push --force origin"}']);
    expect(h.code).toBe(1);
    expect(h.stdout).toMatch(/^block tools run: arg_denied \(rule .*git push --force.* at cmd\)/);
  });

  it('allow rules admit the exact shape and refuse the rest (arg_not_allowed)', async () => {
    const ok = await leash(['-c', cfg(), 'check', 'tool', 'read_file', '--inputs', '{"path":"/work/a.txt"}', '--json']);
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ action: 'allow', reason: 'allow_entry', rule: 'read_file' });
    const no = await leash(['-c', cfg(), 'check', 'tool', 'read_file', '--inputs', '{"path":"/etc/passwd"}', '--json']);
    expect(no.code).toBe(1);
    expect(JSON.parse(no.stdout)).toMatchObject({ action: 'block', reason: 'arg_not_allowed' });
  });

  it('strict_args: a tool without allow rules takes no arguments', async () => {
    const bare = await leash(['-c', cfg(), 'check', 'tool', 'ping', '--json']);
    expect(bare.code).toBe(0);
    const withArgs = await leash(['-c', cfg(), 'check', 'tool', 'ping', '--inputs', '{"host":"x"}', '--json']);
    expect(withArgs.code).toBe(1);
    expect(JSON.parse(withArgs.stdout)).toMatchObject({ action: 'block', reason: 'strict_args' });
  });

  it('a name denied by the engine stays denied whatever the arguments', async () => {
    const r = await leash(['-c', cfg(), 'check', 'tool', 'shell', '--inputs', '{}', '--json']);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ action: 'block', reason: 'not_allowed', source: 'mode' });
  });

  it('duplicate keys in --inputs are refused (strict JSON, as the gate reads a call)', async () => {
    const r = await leash(['-c', cfg(), 'check', 'tool', 'run', '--inputs', '{"cmd":"ls","cmd":"x"}', '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout).error.code).toBe('subject_invalid');
  });

  it('a bad argument regex in leash.yaml is config_invalid, exit 2', async () => {
    const bad = configFile('user: nobody\ntools:\n  allow: [t]\n  args: { t: { deny: ["("] } }\n');
    const r = await leash(['-c', bad, 'check', 'tool', 't', '--json']);
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stdout).error.code).toBe('config_invalid');
  });
});

describe('leash init default policy lookup', () => {
  it('LEASH_DEFAULT_POLICY overrides the shipped file; a missing override falls back to it', async () => {
    const dir = tmpDir();
    const mine = path.join(dir, 'mine.yaml');
    fs.writeFileSync(mine, '# site default\nuser: null\nnetwork: { allow: [intranet.example] }\n');
    const file = path.join(dir, 'leash.yaml');
    const r = await leash(['-c', file, 'init', '--user', 'nobody'], { env: { LEASH_DEFAULT_POLICY: mine } });
    expect(r.code).toBe(0);
    expect(fs.readFileSync(file, 'utf8')).toContain('# site default');
    // An explicit override that does not exist falls through to the shipped file, which exists here.
    const r2 = await leash(['-c', path.join(dir, 'b.yaml'), 'init', '--user', 'nobody'], {
      env: { LEASH_DEFAULT_POLICY: path.join(dir, 'absent.yaml') },
    });
    expect(r2.code).toBe(0);
  });
});
