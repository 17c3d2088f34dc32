import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  bindingsFile,
  parseBindingsText,
  readBindings,
  serializeBindings,
  type Binding,
  type BindingsCache,
  type BindingsDoc,
  type Scope,
  warmBindings,
} from '../../../../src/control/policy/bindings.js';

// readBindings with a cache reads a text in serializeBindings' shape entry by entry (only new entries are parsed);
// whatever it returns must be exactly what the strict parse of the whole text returns, or the same error.

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-bcache-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

/** A small deterministic generator (xorshift32). */
function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x100000000;
  };
}

const AWKWARD = [
  'network.udp=allow@abcdef0123456789',
  'a: b',
  '#not a comment',
  ' leading',
  'trailing ',
  '"quoted"',
  "it's",
  'two\nlines',
  'three\nlines\n',
  '',
  'ü-ñ',
  '- dash',
  '[x]',
  '{y: 1}',
  'null',
  'true',
  '123',
  '0x1F',
  '~',
  '*alias',
  '&anchor',
  '!tag',
  '%x',
  '@at',
  '`tick`',
  'a\tb',
  '? q',
  'x'.repeat(200),
];

function randomDoc(r: () => number, n: number): BindingsDoc {
  const doc: BindingsDoc = { version: 1, bindings: {} };
  if (r() < 0.5) doc.bindings.global = { profile: 'base', acks: [] };
  for (let i = 0; i < n; i++) {
    const scope = `agent:leash-${Math.floor(r() * 1e6).toString(36)}${r() < 0.1 ? '$' : ''}` as Scope;
    doc.bindings[scope] = randomBinding(r);
  }
  return doc;
}

function randomBinding(r: () => number): Binding {
  const acks = Array.from({ length: Math.floor(r() * 4) }, () => AWKWARD[Math.floor(r() * AWKWARD.length)]!);
  const b: Binding = {
    profile: r() < 0.2 ? AWKWARD[Math.floor(r() * AWKWARD.length)]! : `p${Math.floor(r() * 99)}`,
    acks,
  };
  if (r() < 0.2) b.enforce = r() < 0.5 ? 'shadow' : 'enforce';
  return b;
}

const write = (text: string) => fs.writeFileSync(bindingsFile(dir), text);

/** The outcome of a read: the document as JSON (key order included), or the error's code and message. */
function outcome(f: () => BindingsDoc): string {
  try {
    return JSON.stringify(f());
  } catch (e) {
    const err = e as { code?: string; message: string };
    return `error ${err.code} ${err.message}`;
  }
}

describe('bindings.yaml read entry by entry', () => {
  it('gives the strict parse of the whole text, through 300 edits of generated documents', () => {
    const r = rng(0x1ea5);
    for (let round = 0; round < 10; round++) {
      const cache: BindingsCache = {};
      const doc = randomDoc(r, 1 + Math.floor(r() * 40));
      for (let edit = 0; edit < 30; edit++) {
        const scopes = Object.keys(doc.bindings) as Scope[];
        const pick = scopes[Math.floor(r() * scopes.length)]!;
        const what = r();
        if (what < 0.5) doc.bindings[pick] = randomBinding(r);
        else if (what < 0.75 && scopes.length > 1) delete doc.bindings[pick];
        else doc.bindings[`agent:leash-n${round}x${edit}` as Scope] = randomBinding(r);
        const text = serializeBindings(doc);
        write(text);
        const got = readBindings(dir, cache);
        expect(JSON.stringify(got)).toBe(JSON.stringify(parseBindingsText(text, bindingsFile(dir))));
        // A first read (a start) parses the whole text at once; every read after it goes entry by entry (not the
        // fallback): the cache then holds exactly this text's entries.
        if (edit === 0) expect(cache.entries).toBeUndefined();
        else expect(cache.entries?.size).toBe(Object.keys(doc.bindings).length);
      }
    }
  });

  it('parses only the entries whose text is new', () => {
    const doc: BindingsDoc = { version: 1, bindings: {} };
    for (let i = 0; i < 50; i++) doc.bindings[`agent:leash-a${i}`] = { profile: `p${i}`, acks: [] };
    const cache: BindingsCache = {};
    write(serializeBindings(doc));
    const first = readBindings(dir, cache);
    doc.bindings['agent:leash-a7'] = { profile: 'other', acks: ['network.udp=allow@0123'] };
    write(serializeBindings(doc));
    const second = readBindings(dir, cache);
    // Unchanged entries are the very objects of the last read; the changed one is new.
    expect(second.bindings['agent:leash-a3']).toBe(first.bindings['agent:leash-a3']);
    expect(second.bindings['agent:leash-a7']).toEqual({ profile: 'other', acks: ['network.udp=allow@0123'] });
  });

  it('a first read parses the whole text once; warmBindings makes its entries ahead of the next read', () => {
    const doc: BindingsDoc = { version: 1, bindings: {} };
    for (let i = 0; i < 50; i++) doc.bindings[`agent:leash-a${i}`] = { profile: `p${i}`, acks: [] };
    const cache: BindingsCache = {};
    write(serializeBindings(doc));
    const first = readBindings(dir, cache);
    expect(cache.entries).toBeUndefined();
    warmBindings(cache);
    expect(cache.entries?.size).toBe(50);
    doc.bindings['agent:leash-a7'] = { profile: 'other', acks: [] };
    write(serializeBindings(doc));
    const second = readBindings(dir, cache);
    expect(second.bindings['agent:leash-a3']).toBe(first.bindings['agent:leash-a3']);
    expect(second.bindings['agent:leash-a7']).toEqual({ profile: 'other', acks: [] });
  });

  it("after a whole read of a hand-written file, reads the CLI's next write entry by entry", () => {
    const flow = [
      'version: 1',
      'bindings:',
      ...Array.from({ length: 20 }, (_, i) => `  agent:leash-a${i}: { profile: p${i}, acks: [] }`),
    ];
    write(flow.join('\n') + '\n');
    const cache: BindingsCache = {};
    const first = readBindings(dir, cache);
    const doc: BindingsDoc = JSON.parse(JSON.stringify(first)) as BindingsDoc;
    doc.bindings['agent:leash-a4'] = { profile: 'other', acks: [] };
    const text = serializeBindings(doc);
    write(text);
    const second = readBindings(dir, cache);
    expect(JSON.stringify(second)).toBe(JSON.stringify(parseBindingsText(text, bindingsFile(dir))));
    expect(second.bindings['agent:leash-a4']).toEqual({ profile: 'other', acks: [] });
    expect(second.bindings['agent:leash-a5']).toBe(first.bindings['agent:leash-a5']);
  });

  it('reads a text in any other shape as the strict parse does, error for error', () => {
    const base: BindingsDoc = {
      version: 1,
      bindings: {
        global: { profile: 'base', acks: [] },
        'agent:leash-a': { profile: 'pa', acks: ['t1'] },
        'agent:leash-b': { profile: 'pb', acks: [] },
      },
    };
    const canonical = serializeBindings(base);
    const variants = [
      canonical.replace('  agent:leash-b:', '  # a comment\n  agent:leash-b:'),
      canonical.replace(
        '  agent:leash-b:\n    profile: pb\n    acks: []\n',
        '  agent:leash-b: { profile: pb, acks: [] }\n',
      ),
      canonical.replace('    profile: pa\n    acks:\n      - t1\n', '    acks:\n      - t1\n    profile: pa\n'),
      canonical + '  agent:leash-a:\n    profile: evil\n    acks: []\n', // the same scope twice
      canonical.replace('    profile: pa\n', '    profile: &p pa\n').replace('    profile: pb\n', '    profile: *p\n'),
      canonical + 'extra: 1\n',
      canonical.replace(/\n/g, '\r\n'),
      canonical.replace('    profile: pb\n', '    profile: pb   \n'),
      canonical.replace('  agent:leash-b:\n', '  agent:leash-b:\n\n'),
      canonical.replace('    acks: []\n', '    acks: []\n    enforce: sideways\n'),
      canonical.replace('    profile: pb\n', '    profile: !!str pb\n'),
      canonical.replace('    profile: pb\n', '    profile: pb\n    profile: pc\n'),
      canonical.replace('version: 1\n', 'version: 1\n---\n'),
      canonical.replace('  agent:leash-b:', '  "agent:leash-b":'),
      canonical.replace('  agent:leash-b:', '  agent:Leash-B:'),
      canonical.slice(0, -3),
      canonical.replace('bindings:\n', 'bindings:\n  \n'),
    ];
    for (const text of variants) {
      // A cache that has seen the canonical text first, so its entries are there to be (wrongly) reused.
      const cache: BindingsCache = {};
      write(canonical);
      readBindings(dir, cache);
      write(text);
      expect(outcome(() => readBindings(dir, cache))).toBe(outcome(() => parseBindingsText(text, bindingsFile(dir))));
    }
  });
});
