/**
 * The lab for vitest: `const lab = useLab('net1')` builds it in beforeAll and tears it down in afterAll (teardown
 * also runs when building fails half-way). Root only; callers wrap their describe in `describe.skipIf(!isRoot)`.
 */
import { afterAll, beforeAll } from 'vitest';
import { buildLab, type Lab, type LabOptions } from './netns.js';
import { nativeAvailable } from '../../src/native.js';
import { hostRunner } from '../../src/dataplane/network/nft/run.js';

export * from './netns.js';
export { netPolicy } from './policy.js';

export const isRoot = process.getuid?.() === 0;
export const canRunLab = isRoot && nativeAvailable();

export function useLab(id: string, opts: Omit<LabOptions, 'id' | 'cleanups'> = {}): { get: () => Lab } {
  let lab: Lab | null = null;
  beforeAll(async () => {
    lab = await buildLab({ ...opts, id: `net${id}` });
  }, 60_000);
  afterAll(async () => {
    if (!lab) return;
    const problems = await lab.teardown();
    if (problems.length) throw new Error(`lab teardown: ${problems.join('; ')}`);
  }, 60_000);
  return {
    get: () => {
      if (!lab) throw new Error('lab not built');
      return lab;
    },
  };
}

/** Makes a bare namespace (no lab) for nft-only tests; removed by the returned cleanup. */
export async function bareNetns(name: string): Promise<() => Promise<void>> {
  const host = hostRunner();
  await host(['ip', 'netns', 'del', name]);
  const r = await host(['ip', 'netns', 'add', name]);
  if (r.code !== 0) throw new Error(r.stderr);
  return async () => {
    await host(['ip', 'netns', 'del', name]);
  };
}

/**
 * Waits (up to 15 s) until a started `leash` service has logged `ready` on stderr (and `also()` holds, e.g. its pid
 * file exists); throws with what it said when it exits first or never gets there.
 */
export async function waitForServiceReady(
  child: import('node:child_process').ChildProcess,
  stderr: () => string,
  also: () => boolean = () => true,
): Promise<void> {
  for (let i = 0; i < 300 && !(stderr().includes('"msg":"ready"') && also()); i++) {
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  if (!stderr().includes('"msg":"ready"')) throw new Error(`service not ready:\n${stderr()}`);
}
