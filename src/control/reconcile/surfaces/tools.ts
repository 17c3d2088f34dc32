/**
 * Tools in the service: the gate socket (src/tools/remote/socket.ts) that `leash mcp` and `leash terminal` ask
 * for a subject's compiled gate policy and commands policy, by the peer's UID. toolsSubjectOf compiles a subject's
 * gate policy before any surface is applied (a policy that does not compile fails the subject alone); apply puts the
 * compiled policies in force once every other surface took the subject.
 */
import fs from 'node:fs';
import type { Config } from '../../config/types.js';
import { maskSecrets } from '../../../engine/index.js';
import { compileGatePolicy, type CompiledGatePolicy } from '../../../tools/judge/compile.js';
import { GATE_ENGINE } from '../../../tools/judge/compile.js';
import { gatePolicyOf } from '../../../tools/judge/from-config.js';
import { createToolsSocketServer, DEFAULT_TOOLS_SOCKET } from '../../../tools/remote/socket.js';
import type { DecisionLog } from '../../../log/decisions.js';
import type { Surface } from '../../../dataplane/contract.js';
import { drive, type Driven } from '../execute.js';
import type { ApplyAction } from '../plan.js';
import type { Asker } from '../../../engine/approval.js';
import type { Logger } from '../../../log/logger.js';

export interface ToolsSurfaceOptions {
  config: Config;
  decisions: DecisionLog;
  /** Gate socket path (default LEASH_TOOLS_SOCKET or /run/leash/tools.sock). */
  socket?: string;
  /** Each judge request's time, for the metrics (tools_judge). */
  onJudge?: (seconds: number) => void;
  /** The approvals queue: a gate's asked calls are held for it (docs/approvals.md). */
  ask?: Asker;
  /** Where a dropped session approval is said. */
  logger?: Logger;
}

/** What the gate socket holds for one subject: its compiled gate policy and what `leash terminal` asks for. */
export interface ToolsSubject {
  uid: number;
  gate: CompiledGatePolicy;
  commands: { fail_mode: string; enforce?: 'shadow'; commands: unknown };
}

/** A subject's gate policy compiled (a throw fails the subject alone) and its commands policy as the terminal takes it. */
export function toolsSubjectOf(a: ApplyAction): ToolsSubject {
  const shadow = a.policy.enforce === 'shadow';
  return {
    uid: a.uid,
    gate: compileGatePolicy(gatePolicyOf(a.policy), a.policy.fail_mode, GATE_ENGINE, { shadow }),
    commands: { fail_mode: a.policy.fail_mode, ...(shadow ? { enforce: 'shadow' } : {}), commands: a.policy.commands },
  };
}

export async function startToolsSurface(o: ToolsSurfaceOptions): Promise<Driven> {
  const gate = new Map<number, CompiledGatePolicy>();
  // What `leash terminal` asks for over the same socket (op commands_policy), per subject.
  const commandsOf = new Map<number, ToolsSubject['commands']>();
  const sock = o.socket ?? process.env.LEASH_TOOLS_SOCKET ?? DEFAULT_TOOLS_SOCKET;
  fs.mkdirSync(sock.slice(0, sock.lastIndexOf('/')) || '/', { recursive: true, mode: 0o755 });
  const server = await createToolsSocketServer({
    path: sock,
    log: o.decisions,
    mask: maskSecrets,
    policyForUid: (uid) => gate.get(uid) ?? null,
    commandsPolicyForUid: (uid) => commandsOf.get(uid) ?? null,
    ...(o.onJudge ? { onJudge: o.onJudge } : {}),
    ...(o.ask ? { ask: o.ask } : {}),
    onSessionDropped: (e) =>
      o.logger?.info(
        { uid: e.uid, tool: e.tool, request: e.request },
        'tools session approval dropped: the server changed the tool schema',
      ),
  });
  const withdraw = (uid: number) => {
    gate.delete(uid);
    commandsOf.delete(uid);
  };
  const surface: Surface<ToolsSubject> = {
    surface: 'tools',
    async apply(list) {
      for (const t of list) {
        gate.set(t.uid, t.gate);
        commandsOf.set(t.uid, t.commands);
      }
      return new Map();
    },
    async deny(w) {
      withdraw(w.uid);
    },
    async orphan(w) {
      withdraw(w.uid);
    },
    enforcing: () => ({ surface: 'tools', subjects: gate.size, uids: [...gate.keys()] }),
    close: () => server.close(),
  };
  return drive(surface, toolsSubjectOf);
}
