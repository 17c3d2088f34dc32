/**
 * Characters that must never reach a terminal raw from a log line: C0 controls (ESC starts terminal
 * sequences), DEL, C1 controls, and the bidirectional overrides/isolates and marks that make text
 * display in an order other than the one it is stored in (Trojan Source, CVE-2021-42574).
 */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** Escapes every unsafe character as `\u{hex}`; everything else is printed as is. */
export function escapeForTerminal(line: string): string {
  return line.replace(UNSAFE, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);
}
