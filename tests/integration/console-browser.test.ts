/**
 * The web console (docs/console.md) driven in headless Chromium (Debian's `chromium`, through playwright-core)
 * against the whole service in the lab, the console served by the service itself (console.enabled) in the
 * agent's namespace. The agent's probes run as the leashed account; the browser runs in the same namespace
 * (its loopback is the console's). Screenshots of each page go to test-results/console/.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LAB, canRunLab, stopChild, useLab, type LabUser, waitForServiceReady } from '../lab/index.js';
import type { DecisionLine } from '../../src/log/decisions.js';

const ROOT = path.resolve(__dirname, '../..');
const CLI = path.join(ROOT, 'dist/src/cli/main.js');
const CHROMIUM = '/usr/bin/chromium';
const SHOTS = path.join(ROOT, 'test-results', 'console');
const PORT = 18470;

describe.skipIf(!canRunLab)('console: the web console in a real browser against the service (root, lab)', () => {
  const lab = useLab('cons');
  let dir = '';
  let env: NodeJS.ProcessEnv = {};
  let agent: LabUser;
  let svc: ChildProcess | null = null;
  let svcErr = '';
  let browser: Browser;
  let page: Page;
  let token = '';
  const failed: string[] = [];
  const base = `http://127.0.0.1:${PORT}`;
  const decisionsPath = () => path.join(dir, 'decisions.jsonl');
  const decisions = (): DecisionLine[] =>
    fs.existsSync(decisionsPath())
      ? fs
          .readFileSync(decisionsPath(), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as DecisionLine)
      : [];
  const tlsAs = (u: LabUser, host: string) => {
    const addr = LAB.hosts.find((h) => h.name === host)?.v4 ?? host;
    return lab
      .get()
      .probe(u, [{ kind: 'tls', host: addr, port: 443, servername: host }])
      .then(([r]) => r!);
  };
  // The screenshots in docs/console.md: the viewport (the top of the page, as an operator first sees it). Written
  // into docs/images only when asked (LEASH_DOC_SHOTS=1), so a test run leaves the checkout as it found it.
  const docShot = async (p: Page, name: string, keep: boolean) => {
    if (!keep) return;
    const dir = process.env.LEASH_DOC_SHOTS === '1' ? path.join(ROOT, 'docs', 'images') : path.join(SHOTS, 'docs');
    const file = path.join(dir, `${name}.png`);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    await p.evaluate('window.scrollTo(0, 0)');
    await p.screenshot({ path: file });
    expect(fs.statSync(file).size, `${name}.png`).toBeLessThan(150 * 1024);
  };
  const shot = async (p: Page, name: string) => {
    fs.mkdirSync(SHOTS, { recursive: true });
    await p.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
  };

  beforeAll(async () => {
    if (!fs.existsSync(CHROMIUM))
      throw new Error(`${CHROMIUM} is missing: apt-get install chromium (scripts/install-deps.sh installs it)`);
    const l = lab.get();
    dir = fs.mkdtempSync(path.join(l.dir, 'cons-'));
    fs.chmodSync(dir, 0o755);
    agent = await l.createUser('leash-tcon1');
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${agent.name}:x:${agent.uid}:${agent.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    fs.writeFileSync(
      path.join(dir, 'leash.yaml'),
      `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab], ask: [other.lab], deny: [evil.lab], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: blacklist }
commands: { mode: blacklist }
tools: { mode: whitelist }
enforcers: { network: true, filesystem: false, tools: false }
approvals: { deadlines: { network: 20 } }
logging: { level: info, decisions: ${decisionsPath()}, allows: all, metrics_socket: ${path.join(dir, 'metrics.sock')} }
console: { enabled: true, socket: ${path.join(dir, 'console.sock')}, listen: "127.0.0.1:${PORT}" }
`,
    );
    env = {
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_PID_FILE: path.join(dir, 'leash.pid'),
      LEASH_APPROVALS_SOCKET: path.join(dir, 'approvals.sock'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
      LEASH_METRICS_SOCKET: path.join(dir, 'metrics.sock'),
    };
    svc = spawn(
      'ip',
      [
        'netns',
        'exec',
        l.agentNs,
        'timeout',
        '-s',
        'KILL',
        '300',
        process.execPath,
        CLI,
        '-c',
        path.join(dir, 'leash.yaml'),
      ],
      { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    const s = svc;
    l.defer('stop leash service', () => stopChild(s, 10_000));
    svc.stderr!.setEncoding('utf8').on('data', (d: string) => (svcErr += d));
    await waitForServiceReady(
      svc,
      () => svcErr,
      () => svcErr.includes('"msg":"console serving"'),
    );
    expect(svcErr).toContain('"msg":"console serving"');
    token = fs.readFileSync(path.join(dir, 'console.sock.token'), 'utf8').split('\n')[0]!;
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // The browser in the agent's namespace, where the console's loopback port is.
    const wrap = path.join(dir, 'chromium-in-ns');
    fs.writeFileSync(wrap, `#!/bin/sh\nexec ip netns exec ${l.agentNs} ${CHROMIUM} "$@"\n`, { mode: 0o755 });
    browser = await chromium.launch({ executablePath: wrap, headless: true, args: ['--no-sandbox'], timeout: 60_000 });
    l.defer('close chromium', () => browser.close());
    page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
    // Every request the operator's page makes must succeed (the favicon included); an event stream the page
    // itself aborts (a filter change, a navigation) is not a failure.
    page.on('response', (r) => {
      if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`);
    });
    page.on('requestfailed', (r) => {
      if (!(r.url().includes('/api/events') && r.failure()?.errorText === 'net::ERR_ABORTED'))
        failed.push(`${r.failure()?.errorText} ${r.url()}`);
    });
    await page.goto(`${base}/#token=${token}`);
    await page.waitForSelector('#stream-status:text-is("Live")', { timeout: 15_000 });
  }, 180_000);

  afterAll(async () => {
    await browser?.close().catch(() => {});
    if (svc && svc.exitCode === null) await stopChild(svc, 10_000);
  }, 60_000);

  it('a request without the token, and one with a foreign Origin, are refused (401, 403)', async () => {
    const ctx = await browser.newContext();
    const bare = await ctx.newPage();
    // Without a token the page asks for one and makes no API request it knows would be refused.
    await bare.goto(`${base}/#subjects`);
    // The body's code, read by the page itself (the DevTools body fetch is not relied on).
    const res = await bare.evaluate(async () => {
      const x = await fetch('/api/subjects');
      return { status: x.status, body: (await x.json()) as unknown };
    });
    expect(res).toMatchObject({ status: 401, body: { error: { code: 'console_unauthorized' } } });
    await bare.waitForSelector('#page-login:not([hidden])', { timeout: 10_000 });
    await shot(bare, 'login-refused');
    // A page of another origin (a real loopback server on another port: Chromium sends a page it cannot place
    // on the network no local request at all) using the operator's browser: its requests carry its Origin and are
    // refused by the console, read from the DevTools protocol (CORS hides the status from the page itself).
    const foreign = path.join(dir, 'foreign');
    fs.mkdirSync(foreign, { recursive: true });
    fs.writeFileSync(
      path.join(foreign, 'index.html'),
      `<script>fetch(${JSON.stringify(base + '/api/approvals/aaaaaaaaaaaaaaaa')}, {method: 'POST', mode: 'no-cors', body: '{"decision":"once"}'}).catch(() => {});
fetch(${JSON.stringify(base + '/api/subjects')}).catch(() => {});</script>`,
    );
    const py = spawn(
      'ip',
      [
        'netns',
        'exec',
        lab.get().agentNs,
        'python3',
        '-m',
        'http.server',
        String(PORT + 1),
        '--bind',
        '127.0.0.1',
        '--directory',
        foreign,
      ],
      { stdio: 'ignore' },
    );
    lab.get().defer('stop the foreign page server', () => stopChild(py, 2000));
    const cdp = await ctx.newCDPSession(bare);
    await cdp.send('Network.enable');
    const sent = new Map<string, { method: string; url: string; origin?: string }>();
    const status = new Map<string, number>();
    // The two events of one request come in either order: merge them (the extra info carries the Origin sent).
    cdp.on('Network.requestWillBeSent', (e) => {
      const o = (e.request.headers as Record<string, string>)['Origin'];
      const cur = sent.get(e.requestId);
      sent.set(e.requestId, {
        method: e.request.method,
        url: e.request.url,
        ...(cur?.origin !== undefined ? { origin: cur.origin } : o !== undefined ? { origin: o } : {}),
      });
    });
    cdp.on('Network.requestWillBeSentExtraInfo', (e) => {
      const o = (e.headers as Record<string, string>)['Origin'];
      const cur = sent.get(e.requestId);
      if (cur) {
        if (o !== undefined) cur.origin = o;
      } else sent.set(e.requestId, { method: '', url: '', ...(o ? { origin: o } : {}) });
    });
    cdp.on('Network.responseReceivedExtraInfo', (e) => status.set(e.requestId, e.statusCode));
    const foreignUrl = `http://127.0.0.1:${PORT + 1}/`;
    for (let i = 0; i < 50; i++) {
      const ok = await bare.goto(foreignUrl, { timeout: 5000 }).then(
        (r) => r?.status() === 200,
        () => false,
      );
      if (ok) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    const seenStatus = (method: string, suffix: string) =>
      [...sent.entries()].find(
        ([id, v]) => v.method === method && v.url.endsWith(suffix) && v.origin !== undefined && status.has(id),
      );
    await expect
      .poll(() => !!seenStatus('POST', '/api/approvals/aaaaaaaaaaaaaaaa') && !!seenStatus('GET', '/api/subjects'), {
        timeout: 10_000,
      })
      .toBe(true);
    for (const [method, suffix] of [
      ['POST', '/api/approvals/aaaaaaaaaaaaaaaa'],
      ['GET', '/api/subjects'],
    ] as const) {
      const [id, v] = seenStatus(method, suffix)!;
      expect(v.origin, `${method} ${suffix}`).toBe(`http://127.0.0.1:${PORT + 1}`);
      expect(status.get(id), `${method} ${suffix}`).toBe(403);
    }
    await ctx.close();
    // The agent itself, on the unix socket, with the token: refused by its UID (SO_PEERCRED), not let in by it.
    const script = `const http=require('http');http.get({socketPath:${JSON.stringify(path.join(dir, 'console.sock'))},path:'/api/approvals',headers:{authorization:'Bearer ${token}'}},r=>{let b='';r.on('data',d=>b+=d);r.on('end',()=>console.log(JSON.stringify({status:r.statusCode,body:JSON.parse(b)})))})`;
    const a = spawnSync(
      'setpriv',
      [`--reuid=${agent.uid}`, `--regid=${agent.gid}`, '--clear-groups', process.execPath, '-e', script],
      { encoding: 'utf8', timeout: 10_000 },
    );
    expect(a.status, a.stderr).toBe(0);
    expect(JSON.parse(a.stdout)).toMatchObject({ status: 401, body: { error: { code: 'console_unauthorized' } } });
  }, 60_000);

  it('a blocked connection by the leashed account appears in the decisions view within a second', async () => {
    await page.goto(`${base}/#decisions`);
    await page.waitForSelector('#page-decisions:not([hidden])');
    const r = await tlsAs(agent, 'evil.lab');
    const t0 = Date.now();
    expect(r.ok).toBe(false);
    const line = decisions()
      .filter((d) => d.uid === agent.uid)
      .at(-1)!;
    expect(line).toMatchObject({ action: 'block', reason: 'deny_entry', rule: 'evil.lab' });
    const row = page.locator(`#decisions-body tr[data-ref="${line.ref}"]`);
    await row.waitFor({ timeout: 5000 });
    const ms = Date.now() - t0;
    process.stderr.write(
      `console-browser: the block was on the page ${ms} ms after the agent's connection was reset\n`,
    );
    expect(ms, `shown after ${ms} ms`).toBeLessThan(1000);
    await expect.poll(() => row.locator('td').nth(1).textContent()).toBe('block');
    // The page opens on blocks and asks: the agent's allowed connections are not in the table.
    expect(await page.getAttribute('#f-actions button[aria-pressed="true"]', 'data-action')).toBe(
      'block,ask,would_block',
    );
    expect(await page.locator('#decisions-body .act.allow').count()).toBe(0);
    await shot(page, 'decisions');
    // The ref links to its detail; j moves to the newest row, Enter opens it, Escape closes it.
    await page.keyboard.press('j');
    await page.keyboard.press('Enter');
    await page.waitForSelector('#detail:not([hidden])');
    const detail = (await page.textContent('#detail-fields'))!;
    expect(detail).toContain('evil.lab');
    expect(detail).toContain('deny_entry');
    expect(await page.textContent('#detail-ref')).toBe(line.ref);
    await shot(page, 'decision-detail');
    await docShot(page, 'console-decision-detail', true);
    await page.keyboard.press('Escape');
    await page.waitForSelector('#detail', { state: 'hidden' });
    // A filter the line does not match hides it from the stream.
    await page.click('#f-actions button[data-action="allow"]');
    await expect.poll(() => page.locator(`#decisions-body tr[data-ref="${line.ref}"]`).count()).toBe(0);
    await page.click('#f-actions button[data-action="block,ask,would_block"]');
    await expect.poll(() => page.locator(`#decisions-body tr[data-ref="${line.ref}"]`).count()).toBe(1);
  }, 60_000);

  const nextCard = async () => {
    const card = page.locator('#approvals-list li[data-id]').first();
    await card.waitFor({ timeout: 10_000 });
    return { card, id: (await card.getAttribute('data-id'))! };
  };

  it("an approval requested by the agent is allowed once from the page, and the agent's connection passes", async () => {
    await page.goto(`${base}/#approvals`);
    await page.waitForSelector('#page-approvals:not([hidden])');
    const p = tlsAs(agent, 'other.lab');
    const { card, id } = await nextCard();
    await expect.poll(() => card.textContent()).toContain('other.lab:443');
    await shot(page, 'approvals');
    await docShot(page, 'console-approvals', true);
    await card.getByRole('button', { name: 'Allow once' }).click();
    expect(await p).toMatchObject({ ok: true });
    await expect.poll(() => page.getAttribute('#approvals-result', 'data-code')).toBe('approved_once');
    const mine = decisions().filter((x) => x.approval?.request === id);
    expect(mine.map((x) => [x.action, x.reason])).toEqual([
      ['ask', 'ask_entry'],
      ['allow', 'approved_once'],
    ]);
    expect(mine[1]!.approval).toMatchObject({ how: 'once', by: { uid: 0 } });
  }, 60_000);

  it('a persist from the page shows its consent finding, adds the entry, and the profile shows it', async () => {
    const p = tlsAs(agent, 'other.lab');
    const { card, id } = await nextCard();
    await expect.poll(() => card.textContent()).toContain('network.allow:other.lab:443');
    const before = (svcErr.match(/"msg":"reconciled"/g) ?? []).length;
    await card.getByRole('button', { name: 'Allow for good (persist)' }).click();
    expect(await p).toMatchObject({ ok: true });
    expect(
      decisions()
        .filter((x) => x.approval?.request === id)
        .at(-1),
    ).toMatchObject({ action: 'allow', reason: 'approved_persist' });
    for (let i = 0; i < 200 && (svcErr.match(/"msg":"reconciled"/g) ?? []).length <= before; i++)
      await new Promise((r) => setTimeout(r, 50));
    await page.goto(`${base}/#profiles`);
    const prof = page.locator(`[data-profile="approved-${agent.name}"]`);
    await prof.waitFor({ timeout: 5000 });
    expect(await prof.locator('pre').textContent()).toContain('other.lab:443');
    expect(await prof.textContent()).toContain(`agent:${agent.name}`);
    await shot(page, 'profiles');
    await page.goto(`${base}/#subjects`);
    const subj = page.locator(`article[aria-label="subject ${agent.name}"]`);
    await subj.waitFor({ timeout: 5000 });
    await expect.poll(() => subj.textContent()).toContain('other.lab:443');
    expect(await subj.textContent()).toContain(`agent:${agent.name}=approved-${agent.name}`);
    await shot(page, 'subjects');
    // The entry is in force: the next connection passes unasked, as allow_entry.
    expect(await tlsAs(agent, 'other.lab')).toMatchObject({ ok: true });
    expect(
      decisions()
        .filter((x) => x.uid === agent.uid)
        .at(-1),
    ).toMatchObject({ action: 'allow', reason: 'allow_entry', rule: 'other.lab:443' });
  }, 60_000);

  it('the activity page counts the decisions per surface and action, with axes and a legend on every chart', async () => {
    await page.goto(`${base}/#charts`);
    const cell = page.locator('#charts td[data-key="network/block"]');
    await cell.waitFor({ timeout: 5000 });
    const blocks = decisions().filter((d) => d.surface === 'network' && d.action === 'block').length;
    await expect.poll(async () => Number(await cell.textContent())).toBe(blocks);
    const charts = page.locator('#charts section.chart');
    expect(await charts.count()).toBe(4);
    for (let i = 0; i < 4; i++) {
      const c = charts.nth(i);
      expect(await c.locator('svg[role=img]').count()).toBe(1);
      // A count axis (0 at the bottom) and a time axis of HH:MM ticks, both visible text.
      expect(await c.locator('text.ytick').first().textContent()).toBe('0');
      const times = await c.locator('text.xtick').allTextContents();
      expect(times.length).toBeGreaterThanOrEqual(4);
      for (const t of times) expect(t).toMatch(/^\d\d:\d\d$/);
      expect(await c.locator('text.xtitle').textContent()).toBe('time (local)');
      expect(await c.locator('.legend li').allTextContents()).toEqual([
        expect.stringMatching(/^Block \d+$/),
        expect.stringMatching(/^Ask \d+$/),
        expect.stringMatching(/^Would block \d+$/),
      ]);
    }
    // The network chart draws the blocks the log holds.
    expect(await page.locator('#charts section[data-surface="network"] rect.block').count()).toBeGreaterThan(0);
    await shot(page, 'charts');
  }, 30_000);

  // What an operator sees: no raw JSON, text that can be read (WCAG AA) in the light and the dark scheme.
  // Run in the page (a string: this project's TypeScript has no DOM types): every visible text node, its colour
  // over its composited background, the WCAG contrast ratio (4.5:1, 3:1 for large text), and raw JSON in it.
  const VISIBLE_PROBLEMS = String.raw`(() => {
    const parse = (c) => {
      const m = /rgba?\(([^)]+)\)/.exec(c);
      if (!m) return [0, 0, 0, 0];
      const v = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
      return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
    };
    const over = (top, under) => {
      const a = top[3] + under[3] * (1 - top[3]);
      if (a === 0) return [0, 0, 0, 0];
      const ch = (i) => (top[i] * top[3] + under[i] * under[3] * (1 - top[3])) / a;
      return [ch(0), ch(1), ch(2), a];
    };
    const lum = (c) => {
      const f = (v) => { const s = v / 255; return s <= 0.03928 ? s / 12.92 : Math.pow((s + 0.055) / 1.055, 2.4); };
      return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
    };
    const background = (e) => {
      const chain = [];
      for (let x = e; x; x = x.parentElement) chain.unshift(x);
      let bg = [255, 255, 255, 1];
      for (const x of chain) bg = over(parse(getComputedStyle(x).backgroundColor), bg);
      return bg;
    };
    const low = [], json = [];
    let texts = 0;
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const text = (n.textContent || '').trim();
      const e = n.parentElement;
      if (!text || !e || e.closest('noscript, [hidden]') || !e.checkVisibility({ visibilityProperty: true })) continue;
      const r = e.getBoundingClientRect();
      if (r.width === 0 || r.height === 0 || r.right < 0 || r.left < 0) continue;
      if (e.closest('button:disabled')) continue; // WCAG: disabled controls are exempt
      texts++;
      if (/[{[]\s*"[\w-]+"\s*:/.test(text)) json.push(text.slice(0, 80));
      const st = getComputedStyle(e);
      const bg = background(e);
      const fg = over(parse(e.closest('svg') ? st.fill : st.color), bg);
      const hi = Math.max(lum(fg), lum(bg)), lo = Math.min(lum(fg), lum(bg));
      const ratio = (hi + 0.05) / (lo + 0.05);
      const size = parseFloat(st.fontSize);
      const large = size >= 24 || (size >= 18.66 && Number(st.fontWeight) >= 700);
      if (ratio < (large ? 3 : 4.5)) low.push(ratio.toFixed(2) + ' "' + text.slice(0, 40) + '" (' + (e.closest('svg') ? st.fill : st.color) + ' on ' + bg.map(Math.round).join(',') + ')');
    }
    return { low, json, texts };
  })()`;
  const visibleProblems = (p: Page) =>
    p.evaluate(VISIBLE_PROBLEMS) as Promise<{ low: string[]; json: string[]; texts: number }>;

  it('every page shows no raw JSON, passes the contrast check light and dark, and loads without a failed request', async () => {
    const pages = ['charts', 'decisions', 'approvals', 'subjects', 'profiles'];
    for (const scheme of ['light', 'dark'] as const) {
      await page.emulateMedia({ colorScheme: scheme });
      for (const name of pages) {
        await page.goto(`${base}/#${name}`);
        await page.waitForSelector(`#page-${name}:not([hidden])`);
        await page.waitForTimeout(700); // the page's own requests (the event stream never ends)
        const v = await visibleProblems(page);
        expect(v.texts, `${name} ${scheme}: text on the page`).toBeGreaterThan(10);
        expect(v.json, `${name} ${scheme}: raw JSON`).toEqual([]);
        expect(v.low, `${name} ${scheme}: contrast below WCAG AA`).toEqual([]);
        // The header names the service's state and the subjects' health in words.
        expect(await page.textContent('#svc-state')).toBe('Service running');
        expect(await page.textContent('#svc-subjects')).toMatch(/^1 subject active$/);
        // "Live" once: the header's pill, nowhere else.
        // (polled: after the approvals socket blips the pill says so until the console subscribes again).
        await expect.poll(() => page.locator('text=/^Live\\.?$/').count(), { timeout: 5000 }).toBe(1);
        // The approvals page's picture is the one with a request waiting (the test above).
        const keep = name !== 'approvals' && (scheme === 'light' || name === 'charts' || name === 'decisions');
        await docShot(page, `console-${name}${scheme === 'dark' ? '-dark' : ''}`, keep);
      }
    }
    await page.emulateMedia({ colorScheme: 'light' });
    expect(failed).toEqual([]);
  }, 90_000);
});
