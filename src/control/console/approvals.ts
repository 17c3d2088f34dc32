/**
 * The console's side of the approvals queue: a client of the approvals socket (docs/approvals.md:
 * `list`, `decide`, `subscribe`), so the socket's own four-UID rule also holds for the console
 * process. The console subscribes only while at least one browser has its live stream open: an
 * open console page is a reachable approver, a console nobody looks at is not.
 */
import type { Decision } from '../../engine/approval.js';
import { LeashError, type ErrorCode } from '../../errors.js';
import { check, connect } from '../approvals/client.js';
import type { PendingView, QueueEvent } from '../approvals/queue.js';

export interface ApprovalsPort {
  list(): Promise<PendingView[]>;
  decide(id: string, decision: Decision): Promise<{ action: string; reason: string }>;
  /** Subscribes (counts as a reachable approver) until the returned function is called. */
  subscribe(onEvent: (ev: QueueEvent) => void, onClose: () => void): Promise<() => void>;
}

export function socketApprovals(path: string): ApprovalsPort {
  return {
    async list() {
      const c = await connect(path);
      try {
        return check(await c.call({ op: 'list' })).requests ?? [];
      } finally {
        c.close();
      }
    },
    async decide(id, decision) {
      const c = await connect(path);
      try {
        const r = check(await c.call({ op: 'decide', id, decision }));
        if (!r.outcome) throw new LeashError('internal' as ErrorCode, 'the approvals socket answered no outcome');
        return r.outcome;
      } finally {
        c.close();
      }
    },
    async subscribe(onEvent, onClose) {
      const c = await connect(path, onEvent);
      void c.closed.then(onClose);
      const r = await c.call({ op: 'subscribe' });
      if (!r.ok) {
        c.close();
        check(r);
      }
      for (const request of r.requests ?? []) onEvent({ event: 'request', request });
      return () => c.close();
    },
  };
}
