/**
 * Typed failures of the policy store, subject discovery and the port map.
 * Codes are stable snake_case and documented in docs/errors.md (policy section).
 */
export type PolicyErrorCode =
  | 'passwd_unreadable'
  | 'ports_corrupt'
  | 'ports_exhausted'
  | 'state_locked'
  | 'profile_name_invalid'
  | 'profile_not_found'
  | 'profile_invalid'
  | 'profile_inert_entry'
  | 'profile_changed'
  | 'profile_in_use'
  | 'bindings_corrupt'
  | 'scope_invalid'
  | 'scope_unknown_account'
  | 'binding_not_found'
  | 'loosening_unacknowledged'
  | 'ack_invalid'
  | 'policy_unjudgeable'
  | 'ledger_unwritable'
  | 'floor_unreadable'
  | 'reconcile_signal_failed';

export class PolicyError extends Error {
  readonly code: PolicyErrorCode;
  /** Structured detail for --json output and tests (tokens, accounts, paths). */
  readonly detail: Record<string, unknown>;
  constructor(code: PolicyErrorCode, message: string, detail: Record<string, unknown> = {}, options?: ErrorOptions) {
    super(message, options);
    this.name = 'PolicyError';
    this.code = code;
    this.detail = detail;
  }
}

export function isPolicyError(e: unknown, code?: PolicyErrorCode): e is PolicyError {
  return e instanceof PolicyError && (code === undefined || e.code === code);
}
