import { describe, expect, it } from 'vitest';
import {
  compilePolicy,
  decide,
  inspectInputs,
  maskInputs,
  maskSecrets,
  type InspectAction,
  type InspectCategory,
} from '../../../src/engine/index.js';
import { makePolicy } from './helpers.js';

// Secret-shaped test values are assembled from parts so no scanner mistakes this file for a leak.
const j = (...parts: string[]): string => parts.join('');
const AWS = j('AKIA', 'IOSFODNN7EXAMPLE');
const GHP = j('ghp_', 'aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5');
const GHO = j('gho_', '16C7e42F292c6912E7710c838347Ae178B4a');
const GH_PAT = j('github_pat_', '11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz');
const SLACK = j('xoxb-', '123456789012-1234567890123-AbCdEfGhIjKlMnOp');
const STRIPE = j('sk_live_', '4eC39HqLyjWDarjtT1zdp7dc');
const OPENAI = j('sk-proj-', 'Ab3De5Gh7Jk9Mn1Pq3St5Vw7Yz9Bc1De3');
const OPENAI_OLD = j('sk-', 'T3BlbkFJ4aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ');
const ANTHROPIC = j('sk-ant-', 'api03-Ab3De5Gh7Jk9Mn1Pq3St5Vw7Yz9Bc1De3Fg5');
const GOOGLE = j('AIza', 'SyA-1234567890abcdefghijklmnopqrstu');
const JWT = j(
  'eyJhbGciOiJIUzI1NiJ9',
  '.',
  'eyJzdWIiOiIxMjM0NTY3ODkwIn0',
  '.',
  'dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U',
);
const PEM = j('-----BEGIN ', 'RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7bq\nabc\n-----END RSA ', 'PRIVATE KEY-----');
const OPENSSH = j(
  '-----BEGIN OPENSSH ',
  'PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH ',
  'PRIVATE KEY-----',
);
const GITLAB = j('glpat-', 'xYz12AbC34dEf56GhI78');
const NPM = j('npm_', 'aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5');

const ACTIONS: Record<InspectCategory, InspectAction> = { secrets: 'block', pii: 'block', priv_esc: 'block' };

function detectors(inputs: unknown): string[] {
  return inspectInputs(inputs, ACTIONS).map((f) => f.detector);
}

describe('inspection: secrets', () => {
  it.each([
    ['aws_access_key', `export AWS_ACCESS_KEY_ID=${AWS}`],
    ['github_token', `token ${GHP}`],
    ['github_token', GHO],
    ['github_token', `pat: ${GH_PAT}`],
    ['slack_token', SLACK],
    ['stripe_key', `Stripe.key = '${STRIPE}'`],
    ['openai_key', OPENAI],
    ['openai_key', OPENAI_OLD],
    ['anthropic_key', `ANTHROPIC=${ANTHROPIC}`],
    ['google_api_key', `?key=${GOOGLE}`],
    ['jwt', `Cookie: session=${JWT}`],
    ['private_key', PEM],
    ['private_key', OPENSSH],
    ['gitlab_token', GITLAB],
    ['npm_token', NPM],
    ['credential_assignment', 'password=hunter2!x'],
    ['credential_assignment', 'db_password: "S3cr3tValue"'],
    ['credential_assignment', 'API_KEY=abc123def456'],
    ['credential_assignment', '"client_secret": "zyx987"'],
    ['credential_assignment', 'AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'],
    ['bearer_token', 'Authorization: Bearer abcdef0123456789abcdef'],
    ['url_credentials', 'git clone https://bob:pa55word@git.example.com/x.git'],
    ['basic_auth', 'Authorization: Basic Ym9iOnBhNTV3b3JkMTIz'],
    ['slack_webhook', j('https://hooks.slack.com/services/', 'T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX')],
    ['huggingface_token', j('hf_', 'aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH')],
    ['sendgrid_key', j('SG.', 'aBcDeFgHiJkLmNoPqRsTuV', '.', 'aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789aBcDeFg')],
  ])('%s in %j', (id, text) => {
    expect(detectors({ text })).toContain(id);
  });

  it('anthropic keys are not also reported as OpenAI keys', () => {
    expect(detectors(ANTHROPIC)).not.toContain('openai_key');
  });

  it.each([
    'the quick brown fox',
    'sk-learn is a python package',
    'sk-this-is-not-a-real-key-at-all',
    'password=${PASSWORD}',
    'password: null',
    'password = get_password()',
    'token: <your token here>',
    'AKIA is a prefix',
    'ghp_short',
    'my github token is in the vault',
  ])('no secret in %j', (text) => {
    expect(inspectInputs({ text }, ACTIONS).filter((f) => f.category === 'secrets')).toEqual([]);
  });

  it('flags a credential by its key name whatever the value looks like', () => {
    const f = inspectInputs({ config: { password: 'hunter2', token: 12345678 } }, ACTIONS);
    expect(f).toContainEqual(expect.objectContaining({ detector: 'credential_field', at: 'config.password' }));
    expect(f).toContainEqual(
      expect.objectContaining({ detector: 'credential_field', at: 'config.token', masked: '12****' }),
    );
  });

  it('scans keys as well as values', () => {
    expect(detectors({ [AWS]: true })).toContain('aws_access_key');
  });

  it('reads numbers as text and reports the root as $', () => {
    expect(inspectInputs(4111111111111111, ACTIONS)).toEqual([
      { category: 'pii', detector: 'credit_card', at: '$', masked: '****1111', action: 'block' },
    ]);
  });

  it('keeps at most 64 findings', () => {
    const many = Array.from({ length: 200 }, (_, i) => `user${i}@example.com`);
    expect(inspectInputs(many, ACTIONS)).toHaveLength(64);
  });

  it('masks secret keys in the reported path', () => {
    const f = inspectInputs({ [AWS]: { x: 'a@b.io' } }, ACTIONS);
    expect(JSON.stringify(f)).not.toContain(AWS);
    expect(f.map((x) => x.at)).toContain('["AKIA****"].x');
  });

  it('walks nested arrays and objects and reports where', () => {
    const f = inspectInputs({ args: ['--x', { env: { T: `x ${GHP}` } }] }, ACTIONS);
    expect(f).toContainEqual(expect.objectContaining({ detector: 'github_token', at: 'args[1].env.T' }));
  });
});

describe('inspection: PII', () => {
  it.each([
    ['email', 'mail bob.smith+tag@example.co.uk please'],
    ['email', 'x@y.io'],
    ['credit_card', 'card 4111 1111 1111 1111 exp 12/29'],
    ['credit_card', '5500-0000-0000-0004'],
    ['credit_card', '378282246310005'],
    ['phone', 'call +1 (415) 555-2671'],
    ['phone', '+442071838750'],
    ['us_ssn', 'ssn 123-45-6789'],
  ])('%s in %j', (id, text) => {
    expect(detectors(text)).toContain(id);
  });

  it.each([
    'no at sign here',
    'user@localhost',
    '@handle on twitter',
    'version 4111 1111 1111 1112', // fails Luhn
    'id 1234567890123456',
    'ssn 000-12-3456',
  ])('no PII in %j', (text) => {
    expect(inspectInputs(text, ACTIONS).filter((f) => f.category === 'pii')).toEqual([]);
  });

  it('stays linear on a huge input without an "@" domain', () => {
    const big = 'a'.repeat(200_000) + '@' + 'b'.repeat(200_000) + ' ' + '1 '.repeat(100_000);
    const t0 = performance.now();
    inspectInputs({ big }, ACTIONS);
    expect(performance.now() - t0).toBeLessThan(2000);
  });
});

describe('inspection: privilege escalation', () => {
  it.each([
    ['sudo', 'sudo apt install x'],
    ['sudo', 'cd /tmp && sudo -i'],
    ['sudo', '/usr/bin/sudo id'],
    ['sudo', ['sudo', 'ls']],
    ['pkexec', 'pkexec /bin/sh'],
    ['doas', 'doas sh'],
    ['su_root', 'su -'],
    ['su_root', 'su - root -c id'],
    ['su_root', 'su root'],
    ['su_root', 'echo hi; su -l'],
    ['setuid_chmod', 'chmod +s /tmp/sh'],
    ['setuid_chmod', 'chmod u+s /tmp/sh'],
    ['setuid_chmod', 'chmod g+s dir'],
    ['setuid_chmod', 'chmod 4755 /tmp/sh'],
    ['setuid_chmod', 'chmod 04755 /tmp/sh'],
    ['setuid_chmod', 'chmod 2755 /tmp/sh'],
    ['setuid_chmod', 'chmod -R u+x,u+s /tmp/d'],
    ['setuid_call', 'os.setuid(0)'],
    ['setuid_call', 'setresuid(0, 0, 0);'],
    ['setuid_call', 'setgid( 0 )'],
    ['setuid_chmod', 'chmod a=rwxs f'],
    ['su_root', 'su'],
    ['rm_rf_root', 'rm -rf /'],
    ['rm_rf_root', 'rm -fr /'],
    ['rm_rf_root', 'rm -r -f /'],
    ['rm_rf_root', 'rm  -rf   /'],
    ['rm_rf_root', 'rm -Rf /'],
    ['rm_rf_root', 'rm --recursive --force /'],
    ['rm_rf_root', 'rm -rf /*'],
    ['rm_rf_root', 'rm -rf --no-preserve-root /'],
    ['rm_rf_root', 'rm --no-preserve-root -r /x'],
    ['rm_rf_root', 'rm -rf "/"'],
    ['rm_rf_root', 'rm -rf //'],
    ['rm_rf_root', 'rm -rf /tmp/..'],
    ['rm_rf_root', 'rm -rf -- /'],
    ['rm_rf_root', 'true; /bin/rm -rf / ; echo done'],
    ['rm_rf_root', ['rm', '-rf', '/']],
    ['rm_rf_root', { cmd: 'bash', args: ['-c', 'rm -r -f /'] }],
  ])('%s in %j', (id, input) => {
    expect(detectors(input)).toContain(id);
  });

  it.each([
    'pseudo code',
    'visudo is an editor', // not the word sudo
    'rm -rf /tmp/build',
    'rm -rf ./',
    'rm -f /',
    'rm /',
    'chmod 755 /tmp/x',
    'chmod 0755 /tmp/x',
    'chmod +x run.sh',
    'chmod 1777 /tmp',
    'summary',
    'issue',
    'format -rf /',
  ])('no privilege escalation in %j', (text) => {
    expect(inspectInputs({ text }, ACTIONS).filter((f) => f.category === 'priv_esc')).toEqual([]);
  });
});

describe('tools decisions with inspection', () => {
  const tools = (inspect: Record<InspectCategory, InspectAction>, mode: 'whitelist' | 'blacklist' = 'whitelist') =>
    compilePolicy(makePolicy({ tools: { mode, allow: ['run_shell'], deny: ['evil'], inspect } }));
  const standard = tools({ secrets: 'block', pii: 'log', priv_esc: 'block' });

  it('blocks on a secret, masks it, and never lets the raw secret into the verdict', () => {
    const v = decide(
      'tools',
      { name: 'run_shell', inputs: { cmd: `curl -H "x: ${GHP}" -u bob:${STRIPE}`, [AWS]: 1 } },
      standard,
    );
    expect(v).toMatchObject({ action: 'block', reason: 'inspect_secrets', source: 'inspect', rule: 'inspect.secrets' });
    const json = JSON.stringify(v);
    for (const raw of [GHP, STRIPE, AWS, GHP.slice(4, 20), AWS.slice(4)]) expect(json).not.toContain(raw);
    expect(v.findings?.map((f) => f.masked)).toContain('ghp_****');
  });

  it('blocks on privilege escalation', () => {
    const v = decide('tools', { name: 'run_shell', inputs: { argv: ['sudo', 'rm', '-rf', '/'] } }, standard);
    expect(v).toMatchObject({ action: 'block', reason: 'inspect_priv_esc', rule: 'inspect.priv_esc' });
    expect(v.findings?.map((f) => f.detector)).toEqual(expect.arrayContaining(['sudo', 'rm_rf_root']));
  });

  it('logs PII on an allowed call with the finding attached and masked', () => {
    const v = decide('tools', { name: 'run_shell', inputs: { to: 'alice.jones@example.com' } }, standard);
    expect(v).toMatchObject({ action: 'allow', reason: 'allow_entry', rule: 'run_shell' });
    expect(v.findings).toEqual([{ category: 'pii', detector: 'email', at: 'to', masked: 'alic****', action: 'log' }]);
    expect(JSON.stringify(v)).not.toContain('alice.jones');
  });

  it('does not report a category set to allow', () => {
    const v = decide(
      'tools',
      { name: 'run_shell', inputs: `sudo x ${GHP}` },
      tools({ secrets: 'allow', pii: 'allow', priv_esc: 'log' }),
    );
    expect(v.action).toBe('allow');
    expect(v.findings?.map((f) => f.category)).toEqual(['priv_esc']);
  });

  it('names secrets first when several categories block', () => {
    const v = decide('tools', { name: 'run_shell', inputs: ['sudo', GHP, 'a@b.io'] }, tools(ACTIONS));
    expect(v.reason).toBe('inspect_secrets');
  });

  it('inspects only what the registry let through', () => {
    const v = decide('tools', { name: 'evil', inputs: GHP }, standard);
    expect(v).toEqual({ action: 'block', reason: 'deny_entry', source: 'deny', rule: 'evil' });
    expect(decide('tools', { name: 'other', inputs: GHP }, standard).reason).toBe('not_allowed');
  });

  it('inspects in blacklist mode too', () => {
    const v = decide(
      'tools',
      { name: 'anything', inputs: 'rm -rf /' },
      tools({ secrets: 'block', pii: 'log', priv_esc: 'block' }, 'blacklist'),
    );
    expect(v.reason).toBe('inspect_priv_esc');
  });

  it('refuses pathologically deep inputs as engine_error', () => {
    let deep: unknown = 'x';
    for (let i = 0; i < 1000; i++) deep = [deep];
    expect(decide('tools', { name: 'run_shell', inputs: deep }, standard)).toMatchObject({
      action: 'block',
      reason: 'engine_error',
    });
  });

  it('defaults inspect actions when the policy leaves them out', () => {
    const p = compilePolicy(makePolicy({ tools: { mode: 'blacklist', allow: [], deny: [], inspect: {} as never } }));
    expect(decide('tools', { name: 't', inputs: GHP }, p).reason).toBe('inspect_secrets');
    expect(decide('tools', { name: 't', inputs: 'a@b.io' }, p).action).toBe('allow');
  });
});

describe('masking', () => {
  it.each([
    AWS,
    GHP,
    SLACK,
    STRIPE,
    OPENAI,
    ANTHROPIC,
    GOOGLE,
    JWT,
    GITLAB,
    NPM,
    'bob@example.com',
    '4111 1111 1111 1111',
  ])('maskSecrets hides %s', (secret) => {
    const out = maskSecrets(`before ${secret} after`);
    expect(out).not.toContain(secret);
    expect(out).toMatch(/^before \S*\*\*\*\*\S* after$/);
  });

  it('masks a whole private key block', () => {
    const out = maskSecrets(`key:\n${PEM}\nend`);
    expect(out).not.toContain('MIIEpAIBAAKCAQEA7bq');
    expect(out).toBe('key:\n-----BEGIN PRIVATE KEY-----****\nend');
  });

  it('keeps the name of an assigned credential and masks the value', () => {
    expect(maskSecrets('db_password=S3cr3tValue; next')).toBe('db_password=****; next');
  });

  it('leaves ordinary text and priv_esc commands alone', () => {
    expect(maskSecrets('sudo rm -rf / # nothing secret')).toBe('sudo rm -rf / # nothing secret');
  });

  it('maskInputs masks strings, keys and sensitively named values deeply', () => {
    const out = maskInputs({
      a: [`t=${GHP}`],
      [AWS]: 1,
      nested: { password: 'hunter2', pin: 1, n: 5, api_key: 98765432 },
    });
    const json = JSON.stringify(out);
    for (const raw of [GHP, AWS, 'hunter2', '98765432']) expect(json).not.toContain(raw);
    expect(out).toMatchObject({ nested: { password: '****', n: 5, api_key: '98****' } });
  });
});

describe('inspection cost', () => {
  it.each([
    ['rm words', 'rm '.repeat(40_000)],
    ['rm -f words', 'rm -f '.repeat(20_000)],
    ['at signs', 'a@'.repeat(60_000)],
    ['spaced digits', '1 '.repeat(60_000)],
    ['slashes', '/'.repeat(120_000)],
  ])('stays fast on %s', (_name, text) => {
    const t0 = performance.now();
    inspectInputs({ text }, ACTIONS);
    maskSecrets(text);
    expect(performance.now() - t0).toBeLessThan(1500);
  });

  it('still sees rm -rf / after a decoy rm', () => {
    expect(detectors('rm -rf rm /')).toContain('rm_rf_root');
    expect(detectors('bash -c "rm -rf /"')).toContain('rm_rf_root');
    expect(detectors('echo $(rm -rf /)')).toContain('rm_rf_root');
  });
});
