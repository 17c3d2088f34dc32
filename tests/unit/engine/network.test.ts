import { describe, expect, it } from 'vitest';
import {
  compilePolicy,
  decide,
  networkEntryProblem,
  type NetworkSubject,
  type PolicyInput,
} from '../../../src/engine/index.js';

function policy(net: Partial<PolicyInput['network']>): PolicyInput {
  const empty = { mode: 'whitelist' as const, allow: [], deny: [] };
  return {
    fail_mode: 'closed',
    network: { ...empty, ...net },
    filesystem: empty,
    commands: empty,
    tools: { ...empty, inspect: { secrets: 'block', pii: 'log', priv_esc: 'block' } },
  };
}

/** Whether `entry` in a whitelist allow list lets `subject` through. */
function allows(entry: string, subject: NetworkSubject): boolean {
  return decide('network', subject, compilePolicy(policy({ allow: [entry] }))).action === 'allow';
}

describe('network matching: domains', () => {
  it.each([
    ['github.com', 'github.com', true],
    ['github.com', 'api.github.com', true],
    ['github.com', 'a.b.api.github.com', true],
    ['github.com', 'evilgithub.com', false],
    ['github.com', 'github.com.evil.net', false],
    ['github.com', 'com', false],
    ['api.github.com', 'github.com', false],
    ['*.github.com', 'api.github.com', true],
    ['*.github.com', 'x.y.github.com', true],
    ['*.github.com', 'github.com', false],
    ['*.github.com', 'evilgithub.com', false],
    ['GitHub.COM', 'api.github.com', true],
    ['github.com', 'API.GitHub.Com', true],
    ['github.com.', 'github.com', true],
    ['github.com', 'github.com.', true],
    ['github.com', 'api.github.com.', true],
    ['github.com', 'github.com..', false],
    ['github.com', '.github.com', false],
    ['github.com', 'git\u212Aub.com', false], // KELVIN SIGN lowercases to k under Unicode rules
    ['github.com', 'gïthub.com', false],
    ['localhost', 'localhost', true],
    ['xn--bcher-kva.example', 'xn--bcher-kva.example', true],
    ['my_host.internal', 'my_host.internal', true],
  ])('%s allows domain %s: %s', (entry, domain, expected) => {
    expect(allows(entry, { domain, port: 443 })).toBe(expected);
  });

  it('reports the most specific matching entry', () => {
    const p = compilePolicy(policy({ allow: ['github.com', 'api.github.com'] }));
    expect(decide('network', { domain: 'x.api.github.com', port: 443 }, p).rule).toBe('api.github.com');
    expect(decide('network', { domain: 'www.github.com', port: 443 }, p).rule).toBe('github.com');
  });

  it('does not match a domain entry against the subject IP or an IP entry against a plain name', () => {
    expect(allows('github.com', { ip: '140.82.112.3', port: 443 })).toBe(false);
    expect(allows('140.82.112.3', { domain: 'github.com', port: 443 })).toBe(false);
  });
});

describe('network matching: ports', () => {
  it.each([
    ['github.com:443', 443, true],
    ['github.com:443', 80, false],
    ['github.com', 22, true],
    ['*.github.com:8443', 8443, true],
    ['*.github.com:8443', 443, false],
  ])('%s on port %i: %s', (entry, port, expected) => {
    expect(allows(entry, { domain: 'api.github.com', port })).toBe(expected);
  });

  it.each([
    ['10.1.2.3:443', '10.1.2.3', 443, true],
    ['10.1.2.3:443', '10.1.2.3', 444, false],
    ['10.0.0.0/8:443', '10.9.9.9', 443, true],
    ['10.0.0.0/8:443', '10.9.9.9', 80, false],
    ['[::1]:443', '::1', 443, true],
    ['[::1]:443', '::1', 80, false],
    ['[2001:db8::1]:443', '2001:db8::1', 443, true],
    ['[2001:db8::/32]:443', '2001:db8:5::7', 443, true],
    ['[2001:db8::/32]:443', '2001:db8:5::7', 22, false],
    ['[10.1.2.3]:443', '10.1.2.3', 443, true],
  ])('%s for %s port %i: %s', (entry, ip, port, expected) => {
    expect(allows(entry, { ip, port })).toBe(expected);
  });
});

describe('network matching: IPs and CIDRs', () => {
  it.each([
    ['10.0.0.0/8', '10.1.2.3', true],
    ['10.0.0.0/8', '11.1.2.3', false],
    ['10.0.0.0/8', '::ffff:10.1.2.3', true],
    ['10.0.0.0/8', '::ffff:a01:203', true],
    ['10.0.0.0/8', '::FFFF:10.1.2.3', true],
    ['::ffff:10.0.0.0/104', '10.200.0.1', true],
    ['::ffff:10.0.0.0/104', '11.0.0.1', false],
    ['::ffff:10.1.2.3', '10.1.2.3', true],
    ['10.1.2.3', '::ffff:10.1.2.3', true],
    ['10.1.2.3', '10.1.2.4', false],
    ['0.0.0.0/0', '203.0.113.9', true],
    ['0.0.0.0/0', '2001:db8::1', false],
    ['::/0', '2001:db8::1', true],
    ['::/0', '10.1.2.3', true], // ::/0 contains the IPv4-mapped range
    ['2001:db8::/32', '2001:db8::1', true],
    ['2001:db8::/32', '2001:0db8:ffff::1', true],
    ['2001:db8::/32', '2001:db9::1', false],
    ['2001:db8::/32', '10.1.2.3', false],
    ['2001:db8::1', '2001:db8:0:0:0:0:0:1', true],
    ['2001:db8::1', '2001:db8::1%eth0', true],
    ['fe80::/10', 'fe80::1%lo', true],
    ['::1', '::1', true],
    ['::1', '::2', false],
    ['192.168.1.0/24', '192.168.1.255', true],
    ['192.168.1.0/24', '192.168.2.0', false],
    ['255.255.255.255', '255.255.255.255', true],
    ['128.0.0.0/1', '200.0.0.1', true],
    ['128.0.0.0/1', '100.0.0.1', false],
  ])('%s contains %s: %s', (entry, ip, expected) => {
    expect(allows(entry, { ip, port: 443 })).toBe(expected);
  });

  it('ignores a :port left on the name (a Host header), so a blacklist still denies it', () => {
    const p = compilePolicy(policy({ mode: 'blacklist', deny: ['evil.com', '2001:db8::/32'] }));
    expect(decide('network', { domain: 'www.evil.com:8080', port: 8080 }, p).rule).toBe('evil.com');
    expect(decide('network', { domain: '[2001:db8::5]:443', port: 443 }, p).rule).toBe('2001:db8::/32');
    expect(decide('network', { domain: 'good.com:8080', port: 8080 }, p).reason).toBe('mode_allow');
  });

  it('judges a domain that is an IP literal as an address', () => {
    expect(allows('10.0.0.0/8', { domain: '10.1.2.3', port: 80 })).toBe(true);
    expect(allows('2001:db8::/32', { domain: '[2001:db8::5]', port: 80 })).toBe(true);
  });

  it('picks the longest prefix among several', () => {
    const p = compilePolicy(policy({ allow: ['10.0.0.0/8', '10.1.0.0/16', '10.1.2.0/24:80'] }));
    expect(decide('network', { ip: '10.1.2.3', port: 443 }, p).rule).toBe('10.1.0.0/16');
    expect(decide('network', { ip: '10.1.2.3', port: 80 }, p).rule).toBe('10.1.2.0/24:80');
    expect(decide('network', { ip: '10.9.2.3', port: 80 }, p).rule).toBe('10.0.0.0/8');
  });
});

describe('network entry grammar', () => {
  it.each([
    'github.com',
    '*.github.com',
    'github.com:443',
    'github.com.',
    'localhost',
    '10.1.2.3',
    '10.1.2.3:8080',
    '10.0.0.0/8',
    '10.0.0.0/8:443',
    '2001:db8::1',
    '2001:db8::/32',
    '[2001:db8::1]:443',
    '[::1]:443',
    '[2001:db8::/32]:443',
    '::ffff:10.0.0.0/104',
    '0.0.0.0/0',
    '::/0',
  ])('accepts %s', (entry) => {
    expect(networkEntryProblem(entry)).toBeNull();
  });

  it.each([
    ['', 'empty'],
    [':443', 'empty'],
    ['http://github.com', 'url'],
    ['https://github.com/org', 'url'],
    ['github.com/org', 'host_path'],
    ['user@github.com', 'userinfo'],
    ['github .com', 'whitespace'],
    [' github.com', 'whitespace'],
    ['github.com\t', 'whitespace'],
    ['git*hub.com', 'wildcard'],
    ['github.*', 'wildcard'],
    ['*github.com', 'wildcard'],
    ['*', 'wildcard'],
    ['*.*.github.com', 'wildcard'],
    ['.github.com', 'leading_dot'],
    ['github..com', 'bad_domain'],
    ['git!hub.com', 'bad_domain'],
    ['*.', 'bad_domain'],
    ['a'.repeat(64) + '.com', 'bad_domain'],
    ['github.com:', 'bad_port'],
    ['github.com:0', 'bad_port'],
    ['github.com:65536', 'bad_port'],
    ['github.com:https', 'bad_port'],
    ['github.com:-1', 'bad_port'],
    ['github.com:443:443', 'bad_ip'],
    ['[::1]:99999', 'bad_port'],
    ['[::1]x', 'bad_port'],
    ['gïthub.com', 'non_ascii'],
    ['bücher.example', 'non_ascii'],
    ['ｇｉｔｈｕｂ.com', 'non_ascii'],
    ['256.1.1.1', 'bad_ip'],
    ['10.1.2', 'bad_ip'],
    ['010.1.2.3', 'bad_ip'],
    ['1.2.3.4.5', 'bad_ip'],
    ['2001:db8:::1', 'bad_ip'],
    ['2001:db8::1::2', 'bad_ip'],
    ['[2001:db8::1', 'bad_ip'],
    ['[github.com]:443', 'bad_ip'],
    ['10.0.0.0/33', 'bad_cidr'],
    ['10.0.0.0/', 'bad_cidr'],
    ['10.0.0.0/08', 'bad_cidr'],
    ['10.1.2.3/8', 'bad_cidr'],
    ['2001:db8::/129', 'bad_cidr'],
    ['2001:db8::1/32', 'bad_cidr'],
  ])('refuses %j as %s', (entry, code) => {
    expect(networkEntryProblem(entry)?.code).toBe(code);
  });

  it('refuses a non-string entry', () => {
    expect(networkEntryProblem(42)?.code).toBe('not_a_string');
  });

  it.each(['http://github.com', 'user@github.com', '.github.com', 'github.com/x', '10.1.2.3/8', 'git*hub.com'])(
    'never matches with inert entry %s, even in a deny list',
    (entry) => {
      const p = compilePolicy(policy({ mode: 'blacklist', deny: [entry] }));
      for (const subject of [
        { domain: 'github.com', port: 443 },
        { domain: 'x.github.com', port: 443 },
        { ip: '10.1.2.3', port: 443 },
      ]) {
        expect(decide('network', subject, p).reason).toBe('mode_allow');
      }
    },
  );
});
