import type { Config } from '../config/types.js';
import { isLeashError } from '../errors.js';
import { resolveSubject } from '../policy/resolve.js';
import { loadPolicyState } from '../policy/state.js';
import type { PasswdSource } from '../subjects/discovery.js';
import { discoverAsync } from '../subjects/discovery.js';
import { assignPorts, PORT_RESERVED } from '../subjects/ports.js';
import type { Observation } from './plan.js';

export interface ObserveOptions {
  /** The floor, or how to re-read it (a SIGHUP re-reads leash.yaml too; a failed read changes nothing). */
  config: Config | (() => Config);
  stateDir: string;
  passwd?: PasswdSource;
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
    const state = loadPolicyState(config, opts.stateDir);
    return {
      ok: true,
      mode: d.mode,
      warnings: d.warnings,
      subjects: d.subjects.map((subject) => ({
        subject,
        // Single-subject: the one listener on the reserved port. Multi: the account's port for life, or
        // none (the pool is exhausted) and that subject fails alone.
        port: d.mode === 'single' ? PORT_RESERVED : (ports[subject.account]?.port ?? null),
        resolution: resolveSubject(subject, state),
      })),
    };
  } catch (e) {
    if (isLeashError(e)) return { ok: false, code: e.code, message: e.message };
    return { ok: false, code: 'reconcile_error', message: (e as Error).message };
  }
}
