import type { EntryProblemCode, Reason } from './engine/types.js';

/**
 * The one catalogue of Leash's machine-readable codes, documented in docs/errors.md (a unit test
 * checks every code here appears there). Codes are stable snake_case; tests and callers branch on
 * codes, never on message text.
 *
 * Exit codes are part of the CLI contract (docs/cli.md):
 *   0 success / allow / valid
 *   1 a verdict or a finding the caller asked about: `check` blocked, `validate` found a critical problem
 *   2 refused: a usage error, a missing or invalid config, an entry that can never match, a bad subject
 *   3 an operation failed: I/O, a lock that never came free, an enforcer that would not start
 *  70 an internal error (a bug): reported as one line, never a stack trace unless LEASH_DEBUG=1
 */
export const EXIT = { ok: 0, verdict: 1, refused: 2, failed: 3, internal: 70 } as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** Error codes: something the operator asked for could not be done. */
export const ERROR_CODES = {
  config_alias: EXIT.refused,
  config_encoding: EXIT.refused,
  config_invalid: EXIT.refused,
  config_lock_timeout: EXIT.failed,
  config_missing: EXIT.refused,
  config_syntax: EXIT.refused,
  config_tag: EXIT.refused,
  config_too_deep: EXIT.refused,
  config_too_large: EXIT.refused,
  config_unreadable: EXIT.refused,
  config_write_failed: EXIT.failed,
  config_yaml_version: EXIT.refused,
  default_policy_missing: EXIT.failed,
  entry_inert: EXIT.refused,
  entry_lookalike: EXIT.refused,
  entry_not_found: EXIT.refused,
  entry_too_long: EXIT.refused,
  internal: EXIT.internal,
  list_too_long: EXIT.refused,
  log_filter_invalid: EXIT.refused,
  log_sink_stdout: EXIT.refused,
  log_unreadable: EXIT.failed,
  mode_invalid: EXIT.refused,
  native_unavailable: EXIT.failed,
  service_failed: EXIT.failed,
  service_running: EXIT.refused,
  service_signal_failed: EXIT.failed,
  // the reload generation (src/cli/reload.ts)
  reload_incomplete: EXIT.failed,
  reload_unconfirmed: EXIT.failed,
  subject_invalid: EXIT.refused,
  subject_not_leashed: EXIT.refused,
  subject_unknown: EXIT.refused,
  surface_unknown: EXIT.refused,
  // leash mcp (docs/tools.md)
  mcp_no_client: EXIT.refused,
  mcp_server_unrunnable: EXIT.refused,
  mcp_no_approver: EXIT.refused,
  mcp_service_unreachable: EXIT.refused,
  mcp_learn_failed: EXIT.refused,
  // leash host (docs/tools.md "Host set-up")
  host_config_changed: EXIT.failed,
  host_config_invalid: EXIT.refused,
  host_config_missing: EXIT.refused,
  host_entry_uneditable: EXIT.refused,
  // leash learn (docs/cli.md)
  learn_out_exists: EXIT.refused,
  learn_out_unwritable: EXIT.failed,
  learn_unresolved: EXIT.refused,
  // leash terminal (docs/terminal.md)
  terminal_audit_unavailable: EXIT.failed,
  terminal_jail_invalid: EXIT.refused,
  terminal_log_in_jail: EXIT.refused,
  terminal_params_invalid: EXIT.refused,
  terminal_service_unavailable: EXIT.failed,
  usage: EXIT.refused,
  user_invalid: EXIT.refused,
  user_unknown: EXIT.refused,
  // network enforcer (src/dataplane/network)
  iptables_failed: EXIT.failed,
  iptables_single_subject: EXIT.failed,
  network_rule_invalid: EXIT.refused,
  nft_failed: EXIT.failed,
  nft_missing_multi: EXIT.failed,
  // policy store, subjects, reconcile (branch policy)
  ack_invalid: EXIT.refused,
  apply_invalid: EXIT.refused,
  binding_not_found: EXIT.refused,
  bindings_corrupt: EXIT.failed,
  bindings_too_large: EXIT.refused,
  ledger_unwritable: EXIT.failed,
  loosening_unacknowledged: EXIT.refused,
  passwd_unreadable: EXIT.failed,
  permission_denied: EXIT.refused,
  policy_unjudgeable: EXIT.refused,
  ports_corrupt: EXIT.failed,
  profile_changed: EXIT.failed,
  profile_inert_entry: EXIT.refused,
  profile_invalid: EXIT.refused,
  profile_name_invalid: EXIT.refused,
  profile_not_found: EXIT.refused,
  scope_invalid: EXIT.refused,
  scope_unknown_account: EXIT.refused,
  // filesystem watcher (branch watch)
  watcher_failed: EXIT.failed,
  // host settings the service applies (config `host`, src/control/daemon/host.ts)
  host_setting_failed: EXIT.failed,
  // the approvals queue and `leash approvals` (docs/approvals.md)
  approvals_unreachable: EXIT.failed,
  approvals_refused: EXIT.refused,
  approval_not_found: EXIT.refused,
  approval_persist_failed: EXIT.failed,
  // the metrics endpoint (config logging.metrics_*): logged, the service runs on without it
  metrics_unavailable: EXIT.failed,
  // the web console (docs/console.md): HTTP refusals carry these codes; console_unavailable is the CLI's
  console_unauthorized: EXIT.refused,
  console_origin_refused: EXIT.refused,
  console_host_refused: EXIT.refused,
  console_method_refused: EXIT.refused,
  console_not_found: EXIT.refused,
  console_bad_request: EXIT.refused,
  console_unavailable: EXIT.failed,
} as const satisfies Record<string, ExitCode>;
export type ErrorCode = keyof typeof ERROR_CODES;

/**
 * Finding codes: what `leash validate` (and the service at startup) reports about a config that
 * loaded. A critical finding makes `validate` exit 1; warnings are printed and exit 0.
 */
export const FINDING_CODES = {
  blacklist_allow_ignored: 'critical',
  commands_blacklist_evadable: 'warning',
  commands_interpreter_allowed: 'warning',
  decisions_sink_unusable: 'critical',
  entry_lookalike: 'critical',
  entry_shadowed: 'warning',
  fail_mode_invalid: 'warning',
  inert_allow: 'warning',
  inert_deny: 'critical',
  inert_ask: 'critical',
  user_unknown: 'critical',
  user_unset: 'warning',
  // policy store (branch policy): what `leash validate` says about profiles and bindings
  ack_stale: 'warning',
  binding_dangling: 'warning',
  binding_for_nobody: 'warning',
  profile_broken: 'critical',
  subject_unresolvable: 'warning',
  // filesystem watcher coverage (branch wire): what `leash validate` says about this host's marks
  marks_partial_coverage: 'warning',
  command_cannot_start: 'warning',
  // host settings (config `host`): what a commands whitelist cannot see without them
  commands_memfd_unguarded: 'warning',
} as const satisfies Record<string, 'warning' | 'critical'>;
export type FindingCode = keyof typeof FINDING_CODES;
export type Severity = 'warning' | 'critical';

/**
 * The engine's reason codes, as they appear in a verdict and in every decision log line.
 * `satisfies Record<Reason, string>` makes the compiler fail when the contract gains a reason
 * this catalogue (and so docs/errors.md) does not list.
 */
export const REASONS = {
  allow_entry: 'an allow entry matched',
  ask_entry: 'an ask entry matched: the action is held and a human asked (docs/approvals.md)',
  ask_rule: 'a tools operation rule with effect ask matched: the call is held and a human asked',
  deny_entry: 'a deny entry matched (deny wins in both modes)',
  engine_error: 'the engine threw; fail_mode decided',
  inspect_pii: 'tool input inspection found PII and the category is set to block',
  inspect_priv_esc: 'tool input inspection found privilege escalation and the category is set to block',
  inspect_secrets: 'tool input inspection found a secret and the category is set to block',
  interpreter_direct: 'commands whitelist: a commands.interpreters entry was run directly (blocked)',
  interpreter_of: 'commands whitelist: a commands.interpreters entry loaded by the kernel for an allowed program',
  mode_allow: 'blacklist mode and no deny entry matched',
  no_policy: 'the subject has no resolved policy; fail_mode decided',
  not_allowed: 'whitelist mode and no allow entry matched',
  rebind:
    'a name led to a local or internal address (loopback, link-local, the host, network.internal) that no allow entry names: the connection or the DNS answer is refused',
} as const satisfies Record<Reason, string>;

/**
 * Reasons `leash terminal` adds to the engine's, in its decision log lines and audit records:
 * refusals the commands surface itself cannot express (arguments, shell syntax, the cwd jail).
 */
export const TERMINAL_REASONS = {
  cwd_escape: 'leash terminal: the requested cwd does not resolve inside the jail root (audit only)',
  deny_args: 'leash terminal: a commands.args deny_args pattern matched the arguments',
  not_on_path: "leash terminal: a basename allow entry matched a binary outside the terminal's PATH directories",
  parse_error: 'leash terminal: the command line has shell syntax or cannot be split into argv',
} as const;

/**
 * Why an entry can never match (engine grammar), as carried in `inert_entries[].problem.code`
 * of `validate --json` and of an `entry_inert` refusal.
 */
export const ENTRY_PROBLEMS = {
  arguments: 'a command entry with arguments',
  bad_cidr: 'a CIDR with a bad prefix length or host bits set',
  bad_domain: 'a malformed host name',
  bad_glob: 'a glob that does not compile',
  bad_ip: 'a malformed IP address or brackets',
  bad_name: 'a malformed tool name',
  bad_port: 'a non-numeric or out-of-range port',
  empty: 'an empty entry',
  glob_not_supported: 'a glob where the surface takes none',
  home_path: 'a ~ path',
  host_path: 'host/path',
  leading_dot: 'a leading dot',
  non_ascii: 'a non-ASCII name',
  not_a_string: 'not a string',
  relative_path: 'a relative path',
  url: 'a URL',
  userinfo: 'user@host',
  whitespace: 'whitespace or a control character',
  wildcard: 'a * anywhere but a leading *.',
} as const satisfies Record<EntryProblemCode, string>;

/**
 * Reasons the network proxy writes itself, for connections it refuses before (or instead of) asking the
 * engine. They appear in decision lines like the engine's REASONS.
 */
export const PROXY_REASONS = {
  ambiguous_host: 'the HTTP head names two different hosts; a server could pick either',
  ech_refused:
    'a TLS ClientHello carrying encrypted_client_hello (its outer name says nothing of the real destination), under network.ech: refuse',
  http_host_changed:
    'a later request on a kept-alive plain-HTTP connection names another host than the one judged: answered 403, connection closed',
  http_malformed:
    'a plain-HTTP request the strict framer cannot frame exactly (smuggling shapes, bad chunking, oversized head): answered 400, closed',
  no_original_dst: 'SO_ORIGINAL_DST could not be read, so the connection cannot be shown to be redirected (critical)',
  not_redirected: 'a direct connection to a proxy listener, or to the reserved loopback range 18000-20999 (critical)',
  resolve_failed: 'a name-decided allow whose name did not resolve through the configured resolvers',
} as const;

/**
 * Reason codes the DNS forwarder (src/dataplane/network/dns/forwarder.ts) writes itself, in decision lines with
 * subject `{dns, qtype}`; a refused name carries the engine's reason (`not_allowed`, `deny_entry`, `no_policy`).
 */
export const DNS_REASONS = {
  dns_malformed:
    'a message to port 53 that is not one strict query (answered FORMERR, or dropped without a header); never forwarded',
  dns_unsupported:
    'a well-formed query of an unsupported kind (opcode, class, zone transfer, meta type): answered NOTIMP, never forwarded',
  dns_upstream_failed:
    'an allowed query no resolver answered (time-out, or an answer to another question): answered SERVFAIL',
} as const;

/**
 * Reasons the filesystem watcher writes itself, outside the engine's: events it answers without a
 * policy match (see docs/filesystem.md, "When the watcher dies").
 */
export const WATCHER_REASONS = {
  watcher_takeover:
    "a subject's open or exec the dead watcher had read and not answered, denied unjudged by the standby that took over",
  hardlinked:
    'an open or exec of a file with more than one name that the subject could have linked itself, when not every name is known to be allowed (whitelist) or a name is a deny entry (blacklist); the line carries the inode and link count',
  namespace_denied:
    'a subject acted from a namespace of its own: a process in its own user namespace killed (filesystem.namespaces: deny), or, under a whitelist, an open or exec of a file on a filesystem it mounted there',
  foreign_pid_namespace:
    "a count, no uid: opens or execs from processes outside the watcher's PID namespace (pid 0: the host's, when the service runs in a container), allowed unjudged; one line per surface per minute at most",
} as const;

/** Reasons of lines the decision log writes itself (config logging.allows). */
export const LOG_REASONS = {
  allow_summary:
    'the allow decisions of one subject on one surface since its previous summary line, counted exactly: logging.allows is summary or sampled, so plain allow lines are not written one by one',
} as const;

/**
 * Reason codes the tools gate (`leash mcp`) adds to the engine's: argument rules, method policy,
 * protocol refusals and server failures. They appear in decision log lines with surface `tools`
 * and in the `data.reason` of the JSON-RPC error the gate answers with.
 */
export const TOOLS_GATE_REASONS = {
  operation_allowed:
    'an allow rule of tools.rules matched every resource of the call (a decision line, never an error)',
  operation_default_allowed:
    'no rule of tools.rules matched and tools.default is allow (a decision line, never an error)',
  operation_denied: 'a deny rule of tools.rules matched the call (one of its resources is enough)',
  operation_default_denied: 'no rule of tools.rules matched the call and tools.default is deny',
  operation_ask:
    'no rule matched and tools.default is ask (explain also says it for an ask rule): the call is held and a human asked',
  operation_unsure:
    'no rule matched an unknown or ambiguous call and tools.default is allow: it asks instead of inheriting the allow',
  arg_denied: 'an argument deny rule matched a value (or a space-joined array of scalars) at or below its path',
  arg_not_allowed: 'the tool has allow rules and a value is not admitted by a rule at exactly its path',
  args_not_object: 'the call arguments are not a JSON object (-32602)',
  args_too_deep: 'the call arguments are nested more than 100 levels deep (-32602)',
  bad_params: 'the params of a policed method are not an object or carry another spelling of a selector (-32602)',
  bad_selector: 'the selector of a policed method (name, uri or ref) is missing, not a string, or not alone (-32602)',
  method_denied: 'the method matches tools.deny_methods (-32601; a notification is dropped)',
  protocol_client: 'the gate refused a client message it would not relay (strict JSON or envelope)',
  protocol_server: 'the gate refused a server message it would not relay (strict JSON or envelope)',
  server_closed: 'the server exited or closed its pipes with the request pending (-32603)',
  server_stalled: 'the server stopped reading its input for longer than --timeout (-32603, exit 3)',
  server_timeout: 'the server did not answer within --timeout (-32603, exit 3)',
  strict_args: 'tools.strict_args is on and a tool without allow rules was called with arguments',
} as const;

/**
 * Why a line is not one strict JSON value (the reader in src/formats/json.ts). The gate and the
 * terminal answer such a line with a JSON-RPC parse error naming the code, and the gate's decision
 * line (`protocol_client` / `protocol_server`) carries it as `code`.
 */
export const JSON_PROBLEMS = {
  syntax: 'not JSON at this byte (or more than one value on the line)',
  control_char: 'a raw control character (TAB, CR, ...) inside or between tokens',
  duplicate_key: 'an object names the same key twice (readers disagree on which one wins)',
  bad_number: 'a number too large for a double (it would read as Infinity)',
  number_too_long: 'an integer of more than 4,300 digits (or a float literal far longer)',
  invalid_utf8: 'bytes that are not UTF-8',
  lone_surrogate: 'a \\u escape of half a UTF-16 surrogate pair',
  too_deep: 'nested more than 512 levels',
  empty: 'an empty line',
} as const;
export type JsonProblem = keyof typeof JSON_PROBLEMS;

/**
 * How an asked action ended (docs/approvals.md): the outcome line that follows its `action: ask` line,
 * with who decided and how. Only the three `approved_*` reasons are an allow.
 */
export const APPROVAL_REASONS = {
  approved_once: 'an approver allowed this one action',
  approved_session:
    'an approver allowed it for the session (tools: until the gate exits or the tool schema changes; host surfaces: until the next reconcile of the subject or the session time-out)',
  approved_persist: "an approver allowed it for good: an allow entry was written to the subject's agent profile",
  approval_denied: 'an approver denied it',
  approval_timeout: "the request's deadline passed before anyone decided: blocked, never allowed",
  approval_unavailable:
    'no approver was reachable (no authorised client subscribed to the approvals socket, or the gate could not reach the service): blocked at once',
  approval_limit: 'the pending requests reached their bound (per subject or in total): blocked at once',
  approval_cancelled:
    'the service stopped (or the subject was removed) with the request pending: blocked, never allowed',
} as const;

/** One `path: message` line of an invalid config (path is dotted, e.g. `network.mode`). */
export interface ConfigIssue {
  path: string;
  message: string;
}

/**
 * The base of every error Leash throws on purpose: `code` is from one of this catalogue's tables.
 * LeashError (ERROR_CODES, with an exit status) is the one for what an operator asked; the strict
 * JSON reader's JsonError (JSON_PROBLEMS) is the other, answered on the wire.
 */
export class CatalogueError<C extends string = string> extends Error {
  readonly code: C;

  constructor(code: C, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/**
 * A refusal or failure with a stable code; the CLI's top-level handler turns it into output and an exit code.
 * Subclasses (GatePolicyError, TerminalPolicyError, ArgRuleError, ...) only add what their catch sites read.
 */
export class LeashError extends CatalogueError<ErrorCode> {
  readonly exitCode: ExitCode;
  readonly details?: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>, options?: { cause?: unknown }) {
    super(code, message, options);
    this.name = 'LeashError';
    this.exitCode = ERROR_CODES[code];
    if (details !== undefined) this.details = details;
  }

  /** The lines printed to stderr: the message with its code (see docs/errors.md), then any `path: message` issues. */
  lines(): string[] {
    const out = [`leash: ${this.message} [${this.code}]`];
    const issues = this.details?.issues as ConfigIssue[] | undefined;
    // A located error already says where in its message.
    if (Array.isArray(issues) && this.details?.located !== true)
      for (const i of issues) out.push(`  ${i.path}: ${i.message}`);
    return out;
  }

  toJSON(): { error: { code: ErrorCode; message: string; details?: Record<string, unknown> } } {
    return { error: { code: this.code, message: this.message, ...(this.details ? { details: this.details } : {}) } };
  }
}

export function isLeashError(e: unknown): e is LeashError {
  return e instanceof LeashError;
}

/** Every documented code, for the docs test. */
export function allCodes(): string[] {
  return [
    ...new Set([
      ...Object.keys(ERROR_CODES),
      ...Object.keys(FINDING_CODES),
      ...Object.keys(REASONS),
      ...Object.keys(TERMINAL_REASONS),
      ...Object.keys(ENTRY_PROBLEMS),
      ...Object.keys(PROXY_REASONS),
      ...Object.keys(DNS_REASONS),
      ...Object.keys(WATCHER_REASONS),
      ...Object.keys(LOG_REASONS),
      ...Object.keys(TOOLS_GATE_REASONS),
      ...Object.keys(JSON_PROBLEMS),
      ...Object.keys(APPROVAL_REASONS),
    ]),
  ];
}
