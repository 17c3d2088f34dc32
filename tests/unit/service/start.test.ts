import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createLogger } from '../../../src/log/logger.js';
import { startService, type EnforcerFactory } from '../../../src/service/start.js';

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
