// bindings.yaml holds every agent's binding in one file. Under a policy file's caps (1 MiB, 10,000 items) a
// fleet of ~5,400 agents with two acks each made `leash bind` write a file that nothing could read back
// (bindings_corrupt for every subject). Now the file has caps of its own, and the writer refuses, before
// writing anything, a document its reader would refuse.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LeashError } from '../../../../src/errors.js';
import { parseStrictYaml } from '../../../../src/formats/yaml.js';
import {
  BINDINGS_LIMITS,
  bindingsFile,
  parseBindingsText,
  readBindings,
  serializeBindings,
  writeBindings,
  type BindingsCache,
  type BindingsDoc,
} from '../../../../src/control/policy/bindings.js';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-blimits-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const ACK = (c: string) => c.repeat(64);

function fleet(n: number, acks = 2): BindingsDoc {
  const bindings: BindingsDoc['bindings'] = {};
  for (let i = 0; i < n; i++)
    bindings[`agent:leash-a${i}`] = {
      profile: `p${i % 50}`,
      acks: Array.from({ length: acks }, (_, k) => ACK('ab'[k % 2]!)),
    };
  return { version: 1, bindings };
}

function codeOf(f: () => unknown): string | undefined {
  try {
    f();
  } catch (e) {
    return e instanceof LeashError ? e.code : `not a LeashError: ${String(e)}`;
  }
  return undefined;
}

describe('bindings.yaml at fleet size', () => {
  it('6,000 bindings (over a policy file’s 1 MiB) are written and read back, whole and entry by entry', () => {
    const doc = fleet(6000);
    writeBindings(dir, doc);
    expect(fs.statSync(bindingsFile(dir)).size).toBeGreaterThan(1024 * 1024);
    expect(readBindings(dir)).toEqual(doc);
    const cache: BindingsCache = {};
    expect(readBindings(dir, cache)).toEqual(doc);
    // One more binding, read through the cache: only the new entry is parsed.
    doc.bindings['agent:leash-new'] = { profile: 'p1', acks: [] };
    writeBindings(dir, doc);
    expect(readBindings(dir, cache)).toEqual(doc);
  });

  it('more bindings than the reader takes: bindings_too_large, and the file on disk is untouched', () => {
    writeBindings(dir, fleet(10));
    const before = fs.readFileSync(bindingsFile(dir));
    expect(codeOf(() => writeBindings(dir, fleet(BINDINGS_LIMITS.maxListItems + 1, 0)))).toBe('bindings_too_large');
    expect(fs.readFileSync(bindingsFile(dir))).toEqual(before);
    expect(Object.keys(readBindings(dir).bindings)).toHaveLength(10);
  });

  it('a file over 8 MiB (long ack lists) is refused the same way, before anything is written', () => {
    writeBindings(dir, fleet(10));
    const before = fs.readFileSync(bindingsFile(dir));
    let err: unknown;
    try {
      writeBindings(dir, fleet(2000, 70));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(LeashError);
    expect((err as LeashError).code).toBe('bindings_too_large');
    expect((err as LeashError).message).toMatch(/2000 bindings .* nothing was written/);
    expect(fs.readFileSync(bindingsFile(dir))).toEqual(before);
  });

  it('a hand-written file past the caps is bindings_corrupt on read, never a partial document', () => {
    const lines = ['version: 1', 'bindings:'];
    for (let i = 0; i <= BINDINGS_LIMITS.maxListItems; i++) lines.push(`  agent:leash-a${i}: { profile: p, acks: [] }`);
    fs.writeFileSync(bindingsFile(dir), `${lines.join('\n')}\n`);
    expect(codeOf(() => readBindings(dir))).toBe('bindings_corrupt');
  });
});

describe('the strict reader’s duplicate-key check (uniqueKeys), now one set per mapping', () => {
  it('finds a key given twice at any depth, where the parser’s own check did, and nothing else', () => {
    const issues = (t: string) => {
      try {
        parseStrictYaml(t, 'f', { uniqueKeys: true });
        return 'accepted';
      } catch (e) {
        return `${(e as LeashError).code} ${JSON.stringify((e as LeashError).details?.issues)}`;
      }
    };
    expect(issues('a: 1\nb: 2\na: 3\n')).toBe(
      'config_syntax [{"path":"line 3, column 1","message":"Map keys must be unique"}]',
    );
    expect(issues('x:\n  - {k: 1, k: 2}\n')).toMatch(/^config_syntax .*line 2, column 12/);
    expect(issues('"a": 1\na: 2\n')).toMatch(/^config_syntax .*line 2, column 1"/);
    expect(issues('bindings:\n  agent:leash-a: {profile: p}\n  agent:leash-a: {profile: q}\n')).toMatch(
      /^config_syntax .*line 3, column 3/,
    );
    // Different scalars are different keys, as for the parser: the number 1 and the string "1".
    expect(issues('1: a\n"1": b\n')).toBe('accepted');
    expect(issues('a: {b: 1}\nc: {b: 1}\n')).toBe('accepted');
  });

  it('a file at the cap, 20,000 bindings, is read whole (the strict parse a hand-edited file gets)', () => {
    // 1.2-1.9 s here with one set per mapping; the parser's own check took 8.5 s (bench figures, not asserted).
    const text = serializeBindings(fleet(BINDINGS_LIMITS.maxListItems));
    expect(Object.keys(parseBindingsText(text, 'bindings.yaml').bindings)).toHaveLength(BINDINGS_LIMITS.maxListItems);
  });
});
