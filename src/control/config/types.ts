import type { FailMode, SurfacePolicy, ToolsSurfacePolicy } from '../../engine/types.js';
import type { ToolsGateFields } from '../../tools/judge/fields.js';
import type { ArgRule } from '../../tools/terminal/fields.js';

export type { ArgRule };

/** The whole /etc/leash/leash.yaml after defaults are applied. The schema lives in schema.ts. */
export interface Config {
  /** The leashed account of the single-subject path (null until `leash init`). */
  user: string | null;
  fail_mode: FailMode;
  /**
   * `shadow`: every decision is made and logged, a block as `would_block`, and nothing is blocked
   * (docs/policy.md "Shadow mode"); `enforce` (the default) blocks. Never shadow for the configured user.
   */
  enforce: 'enforce' | 'shadow';
  network: SurfacePolicy & {
    /** Entries asked of a human (docs/approvals.md); [] by default. */
    ask: string[];
    /** Resolvers the DNS forwarder sends allowed queries to and the proxy resolves through; empty = /etc/resolv.conf. */
    dns_resolvers: string[];
    udp: 'drop' | 'allow';
    /** What the DNS forwarder answers for a name the policy refuses. */
    dns_refuse: 'refused' | 'nxdomain';
    /** Ranges a name never leads to unless an entry names the address (docs/network.md "Names and local addresses"). */
    internal: string[];
    /** Names that may resolve into `internal`. */
    rebind_ok: string[];
    /** ClientHellos with encrypted_client_hello: absent = refuse in whitelist mode, allow in blacklist mode. */
    ech?: 'refuse' | 'allow';
  };
  filesystem: SurfacePolicy & {
    ask: string[];
    /** Extra paths whose filesystems are marked even when no entry names them. */
    watch: string[];
    /** A subject process in a user namespace of its own: absent = deny under a filesystem or commands whitelist. */
    namespaces?: 'deny' | 'allow';
  };
  commands: SurfacePolicy & {
    ask: string[];
    /** `leash terminal`'s argument rules, keyed by a command entry (docs/terminal.md). */
    args: Record<string, ArgRule>;
    /** Interpreters implied for an allowed program only (absent: the system's dynamic loaders). */
    interpreters?: string[];
  };
  /** The engine's tools surface plus the MCP gate's fields (docs/tools.md). */
  tools: ToolsSurfacePolicy & ToolsGateFields & { ask: string[] };
  logging: {
    level: 'debug' | 'info' | 'warn' | 'error';
    decisions: string;
    allows: 'all' | 'sampled' | 'summary';
    allow_summary_seconds: number;
    journal: 'auto' | 'on' | 'off';
    journal_allows: number;
    metrics_socket: string | null;
    metrics_listen: string | null;
  };
  enforcers: { network: boolean; filesystem: boolean; tools: boolean };
  /** Host-wide settings the service applies at start and restores at stop (src/control/daemon/host.ts). */
  host: { memfd_noexec: boolean; max_user_namespaces: boolean };
  /** The approvals queue (docs/approvals.md); the floor only. */
  approvals: {
    operator: string | null;
    deadlines: { network: number; filesystem: number; commands: number; tools: number };
    max_pending: number;
    max_pending_per_subject: number;
    /** The watcher's own, lower bound on held opens and execs (each one held slows every other open). */
    max_held_opens: number;
    session_seconds: number;
  };
  /** The web console (docs/console.md); the floor only. */
  console: {
    enabled: boolean;
    socket: string;
    listen: string | null;
    tls: { cert: string; key: string } | null;
  };
}
