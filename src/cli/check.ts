import { isIP } from 'node:net';
import type { Command } from 'commander';
import { loadConfig } from '../control/config/load.js';
import { EXIT, LeashError } from '../errors.js';
import type { NetworkSubject, Surface, SubjectOf, Verdict } from '../engine/types.js';
import type { ToolVerdict } from '../tools/judge/decide.js';
import { compilePolicy, decide, maskInputs } from '../engine/index.js';
import { compileGatePolicy } from '../tools/judge/compile.js';
import { GATE_ENGINE } from '../tools/judge/compile.js';
import { gatePolicyOf } from '../tools/judge/from-config.js';
import { configPath, parseSurface, print, printJson } from './context.js';
import { runCheckTool } from './mcp.js';
import { toPolicyInput } from '../control/config/policy-input.js';
import { layerOf, subjectOptions, subjectView } from './subject.js';

/** The engine's verdict, or for a tool the gate's when an argument rule decided (source `args`, `at` where). */
type CheckVerdict = Omit<Verdict, 'reason' | 'source'> & {
  reason: string;
  source: Verdict['source'] | 'args' | 'subject';
  at?: string;
  /** The layer the deciding list (or mode) came from: floor, global=NAME or agent:ACCOUNT=NAME. */
  layer?: string;
};

/** The dotted policy key a verdict's source names, for its layer (`network.allow`, `tools.args`). */
function sourceKey(surface: Surface, v: CheckVerdict): [string, string] {
  switch (v.source) {
    case 'allow':
    case 'deny':
    case 'mode':
      return [surface, v.source];
    case 'args':
      return ['tools', 'args'];
    case 'inspect':
      return ['tools', 'inspect'];
    default:
      return ['', 'fail_mode'];
  }
}

function bad(message: string, subject: string): LeashError {
  return new LeashError('subject_invalid', message, { subject });
}

/** `host:port`, `a.b.c.d:port` or `[v6]:port` -> a network subject. */
export function parseNetworkSubject(s: string, ip?: string): NetworkSubject {
  let host: string;
  let portText: string;
  if (s.trim() === '')
    throw bad('the network subject is empty: give host:port, ip:port or [v6]:port (example.com:443)', s);
  const v6 = /^\[([^\]]+)\]:(.*)$/.exec(s);
  if (v6) {
    host = v6[1]!;
    portText = v6[2]!;
    if (isIP(host) !== 6) throw bad(`${host} in brackets is not an IPv6 address`, s);
  } else {
    if (isIP(s) === 6) throw bad(`IPv6 needs brackets and a port: [${s}]:443`, s);
    const i = s.lastIndexOf(':');
    if (i < 0) throw bad(`network subject needs a port: ${s}:443`, s);
    host = s.slice(0, i);
    portText = s.slice(i + 1);
    if (host.includes(':')) throw bad(`IPv6 needs brackets: [address]:port`, s);
  }
  if (!/^\d{1,5}$/.test(portText) || Number(portText) < 1 || Number(portText) > 65535) {
    throw bad(`port must be 1-65535, not "${portText}"`, s);
  }
  const port = Number(portText);
  if (host === '') throw bad('host is empty', s);
  if (ip !== undefined && isIP(ip) === 0) throw bad(`--ip ${ip} is not an IP address`, ip);
  if (isIP(host)) return { domain: null, ip: host, port };
  if (!/^[A-Za-z0-9.*_-]+$/.test(host)) throw bad(`"${host}" is not a host name or IP address`, s);
  return { domain: host, ip: ip ?? null, port };
}

export function parseSubject(surface: Surface, s: string, opts: { ip?: string; inputs?: string }): SubjectOf[Surface] {
  switch (surface) {
    case 'network':
      return parseNetworkSubject(s, opts.ip);
    case 'filesystem':
      if (!s.startsWith('/')) throw bad('a filesystem subject is an absolute path', s);
      return { path: s };
    case 'commands':
      if (s === '') throw bad('a command subject is a binary name or path', s);
      return { binary: s };
    case 'tools': {
      let inputs: unknown = undefined;
      if (opts.inputs !== undefined) {
        try {
          inputs = JSON.parse(opts.inputs);
        } catch {
          throw bad('--inputs is not valid JSON', opts.inputs);
        }
      }
      if (s === '') throw bad('a tool subject is a tool name', s);
      return inputs === undefined ? { name: s } : { name: s, inputs };
    }
  }
}

export function register(program: Command): void {
  const cmd = program
    .command('check <surface> <subject>')
    .description(
      'dry-run a decision as the service enforces it for a subject (network: host:port, ip:port or [v6]:port); exit 0 allow, 1 block',
    )
    .option('--ip <address>', 'network: the address the domain resolved to (judged too)')
    .option('--inputs <json>', 'tools: the tool call inputs as JSON (inspected)')
    .option('--json', 'print the verdict as JSON');
  subjectOptions(cmd).action(
    (
      surfaceArg: string,
      subjectArg: string,
      opts: { json?: boolean; ip?: string; inputs?: string; subject?: string; stateDir?: string },
      cmd: Command,
    ) => {
      const surface = parseSurface(surfaceArg);
      const subject = parseSubject(surface, subjectArg, opts);
      const { config } = loadConfig(configPath(cmd));
      const view = subjectView(config, opts);
      const r = view.resolution;
      let verdict: CheckVerdict;
      if (!r.ok) {
        // A subject that cannot be resolved is held fail-closed on files, exec and tools; its TCP gets no
        // chain (docs/profiles.md), so the honest answer for the network is "not judged at all".
        verdict = {
          action: surface === 'network' ? 'allow' : 'block',
          reason: r.failure.code,
          source: 'subject',
          rule: null,
        };
      } else {
        const policy = r.policy;
        verdict = decide(surface, subject as never, compilePolicy(toPolicyInput(policy)));
        if (surface === 'tools') {
          // The tools surface as the gate enforces it: the engine's decision, then the argument rules
          // (tools.args, strict_args) of the tool; the same judgment `leash mcp` makes on tools/call.
          const gate = compileGatePolicy(gatePolicyOf(policy), policy.fail_mode, GATE_ENGINE);
          const g = runCheckTool(subjectArg, opts.inputs ?? '{}', gate).verdict as unknown as ToolVerdict;
          if (g.action !== verdict.action || g.reason !== verdict.reason) {
            verdict = { ...verdict, action: g.action, reason: g.reason, rule: g.rule, source: 'args' };
            if (g.at !== undefined) verdict.at = g.at;
          }
        }
        const [section, key] = sourceKey(surface, verdict);
        verdict.layer = section ? layerOf(r.sources, section, key) : (r.sources.fail_mode ?? 'floor');
      }
      const enforced =
        surface === 'commands'
          ? config.enforcers.filesystem
          : config.enforcers[surface as 'network' | 'filesystem' | 'tools'];
      const forWhom = {
        account: view.account,
        layers: r.ok ? r.layers : null,
        ...(r.ok ? {} : { failure: { code: r.failure.code, scope: r.failure.scope, message: r.failure.message } }),
      };
      if (opts.json) {
        // Inputs are echoed masked, as they would be logged: a check must not print the secret it caught.
        const shown = 'inputs' in subject ? { ...subject, inputs: maskInputs(subject.inputs) } : subject;
        printJson({ surface, subject: shown, ...verdict, enforced, for: forWhom });
      } else {
        const from = verdict.layer !== undefined && verdict.layer !== 'floor' ? ` from ${verdict.layer}` : '';
        const by = !r.ok
          ? `subject ${view.account} cannot be resolved: ${r.failure.message}${surface === 'network' ? '; its TCP is not redirected' : ''}`
          : verdict.rule !== null
            ? `rule ${verdict.rule}${verdict.at !== undefined ? ` at ${verdict.at}` : ''}${from}`
            : `${verdict.source} default${from}`;
        print(
          `${verdict.action} ${surface} ${subjectArg}: ${verdict.reason} (${by})${enforced ? '' : ' [enforcer off: not enforced]'}`,
        );
        if (view.account !== null && r.ok && r.layers.length > 1)
          print(`  for ${view.account}: ${r.layers.join(' + ')}`);
        for (const f of verdict.findings ?? [])
          print(`  ${f.category} ${f.detector} at ${f.at}: ${f.masked} -> ${f.action}`);
      }
      process.exitCode = verdict.action === 'allow' ? EXIT.ok : EXIT.verdict;
    },
  );
}
