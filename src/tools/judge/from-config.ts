/**
 * The gate's view of a config or a resolved policy. The service's tools socket itself is run by
 * the tools surface (src/control/reconcile/surfaces/tools.ts), which serves every subject its own compiled gate policy.
 */
import type { ToolsSurfacePolicy } from '../../engine/types.js';
import type { ToolsGateFields } from './fields.js';
import type { ToolsGatePolicy } from './compile.js';

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
