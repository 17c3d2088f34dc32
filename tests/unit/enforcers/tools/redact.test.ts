import { describe, expect, it } from 'vitest';
import { inspectInputs, mayHoldSecret } from '../../../../src/engine/index.js';
import { fromPlain, parseStrict, stringifyAscii, toPlain, type JsonObject } from '../../../../src/jsonl/json.js';
import { lineMayHoldSecret, redactResponse } from '../../../../src/enforcers/tools/redact.js';

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
});
