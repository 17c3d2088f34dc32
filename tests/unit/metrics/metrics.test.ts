import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { configSchema } from '../../../src/control/config/schema.js';
import { createDecisionLog, formatDecisionTail } from '../../../src/log/decisions.js';
import {
  countDecisions,
  createMetrics,
  histogramFamily,
  parseMetricsText,
  summarize,
} from '../../../src/metrics/metrics.js';
import { fetchMetrics, startMetricsServer } from '../../../src/metrics/server.js';

const val = (text: string, name: string, labels: Record<string, string> = {}) =>
  parseMetricsText(text)
    .filter((x) => x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v))
    .reduce((a, x) => a + x.value, 0);

function tmp(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-metrics-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

describe('metrics', () => {
  it('sums a family counted here and gathered from another process (the watcher)', async () => {
    const m = createMetrics();
    m.decision({ surface: 'network', action: 'block', reason: 'not_allowed' });
    m.collect(() => [
      {
        name: 'leash_decisions',
        help: 'decisions by surface, action and reason',
        type: 'counter',
        values: [
          { value: 4, labels: { surface: 'filesystem', action: 'block', reason: 'not_allowed' } },
          { value: 2, labels: { surface: 'network', action: 'block', reason: 'not_allowed' } },
        ],
      },
      histogramFamily(
        'leash_watcher_judge_seconds',
        'judge',
        {},
        { bounds: [1e-6, 1e-5], buckets: [1, 2, 3], sum: 1, count: 6 },
      ),
    ]);
    const text = await m.text();
    expect(text.trimEnd().endsWith('# EOF')).toBe(true);
    expect(val(text, 'leash_decisions_total', { surface: 'network' })).toBe(3);
    expect(val(text, 'leash_decisions_total', { surface: 'filesystem' })).toBe(4);
    // Buckets are cumulative, +Inf is the count.
    expect(val(text, 'leash_watcher_judge_seconds_bucket', { le: '0.00001' })).toBe(3);
    expect(val(text, 'leash_watcher_judge_seconds_bucket', { le: '+Inf' })).toBe(6);
  });

  it('leaves out a collector that throws, and keeps the rest', async () => {
    const m = createMetrics();
    m.collect(() => {
      throw new Error('watcher respawning');
    });
    m.collect(() => [
      { name: 'leash_subjects', help: 's', type: 'gauge', values: [{ value: 2, labels: { state: 'active' } }] },
    ]);
    expect(summarize(parseMetricsText(await m.text())).subjects).toEqual({ active: 2 });
  });

  it('counts decisions written whole and as cached tails', () => {
    const m = createMetrics();
    const dir = tmp();
    const log = countDecisions(createDecisionLog({ sink: path.join(dir, 'd.jsonl') }), m);
    onTestFinished(() => log.close());
    const rec = { uid: 1, surface: 'tools' as const, action: 'allow' as const, reason: 'allow_entry', subject: {} };
    log.write(rec);
    const tail = formatDecisionTail(rec);
    log.writeTail('allow', tail);
    log.writeTail('allow', tail);
    return m.text().then((t) => {
      expect(val(t, 'leash_decisions_total', { surface: 'tools', action: 'allow', reason: 'allow_entry' })).toBe(3);
      expect(fs.readFileSync(path.join(dir, 'd.jsonl'), 'utf8').trim().split('\n')).toHaveLength(3);
    });
  });

  it('serves GET /metrics on a 0600 unix socket and a loopback port; 404 and 405 otherwise', async () => {
    const m = createMetrics();
    m.decision({ surface: 'network', action: 'allow', reason: 'allow_entry' });
    const sock = path.join(tmp(), 'metrics.sock');
    const srv = await startMetricsServer(m, { socket: sock, listen: '127.0.0.1:0' });
    onTestFinished(() => srv.close());
    expect(fs.statSync(sock).mode & 0o777).toBe(0o600);
    const text = await fetchMetrics(sock);
    expect(val(text!, 'leash_decisions_total')).toBe(1);
    const req = (method: string, p: string) =>
      new Promise<number>((resolve, reject) =>
        http
          .request({ socketPath: sock, path: p, method }, (res) => {
            res.resume();
            resolve(res.statusCode!);
          })
          .on('error', reject)
          .end(),
      );
    expect(await req('GET', '/')).toBe(404);
    expect(await req('POST', '/metrics')).toBe(405);
    // A second service on the same socket is refused; the first keeps it.
    await expect(startMetricsServer(m, { socket: sock, listen: null })).rejects.toThrow(/in use/);
    expect(await fetchMetrics(sock)).not.toBeNull();
  });

  it('a stale socket file is replaced; a path that is not a socket is refused', async () => {
    const dir = tmp();
    const file = path.join(dir, 'plain');
    fs.writeFileSync(file, 'x');
    await expect(startMetricsServer(createMetrics(), { socket: file, listen: null })).rejects.toThrow(/not a socket/);
    expect(fs.readFileSync(file, 'utf8')).toBe('x');
    expect(await fetchMetrics(path.join(dir, 'none.sock'))).toBeNull();
  });

  it('the config refuses a metrics port on anything but loopback', () => {
    const parse = (listen: string) => configSchema.safeParse({ logging: { metrics_listen: listen } });
    for (const ok of ['127.0.0.1:9464', '[::1]:9464', 'localhost:9464']) expect(parse(ok).success, ok).toBe(true);
    for (const bad of [
      '0.0.0.0:9464',
      '192.168.1.2:9464',
      '[::]:9464',
      'example.com:80',
      '127.0.0.1',
      '127.0.0.1:0x50',
    ])
      expect(parse(bad).success, bad).toBe(false);
  });
});
