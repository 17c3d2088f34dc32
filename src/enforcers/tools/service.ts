/**
 * The tools enforcer as the service starts it: the gate socket, judging each caller (by
 * SO_PEERCRED) against that subject's tools policy. Register `toolsEnforcer` in
 * src/service/start.ts ENFORCERS.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Config } from '../../config/types.js';
import { compilePolicy, decide, maskSecrets } from '../../engine/index.js';
import type { EnforcerFactory, ServiceContext } from '../../service/start.js';
import { compileGatePolicy, type CompiledGatePolicy, type ToolsEngine, type ToolsGatePolicy } from './policy.js';
import { createToolsSocketServer, DEFAULT_TOOLS_SOCKET } from './socket.js';

/**
 * A resolved policy's tools section as the gate reads it. The config schema carries the gate's
 * fields with the gate's defaults, so this is a copy, not a guess; `Effective` (a subject's
 * resolved policy) has the same tools section as a Config.
 */
export function gatePolicyOf(c: Pick<Config, 'tools'>): ToolsGatePolicy {
  const t = c.tools;
  return {
    mode: t.mode,
    allow: [...t.allow],
    deny: [...t.deny],
    inspect: { ...t.inspect },
    args: structuredClone(t.args),
    strict_args: t.strict_args,
    policed_methods: [...t.policed_methods],
    deny_methods: [...t.deny_methods],
    hide_denied: t.hide_denied,
    log_args: t.log_args,
  };
}

/** The engine functions the gate compiles against (the real engine, typed for the gate's seam). */
export const GATE_ENGINE: ToolsEngine = { compilePolicy, decide: decide as ToolsEngine['decide'] };

/**
 * Maps a UID to its compiled gate policy: the single-subject path (the configured account).
 * Anyone else gets null, which denies every policed call (`no_policy`). Per-subject resolution
 * (agent accounts) plugs in here when it lands. Throws GatePolicyError when the tools section
 * does not compile, so a reload keeps the policy in force and a start is refused.
 */
export function policiesFromConfig(ctx: ServiceContext): (uid: number) => CompiledGatePolicy | null {
  const { config, account } = ctx.loaded;
  const compiled = compileGatePolicy(gatePolicyOf(config), config.fail_mode, GATE_ENGINE);
  return (uid) => (account && uid === account.uid ? compiled : null);
}

/**
 * The commands policy `leash terminal` asks for over the same socket (op `commands_policy`): the
 * configured account's `fail_mode` and `commands` section (`commands.args` included), anyone else null (the terminal then denies everything: `no_policy`).
 */
export function commandsPoliciesFromConfig(ctx: Pick<ServiceContext, 'loaded'>): (uid: number) => unknown {
  const { config, account } = ctx.loaded;
  const policy = { fail_mode: config.fail_mode, commands: config.commands }; // commands.args included
  return (uid) => (account && uid === account.uid ? policy : null);
}

export const toolsEnforcer: EnforcerFactory = {
  name: 'tools',
  enabled: (loaded) => loaded.config.enforcers.tools,
  async start(ctx) {
    const sock = process.env.LEASH_TOOLS_SOCKET ?? DEFAULT_TOOLS_SOCKET;
    fs.mkdirSync(path.dirname(sock), { recursive: true, mode: 0o755 });
    let policyForUid = policiesFromConfig(ctx);
    let commandsPolicyForUid = commandsPoliciesFromConfig(ctx);
    const server = await createToolsSocketServer({
      path: sock,
      log: ctx.decisions,
      mask: maskSecrets,
      policyForUid: (uid) => policyForUid(uid),
      commandsPolicyForUid: (uid) => commandsPolicyForUid(uid),
    });
    return {
      name: 'tools',
      async reload(next) {
        policyForUid = policiesFromConfig(next);
        commandsPolicyForUid = commandsPoliciesFromConfig(next);
      },
      close: () => server.close(),
    };
  },
};
