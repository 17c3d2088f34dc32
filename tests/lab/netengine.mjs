// A network-only stand-in for src/engine (compilePolicy/decide) used by the lab's service runner until the engine
// branch is merged. It follows the brief's semantics: deny wins in both modes; whitelist passes only allow entries;
// blacklist passes unless a deny entry matches; domains exact or label suffix, `*.x` subdomains only; IPs by CIDR;
// `host:port` / `[v6]:port` pin a port.
import net from 'node:net';

function parseEntry(raw) {
  let host = raw.trim().toLowerCase();
  let port = null;
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(host);
  if (v6) {
    host = v6[1];
    port = v6[2] ? Number(v6[2]) : null;
  } else {
    const m = /^([^:]+):(\d+)$/.exec(host);
    if (m) {
      host = m[1];
      port = Number(m[2]);
    }
  }
  const [addr, len] = host.split('/');
  if (net.isIP(addr)) return { raw, kind: 'ip', addr, len: len === undefined ? null : Number(len), port };
  return { raw, kind: 'domain', name: host.replace(/\.$/, ''), port };
}

function toBits(ip) {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (m) ip = m[1];
  if (net.isIPv4(ip)) return { fam: 4, n: ip.split('.').reduce((a, x) => (a << 8n) | BigInt(Number(x)), 0n) };
  const [h, t] = ip.split('::');
  const hs = h ? h.split(':') : [];
  const ts = t !== undefined && t ? t.split(':') : [];
  const mid = t === undefined ? [] : Array(8 - hs.length - ts.length).fill('0');
  return { fam: 6, n: [...hs, ...mid, ...ts].reduce((a, x) => (a << 16n) | BigInt(parseInt(x || '0', 16)), 0n) };
}

function matches(e, s) {
  if (e.port !== null && e.port !== s.port) return false;
  if (e.kind === 'domain') {
    const d = (s.domain ?? '').toLowerCase().replace(/\.$/, '');
    if (!d) return false;
    if (e.name.startsWith('*.')) return d.endsWith(e.name.slice(1));
    return d === e.name || d.endsWith('.' + e.name);
  }
  if (!s.ip) return false;
  const a = toBits(e.addr);
  const b = toBits(s.ip);
  if (a.fam !== b.fam) return false;
  const width = a.fam === 4 ? 32n : 128n;
  const len = BigInt(e.len ?? Number(width));
  const shift = width - len;
  return a.n >> shift === b.n >> shift;
}

export function compilePolicy(p) {
  return {
    fail_mode: p.fail_mode,
    mode: p.network.mode,
    allow: p.network.allow.map(parseEntry),
    deny: p.network.deny.map(parseEntry),
  };
}

export function decide(surface, subject, policy) {
  if (!policy) return { action: 'block', reason: 'no_policy', source: 'fail_mode', rule: null };
  if (surface !== 'network') return { action: 'block', reason: 'engine_error', source: 'fail_mode', rule: null };
  const d = policy.deny.find((e) => matches(e, subject));
  if (d) return { action: 'block', reason: 'deny_entry', source: 'deny', rule: d.raw };
  if (policy.mode === 'blacklist') return { action: 'allow', reason: 'mode_allow', source: 'mode', rule: null };
  const a = policy.allow.find((e) => matches(e, subject));
  if (a) return { action: 'allow', reason: 'allow_entry', source: 'allow', rule: a.raw };
  return { action: 'block', reason: 'not_allowed', source: 'mode', rule: null };
}
