import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './helpers.js';

const root = path.resolve(__dirname, '../..');
const isRoot = process.getuid?.() === 0;
const hasDpkg = spawnSync('dpkg-deb', ['--version']).status === 0 && spawnSync('fakeroot', ['-v']).status === 0;
const has = (bin: string, arg = '--version') => spawnSync(bin, [arg]).status === 0;

function run(argv: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

// Root (CI) builds the package whatever is installed: a missing tool then fails naming it.
describe.skipIf(!hasDpkg && !isRoot)('packaging (.deb)', () => {
  let work = '';
  let deb = '';
  let extracted = '';
  beforeAll(() => {
    expect(hasDpkg, 'dpkg-deb and fakeroot are needed to build the .deb (scripts/install-deps.sh)').toBe(true);
    ensureBuilt();
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-deb-'));
    // gzip: xz of the 95 MB the package holds (its Node runtime is most of it) takes minutes on a loaded 2-vCPU VM.
    const b = run(['bash', path.join(root, 'packaging/build-deb.sh'), work], { LEASH_DEB_COMPRESSION: 'gzip' });
    expect(b.code, b.err).toBe(0);
    deb = b.out.trim().split('\n').pop()!;
    extracted = path.join(work, 'root');
    expect(run(['dpkg-deb', '-x', deb, extracted]).code).toBe(0);
    expect(run(['dpkg-deb', '-e', deb, path.join(work, 'control')]).code).toBe(0);
    return () => fs.rmSync(work, { recursive: true, force: true });
  }, 600_000);

  it('ships the CLI, the addon, the unit, the default policy, docs, man page, completion and logrotate', () => {
    const list = run(['dpkg-deb', '-c', deb]).out;
    for (const f of [
      './usr/bin/leash',
      './lib/systemd/system/leash.service',
      './usr/lib/leash/build/Release/leash_native.node',
      './usr/lib/leash/dist/src/cli/main.js',
      './usr/share/leash/leash.default.yaml',
      './etc/logrotate.d/leash',
      './usr/share/man/man1/leash.1.gz',
      './usr/share/bash-completion/completions/leash',
      './usr/share/zsh/vendor-completions/_leash',
      './usr/share/doc/leash/copyright',
      './usr/share/doc/leash/changelog.gz',
      './usr/share/doc/leash/README.md',
      './usr/share/doc/leash/cli.md',
      './usr/share/doc/leash/threat-model.md',
    ])
      expect(list).toContain(f);
    // Dev and build-only dependencies are not shipped: no test runner, no compiler driver, no headers.
    for (const m of ['vitest', 'node-gyp', 'node-addon-api', 'typescript', 'eslint'])
      expect(list, m).not.toContain(`node_modules/${m}/`);
    // The package carries its runtime: Debian 12's archive has Node 18, so no nodejs dependency; the runtime's
    // shared libraries (libstdc++, from dpkg-shlibdeps) are.
    const depends = run(['dpkg-deb', '-f', deb, 'Depends']).out;
    expect(depends).not.toMatch(/nodejs/);
    expect(depends).toMatch(/nftables.*libc6 \(>= .*libstdc\+\+6 \(>= /);
    expect(list).toContain('./usr/lib/leash/bin/node');
    // The shipped logrotate file is a conffile (an operator's edit survives an upgrade).
    expect(fs.readFileSync(path.join(work, 'control', 'conffiles'), 'utf8').split('\n')).toContain(
      '/etc/logrotate.d/leash',
    );
  });

  it('ships only what runs in production: no lab, test, bench or fixture code', () => {
    const paths = run(['dpkg-deb', '-c', deb])
      .out.split('\n')
      .map((l) => l.split(/\s+/).pop() ?? '')
      .filter((p) => p.startsWith('./'));
    const ours = paths.filter((p) => p.startsWith('./usr/lib/leash/dist/'));
    expect(ours).toContain('./usr/lib/leash/dist/src/cli/main.js');
    const notProduction = /\/(lab|tests?|bench|benchmarks?|fixtures?)\/|\.(test|spec|bench)\.[cm]?js$/;
    expect(paths.filter((p) => notProduction.test(p))).toEqual([]);
    // `leash demo` is shipped, and with it the namespaces, upstream and probes it runs.
    expect(ours).toContain('./usr/lib/leash/dist/src/cli/demo/upstream.js');
    // Nothing shipped imports what is not (tests/lab, bench): the import would fail on an installed host.
    const importsUnshipped = ours
      .filter((p) => p.endsWith('.js'))
      .filter((p) =>
        /(?:from|import\()\s*['"](?:\.\.\/)+(?:tests|bench)\//.test(fs.readFileSync(path.join(extracted, p), 'utf8')),
      );
    expect(importsUnshipped).toEqual([]);
  });

  it('the runtime dependencies in package.json are what the installed tree needs, no build tool among them', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
      devDependencies: Record<string, string>;
    };
    expect(Object.keys(pkg.dependencies).sort()).toEqual([
      'commander',
      'pino',
      'prom-client',
      're2js',
      'smol-toml',
      'yaml',
      'zod',
    ]);
    expect(pkg.devDependencies).toHaveProperty('node-gyp');
    expect(pkg.devDependencies).toHaveProperty('node-addon-api');
  });

  it('is lintian-clean: no error and no warning', () => {
    expect(has('lintian'), 'lintian is not installed (scripts/install-deps.sh installs it)').toBe(true);
    const r = run(['lintian', '--tag-display-limit', '0', deb]);
    const tags = `${r.out}${r.err}`.split('\n').filter((l) => /^[EW]: /.test(l));
    expect(tags).toEqual([]);
    expect(r.code, r.out + r.err).toBe(0);
  }, 300_000);

  it('the shipped logrotate file parses (logrotate -d)', () => {
    expect(has('logrotate'), 'logrotate is not installed (scripts/install-deps.sh installs it)').toBe(true);
    const r = run([
      'logrotate',
      '-d',
      '-s',
      path.join(work, 'logrotate.state'),
      path.join(extracted, 'etc/logrotate.d/leash'),
    ]);
    expect(r.code, r.err).toBe(0);
    expect(r.err).not.toMatch(/^error:/m);
    expect(r.err).toMatch(/rotating pattern: \/var\/log\/leash\/decisions\.jsonl/);
  });

  it('man leash: the shipped page is docs/cli.md, with a subsection per command', () => {
    const page = run(['sh', '-c', `gzip -dc '${path.join(extracted, 'usr/share/man/man1/leash.1.gz')}'`]).out;
    expect(page).toMatch(/^\.TH LEASH 1 /m);
    for (const c of ['init', 'status', 'validate', 'check', 'logs', 'teardown', 'completion'])
      expect(page, c).toMatch(new RegExp(`^\\.SS .*leash ${c}`, 'm'));
  });

  it('the shipped completion lists every top-level command', () => {
    const bash = fs.readFileSync(path.join(extracted, 'usr/share/bash-completion/completions/leash'), 'utf8');
    const top = /^ {4}''\) echo '([^']*)'/m.exec(bash)?.[1]?.split(' ') ?? [];
    const help = run([process.execPath, path.join(extracted, 'usr/lib/leash/dist/src/cli/main.js'), '--help']).out;
    const commands = [...help.split('Commands:')[1]!.matchAll(/^ {2}([a-z-]+)/gm)].map((m) => m[1]!);
    expect(commands.length).toBeGreaterThan(10);
    for (const c of commands) expect(top, c).toContain(c);
  });

  it('the installed CLI runs from its own tree, on the runtime the package carries (Node >= 20)', () => {
    const node = path.join(extracted, 'usr/lib/leash/bin/node');
    const v = run([node, '-p', 'process.versions.node']);
    expect(v.code, v.err).toBe(0);
    expect(Number(v.out.split('.')[0])).toBeGreaterThanOrEqual(20);
    const r = run([node, path.join(extracted, 'usr/lib/leash/dist/src/cli/main.js'), '--version']);
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toMatch(/^\d+\.\d+\.\d+$/);
    // The wrapper runs that runtime, not whatever node is on PATH.
    expect(fs.readFileSync(path.join(extracted, 'usr/bin/leash'), 'utf8')).toMatch(
      /^exec \/usr\/lib\/leash\/bin\/node /m,
    );
  });

  it.skipIf(!isRoot)('postinst states 0640 root:<user group> on install and re-states it on upgrade', () => {
    const etc = path.join(work, 'etc-leash');
    const env = { LEASH_ETC: etc, LEASH_SHARE: path.join(extracted, 'usr/share/leash') };
    const postinst = path.join(work, 'control', 'postinst');
    expect(run(['sh', postinst, 'configure'], env).code).toBe(0);
    const conf = path.join(etc, 'leash.yaml');
    let st = fs.statSync(conf);
    expect(st.mode & 0o777).toBe(0o640);
    expect(st.uid).toBe(0);
    // An existing install whose file took a 0644 umask and now names an account: repaired on upgrade.
    fs.writeFileSync(conf, fs.readFileSync(conf, 'utf8').replace(/^user: .*$/m, 'user: nobody'));
    fs.chmodSync(conf, 0o644);
    expect(run(['sh', postinst, 'configure', '0.0.9'], env).code).toBe(0);
    st = fs.statSync(conf);
    expect(st.mode & 0o777).toBe(0o640);
    expect(st.uid).toBe(0);
    const nobodyGid = Number(run(['id', '-g', 'nobody']).out.trim());
    expect(st.gid).toBe(nobodyGid);
    // The policy already there is kept, never replaced by the default.
    expect(fs.readFileSync(conf, 'utf8')).toMatch(/^user: nobody$/m);
  });

  it.skipIf(!isRoot)('remove keeps everything; purge removes what postinst and the service made', () => {
    // The maintainer scripts against a root of the test's own (their paths come from the environment), so the
    // host's /etc/leash, /var/lib/leash and /var/log/leash are never touched.
    const r = path.join(work, 'purge-root');
    const env = {
      LEASH_ETC: path.join(r, 'etc/leash'),
      LEASH_SHARE: path.join(extracted, 'usr/share/leash'),
      LEASH_STATE: path.join(r, 'var/lib/leash'),
      LEASH_LOGS: path.join(r, 'var/log/leash'),
      LEASH_RUN: path.join(r, 'run/leash'),
    };
    const scripts = path.join(work, 'control');
    expect(run(['sh', path.join(scripts, 'postinst'), 'configure'], env).code).toBe(0);
    // What the service and the CLI make at run time.
    for (const [dir, file] of [
      [env.LEASH_STATE, 'ports.json'],
      [path.join(env.LEASH_STATE, 'profiles'), 'p1.yaml'],
      [env.LEASH_LOGS, 'decisions.jsonl'],
      [env.LEASH_LOGS, 'decisions.jsonl.1'],
      [env.LEASH_RUN, 'leash.pid'],
      [env.LEASH_ETC, 'leash.yaml.lock'],
      [env.LEASH_ETC, '.leash.yaml.123.abcd.tmp'],
    ] as const) {
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, file), 'x');
    }
    expect(run(['sh', path.join(scripts, 'postrm'), 'remove'], env).code).toBe(0);
    expect(fs.existsSync(path.join(env.LEASH_ETC, 'leash.yaml'))).toBe(true);
    expect(fs.existsSync(path.join(env.LEASH_STATE, 'ports.json'))).toBe(true);
    expect(run(['sh', path.join(scripts, 'postrm'), 'purge'], env).code).toBe(0);
    for (const p of [env.LEASH_ETC, env.LEASH_STATE, env.LEASH_LOGS, env.LEASH_RUN])
      expect(fs.existsSync(p), p).toBe(false);

    // A file of the operator's own in /etc/leash stays, and so does the directory.
    expect(run(['sh', path.join(scripts, 'postinst'), 'configure'], env).code).toBe(0);
    fs.writeFileSync(path.join(env.LEASH_ETC, 'notes.txt'), 'mine');
    expect(run(['sh', path.join(scripts, 'postrm'), 'purge'], env).code).toBe(0);
    expect(fs.readdirSync(env.LEASH_ETC)).toEqual(['notes.txt']);
  });
});
