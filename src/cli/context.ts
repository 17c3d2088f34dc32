import type { Command } from 'commander';
import { LeashError } from '../errors.js';
import { SURFACES, type Surface } from '../engine/types.js';
import { DEFAULT_CONFIG_PATH, type Finding } from '../control/config/load.js';

/** The config path of this invocation: --config/-c, else LEASH_CONFIG, else /etc/leash/leash.yaml. */
export function configPath(cmd: Command): string {
  const o = cmd.optsWithGlobals<{ config?: string }>();
  return o.config ?? DEFAULT_CONFIG_PATH;
}

export const SURFACE_ALIASES: Record<string, Surface> = {
  network: 'network',
  net: 'network',
  filesystem: 'filesystem',
  fs: 'filesystem',
  commands: 'commands',
  cmd: 'commands',
  tools: 'tools',
  tool: 'tools',
};
export const SHORT: Record<Surface, string> = { network: 'net', filesystem: 'fs', commands: 'cmd', tools: 'tool' };

export function parseSurface(s: string): Surface {
  const surface = SURFACE_ALIASES[s.toLowerCase()];
  if (!surface) {
    throw new LeashError(
      'surface_unknown',
      `unknown surface "${s}" (one of: ${SURFACES.join(', ')}, or net, fs, cmd, tool)`,
      {
        surface: s,
      },
    );
  }
  return surface;
}

export function print(line = ''): void {
  process.stdout.write(`${line}\n`);
}

export function printJson(v: unknown): void {
  process.stdout.write(`${JSON.stringify(v, null, 2)}\n`);
}

export function warn(line: string): void {
  process.stderr.write(`leash: ${line}\n`);
}

export function formatFinding(f: Finding): string {
  return `${f.severity} ${f.code} ${f.path}: ${f.message}`;
}
