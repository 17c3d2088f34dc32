import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package root (holds package.json), from src/ or dist/src/ alike. */
export function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'packaging'))) return dir;
    const up = path.dirname(dir);
    if (up === dir) throw new Error('leash package root not found');
    dir = up;
  }
}

/** The shipped default policy `leash init` starts from. */
export function defaultPolicyPath(): string {
  return path.join(packageRoot(), 'packaging', 'leash.default.yaml');
}
