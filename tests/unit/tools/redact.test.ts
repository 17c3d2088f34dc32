import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { maskKeyBodies } from '../../../src/tools/judge/keybody.js';
import { inspectInputs, mayHoldSecret, SECRET_LITERALS } from '../../../src/engine/index.js';
import { fromPlain, parseStrict, stringifyAscii, toPlain, type JsonObject } from '../../../src/formats/json.js';
import { lineMayHoldSecret, lineMayHoldSecretJs, redactResponse } from '../../../src/tools/judge/redact.js';
import { loadNative } from '../../../src/native.js';

// One sample per secret detector of the engine (the set input inspection runs).
const SAMPLES: Record<string, string> = {
  private_key: '-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n-----END RSA PRIVATE KEY-----',
  aws_access_key: 'AKIAIOSFODNN7EXAMPLQ',
  github_token: 'ghp_' + 'a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8',
  gitlab_token: 'glpat-' + 'x'.repeat(20),
  slack_token: 'xoxb-1234567890-abcdefghij',
  slack_webhook: 'https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXX',
  stripe_key: 'sk_live_' + '4eC39HqLyjWDarjtT1zdp7dc',
  anthropic_key: 'sk-ant-' + 'a'.repeat(40),
  openai_key: 'sk-' + 'aB3'.repeat(16),
  google_api_key: 'AIza' + 'B'.repeat(35),
  npm_token: 'npm_' + 'a'.repeat(36),
  huggingface_token: 'hf_' + 'a'.repeat(34),
  jwt: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U',
  bearer_token: 'Authorization: Bearer abcdefghijklmnopqrstuvwx',
  url_credentials: 'postgres://admin:hunter2hunter2@db.internal:5432/x',
  credential_assignment: 'export DB_PASSWORD="s3cr3t-value-1234"',
};

const FINDS = { secrets: 'block', pii: 'allow', priv_esc: 'allow' } as const;

describe('output redaction', () => {
  it.each(Object.entries(SAMPLES))('%s: masked in a result, and the pre-check never misses it', (id, secret) => {
    // The sample is a secret by the input detectors (one set, not a second).
    expect(inspectInputs({ t: `see ${secret} here` }, FINDS).length, id).toBeGreaterThan(0);
    const v = fromPlain({
      jsonrpc: '2.0',
      id: 1,
      result: { content: [{ type: 'text', text: `line 1\nsee ${secret} here` }], structuredContent: { out: secret } },
    }) as JsonObject;
    const line = Buffer.from(stringifyAscii(v));
    expect(lineMayHoldSecret(line)).toBe(true);
    expect(redactResponse(v)).toBe(true);
    const out = stringifyAscii(v);
    // What made it a secret is gone: its last characters (masks keep at most a short prefix).
    const core: Record<string, string> = { private_key: 'MIIEowIBAAKCAQEA7', url_credentials: 'hunter2hunter2' };
    expect(out).not.toContain(core[id] ?? secret.slice(-8));
    expect(out).toContain('****');
  });

  it('masks sensitively named structured fields and error messages; leaves binary data alone', () => {
    const v = fromPlain({
      jsonrpc: '2.0',
      id: 2,
      result: {
        content: [{ type: 'image', data: 'AKIAIOSFODNN7EXAMPLQ', mimeType: 'image/png' }],
        structuredContent: { api_key: 'plainvalue99', note: 'fine' },
      },
    }) as JsonObject;
    redactResponse(v);
    const r = toPlain(v) as { result: { content: { data: string }[]; structuredContent: Record<string, string> } };
    expect(r.result.content[0]!.data).toBe('AKIAIOSFODNN7EXAMPLQ');
    expect(r.result.structuredContent.api_key).not.toBe('plainvalue99');
    expect(r.result.structuredContent.note).toBe('fine');
    const e = fromPlain({
      jsonrpc: '2.0',
      id: 3,
      error: { code: -1, message: `bad ${SAMPLES.github_token}` },
    }) as JsonObject;
    redactResponse(e);
    expect(stringifyAscii(e)).not.toContain(SAMPLES.github_token);
  });

  it('keeps big integers and floats exact', () => {
    const v = parseStrict(
      Buffer.from('{"jsonrpc":"2.0","id":1,"result":{"n":12345678901234567890,"f":1.0,"t":"token=abcd1234efgh"}}'),
    ) as JsonObject;
    redactResponse(v);
    expect(stringifyAscii(v)).toMatch(
      /^\{"jsonrpc":"2.0","id":1,"result":\{"n":12345678901234567890,"f":1.0,"t":"token=\*\*\*\*"\}\}$/,
    );
  });

  it('lets a plain answer through without reading it', () => {
    expect(
      mayHoldSecret('{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}],"isError":false}}'),
    ).toBe(false);
  });

  it('the native pre-check answers as the JavaScript one, byte for byte', () => {
    // It is the one the gate runs (native/tools/literals.cc); the JavaScript form is the definition.
    expect(lineMayHoldSecret).not.toBe(lineMayHoldSecretJs);
    let seed = 0x2545f491;
    const rnd = (n: number) => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) % n;
    };
    const flipCase = (t: string) => [...t].map((c) => (rnd(2) ? c.toUpperCase() : c)).join('');
    // Bytes near the literals: their letters in both cases, their prefixes cut short, other bytes.
    const alphabet = [...new Set([...SECRET_LITERALS.join(''), ...SECRET_LITERALS.join('').toUpperCase()])];
    let hits = 0;
    for (let i = 0; i < 20000; i++) {
      const parts: string[] = [];
      for (let k = rnd(6); k >= 0; k--) {
        const lit = SECRET_LITERALS[rnd(SECRET_LITERALS.length)]!;
        const r = rnd(5);
        if (r === 0) parts.push(flipCase(lit));
        else if (r === 1)
          parts.push(flipCase(lit.slice(0, 1 + rnd(lit.length - 1)))); // a prefix, one short at most
        else if (r === 2) parts.push(String.fromCharCode(rnd(256)));
        else parts.push(alphabet[rnd(alphabet.length)]!);
      }
      const line = Buffer.from(parts.join(''), 'latin1');
      const want = lineMayHoldSecretJs(line);
      if (want) hits++;
      expect(lineMayHoldSecret(line), JSON.stringify(line.toString('latin1'))).toBe(want);
    }
    // Both answers occur often enough to mean something.
    expect(hits).toBeGreaterThan(2000);
    expect(hits).toBeLessThan(18000);
    // Edges: empty, one byte, a literal at the very end or cut by the end.
    for (const t of ['', 'g', 'gh', 'xgh', 'G', 'GH', '-----BEGI', 'x-----BEGIN', 'credentia', 'CREDENTIAL']) {
      const b = Buffer.from(t, 'latin1');
      expect(lineMayHoldSecret(b), t).toBe(lineMayHoldSecretJs(b));
    }
  });

  it('the native finder refuses literals it cannot search for', () => {
    const addon = loadNative();
    expect(() => addon.createLiteralFinder([])).toThrow(/1 to 256 literals/);
    expect(() => addon.createLiteralFinder(['a'])).toThrow(/literal 0 is not 2 to 64 bytes/);
    expect(() => addon.createLiteralFinder(['ok', 'é!'])).toThrow(/literal 1 is not ASCII/);
    expect(() => addon.createLiteralFinder(['ok', 3 as unknown as string])).toThrow(/literal 1 is not a string/);
    const has = addon.createLiteralFinder(['Ab', 'xyz']);
    expect(has(Buffer.from('..aB..'))).toBe(1);
    expect(has(Buffer.from('..xy..'))).toBe(0);
    expect(() => has('str' as unknown as Buffer)).toThrow(/has\(buf: Buffer\)/);
  });

  it('a key body without its BEGIN line is masked, and the pre-check sends such answers to be read (#38)', () => {
    const pem = generateKeyPairSync('rsa', {
      modulusLength: 2048,
      privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
      publicKeyEncoding: { type: 'spki', format: 'pem' },
    }).privateKey;
    const lines = pem.trimEnd().split('\n');
    const body = lines.slice(1, -1);
    const diff = [
      '@@ -20,4 +20,4 @@',
      ...lines.slice(-4, -1).map((l) => ` ${l}`),
      ` ${lines.at(-1)}`,
      '-trailer',
      '+trailer 2',
    ];
    const ssh = ['b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW', 'QyNTUxOQAAACD'];
    const forms: [string, string][] = [
      ['tail', lines.slice(-3).join('\n')],
      ['diff context', diff.join('\n')],
      ['openssh first body line', ssh.join('\n')],
    ];
    for (const [what, text] of forms) {
      const v = fromPlain({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text }] } }) as JsonObject;
      expect(lineMayHoldSecret(Buffer.from(stringifyAscii(v))), what).toBe(true);
      expect(redactResponse(v), what).toBe(true);
      const out = stringifyAscii(v);
      for (const l of [...body, ssh[0]!]) expect(out, what).not.toContain(l);
    }
    // Two full-width lines from the middle of a key, no END: masked when read (the pre-check has no literal for it).
    expect(maskKeyBodies(body.slice(3, 5).join('\n'))).toBe('****\n****');
    // A body line may start with '+' (one in 64), which also reads as a diff's added line: still a full-width line.
    const plus = `+${body[3]!.slice(1)}`;
    expect(maskKeyBodies(`${plus}\n${body[4]}`)).toBe('****\n****');
    expect(maskKeyBodies(`${body[3]}\n${plus}`)).toBe('****\n****');
    // Prose and a single hash are left alone.
    const prose = 'commit 0123456789abcdef0123456789abcdef01234567\nAuthor: someone';
    expect(maskKeyBodies(prose)).toBe(prose);
  });

  it('a base64 payload that is text is decoded, masked and encoded again; binary stays as it came', () => {
    const secret = 'ghp_' + 'a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8';
    const blob = Buffer.from(`token: ${secret}\n`).toString('base64');
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 3, 0xff, 0xfe]).toString('base64');
    const v = fromPlain({
      jsonrpc: '2.0',
      id: 3,
      result: {
        content: [
          { type: 'resource', resource: { uri: 'file:///x', mimeType: 'application/octet-stream', blob } },
          { type: 'image', data: png, mimeType: 'image/png' },
        ],
      },
    }) as JsonObject;
    expect(lineMayHoldSecret(Buffer.from(stringifyAscii(v)))).toBe(true);
    expect(redactResponse(v)).toBe(true);
    const r = toPlain(v) as { result: { content: [{ resource: { blob: string } }, { data: string }] } };
    const text = Buffer.from(r.result.content[0].resource.blob, 'base64').toString('utf8');
    expect(text).not.toContain(secret);
    expect(text).toContain('****');
    expect(r.result.content[1].data).toBe(png);
  });
});
