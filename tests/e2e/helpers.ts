import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { onTestFinished } from 'vitest';

export const root = path.resolve(import.meta.dirname, '..', '..');
export const CLI = path.join(root, 'dist', 'src', 'cli', 'main.js');

function newest(dir: string): number {
  let m = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    m = Math.max(m, e.isDirectory() ? newest(p) : fs.statSync(p).mtimeMs);
  }
  return m;
}

/** Builds dist/ when it is missing or older than src/ (the e2e tests run the BUILT CLI). */
export function ensureBuilt(): void {
  const built = fs.existsSync(CLI) ? fs.statSync(CLI).mtimeMs : 0;
  if (built < newest(path.join(root, 'src'))) {
    execFileSync('npm', ['run', 'build'], { cwd: root, stdio: 'ignore' });
  }
}

export interface Result {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function leash(
  args: string[],
  opts: { env?: Record<string, string | undefined>; input?: string } = {},
): Promise<Result> {
  return new Promise((resolve, reject) => {
    // Never signal a real leash.service on the host running the tests.
    const env: Record<string, string | undefined> = {
      ...process.env,
      LEASH_SYSTEMCTL: '/nonexistent/systemctl',
      ...opts.env,
    };
    for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
    const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
    child.stdin.end(opts.input ?? '');
  });
}

/** A temp dir removed after the test. */
export function tmpDir(prefix = 'leash-e2e-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A config file with `text` in a temp dir. */
export function configFile(text: string): string {
  const file = path.join(tmpDir(), 'leash.yaml');
  fs.writeFileSync(file, text);
  return file;
}
