/**
 * The terminal's redaction: a formatter over the engine's one secret detector set
 * (findSecrets in src/engine/secrets.ts), replacing each secret whole with `[REDACTED:<kind>]`,
 * in command output and in commands written to the audit trail. Best-effort by nature
 * (docs/terminal.md): a format no pattern knows passes through.
 */
import { findSecrets } from '../../engine/index.js';

/** The labels the terminal has always printed for two kinds the engine names longer. */
const LABEL: Readonly<Record<string, string>> = {
  credential_assignment: 'assignment',
  url_credentials: 'url_password',
};

/** Longest secret the patterns are expected to span; the executor keeps this much past the cap. */
export const REDACTION_LOOKAHEAD = 64 * 1024;

/** Replaces every recognised secret with `[REDACTED:<kind>]`. */
export function redactSecrets(text: string): string {
  const spans = findSecrets(text);
  if (spans.length === 0) return text;
  let out = '';
  let pos = 0;
  for (const s of spans) {
    out += text.slice(pos, s.start) + `[REDACTED:${LABEL[s.kind] ?? s.kind}]`;
    pos = s.end;
  }
  return out + text.slice(pos);
}
