import { beforeAll, describe, expect, it } from 'vitest';
import { parseHttpHost, peekDestination, type PeekResult } from '../../../../src/dataplane/network/proxy/peek.js';
import { captureHello, withExtension } from '../../../../src/lab/client-hello.js';

/** Re-frames a single-record ClientHello into records of the given fragment sizes. */
function reframe(hello: Buffer, sizes: number[]): Buffer {
  const body = hello.subarray(5, 5 + hello.readUInt16BE(3));
  const out: Buffer[] = [];
  let off = 0;
  let i = 0;
  while (off < body.length) {
    const n = Math.min(sizes[i++ % sizes.length]!, body.length - off);
    const hdr = Buffer.from([0x16, 0x03, 0x01, n >> 8, n & 0xff]);
    out.push(hdr, body.subarray(off, off + n));
    off += n;
  }
  return Buffer.concat(out);
}

/** Feeds the bytes one growing prefix at a time, as TCP segments would arrive, returning the first final result. */
function feed(bytes: Buffer, step: number): PeekResult {
  for (let n = step; ; n += step) {
    const r = peekDestination(bytes.subarray(0, Math.min(n, bytes.length)));
    if (r.kind !== 'more' || n >= bytes.length) return r;
  }
}

let hello: Buffer;
beforeAll(async () => {
  hello = await captureHello('API.Example.COM');
});

describe('ClientHello SNI', () => {
  it('reads the SNI of a real ClientHello (lower-cased)', () => {
    expect(peekDestination(hello)).toEqual({ kind: 'tls', sni: 'api.example.com' });
  });

  it('asks for more on every strict prefix', () => {
    for (let n = 1; n < hello.length; n++) expect(peekDestination(hello.subarray(0, n)).kind).toBe('more');
  });

  it('reads a ClientHello split across TLS records and TCP segments', () => {
    for (const sizes of [[1], [3], [50, 7], [200], [4, 1000]]) {
      const split = reframe(hello, sizes);
      expect(split.length).toBeGreaterThan(hello.length);
      expect(feed(split, 1)).toEqual({ kind: 'tls', sni: 'api.example.com' });
      expect(feed(split, 13)).toEqual({ kind: 'tls', sni: 'api.example.com' });
    }
  });

  it('reports no SNI for a hello without server_name, and for an IP literal', async () => {
    expect(peekDestination(await captureHello(undefined))).toEqual({ kind: 'tls', sni: null });
  });

  it('reports an encrypted_client_hello extension (0xfe0d) with the outer name', async () => {
    const ech = withExtension(await captureHello('public.example'), 0xfe0d, Buffer.alloc(40, 7));
    expect(peekDestination(ech)).toEqual({ kind: 'tls', sni: 'public.example', ech: true });
    // Another unknown extension is not ECH.
    const other = withExtension(await captureHello('public.example'), 0xfe0c, Buffer.alloc(4));
    expect(peekDestination(other)).toEqual({ kind: 'tls', sni: 'public.example' });
  });

  it('refuses a non-handshake record and a non-ClientHello handshake', () => {
    expect(peekDestination(Buffer.from([0x16, 3, 1, 0, 4, 2, 0, 0, 0])).kind).toBe('other');
    expect(peekDestination(Buffer.from([0x17, 3, 3, 0, 1, 0])).kind).toBe('other');
  });

  it('rejects a server_name that is not a DNS name rather than passing it to the engine', () => {
    const bad = Buffer.from(hello);
    const at = bad.indexOf(Buffer.from('API.Example.COM'));
    bad[at + 3] = 0x2f; // "API/Example.COM"
    expect(peekDestination(bad)).toEqual({ kind: 'other', why: 'tls_bad_sni' });
  });
});

describe('HTTP Host', () => {
  const req = (s: string) => Buffer.from(s, 'latin1');
  it.each([
    ['GET / HTTP/1.1\r\nHost: Example.org\r\n\r\n', 'example.org'],
    ['GET / HTTP/1.1\r\nhost: example.org:8080\r\nAccept: */*\r\n\r\n', 'example.org'],
    ['POST /x HTTP/1.0\nHost: a.b.c\n\n', 'a.b.c'],
    ['GET http://abs.example/x HTTP/1.1\r\n\r\n', 'abs.example'],
    ['GET / HTTP/1.1\r\nHost: 198.18.1.10\r\n\r\n', null],
    ['GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n', null],
    ['GET / HTTP/1.1\r\n\r\n', null],
  ])('%j -> %s', (s, host) => {
    const r = peekDestination(req(s));
    expect(r).toEqual({ kind: 'http', host, conflict: false });
  });

  it('flags two Host headers, or an absolute target naming another host, as a conflict', () => {
    expect(parseHttpHost(req('GET / HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n'))).toMatchObject({
      conflict: true,
    });
    expect(parseHttpHost(req('GET http://b.com/ HTTP/1.1\r\nHost: a.com\r\n\r\n'))).toMatchObject({ conflict: true });
  });

  it('waits for the end of the head, and gives up early on bytes that are not HTTP', () => {
    expect(peekDestination(req('GET / HTTP/1.1\r\nHost: a.c')).kind).toBe('more');
    expect(peekDestination(req('GE')).kind).toBe('more');
    expect(peekDestination(req('SSH-2.0-OpenSSH_9.2\r\n')).kind).toBe('other');
    expect(peekDestination(req('Get / HTTP/1.1\r\n\r\n')).kind).toBe('other');
    expect(peekDestination(Buffer.from([0x00, 0x01])).kind).toBe('other');
  });
});

describe('peek fuzz', () => {
  /** xorshift128+: seeded, so a failure is reproducible from the printed seed. */
  function prng(seed: number): () => number {
    let a = seed >>> 0 || 1;
    let b = (seed * 2654435761) >>> 0 || 2;
    return () => {
      let t = a;
      const s = b;
      a = s;
      t ^= t << 11;
      t ^= t >>> 8;
      b = (t ^ s ^ (s >>> 19)) >>> 0;
      return b;
    };
  }

  it('never throws on 1,000,000 generated inputs (mutated real hellos, HTTP heads, random bytes)', async () => {
    const seed = Number(process.env.LEASH_FUZZ_SEED ?? 20261130);
    const rnd = prng(seed);
    const corpus = [
      hello,
      reframe(hello, [37]),
      await captureHello('x.y', { ALPNProtocols: ['h2', 'http/1.1'] }),
      Buffer.from('GET http://a.b/ HTTP/1.1\r\nHost: a.b:80\r\nUser-Agent: x\r\n\r\n'),
    ];
    const N = 1_000_000;
    let kinds = { more: 0, tls: 0, http: 0, other: 0 };
    const scratch = Buffer.alloc(20000);
    for (let i = 0; i < N; i++) {
      const mode = rnd() % 4;
      let input: Uint8Array;
      if (mode === 3) {
        const len = rnd() % 600;
        for (let j = 0; j < len; j++) scratch[j] = rnd() & 0xff;
        if (len && rnd() % 2) scratch[0] = 0x16;
        input = scratch.subarray(0, len);
      } else {
        const src = corpus[rnd() % corpus.length]!;
        const len = rnd() % 3 === 0 ? rnd() % (src.length + 1) : src.length;
        src.copy(scratch, 0, 0, len);
        const flips = 1 + (rnd() % 8);
        for (let f = 0; f < flips && len > 0; f++) {
          const at = rnd() % len;
          // Bias towards length fields: 0x00/0xff and off-by-one values are what break parsers.
          const v = rnd() % 3;
          scratch[at] = v === 0 ? 0xff : v === 1 ? 0 : (scratch[at]! + (rnd() % 3) - 1) & 0xff;
        }
        input = scratch.subarray(0, len);
      }
      let r: PeekResult;
      try {
        r = peekDestination(input);
      } catch (e) {
        throw new Error(
          `seed ${seed} input #${i} threw: ${(e as Error).message} (${Buffer.from(input).toString('hex')})`,
        );
      }
      kinds = { ...kinds, [r.kind]: kinds[r.kind] + 1 };
    }
    // The generator must actually reach every branch, or the test proves little.
    expect(kinds.tls).toBeGreaterThan(1000);
    expect(kinds.http).toBeGreaterThan(1000);
    expect(kinds.more).toBeGreaterThan(1000);
    expect(kinds.other).toBeGreaterThan(1000);
  }, 120_000);
});
