import type { Config } from '../config/types.js';

type EnforcerSwitches = Config['enforcers'];

/**
 * Where a subject's resolved `enforcers` differ from the enforcers this service runs (the config
 * file's, read at start): enforcers run per service, not per agent, so a profile's switch is not
 * what happens. `critical` for a surface the subject's policy enforces but nothing enforces.
 */
export function enforcerMismatches(
  account: string,
  wanted: EnforcerSwitches,
  running: EnforcerSwitches,
): { critical: boolean; surface: keyof EnforcerSwitches; message: string }[] {
  const out: { critical: boolean; surface: keyof EnforcerSwitches; message: string }[] = [];
  for (const surface of ['network', 'filesystem', 'tools'] as const) {
    if (wanted[surface] === running[surface]) continue;
    out.push(
      wanted[surface]
        ? {
            critical: true,
            surface,
            message: `${account}: its policy enforces ${surface}, but the ${surface} enforcer is off in the config file: ${surface} is NOT enforced for it`,
          }
        : {
            critical: false,
            surface,
            message: `${account}: its policy switches the ${surface} enforcer off, but enforcers run for every subject alike: ${surface} stays enforced for it`,
          },
    );
  }
  return out;
}
