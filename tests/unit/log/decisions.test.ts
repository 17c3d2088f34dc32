import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createDecisionLog, formatDecision, newRef } from '../../../src/log/decisions.js';
import { escapeForTerminal } from '../../../src/log/escape.js';
import { createLogger } from '../../../src/log/logger.js';

function tmpDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-log-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

describe('decision log', () => {
  it('writes one JSON line per decision with ts, ref, uid, surface, action, reason, subject', async () => {
    const file = path.join(tmpDir(), 'decisions.jsonl');
    const log = createDecisionLog({ sink: file });
    const r1 = log.write({
      uid: 1001,
      surface: 'network',
      action: 'block',
      reason: 'not_allowed',
      subject: { domain: 'evil.com', ip: '198.18.0.9', port: 443 },
      rule: null,
    });
    const r2 = log.write({
      uid: 1001,
      surface: 'commands',
      action: 'allow',
      reason: 'allow_entry',
      subject: { binary: '/usr/bin/git' },
      rule: 'git',
    });
    await log.close();
    const lines = fs.readFileSync(file, 'utf8').split('\n');
    expect(lines.pop()).toBe('');
    expect(lines).toHaveLength(2);
    const [a, b] = lines.map((l) => JSON.parse(l));
    expect(Object.keys(a)).toEqual(['ts', 'ref', 'uid', 'surface', 'action', 'reason', 'subject', 'rule']);
    expect(a).toMatchObject({
      ref: r1,
      uid: 1001,
      surface: 'network',
      action: 'block',
      reason: 'not_allowed',
      rule: null,
    });
    expect(a.subject).toEqual({ domain: 'evil.com', ip: '198.18.0.9', port: 443 });
    expect(new Date(a.ts).toISOString()).toBe(a.ts);
    expect(b).toMatchObject({ ref: r2, rule: 'git' });
    expect(r1).not.toBe(r2);
  });

  it('refs are 8 base32 characters', () => {
    const refs = new Set(Array.from({ length: 500 }, () => newRef()));
    expect(refs.size).toBe(500);
    for (const r of refs) expect(r).toMatch(/^[a-z2-7]{8}$/);
  });

  it('creates the file 0600 in a 0750 directory and appends', async () => {
    const dir = path.join(tmpDir(), 'var', 'log', 'leash');
    const file = path.join(dir, 'decisions.jsonl');
    const old = process.umask(0o077);
    let l1;
    try {
      l1 = createDecisionLog({ sink: file });
    } finally {
      process.umask(old);
    }
    l1.write({
      uid: 1,
      surface: 'filesystem',
      action: 'block',
      reason: 'deny_entry',
      subject: { path: '/etc/shadow' },
    });
    await l1.close();
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(fs.statSync(dir).mode & 0o777).toBe(0o750);
    fs.chmodSync(file, 0o644);
    const l2 = createDecisionLog({ sink: file });
    l2.write({ uid: 1, surface: 'filesystem', action: 'allow', reason: 'mode_allow', subject: { path: '/tmp/x' } });
    await l2.close();
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(fs.readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(2);
  });

  it('leaves the mode of a sink that is not a regular file alone (a FIFO, like /dev/null)', async () => {
    const fifo = path.join(tmpDir(), 'decisions.fifo');
    execFileSync('mkfifo', ['-m', '0644', fifo]);
    // A reader must exist for the writer's open not to block.
    const reader = fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    try {
      const log = createDecisionLog({ sink: fifo });
      log.write({ uid: 1, surface: 'tools', action: 'block', reason: 'deny_entry', subject: { name: 'x' } });
      await log.close();
      expect(fs.statSync(fifo).mode & 0o777).toBe(0o644);
      const got = Buffer.alloc(4096);
      const n = fs.readSync(reader, got);
      expect(JSON.parse(got.toString('utf8', 0, n))).toMatchObject({ action: 'block', reason: 'deny_entry' });
    } finally {
      fs.closeSync(reader);
    }
  });

  it('a line is on disk as soon as write returns (no buffering to lose in a crash)', () => {
    const file = path.join(tmpDir(), 'd.jsonl');
    const log = createDecisionLog({ sink: file });
    onTestFinished(() => log.close());
    const ref = log.write({ uid: 7, surface: 'tools', action: 'block', reason: 'deny_entry', subject: { name: 'x' } });
    expect(fs.readFileSync(file, 'utf8')).toContain(`"ref":"${ref}"`);
  });

  it('reopen after a rename writes every later line to a new file; held allow lines stay with the old one', async () => {
    const dir = tmpDir();
    const file = path.join(dir, 'd.jsonl');
    const log = createDecisionLog({ sink: file, coalesceAllows: true });
    onTestFinished(() => log.close());
    const rec = (n: number, action: 'allow' | 'block') =>
      ({ uid: 7, surface: 'tools', action, reason: 'deny_entry', subject: { name: `t${n}` } }) as const;
    const before = [log.write(rec(0, 'block')), log.write(rec(1, 'allow'))];
    fs.renameSync(file, `${file}.1`);
    before.push(log.write(rec(2, 'block'))); // renamed but not reopened: still the old file
    const held = log.write(rec(3, 'allow'));
    log.reopen();
    const after = [log.write(rec(4, 'block')), log.write(rec(5, 'allow'))];
    await log.close();
    const refs = (f: string) =>
      fs
        .readFileSync(f, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => (JSON.parse(l) as { ref: string }).ref);
    expect(refs(`${file}.1`)).toEqual([...before, held]);
    expect(refs(file)).toEqual(after);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
  });

  it('a reopen that cannot open the path keeps writing to the old file', async () => {
    const dir = tmpDir();
    const file = path.join(dir, 'logs', 'd.jsonl');
    const log = createDecisionLog({ sink: file });
    onTestFinished(() => log.close());
    fs.renameSync(path.join(dir, 'logs'), path.join(dir, 'gone'));
    fs.writeFileSync(path.join(dir, 'logs'), 'not a directory');
    expect(() => log.reopen()).toThrow(expect.objectContaining({ code: 'EEXIST' }));
    const ref = log.write({ uid: 7, surface: 'tools', action: 'block', reason: 'deny_entry', subject: { name: 'x' } });
    expect(fs.readFileSync(path.join(dir, 'gone', 'd.jsonl'), 'utf8')).toContain(ref);
  });

  it('carries severity when given (critical decisions such as a non-redirected connection)', () => {
    const line = JSON.parse(
      formatDecision({
        uid: 5,
        surface: 'network',
        action: 'block',
        reason: 'no_policy',
        subject: { ip: '127.0.0.1', port: 18443 },
        severity: 'critical',
      }),
    );
    expect(line.severity).toBe('critical');
  });

  it('masks secrets and PII in tool inputs before writing', () => {
    const secret = 'AKIAIOSFODNN7EXAMPLE';
    const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U';
    const line = formatDecision({
      uid: 9,
      surface: 'tools',
      action: 'block',
      reason: 'inspect_secrets',
      subject: { name: 'run', inputs: { cmd: `aws --key ${secret}`, mail: 'alice@example.com', token: jwt } },
    });
    expect(line).not.toContain(secret);
    expect(line).not.toContain('alice@example.com');
    expect(line).not.toContain(jwt);
    expect(JSON.parse(line).subject.name).toBe('run');
  });
});

describe('terminal escaping', () => {
  it.each([
    ['\u001b[31mred', '\\u{1b}[31mred'],
    ['a\u0007b', 'a\\u{7}b'],
    ['tab\there', 'tab\\u{9}here'],
    ['del\u007f', 'del\\u{7f}'],
    ['c1\u009b', 'c1\\u{9b}'],
    ['abc\u202edcba', 'abc\\u{202e}dcba'],
    ['\u202a\u202b\u202c\u202d', '\\u{202a}\\u{202b}\\u{202c}\\u{202d}'],
    ['\u2066x\u2067y\u2068z\u2069', '\\u{2066}x\\u{2067}y\\u{2068}z\\u{2069}'],
    ['\u200e\u200f', '\\u{200e}\\u{200f}'],
    ['plain {"a":"é✓"}', 'plain {"a":"é✓"}'],
  ])('escapes %j', (input, out) => {
    expect(escapeForTerminal(input)).toBe(out);
  });
});

describe('operational logger', () => {
  it('one root, a child per component, JSON lines', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk));
        cb();
      },
    });
    const root = createLogger({ destination: sink, level: 'info' });
    root.child({ component: 'nft' }).info({ uid: 1001 }, 'chain applied');
    root.child({ component: 'proxy' }).debug('not at info');
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({
      service: 'leash',
      component: 'nft',
      uid: 1001,
      msg: 'chain applied',
    });
  });
});
