/**
 * One `leash mcp learn` run: a scripted session (--script) or a live client relayed through a gate
 * that allows everything and watches, then the tightest-fit profile written atomically. Nothing is
 * written when the session fails; the partial profile goes to a stream instead.
 */
import fs from 'node:fs';
import path from 'node:path';
import { LeashError } from '../../errors.js';
import { JsonError, toPlain } from '../../formats/json.js';
import { requireStdio, resolveCommand, runGateSession } from '../gate/run.js';
import type { GateJudge } from '../judge/judge.js';
import { Learner, LearnError, learnScripted, loadScript, renderProfile, writeAtomic } from './learn.js';

const say = (line: string) => {
  try {
    process.stderr.write(`leash mcp: ${line}\n`);
  } catch {
    /* stderr closed */
  }
};

/** Relays everything and judges nothing: learn watches what the server answers. */
const ALLOW_ALL: GateJudge = {
  hideDenied: false,
  judge: (method) => ({ action: 'allow', policed: false, method }),
  hidden: (names) => names.map(() => false),
  event: () => undefined,
};

export interface LearnRunOptions {
  server: string[];
  timeoutMs: number;
  graceMs: number;
  /** --script: drive these calls instead of relaying a live client. */
  script?: string;
  /** --out as given (messages name it so). */
  out: string;
}

function prepareOut(given: string): string {
  const out = path.resolve(given);
  try {
    fs.mkdirSync(path.dirname(out), { recursive: true });
  } catch (e) {
    throw new LeashError('usage', `cannot create the directory of --out: ${(e as NodeJS.ErrnoException).code}`, {
      option: '--out',
    });
  }
  if (fs.existsSync(out) && fs.statSync(out).isDirectory())
    throw new LeashError('usage', '--out is a directory', { option: '--out' });
  return out;
}

/** The scripted session; null when it failed (said, and the partial profile printed). */
async function learnFromScript(o: LearnRunOptions, command: string[]): Promise<Learner | null> {
  let calls;
  try {
    calls = loadScript(o.script!);
  } catch (e) {
    throw new LeashError('usage', `bad --script: ${e instanceof JsonError ? e.code : (e as Error).message}`, {
      option: '--script',
    });
  }
  try {
    return await learnScripted({ command, calls, timeoutMs: o.timeoutMs, graceMs: o.graceMs, errout: process.stderr });
  } catch (e) {
    if (!(e instanceof LearnError)) throw e;
    const partial = (e as { partial?: Learner }).partial;
    say(`learn failed: ${e.message}; ${o.out} was not written`);
    if (partial) process.stdout.write(renderProfile(partial.build().profile));
    return null;
  }
}

/** A live client relayed to the server, every call allowed and watched; null when the session failed. */
async function learnFromClient(o: LearnRunOptions, command: string[]): Promise<Learner | null> {
  requireStdio();
  const l = new Learner();
  const code = await runGateSession({
    judge: ALLOW_ALL,
    command,
    timeoutMs: o.timeoutMs,
    graceMs: o.graceMs,
    observer: {
      onCall: (name, args, ok) => l.call(name, args, ok),
      onToolsList: (names) => l.toolsListed(names),
      onInitialize: (r) => {
        const v = toPlain(r) as { protocolVersion?: unknown };
        if (typeof v?.protocolVersion === 'string') l.revision = v.protocolVersion;
      },
    },
  });
  if (code === 3 || code === 2) {
    say(`learn failed: the session ended with status ${code}; ${o.out} was not written`);
    process.stderr.write(renderProfile(l.build().profile));
    return null;
  }
  return l;
}

/** `leash mcp learn`: resolves with the exit status (2 when nothing was written). */
export async function runLearn(o: LearnRunOptions): Promise<number> {
  const out = prepareOut(o.out);
  const command = [resolveCommand(o.server[0]!), ...o.server.slice(1)];
  const learner = o.script !== undefined ? await learnFromScript(o, command) : await learnFromClient(o, command);
  if (learner === null) return 2;
  const built = learner.build();
  for (const l of built.leftOut) say(`left out ${l}`);
  const text = renderProfile(built.profile);
  try {
    writeAtomic(out, text);
  } catch (e) {
    say(`cannot write ${o.out} (${(e as NodeJS.ErrnoException).code}); the profile follows on stdout`);
    process.stdout.write(text);
  }
  say(built.summary);
  return 0;
}
