import { describe, expect, it } from 'vitest';
import { compilePolicy, decide, decideDnsAnswer, type NetworkSurfacePolicy } from '../../../src/engine/index.js';
import { makePolicy } from './helpers.js';

const policy = (n: Partial<NetworkSurfacePolicy>) =>
  compilePolicy(makePolicy({ network: { mode: 'whitelist', allow: ['allowed.test'], deny: [], ...n } }));
const resolved = (p: ReturnType<typeof policy>, ip: string, port = 443, own = false, domain = 'x.allowed.test') =>
  decide('network', { domain, ip, port, resolved: { own } }, p);

describe('a name-decided connection never leads into local or internal addresses (rebind)', () => {
  const p = policy({});
  it.each([
    '127.0.0.1',
    '127.0.0.2',
    '::1',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '0.0.0.0',
    '::',
    '::127.0.0.1',
    '169.254.169.254',
    '::ffff:169.254.169.254',
    'fe80::1',
    '224.0.0.1',
    'ff02::1',
    '255.255.255.255',
    '10.1.2.3',
    '::ffff:10.1.2.3',
    '172.16.0.1',
    '192.168.1.1',
    '100.64.0.1',
    'fd00::1',
  ])('%s is refused', (ip) => {
    expect(resolved(p, ip)).toMatchObject({ action: 'block', reason: 'rebind', rule: 'allowed.test' });
  });

  it("one of the host's own addresses (the enforcer says so) is refused; a public one is allowed", () => {
    expect(resolved(p, '198.18.0.1', 443, true)).toMatchObject({ action: 'block', reason: 'rebind' });
    expect(resolved(p, '198.18.0.1')).toMatchObject({ action: 'allow', rule: 'allowed.test' });
    expect(resolved(p, '2001:db8::5')).toMatchObject({ action: 'allow' });
  });

  it('an entry naming the address itself lets it through, on its port only', () => {
    const q = policy({ allow: ['allowed.test', 'localhost:3000', '10.1.2.3', '[fd00::/8]:8443'] });
    expect(resolved(q, '127.0.0.1', 3000)).toMatchObject({ action: 'allow' });
    expect(resolved(q, '::1', 3000)).toMatchObject({ action: 'allow' });
    expect(resolved(q, '198.18.0.1', 3000, true)).toMatchObject({ action: 'allow' });
    expect(resolved(q, '127.0.0.1', 80)).toMatchObject({ action: 'block', reason: 'rebind' });
    expect(resolved(q, '10.1.2.3', 22)).toMatchObject({ action: 'allow' });
    expect(resolved(q, '10.1.2.4', 22)).toMatchObject({ action: 'block', reason: 'rebind' });
    expect(resolved(q, 'fd00::7', 8443)).toMatchObject({ action: 'allow' });
    expect(resolved(q, 'fd00::7', 443)).toMatchObject({ action: 'block', reason: 'rebind' });
  });

  it('network.internal replaces the internal ranges; rebind_ok names may lead into them, never into loopback', () => {
    const q = policy({ internal: ['198.51.100.0/24'], rebind_ok: ['intra.allowed.test'] });
    expect(resolved(q, '10.1.2.3')).toMatchObject({ action: 'allow' });
    expect(resolved(q, '198.51.100.7')).toMatchObject({ action: 'block', reason: 'rebind' });
    expect(resolved(q, '198.51.100.7', 443, false, 'a.intra.allowed.test')).toMatchObject({ action: 'allow' });
    expect(resolved(q, '127.0.0.1', 443, false, 'intra.allowed.test')).toMatchObject({ reason: 'rebind' });
    expect(resolved(q, '169.254.169.254', 443, false, 'intra.allowed.test')).toMatchObject({ reason: 'rebind' });
  });

  it('a deny entry covering the resolved address still wins; shadow mode marks a rebind would-block', () => {
    expect(resolved(policy({ deny: ['198.18.0.0/15'] }), '198.18.1.1')).toMatchObject({ reason: 'deny_entry' });
    const s = compilePolicy({
      ...makePolicy({ network: { mode: 'whitelist', allow: ['allowed.test'], deny: [] } }),
      enforce: 'shadow',
    });
    expect(resolved(s, '127.0.0.1')).toMatchObject({ action: 'allow', wouldBlock: true, reason: 'rebind' });
  });

  it('DNS answers follow the same rule on any port an entry admits', () => {
    const q = policy({ allow: ['allowed.test', 'localhost:3000'], rebind_ok: ['intra.allowed.test'] });
    expect(decideDnsAnswer('x.allowed.test', '127.0.0.1', false, q)).toBeNull();
    expect(decideDnsAnswer('x.allowed.test', '169.254.169.254', false, q)).toMatchObject({ reason: 'rebind' });
    expect(decideDnsAnswer('x.allowed.test', '10.0.0.1', false, q)).toMatchObject({ action: 'block' });
    expect(decideDnsAnswer('intra.allowed.test', '10.0.0.1', false, q)).toBeNull();
    expect(decideDnsAnswer('x.allowed.test', '198.18.0.1', false, q)).toBeNull();
    expect(decideDnsAnswer('x.allowed.test', '198.18.0.1', true, policy({}))).toMatchObject({ reason: 'rebind' });
  });
});
