/**
 * The floor's fail_mode reaches the planes by push: before each pass the loop hands every surface the reloaded
 * floor's fail_mode (Surface.setFailMode), which the proxy, the DNS forwarder and the watcher answer a subject without
 * a policy under. Nothing in the data plane reads the config back (the layering test's getter check).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { parseConfig } from '../../../../src/control/config/load.js';
import { createLogger } from '../../../../src/log/logger.js';
import type { Driven } from '../../../../src/control/reconcile/execute.js';

const seen = vi.hoisted(() => ({ pushed: [] as string[], applied: 0 }));

// One fake surface instead of the planes: what the loop hands it is what this test checks.
vi.mock('../../../../src/control/reconcile/surfaces/start.js', () => ({
  startSurfaces: async (into: Driven[]) => {
    into.push({
      plane: {
        surface: 'network',
        setFailMode: (m: string) => void seen.pushed.push(m),
        apply: async () => (seen.applied++, new Map()),
        deny: async () => {},
        orphan: async () => {},
        enforcing: () => ({ surface: 'network', subjects: 0, uids: [] }),
        close: async () => {},
      },
      compile: (a) => a,
    });
  },
  closeSurfaces: async () => {},
}));
vi.mock('../../../../src/control/approvals/service.js', () => ({
  startApprovals: async () => ({
    queue: { endSessions: () => {}, ask: async () => null, counts: () => ({}) },
    socketPath: '',
    setSubjects: () => {},
    forget: () => {},
    close: async () => {},
  }),
}));

const { startReconcile } = await import('../../../../src/control/reconcile/loop.js');

describe('the floor fail_mode is pushed down before each pass', () => {
  it('a reload that changes fail_mode hands the new one to every surface, not a getter', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-tpw-'));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    const passwd = path.join(dir, 'passwd');
    fs.writeFileSync(passwd, 'root:x:0:0::/root:/bin/sh\n');
    vi.stubEnv('LEASH_PASSWD', passwd);
    onTestFinished(() => void vi.unstubAllEnvs());
    const load = (failMode: string) =>
      parseConfig(`user: null\nfail_mode: ${failMode}\nlogging: { decisions: stdout }\n`, 'test', {
        lookup: () => null,
      });
    const r = await startReconcile(
      { loaded: load('closed'), decisions: { write: () => 'x' } as never, logger: createLogger({ level: 'silent' }) },
      { stateDir: dir },
    );
    onTestFinished(() => r.close());
    expect(seen.pushed).toEqual([]);
    expect(await r.reload(load('open'))).toEqual([]);
    expect(seen.pushed).toEqual(['open']);
    expect(await r.reload(load('closed'))).toEqual([]);
    expect(seen.pushed).toEqual(['open', 'closed']);
  });
});
