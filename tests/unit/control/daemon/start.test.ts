import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { createLogger } from '../../../../src/log/logger.js';
import { startService } from '../../../../src/control/daemon/start.js';
import type { ServiceContext } from '../../../../src/control/reconcile/loop.js';

// The reconcile the service starts, replaced by a probe: what the service does around it (order, host settings,
// reload, stop) is what these tests check; the reconcile itself has tests of its own.
const probe = vi.hoisted(() => ({
  events: [] as string[],
  failStart: false,
  onStart: null as (() => void) | null,
  onClose: null as (() => void) | null,
}));
vi.mock('../../../../src/control/reconcile/loop.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../../../src/control/reconcile/loop.js')>();
  return {
    ...real,
    startReconcile: async (ctx: ServiceContext) => {
      if (probe.failStart) throw new Error('agents cannot bind');
      probe.onStart?.();
      probe.events.push(`start ${ctx.loaded.config.fail_mode}`);
      return {
        name: 'agents',
        async reload(next: { config: { fail_mode: string } }) {
          probe.events.push(`reload ${next.config.fail_mode}`);
          return [];
        },
        async reopenLogs() {},
        confined: () => ({}),
        async close() {
          probe.onClose?.();
          probe.events.push('close');
        },
      };
    },
  };
});

// The metrics socket of the test's own, never the host's /run/leash/metrics.sock (a running service or another
// test holding that one made this file's starts log metrics_unavailable).
const metricsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-svc-metrics-'));
afterAll(() => fs.rmSync(metricsDir, { recursive: true, force: true }));

beforeEach(() => {
  vi.stubEnv('LEASH_METRICS_SOCKET', path.join(metricsDir, 'metrics.sock'));
  probe.events = [];
  probe.failStart = false;
  probe.onStart = null;
  probe.onClose = null;
});

function setup(text: string) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-svc-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'leash.yaml');
  fs.writeFileSync(file, text.replace('$LOG', path.join(dir, 'decisions.jsonl')));
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger({
    destination: new Writable({
      write(c, _e, cb) {
        lines.push(JSON.parse(String(c)));
        cb();
      },
    }),
  });
  const notes: string[] = [];
  return { file, dir, logger, lines, notes, notify: (s: string) => void notes.push(s) };
}

const CONFIG = 'user: null\nlogging: { decisions: $LOG }\nenforcers: { tools: false }\n';

describe('service start', () => {
  it('starts the reconcile, reports READY=1, closes it on stop', async () => {
    const s = setup(CONFIG);
    const svc = await startService({ configPath: s.file, logger: s.logger, notify: s.notify });
    expect(probe.events).toEqual(['start closed']);
    expect(s.notes[0]).toMatch(
      /^READY=1\nSTATUS=no configured user \(leash-\* agent accounts only\): .*enforcers running: agents$/,
    );
    await svc.stop();
    await svc.stopped;
    expect(probe.events.slice(1)).toEqual(['close']);
    expect(s.notes).toContain('STOPPING=1');
    expect(fs.statSync(path.join(s.dir, 'decisions.jsonl')).mode & 0o777).toBe(0o600);
  });

  it('runs no reconcile when every enforcer is off', async () => {
    const s = setup(
      'user: null\nlogging: { decisions: $LOG }\nenforcers: { network: false, filesystem: false, tools: false }\n',
    );
    const svc = await startService({ configPath: s.file, logger: s.logger, notify: s.notify });
    expect(probe.events).toEqual([]);
    expect(s.notes[0]).toMatch(/enforcers running: none$/);
    await svc.stop();
  });

  it('a reconcile that fails to start is service_failed, and nothing is reported ready', async () => {
    const s = setup(CONFIG);
    probe.failStart = true;
    const err = await startService({ configPath: s.file, logger: s.logger, notify: s.notify }).catch((e) => e);
    expect(err.code).toBe('service_failed');
    expect(probe.events).toEqual([]);
    expect(s.notes).toEqual([]);
  });

  it('reload hands a validated config to the reconcile; a refused one keeps the old policy', async () => {
    const s = setup(CONFIG);
    const events = probe.events;
    const svc = await startService({ configPath: s.file, logger: s.logger, notify: s.notify });
    onTestFinished(() => svc.stop());
    fs.writeFileSync(s.file, 'network: { mode: greylist }\n');
    await svc.reload();
    expect(events).toEqual(['start closed']);
    expect(s.lines.some((l) => l.code === 'config_invalid' && l.level === 50)).toBe(true);
    fs.writeFileSync(s.file, CONFIG.replace('$LOG', path.join(s.dir, 'decisions.jsonl')) + 'fail_mode: open\n');
    await svc.reload();
    expect(events).toEqual(['start closed', 'reload open']);
    expect(s.notes.filter((n) => n.startsWith('READY=1'))).toHaveLength(2);
  });

  it('refuses a config whose user does not exist (user_unknown)', async () => {
    const s = setup('user: leash-tno-such-account\nlogging: { decisions: stdout }\n');
    const err = await startService({ configPath: s.file, logger: s.logger, notify: s.notify }).catch((e) => e);
    expect(err.code).toBe('user_unknown');
  });

  it('logs every finding at startup with its code', async () => {
    const s = setup('user: null\nnetwork: { mode: blacklist, allow: [a.com] }\nlogging: { decisions: stdout }\n');
    const svc = await startService({ configPath: s.file, logger: s.logger, notify: s.notify });
    await svc.stop();
    const codes = s.lines.filter((l) => l.component === 'service' && l.code).map((l) => l.code);
    expect(codes).toEqual(['blacklist_allow_ignored', 'user_unset']);
  });
});

describe('service start: host settings (config host, against files of the test: never the real sysctl)', () => {
  const HOSTCFG =
    'user: null\nlogging: { decisions: $LOG }\nenforcers: { tools: false }\nhost: { memfd_noexec: true }\n';

  it('applies host.memfd_noexec before the reconcile starts and restores it after it closed', async () => {
    const s = setup(HOSTCFG);
    const sysctl = path.join(s.dir, 'memfd_noexec');
    const stateFile = path.join(s.dir, 'run', 'host-settings.json');
    fs.writeFileSync(sysctl, '0\n');
    const seen: string[] = [];
    probe.onStart = () => seen.push(`start ${fs.readFileSync(sysctl, 'utf8').trim()}`);
    probe.onClose = () => seen.push(`close ${fs.readFileSync(sysctl, 'utf8').trim()}`);
    const svc = await startService({
      configPath: s.file,
      logger: s.logger,
      notify: s.notify,
      hostPaths: { memfdNoexec: sysctl, stateFile },
    });
    expect(fs.readFileSync(sysctl, 'utf8').trim()).toBe('2');
    await svc.stop();
    expect(seen).toEqual(['start 2', 'close 2']);
    expect(fs.readFileSync(sysctl, 'utf8').trim()).toBe('0');
    expect(fs.existsSync(stateFile)).toBe(false);
  });

  it('does not start without kernel support (host_setting_failed) and starts no reconcile', async () => {
    const s = setup(HOSTCFG);
    const events = probe.events;
    await expect(
      startService({
        configPath: s.file,
        logger: s.logger,
        notify: s.notify,
        hostPaths: { memfdNoexec: path.join(s.dir, 'absent'), stateFile: path.join(s.dir, 'state.json') },
      }),
    ).rejects.toMatchObject({ code: 'host_setting_failed' });
    expect(events).toEqual([]);
  });

  it('restores when the reconcile fails to start', async () => {
    const s = setup(HOSTCFG);
    const sysctl = path.join(s.dir, 'memfd_noexec');
    fs.writeFileSync(sysctl, '1\n');
    probe.failStart = true;
    await expect(
      startService({
        configPath: s.file,
        logger: s.logger,
        notify: s.notify,
        hostPaths: { memfdNoexec: sysctl, stateFile: path.join(s.dir, 'state.json') },
      }),
    ).rejects.toMatchObject({ code: 'service_failed' });
    expect(fs.readFileSync(sysctl, 'utf8').trim()).toBe('1');
  });
});
