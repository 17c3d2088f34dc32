/**
 * Whether the BPF LSM could be used here (`leash status`). Leash does not use it: on the kernels it is built and
 * tested on, loading an `lsm/*` program is refused (EPERM, as root, before the verifier), so nothing that would
 * need it is shipped (docs/threat-model.md says what it would add). The probe loads, and closes at once, a
 * two-instruction LSM program for the file_open hook, next to a socket filter of the same two instructions (the
 * control: the loader itself works); nothing is ever attached.
 */
import fs from 'node:fs';
import { loadNative } from '../../native.js';

export interface BpfLsmStatus {
  /** `bpf` is in /sys/kernel/security/lsm (null: securityfs is not mounted, the list cannot be read). */
  listed: boolean | null;
  /** The probe ran (root, the addon loaded). */
  probed: boolean;
  /** An LSM program loads here. */
  loadable: boolean;
  /** The errno name the kernel refused it with (null when it loaded or was not probed). */
  code: string | null;
  /** The control program (a socket filter) loaded. */
  control: boolean | null;
  /** Why it was not probed. */
  reason?: string;
}

export function bpfLsmStatus(lsmFile = '/sys/kernel/security/lsm'): BpfLsmStatus {
  let listed: boolean | null = null;
  try {
    listed = fs.readFileSync(lsmFile, 'utf8').trim().split(',').includes('bpf');
  } catch {
    listed = null;
  }
  if (process.getuid?.() !== 0)
    return { listed, probed: false, loadable: false, code: null, control: null, reason: 'not root' };
  let probe;
  try {
    probe = loadNative().probeBpfLsm();
  } catch (e) {
    return { listed, probed: false, loadable: false, code: null, control: null, reason: (e as Error).message };
  }
  return {
    listed,
    probed: true,
    loadable: probe.lsm.loaded,
    code: probe.lsm.code,
    control: probe.control.loaded,
  };
}
