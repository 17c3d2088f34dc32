/**
 * The console's TCP port and TLS: a non-loopback `console.listen` is refused by the config unless `console.tls`
 * is set, and with `console.tls` the port speaks HTTPS only (a plain HTTP request gets no HTTP answer), still
 * behind the token; the client verifies the certificate (a throw-away self-signed one for 127.0.0.1 made by
 * openssl for the test, given to the client as its only CA).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLeashError } from '../../../../src/errors.js';
import { loadConfig } from '../../../../src/control/config/load.js';
import { startConsole, type ConsoleServer } from '../../../../src/control/console/server.js';
import type { ApprovalsPort } from '../../../../src/control/console/approvals.js';

let dir: string;
let cert: string;
let key: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-console-tls-'));
  cert = path.join(dir, 'cert.pem');
  key = path.join(dir, 'key.pem');
  makeCert();
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function makeCert(): void {
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      key,
      '-out',
      cert,
    ],
    { stdio: 'ignore' },
  );
}

/** The config's refusal for a console section, or null when it loads. */
function refusal(consoleYaml: string): { code: string; issues: string } | null {
  const f = path.join(dir, `leash-${Math.random().toString(36).slice(2)}.yaml`);
  fs.writeFileSync(f, `user: null\nlogging: { decisions: ${dir}/d.jsonl }\nconsole: ${consoleYaml}\n`);
  try {
    loadConfig(f);
    return null;
  } catch (e) {
    if (!isLeashError(e)) throw e;
    return { code: e.code, issues: JSON.stringify(e.details ?? {}) };
  }
}

describe('console.listen and console.tls in the config', () => {
  it('a non-loopback address without tls is refused (config_invalid naming console.listen)', () => {
    for (const listen of ['0.0.0.0:8443', '198.18.0.1:8443', '[::]:8443', '[2001:db8::1]:8443']) {
      const r = refusal(`{ listen: "${listen}" }`);
      expect(r, listen).not.toBeNull();
      expect(r!.code).toBe('config_invalid');
      expect(r!.issues).toContain('console.tls');
    }
  });

  it('a loopback address loads without tls; a non-loopback one loads with tls', () => {
    expect(refusal(`{ listen: "127.0.0.1:8443" }`)).toBeNull();
    expect(refusal(`{ listen: "[::1]:8443" }`)).toBeNull();
    expect(refusal(`{ listen: "0.0.0.0:8443", tls: { cert: ${cert}, key: ${key} } }`)).toBeNull();
  });
});

describe('console over TLS', () => {
  let srv: ConsoleServer;
  const approvals: ApprovalsPort = {
    list: async () => [],
    decide: async () => {
      throw new Error('not used');
    },
    subscribe: () => () => {},
    close: () => {},
  } as unknown as ApprovalsPort;

  beforeAll(async () => {
    fs.writeFileSync(path.join(dir, 'leash.yaml'), `user: null\nlogging: { decisions: ${dir}/d.jsonl }\n`);
    fs.writeFileSync(path.join(dir, 'passwd'), 'root:x:0:0::/:/bin/sh\n');
    fs.writeFileSync(path.join(dir, 'd.jsonl'), '');
    const config = loadConfig(path.join(dir, 'leash.yaml')).config;
    srv = await startConsole({
      config: () => config,
      stateDir: path.join(dir, 'state'),
      passwd: { path: path.join(dir, 'passwd') },
      metricsSocket: null,
      approvals,
      decisionsPath: path.join(dir, 'd.jsonl'),
      socket: null,
      listen: '127.0.0.1:0',
      tls: { cert, key },
      isSubject: () => false,
      operatorUid: () => null,
    });
  });
  afterAll(async () => {
    await srv?.close();
  });

  const get = (p: string, headers: Record<string, string> = {}): Promise<number> =>
    new Promise((resolve, reject) => {
      const r = https.request(
        { host: '127.0.0.1', port: srv.port!, path: p, headers, ca: fs.readFileSync(cert) },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode!));
        },
      );
      r.on('error', reject);
      r.end();
    });

  it('prints an https URL, and answers HTTPS behind the token (401 without it, 200 with it)', async () => {
    expect(srv.url).toBe(`https://127.0.0.1:${srv.port}/#token=${srv.token}`);
    expect(await get('/api/subjects')).toBe(401);
    expect(await get('/api/subjects', { authorization: `Bearer ${srv.token}` })).toBe(200);
  });

  it('a plain HTTP request to the TLS port gets no HTTP answer', async () => {
    const outcome = await new Promise<string>((resolve) => {
      const r = http.request(
        {
          host: '127.0.0.1',
          port: srv.port!,
          path: '/api/subjects',
          headers: { authorization: `Bearer ${srv.token}` },
        },
        (res) => {
          res.resume();
          resolve(`status ${res.statusCode}`);
        },
      );
      r.on('error', (e) => resolve(`error ${(e as NodeJS.ErrnoException).code ?? e.message}`));
      r.setTimeout(5000, () => r.destroy(new Error('timeout')));
      r.end();
    });
    expect(outcome.startsWith('error'), outcome).toBe(true);
  });
});
