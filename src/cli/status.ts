import type { Command } from 'commander';
import { loadConfig } from '../control/config/load.js';
import { SURFACES } from '../engine/types.js';
import { systemLoaders } from '../dataplane/watcher/loaders.js';
import { bpfLsmStatus } from '../control/daemon/bpf-lsm.js';
import { maxUserNamespacesStatus, memfdNoexecStatus } from '../control/daemon/host.js';
import { effectiveNamespaces } from '../dataplane/watcher/namespaces.js';
import { configPath, print, printJson } from './context.js';
import { parseMetricsText, summarize } from '../metrics/metrics.js';
import { fetchMetrics } from '../metrics/server.js';
import { layerOf, subjectOptions, subjectView } from './subject.js';
import { confinementOf, subjectUid } from './confinement.js';
import { pidNsWarnings } from '../dataplane/watcher/pidns.js';

export function register(program: Command): void {
  const cmd = program
    .command('status')
    .description(
      "print the user, a subject's resolved policy per surface (mode, list sizes and the layer each came from), enforcer toggles and the decision sink",
    )
    .option('--json', 'print the status as JSON');
  subjectOptions(cmd).action(async (opts: { json?: boolean; subject?: string; stateDir?: string }, cmd: Command) => {
    const file = configPath(cmd);
    const { config, account, findings } = loadConfig(file);
    const view = subjectView(config, opts);
    const r = view.resolution;
    // The policy the service enforces for the subject: the floor, the global binding, its agent binding.
    // A subject that cannot be resolved is held fail-closed; the floor's lists are shown, marked as such.
    const policy = r.ok ? r.policy : config;
    const from = (section: string, key: string) => (r.ok ? layerOf(r.sources, section, key) : 'floor');
    // Commands ride the filesystem watcher (one fanotify daemon), so they share its toggle.
    const switched = {
      network: config.enforcers.network,
      filesystem: config.enforcers.filesystem,
      commands: config.enforcers.filesystem,
      tools: config.enforcers.tools,
    };
    // On only where it also holds now (the nft map, the watcher's acknowledged map): a switch is not confinement.
    const uid = subjectUid(view.account, account?.uid);
    const now = uid === null ? null : await confinementOf(uid);
    const enforced = Object.fromEntries(
      SURFACES.map((s) => [s, switched[s] && (now === null || now[s].confined)]),
    ) as typeof switched;
    const notConfined = now === null ? [] : SURFACES.filter((s) => switched[s] && !now[s].confined);
    const surfaces = Object.fromEntries(
      SURFACES.map((s) => [
        s,
        {
          mode: policy[s].mode,
          allow: policy[s].allow.length,
          deny: policy[s].deny.length,
          enforced: enforced[s],
          ...(now !== null && switched[s] && !now[s].confined ? { not_confined: now[s].why } : {}),
          from: { mode: from(s, 'mode'), allow: from(s, 'allow'), deny: from(s, 'deny') },
        },
      ]),
    );
    // What the watcher implies for an allowed program (commands.interpreters, or the system's loaders).
    const interpreters = {
      source: policy.commands.interpreters ? 'config' : 'system_loaders',
      entries: policy.commands.interpreters ?? systemLoaders(),
    };
    // Host settings (config `host`): what is configured, and what the kernel says now.
    const host = { memfd_noexec: memfdNoexecStatus(config), max_user_namespaces: maxUserNamespacesStatus(config) };
    // filesystem.namespaces as enforced for this subject (absent: deny under a filesystem or commands whitelist).
    const namespaces = effectiveNamespaces(policy);
    // Whether the BPF LSM could be loaded here (Leash does not use it; docs/threat-model.md).
    const bpf_lsm = bpfLsmStatus();
    const counts = {
      critical: findings.filter((f) => f.severity === 'critical').length + notConfined.length,
      warning: findings.filter((f) => f.severity === 'warning').length,
    };
    const subject = {
      account: view.account,
      kind: view.kind,
      layers: r.ok ? r.layers : null,
      failure: r.ok ? null : { code: r.failure.code, scope: r.failure.scope, message: r.failure.message },
    };
    // The running service's own figures, from its metrics socket (null when no service answers there).
    const socket =
      process.env.LEASH_METRICS_SOCKET !== undefined
        ? process.env.LEASH_METRICS_SOCKET || null
        : config.logging.metrics_socket;
    const text = socket === null ? null : await fetchMetrics(socket);
    const live = text === null ? null : summarize(parseMetricsText(text));
    // The service or its watcher outside the host's initial PID namespace (the processes report their own).
    const pidNamespaceWarnings = live === null ? [] : pidNsWarnings(live.pidNamespaces, live.foreignPidEvents);
    if (opts.json) {
      printJson({
        live,
        config: file,
        user: config.user,
        uid: account?.uid ?? null,
        subject,
        fail_mode: policy.fail_mode,
        enforce: policy.enforce,
        surfaces,
        interpreters,
        namespaces,
        enforcers: config.enforcers,
        host,
        bpf_lsm,
        decisions: config.logging.decisions,
        findings: counts,
        pid_namespace_warnings: pidNamespaceWarnings,
      });
      return;
    }
    print(`config     ${file}`);
    print(
      `user       ${config.user ?? '(none: run leash init --user NAME)'}${account ? ` (uid ${account.uid})` : config.user ? ' (no such account)' : ''}`,
    );
    if (view.account !== null && view.account !== config.user) print(`subject    ${view.account}`);
    if (r.ok && r.layers.length > 1) print(`layers     ${r.layers.join(' + ')}`);
    if (!r.ok) print(`FAILED     ${r.failure.code}: ${r.failure.message} (files, exec and tools denied)`);
    print(`fail_mode  ${policy.fail_mode}`);
    print(
      `enforce    ${policy.enforce}${policy.enforce === 'shadow' ? ` (from ${r.ok ? (r.sources.enforce ?? 'floor') : 'floor'}: NOTHING IS BLOCKED, would-be blocks are logged as would_block)` : ''}`,
    );
    for (const s of SURFACES) {
      const v = surfaces[s]!;
      const layers = [...new Set(Object.values(v.from))].filter((l) => l !== 'floor');
      print(
        `${s.padEnd(10)} ${v.mode.padEnd(9)}  allow ${String(v.allow).padStart(4)}  deny ${String(v.deny).padStart(4)}  enforcer ${v.enforced ? 'on' : 'not_confined' in v ? `OFF (not confined: ${v.not_confined})` : 'OFF (not enforced)'}${
          layers.length
            ? `  (from ${Object.entries(v.from)
                .filter(([, l]) => l !== 'floor')
                .map(([k, l]) => `${k}: ${l}`)
                .join(', ')})`
            : ''
        }`,
      );
    }
    print(
      `interpreters ${interpreters.source === 'config' ? '(commands.interpreters)' : '(system dynamic loaders)'} ${interpreters.entries.join(' ') || '(none)'}`,
    );
    const m = host.memfd_noexec;
    print(
      `memfd      host.memfd_noexec ${m.configured ? 'on' : 'off'}; vm.memfd_noexec ${m.current === null ? 'absent (kernel before 6.3)' : `= ${m.current}`}` +
        `${m.enforced ? ' (memfd exec refused)' : ' (memfd exec allowed)'}${m.configured && !m.enforced ? ' (not applied: is the service running?)' : ''}`,
    );
    const u = host.max_user_namespaces;
    print(
      `userns     host.max_user_namespaces ${u.configured ? 'on' : 'off'}; user.max_user_namespaces ${u.current === null ? 'absent' : `= ${u.current}`}` +
        `${u.enforced ? ' (no user namespace can be made)' : ' (user namespaces can be made)'}${u.configured && !u.enforced ? ' (not applied: is the service running?)' : ''}`,
    );
    print(
      `namespaces ${namespaces} (a subject process in a user namespace of its own is ${namespaces === 'deny' ? 'killed' : 'left running'}; filesystems it mounts are marked either way)`,
    );
    print(
      `bpf lsm    ${
        !bpf_lsm.probed
          ? `not probed (${bpf_lsm.reason ?? 'unknown'})`
          : bpf_lsm.loadable
            ? 'an LSM program loads here (Leash does not use it: see docs/threat-model.md)'
            : `refused (${bpf_lsm.code ?? '?'})${bpf_lsm.control ? '; a socket filter loads: the kernel refuses LSM programs' : ''}; Leash uses fanotify`
      }${bpf_lsm.listed === null ? '' : bpf_lsm.listed ? '; bpf is an active LSM' : '; bpf is not an active LSM'}`,
    );
    print(`decisions  ${config.logging.decisions}`);
    if (live === null) print(`service    not answering on ${socket ?? '(no metrics socket configured)'}`);
    else {
      const subj = Object.entries(live.subjects)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ');
      print(`service    running; subjects ${subj || 'none'}`);
      for (const [surface, d] of Object.entries(live.decisions))
        print(
          `  ${surface.padEnd(10)} allowed ${d.allow}  blocked ${d.block}${d.would_block ? `  would_block ${d.would_block}` : ''}${d.other ? `  other ${d.other}` : ''}`,
        );
      if (live.watcherQueueDepth !== null)
        print(
          `  watcher    queue ${live.watcherQueueDepth}  allows counted, not written ${live.watcherAllowsCounted ?? 0}`,
        );
      if (live.approvals !== null)
        print(
          `  approvals  held ${live.approvals.pending}  decided ${live.approvals.decided}  timed out ${live.approvals.timeouts}`,
        );
      if (live.journal !== null)
        print(
          `  journal    ${Object.entries(live.journal)
            .map(([k, v]) => `${k} ${v}`)
            .join('  ')}`,
        );
    }
    for (const w of pidNamespaceWarnings) print(`WARNING    ${w}`);
    if (counts.critical || counts.warning) {
      print(`findings   ${counts.critical} critical, ${counts.warning} warning (run: leash validate)`);
    }
  });
}
