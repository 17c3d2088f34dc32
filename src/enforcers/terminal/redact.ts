/**
 * Pattern-based secret redaction for command output and for commands written to the audit trail.
 * Best-effort by nature (docs/terminal.md): a format no pattern knows passes through. Replaced by
 * the engine's maskSecrets once that lands, behind the same `Redactor` signature.
 */

interface Pattern {
  kind: string;
  re: RegExp;
  /** Index of the capture group holding the secret; 0 = the whole match. */
  group: number;
}

// Distinctive prefixes are matched without word boundaries: output often glues a secret to
// neighbouring text (a cap cut, a log prefix), and over-redacting is the safe direction.
const PATTERNS: Pattern[] = [
  // A private key block, also when the output was cut before its END line.
  {
    kind: 'private_key',
    re: /-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|$)/g,
    group: 0,
  },
  { kind: 'aws_access_key', re: /(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}/g, group: 0 },
  { kind: 'github_token', re: /(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}/g, group: 0 },
  { kind: 'github_token', re: /github_pat_[A-Za-z0-9_]{22,255}/g, group: 0 },
  { kind: 'gitlab_token', re: /glpat-[A-Za-z0-9_-]{20,}/g, group: 0 },
  { kind: 'slack_token', re: /\bxox[abposr]-[A-Za-z0-9-]{10,}\b/g, group: 0 },
  { kind: 'stripe_key', re: /\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}\b/g, group: 0 },
  { kind: 'openai_key', re: /\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b/g, group: 0 },
  { kind: 'google_api_key', re: /AIza[0-9A-Za-z_-]{35}/g, group: 0 },
  { kind: 'jwt', re: /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, group: 0 },
  { kind: 'bearer_token', re: /\b[Bb]earer[ \t]+([A-Za-z0-9._~+/-]{16,}=*)/g, group: 1 },
  { kind: 'url_password', re: /\b[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^\s:/@]+:([^\s@/]+)@/g, group: 1 },
  {
    kind: 'aws_secret_key',
    re: /\baws_secret_access_key\b["']?\s*[=:]\s*["']?([A-Za-z0-9/+=]{40})/gi,
    group: 1,
  },
  {
    kind: 'assignment',
    re: /\b(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|client[_-]?secret)\b["']?[ \t]*[=:][ \t]*("[^"\n]{4,}"|'[^'\n]{4,}'|[^\s"',;]{4,})/gi,
    group: 1,
  },
];

/** Longest secret the patterns are expected to span; the executor keeps this much past the cap. */
export const REDACTION_LOOKAHEAD = 64 * 1024;

/** Replaces every recognised secret with `[REDACTED:<kind>]`. */
export function redactSecrets(text: string): string {
  let out = text;
  for (const p of PATTERNS) {
    out = out.replace(p.re, (match: string, ...groups: unknown[]) => {
      if (p.group === 0) return `[REDACTED:${p.kind}]`;
      const secret = groups[p.group - 1];
      if (typeof secret !== 'string' || secret.startsWith('[REDACTED:')) return match;
      const at = match.lastIndexOf(secret);
      return match.slice(0, at) + `[REDACTED:${p.kind}]` + match.slice(at + secret.length);
    });
  }
  return out;
}
