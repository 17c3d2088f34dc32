// The watcher's natively formatted decision-log lines (native/watcher/decisionline.cc) against the
// definition, formatDecision (src/log/decisions.ts): byte for byte, on a fixed corpus and on
// seeded generated cases — paths with invalid UTF-8 (each maximal invalid subpart becomes
// U+FFFD, as V8 decodes), control characters, quotes, backslashes and non-ASCII; times across
// the calendar. The reference is fed the strings the structured drain used to hand JavaScript
// (V8's decoding of the same bytes), so this is the old path against the new one.
import { describe, expect, it } from 'vitest';
import { mulberry32 as rng } from '../../src/lab/prng.js';
import { formatDecision } from '../../src/log/decisions.js';
import { loadNative, nativeAvailable, type DecisionLineCase } from '../../src/native.js';

const REASONS = [
  'allow_entry',
  'mode_allow',
  'deny_entry',
  'not_allowed',
  'no_policy',
  'engine_error',
  'interpreter_of',
  'interpreter_direct',
  'hardlinked',
  'namespace_denied',
] as const;
const B32 = 'abcdefghijklmnopqrstuvwxyz234567';

// Byte pieces a path is built from: the interesting ones for a UTF-8 decoder and a JSON escaper.
const PIECES: number[][] = [
  [0x2f], // '/'
  [0x61],
  [0x7a, 0x2e, 0x6c, 0x6f, 0x67],
  [0x22], // "
  [0x5c], // \
  [0x7f], // DEL: not escaped
  [0x00],
  [0x08],
  [0x09],
  [0x0a],
  [0x0b],
  [0x0c],
  [0x0d],
  [0x1b],
  [0x1f],
  [0x20],
  [0xc3, 0xa9], // é
  [0xc2, 0x80], // U+0080
  [0xdf, 0xbf], // U+07FF
  [0xe0, 0xa0, 0x80], // U+0800
  [0xe2, 0x80, 0xa8], // U+2028 (JSON.stringify leaves it)
  [0xef, 0xbb, 0xbf], // U+FEFF
  [0xef, 0xbf, 0xbd], // U+FFFD itself
  [0xed, 0x9f, 0xbf], // U+D7FF
  [0xee, 0x80, 0x80], // U+E000
  [0xf0, 0x90, 0x80, 0x80], // U+10000
  [0xf0, 0x9f, 0x98, 0x80], // an emoji (a surrogate pair in JS)
  [0xf4, 0x8f, 0xbf, 0xbf], // U+10FFFF
  // invalid
  [0x80],
  [0xbf],
  [0xc0, 0x80], // overlong
  [0xc1, 0xbf],
  [0xe0, 0x80, 0x80], // overlong
  [0xe0, 0x9f, 0xbf],
  [0xed, 0xa0, 0x80], // a surrogate
  [0xed, 0xbf, 0xbf],
  [0xf0, 0x80, 0x80, 0x80], // overlong
  [0xf0, 0x8f, 0xbf, 0xbf],
  [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
  [0xf5, 0x80, 0x80, 0x80],
  [0xf8, 0x88, 0x80, 0x80, 0x80],
  [0xfe],
  [0xff],
  [0xc3], // truncated 2-byte
  [0xe2, 0x80], // truncated 3-byte
  [0xe2],
  [0xf0, 0x9f, 0x98], // truncated 4-byte
  [0xf0, 0x9f],
  [0xf0],
];

const FIXED: Buffer[] = [
  Buffer.from('/tmp/leash/data/f'),
  Buffer.from(''),
  Buffer.from('/'),
  Buffer.from('/a "quoted" \\ path\n\t\r\b\f\x01\x1f\x7f'),
  Buffer.from('/ünïcødé/日本語/😀'),
  Buffer.from([0x2f, 0xc3]),
  Buffer.from([0x2f, 0xe2, 0x80]),
  Buffer.from([0x2f, 0xf0, 0x9f, 0x98]),
  Buffer.from([0x2f, 0xe2, 0x80, 0x41]),
  Buffer.from([0x2f, 0xf0, 0x9f, 0x98, 0x22]),
  Buffer.from([0xed, 0xa0, 0x80, 0xed, 0xb0, 0x80]), // a CESU-8 surrogate pair: four U+FFFD... as V8 says
  Buffer.from([0xc0, 0xaf, 0xe0, 0x80, 0xbf, 0xf0, 0x81, 0x82, 0x41]),
  Buffer.from([0xf1, 0x80, 0x80, 0xe1, 0x80, 0xc2, 0x41]),
  Buffer.from([0x80, 0x80, 0x80, 0x80]),
];

const FIXED_TS = [
  0,
  1,
  999,
  Date.UTC(2026, 10, 30, 4, 49, 38, 253),
  Date.UTC(2000, 1, 29, 23, 59, 59, 999),
  Date.UTC(1999, 11, 31, 23, 59, 59, 999),
  Date.UTC(2100, 1, 28, 12),
  Date.UTC(2400, 1, 29, 12),
  Date.UTC(9999, 11, 31, 23, 59, 59, 999),
  Date.UTC(10000, 0, 1),
  Date.UTC(275760, 8, 13),
  -1,
  -86_400_001,
  Date.UTC(0, 0, 1) - 1, // year -1
  Date.UTC(-271821, 3, 20),
];

function ref(r: () => number): string {
  let s = '';
  for (let i = 0; i < 8; i++) s += B32[Math.floor(r() * 32)];
  return s;
}

function randomPath(r: () => number): Buffer {
  if (r() < 0.1) {
    // raw random bytes
    return Buffer.from(Array.from({ length: Math.floor(r() * 40) }, () => Math.floor(r() * 256)));
  }
  const bytes: number[] = [];
  const n = 1 + Math.floor(r() * 12);
  for (let i = 0; i < n; i++) bytes.push(...PIECES[Math.floor(r() * PIECES.length)]!);
  return Buffer.from(bytes);
}

function randomRule(r: () => number): string | null {
  const x = r();
  if (x < 0.3) return null;
  if (x < 0.4) return String.fromCharCode(0xd800 + Math.floor(r() * 0x800)) + '/x'; // a lone surrogate
  if (x < 0.7) return '/home/agent/work';
  return randomPath(r).toString('utf8');
}

function compare(cases: DecisionLineCase[]): void {
  const out = loadNative().formatDecisionLines(cases);
  const want = cases.map((c, i) =>
    formatDecision(
      {
        uid: c.uid,
        surface: c.exec ? 'commands' : 'filesystem',
        action: c.allow ? 'allow' : 'block',
        reason: c.reason,
        subject: {
          ...(c.exec
            ? {
                binary: out.subjects[i],
                ...(c.interpreterOf ? { interpreterOf: c.interpreterOf.toString('utf8') } : {}),
              }
            : { path: out.subjects[i] }),
          ...(c.nlink !== undefined ? { inode: c.inode, nlink: c.nlink } : {}),
        },
        rule: out.rules[i],
      },
      c.ref,
      new Date(c.ts),
    ),
  );
  const wantBuf = Buffer.from(want.join(''), 'utf8');
  if (!out.text.equals(wantBuf)) {
    // Name the first case that differs.
    const got = out.text.toString('utf8').split('\n');
    const i = want.findIndex((w, k) => w !== `${got[k]}\n`);
    expect({ case: i, subject: cases[i]?.subject.toString('hex'), line: got[i] }).toEqual({
      case: i,
      subject: cases[i]?.subject.toString('hex'),
      line: want[i]?.slice(0, -1),
    });
  }
  expect(out.text.equals(wantBuf)).toBe(true);
}

describe.skipIf(!nativeAvailable())('native decision-log lines', () => {
  it('match formatDecision on a fixed corpus', () => {
    const r = rng(1);
    const cases: DecisionLineCase[] = [];
    for (const [i, subject] of FIXED.entries()) {
      for (const ts of FIXED_TS) {
        cases.push({
          ts,
          uid: [0, 999, 65534, 4294967295][i % 4]!,
          exec: i % 2 === 1,
          allow: ts % 2 === 0,
          reason: REASONS[i % REASONS.length]!,
          subject,
          rule: i % 3 === 0 ? null : subject.toString('utf8'),
          ref: ref(r),
          ...(i % 2 === 1 && i % 4 === 3 ? { interpreterOf: FIXED[(i + 1) % FIXED.length]! } : {}),
          ...(REASONS[i % REASONS.length] === 'hardlinked'
            ? { inode: [1, 2 ** 32 + 7, 2 ** 53 - 1][i % 3]!, nlink: 2 + i }
            : {}),
        });
      }
    }
    // A single byte of every value, alone and in a path.
    for (let b = 0; b < 256; b++) {
      for (const subject of [Buffer.from([b]), Buffer.from([0x2f, b, 0x2f, 0x61])]) {
        cases.push({
          ts: 0,
          uid: 1,
          exec: false,
          allow: true,
          reason: 'allow_entry',
          subject,
          rule: null,
          ref: ref(r),
        });
      }
    }
    compare(cases);
  });

  it('match formatDecision on 100,000 generated cases', () => {
    const r = rng(0x1ea5e);
    for (let batch = 0; batch < 10; batch++) {
      const cases: DecisionLineCase[] = [];
      for (let i = 0; i < 10_000; i++) {
        const t = r();
        const exec = r() < 0.3;
        const reason = REASONS[Math.floor(r() * REASONS.length)]!;
        cases.push({
          ts:
            t < 0.5
              ? Math.floor(1.7e12 + r() * 1e11)
              : t < 0.9
                ? Math.floor(r() * 4e12)
                : Math.floor((r() - 0.5) * 1.6e16),
          uid: Math.floor(r() * 4294967296),
          exec,
          allow: r() < 0.7,
          reason,
          subject: randomPath(r),
          rule: randomRule(r),
          ref: ref(r),
          ...(exec && reason === 'interpreter_of' ? { interpreterOf: randomPath(r) } : {}),
          ...(reason === 'hardlinked'
            ? { inode: Math.floor(r() * 2 ** 53), nlink: 2 + Math.floor(r() * (2 ** 32 - 2)) }
            : {}),
        });
      }
      compare(cases);
    }
  });
});
