import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createDecisionLog, formatDecision } from '../../../src/log/decisions.js';
import {
  createJournal,
  findJournalSocket,
  operationalFields,
  serializeEntry,
  teeDecisionsToJournal,
  type JournalFields,
} from '../../../src/log/journal.js';

/** Parses the native protocol back into fields (the inverse of serializeEntry, as journald reads it). */
function parseEntry(buf: Buffer): JournalFields {
  const out: JournalFields = [];
  let i = 0;
  while (i < buf.length) {
    const nl = buf.indexOf(10, i);
    const head = buf.subarray(i, nl).toString('utf8');
    const eq = head.indexOf('=');
    if (eq >= 0) {
      out.push([head.slice(0, eq), head.slice(eq + 1)]);
      i = nl + 1;
    } else {
      const len = Number(buf.readBigUInt64LE(nl + 1));
      out.push([head, buf.subarray(nl + 9, nl + 9 + len).toString('utf8')]);
      i = nl + 9 + len + 1;
    }
  }
  return out;
}

function capture(allowSample = 0, err = 0) {
  const sent: Array<Record<string, string>> = [];
  const journal = createJournal({
    socket: '/run/test/socket',
    allowSample,
    identifier: 'leash-test',
    send: (sock, entry) => {
      expect(sock).toBe('/run/test/socket');
      sent.push(Object.fromEntries(parseEntry(entry)));
      return err;
    },
  });
  return { journal, sent };
}

function logFile(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-journal-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 'decisions.jsonl');
}

const block = {
  uid: 1001,
  surface: 'network' as const,
  action: 'block' as const,
  reason: 'not_allowed',
  subject: { host: 'evil.example', port: 443 },
  rule: null,
};
const allow = { ...block, action: 'allow' as const, reason: 'allow_entry', rule: 'good.example' };

describe('journal entries (native protocol)', () => {
  it('serialises plain fields as NAME=value and a value with a newline with its length', () => {
    const buf = serializeEntry([
      ['MESSAGE', 'two\nlines'],
      ['PRIORITY', '4'],
    ]);
    expect(buf.subarray(0, 8).toString()).toBe('MESSAGE\n');
    expect(buf.readBigUInt64LE(8)).toBe(9n);
    expect(parseEntry(buf)).toEqual([
      ['MESSAGE', 'two\nlines'],
      ['PRIORITY', '4'],
    ]);
  });

  it('refuses a field name journald would drop', () => {
    for (const bad of ['_UID', 'lower', 'A-B', '']) expect(() => serializeEntry([[bad, 'x']])).toThrow(/not valid/);
  });

  it('maps an operational line: MESSAGE, PRIORITY from the level, LEASH_COMPONENT, other keys as LEASH_*', () => {
    const f = Object.fromEntries(
      operationalFields(
        JSON.stringify({
          level: 40,
          time: 't',
          service: 'leash',
          component: 'nft',
          msg: 'rule failed',
          code: 'x_y',
          n: 3,
        }),
      ),
    );
    expect(f).toEqual({
      MESSAGE: 'rule failed',
      PRIORITY: '4',
      LEASH_COMPONENT: 'nft',
      LEASH_CODE: 'x_y',
      LEASH_N: '3',
    });
    expect(Object.fromEntries(operationalFields(JSON.stringify({ level: 60, msg: 'x' }))).PRIORITY).toBe('2');
    expect(Object.fromEntries(operationalFields(JSON.stringify({ level: 30, msg: 'x' }))).PRIORITY).toBe('6');
    expect(Object.fromEntries(operationalFields('not json\n')).MESSAGE).toBe('not json');
  });

  it('finds the journal only where there is one, and LEASH_JOURNAL_SOCKET overrides', () => {
    const none = () => false;
    expect(findJournalSocket('auto', {}, none)).toBeNull();
    expect(findJournalSocket('auto', { JOURNAL_STREAM: '8:1' }, none)).toBe('/run/systemd/journal/socket');
    expect(findJournalSocket('auto', {}, () => true)).toBe('/run/systemd/journal/socket');
    expect(findJournalSocket('auto', { LEASH_JOURNAL_SOCKET: '/tmp/j' }, none)).toBe('/tmp/j');
    expect(findJournalSocket('off', { JOURNAL_STREAM: '8:1', LEASH_JOURNAL_SOCKET: '/tmp/j' }, () => true)).toBeNull();
    expect(findJournalSocket('on', {}, none)).toBe('/run/systemd/journal/socket');
  });
});

describe('decisions teed to the journal', () => {
  it('sends every block with its fields and ref, and leaves allows out (counted) by default', () => {
    const file = logFile();
    const { journal, sent } = capture();
    const log = teeDecisionsToJournal(createDecisionLog({ sink: file }), journal, 'proxy');
    onTestFinished(() => log.close());
    const ref = log.write(block);
    for (let i = 0; i < 5; i++) log.write(allow);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({
      PRIORITY: '4',
      LEASH_COMPONENT: 'proxy',
      LEASH_UID: '1001',
      LEASH_SURFACE: 'network',
      LEASH_ACTION: 'block',
      LEASH_REASON: 'not_allowed',
      LEASH_REF: ref,
      SYSLOG_IDENTIFIER: 'leash-test',
    });
    expect(sent[0]!.MESSAGE).toBe(`block network uid 1001: evil.example:443 (not_allowed) ref ${ref}`);
    expect(JSON.parse(sent[0]!.LEASH_SUBJECT!)).toEqual(block.subject);
    expect(journal.stats().allowsSkipped).toBe(5);
    // The decision log is the record: every line is in the file.
    expect(fs.readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(6);
  });

  it('samples allows one in n under journal_allows: n', () => {
    const { journal, sent } = capture(3);
    const log = teeDecisionsToJournal(createDecisionLog({ sink: logFile() }), journal, 'proxy');
    onTestFinished(() => log.close());
    for (let i = 0; i < 9; i++) log.write(allow);
    expect(sent.map((s) => s.LEASH_ACTION)).toEqual(['allow', 'allow', 'allow']);
    expect(journal.stats().allowsSkipped).toBe(6);
  });

  it('reads the watcher’s natively formatted lines: blocks sent, allows left out', () => {
    const { journal, sent } = capture();
    const log = teeDecisionsToJournal(createDecisionLog({ sink: logFile() }), journal, 'watcher');
    onTestFinished(() => log.close());
    const fsBlock = { ...block, surface: 'filesystem' as const, subject: { path: '/srv/x "action":"allow"' } };
    const lines = [formatDecision(allow, 'aaaaaaaa'), formatDecision(fsBlock, 'bbbbbbbb'), formatDecision(allow)];
    log.writeLines(Buffer.from(lines.join('')));
    expect(sent.map((s) => [s.LEASH_REF, s.LEASH_SURFACE, s.LEASH_COMPONENT])).toEqual([
      ['bbbbbbbb', 'filesystem', 'watcher'],
    ]);
    expect(sent[0]!.MESSAGE).toContain('/srv/x');
    expect(journal.stats().allowsSkipped).toBe(2);
  });

  it('counts what journald refused, by errno, and keeps the decision log whole', () => {
    const file = logFile();
    const { journal } = capture(0, 11);
    const log = teeDecisionsToJournal(createDecisionLog({ sink: file }), journal, 'proxy');
    onTestFinished(() => log.close());
    log.write(block);
    log.write(block);
    expect(journal.stats()).toMatchObject({ sent: 0, dropped: { EAGAIN: 2 } });
    expect(fs.readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(2);
  });
});
