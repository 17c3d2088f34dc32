/**
 * The PII detectors of tool input inspection (inspect.ts): emails, payment card numbers (issuer prefix and Luhn),
 * phone numbers in international form, US social security numbers. Linear in the input like every detector
 * (detect.ts): emails are found by scanning for "@" and growing outwards, not with a backtracking regex.
 */
import { hasDigits, maskValue, regexDetector } from './detect.js';
import type { Detector, PreFilter } from './detect.js';

/** `+` then at least 8 digits. */
const PHONE_PRE: PreFilter = (t) => t.includes('+') && hasDigits(8)(t);
/** `ddd-dd-dddd`. */
const SSN_PRE: PreFilter = (t) => t.includes('-') && hasDigits(9)(t);

const LOCAL_CHARS = /[A-Za-z0-9._%+-]/;
const DOMAIN_CHARS = /[A-Za-z0-9.-]/;

/** Emails, found by scanning for "@" and growing outwards (bounded), so a long input stays linear. */
const EMAIL: Detector = {
  id: 'email',
  category: 'pii',
  find(text, out) {
    let at = text.indexOf('@');
    while (at >= 0) {
      let s = at;
      while (s > 0 && at - s < 64 && LOCAL_CHARS.test(text[s - 1]!)) s--;
      let e = at + 1;
      while (e < text.length && e - at < 255 && DOMAIN_CHARS.test(text[e]!)) e++;
      while (e > at + 1 && (text[e - 1] === '.' || text[e - 1] === '-')) e--; // "mail me at a@b.com."
      const local = text.slice(s, at);
      const domain = text.slice(at + 1, e);
      const lastDot = domain.lastIndexOf('.');
      if (
        local.length > 0 &&
        lastDot > 0 &&
        /^[A-Za-z]{2,24}$/.test(domain.slice(lastDot + 1)) &&
        !domain.includes('..') &&
        !local.startsWith('.')
      ) {
        const email = text.slice(s, e);
        out.push({ start: s, end: e, detector: 'email', category: 'pii', masked: maskValue(email) });
      }
      at = text.indexOf('@', Math.max(e, at + 1));
    }
  },
};

function luhn(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return sum % 10 === 0;
}

export const PII_DETECTORS: Detector[] = [
  EMAIL,
  regexDetector('credit_card', 'pii', /(?<![0-9])(?:[0-9][ -]?){12,18}[0-9](?![0-9])/, hasDigits(13), {
    validate: (m) => {
      const digits = m[0].replace(/[ -]/g, '');
      // Issuer prefixes (Visa, Mastercard, Amex, Discover, JCB, UnionPay) cut false positives on long numbers.
      return (
        digits.length >= 13 &&
        digits.length <= 19 &&
        /^(?:4|5[1-5]|2[2-7]|3[47]|6(?:011|5|4[4-9]|2)|35)/.test(digits) &&
        luhn(digits)
      );
    },
    mask: (m) => '****' + m[0].replace(/[ -]/g, '').slice(-4),
  }),
  regexDetector('phone', 'pii', /(?<![\w+])\+[1-9][0-9 ().-]{6,20}[0-9](?![0-9])/, PHONE_PRE, {
    validate: (m) => {
      const n = m[0].replace(/[^0-9]/g, '').length;
      return n >= 8 && n <= 15;
    },
  }),
  regexDetector(
    'us_ssn',
    'pii',
    /(?<![0-9-])(?!000|666|9[0-9]{2})[0-9]{3}-(?!00)[0-9]{2}-(?!0000)[0-9]{4}(?![0-9-])/,
    SSN_PRE,
  ),
];
