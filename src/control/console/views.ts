/**
 * What the console's subjects and profiles pages show, read from disk at each request exactly as
 * the service resolves it (src/control/policy/resolve.ts): each subject's bindings, its resolved policy per
 * surface with the layer each list came from (floor, global=…, agent:…=…), the enforcers' state;
 * each profile read-only with the loosening findings a bind of it would raise (src/control/policy/loosen.ts).
 */
import type { Config } from '../config/types.js';
import { SURFACES } from '../../engine/types.js';
import { parseMetricsText, summarize, type LiveSummary } from '../../metrics/metrics.js';
import { fetchMetrics } from '../../metrics/server.js';
import { readBindings } from '../policy/bindings.js';
import { judgeOverlay } from '../policy/loosen.js';
import { listProfiles, loadProfile } from '../policy/profiles.js';
import { foldedBase, resolveSubject } from '../policy/resolve.js';
import { loadPolicyState } from '../policy/state.js';
import { defaultPasswdSource, discoverFrom, readPasswd, type PasswdSource } from '../subjects/discovery.js';

export interface ViewContext {
  config: () => Config;
  stateDir: string;
  passwd?: PasswdSource;
  metricsSocket?: string | null;
}

const KEYS = ['mode', 'allow', 'deny', 'ask'] as const;

export async function subjectsView(ctx: ViewContext): Promise<unknown> {
  const config = ctx.config();
  const state = loadPolicyState(config, ctx.stateDir);
  const d = discoverFrom(readPasswd(ctx.passwd ?? defaultPasswdSource()), config.user);
  const enforced = {
    network: config.enforcers.network,
    filesystem: config.enforcers.filesystem,
    commands: config.enforcers.filesystem,
    tools: config.enforcers.tools,
  };
  const socket = ctx.metricsSocket !== undefined ? ctx.metricsSocket : config.logging.metrics_socket;
  let live: LiveSummary | null = null;
  if (socket) {
    const text = await fetchMetrics(socket).catch(() => null);
    live = text === null ? null : summarize(parseMetricsText(text));
  }
  const subjects = d.subjects.map((s) => {
    const r = resolveSubject(s, state);
    const bindings = Object.entries(state.bindings.bindings)
      .flatMap(([scope, b]) => (b ? [[scope, b] as const] : []))
      .filter(([scope]) => scope === 'global' || (s.kind === 'agent' && scope === `agent:${s.account}`))
      .map(([scope, b]) => ({ scope, profile: b.profile, acks: b.acks }));
    if (!r.ok)
      return {
        ...s,
        bindings,
        failure: { code: r.failure.code, scope: r.failure.scope, message: r.failure.message },
        surfaces: null,
      };
    const surfaces = Object.fromEntries(
      SURFACES.map((sf) => {
        const p = r.policy[sf] as unknown as Record<string, unknown>;
        const view: Record<string, unknown> = { enforced: enforced[sf] };
        for (const k of KEYS) view[k] = { value: p[k] ?? null, from: r.sources[`${sf}.${k}`] ?? 'floor' };
        return [sf, view];
      }),
    );
    return { ...s, bindings, layers: r.layers, hash: r.hash, fail_mode: r.policy.fail_mode, surfaces, failure: null };
  });
  return {
    user: config.user,
    mode: d.mode,
    warnings: d.warnings,
    enforcers: config.enforcers,
    service: live === null ? null : { subjects: live.subjects, decisions: live.decisions },
    subjects,
  };
}

export function profilesView(ctx: ViewContext): unknown {
  const config = ctx.config();
  const state = loadPolicyState(config, ctx.stateDir);
  const bindings = readBindings(ctx.stateDir).bindings;
  const base = foldedBase(state);
  return {
    base: base.ok ? base.name : null,
    profiles: listProfiles(ctx.stateDir).map((name) => {
      const st = loadProfile(ctx.stateDir, name);
      const boundAt = Object.entries(bindings)
        .flatMap(([scope, b]) => (b ? [[scope, b] as const] : []))
        .filter(([, b]) => b.profile === name)
        .map(([scope, b]) => ({ scope, acks: b.acks }));
      if (st.status !== 'ok')
        return { name, status: st.status, message: st.status === 'broken' ? st.message : null, boundAt };
      // What binding it for an agent would have to acknowledge: judged over the floor plus the global binding.
      const findings = base.ok ? judgeOverlay(base.policy, st.fragment) : [];
      return { name, status: 'ok', hash: st.hash, text: st.text, boundAt, findings };
    }),
  };
}
