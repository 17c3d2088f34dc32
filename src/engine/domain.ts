/**
 * Domain matching. An entry `github.com` matches `github.com` and every name below it by whole
 * labels (`api.github.com`), never `evilgithub.com`; `*.github.com` matches the names below only.
 * Comparison is ASCII case-insensitive and one trailing dot is ignored. Only ASCII names are
 * matched: an IDN must be written (and is sent on the wire) as its `xn--` A-label, and a subject
 * with any non-ASCII character matches no domain entry (Unicode case mapping would otherwise let
 * e.g. U+212A KELVIN SIGN lowercase to `k`).
 *
 * The index is a reversed-label trie (com -> github -> api) with a hash map per level, keyed by
 * an FNV hash of the label computed in place, so a lookup costs one probe per label of the
 * subject and nothing per entry in the list.
 */
import { FNV_INIT, IntTable, fnvStep, rangeEquals } from './hash.js';
import { PortRules } from './port.js';
import type { EntryProblem } from './types.js';

/** Longest name DNS allows (without the trailing dot). */
const MAX_NAME = 253;
const MAX_LABEL = 63;

/**
 * Normalises a subject name for lookup: ASCII lowercase, one trailing dot dropped. Returns null
 * when the name cannot match any domain entry (empty, non-ASCII, empty label, illegal character).
 * Allocates only when the name has upper case or a trailing dot.
 */
export function normalizeDomainSubject(name: string): string | null {
  let end = name.length;
  if (end > 0 && name.charCodeAt(end - 1) === 46 /* . */) end--;
  if (end === 0 || end > MAX_NAME) return null;
  let upper = false;
  let labelLen = 0;
  for (let i = 0; i < end; i++) {
    const c = name.charCodeAt(i);
    if (c === 46) {
      if (labelLen === 0) return null;
      labelLen = 0;
      continue;
    }
    if (++labelLen > MAX_LABEL) return null;
    if (c >= 97 && c <= 122) continue; // a-z
    if (c >= 48 && c <= 57) continue; // 0-9
    if (c === 45 || c === 95) continue; // - _
    if (c >= 65 && c <= 90) {
      upper = true;
      continue;
    }
    return null;
  }
  if (labelLen === 0) return null;
  const trimmed = end === name.length ? name : name.slice(0, end);
  return upper ? trimmed.toLowerCase() : trimmed;
}

/**
 * Grammar of the host part of a domain entry (already split from any `:port`). Returns the
 * problem that makes it inert, or null. A leading `*.` is the only wildcard form.
 */
export function domainHostProblem(host: string): EntryProblem | null {
  if (host.length === 0) return { code: 'empty', message: 'the host is empty' };
  if (host.charCodeAt(0) === 46) {
    return { code: 'leading_dot', message: 'a leading "." never matches; write "example.com" (it covers subdomains)' };
  }
  let rest = host;
  if (host.startsWith('*.')) rest = host.slice(2);
  if (rest.includes('*')) {
    return {
      code: 'wildcard',
      message: 'a wildcard is only allowed as a whole leading label, as in "*.example.com"',
    };
  }
  if (normalizeDomainSubject(rest) === null) {
    return {
      code: 'bad_domain',
      message: 'not a valid host name (labels of a-z, 0-9, "-", "_", 1-63 characters, 253 in all)',
    };
  }
  return null;
}

interface DomainNode {
  /** This node's label (verification after a hash hit). */
  label: string;
  /** Next sibling with the same label hash (collision chain). */
  next: DomainNode | null;
  children: IntTable<DomainNode> | null;
  /**
   * Entries naming exactly this domain (`github.com`): they match it and everything below.
   * The usual entry has no port, so its text sits on the node itself (one memory access fewer
   * per lookup); entries pinning a port go to the PortRules beside it.
   */
  selfAny: string | null;
  selfPorts: PortRules | null;
  /** Entries matching strictly below this domain (`github.com` and `*.github.com`). */
  belowAny: string | null;
  belowPorts: PortRules | null;
}

function newNode(label: string): DomainNode {
  return { label, next: null, children: null, selfAny: null, selfPorts: null, belowAny: null, belowPorts: null };
}

function hashLabel(s: string, start: number, end: number): number {
  let h = FNV_INIT;
  for (let i = start; i < end; i++) h = fnvStep(h, s.charCodeAt(i));
  return h;
}

function findChild(node: DomainNode, s: string, start: number, end: number, h: number): DomainNode | null {
  if (node.children === null) return null;
  let c = node.children.get(h) ?? null;
  while (c !== null && !rangeEquals(s, start, end, c.label)) c = c.next;
  return c;
}

/** A compiled set of domain entries (one surface list). Build once, query many times. */
export class DomainIndex {
  private readonly root = newNode('');
  size = 0;

  /**
   * Adds a domain entry. `domain` must be normalised (lowercase, no trailing dot, valid);
   * `wildcard` is true for `*.domain` (subdomains only).
   */
  add(domain: string, wildcard: boolean, port: number | null, rule: string): void {
    let node = this.root;
    let end = domain.length;
    while (end > 0) {
      const dot = domain.lastIndexOf('.', end - 1);
      const start = dot + 1;
      const h = hashLabel(domain, start, end);
      let child = findChild(node, domain, start, end, h);
      if (child === null) {
        child = newNode(domain.slice(start, end));
        if (node.children === null) node.children = new IntTable();
        child.next = node.children.get(h) ?? null;
        node.children.set(h, child);
      }
      node = child;
      end = dot < 0 ? 0 : dot;
    }
    if (port === null) {
      if (!wildcard) node.selfAny ??= rule;
      node.belowAny ??= rule;
    } else {
      if (!wildcard) (node.selfPorts ??= new PortRules()).add(rule, port);
      (node.belowPorts ??= new PortRules()).add(rule, port);
    }
    this.size++;
  }

  /**
   * The most specific entry matching `name` (normalised with normalizeDomainSubject) on `port`,
   * or null. Walks from the top-level label down and stops at the first label with no node.
   */
  match(name: string, port: number): string | null {
    let node = this.root;
    let best: string | null = null;
    let end = name.length;
    while (end > 0) {
      const dot = name.lastIndexOf('.', end - 1);
      const start = dot + 1;
      const child = findChild(node, name, start, end, hashLabel(name, start, end));
      if (child === null) break;
      const ports = start === 0 ? child.selfPorts : child.belowPorts;
      const pinned = ports === null ? null : ports.match(port);
      const r = pinned ?? (start === 0 ? child.selfAny : child.belowAny);
      if (r !== null) best = r;
      node = child;
      end = dot < 0 ? 0 : dot;
    }
    return best;
  }
}
