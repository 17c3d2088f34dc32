/**
 * The config loader: a config (or a profile) read, checked against the schema (src/control/config/, plain data) and
 * against what needs no host: the gate's own compiler (its argument rules compile; tools/ is below control/) and the
 * engine's list of interpreters. It imports no data plane: what depends on this host (the watcher's marks against
 * its mounts) is `leash validate`'s, in src/control/policy/validate.ts. So a profile's parse (policy/profiles.ts)
 * reaches the schema, the engine and the gate's compiler only, every arrow pointing down. `leash validate`, the
 * service and every policy write use it.
 */
import { isMap, isPair, isScalar, isSeq, type Document, type Node } from 'yaml';
import type { z } from 'zod';
import { FINDING_CODES, LeashError, type ConfigIssue, type FindingCode, type Severity } from '../../errors.js';
import type { Surface } from '../../engine/types.js';
import { inertEntries, type InertEntry } from '../../engine/index.js';
import { lookupAccount, type Account } from './accounts.js';
import { GATE_DEFAULTS } from '../../tools/judge/fields.js';
import { compileGatePolicy, GATE_ENGINE, GatePolicyError, type ToolsGatePolicy } from '../../tools/judge/compile.js';
import { interpreterWarnings } from '../../engine/interpreters.js';
import { lookalikeEntries } from './lookalike.js';
import { formatPath, suggest } from '../../formats/problems.js';
import { parseStrictYaml, readPolicyFile } from '../../formats/yaml.js';
import { configSchema, fragmentSchema, knownKeysAt, type ConfigFragment } from './schema.js';
import type { Config } from './types.js';

export const DEFAULT_CONFIG_PATH = '/etc/leash/leash.yaml';

/** Something worth telling the operator about a config that loaded. */
export interface Finding {
  code: FindingCode;
  severity: Severity;
  /** Dotted path of the field concerned, e.g. `network.deny`. */
  path: string;
  message: string;
  entry?: string;
  /** marks_partial_coverage: mount points of the filesystems no mark covers. */
  unmarked?: string[];
  /** command_cannot_start: the file the program needs at start and the rule that refuses it. */
  file?: string;
  rule?: string | null;
}

export interface LoadedConfig {
  config: Config;
  /** Every finding, critical first. */
  findings: Finding[];
  /** The findings of severity warning (the service logs them and starts). */
  warnings: Finding[];
  /** Entries that can never match (engine grammar), allow and deny lists. */
  inert: InertEntry[];
  /** The leashed account, resolved at load; null when unset or unknown (see findings). */
  account: Account | null;
  source: string;
}

export interface LoadOptions {
  /** Account lookup (tests inject one); default: getent/passwd. */
  lookup?: (name: string) => Account | null;
}

/**
 * Reads and validates a config file. The service and `leash validate` both use this, so what
 * validate accepts is exactly what the service will run.
 * Throws LeashError: config_missing (no file), config_unreadable, config_syntax, config_invalid, and the
 * strict reader's codes (src/formats/yaml.ts: config_alias, config_tag, config_too_large, ...).
 */
export function loadConfig(file: string, opts: LoadOptions = {}): LoadedConfig {
  return parseConfig(readPolicyFile(file), file, opts);
}

/** Parses config text (see loadConfig). `source` names it in messages. */
export function parseConfig(text: string, source: string, opts: LoadOptions = {}): LoadedConfig {
  const { raw, failModeFinding } = parseRaw(text, source, false);
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) throw invalid(source, zodIssues(parsed.error, false));
  const config = parsed.data;
  gateProblems(config.tools, source);
  const findings: Finding[] = failModeFinding ? [failModeFinding] : [];
  const lookup = opts.lookup ?? lookupAccount;
  const account = config.user ? lookup(config.user) : null;
  findings.push(...analyse(config, account), ...lookalikeFindings(config));
  const inert = inertEntries(config);
  return finish(config, findings, inert, account, source);
}

/** Parses a policy fragment (a profile): the same checks, nothing defaulted. */
export function parseFragment(
  text: string,
  source: string,
): { fragment: ConfigFragment; findings: Finding[]; inert: InertEntry[] } {
  const { raw, failModeFinding } = parseRaw(text, source, true);
  const parsed = fragmentSchema.safeParse(raw);
  if (!parsed.success) throw invalid(source, zodIssues(parsed.error, true));
  const ft = parsed.data.tools;
  if (ft) gateProblems(stripUndefined({ args: ft.args, policed_methods: ft.policed_methods }), source);
  const inert = inertEntries(parsed.data);
  const findings: Finding[] = failModeFinding ? [failModeFinding] : [];
  findings.push(...inertFindings(inert), ...lookalikeFindings(parsed.data));
  return { fragment: parsed.data, findings: sortFindings(findings), inert };
}

/**
 * The gate's own checks beyond the schema (an argument rule's regex compiles, an args key names one
 * tool, policed_methods are method names): what the service would refuse at start is refused at load,
 * so `leash validate` and a profile write say so first.
 */
function gateProblems(tools: Partial<ToolsGatePolicy>, source: string): void {
  try {
    compileGatePolicy(
      {
        mode: 'whitelist',
        allow: [],
        deny: [],
        inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' },
        ...GATE_DEFAULTS,
        ...tools,
      },
      'closed',
      GATE_ENGINE,
    );
  } catch (e) {
    if (!(e instanceof GatePolicyError)) throw e;
    throw invalid(
      source,
      e.problems.map((line) => {
        const i = line.indexOf(': ');
        return i > 0 ? { path: line.slice(0, i), message: line.slice(i + 2) } : { path: 'tools', message: line };
      }),
    );
  }
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

function finish(
  config: Config,
  findings: Finding[],
  inert: InertEntry[],
  account: Account | null,
  source: string,
): LoadedConfig {
  findings.push(...inertFindings(inert));
  const all = sortFindings(findings);
  return { config, findings: all, warnings: all.filter((f) => f.severity === 'warning'), inert, account, source };
}

function sortFindings(f: Finding[]): Finding[] {
  const rank = (s: Severity) => (s === 'critical' ? 0 : 1);
  return [...f].sort((a, b) => rank(a.severity) - rank(b.severity));
}

function invalid(source: string, issues: ConfigIssue[]): LeashError {
  return new LeashError('config_invalid', `config ${source} is invalid`, { file: source, issues });
}

/** YAML text -> plain object, refusing syntax errors and duplicate keys; fail_mode typo -> closed. */
export function parseRaw(
  text: string,
  source: string,
  fragment: boolean,
): { raw: Record<string, unknown>; doc: Document; failModeFinding: Finding | null } {
  // Anchors, aliases, merge keys, tags, YAML 1.1, bad UTF-8 and oversized input are refused there.
  const { doc, js } = parseStrictYaml(text, source);
  const dups: ConfigIssue[] = [];
  findDuplicates(doc.contents, [], dups);
  if (dups.length) throw invalid(source, dups);

  if (js === null || typeof js !== 'object' || Array.isArray(js)) {
    throw invalid(source, [{ path: '(root)', message: 'must be a mapping of sections (user, network, ...)' }]);
  }
  const raw = js as Record<string, unknown>;
  let failModeFinding: Finding | null = null;
  if (
    'fail_mode' in raw &&
    raw.fail_mode !== 'closed' &&
    raw.fail_mode !== 'open' &&
    !(fragment && raw.fail_mode === undefined)
  ) {
    failModeFinding = {
      code: 'fail_mode_invalid',
      severity: FINDING_CODES.fail_mode_invalid,
      path: 'fail_mode',
      message: `${JSON.stringify(raw.fail_mode)} is neither closed nor open; treated as closed`,
    };
    raw.fail_mode = 'closed';
  }
  return { raw, doc, failModeFinding };
}

function findDuplicates(node: Node | null | unknown, at: (string | number)[], out: ConfigIssue[]): void {
  if (isMap(node)) {
    const seen = new Set<string>();
    for (const item of node.items) {
      if (!isPair(item)) continue;
      const key = isScalar(item.key) ? String(item.key.value) : String(item.key);
      if (seen.has(key)) out.push({ path: formatPath([...at, key]), message: 'duplicate key' });
      seen.add(key);
      findDuplicates(item.value, [...at, key], out);
    }
  } else if (isSeq(node)) {
    node.items.forEach((v, i) => findDuplicates(v, [...at, i], out));
  }
}

function zodIssues(err: z.ZodError, fragment: boolean): ConfigIssue[] {
  const out: ConfigIssue[] = [];
  for (const issue of err.issues) {
    if (issue.code === 'unrecognized_keys') {
      const known = knownKeysAt(issue.path as (string | number)[], fragment);
      for (const key of issue.keys) {
        const hint = suggest(key, known);
        out.push({
          path: formatPath([...issue.path, key]),
          message: `unknown key${hint ? ` (did you mean "${hint}"?)` : known.length ? ` (known: ${known.join(', ')})` : ''}`,
        });
      }
    } else {
      out.push({ path: formatPath(issue.path), message: issue.message });
    }
  }
  return out;
}

const SURFACES: Surface[] = ['network', 'filesystem', 'commands', 'tools'];

export function finding(code: FindingCode, p: string, message: string, entry?: string): Finding {
  return { code, severity: FINDING_CODES[code], path: p, message, ...(entry !== undefined ? { entry } : {}) };
}

/** The semantic checks that make `leash validate` exit non-zero or warn (besides inert entries). */
export function analyse(config: Config, account: Account | null): Finding[] {
  const out: Finding[] = [];
  if (config.user === null) {
    out.push(
      finding(
        'user_unset',
        'user',
        'no leashed user is set; only leash-* agent accounts are enforced (run: leash init --user NAME)',
      ),
    );
  } else if (account === null) {
    out.push(finding('user_unknown', 'user', `account ${config.user} does not exist on this host`));
  }
  for (const s of SURFACES) {
    const sp = config[s];
    if (sp.mode === 'blacklist' && sp.allow.length > 0) {
      out.push(
        finding(
          'blacklist_allow_ignored',
          `${s}.allow`,
          `${s} is in blacklist mode (default-allow): its ${sp.allow.length} allow entries are never consulted, so this policy enforces less than it appears to`,
        ),
      );
    }
    const deny = new Set(sp.deny);
    for (const e of sp.allow) {
      if (deny.has(e))
        out.push(
          finding('entry_shadowed', `${s}.allow`, `${e} is also denied; deny wins, the allow entry does nothing`, e),
        );
    }
  }
  const cmd = config.commands;
  if (cmd.mode === 'blacklist' && cmd.deny.length > 0) {
    out.push(
      finding(
        'commands_blacklist_evadable',
        'commands.mode',
        'command rules match by name and path, so a copied or renamed binary evades a blacklist; use whitelist for honest blocking',
      ),
    );
  }
  // One list of interpreters, loaders and launchers (src/engine/interpreters.ts).
  for (const w of interpreterWarnings(cmd)) {
    out.push(finding('commands_interpreter_allowed', 'commands.allow', w.message, w.entry));
  }
  // A memfd lies on no marked filesystem: without vm.memfd_noexec its exec is never judged.
  if (cmd.mode === 'whitelist' && cmd.allow.length > 0 && config.enforcers.filesystem && !config.host.memfd_noexec) {
    out.push(
      finding(
        'commands_memfd_unguarded',
        'host.memfd_noexec',
        'commands is a whitelist, but a program run from an anonymous memory file (memfd_create + fexecve) is never seen as an exec; set host.memfd_noexec: true (vm.memfd_noexec = 2, kernel 6.3+) unless something on this host execs from a memfd (container runtimes)',
      ),
    );
  }
  return out;
}

/** Entries that match, but not what they look like (src/control/config/lookalike.ts): critical. */
function lookalikeFindings(policyLike: unknown): Finding[] {
  return lookalikeEntries(policyLike).map((l) =>
    finding('entry_lookalike', `${l.surface}.${l.list}`, `${JSON.stringify(l.entry)}: ${l.message}`, l.entry),
  );
}

function inertFindings(inert: InertEntry[]): Finding[] {
  return inert.map((i) =>
    i.list === 'ask'
      ? finding(
          'inert_ask',
          `${i.surface}.ask`,
          `${JSON.stringify(i.entry)}: ${i.problem.message}; this ask entry asks about nothing`,
          String(i.entry),
        )
      : i.list === 'deny'
        ? finding(
            'inert_deny',
            `${i.surface}.deny`,
            `${JSON.stringify(i.entry)}: ${i.problem.message}; this deny entry blocks nothing`,
            String(i.entry),
          )
        : finding(
            'inert_allow',
            `${i.surface}.allow`,
            `${JSON.stringify(i.entry)}: ${i.problem.message}; this allow entry never matches`,
            String(i.entry),
          ),
  );
}
