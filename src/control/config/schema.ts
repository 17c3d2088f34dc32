import { z } from 'zod';
import { DEFAULT_INTERNAL } from '../../engine/rebind.js';
import { GATE_DEFAULTS, toolsGateSpecs } from '../../tools/judge/fields.js';
import { commandArgsSchema, LIST_MSG } from '../../tools/terminal/fields.js';
import {
  absPathList,
  entryList,
  helpers,
  inspectAction,
  internalRangeProblem,
  ipList,
  mode,
} from './schema-helpers.js';
import { serviceSections } from './schema-service.js';
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

/** The fields every surface has: mode, allow, deny, ask, each entry in the surface's own grammar. */
function surfaceShape<F extends boolean>(fragment: F, grammar: string) {
  const { opt } = helpers(fragment);
  return {
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
  };
}

/** The network and filesystem surfaces. */
function hostSurfaces<F extends boolean>(fragment: F) {
  const { opt, obj } = helpers(fragment);
  const network = obj(
    {
      ...surfaceShape(
        fragment,
        'a host (suffix match), *.host, IP or CIDR, optionally :port or [v6]:port, never a URL',
      ),
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
      ...surfaceShape(fragment, 'an absolute path: exact or directory prefix, or a glob with * ** ? ['),
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

  return { network, filesystem };
}

/** The commands and tools surfaces: the watcher's and the terminal's commands, the gate's tools. */
function agentSurfaces<F extends boolean>(fragment: F) {
  const { opt, obj } = helpers(fragment);
  const commands = obj(
    {
      ...surfaceShape(fragment, 'a basename, or an absolute path matched exactly'),
      args: opt(commandArgsSchema, {}),
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
      ...surfaceShape(fragment, 'an exact tool name'),
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

  return { commands, tools };
}

function build<F extends boolean>(fragment: F) {
  const { opt } = helpers(fragment);
  const { network, filesystem } = hostSurfaces(fragment);
  const { commands, tools } = agentSurfaces(fragment);
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
