import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeashError } from './errors.js';

/** The service's gate socket: `leash mcp` and `leash terminal` ask it for their subject's policy. */
export const DEFAULT_TOOLS_SOCKET = '/run/leash/tools.sock';

/** The package root (the directory holding Leash's package.json), from src/ or dist/src/ alike. */
export function packageRoot(): string | null {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pj = path.join(dir, 'package.json');
    try {
      if ((JSON.parse(fs.readFileSync(pj, 'utf8')) as { name?: string }).name === 'leash') return dir;
    } catch {
      /* not here */
    }
    const up = path.dirname(dir);
    if (up === dir) return null;
    dir = up;
  }
}

/**
 * The shipped default policy `leash init` starts from: $LEASH_DEFAULT_POLICY, the checkout's
 * packaging/leash.default.yaml, or where the .deb installs it (/usr/share/leash).
 */
export function defaultPolicyPath(): string {
  const root = packageRoot();
  const candidates = [
    process.env.LEASH_DEFAULT_POLICY,
    root ? path.join(root, 'packaging', 'leash.default.yaml') : undefined,
    '/usr/share/leash/leash.default.yaml',
  ].filter((p): p is string => !!p);
  for (const p of candidates) if (fs.existsSync(p)) return p;
  throw new LeashError(
    'default_policy_missing',
    `the shipped default policy is missing (looked in ${candidates.join(', ')})`,
    {
      candidates,
    },
  );
}
