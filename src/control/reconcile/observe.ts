import type { Config } from '../config/types.js';
import { isLeashError } from '../../errors.js';
import { createResolver, resolveSubject } from '../policy/resolve.js';
import { loadPolicyState, stateCache, type StateCache } from '../policy/state.js';
import { warmBindings } from '../policy/bindings.js';
import type { PasswdSource } from '../subjects/discovery.js';
import { discoverAsync } from '../subjects/discovery.js';
import { assignPorts, PORT_RESERVED } from '../subjects/ports.js';
import type { Observation } from './plan.js';

export interface ObserveOptions {
  /** The floor, or how to re-read it (a SIGHUP re-reads leash.yaml too; a failed read changes nothing). */
  config: Config | (() => Config);
  stateDir: string;
  passwd?: PasswdSource;
  /** Kept by a caller that observes again and again (the service): see observeCache. */
  cache?: ObserveCache;
}

/**
 * What the service keeps from one pass to the next: the parsed profiles and bindings (by text) and each subject's
 * resolution (by its inputs). A pass then re-reads every file but parses and resolves only what changed.
 */
export interface ObserveCache {
  state: StateCache;
  resolver: ReturnType<typeof createResolver>;
}

export function observeCache(): ObserveCache {
  return { state: stateCache(), resolver: createResolver() };
}

/** What the next pass would otherwise make (the bindings' entries: warmBindings), for a caller with time to spare. */
export function warmObserveCache(cache: ObserveCache): void {
  warmBindings(cache.state.bindings);
}

/**
 * The I/O half of a reconcile pass: passwd, ports, bindings, profiles -> an Observation for
 * planReconcile. Wholesale failures (passwd, port map, bindings file) become `ok: false`. With no
 * agent accounts nothing under the state directory is created.
 */
export async function observe(opts: ObserveOptions): Promise<Observation> {
  try {
    const config = typeof opts.config === 'function' ? opts.config() : opts.config;
    const d = await discoverAsync(config.user, opts.passwd);
    let ports: Record<string, { port: number }> = {};
    if (d.mode === 'multi') {
      const a = await assignPorts(opts.stateDir, d.subjects);
      ports = a.ports;
    }
    const state = loadPolicyState(config, opts.stateDir, opts.cache?.state);
    const resolve = opts.cache
      ? (s: (typeof d.subjects)[number]) => opts.cache!.resolver.resolve(s, state)
      : (s: (typeof d.subjects)[number]) => resolveSubject(s, state);
    const observation: Observation = {
      ok: true,
      mode: d.mode,
      warnings: d.warnings,
      subjects: d.subjects.map((subject) => ({
        subject,
        // Single-subject: the one listener on the reserved port. Multi: the account's port for life, or
        // none (the pool is exhausted) and that subject fails alone.
        port: d.mode === 'single' ? PORT_RESERVED : (ports[subject.account]?.port ?? null),
        resolution: resolve(subject),
      })),
    };
    opts.cache?.resolver.endPass();
    return observation;
  } catch (e) {
    if (isLeashError(e)) return { ok: false, code: e.code, message: e.message };
    return { ok: false, code: 'reconcile_error', message: (e as Error).message };
  }
}
