/**
 * The start runs ahead of the host's load. Until the service is ready its agents are not (all) confined, and the
 * load on the host is theirs to make: at 1,000 agents a start needs about 2.5 s of CPU, which a share of 2 cores
 * under a load of 14 stretched to 11-17 s. So every thread of the starting service (V8's collector helpers too)
 * runs at START_NICE (LEASH_START_NICE; 0: not raised), and once ready every thread of the service and of what it
 * started (the watcher, its standby, nft) goes back to the nice the service was started with: from then on the
 * proxy and the watcher work for the agents and compete like any process. Where the kernel groups processes by
 * session (sched_autogroup: a nice counts only inside its session's group, and the groups share the CPUs equally),
 * the session's group is raised too, and put back with the threads.
 *
 * Lowering a nice value takes CAP_SYS_NICE and setpriority(2): where either is refused (the systemd unit drops
 * both), the start runs at the nice it was given and the caller is told why.
 */
import fs from 'node:fs';
import os from 'node:os';

export const START_NICE = -10;

/** The nice a start runs at: LEASH_START_NICE when it is an integer from -20 to 0, else START_NICE. */
export function startNice(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.LEASH_START_NICE);
  return env.LEASH_START_NICE !== undefined && Number.isInteger(n) && n >= -20 && n <= 0 ? n : START_NICE;
}

const AUTOGROUP = '/proc/self/autogroup';

/** The nice of this session's scheduling group ("/autogroup-N nice K"), or null without autogroup. */
function autogroupNice(): number | null {
  try {
    const m = / nice (-?\d+)/.exec(fs.readFileSync(AUTOGROUP, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

function setAutogroupNice(n: number): boolean {
  try {
    fs.writeFileSync(AUTOGROUP, `${n}\n`);
    return true;
  } catch {
    return false;
  }
}

/** Threads of `pid` (Linux nice values are per thread). */
function tasks(pid: number): number[] {
  try {
    return fs.readdirSync(`/proc/${pid}/task`).map(Number);
  } catch {
    return [];
  }
}

/** `pid` and every process below it, from /proc/PID/task/TID/children. */
function tree(pid: number, out: number[] = []): number[] {
  out.push(pid);
  for (const tid of tasks(pid)) {
    let kids = '';
    try {
      kids = fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8');
    } catch {
      continue;
    }
    for (const k of kids.trim().split(/\s+/).filter(Boolean).map(Number)) if (!out.includes(k)) tree(k, out);
  }
  return out;
}

/**
 * Raises every thread of this process to `nice` (threads and processes they start inherit it). Returns the
 * restore, which puts every thread of the process tree that runs above `before` back to it, and why the raise was
 * not made, if not.
 */
export function raiseForStart(nice: number = startNice()): { restore: () => void; skipped: string | null } {
  const none = (skipped: string) => ({ restore: () => {}, skipped });
  let before: number;
  try {
    before = os.getPriority(0);
  } catch (e) {
    return none((e as Error).message);
  }
  if (before <= nice) return none(`already at nice ${before}`);
  try {
    os.setPriority(0, nice);
  } catch (e) {
    return none((e as Error).message);
  }
  for (const tid of tasks(process.pid)) {
    try {
      os.setPriority(tid, nice);
    } catch {
      // A thread that ended meanwhile.
    }
  }
  const group = autogroupNice();
  const groupRaised = group !== null && group > nice && setAutogroupNice(nice);
  return {
    skipped: null,
    restore: () => {
      if (groupRaised && autogroupNice() === nice) setAutogroupNice(group);
      for (const pid of tree(process.pid))
        for (const tid of tasks(pid)) {
          try {
            if (os.getPriority(tid) < before) os.setPriority(tid, before);
          } catch {
            // A thread that ended meanwhile.
          }
        }
    },
  };
}
