import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createLogger } from '../../../../src/log/logger.js';
import { startService, type EnforcerFactory } from '../../../../src/control/daemon/start.js';

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

function fake(name: string, events: string[], opts: { enabled?: boolean; failStart?: boolean } = {}): EnforcerFactory {
  return {
    name,
    enabled: (l) => opts.enabled ?? (name === 'tools' ? l.config.enforcers.tools : true),
    async start(ctx) {
      if (opts.failStart) throw new Error(`${name} cannot bind`);
      events.push(`start ${name} ${ctx.loaded.config.fail_mode}`);
      return {
        name,
        async reload(next) {
          events.push(`reload ${name} ${next.loaded.config.fail_mode}`);
        },
        async close() {
          events.push(`close ${name}`);
        },
      };
    },
  };
}

describe('service start', () => {
  it('starts enabled enforcers in order, reports READY=1, closes them in reverse on stop', async () => {
    const s = setup(CONFIG);
    const events: string[] = [];
    const svc = await startService({
      configPath: s.file,
      logger: s.logger,
      notify: s.notify,
      enforcers: [fake('network', events), fake('tools', events), fake('filesystem', events)],
    });
    expect(events).toEqual(['start network closed', 'start filesystem closed']);
    expect(s.notes[0]).toMatch(
      /^READY=1\nSTATUS=no configured user \(leash-\* agent accounts only\): .*enforcers running: network, filesystem$/,
    );
    await svc.stop();
    await svc.stopped;
    expect(events.slice(2)).toEqual(['close filesystem', 'close network']);
    expect(s.notes).toContain('STOPPING=1');
    expect(fs.statSync(path.join(s.dir, 'decisions.jsonl')).mode & 0o777).toBe(0o600);
  });

  it('an enforcer that fails to start closes those already started: service_failed', async () => {
    const s = setup(CONFIG);
    const events: string[] = [];
    const err = await startService({
      configPath: s.file,
      logger: s.logger,
      notify: s.notify,
      enforcers: [fake('network', events), fake('filesystem', events, { failStart: true })],
    }).catch((e) => e);
    expect(err.code).toBe('service_failed');
    expect(events).toEqual(['start network closed', 'close network']);
    expect(s.notes).toEqual([]);
  });

  it('reload hands a validated config to each enforcer; a refused one keeps the old policy', async () => {
    const s = setup(CONFIG);
    const events: string[] = [];
    const svc = await startService({
      configPath: s.file,
      logger: s.logger,
      notify: s.notify,
      enforcers: [fake('network', events)],
    });
    onTestFinished(() => svc.stop());
    fs.writeFileSync(s.file, 'network: { mode: greylist }\n');
    await svc.reload();
    expect(events).toEqual(['start network closed']);
    expect(s.lines.some((l) => l.code === 'config_invalid' && l.level === 50)).toBe(true);
    fs.writeFileSync(s.file, CONFIG.replace('$LOG', path.join(s.dir, 'decisions.jsonl')) + 'fail_mode: open\n');
    await svc.reload();
    expect(events).toEqual(['start network closed', 'reload network open']);
    expect(s.notes.filter((n) => n.startsWith('READY=1'))).toHaveLength(2);
  });

  it('refuses a config whose user does not exist (user_unknown)', async () => {
    const s = setup('user: leash-tno-such-account\nlogging: { decisions: stdout }\n');
    const err = await startService({ configPath: s.file, logger: s.logger, notify: s.notify, enforcers: [] }).catch(
      (e) => e,
    );
    expect(err.code).toBe('user_unknown');
  });

  it('logs every finding at startup with its code', async () => {
    const s = setup('user: null\nnetwork: { mode: blacklist, allow: [a.com] }\nlogging: { decisions: stdout }\n');
    const svc = await startService({ configPath: s.file, logger: s.logger, notify: s.notify, enforcers: [] });
    await svc.stop();
    const codes = s.lines.filter((l) => l.component === 'service' && l.code).map((l) => l.code);
    expect(codes).toEqual(['blacklist_allow_ignored', 'user_unset']);
  });
});

describe('service start: host settings (config host, against files of the test: never the real sysctl)', () => {
  const HOSTCFG =
    'user: null\nlogging: { decisions: $LOG }\nenforcers: { tools: false }\nhost: { memfd_noexec: true }\n';

  it('applies host.memfd_noexec before the enforcers start and restores it after they closed', async () => {
    const s = setup(HOSTCFG);
    const sysctl = path.join(s.dir, 'memfd_noexec');
    const stateFile = path.join(s.dir, 'run', 'host-settings.json');
    fs.writeFileSync(sysctl, '0\n');
    const seen: string[] = [];
    const probe: EnforcerFactory = {
      name: 'probe',
      enabled: () => true,
      async start() {
        seen.push(`start ${fs.readFileSync(sysctl, 'utf8').trim()}`);
        return {
          name: 'probe',
          async close() {
            seen.push(`close ${fs.readFileSync(sysctl, 'utf8').trim()}`);
          },
        };
      },
    };
    const svc = await startService({
      configPath: s.file,
      logger: s.logger,
      notify: s.notify,
      enforcers: [probe],
      hostPaths: { memfdNoexec: sysctl, stateFile },
    });
    expect(fs.readFileSync(sysctl, 'utf8').trim()).toBe('2');
    await svc.stop();
    expect(seen).toEqual(['start 2', 'close 2']);
    expect(fs.readFileSync(sysctl, 'utf8').trim()).toBe('0');
    expect(fs.existsSync(stateFile)).toBe(false);
  });

  it('does not start without kernel support (host_setting_failed) and starts no enforcer', async () => {
    const s = setup(HOSTCFG);
    const events: string[] = [];
    await expect(
      startService({
        configPath: s.file,
        logger: s.logger,
        notify: s.notify,
        enforcers: [fake('network', events)],
        hostPaths: { memfdNoexec: path.join(s.dir, 'absent'), stateFile: path.join(s.dir, 'state.json') },
      }),
    ).rejects.toMatchObject({ code: 'host_setting_failed' });
    expect(events).toEqual([]);
  });

  it('restores when an enforcer fails to start', async () => {
    const s = setup(HOSTCFG);
    const sysctl = path.join(s.dir, 'memfd_noexec');
    fs.writeFileSync(sysctl, '1\n');
    await expect(
      startService({
        configPath: s.file,
        logger: s.logger,
        notify: s.notify,
        enforcers: [fake('network', [], { failStart: true })],
        hostPaths: { memfdNoexec: sysctl, stateFile: path.join(s.dir, 'state.json') },
      }),
    ).rejects.toMatchObject({ code: 'service_failed' });
    expect(fs.readFileSync(sysctl, 'utf8').trim()).toBe('1');
  });
});
