/**
 * The policy store's failures are LeashErrors with codes from the one catalogue (src/errors.ts,
 * docs/errors.md). These helpers keep call sites short.
 */
import { LeashError, type ErrorCode } from '../errors.js';

export { LeashError as PolicyError };

export function isPolicyError(e: unknown, code?: ErrorCode): e is LeashError {
  return e instanceof LeashError && (code === undefined || e.code === code);
}
