/**
 * The gate's view of a config or a resolved policy. The service's tools socket itself is run by
 * the tools surface (src/control/reconcile/surfaces/tools.ts), which serves every subject its own compiled gate policy.
 */
import { compilePolicy, decide } from '../../engine/index.js';
import type { ToolsSurfacePolicy } from '../../engine/types.js';
import type { ToolsGateFields } from './fields.js';
import type { ToolsEngine, ToolsGatePolicy } from './policy.js';

/**
 * A resolved policy's tools section as the gate reads it. The config schema carries the gate's
 * fields with the gate's defaults, so this is a copy, not a guess; `Effective` (a subject's
 * resolved policy) has the same tools section as a config.
 */
export function gatePolicyOf(c: { tools: ToolsSurfacePolicy & ToolsGateFields & { ask?: string[] } }): ToolsGatePolicy {
  const t = c.tools;
  return {
    mode: t.mode,
    allow: [...t.allow],
    deny: [...t.deny],
    ask: [...(t.ask ?? [])],
    inspect: { ...t.inspect },
    args: structuredClone(t.args),
    strict_args: t.strict_args,
    policed_methods: [...t.policed_methods],
    deny_methods: [...t.deny_methods],
    hide_denied: t.hide_denied,
    log_args: t.log_args,
    rules: structuredClone(t.rules),
    default: t.default,
    workspace: t.workspace,
    mapping: t.mapping,
    redact_output: t.redact_output,
    audit: t.audit,
  };
}

/** The engine functions the gate compiles against (the real engine, typed for the gate's seam). */
export const GATE_ENGINE: ToolsEngine = { compilePolicy, decide: decide as ToolsEngine['decide'] };
