/**
 * The filesystem and commands half of `leash demo`. The demo never marks a host filesystem: it mounts a tmpfs of
 * its own under the lab directory, lays out a small fake system on it (a home with work files, a shadow file,
 * sudoers.d, root's SSH key, copies of a few binaries), re-roots the policy's path entries onto that tmpfs
 * (`/etc/shadow` -> `<t>/etc/shadow`), and runs the fanotify watcher with that policy under a timeout. Steps run
 * as the demo account inside the agent namespace (another mount namespace: FAN_MARK_FILESYSTEM still sees it).
 * The tmpfs is also a small root of its own (src/lab/miniroot.ts): the host's real dynamic loader, libc and the
 * libraries of the copied programs, at their host paths. The commands-whitelist steps switch the account to a
 * commands whitelist whose `commands.interpreters` is that tmpfs loader and run programs chrooted there, so the
 * program, its ELF interpreter and its libraries are all on the marked filesystem, as on a host whose root
 * filesystem is marked: the kernel's exec-open of the loader is judged (`interpreter_of`), and so is the loader
 * run directly (`interpreter_direct`).
 * Everything is registered with the demo's cleanup registry right after it exists: the watcher is closed before
 * the tmpfs is unmounted, so its periodic re-scan can never walk up to a host filesystem.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createFsSupervisor } from '../dataplane/watcher/supervisor.js';
import { readStart } from '../dataplane/watcher/startup.js';
import { fsCmdPolicyOf, parseMountinfo, policyRoots } from '../dataplane/watcher/policy.js';
import type { RunResult } from '../dataplane/network/nft/run.js';
import { hostRunner } from '../dataplane/network/nft/run.js';
import type { Config } from '../control/config/types.js';
import type { Cleanups, Lab, LabUser } from '../lab/lab.js';
import { copyStartFiles, lddFiles, resolveInRoot } from '../lab/miniroot.js';
import type { FsCmdPolicy } from '../native.js';
import type { DemoContext, DemoStep, LoggedDecision, StepOutcome } from './demo.js';

/** Re-roots one policy path (absolute, possibly a glob) under `root`; anything else is returned unchanged. */
export function rerootPath(entry: string, root: string): string {
  if (!entry.startsWith('/')) return entry;
  return entry === '/' ? root : root + entry.replace(/\/+$/, '');
}

/**
 * The policy with every path entry moved under `root`: filesystem allow/deny/watch, command entries that are
 * absolute paths, and commands.interpreters (the system's loaders land on the copies the demo puts at the same
 * paths on `root`). Command basenames (`nc`, `sudo`) name no filesystem and stay as they are. Because every path
 * lands on `root`, the watcher's marks (policyRoots) all lie on the filesystem holding `root`.
 */
export function rerootPolicy(p: FsCmdPolicy, root: string): FsCmdPolicy {
  if (!root.startsWith('/') || /[*?[\]\\]/.test(root)) throw new Error(`cannot re-root onto ${root}`);
  const r = (list: string[]) => list.map((e) => rerootPath(e, root));
  const cmd = (list: string[]) => list.map((e) => (e.includes('/') ? rerootPath(e, root) : e));
  return {
    fail_mode: p.fail_mode,
    filesystem: {
      mode: p.filesystem.mode,
      allow: r(p.filesystem.allow),
      deny: r(p.filesystem.deny),
      ...(p.filesystem.watch ? { watch: r(p.filesystem.watch) } : {}),
    },
    commands: {
      mode: p.commands.mode,
      allow: cmd(p.commands.allow),
      deny: cmd(p.commands.deny),
      ...(p.commands.interpreters ? { interpreters: r(p.commands.interpreters) } : {}),
    },
  };
}

export interface DemoFs {
  /** The tmpfs mount point (`<t>` in the table). */
  root: string;
  /** The demo account's home on the tmpfs. */
  home: string;
  /** Copies of binaries on the tmpfs, by name (`nc` and `sudo` are copies of harmless ones). */
  bin: Record<string, string>;
  /** The policy's filesystem and commands entries re-rooted on `root`. */
  policy: FsCmdPolicy;
  /** `policy` with its commands replaced by a whitelist of <t>/bin/cat and <t>/bin/ls, interpreters [loader]. */
  whitelist: FsCmdPolicy;
  /** The host's dynamic loader copied onto the tmpfs (its real path there: what the watcher sees exec-opened). */
  loader: string;
  /** The copied programs' ELF interpreter as they name it (`/lib64/ld-linux-x86-64.so.2`), inside the small root. */
  loaderInRoot: string;
  /** The host's libc copied onto the tmpfs (its real path there: what the loader opens for a program run chrooted). */
  libc: string;
  marks: string[];
  watcherPid: number;
  /** Gives the demo account `policy` or `whitelist` (a no-op when it has it already). */
  usePolicy(which: 'policy' | 'whitelist'): Promise<void>;
  /** Runs argv as the demo account inside the agent namespace (killed after 10 s). */
  runAs(argv: string[]): Promise<RunResult>;
  /** Runs argv as the demo account chrooted into the tmpfs root (`chroot --userspec`), in the agent namespace. */
  runInRoot(argv: string[]): Promise<RunResult>;
}

function which(name: string): string {
  for (const d of (process.env.PATH ?? '/usr/bin:/bin').split(':')) {
    const p = path.join(d, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return fs.realpathSync(p);
    } catch {
      /* next */
    }
  }
  throw new Error(`${name} not found on PATH`);
}

/** True when `dir` is itself the mount point of a tmpfs (so nothing the watcher marks for it is the host's). */
function isOwnTmpfs(dir: string): boolean {
  const mounts = parseMountinfo(fs.readFileSync('/proc/self/mountinfo', 'utf8'));
  const m = mounts.filter((x) => x.mountPoint === dir).pop();
  return m?.fsType === 'tmpfs' && fs.statSync(dir).dev !== fs.statSync(path.dirname(dir)).dev;
}

/**
 * Mounts the demo's tmpfs, lays it out, starts the watcher with the re-rooted policy and waits until its marks are
 * on. Refuses to go on (and tears down) if a mark lies anywhere but the demo's own tmpfs.
 */
export async function setupDemoFs(o: {
  lab: Lab;
  agent: LabUser;
  config: Config;
  cleanups: Cleanups;
  decisionsPath: string;
}): Promise<DemoFs> {
  const { lab, agent, cleanups } = o;
  const host = hostRunner();
  const root = path.join(lab.dir, 'fs');
  fs.mkdirSync(root, { mode: 0o755 });
  cleanups.defer(`rmdir ${root}`, () => fs.rmdirSync(root));
  const m = await host(['mount', '-t', 'tmpfs', '-o', 'mode=0755,size=48m,nodev', 'leash-demo', root]);
  if (m.code !== 0) throw new Error(`mount tmpfs on ${root}: ${m.stderr.trim()}`);
  cleanups.defer(`umount ${root}`, async () => {
    // Lazy: a straggler holding a file must not leave the mount behind.
    const u = await host(['umount', '-l', root]);
    if (u.code !== 0) throw new Error(u.stderr.trim());
  });
  if (!isOwnTmpfs(root)) throw new Error(`${root} is not the demo's own tmpfs`);

  const p = (...s: string[]) => path.join(root, ...s);
  const home = p('home', agent.name);
  const file = (f: string, text: string, mode = 0o644) => {
    fs.mkdirSync(path.dirname(f), { recursive: true, mode: 0o755 });
    fs.writeFileSync(f, text, { mode });
    fs.chmodSync(f, mode);
  };
  // Secrets are world-readable here on purpose: file permissions let the account in, so only Leash stands in the way.
  file(path.join(home, 'work', 'notes.txt'), 'demo notes: the agent reads its own work\n');
  for (const d of [home, path.join(home, 'work')]) fs.chownSync(d, agent.uid, agent.gid);
  file(p('etc', 'shadow'), 'root:$y$j9T$FAKE.demo.hash$:20000:0:99999:7:::\n');
  file(p('etc', 'sudoers.d', 'agent'), `${agent.name} ALL=(ALL) NOPASSWD: ALL\n`);
  file(
    p('root', '.ssh', 'id_ed25519'),
    '-----BEGIN OPENSSH PRIVATE KEY-----\nFAKE demo key\n-----END OPENSSH PRIVATE KEY-----\n',
  );
  fs.mkdirSync(p('bin'), { mode: 0o755 });
  const bin: Record<string, string> = {};
  // Run from the host's namespace the copies use the host's dynamic loader and libraries (never marked); run
  // chrooted into <t> (the whitelist steps) they use the loader and libraries copied below, on the marked tmpfs.
  for (const [name, of] of [
    ['cat', 'cat'],
    ['ls', 'ls'],
    ['nc', 'cat'],
    ['sudo', 'true'],
  ] as const) {
    bin[name] = p('bin', name);
    const src = which(of);
    fs.copyFileSync(src, bin[name]);
    fs.chmodSync(bin[name], 0o755);
    copyStartFiles(root, src);
  }
  const interp = readStart(bin.ls!)?.interp;
  if (!interp) throw new Error(`${bin.ls} names no ELF interpreter: the whitelist steps need a dynamic program`);
  const loader = resolveInRoot(root, interp);
  if (!loader.startsWith(root + '/') || !fs.statSync(loader, { throwIfNoEntry: false })?.isFile())
    throw new Error(`the loader ${interp} was not copied onto the demo tmpfs (${loader})`);
  const hostLibc = lddFiles(bin.ls!).find((f) => path.basename(f).startsWith('libc.so.'));
  if (!hostLibc) throw new Error(`${bin.ls} links no libc.so: the whitelist steps need a dynamic program`);
  const libc = resolveInRoot(root, hostLibc);

  const policy = rerootPolicy(fsCmdPolicyOf(o.config), root);
  const whitelist: FsCmdPolicy = {
    ...policy,
    commands: { mode: 'whitelist', allow: [bin.cat!, bin.ls!], deny: [], interpreters: [loader] },
  };
  const outside = [
    ...policyRoots(policy),
    ...(policy.filesystem.watch ?? []),
    ...(policy.commands.interpreters ?? []),
    ...policyRoots(whitelist),
  ].filter((r) => r !== root && !r.startsWith(root + '/'));
  if (outside.length) throw new Error(`re-rooted policy names paths off the demo tmpfs: ${outside.join(', ')}`);

  const sup = createFsSupervisor({
    subjects: [{ uid: agent.uid, policy, failMode: policy.fail_mode }],
    decisions: o.decisionsPath,
    wrap: ['timeout', '-s', 'KILL', '120'],
    stderr: () => {},
    maxDeaths: 0,
  });
  cleanups.defer('stop the filesystem watcher', () => sup.close());
  const st = await sup.ready;
  const foreign = st.marks.filter((mk) => mk !== root && !mk.startsWith(root + '/'));
  if (foreign.length || st.markErrors.length)
    throw new Error(
      `the watcher marked ${foreign.join(', ') || 'nothing unexpected'}` +
        `${st.markErrors.length ? `, mark errors ${JSON.stringify(st.markErrors)}` : ''}: stopping`,
    );
  let current: 'policy' | 'whitelist' = 'policy';
  return {
    root,
    home,
    bin,
    policy,
    whitelist,
    loader,
    loaderInRoot: interp,
    libc,
    marks: st.marks,
    watcherPid: st.pid,
    async usePolicy(which) {
      if (which === current) return;
      const next = which === 'whitelist' ? whitelist : policy;
      await sup.set(agent.uid, next, next.fail_mode);
      current = which;
    },
    runInRoot: (argv) =>
      lab.agent([
        'timeout',
        '-s',
        'KILL',
        '10',
        'chroot',
        `--userspec=${agent.uid}:${agent.gid}`,
        '--groups=',
        root,
        ...argv,
      ]),
    runAs: (argv) =>
      lab.agent([
        'timeout',
        '-s',
        'KILL',
        '10',
        'setpriv',
        `--reuid=${agent.uid}`,
        `--regid=${agent.gid}`,
        '--clear-groups',
        ...argv,
      ]),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits (briefly: the watcher drains its records asynchronously) for the decision about `subject`. */
async function decisionFor(
  ctx: DemoContext,
  since: number,
  surface: 'filesystem' | 'commands',
  subject: string,
): Promise<LoggedDecision | undefined> {
  const key = surface === 'filesystem' ? 'path' : 'binary';
  for (let i = 0; i < 40; i++) {
    const d = ctx
      .decisions()
      .slice(since)
      .filter((x) => x.surface === surface && (x.subject as Record<string, unknown> | null)?.[key] === subject)
      .pop();
    if (d) return d;
    await sleep(50);
  }
  return undefined;
}

function outcomeOf(r: RunResult, root: string): Omit<StepOutcome, 'decision'> {
  const short = (s: string) => s.split(root).join('<t>').trim().split('\n')[0] ?? '';
  if (r.code === 0) return { result: 'allowed', detail: `exit 0: ${short(r.stdout) || '(no output)'}` };
  if (/Operation not permitted/.test(r.stderr)) return { result: 'blocked', detail: `EPERM: ${short(r.stderr)}` };
  return { result: 'error', detail: `exit ${r.code}: ${short(r.stderr)}` };
}

/**
 * One filesystem or commands step: argv run as the demo account, and the decision line about `subject`. `whitelist`
 * steps run under the commands whitelist, chrooted into the tmpfs root; the others under the re-rooted policy.
 */
function fsStep(
  surface: 'filesystem' | 'commands',
  title: string,
  expect: DemoStep['expect'],
  make: (f: DemoFs) => { argv: string[]; subject: string; opens?: string[] },
  under: 'policy' | 'whitelist' = 'policy',
): DemoStep {
  return {
    surface,
    title,
    expect,
    async run(ctx) {
      const f = ctx.fs;
      if (!f) throw new Error('the filesystem demo is not set up');
      await f.usePolicy(under);
      const { argv, subject, opens = [] } = make(f);
      const since = ctx.decisions().length;
      const r = under === 'whitelist' ? await f.runInRoot(argv) : await f.runAs(argv);
      const decision = await decisionFor(ctx, since, surface, subject);
      // The step's row lists every decision it caused: wait, too, for the lines about the files it says it opens
      // (the watcher writes its records in batches, so the line about the subject can come before them).
      for (const o of opens) await decisionFor(ctx, since, 'filesystem', o);
      return { ...outcomeOf(r, f.root), decision };
    },
  };
}

/** The filesystem and commands steps, against packaging/leash.default.yaml re-rooted on `<t>`. */
export const FS_DEMO_STEPS: DemoStep[] = [
  fsStep('filesystem', 'Read its own ~/work/notes.txt', 'allowed', (f) => {
    const t = path.join(f.home, 'work', 'notes.txt');
    return { argv: [f.bin.cat!, t], subject: t };
  }),
  fsStep('filesystem', 'Read <t>/etc/shadow (deny entry /etc/shadow)', 'blocked', (f) => {
    const t = path.join(f.root, 'etc', 'shadow');
    return { argv: [f.bin.cat!, t], subject: t };
  }),
  fsStep('filesystem', 'Read <t>/root/.ssh/id_ed25519 (deny entry /root)', 'blocked', (f) => {
    const t = path.join(f.root, 'root', '.ssh', 'id_ed25519');
    return { argv: [f.bin.cat!, t], subject: t };
  }),
  fsStep('filesystem', 'List <t>/etc/sudoers.d (a directory open)', 'blocked', (f) => {
    const t = path.join(f.root, 'etc', 'sudoers.d');
    return { argv: [f.bin.ls!, t], subject: t };
  }),
  fsStep('filesystem', 'Read <t>/etc/shadow from its own user+mount namespace', 'blocked', (f) => {
    const t = path.join(f.root, 'etc', 'shadow');
    return { argv: ['unshare', '-Urm', '--', f.bin.cat!, t], subject: t };
  }),
  fsStep('commands', 'Run <t>/bin/ls (not on the commands deny list)', 'allowed', (f) => ({
    argv: [f.bin.ls!, path.join(f.home, 'work')],
    subject: f.bin.ls!,
  })),
  fsStep('commands', 'Run <t>/bin/nc, a copy of cat (deny entry nc)', 'blocked', (f) => ({
    argv: [f.bin.nc!, path.join(f.home, 'work', 'notes.txt')],
    subject: f.bin.nc!,
  })),
  fsStep('commands', 'Run <t>/bin/sudo, a copy of true (deny entry sudo)', 'blocked', (f) => ({
    argv: [f.bin.sudo!],
    subject: f.bin.sudo!,
  })),
  // The commands whitelist on the tmpfs root: argv are paths inside the root (chroot <t>).
  fsStep(
    'commands',
    'Whitelist: run <t>/bin/ls, its loader and libc on <t>',
    'allowed',
    (f) => ({ argv: ['/bin/ls', inRoot(f, path.join(f.home, 'work'))], subject: f.loader, opens: [f.libc] }),
    'whitelist',
  ),
  fsStep(
    'commands',
    'Whitelist: <t>/lib64/ld-linux-x86-64.so.2 <t>/bin/nc',
    'blocked',
    (f) => ({
      argv: [f.loaderInRoot, '/bin/nc', inRoot(f, path.join(f.home, 'work', 'notes.txt'))],
      subject: f.loader,
    }),
    'whitelist',
  ),
  fsStep(
    'commands',
    'Whitelist: run <t>/bin/nc, a copy of cat (not on it)',
    'blocked',
    (f) => ({ argv: ['/bin/nc', inRoot(f, path.join(f.home, 'work', 'notes.txt'))], subject: f.bin.nc! }),
    'whitelist',
  ),
];

/** A path on the tmpfs as a process chrooted into it names it. */
function inRoot(f: DemoFs, p: string): string {
  return '/' + path.relative(f.root, p);
}
