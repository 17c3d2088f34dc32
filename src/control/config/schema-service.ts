/**
 * The sections of the config that are the service's, not policy (the floor only; a profile cannot
 * set them): logging, enforcers, host, approvals, console. Built with ./schema-helpers.ts.
 */
import { z } from 'zod';
import { bool, decisionsPathProblem, helpers, loopbackListen } from './schema-helpers.js';

function loggingSection<F extends boolean>(fragment: F) {
  const { opt, obj } = helpers(fragment);
  return obj(
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
}

/** The sections that are the service's, not policy (the floor only): logging, enforcers, host, approvals, console. */
export function serviceSections<F extends boolean>(fragment: F) {
  const { opt, obj } = helpers(fragment);
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
  return {
    logging: loggingSection(fragment),
    enforcers,
    host,
    approvals: approvalsSection(fragment),
    console: consoleSection(fragment),
  };
}

function approvalsSection<F extends boolean>(fragment: F) {
  const { opt, obj } = helpers(fragment);
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
  return obj(
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
}

function consoleSection<F extends boolean>(fragment: F) {
  const { opt, obj } = helpers(fragment);
  return obj(
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
}
