import { holdClosed } from '../../dataplane/network/nft/closed.js';
import { hostRunner } from '../../dataplane/network/nft/run.js';
import { createLogger } from '../../log/logger.js';
import { defaultPasswdSource, discoverFrom, readPasswd } from '../subjects/discovery.js';
import { dnsPortFor, PORT_RESERVED } from '../subjects/ports.js';

/**
 * A start that failed (a bad floor, unreadable state, an enforcer that would not start) leaves no agent open: every
 * leash-* account keeps the chain a crash left (the last good data plane) or gets a closed one (src/dataplane/network/nft/closed.ts).
 * Discovery here needs no floor: the accounts are named by their prefix.
 */
export async function closeAfterFailedStart(): Promise<void> {
  const log = createLogger({ level: 'info' }).child({ component: 'service' });
  // Only the host's service holds the host's agents: under systemd (INVOCATION_ID), or started by hand with
  // LEASH_HOLD_CLOSED=1. A start that fails elsewhere (a test's, a `leash -c` tried on a config) changes no rule.
  if (!process.env.INVOCATION_ID && process.env.LEASH_HOLD_CLOSED !== '1') {
    log.error(
      { code: 'service_failed' },
      'start failed: no agent held closed (not under systemd; LEASH_HOLD_CLOSED=1 does it by hand)',
    );
    return;
  }
  try {
    const agents = discoverFrom(readPasswd(defaultPasswdSource()), null).subjects;
    const r = await holdClosed(
      hostRunner(),
      agents.map((a) => ({
        uid: a.uid,
        port: PORT_RESERVED,
        dnsPort: dnsPortFor(PORT_RESERVED),
        udp: 'drop' as const,
      })),
    );
    log.error(
      { code: 'service_failed', kept: r.kept.length, closed: r.closed.length, failed: r.failed },
      `start failed: ${r.kept.length + r.closed.length} agent account(s) held closed on the network (refused) until a start succeeds`,
    );
  } catch (e) {
    log.error(
      { code: 'service_failed', severity: 'critical' },
      `start failed and agents could not be held closed: ${(e as Error).message}`,
    );
  }
}
