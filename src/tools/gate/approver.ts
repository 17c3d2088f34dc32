/**
 * Who decides an `ask` when `leash mcp --policy FILE` runs without the service (issue 41): nobody, unless the
 * operator says so. `--approval tty` asks on the controlling terminal (/dev/tty, like ToolFence's
 * `--approval tty`), one question at a time, each with a deadline; `--approval none` refuses asked calls
 * (approval_unavailable). A policy that asks, run with neither, does not start: silence would turn every ask
 * into a refusal nobody chose.
 */
import fs from 'node:fs';
import readline from 'node:readline';
import tty from 'node:tty';
import { LeashError } from '../../errors.js';
import type { JsonValue } from '../../formats/json.js';
import { loadGatePolicyFile } from '../judge/policy-file.js';
import { redactForLog } from '../judge/redact.js';
import { type AskJudgment } from '../judge/decide.js';

export type ApprovalMode = 'tty' | 'none';
export type Approve = (
  j: AskJudgment,
  params: JsonValue | undefined,
) => Promise<{ action: 'allow' | 'block'; reason: string }>;

export function parseApprovalMode(v: string | undefined): ApprovalMode | undefined {
  if (v === undefined || v === 'tty' || v === 'none') return v;
  throw new LeashError('usage', `--approval takes tty or none, not "${v}"`, { option: '--approval' });
}

/** What in a tools policy file can ask: `tools.ask` entries, rules with effect ask, and an asking default. */
export function askSources(file: string): string[] {
  const t = loadGatePolicyFile(file).tools;
  const out: string[] = [];
  const ask = t.ask ?? [];
  if (ask.length) out.push(`tools.ask: ${ask.join(', ')}`);
  const rules = t.rules.filter((r) => r.effect === 'ask').map((r) => r.id);
  if (rules.length) out.push(`rules with effect ask: ${rules.join(', ')}`);
  if (t.rules.length && t.default === 'ask') out.push('tools.default: ask (a call no rule matches)');
  return out;
}

/** The refusal to start, naming what asks and the three ways out. */
export function noApprover(file: string, sources: string[]): LeashError {
  return new LeashError(
    'mcp_no_approver',
    `${file} asks (${sources.join('; ')}), and with --policy there is no service to put the question to: ` +
      'add --approval tty (asked on this terminal), or --approval none (asked calls refused: approval_unavailable), ' +
      'or run without --policy through the service (leash approvals)',
    { file, asks: sources },
  );
}

function question(j: AskJudgment, params: JsonValue | undefined, mask: (s: string) => string, secs: number): string {
  const args =
    params !== null && typeof params === 'object' && !Array.isArray(params)
      ? (params as Record<string, JsonValue>).arguments
      : undefined;
  const shown = args === undefined ? '' : ` ${JSON.stringify(redactForLog(args, mask))}`;
  const why = [j.rule ? `rule ${j.rule}` : j.reason, j.op?.action.operation].filter(Boolean).join(', ');
  return `\nleash mcp: ${j.method} ${mask(j.name)}${shown} asks (${why}). Allow once? [y/N] (${secs} s) `;
}

/**
 * Asks on `device` (default /dev/tty). Throws mcp_no_approver when it cannot be opened (no controlling
 * terminal: a host that started the gate detached). Questions queue: one on the terminal at a time.
 */
export function ttyApprover(o: { timeoutMs: number; mask: (s: string) => string; device?: string }): {
  approve: Approve;
  close(): void;
} {
  const device = o.device ?? '/dev/tty';
  let fd: number;
  try {
    fd = fs.openSync(device, 'r+');
  } catch (e) {
    throw new LeashError(
      'mcp_no_approver',
      `--approval tty: cannot open ${device} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}): no terminal to ask on`,
      { device },
    );
  }
  const input = new tty.ReadStream(fd);
  const lines = readline.createInterface({ input, terminal: false });
  const waiting: ((line: string | null) => void)[] = [];
  lines.on('line', (l) => waiting.shift()?.(l));
  lines.on('close', () => {
    for (const w of waiting.splice(0)) w(null);
  });
  input.unref();
  let chain: Promise<unknown> = Promise.resolve();
  const secs = Math.round(o.timeoutMs / 1000);
  const ask = (j: AskJudgment, params: JsonValue | undefined) =>
    new Promise<{ action: 'allow' | 'block'; reason: string }>((resolve) => {
      fs.writeSync(fd, question(j, params, o.mask, secs));
      input.ref();
      const done = (line: string | null, timedOut = false) => {
        clearTimeout(timer);
        const i = waiting.indexOf(got);
        if (i >= 0) waiting.splice(i, 1);
        input.unref();
        const yes = line !== null && /^\s*y(es)?\s*$/i.test(line);
        if (timedOut) fs.writeSync(fd, `\nleash mcp: no answer within ${secs} s: denied\n`);
        resolve(
          yes
            ? { action: 'allow', reason: 'approved_once' }
            : { action: 'block', reason: timedOut ? 'approval_timeout' : 'approval_denied' },
        );
      };
      const got = (line: string | null) => done(line);
      waiting.push(got);
      const timer = setTimeout(() => done(null, true), o.timeoutMs);
    });
  return {
    approve: (j, params) => {
      const r = chain.then(() => ask(j, params));
      chain = r.catch(() => undefined);
      return r;
    },
    close: () => {
      lines.close();
      input.destroy();
    },
  };
}
