import type { Command } from 'commander';
import { LeashError } from '../errors.js';
import { teardownNetwork } from '../dataplane/network/enforcer.js';
import { hostRunner, netnsRunner } from '../dataplane/network/nft/run.js';
import { restoreHostSettings } from '../control/daemon/host.js';
import { keepsChainsAfter } from '../dataplane/network/nft/closed.js';
import { releaseOrphan } from '../dataplane/watcher/adopt.js';
import { restartPending, watcherSocketPath } from '../control/daemon/restart.js';

/**
 * `leash teardown [--uid N ...]`: releases the leash nftables chains (every UID by default; the tables go with
 * the last one). The service's stop path does the same for the UIDs it applied; this is for ExecStopPost and for
 * an operator cleaning up after a crash. `--netns` runs it inside a network namespace (tests, the lab).
 * Without --uid and --netns it also restores the host settings a service recorded and did not restore
 * (`host.memfd_noexec` after a crash; src/control/daemon/host.ts).
 * As ExecStopPost after a crash or a failed start (`$SERVICE_RESULT` other than `success`) it releases nothing:
 * the chains keep every agent confined closed until the next start takes them over (src/dataplane/network/nft/closed.ts);
 * The same after a restart (`leash restart`'s or the upgrade's marker, or systemd's restart job: restart.ts): the next
 * start takes the chains over and adopts the watcher left waiting. Otherwise (a deliberate stop, or by hand) it also
 * releases a watcher a service left waiting for adoption (src/dataplane/watcher/adopt.ts).
 * `--force` releases them anyway.
 */
export function registerTeardown(program: Command): void {
  program
    .command('teardown')
    .description('release the leash nftables rules (all leashed UIDs, or those given)')
    .option('--uid <uid...>', 'release only these UIDs')
    .option('--netns <name>', 'act inside this network namespace instead of the host')
    .option('--json', 'print the released UIDs as JSON')
    .option('--force', 'release even after a crash ($SERVICE_RESULT other than success)')
    .action(async (o: { uid?: string[]; netns?: string; json?: boolean; force?: boolean }) => {
      if (process.getuid?.() !== 0) throw new LeashError('usage', 'leash teardown needs root');
      const result = process.env.SERVICE_RESULT;
      const restart = o.netns || o.uid ? null : restartPending();
      if (!o.force && (keepsChainsAfter(result) || restart)) {
        const why = restart
          ? `the service stopped for a restart (${restart})`
          : `the service ended with ${result} (${process.env.EXIT_CODE ?? '?'} ${process.env.EXIT_STATUS ?? ''})`;
        if (o.json) process.stdout.write(`${JSON.stringify({ released: [], kept: true, result })}\n`);
        else
          process.stdout.write(
            `${why.replace(/ \)/, ')')}: leash chains kept, every agent stays confined closed until the next start (leash teardown --force releases them)\n`,
          );
        return;
      }
      const uids = o.uid?.map((u) => {
        const n = Number(u);
        if (!Number.isInteger(n) || n < 0) throw new LeashError('usage', `--uid ${u} is not a UID`);
        return n;
      });
      // The watcher first: the chains' release is the moment the agent is free on every surface at once.
      const watcher = !uids && !o.netns && (await releaseOrphan(watcherSocketPath()));
      if (watcher && !o.json) process.stdout.write('released the watcher a service had left waiting\n');
      const released = await teardownNetwork(o.netns ? netnsRunner(o.netns) : hostRunner(), uids);
      if (!o.netns && !uids) {
        const problems = restoreHostSettings();
        for (const p of problems) process.stderr.write(`leash teardown: ${p}\n`);
        if (problems.length) process.exitCode = 3;
      }
      if (o.json) process.stdout.write(`${JSON.stringify({ released, ...(watcher ? { watcher } : {}) })}\n`);
      else process.stdout.write(released.length ? `released UIDs: ${released.join(', ')}\n` : 'no leash rules held\n');
    });
}
