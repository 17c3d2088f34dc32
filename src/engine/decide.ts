/**
 * compilePolicy and decide: the one definition of every Leash decision.
 *
 * Per surface: a matching deny entry blocks (in both modes: deny wins); otherwise whitelist
 * allows only a matching allow entry, asks about a matching ask entry and blocks the rest, and
 * blacklist asks about a matching ask entry and allows the rest (its allow list is never consulted). A tool the registry allows is then inspected: if any finding's
 * category is set to `block`, the call is blocked (`inspect_<category>`, rule `inspect.<category>`,
 * secrets before priv_esc before pii); findings set to `log` ride along on the allow verdict.
 */
import { CommandIndex, normalizeBinary } from './command.js';
import { CATEGORY_PRIORITY, inspectInputs } from './inspect.js';
import { NetworkIndex, newPreparedNetwork, prepareDnsName, prepareNetworkSubject } from './network.js';
import { ALL_PORTS, SOME_PORT } from './port.js';
import { compileRebind, rebindRefusal, type RebindLists } from './rebind.js';
import { PathIndex, normalizePath } from './path.js';
import { ToolIndex, normalizeToolName } from './tool.js';
import type {
  FailMode,
  InspectAction,
  InspectCategory,
  Mode,
  PolicyInput,
  Surface,
  SubjectOf,
  Verdict,
} from './types.js';

interface Lists<I> {
  mode: Mode;
  allow: I;
  deny: I;
  ask: I;
}

/** A policy with its indexes built. Immutable once compiled; share it freely. */
export interface CompiledPolicy {
  readonly failMode: FailMode;
  /** Shadow mode (PolicyInput.enforce): blocks come back as allows marked `wouldBlock`. */
  readonly shadow: boolean;
  readonly network: Lists<NetworkIndex> & { rebind: RebindLists };
  readonly filesystem: Lists<PathIndex>;
  readonly commands: Lists<CommandIndex> & { interpreters: CommandIndex };
  readonly tools: Lists<ToolIndex> & { inspect: Readonly<Record<InspectCategory, InspectAction>> };
}

/** Options for decide(). */
export interface DecideOptions {
  /** fail_mode applied when `policy` is null (there is no policy to read it from). Default closed. */
  failMode?: FailMode;
}

/** `fail_mode` as the engine reads it: anything but exactly `open` is `closed` (a typo must not disable enforcement). */
export function effectiveFailMode(value: unknown): FailMode {
  return value === 'open' ? 'open' : 'closed';
}

/** A mode as the engine reads it: anything but exactly `blacklist` is the default-deny whitelist. */
export function effectiveMode(value: unknown): Mode {
  return value === 'blacklist' ? 'blacklist' : 'whitelist';
}

function entriesOf(list: unknown): unknown[] {
  return Array.isArray(list) ? list : [];
}

function build<I extends { add(e: unknown): void }>(make: () => I, sp: unknown): Lists<I> {
  const s = (sp ?? {}) as { mode?: unknown; allow?: unknown; deny?: unknown; ask?: unknown };
  const allow = make();
  const deny = make();
  const ask = make();
  for (const e of entriesOf(s.allow)) allow.add(e);
  for (const e of entriesOf(s.deny)) deny.add(e);
  for (const e of entriesOf(s.ask)) ask.add(e);
  return { mode: effectiveMode(s.mode), allow, deny, ask };
}

/** commands.interpreters: absolute entries only (a basename would imply any file of that name). */
function interpreterIndex(sp: unknown): CommandIndex {
  const idx = new CommandIndex();
  for (const e of entriesOf((sp as { interpreters?: unknown } | undefined)?.interpreters)) {
    if (typeof e === 'string' && e.startsWith('/')) idx.add(e);
  }
  return idx;
}

/**
 * Commands: deny first, then blacklist allows everything else (today's semantics: interpreters
 * play no part). Under a whitelist an entry of `commands.interpreters` is allowed only as the
 * interpreter the kernel loads for an allowed program (`interpreterOf`), and never run directly,
 * even when an allow entry names it; anything else is judged by its own name.
 */
function decideCommand(c: CompiledPolicy['commands'], subject: SubjectOf['commands']): Verdict {
  const binary = normalizeBinary(subject.binary);
  const denied = c.deny.match(binary);
  if (denied !== null || c.mode === 'blacklist' || c.interpreters.size === 0) return byLists(c, binary);
  const interp = c.interpreters.match(binary);
  if (interp !== null) {
    return typeof subject.interpreterOf === 'string'
      ? { action: 'allow', reason: 'interpreter_of', source: 'interpreters', rule: interp }
      : { action: 'block', reason: 'interpreter_direct', source: 'interpreters', rule: interp };
  }
  return byLists(c, binary);
}

const INSPECT_DEFAULT: Record<InspectCategory, InspectAction> = { secrets: 'block', pii: 'log', priv_esc: 'block' };

function inspectActions(v: unknown): Record<InspectCategory, InspectAction> {
  const out = { ...INSPECT_DEFAULT };
  if (v !== null && typeof v === 'object') {
    for (const k of Object.keys(INSPECT_DEFAULT) as InspectCategory[]) {
      const a = (v as Record<string, unknown>)[k];
      if (a === 'block' || a === 'log' || a === 'allow') out[k] = a;
    }
  }
  return out;
}

/**
 * Builds the indexes of a resolved policy once, so each decision costs a few hash probes whatever
 * the list sizes. Inert entries are left out of the indexes (they can never match; inertEntries()
 * reports them). A missing or unknown `mode` compiles as whitelist and an unknown `fail_mode` as
 * closed, so a malformed policy fails towards blocking; the config loader refuses such files
 * before they get here. A missing `tools.inspect` category defaults to secrets: block, pii: log,
 * priv_esc: block.
 */
export function compilePolicy(p: PolicyInput): CompiledPolicy {
  const tools = build(() => new ToolIndex(), p.tools);
  const compiled: CompiledPolicy = {
    failMode: effectiveFailMode(p.fail_mode),
    shadow: p.enforce === 'shadow',
    network: {
      ...build(() => new NetworkIndex(), p.network),
      rebind: compileRebind(p.network?.internal, p.network?.rebind_ok),
    },
    filesystem: build(() => new PathIndex(), p.filesystem),
    commands: { ...build(() => new CommandIndex(), p.commands), interpreters: interpreterIndex(p.commands) },
    tools: { ...tools, inspect: inspectActions((p.tools as { inspect?: unknown } | undefined)?.inspect) },
  };
  try {
    // A copy of what the network verdict reads, as it is now: a later change to `p` cannot make another compiled
    // form of this policy (the proxy's native matcher) judge differently from this one.
    const net = { fail_mode: p.fail_mode, enforce: p.enforce, network: structuredClone(p.network) };
    sources.set(compiled, net as PolicyInput);
  } catch {
    // Not cloneable (not from a config file): no other form is compiled, the engine alone decides.
  }
  return compiled;
}

/** The network part of each compiled policy's input, for compilers of another form (the proxy's native matcher). */
const sources = new WeakMap<CompiledPolicy, PolicyInput>();

/** The network part (network, fail_mode, enforce) of the input `c` was compiled from; undefined if not compiled here. */
export function policyInputOf(c: unknown): PolicyInput | undefined {
  return typeof c === 'object' && c !== null ? sources.get(c as CompiledPolicy) : undefined;
}

/**
 * The verdict for a subject with no resolved policy: block `no_policy` under fail_mode closed
 * (the default), allow `no_policy` under open.
 */
export function decideNoPolicy(failMode: FailMode = 'closed'): Verdict {
  return {
    action: effectiveFailMode(failMode) === 'open' ? 'allow' : 'block',
    reason: 'no_policy',
    source: 'fail_mode',
    rule: null,
  };
}

function engineError(failMode: FailMode): Verdict {
  return { action: failMode === 'open' ? 'allow' : 'block', reason: 'engine_error', source: 'fail_mode', rule: null };
}

/**
 * Deny first (both modes), then the mode: whitelist consults allow, then ask (an entry in ask is
 * asked instead of blocked), and blocks the rest; blacklist consults ask (asked instead of allowed;
 * its allow list is never consulted) and allows the rest. So deny > allow > ask in a whitelist and
 * deny > ask in a blacklist: an approval persisted as an allow entry stops the asking.
 */
function byLists<T>(lists: Lists<{ match(s: T): string | null }>, subject: T): Verdict {
  const denied = lists.deny.match(subject);
  if (denied !== null) return { action: 'block', reason: 'deny_entry', source: 'deny', rule: denied };
  if (lists.mode === 'whitelist') {
    const allowed = lists.allow.match(subject);
    if (allowed !== null) return { action: 'allow', reason: 'allow_entry', source: 'allow', rule: allowed };
  }
  const asked = lists.ask.match(subject);
  if (asked !== null) return { action: 'ask', reason: 'ask_entry', source: 'ask', rule: asked };
  if (lists.mode === 'blacklist') return { action: 'allow', reason: 'mode_allow', source: 'mode', rule: null };
  return { action: 'block', reason: 'not_allowed', source: 'mode', rule: null };
}

const prepared = newPreparedNetwork();

/** A name-decided connection's resolved address: the verdict stands unless the address is local or internal. */
function resolvedVerdict(n: CompiledPolicy['network'], s: SubjectOf['network'], v: Verdict): Verdict {
  const ip = s.ip;
  if (typeof ip !== 'string' || typeof s.domain !== 'string')
    throw new TypeError('resolved subject without ip or domain');
  const kind = rebindRefusal(n.rebind, n.allow, s.domain, ip, s.port, s.resolved!.own === true);
  return kind === null ? v : { action: 'block', reason: 'rebind', source: 'rebind', rule: v.rule };
}

function decideUnsafe(surface: Surface, subject: unknown, policy: CompiledPolicy): Verdict {
  switch (surface) {
    case 'network': {
      const s = subject as SubjectOf['network'];
      const v = byLists(policy.network, prepareNetworkSubject(s, prepared));
      if (s.resolved === undefined || v.action === 'block') return v;
      return resolvedVerdict(policy.network, s, v);
    }
    case 'filesystem': {
      const raw = (subject as SubjectOf['filesystem']).path;
      if (typeof raw !== 'string') throw new TypeError('subject path is not a string');
      const path = normalizePath(raw);
      if (path === null) throw new TypeError('subject path is not absolute');
      return byLists(policy.filesystem, path);
    }
    case 'commands':
      return decideCommand(policy.commands, subject as SubjectOf['commands']);
    case 'tools': {
      const s = subject as SubjectOf['tools'];
      if (typeof s.name !== 'string') throw new TypeError('subject name is not a string');
      const registry = byLists(policy.tools, normalizeToolName(s.name));
      if (registry.action === 'block') return registry;
      // An asked tool is still inspected: a blocking finding blocks without asking (the human is
      // never shown a call carrying a secret to wave through); otherwise it stays a question.
      const findings = inspectInputs(s.inputs, policy.tools.inspect);
      if (findings.length === 0) return registry;
      for (const category of CATEGORY_PRIORITY) {
        if (findings.some((f) => f.category === category && f.action === 'block')) {
          return {
            action: 'block',
            reason: `inspect_${category}`,
            source: 'inspect',
            rule: `inspect.${category}`,
            findings,
          };
        }
      }
      return { ...registry, findings };
    }
    default:
      throw new TypeError(`unknown surface ${String(surface)}`);
  }
}

/**
 * Judges one subject on one surface against a compiled policy.
 *
 * - network `{domain?, ip?, port, resolved?}`, filesystem `{path}`, commands `{binary}`, tools `{name, inputs}`
 * - returns a Verdict: action, stable reason code, the source that decided (an allow or deny
 *   entry, the mode default, inspection, or fail_mode) and the entry text (`rule`) when one did.
 * - `policy` null: `no_policy`, blocked unless `opts.failMode` is `open`.
 * - never throws: a malformed subject or an internal failure is `engine_error`, blocked under
 *   fail_mode closed and allowed under open.
 */
export function decide<S extends Surface>(
  surface: S,
  subject: SubjectOf[S],
  policy: CompiledPolicy | null,
  opts?: DecideOptions,
): Verdict {
  if (policy === null || policy === undefined) return decideNoPolicy(opts?.failMode);
  let v: Verdict;
  try {
    if (subject === null || typeof subject !== 'object') throw new TypeError('subject is not an object');
    v = decideUnsafe(surface, subject, policy);
  } catch {
    v = engineError(policy.failMode);
  }
  return policy.shadow ? shadowed(v) : v;
}

/**
 * Shadow mode: a block becomes an allow that says it would have blocked (`wouldBlock`, with the
 * block's reason, source and rule). Allows and asks are unchanged (an ask is a question, not a block).
 */
export function shadowed(v: Verdict): Verdict {
  return v.action === 'block' ? { ...v, action: 'allow', wouldBlock: true } : v;
}

/** The decision log's action for a verdict: `would_block` for a shadowed block, else the verdict's action. */
export function logAction(v: Pick<Verdict, 'action' | 'wouldBlock'>): 'allow' | 'block' | 'ask' | 'would_block' {
  return v.wouldBlock ? 'would_block' : v.action;
}

const preparedDns = newPreparedNetwork();

/**
 * Whether a DNS name may be answered for a subject: when a connection to it could be allowed. A deny entry
 * covering the name on every port (or, for a reverse-lookup name, its address) refuses it in both modes; a
 * blacklist then answers; a whitelist answers when the name or a parent of it is an allow entry on some port,
 * or the reverse-lookup address is covered by an allow entry. A port-pinned deny (`evil.lab:443`) leaves the
 * name answerable (its other ports may be allowed). Never throws; `policy` null is `no_policy`.
 */
export function decideDnsName(name: string, policy: CompiledPolicy | null, opts?: DecideOptions): Verdict {
  if (policy === null || policy === undefined) return decideNoPolicy(opts?.failMode);
  const v = decideDnsUnsafe(name, policy);
  return policy.shadow ? shadowed(v) : v;
}

/**
 * Whether an answer for `name` may carry `ip` to a subject whose query an entry allowed (the proxy's rule for a
 * name-decided connection, rebind.ts, on any port an entry admits): null when it may, else a `rebind` block
 * (an allow marked `wouldBlock` in shadow mode). `own`: the enforcer found `ip` to be one of this host's addresses.
 */
export function decideDnsAnswer(name: string, ip: string, own: boolean, policy: CompiledPolicy): Verdict | null {
  const n = policy.network;
  const kind = rebindRefusal(n.rebind, n.allow, name, ip, SOME_PORT, own);
  if (kind === null) return null;
  const v: Verdict = { action: 'block', reason: 'rebind', source: 'rebind', rule: null };
  return policy.shadow ? shadowed(v) : v;
}

function decideDnsUnsafe(name: string, policy: CompiledPolicy): Verdict {
  try {
    if (typeof name !== 'string') throw new TypeError('name is not a string');
    const s = prepareDnsName(name, preparedDns);
    const lists = policy.network;
    s.port = ALL_PORTS;
    const denied = lists.deny.match(s);
    if (denied !== null) return { action: 'block', reason: 'deny_entry', source: 'deny', rule: denied };
    if (lists.mode === 'blacklist') return { action: 'allow', reason: 'mode_allow', source: 'mode', rule: null };
    s.port = SOME_PORT;
    const allowed = lists.allow.match(s);
    if (allowed !== null) return { action: 'allow', reason: 'allow_entry', source: 'allow', rule: allowed };
    // A name an ask entry covers is answered: the connection to it is the question, not the lookup.
    const asked = lists.ask.match(s);
    if (asked !== null) return { action: 'allow', reason: 'ask_entry', source: 'ask', rule: asked };
    return { action: 'block', reason: 'not_allowed', source: 'mode', rule: null };
  } catch {
    return engineError(policy.failMode);
  }
}
