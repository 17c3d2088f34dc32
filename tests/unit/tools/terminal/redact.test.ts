import { describe, expect, it } from 'vitest';
import { finishOutput, TRUNCATION_MARKER } from '../../../../src/tools/terminal/executor.js';
import { redactSecrets } from '../../../../src/tools/terminal/redact.js';

describe('redaction', () => {
  it.each([
    ['key AKIAIOSFODNN7EXAMPLE here', 'aws_access_key', 'AKIAIOSFODNN7EXAMPLE'],
    ['ghp_' + 'a'.repeat(36), 'github_token', 'ghp_'],
    ['xoxb-1234567890-abcdef', 'slack_token', 'xoxb-'],
    ['sk_live_' + 'b'.repeat(24), 'stripe_key', 'sk_live_'],
    ['sk-proj-' + 'c'.repeat(30), 'openai_key', 'sk-proj-'],
    ['Authorization: Bearer abcdefghijklmnopqrstuv', 'bearer_token', 'abcdefghijklmnopqrstuv'],
    ['https://bob:hunter22@example.com/x', 'url_password', 'hunter22'],
    ['password=s3cr3tP4ss', 'assignment', 's3cr3tP4ss'],
    ['-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----', 'private_key', 'MIIB'],
    ['-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn', 'private_key', 'b3Blbn'],
  ])('redacts %j as %s', (text, kind, secret) => {
    const out = redactSecrets(text);
    expect(out).toContain(`[REDACTED:${kind}]`);
    expect(out).not.toContain(secret);
  });

  it.each([
    '/usr/bin/git',
    'da39a3ee5e6b4b0d3255bfef95601890afd80709',
    '123e4567-e89b-12d3-a456-426614174000',
    'cp -p a b',
  ])('leaves %j alone', (text) => expect(redactSecrets(text)).toBe(text));
});

describe('redaction before truncation', () => {
  const collected = (s: string) => {
    const b = Buffer.from(s);
    return { chunks: [b], kept: b.length, total: b.length };
  };

  it('never leaks part of a secret that straddles the cap', () => {
    const cap = 100;
    const text = 'x'.repeat(cap - 8) + 'AKIAIOSFODNN7EXAMPLE' + 'y'.repeat(50);
    const out = finishOutput(collected(text), cap, redactSecrets);
    expect(out.truncated).toBe(true);
    expect(out.text).not.toMatch(/AKIA/);
    expect(out.text.endsWith(TRUNCATION_MARKER(cap))).toBe(true);
    // Without redaction first, the cut would have leaked the key's prefix.
    expect(finishOutput(collected(text), cap, (s) => s).text).toContain('AKIAIOSF');
  });

  it('drops a redaction marker cut in half rather than leaving a fragment', () => {
    const out = finishOutput(collected('x'.repeat(95) + 'AKIAIOSFODNN7EXAMPLE'), 100, redactSecrets);
    expect(out.text).toBe('x'.repeat(95) + TRUNCATION_MARKER(100));
  });

  it('cuts on a UTF-8 boundary', () => {
    const out = finishOutput(collected('é'.repeat(10)), 5, (s) => s);
    expect(out.text.startsWith('éé\n')).toBe(true);
  });

  it('marks output the collector already stopped keeping as truncated', () => {
    const b = Buffer.from('abc');
    expect(finishOutput({ chunks: [b], kept: 3, total: 10 }, 100, (s) => s).truncated).toBe(true);
  });
});
