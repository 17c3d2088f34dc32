import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { onTestFinished } from 'vitest';
import type { DecisionRecord } from '../../../src/log/decisions.js';

/** A decision-log path in a directory of its own, removed when the test finishes. */
export function tmpSink(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 'd.jsonl');
}

/** The file's decision lines, parsed (allow_summary lines carry their counts in subject). */
export const readDecisions = (f: string) =>
  fs
    .readFileSync(f, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as DecisionRecord & { subject: { allowed?: number; written?: number } });
