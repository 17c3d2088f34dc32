/**
 * Key bodies without their BEGIN line: what a `tail` of a key file, a read from an offset, or a
 * diff's context lines carry. The engine's private-key detector starts at `-----BEGIN`; this finds a
 * key from any part of its body: a run of base64 lines (a diff's ` `, `+`, `-` prefix allowed) that
 * ends at an `-----END … PRIVATE KEY-----` line, that holds an OpenSSH key's first bytes, or that
 * has two or more lines at a PEM width (64, or OpenSSH's 70). Such a run is masked line by line.
 * It errs towards masking: a certificate's body (public) is masked too.
 */

/** Lower-case literals one of which a line carrying such a body holds (the gate's pre-check). */
export const KEY_BODY_LITERALS: readonly string[] = ['-----end', 'b3blbnnzac1rzxktdj'];

const BODY = /^([ +-]?)([A-Za-z0-9+/]{16,}={0,2})(\r?)$/;
const END = /^[ +-]?-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----\r?$/;
const OPENSSH = 'b3BlbnNzaC1rZXktdjE';
/** A quick no: a string without a base64 run of 16 at a line's end holds no body. */
const MAYBE = /[A-Za-z0-9+/]{16,}={0,2}\r?(\n|$)/;

/** A body line starting with `+` (one in 64) reads as a diff's added line: the `+` is the body's when the whole is a PEM width. */
function plusIsBody(m: RegExpExecArray): boolean {
  return m[1] === '+' && (m[2]!.length === 63 || m[2]!.length === 69);
}

function pemWidth(m: RegExpExecArray): boolean {
  return m[2]!.length === 64 || m[2]!.length === 70 || plusIsBody(m);
}

export function maskKeyBodies(text: string): string {
  if (text.length < 16 || !MAYBE.test(text)) return text;
  const lines = text.split('\n');
  let changed = false;
  let i = 0;
  while (i < lines.length) {
    if (!BODY.test(lines[i]!)) {
      i++;
      continue;
    }
    let j = i;
    let wide = 0;
    let magic = false;
    while (j < lines.length) {
      const m = BODY.exec(lines[j]!);
      if (m === null) break;
      if (pemWidth(m)) wide++;
      if (m[2]!.includes(OPENSSH)) magic = true;
      j++;
    }
    const ended = j < lines.length && END.test(lines[j]!);
    if (ended || magic || wide >= 2) {
      for (let k = i; k < j; k++) {
        const m = BODY.exec(lines[k]!)!;
        lines[k] = plusIsBody(m) ? `****${m[3]}` : `${m[1]}****${m[3]}`;
      }
      changed = true;
    }
    i = j;
  }
  return changed ? lines.join('\n') : text;
}
