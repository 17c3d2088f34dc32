// The watcher's held `ask` events (native/watcher/hold.h) and the approvals queue: the arguments that turn the
// hold on in a watcher process, and the relay that asks the queue for each held event and sends the
// outcome back to the watcher process that holds it. Used by supervisor.ts.
import type { Asker } from '../../engine/approval.js';
import type { FromWatcher, WatcherAsk } from './protocol.js';
import type { Request } from './watcher-proc.js';

/** The watcher's bounds on held events and the surfaces' deadlines (ms): config approvals. */
export interface HoldBounds {
  max: number;
  perSubject: number;
  filesystemMs: number;
  commandsMs: number;
}

/** The watcher's hold arguments (watcher-main.ts): present only when there is a queue to ask. */
export function holdArgs(ask: Asker | undefined, h: HoldBounds | undefined): string[] {
  if (!ask || !h) return [];
  return [
    '--hold-max',
    String(h.max),
    '--hold-per-subject',
    String(h.perSubject),
    '--hold-filesystem-ms',
    String(h.filesystemMs),
    '--hold-commands-ms',
    String(h.commandsMs),
  ];
}

/**
 * Relays a watcher's held events to the approvals queue and the outcomes back to the watcher that holds
 * them. A watcher that exits has its requests cancelled (the queue answers them approval_cancelled, a
 * block): what it held is answered by its standby's takeover (denied) or, with no standby, was let go
 * with the group.
 */
export function createHoldRelay(
  ask: Asker | undefined,
  send: (p: object, msg: Request) => Promise<FromWatcher>,
): { ask(p: object, a: WatcherAsk): void; gone(p: object): void } {
  const open = new Map<object, Map<number, AbortController>>();
  return {
    ask(p, a) {
      let mine = open.get(p);
      if (!mine) open.set(p, (mine = new Map()));
      const ac = new AbortController();
      mine.set(a.id, ac);
      const what = a.surface === 'commands' ? { binary: a.subject } : { path: a.subject };
      const asked = ask
        ? ask({
            uid: a.uid,
            surface: a.surface,
            what,
            rule: a.rule,
            reason: 'ask_entry',
            pid: a.pid,
            cmdline: a.cmdline,
            sessionKey: a.subject,
            persistEntry: a.subject,
            signal: ac.signal,
          })
        : Promise.resolve({ action: 'block' as const, reason: 'approval_unavailable' as const, request: null });
      void asked.then((outcome) => {
        mine.delete(a.id);
        if (ac.signal.aborted) return;
        send(p, { op: 'answer', hold: a.id, outcome }).catch(() => {
          // The watcher is gone: its standby or the closed group answered the event.
        });
      });
    },
    gone(p) {
      const mine = open.get(p);
      open.delete(p);
      for (const ac of mine?.values() ?? []) ac.abort();
    },
  };
}
