/**
 * `leash demo`: shows Leash deciding, end to end, without touching the host. It builds the lab (an agent and an
 * "internet" network namespace), creates a demo agent account, runs the service's network enforcer with the shipped
 * default policy inside the agent namespace and the fanotify watcher on a tmpfs of the demo's own (the policy's
 * filesystem and commands entries re-rooted there, see fs.ts), performs allowed and blocked actions AS that
 * account, prints what was decided and why, and tears everything down (also on Ctrl-C or failure).
 *
 * Steps are data (DEMO_STEPS): another surface adds its own by appending to the list (or passing `steps`).
 */
import fs from 'node:fs';
import type { Command } from 'commander';
import { loadConfig } from '../../control/config/load.js';
import type { Config } from '../../control/config/types.js';
import { EXIT, LeashError } from '../../errors.js';
import { SINGLE_SUBJECT_PORT } from '../../dataplane/network/nft/render.js';
import type { DecisionRecord } from '../../log/decisions.js';
import { nftAvailable } from '../../dataplane/network/nft/apply.js';
import { hostRunner } from '../../dataplane/network/nft/run.js';
import { buildLab, createCleanups, type Lab, type LabHost, type LabUser } from './netns.js';
import type { Probe, ProbeResult } from './probe.js';
import { nativeAvailable } from '../../native.js';
import { defaultPolicyPath } from '../../paths.js';
import { toPolicyInput } from '../../control/config/policy-input.js';
import { FS_DEMO_STEPS, setupDemoFs, type DemoFs } from './fs.js';

/** The demo's "internet": names the default policy talks about, on lab addresses. */
export const DEMO_HOSTS: LabHost[] = [
  { name: 'github.com', v4: '198.18.1.10', v6: '2001:db8:1::10' },
  { name: 'api.github.com', v4: '198.18.1.11', v6: '2001:db8:1::11' },
  { name: 'api.anthropic.com', v4: '198.18.1.12', v6: '2001:db8:1::12' },
  { name: 'pastebin.com', v4: '198.18.1.20', v6: '2001:db8:1::20' },
  { name: 'metadata.google.internal', v4: '169.254.169.254', v6: '2001:db8:1::254' },
];

/** A decision line as read back from the log. */
export type LoggedDecision = DecisionRecord & { ref?: string; ts?: string };

export interface DemoContext {
  lab: Lab;
  agent: LabUser;
  config: Config;
  /** Runs probes as the demo agent inside the agent namespace. */
  probe(probes: Probe[]): Promise<ProbeResult[]>;
  /** The demo's tmpfs and watcher (absent when the policy disables the filesystem enforcer). */
  fs?: DemoFs;
  /** Every decision line written so far (network enforcer and watcher share one log). */
  decisions(): LoggedDecision[];
}

export interface StepOutcome {
  /** What the agent saw: allowed (it worked), blocked (reset, EPERM, ...), or an error that is neither. */
  result: 'allowed' | 'blocked' | 'error';
  detail: string;
  /** The decision line this step is about, when the step can tell (else the step's last one is shown). */
  decision?: LoggedDecision;
}

export interface DemoStep {
  surface: 'network' | 'filesystem' | 'commands' | 'tools';
  title: string;
  /** What the default policy should do with it. */
  expect: 'allowed' | 'blocked';
  run(ctx: DemoContext): Promise<StepOutcome>;
}

function reached(r: ProbeResult): string {
  const a = r.data.indexOf('{');
  const b = r.data.lastIndexOf('}');
  if (a < 0 || b < a) return r.data.trim().slice(0, 60);
  try {
    const rep = JSON.parse(r.data.slice(a, b + 1)) as { sni?: string; host?: string; local: string; port: number };
    return `upstream saw ${rep.sni ?? rep.host ?? '-'} at ${rep.local}:${rep.port}`;
  } catch {
    return r.data.slice(0, 60);
  }
}

function probeStep(surface: DemoStep['surface'], title: string, expect: DemoStep['expect'], p: Probe): DemoStep {
  return {
    surface,
    title,
    expect,
    async run(ctx) {
      const [r] = await ctx.probe([p]);
      if (!r) throw new Error('probe gave no result');
      return r.ok
        ? {
            result: 'allowed',
            detail: p.kind === 'udp' ? 'datagram sent' : p.kind.startsWith('dns') ? r.data : reached(r),
          }
        : { result: 'blocked', detail: `${r.code} after ${r.ms} ms` };
    },
  };
}

/**
 * SNI github.com sent to pastebin.com's address. The proxy allows the name and dials the name's own address, so
 * the row says where the connection went: pastebin.com is never reached, whatever the agent aimed at.
 */
function forgedSniStep(): DemoStep {
  const aimed = '198.18.1.20';
  return {
    surface: 'network',
    title: "Forged SNI 'github.com' aimed at pastebin.com's address",
    expect: 'allowed',
    async run(ctx) {
      const [r] = await ctx.probe([tls(aimed, 'github.com')]);
      if (!r) throw new Error('probe gave no result');
      if (!r.ok) return { result: 'blocked', detail: `${r.code} after ${r.ms} ms` };
      const saw = reached(r);
      const went = / at (\S+):\d+$/.exec(saw)?.[1];
      return {
        result: 'allowed',
        detail:
          went && went !== aimed
            ? `allowed as github.com, and sent to github.com's own address ${went}: pastebin.com (${aimed}) never reached`
            : `REACHED ${aimed}: ${saw}`,
      };
    },
  };
}

/** A TLS probe to port 443 with this SNI. */
const tls = (host: string, servername: string): Probe => ({ kind: 'tls', host, port: 443, servername });
/** A plain-HTTP probe to port 80 with this Host header. */
const http = (host: string, hostHeader: string): Probe => ({ kind: 'http', host, port: 80, hostHeader });

/** The built-in steps, against packaging/leash.default.yaml. */
export const DEMO_STEPS: DemoStep[] = [
  probeStep('network', 'HTTPS to github.com', 'allowed', tls('198.18.1.10', 'github.com')),
  probeStep(
    'network',
    'HTTP to api.github.com (suffix of github.com)',
    'allowed',
    http('198.18.1.11', 'api.github.com'),
  ),
  probeStep('network', 'HTTPS to api.anthropic.com over IPv6', 'allowed', tls('2001:db8:1::12', 'api.anthropic.com')),
  probeStep('network', 'HTTPS to pastebin.com (not on the whitelist)', 'blocked', tls('198.18.1.20', 'pastebin.com')),
  forgedSniStep(),
  probeStep(
    'network',
    'Cloud metadata 169.254.169.254 (deny entry)',
    'blocked',
    http('169.254.169.254', '169.254.169.254'),
  ),
  probeStep('network', 'Direct connection to the proxy port 127.0.0.1:18443', 'blocked', {
    kind: 'tcp',
    host: '127.0.0.1',
    port: SINGLE_SUBJECT_PORT,
    send: 'GET / HTTP/1.1\r\nHost: github.com\r\n\r\n',
  }),
  probeStep('network', 'UDP/443 to pastebin.com (QUIC)', 'blocked', { kind: 'udp', host: '198.18.1.20', port: 443 }),
  // Port 53 anywhere lands on the subject's DNS forwarder, which judges the name: a name the policy does not
  // allow is answered REFUSED and never leaves (before the forwarder this row was a UDP drop, EPERM).
  probeStep('network', "DNS query for pastebin.com to a server that is not the host's resolver", 'blocked', {
    kind: 'dnsudp',
    server: '198.18.1.20',
    name: 'pastebin.com',
  }),
  probeStep('network', 'DNS lookup of github.com through the host resolver', 'allowed', {
    kind: 'dns',
    name: 'github.com',
  }),
  ...FS_DEMO_STEPS,
];

/** What the demo set up, for tests that check it is all gone afterwards. */
export interface DemoSetup {
  agentNs: string;
  upstreamNs: string;
  account: string;
  enforcerPid: number;
  fsRoot?: string;
  watcherPid?: number;
  marks?: string[];
}

export interface DemoOptions {
  id?: string;
  account?: string;
  policyPath?: string;
  json?: boolean;
  steps?: DemoStep[];
  out?: (s: string) => void;
  /** Called once everything is up, before the first step. */
  onSetup?: (s: DemoSetup) => void;
}

export interface Row {
  step: DemoStep;
  outcome: StepOutcome;
  decisions: LoggedDecision[];
}

function readDecisions(file: string): LoggedDecision[] {
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as LoggedDecision);
}

function pad(s: string, n: number): string {
  return s.length > n ? s.slice(0, n - 1) + '…' : s.padEnd(n);
}

function describeDecision(row: Row): string {
  const d = row.outcome.decision ?? row.decisions[row.decisions.length - 1];
  if (d) {
    const rule = d.rule ? ` rule=${d.rule}` : '';
    // interpreter_of: the program the kernel loaded the interpreter for.
    const of = (d.subject as { interpreterOf?: unknown } | null)?.interpreterOf;
    const served = typeof of === 'string' ? ` of=${of}` : '';
    const sev = d.severity ? ` ${d.severity.toUpperCase()}` : '';
    return `${d.action} ${d.reason}${rule}${served}${sev}${d.ref ? ` ref=${d.ref}` : ''}`;
  }
  if (row.step.surface === 'network' && row.outcome.result === 'blocked') return 'kernel: nft filter drop (UDP)';
  if (row.step.surface === 'network') return 'kernel: not redirected (DNS to resolver)';
  return 'no decision line';
}

/**
 * The demo's table: the action column as wide as its longest title (a cut title hid what row 9 did), each
 * row's detail on the line below it. `short` rewrites the tmpfs root as <t>.
 */
export function renderTable(rows: readonly Row[], agentName: string, short: (s: string) => string = (s) => s): string {
  const head = `action (as ${agentName})`;
  const w = Math.max(head.length, ...rows.map((r) => r.step.title.length)) + 2;
  let text = `  ${pad('#', 3)}${pad(head, w)}${pad('expected', 9)}${pad('outcome', 9)}why\n`;
  rows.forEach((r, i) => {
    const mark = r.outcome.result === r.step.expect ? ' ' : '!';
    text += `${mark} ${pad(String(i + 1), 3)}${pad(r.step.title, w)}${pad(r.step.expect, 9)}${pad(r.outcome.result, 9)}${short(describeDecision(r))}\n`;
    text += `  ${pad('', 3)}${pad('', w)}${pad('', 18)}${r.outcome.detail}\n`;
  });
  return text;
}

/** Runs the demo; returns the exit code (0 when every step did what the policy says). */
export async function runDemo(opts: DemoOptions = {}): Promise<number> {
  let interrupted = false;
  let stdoutGone = false;
  const out =
    opts.out ??
    ((s: string) => {
      if (!stdoutGone) process.stdout.write(s);
    });
  if (!opts.out)
    // `leash demo | head` closes the pipe: an unhandled EPIPE would end the process before its teardown and leave
    // the namespaces, the account and the tmpfs behind. Stop the steps and tear down instead (the listener stays,
    // for writes still in flight).
    process.stdout.on('error', () => {
      stdoutGone = true;
      interrupted = true;
    });
  if (process.getuid?.() !== 0)
    throw new LeashError('usage', 'leash demo needs root (it creates network namespaces and an account)');
  const host = hostRunner();
  if (!(await nftAvailable(host)))
    throw new LeashError('service_failed', 'leash demo needs nftables: apt-get install -y nftables');
  const missing: string[] = [];
  for (const [tool, pkg] of [
    ['ip', 'iproute2'],
    ['openssl', 'openssl'],
    ['setpriv', 'util-linux'],
    ['useradd', 'passwd'],
    ['chroot', 'coreutils'],
    ['ldd', 'libc-bin'],
  ] as const) {
    if ((await host(['sh', '-c', `command -v ${tool}`])).code !== 0) missing.push(pkg);
  }
  if (missing.length)
    throw new LeashError('service_failed', `leash demo needs: apt-get install -y ${missing.join(' ')}`, { missing });
  if (!nativeAvailable())
    throw new LeashError('native_unavailable', 'the native addon is not built (npm run build:native)');
  const policyPath = opts.policyPath ?? defaultPolicyPath();
  const loaded = loadConfig(policyPath, { lookup: () => null });
  const config = loaded.config;
  // The filesystem half needs the watcher; a policy that turns that enforcer off gets the network steps only.
  const fsOn = config.enforcers.filesystem;
  const steps = (opts.steps ?? DEMO_STEPS).filter(
    (s) => fsOn || (s.surface !== 'filesystem' && s.surface !== 'commands'),
  );
  const needFs = steps.some((s) => s.surface === 'filesystem' || s.surface === 'commands');
  const cleanups = createCleanups();
  const onSignal = () => {
    interrupted = true;
    out('\ninterrupted: tearing the demo down…\n');
    void cleanups.run().then(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    out(`Leash demo: building the lab (two network namespaces, a demo agent account${needFs ? ', a tmpfs' : ''})…\n`);
    const lab = await buildLab({ id: opts.id ?? 'demo', hosts: DEMO_HOSTS, cleanups });
    const agent = await lab.createUser(opts.account ?? 'leash-demo');
    const enforcer = await lab.startEnforcer({
      subjects: [{ uid: agent.uid, port: SINGLE_SUBJECT_PORT, policy: toPolicyInput(config) }],
      udp: config.network.udp,
      peekTimeoutMs: 2000,
    });
    const decisions = () => readDecisions(enforcer.decisionsPath);
    // The watcher writes to the same decision log (O_APPEND, whole lines), so one listing shows every surface.
    const fsd = needFs
      ? await setupDemoFs({ lab, agent, config, cleanups, decisionsPath: enforcer.decisionsPath })
      : undefined;
    const n = config.network;
    out(
      `  agent namespace ${lab.agentNs}, upstream ${lab.upstreamNs}; agent account ${agent.name} (uid ${agent.uid})\n` +
        `  policy ${policyPath}: network ${n.mode} (${n.allow.length} allow, ${n.deny.length} deny), udp ${n.udp}\n` +
        `  the service's network enforcer (pid ${enforcer.pid}) holds the nft chain agent_${agent.uid} and listens on ${SINGLE_SUBJECT_PORT}\n`,
    );
    if (fsd) {
      const f = fsd.policy.filesystem;
      const c = fsd.policy.commands;
      const w = fsd.whitelist.commands;
      const t = (s: string) => s.split(fsd.root).join('<t>');
      const whose = opts.policyPath ? "the policy's" : "the default policy's";
      out(
        `  filesystem and commands: ${whose} entries re-rooted on the demo's tmpfs, because the demo never marks the host's filesystems\n` +
          `    <t> = ${fsd.root} (tmpfs), ~ = <t>/home/${agent.name}; filesystem ${f.mode} (${f.allow.length} allow, ${f.deny.length} deny),` +
          ` commands ${c.mode} (${c.allow.length} allow, ${c.deny.length} deny)\n` +
          `  the fanotify watcher (pid ${fsd.watcherPid}, under timeout 120 s) has ${fsd.marks.length} FAN_MARK_FILESYSTEM mark: ` +
          `the demo's tmpfs (put on through ${fsd.marks.map((m) => m.split(fsd.root).join('<t>')).join(', ')})\n` +
          `  <t> is also a small root: the host's loader (${t(fsd.loader)}), libc and the libraries of cat, ls and true,\n` +
          `    copied at their host paths. The "Whitelist:" steps give ${agent.name} a commands whitelist` +
          ` (allow ${w.allow.map(t).join(' ')}; interpreters ${(w.interpreters ?? []).map(t).join(' ')})\n` +
          `    and run chrooted into <t>, so the program, its loader and its libraries are all on the marked filesystem\n`,
      );
    } else if (!fsOn)
      out('  filesystem and commands: enforcers.filesystem is off in this policy; those steps are skipped\n');
    out('\n');
    opts.onSetup?.({
      agentNs: lab.agentNs,
      upstreamNs: lab.upstreamNs,
      account: agent.name,
      enforcerPid: enforcer.pid,
      ...(fsd ? { fsRoot: fsd.root, watcherPid: fsd.watcherPid, marks: fsd.marks } : {}),
    });
    const ctx: DemoContext = { lab, agent, config, fs: fsd, decisions, probe: (p) => lab.probe(agent, p) };
    const rows: Row[] = [];
    for (const step of steps) {
      if (interrupted) break;
      const before = decisions().length;
      const outcome = await step.run(ctx);
      rows.push({ step, outcome, decisions: decisions().slice(before) });
    }
    const short = (s: string) => (fsd ? s.split(fsd.root).join('<t>') : s);
    if (interrupted) return 130;
    const ok = rows.filter((r) => r.outcome.result === r.step.expect).length;
    if (opts.json) {
      out(
        JSON.stringify(
          rows.map((r) => ({
            surface: r.step.surface,
            title: r.step.title,
            expect: r.step.expect,
            ...r.outcome,
            decisions: r.decisions,
          })),
          null,
          2,
        ) + '\n',
      );
    } else {
      out(renderTable(rows, agent.name, short));
      const lines = decisions().length;
      out(
        `\n${lines} decision lines were written by the enforcer${fsd ? ' and the watcher' : ''} (--json prints them).\n`,
      );
      out(`\n${ok}/${rows.length} actions did what the policy says.\n`);
    }
    const code = await enforcer.stop();
    const left = await lab.agent(['nft', 'list', 'ruleset']);
    if (code !== 0 || /leash/.test(left.stdout)) out('warning: the enforcer did not release its rules cleanly\n');
    return ok === rows.length && !interrupted ? EXIT.ok : EXIT.verdict;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    const problems = await cleanups.run();
    if (!opts.json)
      out(
        problems.length
          ? `teardown problems: ${problems.join('; ')}\n`
          : `Lab torn down: namespaces, account${needFs ? ', tmpfs' : ''} and processes removed.\n`,
      );
  }
}

/** Registers `leash demo`. */
export function registerDemo(program: Command): void {
  program
    .command('demo')
    .description('show Leash deciding, in a throw-away lab: allowed and blocked actions of a demo agent, and why')
    .option('--json', 'print the steps and decisions as JSON')
    .option('--policy <file>', 'policy to run (default: the shipped leash.default.yaml)')
    .action(async (o: { json?: boolean; policy?: string }) => {
      process.exitCode = await runDemo({ json: o.json, policyPath: o.policy });
    });
}
