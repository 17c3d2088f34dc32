/**
 * What every match of a detector contains (./inspect.ts inspectionNeeds picks the active ones' needs), for a caller that rules findings out over a whole call's
 * bytes at once (the gate's native judge, native/tools/gatejudge_core.h): one literal of each list in
 * `all` (ASCII letters compared without case, so a case-sensitive pattern's literal is covered too)
 * and at least `digits` ASCII digits. Stronger than inspect.ts TRIGGERS (whole literals, not one character) but,
 * like them, only a necessary condition: a text without it holds no match. `credential_field` is a
 * sensitively named key (inspect.ts SENSITIVE_KEY). A text is read with a `"` after it, as it ends in JSON (each
 * string and key is inspected on its own, and an array's scalars joined are separated by `"` in its bytes), so a
 * literal ending in `"` stands for the end of a text. tests/unit/engine/inspect-needs.test.ts holds every detector
 * to its need on generated texts and fails when a detector has none.
 */
export interface DetectorNeed {
  readonly all: readonly (readonly string[])[];
  readonly digits?: number;
}

const CREDENTIAL_WORDS = ['pass', 'pwd', 'secret', 'token', 'key', 'credential'];

/** Every character JavaScript's `\s` matches (priv-esc.ts RM_WORD: `rm` then one of them); the needs test checks it. */
export const JS_SPACES = [
  ...'\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff',
  ...Array.from({ length: 11 }, (_, k) => String.fromCharCode(0x2000 + k)),
];

export const DETECTOR_NEEDS: Readonly<Record<string, DetectorNeed>> = {
  private_key: { all: [['-----begin']] },
  aws_access_key: { all: [['akia', 'asia', 'abia', 'acca']] },
  github_token: { all: [['gh', 'github_pat_']] },
  gitlab_token: { all: [['glpat-']] },
  slack_token: { all: [['xox']] },
  slack_webhook: { all: [['hooks.slack.com/services/']] },
  stripe_key: { all: [['k_live_']] },
  anthropic_key: { all: [['sk-ant-']] },
  openai_key: { all: [['sk-']] },
  google_api_key: { all: [['aiza']] },
  npm_token: { all: [['npm_']] },
  huggingface_token: { all: [['hf_']] },
  sendgrid_key: { all: [['sg.']] },
  jwt: { all: [['eyj']] },
  bearer_token: { all: [['bearer']] },
  basic_auth: { all: [['basic']] },
  url_credentials: { all: [['://'], ['@']] },
  credential_assignment: { all: [CREDENTIAL_WORDS, ['=', ':']] },
  credential_field: { all: [[...CREDENTIAL_WORDS, 'authorization', 'cookie']] },
  email: { all: [['@']] },
  credit_card: { all: [], digits: 13 },
  phone: { all: [['+']], digits: 8 },
  us_ssn: { all: [['-']], digits: 9 },
  sudo: { all: [['sudo']] },
  pkexec: { all: [['pkexec']] },
  doas: { all: [['doas']] },
  // su then blanks and `-x`, `root` or the end (priv-esc.ts): not `sub`, `result`, `issue`.
  su_root: { all: [['su ', 'su\t', 'su"']] },
  setuid_chmod: { all: [['chmod']] },
  setuid_call: { all: [['set'], ['(']] },
  // rm then a space of any kind (priv-esc.ts RM_WORD), or rm ending a text (an array's words joined): not `format`.
  rm_rf_root: { all: [[...JS_SPACES.map((c) => `rm${c}`), 'rm"']] },
};

/** True when `text` meets the need (the definition the native judge follows). */
export function meetsNeed(need: DetectorNeed, text: string): boolean {
  const t = `${text}"`.replace(/[A-Z]/g, (c) => c.toLowerCase());
  if (!need.all.every((lits) => lits.some((l) => t.includes(l)))) return false;
  if (need.digits === undefined) return true;
  let n = 0;
  for (let i = 0; i < t.length; i++) if (t.charCodeAt(i) >= 48 && t.charCodeAt(i) <= 57) n++;
  return n >= need.digits;
}
