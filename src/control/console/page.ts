/**
 * The console's page: one HTML shell, two scripts and one style sheet (./shell.ts, ./style.ts, ./charts.ts), all
 * served by the console itself (the Content-Security-Policy allows nothing else: no inline script or
 * style, no other origin), so it works offline. No build step, no library: the DOM is built with
 * textContent only (nothing from the service is ever parsed as HTML). The token comes in the URL's
 * fragment (#token=…, never sent to a server), is kept in sessionStorage and sent as
 * `Authorization: Bearer`; the live stream is server-sent events read through fetch (an
 * EventSource cannot send that header). Keyboard: every control is a link, a button or a labelled
 * field; 1–5 switch pages, j/k move through decisions, Enter opens one, Escape closes it.
 */

export const PAGE_JS = String.raw`'use strict';
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var PAGES = ['charts', 'decisions', 'approvals', 'subjects', 'profiles'];
  var accounts = {};
  var pending = [];
  var streamCtl = null;
  var current = '';

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
    setPill('svc-state', 'warn', 'Signed out');
    $('svc-subjects').hidden = true;
    setPill('stream-status', 'warn', 'Not connected');
    show('login');
  }
  function show(name) {
    current = name;
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
      history.replaceState(null, '', '#charts');
      h = 'charts';
      startStream();
      loadState();
    }
    if (!token()) { showLogin('This console needs the token leash console printed.'); return; }
    var parts = h.split('/');
    var name = PAGES.indexOf(parts[0]) >= 0 ? parts[0] : 'charts';
    show(name);
    if (name === 'subjects') loadSubjects();
    if (name === 'profiles') loadProfiles();
    if (name === 'approvals') loadApprovals();
    if (name === 'charts') loadCharts();
    if (name === 'decisions') {
      if (parts[1]) loadDetail(parts[1]); else closeDetail();
    }
  }
  function plural(n, one, many) { return n + ' ' + (n === 1 ? one : many); }
  function who(uid) { return (accounts[uid] || 'uid') + ' (' + uid + ')'; }
  function clock(ts) { var d = new Date(ts); return isNaN(d) ? String(ts || '') : d.toLocaleTimeString([], { hour12: false }); }

  // ---- the header: service state and subjects' health, read from the metrics through /api/subjects
  function setPill(id, cls, text) { var p = $(id); p.className = 'pill ' + cls; p.textContent = text; p.hidden = false; }
  function loadState() {
    if (!token()) return Promise.resolve(null);
    return api('/api/subjects').then(function (d) {
      var sel = $('f-uid');
      (d.subjects || []).forEach(function (s) {
        accounts[s.uid] = s.account;
        if (!sel.querySelector('option[value="' + s.uid + '"]')) sel.appendChild(el('option', { value: String(s.uid) }, s.account + ' (' + s.uid + ')'));
      });
      if (!d.service) { setPill('svc-state', 'warn', 'Service: metrics not answering'); $('svc-subjects').hidden = true; return d; }
      setPill('svc-state', 'ok', 'Service running');
      var st = d.service.subjects || {};
      var active = st.active || 0, failed = st.failed || 0, orphaned = st.orphaned || 0;
      var text = plural(active, 'subject', 'subjects') + ' active';
      if (failed) text += ', ' + failed + ' held fail-closed';
      if (orphaned) text += ', ' + orphaned + ' orphaned';
      setPill('svc-subjects', failed ? 'bad' : orphaned ? 'warn' : 'ok', text);
      return d;
    }).catch(function () { return null; });
  }

  // ---- subjects
  function listCell(v, key) {
    var td = el('td', { 'class': key === 'mode' ? 'nowrap' : null });
    if (v.value === null || v.value === undefined) td.appendChild(el('span', { 'class': 'mut' }, 'none'));
    else if (Array.isArray(v.value)) {
      td.appendChild(el('span', { 'class': 'nowrap' }, plural(v.value.length, 'entry', 'entries')));
      if (v.value.length) td.appendChild(el('div', { 'class': 'entries' }, v.value.join(', ')));
    } else td.appendChild(el('span', null, String(v.value)));
    var from = el('div', { 'class': 'nowrap' });
    from.appendChild(el('span', { 'class': 'tag' }, v.from));
    td.appendChild(from);
    return td;
  }
  function loadSubjects() {
    loadState().then(function (d) {
      if (!d) return;
      var box = $('subjects');
      box.textContent = '';
      (d.subjects || []).forEach(function (s) {
        var c = el('article', { 'class': 'card', 'aria-label': 'subject ' + s.account });
        var head = el('div', { 'class': 'head' });
        head.appendChild(el('h3', null, s.account));
        head.appendChild(el('span', { 'class': 'mut' }, 'uid ' + s.uid + ' · ' + s.kind));
        head.appendChild(el('span', { 'class': s.failure ? 'tag bad' : 'tag ok' }, s.failure ? 'held fail-closed' : 'enforced'));
        c.appendChild(head);
        var b = s.bindings.length ? s.bindings.map(function (x) { return x.scope + ' = ' + x.profile + (x.acks.length ? ' (acknowledged: ' + x.acks.join(', ') + ')' : ''); }).join('; ') : 'none';
        c.appendChild(el('p', null, 'Bindings: ' + b));
        if (s.failure) {
          c.appendChild(el('p', { 'class': 'tag bad' }, s.failure.code + ': ' + s.failure.message));
        } else {
          c.appendChild(el('p', { 'class': 'mut' }, 'Layers ' + s.layers.join(' + ') + ' · fail_mode ' + s.fail_mode));
          var t = el('table');
          t.appendChild(el('caption', null, 'Resolved policy of ' + s.account + ' (each list tagged with the layer it came from)'));
          var hr = el('tr');
          ['Surface', 'Enforcer', 'Mode', 'Allow', 'Deny', 'Ask'].forEach(function (h) { hr.appendChild(el('th', { scope: 'col' }, h)); });
          t.appendChild(el('thead')).appendChild(hr);
          var tb = t.appendChild(el('tbody'));
          Object.keys(s.surfaces).forEach(function (sf) {
            var v = s.surfaces[sf];
            var tr = el('tr');
            tr.appendChild(el('th', { scope: 'row' }, sf));
            var en = el('td');
            en.appendChild(el('span', { 'class': v.enforced ? 'tag ok' : 'tag bad' }, v.enforced ? 'on' : 'off'));
            tr.appendChild(en);
            tr.appendChild(listCell(v.mode, 'mode'));
            tr.appendChild(listCell(v.allow));
            tr.appendChild(listCell(v.deny));
            tr.appendChild(listCell(v.ask));
            tb.appendChild(tr);
          });
          c.appendChild(t);
        }
        box.appendChild(c);
      });
      if (!(d.subjects || []).length) box.appendChild(el('p', { 'class': 'empty' }, 'No subject: no configured user and no leash-* account.'));
    });
  }

  // ---- decisions
  function what(d) {
    var s = d.subject || {};
    if (typeof s === 'string') return s;
    if (d.reason === 'allow_summary') return plural(s.allowed, 'allow', 'allows') + ' since ' + clock(s.since) + (s.written ? ' (' + s.written + ' shown whole)' : '');
    if (s.dns) return 'dns ' + s.dns + (s.qtype ? ' ' + s.qtype : '');
    if (d.surface === 'network') return (s.domain || s.host || s.ip || '?') + (s.port !== undefined ? ':' + s.port : '') + (s.domain && s.ip ? ' (' + s.ip + ')' : '');
    if (d.surface === 'filesystem') return s.path || '';
    if (d.surface === 'commands') return s.binary || s.path || '';
    if (d.surface === 'tools') return s.name || s.method || '';
    return Object.keys(s).map(function (k) { return k + ' ' + s[k]; }).join(', ');
  }
  function row(d) {
    var tr = el('tr', { 'data-ref': d.ref, 'class': 'row' });
    tr.appendChild(el('td', { 'class': 'when', title: d.ts }, clock(d.ts)));
    var a = el('td');
    a.appendChild(el('span', { 'class': 'act ' + d.action }, d.action === 'would_block' ? 'would block' : d.action));
    tr.appendChild(a);
    tr.appendChild(el('td', { 'class': 'nowrap' }, who(d.uid)));
    tr.appendChild(el('td', null, d.surface));
    tr.appendChild(el('td', { 'class': 'what' }, what(d)));
    tr.appendChild(el('td', { 'class': 'nowrap' }, d.reason));
    var td = el('td');
    td.appendChild(el('a', { href: '#decisions/' + d.ref, 'aria-label': 'detail of decision ' + d.ref }, d.ref));
    tr.appendChild(td);
    tr.addEventListener('click', function (e) { if (e.target.tagName !== 'A') location.hash = '#decisions/' + d.ref; });
    return tr;
  }
  function addDecision(d, top) {
    var body = $('decisions-body');
    if (top) body.insertBefore(row(d), body.firstChild); else body.appendChild(row(d));
    while (body.children.length > 500) body.removeChild(body.lastChild);
    $('decisions-empty').hidden = body.children.length > 0;
  }
  function filterQuery() {
    var q = new URLSearchParams();
    ['uid', 'surface', 'action', 'reason'].forEach(function (k) { var v = $('f-' + k).value.trim(); if (v) q.set(k, v); });
    return q.toString();
  }
  var CAPTIONS = { 'block,ask,would_block': 'Latest blocks and asks', block: 'Latest blocks', ask: 'Latest asks', allow: 'Latest allows', '': 'Latest decisions' };
  function loadDecisions() {
    $('decisions-caption').textContent = (CAPTIONS[$('f-action').value] || 'Latest decisions') + ', newest first';
    return api('/api/decisions?' + filterQuery() + '&limit=200').then(function (d) {
      $('decisions-body').textContent = '';
      if (d.source === null) $('counter').textContent = 'The decision log goes to stdout (the journal): nothing to follow here.';
      (d.lines || []).slice().reverse().forEach(function (x) { addDecision(x, false); });
      $('decisions-empty').hidden = (d.lines || []).length > 0;
    });
  }
  function field(dl, k, v) { dl.appendChild(el('dt', null, k)); dl.appendChild(el('dd', null, v)); }
  function flat(v) {
    if (v === null || v === undefined) return 'none';
    if (typeof v !== 'object') return String(v);
    if (Array.isArray(v)) return v.map(flat).join(', ');
    return Object.keys(v).map(function (k) { return k + ': ' + flat(v[k]); }).join('; ');
  }
  function loadDetail(ref) {
    api('/api/decisions/' + encodeURIComponent(ref)).then(function (d) {
      var dl = $('detail-fields');
      dl.textContent = '';
      $('detail-ref').textContent = ref;
      if (d.line) {
        var l = d.line;
        field(dl, 'Time', new Date(l.ts).toLocaleString([], { hour12: false }));
        field(dl, 'Action', l.action);
        field(dl, 'Subject', who(l.uid));
        field(dl, 'Surface', l.surface);
        field(dl, 'What', what(l));
        field(dl, 'Reason', l.reason);
        field(dl, 'Rule', l.rule === null || l.rule === undefined ? 'none (the mode decided)' : l.rule);
        if (l.subject && typeof l.subject === 'object') Object.keys(l.subject).forEach(function (k) { field(dl, 'subject.' + k, flat(l.subject[k])); });
        if (l.approval) field(dl, 'Approval', flat(l.approval));
        if (l.findings) field(dl, 'Findings', flat(l.findings));
        if (l.severity) field(dl, 'Severity', l.severity);
      } else if (d.error) field(dl, 'Not found', d.error.code + ': ' + d.error.message);
      $('detail').hidden = false;
      $('split').className = 'split open';
      Array.prototype.forEach.call($('decisions-body').children, function (tr) { tr.classList.toggle('sel', tr.getAttribute('data-ref') === ref); });
      $('detail-close').focus();
    }).catch(function () {});
  }
  function closeDetail() { $('detail').hidden = true; $('split').className = 'split'; }
  function setCounter(st) {
    var c = $('counter');
    if (st.mode === 'sampled') {
      c.className = 'counter sampled';
      c.textContent = 'Sampled: this browser fell behind; ' + st.dropped + ' decisions not shown so far (one in every 250 ms is shown).';
    } else {
      c.className = 'counter';
      c.textContent = st.dropped ? st.dropped + ' decisions were not shown while sampled.' : '';
    }
    c.setAttribute('data-mode', st.mode);
    c.setAttribute('data-dropped', String(st.dropped));
  }
  function onEvent(name, data) {
    var v;
    try { v = JSON.parse(data); } catch (e) { return; }
    if (name === 'decision') addDecision(v, true);
    else if (name === 'status') setCounter(v);
    else if (name === 'approval') onApproval(v);
    else if (name === 'approvals-lost') setPill('stream-status', 'warn', 'Live, approvals unreachable');
    else if (name === 'approvals-ok') setPill('stream-status', 'ok', 'Live');
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
      setPill('stream-status', 'ok', 'Live');
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
      setPill('stream-status', 'bad', 'Disconnected, retrying');
      setTimeout(function () { if (streamCtl === ctl) startStream(); }, 1000);
    });
  }

  // ---- approvals
  function left(deadline) {
    var s = Math.round((Date.parse(deadline) - Date.now()) / 1000);
    return s > 0 ? 'in ' + (s >= 90 ? Math.round(s / 60) + ' min' : s + ' s') : 'now';
  }
  function renderApprovals() {
    var ul = $('approvals-list');
    ul.textContent = '';
    var badge = $('approvals-count');
    badge.textContent = String(pending.length);
    badge.className = pending.length ? 'badge hot' : 'badge';
    $('approvals-empty').hidden = pending.length > 0;
    pending.forEach(function (r) {
      var li = el('li', { 'class': 'card req', 'data-id': r.id });
      var head = el('div', { 'class': 'head' });
      head.appendChild(el('span', { 'class': 'act ask' }, r.surface));
      head.appendChild(el('h3', { id: 'req-' + r.id }, what({ surface: r.surface, subject: r.what })));
      li.appendChild(head);
      li.appendChild(el('p', null, (r.account || 'uid ' + r.uid) + ' (uid ' + r.uid + ') asks to reach it.'));
      var dl = el('dl', { 'class': 'kv' });
      field(dl, 'Blocked unless decided', left(r.deadline) + ' (' + clock(r.deadline) + ')');
      field(dl, 'Asked by entry', r.rule === null ? 'none' : r.rule);
      if (r.cmdline && r.cmdline.length) field(dl, 'Process', (r.pid || '?') + ': ' + r.cmdline.join(' '));
      if (r.what && typeof r.what === 'object') Object.keys(r.what).forEach(function (k) { field(dl, k, flat(r.what[k])); });
      field(dl, 'Request', r.id);
      field(dl, 'Allow for good', r.persist === null ? 'not possible for this request'
        : 'adds ' + r.persist + ' to the allow list of ' + (r.account || 'the agent') + "'s profile, acknowledging the consent finding " + r.surface + '.allow:' + r.persist + ' on binding agent:' + (r.account || r.uid));
      li.appendChild(dl);
      var g = el('div', { role: 'group', 'aria-labelledby': 'req-' + r.id, 'class': 'actions' });
      [['once', 'Allow once', 'primary'], ['session', 'Allow for the session', ''], ['persist', 'Allow for good (persist)', ''], ['deny', 'Deny', 'danger']].forEach(function (b) {
        var btn = el('button', { type: 'button', 'data-decision': b[0], 'class': b[2] || null }, b[1]);
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
      if (!d.profiles.length) box.appendChild(el('p', { 'class': 'empty' }, 'No profile yet.'));
      d.profiles.forEach(function (p) {
        var c = el('article', { 'class': 'card', 'aria-label': 'profile ' + p.name, 'data-profile': p.name });
        var head = el('div', { 'class': 'head' });
        head.appendChild(el('h3', null, p.name));
        head.appendChild(el('span', { 'class': p.status === 'ok' ? 'tag ok' : 'tag bad' }, p.status));
        c.appendChild(head);
        c.appendChild(el('p', null, 'Bound at: ' + (p.boundAt.length ? p.boundAt.map(function (b) { return b.scope + (b.acks.length ? ' (acknowledged: ' + b.acks.join(', ') + ')' : ''); }).join('; ') : 'nowhere')));
        if (p.findings) {
          c.appendChild(el('h4', null, 'Loosening findings a bind raises (' + p.findings.length + ')'));
          var ul = el('ul');
          p.findings.forEach(function (f) { var li = el('li'); li.appendChild(el('code', null, f.token)); li.appendChild(document.createTextNode(': ' + f.words)); ul.appendChild(li); });
          if (!p.findings.length) ul.appendChild(el('li', null, 'none: it loosens nothing'));
          c.appendChild(ul);
          c.appendChild(el('pre', { 'aria-label': 'text of profile ' + p.name }, p.text));
        } else if (p.message) c.appendChild(el('p', { 'class': 'tag bad' }, p.message));
        box.appendChild(c);
      });
    }).catch(function () {});
  }

  // ---- activity (./charts.ts draws)
  function loadCharts() {
    api('/api/charts').then(function (d) { window.LeashCharts.render($('tiles'), $('charts'), d, pending.length); }).catch(function () {});
  }

  // ---- keyboard
  function moveRow(step) {
    var rows = Array.prototype.slice.call($('decisions-body').children);
    if (!rows.length) return;
    var i = rows.findIndex(function (r) { return r.classList.contains('sel'); });
    i = Math.max(0, Math.min(rows.length - 1, i < 0 ? 0 : i + step));
    rows.forEach(function (r, j) { r.classList.toggle('sel', j === i); });
    rows[i].querySelector('a').focus();
  }
  function onKey(e) {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    var t = e.target.tagName;
    if (t === 'INPUT' || t === 'SELECT' || t === 'TEXTAREA') return;
    if (e.key === 'Escape' && current === 'decisions' && !$('detail').hidden) { location.hash = '#decisions'; e.preventDefault(); return; }
    var n = Number(e.key);
    if (n >= 1 && n <= PAGES.length) { location.hash = '#' + PAGES[n - 1]; e.preventDefault(); return; }
    if (current !== 'decisions') return;
    if (e.key === 'j') { moveRow(1); e.preventDefault(); }
    if (e.key === 'k') { moveRow(-1); e.preventDefault(); }
  }

  document.addEventListener('DOMContentLoaded', function () {
    $('login').addEventListener('submit', function (e) {
      e.preventDefault();
      sessionStorage.setItem('leash-console-token', $('token').value.trim());
      location.hash = '#charts';
      startStream();
      loadState();
      route();
    });
    $('filters').addEventListener('submit', function (e) { e.preventDefault(); startStream(); });
    Array.prototype.forEach.call($('f-actions').querySelectorAll('button'), function (b) {
      b.addEventListener('click', function () {
        Array.prototype.forEach.call($('f-actions').querySelectorAll('button'), function (x) { x.setAttribute('aria-pressed', String(x === b)); });
        $('f-action').value = b.getAttribute('data-action');
        startStream();
      });
    });
    $('f-uid').addEventListener('change', startStream);
    $('f-surface').addEventListener('change', startStream);
    document.addEventListener('keydown', onKey);
    window.addEventListener('hashchange', route);
    setInterval(function () { if (current === 'charts') loadCharts(); }, 5000);
    setInterval(function () { loadState(); if (current === 'approvals') renderApprovals(); }, 10000);
    if (location.hash.indexOf('#token=') !== 0) { startStream(); loadState(); }
    route();
    if (token()) loadApprovals();
  });
})();
`;
