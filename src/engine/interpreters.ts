import type { SurfacePolicy } from './types.js';

/**
 * Which commands whitelist entries run whatever they are given (a shell, an interpreter, the dynamic loader, a
 * launcher): a property of the entry alone, so `leash validate` says it without asking any enforcer.
 */
const INTERPRETERS: { re: RegExp; what: string }[] = [
  { re: /^(sh|bash|dash|zsh|ksh|mksh|fish|csh|tcsh|ash)$/, what: 'a shell' },
  { re: /^python[0-9.]*$/, what: 'the Python interpreter' },
  { re: /^(node|nodejs|deno|bun)$/, what: 'a JavaScript runtime' },
  { re: /^perl[0-9.]*$/, what: 'the Perl interpreter' },
  { re: /^(ruby|irb)[0-9.]*$/, what: 'the Ruby interpreter' },
  { re: /^(php|lua|tclsh|wish|awk|gawk|mawk)[0-9.]*$/, what: 'a script interpreter' },
  { re: /^ld-linux.*\.so.*$|^ld\.so$|^ld64\.so.*$|^ld-musl.*$/, what: 'the dynamic loader' },
  { re: /^(env|busybox|xargs|nice|nohup|timeout|setsid|stdbuf|chroot|unshare|nsenter)$/, what: 'a program launcher' },
];

export interface InterpreterWarning {
  /** The whitelist entry that names an interpreter. */
  entry: string;
  what: string;
  message: string;
}

/**
 * Whitelist entries that name an interpreter, the dynamic loader or a launcher. They run
 * whatever they are given: `sh script.sh` and `ld-linux-x86-64.so.2 ./binary` open the
 * file with a plain open, which the commands surface never sees as an exec.
 */
export function interpreterWarnings(commands: SurfacePolicy): InterpreterWarning[] {
  if (commands.mode !== 'whitelist') return [];
  const out: InterpreterWarning[] = [];
  for (const entry of commands.allow) {
    if (typeof entry !== 'string' || entry.length === 0) continue;
    const base = entry.slice(entry.lastIndexOf('/') + 1);
    const hit = INTERPRETERS.find((i) => i.re.test(base));
    if (!hit) continue;
    out.push({
      entry,
      what: hit.what,
      message:
        `commands.allow "${entry}" is ${hit.what}: it runs what it is given (a script or a binary passed as an ` +
        `argument is opened, not executed), so the commands whitelist does not limit what it runs; ` +
        `limit it with the filesystem policy`,
    });
  }
  return out;
}
