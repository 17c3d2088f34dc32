import { describe, expect, it } from 'vitest';
import { HttpRequestGate, upgradeAgreed, type GateStep } from '../../../../src/dataplane/network/proxy/http-gate.js';
import { mulberry32 } from '../../../../src/lab/prng.js';

// The plain-HTTP request framer: every request on a kept-alive connection judged by its own Host, bodies followed
// exactly, anything ambiguous refused (nothing of it forwarded).

const req = (host: string, extra = '', body = '') => `GET / HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n${body}`;
const fwd = (s: GateStep) => Buffer.concat(s.forward).toString('latin1');

function feed(g: HttpRequestGate, text: string, step = 0): GateStep {
  const all: GateStep = { forward: [] };
  const b = Buffer.from(text, 'latin1');
  const parts =
    step > 0 ? Array.from({ length: Math.ceil(b.length / step) }, (_, i) => b.subarray(i * step, (i + 1) * step)) : [b];
  for (const p of parts) {
    const s = g.push(p);
    all.forward.push(...s.forward);
    if (s.refused) return { ...all, refused: s.refused };
    if (s.awaitUpgrade) all.awaitUpgrade = true;
  }
  return all;
}

describe('HttpRequestGate', () => {
  it('passes requests for the judged host, byte for byte, in any segmentation', () => {
    const text =
      req('good.test') +
      req('GOOD.test:8080') +
      'POST /x HTTP/1.1\r\nHost: good.test\r\nContent-Length: 5\r\n\r\nhello';
    for (const step of [0, 1, 7]) {
      const g = new HttpRequestGate('good.test');
      const s = feed(g, text, step);
      expect(s.refused).toBeUndefined();
      expect(fwd(s)).toBe(text);
      expect(g.count).toBe(3);
    }
  });

  it('refuses a later request for another host with 403 and forwards none of it', () => {
    const g = new HttpRequestGate('good.test');
    const s = feed(g, req('good.test') + req('evil.test'));
    expect(s.refused).toMatchObject({ reason: 'http_host_changed', host: 'evil.test', status: 403 });
    expect(fwd(s)).toBe(req('good.test'));
    expect(fwd(g.push(Buffer.from(req('good.test'))))).toBe(''); // nothing after a refusal
  });

  it('follows a chunked body to the next head: a Host inside the body is data, the next head is judged', () => {
    const body = '5\r\nHost:\r\n1a;ext=1\r\nGET / HTTP/1.1\r\nHost: evil\r\n0\r\nX-Trailer: 1\r\n\r\n';
    const text = `POST / HTTP/1.1\r\nHost: good.test\r\nTransfer-Encoding: chunked\r\n\r\n${body}`;
    const g = new HttpRequestGate('good.test');
    const ok = feed(g, text, 3);
    expect(ok.refused).toBeUndefined();
    expect(fwd(ok)).toBe(text);
    expect(feed(g, req('evil.test')).refused?.reason).toBe('http_host_changed');
  });

  it.each([
    [
      'Transfer-Encoding and Content-Length',
      'Transfer-Encoding: chunked\r\nContent-Length: 3\r\n',
      'transfer_encoding_and_content_length',
    ],
    ['a transfer coding other than chunked', 'Transfer-Encoding: gzip, chunked\r\n', 'transfer_encoding_not_chunked'],
    ['two different Content-Length', 'Content-Length: 1\r\nContent-Length: 2\r\n', 'bad_content_length'],
    ['a signed Content-Length', 'Content-Length: +1\r\n', 'bad_content_length'],
    ['obsolete line folding', 'X-A: 1\r\n folded\r\n', 'bad_header'],
    ['whitespace before the colon', 'X-A : 1\r\n', 'bad_header'],
  ])('refuses %s (400, nothing forwarded)', (_what, headers, why) => {
    const g = new HttpRequestGate('good.test');
    const s = feed(g, req('good.test', headers));
    expect(s.refused).toMatchObject({ reason: 'http_malformed', why, status: 400 });
    expect(s.forward).toEqual([]);
  });

  it('refuses a bad chunk size and a head over the bound', () => {
    const g = new HttpRequestGate('good.test');
    const s = feed(g, 'POST / HTTP/1.1\r\nHost: good.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n');
    expect(s.refused).toMatchObject({ why: 'bad_chunk_size' });
    const big = new HttpRequestGate('good.test');
    expect(feed(big, `GET / HTTP/1.1\r\nHost: good.test\r\nX: ${'a'.repeat(20000)}`).refused).toMatchObject({
      why: 'head_too_large',
    });
  });

  it('an Upgrade holds what follows until the answer: 101 opens the stream, anything else resumes framing', () => {
    const up = 'GET /ws HTTP/1.1\r\nHost: good.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n';
    const g = new HttpRequestGate('good.test');
    const s = feed(g, up + 'RAW-FRAMES');
    expect(s.awaitUpgrade).toBe(true);
    expect(fwd(s)).toBe(up);
    expect(fwd(g.upgraded(true))).toBe('RAW-FRAMES');
    expect(fwd(g.push(Buffer.from(req('evil.test'))))).toBe(req('evil.test')); // opaque now: a websocket stream

    const declined = new HttpRequestGate('good.test');
    feed(declined, up + req('evil.test'));
    expect(declined.upgraded(false).refused?.reason).toBe('http_host_changed');
    expect(upgradeAgreed(Buffer.from('HTTP/1.1 101 Switching'), false)).toBe(true);
    expect(upgradeAgreed(Buffer.from('HTTP/1.1 200 OK\r\n'), false)).toBe(false);
    expect(upgradeAgreed(Buffer.from('HTTP/1.1 200 OK\r\n'), true)).toBe(true);
    expect(upgradeAgreed(Buffer.from('HTTP/1.1'), false)).toBeNull();
    // Only as the first request: a later one cannot be matched to its response without parsing responses.
    const late = new HttpRequestGate('good.test');
    expect(feed(late, req('good.test') + up).refused).toMatchObject({ why: 'upgrade_not_first' });
  });

  it('a CONNECT must name the judged host', () => {
    const g = new HttpRequestGate('good.test');
    expect(feed(g, 'CONNECT evil.test:443 HTTP/1.1\r\nHost: good.test\r\n\r\n').refused?.reason).toBe(
      'http_host_changed',
    );
  });

  it('never throws on 50,000 mutated inputs, and what it forwards is always a prefix of the input', () => {
    const rnd = mulberry32(15);
    const seeds = [
      req('good.test') + req('good.test', 'Content-Length: 3\r\n', 'abc'),
      'POST / HTTP/1.1\r\nHost: good.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n' +
        req('good.test'),
    ];
    for (let i = 0; i < 50_000; i++) {
      const b = Buffer.from(seeds[i % seeds.length]!, 'latin1');
      const n = 1 + Math.floor(rnd() * 4);
      for (let k = 0; k < n; k++) b[Math.floor(rnd() * b.length)] = Math.floor(rnd() * 256);
      const g = new HttpRequestGate('good.test');
      const s = feed(g, b.toString('latin1'), 1 + Math.floor(rnd() * 20));
      const out = Buffer.concat(s.forward);
      // Whatever is forwarded is a prefix of the input: the gate never invents or reorders bytes.
      expect(b.subarray(0, out.length).equals(out)).toBe(true);
    }
  });
});
