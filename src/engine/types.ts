/**
 * The engine's contract. Every enforcer speaks these types; nothing here does I/O.
 */

/** The four surfaces. These are also the config section names and the log's `surface`. */
export type Surface = 'network' | 'filesystem' | 'commands' | 'tools';
export const SURFACES: readonly Surface[] = ['network', 'filesystem', 'commands', 'tools'];

/** whitelist = default-deny (only `allow` passes); blacklist = default-allow (only `deny` blocks). */
export type Mode = 'whitelist' | 'blacklist';
export type FailMode = 'closed' | 'open';
export type InspectCategory = 'secrets' | 'pii' | 'priv_esc';
export type InspectAction = 'block' | 'log' | 'allow';

/** One surface's policy as written in the config or a profile. */
export interface SurfacePolicy {
  mode: Mode;
  allow: string[];
  deny: string[];
  /**
   * Entries a human is asked about (docs/approvals.md): deny wins over ask in both modes; in a
   * whitelist an allow entry wins over ask (ask is what would otherwise be blocked); in a blacklist
   * ask is what would otherwise be allowed. Absent = none.
   */
  ask?: string[];
}

/** The network surface: where a name may not lead (rebind.ts). */
export interface NetworkSurfacePolicy extends SurfacePolicy {
  /** Ranges a name may lead to only when an entry names the address (absent = rebind.ts DEFAULT_INTERNAL). */
  internal?: string[];
  /** Names (domain entries) that may resolve into `internal`. */
  rebind_ok?: string[];
}

/** The commands surface: `interpreters` (absolute paths) may only be loaded for an allowed program. */
export interface CommandsSurfacePolicy extends SurfacePolicy {
  interpreters?: string[];
}

export interface ToolsSurfacePolicy extends SurfacePolicy {
  inspect: Record<InspectCategory, InspectAction>;
}

/** The resolved, fully-defaulted policy of one subject (what the engine judges against). */
export interface PolicyInput {
  fail_mode: FailMode;
  /**
   * `shadow`: a verdict that would block is returned as an allow marked `wouldBlock` (its reason,
   * source and rule those of the block), for the enforcer to log as `would_block`. Absent = enforce.
   */
  enforce?: 'enforce' | 'shadow';
  network: NetworkSurfacePolicy;
  filesystem: SurfacePolicy;
  commands: CommandsSurfacePolicy;
  tools: ToolsSurfacePolicy;
}

/** What is being judged, per surface. */
export interface NetworkSubject {
  /** SNI or Host name, if the connection carried one. */
  domain?: string | null;
  /** Original destination address (IPv4 dotted, IPv6, or IPv4-mapped IPv6). */
  ip?: string | null;
  port: number;
  /**
   * Set when `ip` is where `domain` resolved for a connection its name decided (not an address the agent chose):
   * the address must then also not be local or internal (reason `rebind`, see rebind.ts). `own`: the enforcer
   * found it to be one of this host's own addresses.
   */
  resolved?: { own: boolean };
}
export interface FilesystemSubject {
  path: string;
}
export interface CommandSubject {
  /** The executable's path (absolute when it comes from the kernel). */
  binary: string;
  /**
   * Set when this exec is the kernel loading the interpreter (ELF PT_INTERP or `#!`) of a program
   * whose own exec was allowed: that program's path. Only the watcher's exec state sets it.
   */
  interpreterOf?: string;
}
export interface ToolSubject {
  name: string;
  inputs?: unknown;
}
export interface SubjectOf {
  network: NetworkSubject;
  filesystem: FilesystemSubject;
  commands: CommandSubject;
  tools: ToolSubject;
}

/**
 * Stable reason codes (snake_case). Every one is documented in docs/errors.md.
 * - allow_entry:   an allow entry matched (whitelist)
 * - mode_allow:    blacklist mode, no deny entry matched (mode default)
 * - deny_entry:    a deny entry matched (deny wins in both modes)
 * - not_allowed:   whitelist mode, no allow entry matched (mode default)
 * - inspect_secrets | inspect_pii | inspect_priv_esc: tool input inspection blocked
 * - no_policy:     the subject has no resolved policy (fail_mode decides)
 * - engine_error:  the engine threw (fail_mode decides)
 * - interpreter_of:     commands whitelist: a commands.interpreters entry loaded for an allowed program
 * - interpreter_direct: commands whitelist: a commands.interpreters entry run directly (blocked)
 * - ask_entry:     an ask entry matched: the enforcer holds the action and asks a human (docs/approvals.md)
 * - ask_rule:      a tools operation rule with `effect: ask` matched (the gate's rules, same outcome)
 * - rebind:        a name led to a local or internal address no entry names (network, rebind.ts)
 */
export type Reason =
  | 'allow_entry'
  | 'mode_allow'
  | 'deny_entry'
  | 'not_allowed'
  | 'inspect_secrets'
  | 'inspect_pii'
  | 'inspect_priv_esc'
  | 'no_policy'
  | 'engine_error'
  | 'interpreter_of'
  | 'interpreter_direct'
  | 'ask_entry'
  | 'ask_rule'
  | 'rebind';

/** Which part of the policy decided: an entry of a list, the mode default, inspection, or a failure. */
export type VerdictSource = 'allow' | 'deny' | 'ask' | 'mode' | 'inspect' | 'fail_mode' | 'interpreters' | 'rebind';

/**
 * A decision. `rule` is the entry that decided, or null for a mode default / failure. `ask` is a
 * question, not an answer: the enforcer holds the action until a human decides or its deadline
 * passes (an enforcer that cannot hold treats it as a block).
 */
export interface Verdict {
  action: 'allow' | 'block' | 'ask';
  reason: Reason;
  source: VerdictSource;
  rule: string | null;
  /** Inspection findings (tools), already masked; absent elsewhere. */
  findings?: InspectFinding[];
  /**
   * Shadow mode: this action would have been blocked (reason, source and rule say why) and is let
   * through; the enforcer logs it as `would_block`. Never set on a real allow or a block.
   */
  wouldBlock?: true;
}

export interface InspectFinding {
  category: InspectCategory;
  /** Detector id, e.g. "aws_access_key", "email", "sudo". */
  detector: string;
  /** JSON-path-like location in the inputs, e.g. "args[1]" or "env.TOKEN". */
  at: string;
  /** The match, masked (never the raw secret). */
  masked: string;
  action: InspectAction;
}

/**
 * Why an entry can never match (see docs/policy.md, "Entries that can never match").
 * Stable snake_case codes; the message is for humans and may change.
 */
export type EntryProblemCode =
  | 'not_a_string'
  | 'empty'
  | 'whitespace'
  | 'non_ascii'
  | 'url'
  | 'host_path'
  | 'userinfo'
  | 'wildcard'
  | 'leading_dot'
  | 'bad_domain'
  | 'bad_port'
  | 'bad_ip'
  | 'bad_cidr'
  | 'relative_path'
  | 'home_path'
  | 'bad_glob'
  | 'arguments'
  | 'glob_not_supported'
  | 'bad_name';

/** What makes an entry inert: a stable code and a human sentence (which may change). */
export interface EntryProblem {
  code: EntryProblemCode;
  message: string;
}

/** One inert entry found in a policy or fragment. An inert deny is critical (it blocks nothing). */
export interface InertEntry {
  surface: Surface;
  list: 'allow' | 'deny' | 'ask';
  entry: unknown;
  problem: EntryProblem;
  severity: 'critical' | 'warning';
}
