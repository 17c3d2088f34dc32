import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const repo = path.resolve(__dirname, '../..');

function files(p: string): string[] {
  const st = fs.statSync(p, { throwIfNoEntry: false });
  if (!st) return [];
  if (!st.isDirectory()) return [p];
  return fs
    .readdirSync(p)
    .sort()
    .flatMap((f) => files(path.join(p, f)));
}

/**
 * The .deb built from this checkout by packaging/build-deb.sh (gzip: seconds, not minutes), kept under /var/tmp by
 * the hash of what goes into it, so the suite's files build it once: LEASH_SYSTEMD_DEB names one to use instead.
 */
export function debFromCheckout(prefix: string): string {
  if (process.env.LEASH_SYSTEMD_DEB) return process.env.LEASH_SYSTEMD_DEB;
  const h = crypto.createHash('sha256');
  for (const f of [
    'package.json',
    'package-lock.json',
    'README.md',
    'build/Release/leash_native.node',
    'systemd',
    'packaging',
    'docs',
    'dist/src',
  ].flatMap((p) => files(path.join(repo, p)))) {
    h.update(f);
    h.update(fs.readFileSync(f));
  }
  h.update(fs.readFileSync(process.execPath));
  const key = h.digest('hex').slice(0, 16);
  const dir = `/var/tmp/${prefix}-deb`;
  const deb = path.join(dir, key, 'leash.deb');
  if (fs.existsSync(deb)) return deb;
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(path.join(dir, key), { recursive: true });
  const b = spawnSync('bash', [path.join(repo, 'packaging/build-deb.sh'), path.join(dir, key, 'out')], {
    encoding: 'utf8',
    env: { ...process.env, LEASH_DEB_COMPRESSION: 'gzip' },
    timeout: 600_000,
  });
  if (b.status !== 0) throw new Error(`packaging/build-deb.sh: exit ${b.status}: ${b.stderr}`);
  fs.renameSync(b.stdout.trim().split('\n').pop()!, deb);
  return deb;
}
