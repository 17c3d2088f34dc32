/**
 * The service's metrics in OpenMetrics text (prom-client): what the service decides and how long
 * each stage takes, counted where it happens; what other processes know (the watcher's counters
 * and its judge-time histogram (leash_watcher_judge_seconds), subjects by state, host settings, the journal's counts) gathered
 * at scrape time from the collectors registered here, and merged with prom-client's aggregator
 * (the way it merges cluster workers).
 *
 * Families:
 *   leash_decisions_total{surface,action,reason}      every decision (service and watcher)
 *   leash_stage_seconds{stage}                        proxy_setup, dns, tools_judge, reconcile
 *   leash_watcher_judge_seconds                       the watcher: event read to answer, subject-era events
 *   leash_watcher_queue_depth                         decision lines waiting for the watcher's drain
 *   leash_watcher_allows_counted_total                allows counted instead of written (log pressure)
 *   leash_watcher_foreign_pid_events_total{surface}   events from outside the watcher's PID namespace (allowed)
 *   leash_pid_namespace{process}                      the service's and the watcher's PID namespace (its inode)
 *   leash_approvals_pending{surface}                  actions held now for a human
 *   leash_approvals_decided_total{surface,outcome}    held actions answered (approved_*, approval_denied, _timeout…)
 *   leash_approvals_timeouts_total{surface}           held actions whose deadline passed
 *   leash_subjects{state}                             active, failed, orphaned
 *   leash_host_setting{setting}                       the hardening settings in force (1) or not (0)
 *   leash_journal_entries_total{outcome}              sent, dropped, allows_skipped
 */
import { AggregatorRegistry, Counter, Histogram, Registry, openMetricsContentType } from 'prom-client';
import type { DecisionWriter } from '../log/decisions.js';

export type Stage = 'proxy_setup' | 'dns' | 'tools_judge' | 'reconcile';

/** A family gathered at scrape time, in prom-client's JSON form (`registry.getMetricsAsJSON()`). */
export interface MetricFamily {
  name: string;
  help: string;
  type: 'counter' | 'gauge' | 'histogram';
  aggregator?: 'sum' | 'max' | 'first';
  values: Array<{ value: number; labels: Record<string, string | number>; metricName?: string }>;
}

export interface Metrics {
  /** Counts one decision made in this process. */
  decision(rec: { surface: string; action: string; reason: string }, count?: number): void;
  /** Observes one stage's duration, in seconds. */
  observe(stage: Stage, seconds: number): void;
  /** Adds a collector whose families are gathered at each scrape; returns its removal. */
  collect(fn: () => MetricFamily[] | Promise<MetricFamily[]>): () => void;
  /** The OpenMetrics text of every family. */
  text(): Promise<string>;
  readonly contentType: string;
}

/** Stage buckets (seconds): 10 µs to 10 s. */
const STAGE_BUCKETS = [1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 0.5, 1, 2.5, 10];

export function createMetrics(): Metrics {
  const registry = new Registry<typeof openMetricsContentType>();
  registry.setContentType(openMetricsContentType);
  const decisions = new Counter({
    name: 'leash_decisions',
    help: 'decisions by surface, action and reason',
    labelNames: ['surface', 'action', 'reason'] as const,
    registers: [registry],
  });
  const stages = new Histogram({
    name: 'leash_stage_seconds',
    help: 'time per decision stage: proxy_setup (accept to decision), dns (query to answer), tools_judge, reconcile (one pass)',
    labelNames: ['stage'] as const,
    buckets: STAGE_BUCKETS,
    registers: [registry],
  });
  const collectors = new Set<() => MetricFamily[] | Promise<MetricFamily[]>>();
  return {
    contentType: openMetricsContentType,
    decision(rec, count = 1) {
      decisions.inc({ surface: rec.surface, action: rec.action, reason: rec.reason }, count);
    },
    observe(stage, seconds) {
      stages.observe({ stage }, seconds);
    },
    collect(fn) {
      collectors.add(fn);
      return () => collectors.delete(fn);
    },
    async text() {
      const own = await registry.getMetricsAsJSON();
      const gathered: MetricFamily[] = [];
      for (const c of collectors) {
        try {
          // Summed with the service's own families of the same name (prom-client needs the aggregator named).
          for (const f of await c()) gathered.push({ aggregator: 'sum', ...f });
        } catch {
          // A collector that cannot answer now (the watcher respawning) leaves its families out of this scrape.
        }
      }
      // Families of the same name (decisions from the service and from the watcher) are summed.
      const merged = AggregatorRegistry.aggregate<typeof openMetricsContentType>([own, gathered]);
      merged.setContentType(openMetricsContentType);
      return merged.metrics();
    },
  };
}

/** A histogram family from fixed buckets counted elsewhere (the watcher's judge time). */
export function histogramFamily(
  name: string,
  help: string,
  labels: Record<string, string>,
  h: { bounds: number[]; buckets: number[]; sum: number; count: number },
): MetricFamily {
  const values: MetricFamily['values'] = [];
  let cum = 0;
  for (let i = 0; i < h.bounds.length; i++) {
    cum += h.buckets[i] ?? 0;
    values.push({ value: cum, labels: { ...labels, le: h.bounds[i]! }, metricName: `${name}_bucket` });
  }
  values.push({ value: h.count, labels: { ...labels, le: '+Inf' }, metricName: `${name}_bucket` });
  values.push({ value: h.sum, labels, metricName: `${name}_sum` });
  values.push({ value: h.count, labels, metricName: `${name}_count` });
  return { name, help, type: 'histogram', aggregator: 'sum', values };
}

/** A process's PID namespace as a gauge whose value is the namespace's inode (4026531836: the host's initial one). */
export function pidNamespaceFamily(process: 'service' | 'watcher', inode: number): MetricFamily {
  return {
    name: 'leash_pid_namespace',
    help: "the PID namespace a process runs in (its inode; 4026531836 is the host's initial one)",
    type: 'gauge',
    aggregator: 'first',
    values: [{ value: inode, labels: { process } }],
  };
}

/**
 * The decision log with each decision also counted (leash_decisions_total). Tails (the tools
 * socket's repeated allows) are parsed once each: they repeat by design.
 */
export function countDecisions<L extends DecisionWriter>(log: L, metrics: Metrics): L {
  const tails = new Map<string, { surface: string; reason: string }>();
  const counted: DecisionWriter = {
    write(rec) {
      const ref = log.write(rec);
      metrics.decision(rec);
      return ref;
    },
  };
  if (log.writeTail) {
    const writeTail = log.writeTail.bind(log);
    counted.writeTail = (action, tail) => {
      const ref = writeTail(action, tail);
      let t = tails.get(tail);
      if (t === undefined) {
        const o = JSON.parse(`{"ref":""${tail}`) as { surface?: unknown; reason?: unknown };
        t = { surface: String(o.surface), reason: String(o.reason) };
        if (tails.size < 4096) tails.set(tail, t);
      }
      metrics.decision({ surface: t.surface, action, reason: t.reason });
      return ref;
    };
  }
  if (log.allowsElsewhere) {
    const allowsElsewhere = log.allowsElsewhere.bind(log);
    counted.allowsElsewhere = (uid, surface, reason, allowed, written) => {
      if (allowed > 0) metrics.decision({ surface, action: 'allow', reason }, allowed);
      allowsElsewhere(uid, surface, reason, allowed, written);
    };
  }
  return { ...log, ...counted };
}

/** One sample of a metrics text: its name (with _total/_bucket…), labels and value. */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses OpenMetrics / Prometheus text samples (comments skipped). Enough for `leash status` and the tests. */
export function parseMetricsText(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_x, c: string) => (c === 'n' ? '\n' : c));
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

/** What `leash status` shows of a running service's metrics. */
export interface LiveSummary {
  /** Per surface: allows, blocks, shadow mode's would-be blocks, and the rest (asks). */
  decisions: Record<string, { allow: number; block: number; would_block: number; other: number }>;
  subjects: Record<string, number>;
  watcherQueueDepth: number | null;
  watcherAllowsCounted: number | null;
  journal: Record<string, number> | null;
  hostSettings: Record<string, number>;
  /** Held approvals: pending now, decided and timed out since start (all surfaces). */
  approvals: { pending: number; decided: number; timeouts: number } | null;
  /** The PID namespace (inode) of each process that reported one: service, watcher. */
  pidNamespaces: Record<string, number>;
  /** Events from outside the watcher's PID namespace, allowed unjudged (null: no watcher reported). */
  foreignPidEvents: number | null;
}

export function summarize(samples: Sample[]): LiveSummary {
  const s: LiveSummary = {
    decisions: {},
    subjects: {},
    watcherQueueDepth: null,
    watcherAllowsCounted: null,
    journal: null,
    hostSettings: {},
    approvals: null,
    pidNamespaces: {},
    foreignPidEvents: null,
  };
  for (const x of samples) {
    if (x.name === 'leash_decisions_total') {
      const d = (s.decisions[x.labels.surface ?? '?'] ??= { allow: 0, block: 0, would_block: 0, other: 0 });
      if (x.labels.action === 'allow') d.allow += x.value;
      else if (x.labels.action === 'block') d.block += x.value;
      else if (x.labels.action === 'would_block') d.would_block += x.value;
      else d.other += x.value;
    } else if (x.name === 'leash_subjects') s.subjects[x.labels.state ?? '?'] = x.value;
    else if (x.name === 'leash_watcher_queue_depth') s.watcherQueueDepth = x.value;
    else if (x.name === 'leash_watcher_allows_counted_total') s.watcherAllowsCounted = x.value;
    else if (x.name === 'leash_journal_entries_total') (s.journal ??= {})[x.labels.outcome ?? '?'] = x.value;
    else if (x.name === 'leash_host_setting') s.hostSettings[x.labels.setting ?? '?'] = x.value;
    else if (x.name === 'leash_pid_namespace') s.pidNamespaces[x.labels.process ?? '?'] = x.value;
    else if (x.name === 'leash_watcher_foreign_pid_events_total')
      s.foreignPidEvents = (s.foreignPidEvents ?? 0) + x.value;
    else if (x.name === 'leash_approvals_pending')
      (s.approvals ??= { pending: 0, decided: 0, timeouts: 0 }).pending += x.value;
    else if (x.name === 'leash_approvals_decided_total')
      (s.approvals ??= { pending: 0, decided: 0, timeouts: 0 }).decided += x.value;
    else if (x.name === 'leash_approvals_timeouts_total')
      (s.approvals ??= { pending: 0, decided: 0, timeouts: 0 }).timeouts += x.value;
  }
  return s;
}
