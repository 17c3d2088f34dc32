import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './helpers.js';

const root = path.resolve(__dirname, '../..');
const isRoot = process.getuid?.() === 0;
const hasDpkg = spawnSync('dpkg-deb', ['--version']).status === 0 && spawnSync('fakeroot', ['-v']).status === 0;

function run(argv: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(argv[0]!, argv.slice(1), { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe.skipIf(!hasDpkg)('packaging (.deb)', () => {
  let work = '';
  let deb = '';
  let extracted = '';
  beforeAll(() => {
    ensureBuilt();
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-deb-'));
    const b = run(['bash', path.join(root, 'packaging/build-deb.sh'), work]);
    expect(b.code, b.err).toBe(0);
    deb = b.out.trim().split('\n').pop()!;
    extracted = path.join(work, 'root');
    expect(run(['dpkg-deb', '-x', deb, extracted]).code).toBe(0);
    return () => fs.rmSync(work, { recursive: true, force: true });
  }, 180_000);

  it('ships the CLI, the addon, the unit and the default policy, with its runtime dependencies', () => {
    const list = run(['dpkg-deb', '-c', deb]).out;
    for (const f of [
      './usr/bin/leash',
      './lib/systemd/system/leash.service',
      './usr/lib/leash/build/Release/leash_native.node',
      './usr/lib/leash/dist/src/cli/main.js',
      './usr/share/leash/leash.default.yaml',
    ])
      expect(list).toContain(f);
    // Dev dependencies are pruned.
    expect(list).not.toContain('node_modules/vitest/');
    expect(run(['dpkg-deb', '-f', deb, 'Depends']).out).toMatch(/nodejs \(>= 20\), nftables/);
  });

  it('the installed CLI runs from its own tree', () => {
    const r = run([process.execPath, path.join(extracted, 'usr/lib/leash/dist/src/cli/main.js'), '--version']);
    expect(r.code, r.err).toBe(0);
    expect(r.out.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it.skipIf(!isRoot)('postinst states 0640 root:<user group> on install and re-states it on upgrade', () => {
    const etc = path.join(work, 'etc-leash');
    const env = { LEASH_ETC: etc, LEASH_SHARE: path.join(extracted, 'usr/share/leash') };
    const postinst = path.join(extracted, '..', 'postinst');
    expect(run(['dpkg-deb', '-e', deb, path.dirname(postinst)]).code).toBe(0);
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
});
