/**
 * The console's page: one HTML shell, one script, one style sheet, all served by the console itself
 * (the Content-Security-Policy allows nothing else: no inline script or style, no other origin). No
 * build step, no library: the DOM is built with textContent only (nothing from the service is ever
 * parsed as HTML). The token comes in the URL's fragment (#token=…, never sent to a server), is kept
 * in sessionStorage and sent as `Authorization: Bearer`; the live stream is server-sent events read
 * through fetch (an EventSource cannot send that header). Keyboard: every control is a link, a
 * button or a labelled form field; the pages are sections reached from the nav.
 */

export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Leash console</title>
<link rel="stylesheet" href="/console.css">
<script src="/console.js" defer></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header>
<h1>Leash console</h1>
<nav aria-label="Pages"><ul>
<li><a href="#subjects" id="nav-subjects">Subjects</a></li>
<li><a href="#decisions" id="nav-decisions">Decisions</a></li>
<li><a href="#approvals" id="nav-approvals">Approvals <span id="approvals-count" aria-label="pending">0</span></a></li>
<li><a href="#profiles" id="nav-profiles">Profiles</a></li>
<li><a href="#charts" id="nav-charts">Charts</a></li>
</ul></nav>
<p id="stream-status" role="status" aria-live="polite">Connecting…</p>
</header>
<main id="main" tabindex="-1">
<section id="page-login" hidden aria-labelledby="h-login">
<h2 id="h-login">Token</h2>
<p id="login-why">This console needs the token <code>leash console</code> printed.</p>
<form id="login"><label for="token">Token</label> <input id="token" name="token" type="password" autocomplete="off" required> <button type="submit">Open</button></form>
</section>
<section id="page-subjects" hidden aria-labelledby="h-subjects"><h2 id="h-subjects">Subjects</h2><div id="subjects"></div></section>
<section id="page-decisions" hidden aria-labelledby="h-decisions">
<h2 id="h-decisions">Decisions</h2>
<form id="filters" aria-label="Filter decisions">
<label for="f-uid">Subject UID</label> <input id="f-uid" name="uid" inputmode="numeric" size="7">
<label for="f-surface">Surface</label> <select id="f-surface" name="surface"><option value="">any</option><option>network</option><option>filesystem</option><option>commands</option><option>tools</option></select>
<label for="f-action">Action</label> <select id="f-action" name="action"><option value="">any</option><option>allow</option><option>block</option><option>ask</option></select>
<label for="f-reason">Reason</label> <input id="f-reason" name="reason" size="18">
<button type="submit">Apply filters</button>
</form>
<p id="counter" role="status" aria-live="polite"></p>
<div id="detail" role="region" aria-labelledby="h-detail" hidden><h3 id="h-detail">Decision <span id="detail-ref"></span></h3><pre id="detail-json"></pre><a href="#decisions" id="detail-close">Close detail</a></div>
<table id="decisions"><caption>Latest decisions, newest first</caption>
<thead><tr><th scope="col">Time</th><th scope="col">Subject</th><th scope="col">Surface</th><th scope="col">Action</th><th scope="col">Reason</th><th scope="col">What</th><th scope="col">Ref</th></tr></thead>
<tbody id="decisions-body"></tbody></table>
</section>
<section id="page-approvals" hidden aria-labelledby="h-approvals">
<h2 id="h-approvals">Approvals</h2>
<p id="approvals-result" role="status" aria-live="assertive"></p>
<p id="approvals-empty">No request is waiting.</p>
<ul id="approvals-list"></ul>
</section>
<section id="page-profiles" hidden aria-labelledby="h-profiles"><h2 id="h-profiles">Profiles</h2><p>Read-only. A finding is what binding the profile to an agent would have to acknowledge.</p><div id="profiles"></div></section>
<section id="page-charts" hidden aria-labelledby="h-charts"><h2 id="h-charts">Decisions per surface and action</h2><div id="charts"></div></section>
</main>
<noscript>The console needs JavaScript (its own script, from this console only).</noscript>
</body>
</html>
`;

export const PAGE_CSS = `
:root { color-scheme: light dark; --fg: #111; --bg: #fff; --mut: #555; --line: #ccc; --block: #b00020; --allow: #1b6e20; --ask: #8a5a00; }
@media (prefers-color-scheme: dark) { :root { --fg: #eee; --bg: #121212; --mut: #aaa; --line: #444; --block: #ff6b81; --allow: #7bd88f; --ask: #f0c060; } }
body { font: 15px/1.4 system-ui, sans-serif; color: var(--fg); background: var(--bg); margin: 0 1rem 2rem; }
.skip { position: absolute; left: -999px; } .skip:focus { left: 1rem; top: .5rem; background: var(--bg); padding: .25rem; }
header { border-bottom: 1px solid var(--line); }
nav ul { list-style: none; display: flex; flex-wrap: wrap; gap: 1rem; padding: 0; }
nav a[aria-current="page"] { font-weight: bold; text-decoration: underline 3px; }
a, button, input, select { font: inherit; }
:focus-visible { outline: 3px solid #2a6df4; outline-offset: 2px; }
button { padding: .25rem .6rem; margin: .15rem; cursor: pointer; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; border-bottom: 1px solid var(--line); padding: .2rem .4rem; vertical-align: top; }
caption { text-align: left; color: var(--mut); }
.block { color: var(--block); font-weight: bold; } .allow { color: var(--allow); } .ask { color: var(--ask); font-weight: bold; }
.sampled { color: var(--block); font-weight: bold; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: .5rem .8rem; margin: .6rem 0; }
.mut { color: var(--mut); }
pre { white-space: pre-wrap; word-break: break-all; background: rgba(127,127,127,.12); padding: .5rem; }
form label { margin-left: .4rem; }
.entries { font-family: ui-monospace, monospace; font-size: 13px; }
svg { display: block; max-width: 100%; }
`;

export const PAGE_JS = String.raw`'use strict';
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var PAGES = ['subjects', 'decisions', 'approvals', 'profiles', 'charts'];
  var accounts = {};
  var pending = [];
  var streamCtl = null;
  var shown = 0;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function token() { return sessionStorage.getItem('leash-console-token') || ''; }
  function headers(extra) {
    var h = extra || {};
    if (token()) h.Authorization = 'Bearer ' + token();
    return h;
  }
  function api(path, init) {
    init = init || {};
    init.headers = headers(init.headers);
    return fetch(path, init).then(function (r) {
      if (r.status === 401) { showLogin('The console refused the token (401).'); throw new Error('unauthorized'); }
      return r.json().then(function (body) { body.httpStatus = r.status; return body; });
    });
  }
  function showLogin(why) {
    $('login-why').textContent = why;
    show('login');
  }
  function show(name) {
    ['login'].concat(PAGES).forEach(function (p) { $('page-' + p).hidden = p !== name; });
    PAGES.forEach(function (p) {
      if (p === name) $('nav-' + p).setAttribute('aria-current', 'page');
      else $('nav-' + p).removeAttribute('aria-current');
    });
  }
  function route() {
    var h = location.hash.replace(/^#/, '');
    if (h.indexOf('token=') === 0) {
      sessionStorage.setItem('leash-console-token', decodeURIComponent(h.slice(6)));
      history.replaceState(null, '', '#subjects');
      h = 'subjects';
      startStream();
    }
    var parts = h.split('/');
    var name = PAGES.indexOf(parts[0]) >= 0 ? parts[0] : 'subjects';
    show(name);
    if (name === 'subjects') loadSubjects();
    if (name === 'profiles') loadProfiles();
    if (name === 'approvals') loadApprovals();
    if (name === 'charts') loadCharts();
    if (name === 'decisions') {
      if (parts[1]) loadDetail(parts[1]); else $('detail').hidden = true;
    }
  }

  // ---- subjects
  function listCell(v) {
    var td = el('td');
    if (v.value === null || v.value === undefined) { td.textContent = '-'; return td; }
    if (Array.isArray(v.value)) {
      td.appendChild(el('span', null, v.value.length + ' entr' + (v.value.length === 1 ? 'y' : 'ies') + ' '));
      if (v.value.length) td.appendChild(el('div', { 'class': 'entries' }, v.value.join(', ')));
    } else td.appendChild(el('span', null, String(v.value) + ' '));
    td.appendChild(el('div', { 'class': 'mut' }, 'from ' + v.from));
    return td;
  }
  function loadSubjects() {
    api('/api/subjects').then(function (d) {
      var box = $('subjects');
      box.textContent = '';
      if (d.service) box.appendChild(el('p', null, 'Service running: subjects ' + JSON.stringify(d.service.subjects)));
      else box.appendChild(el('p', { 'class': 'mut' }, 'The service metrics socket did not answer.'));
      (d.subjects || []).forEach(function (s) {
        accounts[s.uid] = s.account;
        var c = el('article', { 'class': 'card', 'aria-label': 'subject ' + s.account });
        c.appendChild(el('h3', null, s.account + ' (uid ' + s.uid + ', ' + s.kind + ')'));
        var b = s.bindings.length ? s.bindings.map(function (x) { return x.scope + ' = ' + x.profile + (x.acks.length ? ' (acks: ' + x.acks.join(', ') + ')' : ''); }).join('; ') : 'none';
        c.appendChild(el('p', null, 'Bindings: ' + b));
        if (s.failure) {
          c.appendChild(el('p', { 'class': 'block' }, 'Held fail-closed: ' + s.failure.code + ': ' + s.failure.message));
        } else {
          c.appendChild(el('p', null, 'Layers: ' + s.layers.join(' + ') + '; fail_mode ' + s.fail_mode));
          var t = el('table');
          t.appendChild(el('caption', null, 'Resolved policy of ' + s.account));
          var hr = el('tr');
          ['Surface', 'Enforcer', 'Mode', 'Allow', 'Deny', 'Ask'].forEach(function (h) { hr.appendChild(el('th', { scope: 'col' }, h)); });
          t.appendChild(el('thead')).appendChild(hr);
          var tb = t.appendChild(el('tbody'));
          Object.keys(s.surfaces).forEach(function (sf) {
            var v = s.surfaces[sf];
            var tr = el('tr');
            tr.appendChild(el('th', { scope: 'row' }, sf));
            tr.appendChild(el('td', { 'class': v.enforced ? 'allow' : 'block' }, v.enforced ? 'on' : 'off (not enforced)'));
            tr.appendChild(listCell(v.mode));
            tr.appendChild(listCell(v.allow));
            tr.appendChild(listCell(v.deny));
            tr.appendChild(listCell(v.ask));
            tb.appendChild(tr);
          });
          c.appendChild(t);
        }
        box.appendChild(c);
      });
      if (!(d.subjects || []).length) box.appendChild(el('p', null, 'No subject: no configured user and no leash-* account.'));
    }).catch(function () {});
  }

  // ---- decisions
  function what(d) {
    var s = d.subject || {};
    if (d.surface === 'network') return (s.domain || s.ip || '?') + ':' + s.port + (s.domain && s.ip ? ' (' + s.ip + ')' : '');
    if (d.surface === 'filesystem') return s.path || '';
    if (d.surface === 'commands') return s.binary || s.path || '';
    if (d.surface === 'tools') return s.name || s.method || '';
    return JSON.stringify(s);
  }
  function row(d) {
    var tr = el('tr', { 'data-ref': d.ref });
    tr.appendChild(el('td', null, (d.ts || '').replace('T', ' ').replace('Z', '')));
    tr.appendChild(el('td', null, (accounts[d.uid] ? accounts[d.uid] + ' ' : '') + '(' + d.uid + ')'));
    tr.appendChild(el('td', null, d.surface));
    tr.appendChild(el('td', { 'class': d.action }, d.action));
    tr.appendChild(el('td', null, d.reason));
    tr.appendChild(el('td', null, what(d)));
    var td = el('td');
    td.appendChild(el('a', { href: '#decisions/' + d.ref, 'aria-label': 'detail of decision ' + d.ref }, d.ref));
    tr.appendChild(td);
    return tr;
  }
  function addDecision(d, top) {
    var body = $('decisions-body');
    if (top) body.insertBefore(row(d), body.firstChild); else body.appendChild(row(d));
    while (body.children.length > 500) body.removeChild(body.lastChild);
  }
  function filterQuery() {
    var q = new URLSearchParams();
    ['uid', 'surface', 'action', 'reason'].forEach(function (k) { var v = $('f-' + k).value.trim(); if (v) q.set(k, v); });
    return q.toString();
  }
  function loadDecisions() {
    return api('/api/decisions?' + filterQuery() + '&limit=200').then(function (d) {
      $('decisions-body').textContent = '';
      if (d.source === null) $('counter').textContent = 'The decision log goes to stdout: nothing to follow.';
      (d.lines || []).slice().reverse().forEach(function (x) { addDecision(x, false); });
    });
  }
  function loadDetail(ref) {
    api('/api/decisions/' + encodeURIComponent(ref)).then(function (d) {
      $('detail').hidden = false;
      $('detail-ref').textContent = ref;
      $('detail-json').textContent = d.line ? JSON.stringify(d.line, null, 2) : (d.error ? d.error.code + ': ' + d.error.message : '');
      $('detail-close').focus();
    }).catch(function () {});
  }
  function setCounter(st) {
    var c = $('counter');
    if (st.mode === 'sampled') {
      c.className = 'sampled';
      c.textContent = 'Sampled: this browser fell behind; ' + st.dropped + ' decisions not shown so far (one in every 250 ms is shown).';
    } else {
      c.className = '';
      c.textContent = 'Live' + (st.dropped ? ' again; ' + st.dropped + ' decisions were not shown while sampled.' : '.');
    }
    c.setAttribute('data-mode', st.mode);
    c.setAttribute('data-dropped', String(st.dropped));
  }
  function onEvent(name, data) {
    var v;
    try { v = JSON.parse(data); } catch (e) { return; }
    if (name === 'decision') { shown++; addDecision(v, true); }
    else if (name === 'status') setCounter(v);
    else if (name === 'approval') onApproval(v);
    else if (name === 'approvals-lost') $('stream-status').textContent = 'Live; the approvals socket is not reachable.';
  }
  function startStream() {
    if (!token()) return;
    if (streamCtl) streamCtl.abort();
    var ctl = new AbortController();
    streamCtl = ctl;
    loadDecisions().catch(function () {});
    fetch('/api/events?' + filterQuery(), { headers: headers(), signal: ctl.signal }).then(function (r) {
      if (r.status === 401) { showLogin('The console refused the token (401).'); return; }
      if (!r.ok || !r.body) throw new Error('stream ' + r.status);
      $('stream-status').textContent = 'Live.';
      var reader = r.body.getReader();
      var dec = new TextDecoder();
      var buf = '';
      function pump() {
        return reader.read().then(function (x) {
          if (x.done) throw new Error('stream ended');
          buf += dec.decode(x.value, { stream: true });
          var i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            var block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            var name = 'message', data = '';
            block.split('\n').forEach(function (l) {
              if (l.indexOf('event: ') === 0) name = l.slice(7);
              else if (l.indexOf('data: ') === 0) data += l.slice(6);
            });
            if (data) onEvent(name, data);
          }
          return pump();
        });
      }
      return pump();
    }).catch(function () {
      if (ctl.signal.aborted) return;
      $('stream-status').textContent = 'Disconnected; retrying…';
      setTimeout(function () { if (streamCtl === ctl) startStream(); }, 1000);
    });
  }

  // ---- approvals
  function renderApprovals() {
    var ul = $('approvals-list');
    ul.textContent = '';
    $('approvals-count').textContent = String(pending.length);
    $('approvals-empty').hidden = pending.length > 0;
    pending.forEach(function (r) {
      var li = el('li', { 'class': 'card', 'data-id': r.id });
      var who = (r.account || 'uid ' + r.uid) + ' (uid ' + r.uid + ')';
      li.appendChild(el('h3', { id: 'req-' + r.id }, who + ' asks: ' + r.surface + ' ' + what({ surface: r.surface, subject: r.what })));
      var dl = el('dl');
      function item(k, v) { dl.appendChild(el('dt', null, k)); dl.appendChild(el('dd', null, v)); }
      item('Request', r.id);
      item('Asked by entry', r.rule === null ? '(none)' : r.rule);
      item('Details', JSON.stringify(r.what));
      if (r.cmdline && r.cmdline.length) item('Process', (r.pid || '?') + ': ' + r.cmdline.join(' '));
      item('Blocked unless decided by', r.deadline);
      item('Persist', r.persist === null ? 'not possible for this request'
        : 'writes the allow entry ' + JSON.stringify(r.persist) + ' into ' + (r.account || 'the agent') + "'s profile and records the consent finding " + r.surface + '.allow:' + r.persist + ' as acknowledged on binding agent:' + (r.account || r.uid));
      li.appendChild(dl);
      var g = el('div', { role: 'group', 'aria-labelledby': 'req-' + r.id });
      [['once', 'Allow once'], ['session', 'Allow for the session'], ['persist', 'Allow for good (persist)'], ['deny', 'Deny']].forEach(function (b) {
        var btn = el('button', { type: 'button', 'data-decision': b[0] }, b[1]);
        if (b[0] === 'persist' && r.persist === null) btn.disabled = true;
        btn.addEventListener('click', function () { decide(r.id, b[0]); });
        g.appendChild(btn);
      });
      li.appendChild(g);
      ul.appendChild(li);
    });
  }
  function loadApprovals() {
    api('/api/approvals').then(function (d) { pending = d.requests || []; renderApprovals(); }).catch(function () {});
  }
  function onApproval(ev) {
    if (ev.event === 'request') {
      if (!pending.some(function (p) { return p.id === ev.request.id; })) pending.push(ev.request);
    } else if (ev.event === 'decided') {
      pending = pending.filter(function (p) { return p.id !== ev.id; });
    }
    renderApprovals();
  }
  function decide(id, decision) {
    api('/api/approvals/' + id, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ decision: decision }) })
      .then(function (d) {
        var out = $('approvals-result');
        if (d.ok) {
          out.textContent = id + ': ' + d.outcome.action + ' (' + d.outcome.reason + ')';
          pending = pending.filter(function (p) { return p.id !== id; });
          renderApprovals();
        } else out.textContent = id + ': refused, ' + d.error.code + ': ' + d.error.message;
        out.setAttribute('data-code', d.ok ? d.outcome.reason : d.error.code);
      }).catch(function () {});
  }

  // ---- profiles
  function loadProfiles() {
    api('/api/profiles').then(function (d) {
      var box = $('profiles');
      box.textContent = '';
      if (!d.profiles.length) box.appendChild(el('p', null, 'No profile.'));
      d.profiles.forEach(function (p) {
        var c = el('article', { 'class': 'card', 'aria-label': 'profile ' + p.name, 'data-profile': p.name });
        c.appendChild(el('h3', null, p.name + (p.status === 'ok' ? '' : ' (' + p.status + ')')));
        c.appendChild(el('p', null, 'Bound at: ' + (p.boundAt.length ? p.boundAt.map(function (b) { return b.scope + (b.acks.length ? ' (acks: ' + b.acks.join(', ') + ')' : ''); }).join('; ') : 'nowhere')));
        if (p.findings) {
          c.appendChild(el('h4', null, 'Loosening findings a bind raises (' + p.findings.length + ')'));
          var ul = el('ul');
          p.findings.forEach(function (f) { var li = el('li'); li.appendChild(el('code', null, f.token)); li.appendChild(document.createTextNode(': ' + f.words)); ul.appendChild(li); });
          if (!p.findings.length) ul.appendChild(el('li', null, 'none: it loosens nothing'));
          c.appendChild(ul);
          c.appendChild(el('pre', { 'aria-label': 'text of profile ' + p.name }, p.text));
        } else if (p.message) c.appendChild(el('p', { 'class': 'block' }, p.message));
        box.appendChild(c);
      });
    }).catch(function () {});
  }

  // ---- charts
  var NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) { var e = document.createElementNS(NS, tag); for (var k in attrs) e.setAttribute(k, String(attrs[k])); return e; }
  var COLORS = { allow: '#2e7d32', block: '#c62828', ask: '#ef9f00' };
  function loadCharts() {
    api('/api/charts').then(function (d) {
      var box = $('charts');
      box.textContent = '';
      var surfaces = ['network', 'filesystem', 'commands', 'tools'];
      var actions = ['allow', 'block', 'ask'];
      var totals = el('table');
      totals.appendChild(el('caption', null, 'Totals over the last ' + Math.round(d.buckets.length * d.bucketMs / 60000) + ' minutes kept (' + d.bucketMs / 1000 + ' s buckets)'));
      var hr = el('tr'); hr.appendChild(el('th', { scope: 'col' }, 'Surface'));
      actions.forEach(function (a) { hr.appendChild(el('th', { scope: 'col' }, a)); });
      totals.appendChild(el('thead')).appendChild(hr);
      var tb = totals.appendChild(el('tbody'));
      surfaces.forEach(function (s) {
        var tr = el('tr'); tr.appendChild(el('th', { scope: 'row' }, s));
        actions.forEach(function (a) {
          var n = 0; d.buckets.forEach(function (b) { n += b.counts[s + '/' + a] || 0; });
          tr.appendChild(el('td', { 'data-key': s + '/' + a }, n));
        });
        tb.appendChild(tr);
        var max = 1;
        d.buckets.forEach(function (b) { var t = 0; actions.forEach(function (a) { t += b.counts[s + '/' + a] || 0; }); max = Math.max(max, t); });
        var W = 720, H = 80, bw = Math.max(2, Math.floor(W / Math.max(1, d.buckets.length)));
        var g = svg('svg', { width: W, height: H + 14, role: 'img', 'aria-label': s + ': decisions per ' + d.bucketMs / 1000 + ' s, stacked allow, block, ask' });
        d.buckets.forEach(function (b, i) {
          var y = H;
          actions.forEach(function (a) {
            var n = b.counts[s + '/' + a] || 0; if (!n) return;
            var h = Math.max(1, Math.round(n / max * H)); y -= h;
            var r = svg('rect', { x: i * bw, y: y, width: bw - 1, height: h, fill: COLORS[a] });
            r.appendChild(svg('title', {})).textContent = a + ' ' + n;
            g.appendChild(r);
          });
        });
        var t = svg('text', { x: 0, y: H + 12, fill: 'currentColor', 'font-size': 11 }); t.textContent = s + ' (peak ' + max + ' per bucket)';
        g.appendChild(t);
        box.appendChild(g);
      });
      box.insertBefore(totals, box.firstChild);
    }).catch(function () {});
  }

  document.addEventListener('DOMContentLoaded', function () {
    $('login').addEventListener('submit', function (e) {
      e.preventDefault();
      sessionStorage.setItem('leash-console-token', $('token').value.trim());
      location.hash = '#subjects';
      startStream();
      route();
    });
    $('filters').addEventListener('submit', function (e) { e.preventDefault(); startStream(); });
    window.addEventListener('hashchange', route);
    setInterval(function () { if (!$('page-charts').hidden) loadCharts(); }, 5000);
    var h = location.hash;
    if (h.indexOf('#token=') !== 0) startStream();
    route();
    if (token()) loadApprovals();
  });
})();
`;
