import { CommanderError } from 'commander';
import { LeashError, isLeashError } from '../errors.js';

/** The errno of a refusal by the kernel (EACCES, EPERM) anywhere in an error, its details or its causes, or null. */
function deniedErrno(e: unknown, depth = 0): string | null {
  if (e === null || typeof e !== 'object' || depth > 4) return null;
  const o = e as { code?: unknown; details?: Record<string, unknown>; message?: unknown; cause?: unknown };
  for (const c of [o.code, o.details?.errno, o.details?.code]) if (c === 'EACCES' || c === 'EPERM') return c;
  const m = typeof o.message === 'string' ? /\b(EACCES|EPERM)\b/.exec(o.message) : null;
  return m ? m[1]! : deniedErrno(o.cause, depth + 1);
}

/**
 * What a command run without root met when the kernel refused it a file, a lock or a socket (the state directory,
 * the 0640 floor, the service's sockets): one code, `permission_denied` (exit 2), saying to use sudo, whatever part
 * of Leash tripped over it. As root the error stands as it is (a refusal then is a real fault).
 */
export function permissionDenied(e: unknown): LeashError | null {
  if (process.geteuid?.() === 0 || e instanceof CommanderError) return null;
  const errno = deniedErrno(e);
  if (errno === null) return null;
  const was = isLeashError(e) ? e : null;
  // Another code's name, or an earlier hint, inside a wrapped message would only say the same twice.
  const message = ((e as Error)?.message ?? String(e))
    .replace(/\s*\[[a-z_]+\]/g, '')
    .replace(/\s*\([^()]*run it with sudo\)/g, '');
  return new LeashError(
    'permission_denied',
    `${message}: permission denied (run it with sudo)`,
    { ...(was?.details ?? {}), errno, ...(was ? { was: was.code } : {}) },
    { cause: e },
  );
}
