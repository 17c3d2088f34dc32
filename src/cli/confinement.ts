/**
 * Whether a subject is confined now, on each surface, from what holds it rather than from the config's switches:
 * the network from the kernel's nft map (it holds the UID, so its traffic is redirected or refused), the filesystem,
 * commands and tools from the running service's status file (the UIDs the watcher acknowledged and the gate holds),
 * and only while that service's process is alive. `leash status` never says "enforcer on" for a subject this says
 * is not confined.
 */
import { appliedUids, readState } from '../dataplane/network/nft/read.js';
import { hostRunner } from '../dataplane/network/nft/run.js';
import { readReloadStatus, statusFilePath } from '../control/reconcile/generation.js';
import { defaultPasswdSource, readPasswd } from '../control/subjects/discovery.js';
import { processAlive } from '../store/files.js';

export type Confinement = Record<'network' | 'filesystem' | 'commands' | 'tools', { confined: boolean; why?: string }>;

export async function confinementOf(uid: number): Promise<Confinement> {
  let network: Confinement['network'];
  if (process.getuid?.() !== 0) network = { confined: false, why: 'unknown: reading the nft map needs root' };
  else {
    try {
      const held = appliedUids(await readState(hostRunner(), [uid])).includes(uid);
      network = held ? { confined: true } : { confined: false, why: 'its UID is not in the nft map' };
    } catch (e) {
      network = { confined: false, why: `cannot read the nft map: ${(e as Error).message}` };
    }
  }
  const st = readReloadStatus(statusFilePath());
  const service =
    st === null
      ? 'no service status file'
      : !processAlive(st.pid)
        ? `the service (pid ${st.pid}) is not running`
        : null;
  const from = (surface: string): { confined: boolean; why?: string } => {
    if (service !== null) return { confined: false, why: service };
    const uids = st!.confined?.[surface];
    if (!uids) return { confined: false, why: `the service runs no ${surface} enforcer` };
    return uids.includes(uid)
      ? { confined: true }
      : { confined: false, why: `the ${surface} enforcer holds no policy for it` };
  };
  const fsys = from('filesystem');
  return { network, filesystem: fsys, commands: fsys, tools: from('tools') };
}

/** The UID `leash status` reports on: the configured user's, or the named subject's from passwd; null for none. */
export function subjectUid(account: string | null, userUid: number | undefined): number | null {
  if (account === null) return null;
  if (userUid !== undefined) return userUid;
  return readPasswd(defaultPasswdSource()).find((e) => e.name === account)?.uid ?? null;
}
