import { isIP } from 'node:net';
import { z } from 'zod';
import { commandEntryProblem, parseNetworkEntry } from '../../engine/index.js';
import { DEFAULT_INTERNAL } from '../../engine/rebind.js';
import { GATE_DEFAULTS, toolsGateSpecs } from '../../tools/judge/fields.js';
import type { Config } from './types.js';

/**
 * THE schema of /etc/leash/leash.yaml (the floor) and, with `fragment`, of a policy fragment
 * (a profile: only the fields it means to set, no defaults filled in).
 *
 * Defaults are the secure ones: every surface whitelist (default-deny) with empty lists, fail_mode
 * closed, UDP dropped, inspection blocking secrets and privilege escalation. A config that says only
 * `user: fido` therefore denies that account everything on every enabled surface rather than
 * quietly allowing it; packaging/leash.default.yaml is the realistic starting point `leash init` writes.
 *
 * Objects are strict: an unknown key is an error (src/control/config/load.ts adds a "did you mean" suggestion),
 * because a misspelt `alow:` would otherwise be silently dropped and the policy would be
 * narrower or wider than the operator believes.
 */

const MODE_MSG = 'must be whitelist or blacklist';
const LIST_MSG = 'must be a list of strings';

const entryList = (description: string) =>
  z.array(z.string({ error: 'must be a string' }), { error: LIST_MSG }).describe(description);

const mode = (description: string) => z.enum(['whitelist', 'blacklist'], { error: MODE_MSG }).describe(description);

const inspectAction = (description: string) =>
  z.enum(['block', 'log', 'allow'], { error: 'must be block, log or allow' }).describe(description);

const ipList = (description: string) =>
  z
    .array(
      z.string({ error: 'must be a string' }).refine((v) => isIP(v) !== 0, 'must be an IP address'),
      { error: LIST_MSG },
    )
    .describe(description);

const absPathList = (description: string) =>
  z
    .array(
      z.string({ error: 'must be a string' }).refine((v) => v.startsWith('/'), 'must be an absolute path'),
      {
        error: LIST_MSG,
      },
    )
    .describe(description);

/** Why a decisions path can never be a log file (host-independent; the host checks are src/control/config/sink.ts). */
function decisionsPathProblem(s: string): string | null {
  if (s === 'stdout' || !s.startsWith('/')) return null;
  if (/\p{Cc}/u.test(s)) return 'must not contain a NUL or control character';
  if (s === '/' || s.endsWith('/')) return 'must name a file, not a directory';
  if (s.split('/').some((seg, i) => i > 0 && (seg === '' || seg === '.' || seg === '..')))
    return 'must be a plain absolute path (no //, . or .. segments)';
  if (/^\/(proc|sys)(\/|$)/.test(s)) return 'must not be under /proc or /sys (kernel interfaces, not files)';
  if (/^\/dev\//.test(s) && s !== '/dev/null') return 'must not be a device (only /dev/null, which discards)';
  return null;
}

/** Why a `network.internal` entry is not an address range (a name or a port would never match an address). */
function internalRangeProblem(v: string): string | null {
  const e = parseNetworkEntry(v);
  if ('problem' in e) return e.problem.message;
  if (e.kind !== 'ip') return 'must be an IP address or CIDR range, not a name';
  return e.port === null ? null : 'must be a range without a port';
}

const bool = (description: string) => z.boolean({ error: 'must be true or false' }).describe(description);

/** A `host:port` on loopback only (the metrics port is never offered beyond this host). */
function loopbackListen(s: string): boolean {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(s);
  if (!m) return false;
  const host = m[1] ?? m[2]!;
  const port = Number(m[3]);
  return (
    port >= 1 &&
    port <= 65535 &&
    (host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host))
  );
}

/** The two helpers every section is built with: `opt` (a default, or optional in a fragment) and `obj`. */
function helpers<F extends boolean>(fragment: F) {
  // In the full schema a missing field takes its default; in a fragment it stays absent, because
  // every key a fragment carries is a deliberate value that overrides the floor.
  // prefault (not default): zod 4 returns a default as-is, a prefault is parsed, so `network: {}`
  // and an absent `network` both come out with every inner default filled in.
  const opt = <T extends z.ZodType>(schema: T, dflt: unknown): F extends true ? z.ZodOptional<T> : z.ZodPrefault<T> =>
    (fragment ? schema.optional() : schema.prefault(dflt as never)) as never;
  const obj = <S extends z.ZodRawShape>(shape: S, description: string) =>
    z.strictObject(shape, { error: 'must be a mapping' }).describe(description);
  return { opt, obj };
}

/** The sections that are the service's, not policy (the floor only): logging, enforcers, host, approvals. */
function serviceSections<F extends boolean>(fragment: F) {
  const { opt, obj } = helpers(fragment);
  const logging = obj(
    {
      level: opt(
        z
          .enum(['debug', 'info', 'warn', 'error'], { error: 'must be debug, info, warn or error' })
          .describe('the operational log level of the service (not the decision log, which records every decision)'),
        'info',
      ),
      decisions: opt(
        z
          .string({ error: 'must be a string' })
          .refine((s) => s === 'stdout' || s.startsWith('/'), 'must be stdout or an absolute file path')
          .refine((s) => decisionsPathProblem(s) === null, { error: (i) => decisionsPathProblem(String(i.input))! })
          .describe(
            'where decision lines go: stdout (the journal) or an absolute file path, written 0600, append-only',
          ),
        '/var/log/leash/decisions.jsonl',
      ),
      allows: opt(
        z
          .enum(['all', 'sampled', 'summary'], { error: 'must be all, sampled or summary' })
          .describe(
            'plain allow decisions in the decision log: all = one line each; summary = a count per subject and surface every allow_summary_seconds; sampled = that count plus the first allow of each subject and surface in each period written whole. Blocks, asks and approval outcomes are always written',
          ),
        'summary',
      ),
      allow_summary_seconds: opt(
        z
          .number({ error: 'must be a number' })
          .int({ error: 'must be a whole number' })
          .min(1, { error: 'must be at least 1' })
          .max(86_400, { error: 'must be at most 86400' })
          .describe('how often the allow_summary lines are written (logging.allows summary or sampled)'),
        60,
      ),
      journal: opt(
        z
          .enum(['auto', 'on', 'off'], { error: 'must be auto, on or off' })
          .describe(
            "send operational lines and decisions to the journal with fields of their own (LEASH_UID, LEASH_ACTION, …): auto = when $JOURNAL_STREAM is set or journald's socket exists; otherwise stderr as plain JSON lines",
          ),
        'auto',
      ),
      journal_allows: opt(
        z
          .number({ error: 'must be a number' })
          .int({ error: 'must be a whole number' })
          .min(0, { error: 'must be 0 or more' })
          .max(1_000_000, { error: 'must be at most 1000000' })
          .describe(
            'allow decisions in the journal: 0 = none (counted), 1 = every one, n = one in n; blocks always go (the decision log keeps every line)',
          ),
        0,
      ),
      metrics_socket: opt(
        z
          .string({ error: 'must be an absolute path or null' })
          .refine((s) => s.startsWith('/') && !s.endsWith('/') && !s.includes('\0'), 'must be an absolute file path')
          .nullable()
          .describe(
            'the metrics endpoint (GET /metrics, OpenMetrics text) on a unix socket, 0600: what `leash status` reads; null = none',
          ),
        '/run/leash/metrics.sock',
      ),
      metrics_listen: opt(
        z
          .string({ error: 'must be host:port or null' })
          .refine((s) => loopbackListen(s), 'must be a loopback host:port (127.0.0.1:9464, [::1]:9464, localhost:9464)')
          .nullable()
          .describe(
            'also serve the metrics on this loopback TCP address for a scraper (never another address); null = no port',
          ),
        null,
      ),
    },
    'logging: operational level, the decision sink, the journal and the metrics endpoint',
  );

  const enforcers = obj(
    {
      network: opt(bool('enforce the network surface (nftables redirect + proxy)'), true),
      filesystem: opt(bool('enforce the filesystem and commands surfaces (the fanotify watcher)'), true),
      tools: opt(bool('enforce the tools surface (the local gate socket)'), true),
    },
    'per-surface switches; a surface switched off is unenforced and `leash status` says so',
  );

  const host = obj(
    {
      memfd_noexec: opt(
        bool(
          'set vm.memfd_noexec = 2 (kernel 6.3+) for the host while the service runs, restored at stop: no memfd is executable, so memfd_create + fexecve (an exec fanotify cannot see) fails with EACCES; breaks programs that exec from a memfd (container runtimes such as runc, some self-extracting tools)',
        ),
        false,
      ),
      max_user_namespaces: opt(
        bool(
          'set user.max_user_namespaces = 0 for the host while the service runs, restored at stop: no process can make a user namespace, so no agent can mount a filesystem of its own; needs CAP_SYS_RESOURCE (a unit drop-in, docs/policy.md); breaks rootless containers, browser and Flatpak sandboxes, unshare -U',
        ),
        false,
      ),
    },
    'host-wide settings the service applies at start and restores at stop (the floor only; a profile cannot set them)',
  );

  const seconds = (d: string, max: number) =>
    z
      .number({ error: 'must be a number of seconds' })
      .int('must be a whole number of seconds')
      .min(1, 'must be at least 1 second')
      .max(max, `must be at most ${max} seconds`)
      .describe(d);
  const count = (d: string) =>
    z
      .number({ error: 'must be a number' })
      .int('must be a whole number')
      .min(1, 'must be at least 1')
      .max(100_000, 'must be at most 100000')
      .describe(d);
  const approvals = obj(
    {
      operator: opt(
        z
          .string({ error: 'must be an account name' })
          .regex(/^[a-z_][a-z0-9_-]{0,31}\$?$/, 'must be a Linux account name (lowercase, max 32 chars)')
          .nullable()
          .describe(
            'the account that may list and decide approvals besides root (never a leashed subject: the socket refuses any process with a subject UID)',
          ),
        null,
      ),
      deadlines: opt(
        obj(
          {
            network: opt(
              seconds('how long a new connection is held (nothing sent upstream) before it is reset', 600),
              30,
            ),
            filesystem: opt(
              seconds("how long an open is held: the agent's process is blocked in open(2) meanwhile", 120),
              10,
            ),
            commands: opt(
              seconds("how long an exec is held: the agent's process is blocked in execve(2) meanwhile", 120),
              10,
            ),
            tools: opt(seconds('how long a tool call is held (other calls flow meanwhile)', 3600), 120),
          },
          'per surface, seconds until an unanswered request is blocked (approval_timeout), never allowed',
        ),
        {},
      ),
      max_pending: opt(
        count('pending requests at most, all subjects together; beyond it asks are blocked at once'),
        1000,
      ),
      max_pending_per_subject: opt(
        count('pending requests at most per subject; beyond it its asks are blocked at once'),
        200,
      ),
      max_held_opens: opt(
        count(
          'opens and execs the watcher holds at most, all subjects together (each one held slows every other open of the marked filesystems: docs/approvals.md, Load); beyond it an ask on files or commands is blocked at once',
        ),
        2,
      ),
      session_seconds: opt(
        seconds(
          "how long a session approval lasts on the host surfaces (also ended by the subject's next reconcile)",
          86_400,
        ),
        3600,
      ),
    },
    'the approvals queue: who may decide, deadlines and bounds (docs/approvals.md; the floor only, a profile cannot set it)',
  );

  const consoleSection = obj(
    {
      enabled: opt(
        bool('serve the web console from the service (docs/console.md); `leash console` serves it on its own'),
        false,
      ),
      socket: opt(
        z
          .string({ error: 'must be an absolute path' })
          .refine((s) => s.startsWith('/') && !s.endsWith('/') && !s.includes('\0'), 'must be an absolute file path')
          .describe(
            'the console on a unix socket: any process may connect, each request is let in by SO_PEERCRED (root or approvals.operator, never a process with a subject UID) or the token',
          ),
        '/run/leash/console.sock',
      ),
      listen: opt(
        z
          .string({ error: 'must be host:port or null' })
          .refine((s) => /^(?:\[[^\]]+\]|[^:[\]]+):\d{1,5}$/.test(s), 'must be host:port')
          .nullable()
          .describe(
            'also serve the console on this TCP address (the token is required there): a loopback host:port, or any address only with console.tls set; null = no port',
          ),
        null,
      ),
      tls: opt(
        z
          .strictObject(
            {
              cert: z
                .string({ error: 'must be an absolute path' })
                .refine((s) => s.startsWith('/'), 'must be an absolute file path'),
              key: z
                .string({ error: 'must be an absolute path' })
                .refine((s) => s.startsWith('/'), 'must be an absolute file path'),
            },
            { error: 'must be a mapping with cert and key' },
          )
          .nullable()
          .describe('certificate and key files (PEM) for console.listen: HTTPS; required for a non-loopback address'),
        null,
      ),
    },
    'the web console (docs/console.md): the floor only, a profile cannot set it',
  ).refine(
    (c) => {
      const v = c as { listen?: string | null; tls?: unknown };
      return v.listen == null || loopbackListen(v.listen) || (v.tls ?? null) !== null;
    },
    {
      error: 'console.listen names a non-loopback address: that needs console.tls (cert and key)',
      path: ['listen'],
    },
  );

  return { logging, enforcers, host, approvals, console: consoleSection };
}

function build<F extends boolean>(fragment: F) {
  const { opt, obj } = helpers(fragment);

  const surfaceShape = (grammar: string) => ({
    mode: opt(
      mode(
        'whitelist = default-deny (only allow entries pass); blacklist = default-allow (only deny entries block; the allow list is never consulted, and `leash validate` exits 1 when it is not empty)',
      ),
      'whitelist',
    ),
    allow: opt(
      entryList(
        `entries that pass in whitelist mode; each is ${grammar}; one that can never match is refused on write`,
      ),
      [],
    ),
    deny: opt(
      entryList(
        `entries blocked in both modes (deny wins over allow); each is ${grammar}; one that can never match is critical`,
      ),
      [],
    ),
    ask: opt(
      entryList(
        `entries held for a human to decide (deny wins over ask; in whitelist mode an allow entry wins over ask, in blacklist mode ask is what would otherwise pass; docs/approvals.md); each is ${grammar}; with no approver reachable, or its deadline passed, the action is blocked`,
      ),
      [],
    ),
  });

  const network = obj(
    {
      ...surfaceShape('a host (suffix match), *.host, IP or CIDR, optionally :port or [v6]:port, never a URL'),
      dns_resolvers: opt(
        ipList(
          "resolver IPs the DNS forwarder sends the leashed UID's allowed queries to and the proxy resolves through; empty = /etc/resolv.conf",
        ),
        [],
      ),
      udp: opt(
        z
          .enum(['drop', 'allow'], { error: 'must be drop or allow' })
          .describe(
            'drop = all UDP of the leashed UID is dropped except DNS, which its forwarder judges (a TCP proxy cannot judge UDP, and QUIC would bypass it); allow = unfiltered UDP (port 53 still goes to the forwarder), an explicit choice',
          ),
        'drop',
      ),
      dns_refuse: opt(
        z
          .enum(['refused', 'nxdomain'], { error: 'must be refused or nxdomain' })
          .describe(
            'what the DNS forwarder answers for a name the policy refuses (nothing is sent upstream either way): refused = rcode REFUSED, nxdomain = the name does not exist',
          ),
        'refused',
      ),
      internal: opt(
        z
          .array(
            z.string({ error: 'must be a string' }).refine((v) => internalRangeProblem(v) === null, {
              error: (i) => internalRangeProblem(String(i.input))!,
            }),
            { error: LIST_MSG },
          )
          .describe(
            "address ranges (IP or CIDR, IPv4 or IPv6; an IPv4 range covers its ::ffff: form) a name-decided connection and a DNS answer never lead to unless an allow entry names the address itself, so an allowed name whose records someone else controls cannot reach the private network or the metadata address. Loopback, link-local, multicast and the host's own addresses are refused for names whatever this says (reason rebind)",
          ),
        [...DEFAULT_INTERNAL],
      ),
      rebind_ok: opt(
        entryList(
          "names (host, *.host) that may resolve into network.internal ranges (an intranet name), as dnsmasq's rebind-domain-ok; never into loopback, link-local or the host's own addresses",
        ),
        [],
      ),
      ech: z
        .enum(['refuse', 'allow'], { error: 'must be refuse or allow' })
        .optional()
        .describe(
          'a TLS ClientHello carrying encrypted_client_hello: refuse = reset it (its outer name says nothing of the real destination); allow = judge it by the outer name. Absent: refuse in whitelist mode, allow in blacklist mode',
        ),
    },
    'the network surface: TCP over IPv4 and IPv6 through the transparent proxy, UDP by filter',
  );

  const filesystem = obj(
    {
      ...surfaceShape('an absolute path: exact or directory prefix, or a glob with * ** ? ['),
      watch: opt(absPathList('extra absolute paths whose filesystems are marked even when no entry names them'), []),
      namespaces: z
        .enum(['deny', 'allow'], { error: 'must be deny or allow' })
        .optional()
        .describe(
          'a process of the subject found in a user namespace of its own (unshare -U): deny = killed and logged (namespace_denied); allow = left running. Either way the filesystems it mounts there are marked, and under a whitelist their files are namespace_denied. Absent: deny when filesystem or commands is a whitelist',
        ),
    },
    'the filesystem surface: file opens of the leashed UID (fanotify FAN_OPEN_PERM)',
  );

  // `leash terminal`'s argument rules (docs/terminal.md): keyed by a command entry of the same grammar
  // as allow/deny; a key that can never match is refused, since its deny_args would deny nothing.
  const argRule = z
    .strictObject(
      {
        deny_args: z
          .array(z.string({ error: 'must be a string' }).trim().min(1, 'must not be empty'), { error: LIST_MSG })
          .min(1, 'must name at least one pattern')
          .describe('argument patterns: one denies when all its tokens appear in the argv, in any order'),
        reason: z
          .string({ error: 'must be a string' })
          .optional()
          .describe("the operator's words, appended to the terminal's policy_reason"),
      },
      { error: 'must be a mapping with deny_args' },
    )
    .describe("one command entry's argument rules");
  const commandArgs = z
    .record(z.string(), argRule, { error: 'must be a mapping of command entry to { deny_args, reason }' })
    .superRefine((rec, ctx) => {
      for (const key of Object.keys(rec)) {
        const p = commandEntryProblem(key);
        if (p) ctx.addIssue({ code: 'custom', path: [key], message: `${p.message} (an args key is a command entry)` });
      }
    })
    .describe(
      'leash terminal: per-command argument rules, keyed by a command entry (basename or absolute path); a matching argv is refused before it runs',
    );

  const commands = obj(
    {
      ...surfaceShape('a basename, or an absolute path matched exactly'),
      args: opt(commandArgs, {}),
      // No default here: absent means the system's dynamic loaders, found when the watcher starts.
      interpreters: z
        .array(
          z
            .string({ error: 'must be a string' })
            .refine((e) => e.startsWith('/'), 'must be an absolute path (a name would imply any file of that name)'),
          { error: LIST_MSG },
        )
        .optional()
        .describe(
          'whitelist mode: interpreters (ELF PT_INTERP loaders, #! interpreters) allowed only when the kernel loads them for an allowed program, never run directly; absent = the dynamic loaders found in the standard paths (`leash status` lists them)',
        ),
    },
    'the commands surface: executions by the leashed UID (fanotify FAN_OPEN_EXEC_PERM)',
  );

  const inspect = obj(
    {
      secrets: opt(
        inspectAction('what to do when a tool input carries an API key, token, JWT or private key block'),
        'block',
      ),
      pii: opt(inspectAction('what to do when a tool input carries PII (email addresses at least)'), 'log'),
      priv_esc: opt(
        inspectAction(
          'what to do when a tool input carries privilege escalation (sudo, chmod +s, pkexec, doas, rm -rf /)',
        ),
        'block',
      ),
    },
    'tool input inspection: an action per category; matches are masked before anything is logged',
  );

  const tools = obj(
    {
      ...surfaceShape('an exact tool name'),
      inspect: opt(inspect, { secrets: 'block', pii: 'log', priv_esc: 'block' }),
      // The MCP gate's policy fields (./tools.ts), with the gate's defaults.
      args: opt(toolsGateSpecs.args, GATE_DEFAULTS.args),
      strict_args: opt(toolsGateSpecs.strict_args, GATE_DEFAULTS.strict_args),
      policed_methods: opt(toolsGateSpecs.policed_methods, GATE_DEFAULTS.policed_methods),
      deny_methods: opt(toolsGateSpecs.deny_methods, GATE_DEFAULTS.deny_methods),
      hide_denied: opt(toolsGateSpecs.hide_denied, GATE_DEFAULTS.hide_denied),
      log_args: opt(toolsGateSpecs.log_args, GATE_DEFAULTS.log_args),
      rules: opt(toolsGateSpecs.rules, GATE_DEFAULTS.rules),
      default: opt(toolsGateSpecs.default, GATE_DEFAULTS.default),
      workspace: opt(toolsGateSpecs.workspace, GATE_DEFAULTS.workspace),
      mapping: opt(toolsGateSpecs.mapping, GATE_DEFAULTS.mapping),
      redact_output: opt(toolsGateSpecs.redact_output, GATE_DEFAULTS.redact_output),
      audit: opt(toolsGateSpecs.audit, GATE_DEFAULTS.audit),
    },
    'the tools surface: calls checked by the harness or the MCP gate (cooperative)',
  );

  const { logging, enforcers, host, approvals, console: consoleSection } = serviceSections(fragment);

  return z.strictObject(
    {
      user: opt(
        z
          .string({ error: 'must be an account name' })
          .regex(/^[a-z_][a-z0-9_-]{0,31}\$?$/, 'must be a Linux account name (lowercase, max 32 chars)')
          .nullable()
          .describe('the leashed Linux account (its UID is resolved at load); null until `leash init --user`'),
        null,
      ),
      fail_mode: opt(
        z
          .enum(['closed', 'open'], { error: 'must be closed or open' })
          .describe(
            'closed blocks and open allows when an enforcer cannot reach a decision; any other value is read as closed with a warning, so a typo cannot disable enforcement',
          ),
        'closed',
      ),
      enforce: opt(
        z
          .enum(['enforce', 'shadow'], { error: 'must be enforce or shadow' })
          .describe(
            'shadow makes every decision and logs a block as would_block, blocking nothing (a profile tried on one agent without risk; never the configured user); enforce blocks',
          ),
        'enforce',
      ),
      network: opt(network, {}),
      filesystem: opt(filesystem, {}),
      commands: opt(commands, {}),
      tools: opt(tools, {}),
      logging: opt(logging, {}),
      enforcers: opt(enforcers, {}),
      host: opt(host, {}),
      approvals: opt(approvals, {}),
      console: opt(consoleSection, {}),
    },
    { error: 'must be a mapping' },
  );
}

/** The full config schema: every field defaulted. Output is a complete `Config`. */
export const configSchema = build(false);

/** The fragment schema (profiles): the same fields and checks, every field optional, no defaults. */
export const fragmentSchema = build(true);

export type ConfigFragment = z.output<typeof fragmentSchema>;

// Compile-time guarantee that the schema's output is exactly the Config contract.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const _sameShape: Same<z.output<typeof configSchema>, Config> = true;
void _sameShape;

/** The key names known at a dotted path of the schema (for "did you mean" on unknown keys). */
export function knownKeysAt(path: readonly (string | number)[], fragment = false): string[] {
  let node: z.ZodType = fragment ? fragmentSchema : configSchema;
  for (const seg of [...path, null]) {
    // Peel defaults/optional/nullable wrappers to reach the object.
    for (;;) {
      const def = (node as unknown as { _zod: { def: { type: string; innerType?: z.ZodType } } })._zod.def;
      if (
        (def.type === 'default' || def.type === 'prefault' || def.type === 'optional' || def.type === 'nullable') &&
        def.innerType
      ) {
        node = def.innerType;
      } else break;
    }
    if (!(node instanceof z.ZodObject)) return [];
    if (seg === null) return Object.keys(node.shape);
    const next = (node.shape as Record<string, z.ZodType>)[String(seg)];
    if (!next) return [];
    node = next;
  }
  return [];
}
