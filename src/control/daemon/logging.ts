/**
 * Where the service's lines go: the journal when there is one (config logging.journal: operational lines and
 * decisions with fields of their own), else stderr as plain JSON lines; and the decision log, teed to the journal
 * and counted in the metrics.
 */
import type { LoadedConfig } from '../config/load.js';
import { LeashError } from '../../errors.js';
import { allowLinesOf, createDecisionLog, type DecisionLog } from '../../log/decisions.js';
import {
  createJournal,
  findJournalSocket,
  journalDestination,
  teeDecisionsToJournal,
  type Journal,
} from '../../log/journal.js';
import { createLogger, type Logger } from '../../log/logger.js';
import { countDecisions, type Metrics } from '../../metrics/metrics.js';
import { nativeCommon } from '../../native.js';

/** The component a service-side decision comes from, for its journal entry. */
function decisionComponent(rec: { surface: string; subject: unknown }): string {
  if (rec.surface === 'tools') return 'tools';
  const s = rec.subject as { dns?: unknown } | null;
  return s !== null && typeof s === 'object' && 'dns' in s ? 'dns' : 'proxy';
}

/** The journal (or null) and the root logger writing to it (a test's own logger when given). */
export function openJournal(loaded: LoadedConfig, given?: Logger): { journal: Journal | null; root: Logger } {
  const journalSocket = findJournalSocket(loaded.config.logging.journal);
  const journal: Journal | null =
    journalSocket === null
      ? null
      : createJournal({
          socket: journalSocket,
          send: (p, e) => nativeCommon().journalSend(p, e),
          allowSample: loaded.config.logging.journal_allows,
          identifier: 'leash',
        });
  const root =
    given ??
    createLogger({
      level: loaded.config.logging.level,
      ...(journal ? { destination: journalDestination(journal, process.stderr) } : {}),
    });
  return { journal, root };
}

/** The journal's own counts as a metric family, gathered at scrape time. */
export function collectJournal(metrics: Metrics, journal: Journal): void {
  metrics.collect(() => {
    const st = journal.stats();
    const dropped = Object.values(st.dropped).reduce((a, b) => a + b, 0);
    return [
      {
        name: 'leash_journal_entries',
        help: 'journal entries: sent, dropped (journald refused or did not keep up), allows_skipped (logging.journal_allows)',
        type: 'counter',
        values: [
          { value: st.sent, labels: { outcome: 'sent' } },
          { value: dropped, labels: { outcome: 'dropped' } },
          { value: st.allowsSkipped, labels: { outcome: 'allows_skipped' } },
        ],
      },
    ];
  });
}

/** Opens the decision log (a refusal is service_failed), teed to the journal and counted in the metrics. */
export function openDecisions(loaded: LoadedConfig, journal: Journal | null, metrics: Metrics): DecisionLog {
  try {
    let decisions = createDecisionLog({
      sink: loaded.config.logging.decisions,
      allows: allowLinesOf(loaded.config),
    });
    if (journal) decisions = teeDecisionsToJournal(decisions, journal, decisionComponent);
    return countDecisions(decisions, metrics);
  } catch (e) {
    throw new LeashError(
      'service_failed',
      `cannot open decision log ${loaded.config.logging.decisions}: ${(e as Error).message}`,
    );
  }
}
