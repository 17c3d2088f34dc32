import { spawn } from 'node:child_process';

/** Result of one command run by a {@link Runner}. `code` is 127 when the program could not be started. */
export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs a program (argv[0] looked up on PATH) with optional stdin. Every nft/iptables call goes through one, so
 * tests run them inside a namespace they made (`ip netns exec <ns> nft ...`) and never touch the host's ruleset.
 */
export interface Runner {
  (argv: string[], input?: string): Promise<RunResult>;
  /**
   * The network namespace the commands act in, for a reader that asks the kernel itself rather than running a
   * program (src/dataplane/network/nft/read.ts): null for the process's own, a path such as `/run/netns/<name>` for a
   * named one. Absent: unknown (a test's fake), so such readers run the program through the runner instead.
   */
  netns?: string | null;
}

function spawnRun(argv: string[], input?: string): Promise<RunResult> {
  return new Promise((resolve) => {
    const [cmd, ...args] = argv;
    const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', (e: NodeJS.ErrnoException) => resolve({ code: 127, stdout, stderr: stderr + e.message }));
    child.on('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
    child.stdin.on('error', () => {});
    child.stdin.end(input ?? '');
  });
}

/** Runs in the caller's own network namespace (the service's, which is the host's). */
export function hostRunner(): Runner {
  return Object.assign((argv: string[], input?: string) => spawnRun(argv, input), { netns: null });
}

/** Runs every command inside the named network namespace. */
export function netnsRunner(ns: string): Runner {
  return Object.assign((argv: string[], input?: string) => spawnRun(['ip', 'netns', 'exec', ns, ...argv], input), {
    netns: `/run/netns/${ns}`,
  });
}
