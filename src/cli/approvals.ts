/**
 * `leash approvals`: a client of the service's approvals socket (src/control/approvals/socket.ts).
 *   leash approvals [--json] [--follow]          list pending requests (and stream new ones / outcomes)
 *   leash approvals allow ID --once|--session|--persist
 *   leash approvals deny ID
 *   leash approvals --watch                      interactive: each request as it arrives, a key decides
 * The socket decides who may act (root or approvals.operator, never a subject's UID); this side only talks.
 */
import readline from 'node:readline';
import { Command, Option } from 'commander';
import { LeashError } from '../errors.js';
import { check, connect } from '../control/approvals/client.js';
import { DEFAULT_APPROVALS_SOCKET } from '../control/approvals/socket.js';
import type { PendingView } from '../control/approvals/queue.js';

function describeWhat(v: PendingView): string {
  const w = v.what as Record<string, unknown>;
  switch (v.surface) {
    case 'network':
      return `${String(w.domain ?? w.ip)}:${String(w.port)}${w.domain && w.ip ? ` (${String(w.ip)})` : ''}`;
    case 'filesystem':
      return String(w.path);
    case 'commands':
      return String(w.binary);
    case 'tools':
      return `${String(w.name)} ${JSON.stringify(w.arguments ?? {})}`;
  }
}

/** One request as a line for a human: ID, subject, surface, what, the rule that asked, deadline. */
export function requestLine(v: PendingView): string {
  const who = v.account ? `${v.account} (uid ${v.uid})` : `uid ${v.uid}`;
  const proc = v.cmdline?.length ? `  process ${v.pid ?? '?'}: ${v.cmdline.join(' ')}` : '';
  return `${v.id}  ${who}  ${v.surface}  ${describeWhat(v)}  rule ${JSON.stringify(v.rule)}  until ${v.deadline}${proc}`;
}

function socketOf(cmd: Command): string {
  const o = cmd.optsWithGlobals() as { socket?: string };
  return o.socket ?? process.env.LEASH_APPROVALS_SOCKET ?? DEFAULT_APPROVALS_SOCKET;
}

async function decide(cmd: Command, id: string, decision: string, json: boolean): Promise<void> {
  const c = await connect(socketOf(cmd));
  try {
    const r = check(await c.call({ op: 'decide', id, decision }));
    if (json) process.stdout.write(JSON.stringify({ id, decision, outcome: r.outcome }) + '\n');
    else process.stdout.write(`${id}: ${r.outcome?.action} (${r.outcome?.reason})\n`);
  } finally {
    c.close();
  }
}

async function watch(path: string): Promise<void> {
  if (!process.stdin.isTTY)
    throw new LeashError('usage', '--watch needs a terminal (use --follow --json from a script)');
  const queue: PendingView[] = [];
  let current: PendingView | null = null;
  const c = await connect(path, (ev) => {
    if (ev.event === 'request') {
      queue.push(ev.request);
      if (!current) next();
    } else if (ev.event === 'decided') {
      const i = queue.findIndex((q) => q.id === ev.id);
      if (i >= 0) queue.splice(i, 1);
      process.stdout.write(
        `  ${ev.id}: ${ev.action} (${ev.reason}${ev.by ? ` by ${ev.by.account ?? ev.by.uid}` : ''})\n`,
      );
      if (current?.id === ev.id) {
        current = null;
        next();
      }
    }
  });
  const next = () => {
    current = queue.shift() ?? null;
    if (current)
      process.stdout.write(`${requestLine(current)}\n  [a] once  [s] session  [p] persist  [d] deny  [q] quit > `);
  };
  const first = check(await c.call({ op: 'subscribe' }));
  queue.push(...(first.requests ?? []));
  next();
  readline.emitKeypressEvents(process.stdin);
  process.stdin.setRawMode(true);
  await new Promise<void>((resolve) => {
    const keys: Record<string, string> = { a: 'once', s: 'session', p: 'persist', d: 'deny' };
    process.stdin.on('keypress', (_s: string, key: { name?: string; ctrl?: boolean }) => {
      if (key.name === 'q' || (key.ctrl && key.name === 'c')) return resolve();
      const d = key.name ? keys[key.name] : undefined;
      if (!d || !current) return;
      const id = current.id;
      process.stdout.write(`${d}\n`);
      void c.call({ op: 'decide', id, decision: d }).then((r) => {
        if (!r.ok) process.stdout.write(`  ${id}: ${r.error?.message} [${r.error?.code}]\n`);
      });
    });
    void c.closed.then(resolve);
  });
  process.stdin.setRawMode(false);
  process.stdin.pause();
  c.close();
}

export function register(program: Command): void {
  const cmd = program
    .command('approvals')
    .description('list and decide the actions held for a human (docs/approvals.md)')
    .option('--json', 'one JSON object per line')
    .option('--follow', 'keep the connection: print each new request and each outcome as it happens')
    .option('--watch', 'interactive: show each request as it arrives and take a key to decide')
    .addOption(new Option('--socket <path>', 'the approvals socket').env('LEASH_APPROVALS_SOCKET'))
    .action(async (o: { json?: boolean; follow?: boolean; watch?: boolean }, self: Command) => {
      const path = socketOf(self);
      if (o.watch) return watch(path);
      const print = (v: PendingView) =>
        process.stdout.write(o.json ? JSON.stringify({ event: 'request', request: v }) + '\n' : requestLine(v) + '\n');
      const c = await connect(path, (ev) => {
        if (ev.event === 'request') print(ev.request);
        else if (o.json) process.stdout.write(JSON.stringify(ev) + '\n');
        else
          process.stdout.write(
            `${ev.id}: ${ev.action} (${ev.reason}${ev.by ? ` by ${ev.by.account ?? ev.by.uid}` : ''}${ev.how ? `, ${ev.how}` : ''})\n`,
          );
      });
      const r = check(await c.call({ op: o.follow ? 'subscribe' : 'list' }));
      const list = r.requests ?? [];
      if (o.json && !o.follow) process.stdout.write(JSON.stringify({ requests: list }) + '\n');
      else for (const v of list) print(v);
      // Silence would read as a hung or broken command.
      if (!o.json && list.length === 0)
        process.stdout.write(o.follow ? 'no pending requests; waiting for new ones\n' : 'no pending requests\n');
      if (!o.follow) return void c.close();
      await c.closed;
      throw new LeashError(
        'approvals_unreachable',
        'the approvals socket closed the connection (the service stopped?)',
      );
    });

  cmd
    .command('allow <id>')
    .description('allow a pending request: --once (this action), --session, or --persist (an allow entry)')
    .option('--once', 'this action only')
    .option('--session', 'tools: until the gate exits or the tool changes; host surfaces: until the next reconcile')
    .option('--persist', "for good: an allow entry in the subject's agent profile, recorded as its acknowledgement")
    .option('--json', 'the outcome as JSON')
    .action(
      async (
        id: string,
        o: { once?: boolean; session?: boolean; persist?: boolean; json?: boolean },
        self: Command,
      ) => {
        const picked = (['once', 'session', 'persist'] as const).filter((k) => o[k]);
        if (picked.length !== 1)
          throw new LeashError('usage', 'say how: exactly one of --once, --session, --persist', { given: picked });
        await decide(self, id, picked[0]!, !!o.json);
      },
    );

  cmd
    .command('deny <id>')
    .description('deny a pending request')
    .option('--json', 'the outcome as JSON')
    .action(async (id: string, o: { json?: boolean }, self: Command) => decide(self, id, 'deny', !!o.json));
}
