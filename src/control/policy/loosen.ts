import { effectiveNamespaces } from '../../dataplane/watcher/namespaces.js';
import { compilePolicy, decide, isGlob, type CompiledPolicy } from '../../engine/index.js';
import { SURFACES, type Surface } from '../../engine/types.js';
import type { InspectAction } from '../../engine/types.js';
import { normalizeToolName } from '../../engine/index.js';
import type { ArgRuleSpec, ArgRulesSpec, ToolArgsSpec } from '../../tools/judge/fields.js';
import type { Effective, Fragment } from './fragment.js';
import { canonicalJson, fold, INSPECT_CATEGORIES } from './fragment.js';

/**
 * One way a change widens what a subject may do. `token` (`field:value`) is exactly what
 * `--ack` must carry; `words` says it the way the engine would decide it.
 */
export interface Loosening {
  field: string;
  value: string;
  token: string;
  words: string;
}

function l(field: string, value: string, words: string): Loosening {
  return { field, value, token: `${field}:${value}`, words };
}

/** How much inspection lets through: block < log < allow (log passes the call, it only records it). */
const INSPECT_RANK: Record<InspectAction, number> = { block: 0, log: 1, allow: 2 };

/**
 * `before`'s allow lists alone (deny lists empty), compiled once per base: "was this already allowed by an entry?".
 * A reconcile judges every subject's binding against the same base object (the floor): at 1,000 subjects it was
 * compiled 1,000 times.
 */
const allowOnlyOf = new WeakMap<Effective, CompiledPolicy>();
function allowOnly(before: Effective): CompiledPolicy {
  let c = allowOnlyOf.get(before);
  if (!c) allowOnlyOf.set(before, (c = compileAllowOnly(before)));
  return c;
}

function compileAllowOnly(before: Effective): CompiledPolicy {
  const wl = (sp: { allow: string[] }) => ({ mode: 'whitelist' as const, allow: [...sp.allow], deny: [] });
  return compilePolicy({
    fail_mode: 'closed',
    network: wl(before.network),
    filesystem: wl(before.filesystem),
    commands: wl(before.commands),
    tools: { ...wl(before.tools), inspect: { secrets: 'allow', pii: 'allow', priv_esc: 'allow' } },
  });
}

const IPV4 = /^\d{1,3}(\.\d{1,3}){3}$/;

/**
 * True when everything `entry` would allow is already allowed by an entry of the base's allow list, asked of the
 * engine itself. Only shapes whose whole reach is one engine question are judged this way: a plain path (a
 * directory entry covers its subtree, so covering the path covers all it reaches), a port-less host or IP (port 0
 * is matched only by port-less base entries, which match every port), a command, a tool name. Globs, CIDRs,
 * wildcards and port-pinned entries are compared as strings: a new spelling of them still asks for consent.
 */
function coveredByBase(surface: Surface, entry: string, base: CompiledPolicy): boolean {
  const allowed = (v: { action: string; source: string }) => v.action === 'allow' && v.source === 'allow';
  switch (surface) {
    case 'filesystem':
      return !isGlob(entry) && allowed(decide('filesystem', { path: entry }, base));
    case 'commands':
      return !isGlob(entry) && allowed(decide('commands', { binary: entry }, base));
    case 'tools':
      return allowed(decide('tools', { name: entry, inputs: {} }, base));
    case 'network': {
      if (IPV4.test(entry)) return allowed(decide('network', { ip: entry, port: 0 }, base));
      if (/^[A-Za-z0-9.-]+$/.test(entry) && !entry.startsWith('.'))
        return allowed(decide('network', { domain: entry, port: 0 }, base));
      return false;
    }
  }
}

/**
 * Every loosening from `before` to `after`, not the first: the mode flipped to default-allow,
 * an allow entry a whitelist did not have, a deny entry dropped (`<surface>.unset.deny`), an ask
 * entry a whitelist did not have (`<surface>.ask`), an ask entry a blacklist dropped (`<surface>.unset.ask`),
 * fail_mode opened, inspection lowered, an enforcer switched off, UDP allowed, a DNS resolver
 * added, a watched path dropped. Tightenings are not reported.
 */
export function loosenings(before: Effective, after: Effective): Loosening[] {
  const out: Loosening[] = [];
  let base: CompiledPolicy | null = null;
  if (before.fail_mode !== 'open' && after.fail_mode === 'open') {
    out.push(l('fail_mode', 'open', 'fail_mode closed -> open: when no decision can be made, every surface allows'));
  }
  if (before.enforce !== 'shadow' && after.enforce === 'shadow') {
    out.push(
      l(
        'enforce',
        'shadow',
        'enforce -> shadow: nothing is blocked any more, every block is only logged as would_block',
      ),
    );
  }
  for (const s of SURFACES) {
    const b = before[s];
    const a = after[s];
    if (b.mode === 'whitelist' && a.mode === 'blacklist') {
      out.push(
        l(
          `${s}.mode`,
          'blacklist',
          `${s} mode whitelist -> blacklist: default-allow, anything not denied passes (allow is no longer consulted)`,
        ),
      );
    }
    if (b.mode === 'whitelist' && a.mode === 'whitelist') {
      for (const e of a.allow) {
        if (b.allow.includes(e)) continue;
        base ??= allowOnly(before);
        if (!coveredByBase(s, e, base))
          out.push(l(`${s}.allow`, e, `${s} whitelist allows ${e}: allow_entry where it was not_allowed`));
      }
    }
    // ask (docs/approvals.md): in a whitelist a new ask entry lets an approver pass what was blocked
    // (so an ask replacing a deny needs consent twice: the deny dropped and the ask added); in a
    // blacklist a dropped ask entry lets pass unasked what a human was asked about.
    const bAsk = b.ask ?? [];
    const aAsk = a.ask ?? [];
    if (b.mode === 'whitelist' && a.mode === 'whitelist') {
      for (const e of aAsk) {
        if (bAsk.includes(e) || b.allow.includes(e)) continue;
        base ??= allowOnly(before);
        if (!coveredByBase(s, e, base))
          out.push(l(`${s}.ask`, e, `${s} whitelist asks about ${e}: an approver may pass what was not_allowed`));
      }
    }
    if (b.mode === 'blacklist' && a.mode === 'blacklist') {
      for (const e of bAsk) {
        if (!aAsk.includes(e))
          out.push(l(`${s}.unset.ask`, e, `${s} ask ${e} removed: blacklist mode passes it without asking`));
      }
    }
    for (const e of b.deny) {
      if (!a.deny.includes(e))
        out.push(l(`${s}.unset.deny`, e, `${s} deny ${e} removed: deny_entry no longer blocks it`));
    }
  }
  for (const c of INSPECT_CATEGORIES) {
    const b = before.tools.inspect[c];
    const a = after.tools.inspect[c];
    if (INSPECT_RANK[a] > INSPECT_RANK[b]) {
      out.push(l(`tools.inspect.${c}`, a, `tools inspect ${c} ${b} -> ${a}: an input with ${c} is no longer blocked`));
    }
  }
  for (const k of ['network', 'filesystem', 'tools'] as const) {
    if (before.enforcers[k] && !after.enforcers[k]) {
      out.push(l(`enforcers.${k}`, 'false', `${k} enforcer off: the surface is not enforced at all`));
    }
  }
  // Only an explicit ech: allow (whitelist -> blacklist implies it, and is a loosening of its own).
  if (effectiveEch(before.network) === 'refuse' && after.network.ech === 'allow') {
    out.push(
      l(
        'network.ech',
        'allow',
        'network ech refuse -> allow: an encrypted ClientHello is judged by its outer name only',
      ),
    );
  }
  // filesystem.namespaces as enforced: deny -> allow leaves a subject process in a user namespace of its own running
  // (so it can mount a filesystem of its own there before the watcher marks it). Whitelist -> blacklist on both
  // filesystem and commands implies it, and is a loosening of its own; only an explicit allow is reported here.
  if (effectiveNamespaces(before) === 'deny' && after.filesystem.namespaces === 'allow') {
    out.push(
      l(
        'filesystem.namespaces',
        'allow',
        'filesystem namespaces deny -> allow: a subject process in a user namespace of its own is no longer killed',
      ),
    );
  }
  if (before.network.udp === 'drop' && after.network.udp === 'allow') {
    out.push(l('network.udp', 'allow', 'network udp drop -> allow: UDP leaves the subject without a decision'));
  }
  const br = before.network.dns_resolvers;
  const ar = after.network.dns_resolvers;
  if (br.length > 0 && ar.length === 0) {
    out.push(
      l(
        'network.dns_resolvers',
        'system',
        'network dns_resolvers -> the host resolv.conf: allowed queries are forwarded to those resolvers',
      ),
    );
  }
  for (const r of ar) {
    if (!br.includes(r))
      out.push(
        l('network.dns_resolvers', r, `network dns_resolvers adds ${r}: allowed queries may be forwarded to it`),
      );
  }
  for (const r of before.network.internal) {
    if (!after.network.internal.includes(r))
      out.push(l('network.internal', r, `network internal ${r} removed: an allowed name may now lead into ${r}`));
  }
  for (const n of after.network.rebind_ok) {
    if (!before.network.rebind_ok.includes(n))
      out.push(
        l('network.rebind_ok', n, `network rebind_ok adds ${n}: that name may lead into the network.internal ranges`),
      );
  }
  for (const p of before.filesystem.watch) {
    if (!after.filesystem.watch.includes(p)) {
      out.push(l('filesystem.unset.watch', p, `filesystem watch ${p} removed: its filesystem may no longer be marked`));
    }
  }
  out.push(...gateLoosenings(before.tools, after.tools), ...terminalLoosenings(before.commands, after.commands));
  return out;
}

/** A rule as one comparable string: a regex as written, a typed rule as key-sorted JSON. */
const ruleText = (r: ArgRuleSpec): string => (typeof r === 'string' ? r : canonicalJson(r));

/** Rules by argument path (`[...]` is shorthand for `{"**": [...]}`), each as `path rule` text. */
function ruleSet(spec: ArgRulesSpec | undefined): Set<string> {
  const out = new Set<string>();
  if (spec === undefined) return out;
  const byPath = Array.isArray(spec) ? { '**': spec } : spec;
  for (const [p, rules] of Object.entries(byPath)) for (const r of rules) out.add(`${p} ${ruleText(r)}`);
  return out;
}

/** Argument rules by tool, keyed by the normalised name the gate compares (a respelt key is the same tool). */
function argsByTool(args: Record<string, ToolArgsSpec>): Map<string, ToolArgsSpec> {
  return new Map(Object.entries(args).map(([k, v]) => [normalizeToolName(k), v]));
}

/**
 * The MCP gate's fields: strict_args or hide_denied switched off, a denied or policed method
 * dropped, an argument deny rule dropped, and argument allow rules that admit more (a new rule
 * or path, `*`, or allow rules removed where a bare tool then takes anything). Logging (`log_args`)
 * decides nothing and is not judged.
 */
function gateLoosenings(b: Effective['tools'], a: Effective['tools']): Loosening[] {
  const out: Loosening[] = [];
  if (b.strict_args && !a.strict_args) {
    out.push(
      l(
        'tools.strict_args',
        'false',
        'tools strict_args true -> false: a tool without allow rules takes any arguments',
      ),
    );
  }
  if (b.hide_denied && !a.hide_denied) {
    out.push(l('tools.hide_denied', 'false', 'tools hide_denied true -> false: denied tools are listed to the agent'));
  }
  for (const m of b.deny_methods) {
    if (!a.deny_methods.includes(m))
      out.push(
        l('tools.unset.deny_methods', m, `tools deny_methods ${m} removed: the method is relayed to the server`),
      );
  }
  for (const m of b.policed_methods) {
    if (!a.policed_methods.includes(m))
      out.push(
        l('tools.unset.policed_methods', m, `tools policed_methods ${m} removed: its selector is no longer judged`),
      );
  }
  out.push(...ruleLoosenings(b, a));
  const bt = argsByTool(b.args);
  const at = argsByTool(a.args);
  for (const [tool, bs] of bt) {
    const as = at.get(tool);
    const afterDeny = ruleSet(as?.deny);
    for (const r of ruleSet(bs.deny)) {
      if (!afterDeny.has(r))
        out.push(
          l(
            'tools.args.unset.deny',
            `${tool} ${r}`,
            `tools args ${tool} deny ${r} removed: arg_denied no longer blocks it`,
          ),
        );
    }
  }
  for (const [tool, as] of at) {
    const bs = bt.get(tool);
    const bAllow = bs?.allow;
    if (bAllow === '*') continue;
    // Without allow rules a tool takes any arguments, unless strict_args makes it take none.
    if (bAllow === undefined && !b.strict_args) continue;
    if (as.allow === '*') {
      out.push(
        l('tools.args.allow', `${tool} *`, `tools args ${tool} allow *: any arguments pass (deny rules still apply)`),
      );
      continue;
    }
    const before = ruleSet(bAllow === undefined ? undefined : bAllow);
    for (const r of ruleSet(as.allow)) {
      if (!before.has(r))
        out.push(l('tools.args.allow', `${tool} ${r}`, `tools args ${tool} allow ${r}: arguments it matches now pass`));
    }
  }
  for (const [tool, bs] of bt) {
    if (bs.allow === undefined || bs.allow === '*') continue;
    if (at.get(tool)?.allow === undefined && !a.strict_args) {
      out.push(
        l('tools.args.unset.allow', tool, `tools args ${tool} allow rules removed: the tool takes any arguments`),
      );
    }
  }
  return out;
}

const EFFECT_RANK = { deny: 0, ask: 1, allow: 2 } as const;

/**
 * Rules over operations: an allow or ask rule that is new or changed (a widened rule is a new
 * one), a deny rule removed or changed, the default moved toward allow, output redaction switched
 * off, the workspace or the mapping table changed (the same rules then read other resources).
 */
function ruleLoosenings(b: Effective['tools'], a: Effective['tools']): Loosening[] {
  const out: Loosening[] = [];
  const text = (r: unknown) => canonicalJson(r);
  const before = new Set(b.rules.map(text));
  const after = new Set(a.rules.map(text));
  for (const r of a.rules) {
    if (r.effect !== 'deny' && !before.has(text(r)))
      out.push(
        l('tools.rules', r.id, `tools rules ${r.id} (${r.effect}) added or widened: calls it matches now pass or ask`),
      );
  }
  for (const r of b.rules) {
    if (r.effect === 'deny' && !after.has(text(r)))
      out.push(
        l(
          'tools.unset.rules',
          r.id,
          `tools rules ${r.id} (deny) removed or changed: operation_denied no longer blocks what it matched`,
        ),
      );
  }
  if (EFFECT_RANK[a.default] > EFFECT_RANK[b.default])
    out.push(
      l('tools.default', a.default, `tools default ${b.default} -> ${a.default}: calls no rule matches get more`),
    );
  if (b.redact_output && !a.redact_output)
    out.push(
      l('tools.redact_output', 'false', 'tools redact_output true -> false: secrets in results reach the agent'),
    );
  if (b.rules.length > 0 && a.workspace !== b.workspace)
    out.push(
      l(
        'tools.workspace',
        String(a.workspace),
        `tools workspace ${String(b.workspace)} -> ${String(a.workspace)}: \${workspace} rules cover other paths`,
      ),
    );
  if (b.rules.length > 0 && a.mapping !== b.mapping)
    out.push(
      l('tools.mapping', a.mapping, `tools mapping ${b.mapping} -> ${a.mapping}: calls are read by another table`),
    );
  return out;
}

/** `leash terminal`'s argument rules: a deny_args pattern dropped (or its whole entry) lets that argv run. */
function terminalLoosenings(b: Effective['commands'], a: Effective['commands']): Loosening[] {
  const out: Loosening[] = [];
  for (const [entry, rule] of Object.entries(b.args)) {
    const kept = a.args[entry]?.deny_args ?? [];
    for (const pat of rule.deny_args) {
      if (!kept.includes(pat))
        out.push(
          l(
            'commands.args.unset.deny_args',
            `${entry} ${pat}`,
            `commands args ${entry} deny_args "${pat}" removed: leash terminal runs it`,
          ),
        );
    }
  }
  return out;
}

/** The loosenings a fragment performs as an overlay on `base`. */
export function judgeOverlay(base: Effective, fragment: Fragment): Loosening[] {
  return loosenings(base, fold(base, fragment));
}

/** The findings no ack covers. */
export function unacknowledged(findings: Loosening[], acks: readonly string[]): Loosening[] {
  return findings.filter((f) => !acks.includes(f.token));
}

/** Union of finding lists by token, first wording kept, order preserved. */
export function mergeFindings(...lists: Loosening[][]): Loosening[] {
  const seen = new Map<string, Loosening>();
  for (const list of lists) for (const f of list) if (!seen.has(f.token)) seen.set(f.token, f);
  return [...seen.values()];
}

/** A token as one shell word. */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_./:=@%+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** `--ack 'field:value'` for each token, always single-quoted so it pastes into any shell. */
export function ackFlags(tokens: readonly string[]): string {
  return tokens.map((t) => `--ack '${t.replace(/'/g, `'\\''`)}'`).join(' ');
}

/** Splits `field:value` (the field never contains a colon; the value may: `host:443`). */
export function parseToken(t: string): { field: string; value: string } | null {
  const i = t.indexOf(':');
  if (i <= 0 || i === t.length - 1) return null;
  return { field: t.slice(0, i), value: t.slice(i + 1) };
}

/** Splits an edit's per-agent consent `agent:NAME=field:value`. */
export function parseAgentAck(t: string): { account: string; token: string } | null {
  const m = /^agent:([^=]+)=(.+)$/.exec(t);
  if (!m || !parseToken(m[2] ?? '')) return null;
  return { account: m[1] ?? '', token: m[2] ?? '' };
}

/** `network.ech` as enforced: absent means refuse in whitelist mode, allow in blacklist mode. */
export function effectiveEch(n: { mode: string; ech?: 'refuse' | 'allow' }): 'refuse' | 'allow' {
  return n.ech ?? (n.mode === 'whitelist' ? 'refuse' : 'allow');
}
