/**
 * The Activity page's script, served as /charts.js: tiles, a totals table and, per surface, blocks
 * and asks over the last half hour as stacked bars with a count axis, a time axis and a legend.
 * Hand-written SVG rather than a charting library: the charts are one fixed kind over fixed 10 s
 * buckets (about a hundred lines), SVG text is in the DOM (screen readers, the browser test's axis
 * and contrast checks read it; a canvas library's is not), colours come from the style sheet's
 * light and dark variables, and a root daemon's package gains no dependency to keep patched.
 */
export const CHARTS_JS = String.raw`'use strict';
(function () {
  var NS = 'http://www.w3.org/2000/svg';
  var SURFACES = ['network', 'filesystem', 'commands', 'tools'];
  var SHOWN = [['block', 'Block'], ['ask', 'Ask'], ['would_block', 'Would block']];
  var WINDOW = 180; // buckets: 30 minutes of 10 s
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function hhmm(ms) { var d = new Date(ms); return String(d.getHours()).padStart(2, '0') + ':' + String(d.getMinutes()).padStart(2, '0'); }
  function niceMax(n) {
    if (n <= 4) return 4;
    var p = Math.pow(10, Math.floor(Math.log10(n)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= n) return steps[i] * p;
    return 10 * p;
  }
  function count(b, s, a) { return (b && b.counts[s + '/' + a]) || 0; }

  function plot(surface, series, bucketMs, end) {
    var W = 1000, H = 150, L = 44, R = 8, T = 10, B = 34;
    var pw = W - L - R, ph = H - T - B, bw = pw / WINDOW;
    var peak = 0;
    series.forEach(function (b) { var t = 0; SHOWN.forEach(function (a) { t += count(b, surface, a[0]); }); peak = Math.max(peak, t); });
    var max = niceMax(peak);
    var g = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, 'class': 'plot', role: 'img',
      'aria-label': surface + ': blocks, asks and would-blocks per ' + bucketMs / 1000 + ' s over the last 30 minutes, peak ' + peak });
    [0, 0.5, 1].forEach(function (f) {
      var y = T + ph - f * ph;
      g.appendChild(svg('line', { x1: L, x2: W - R, y1: y, y2: y, 'class': f === 0 ? 'axis' : 'grid' }));
      g.appendChild(svg('text', { x: L - 6, y: y + 4, 'text-anchor': 'end', 'class': 'ytick' }, String(Math.round(max * f))));
    });
    g.appendChild(svg('text', { x: 2, y: T + 4, 'class': 'ytitle', transform: 'rotate(-90 8 ' + (T + ph / 2) + ') translate(' + (-ph / 2 + 6) + ' 0)' }, 'per ' + bucketMs / 1000 + ' s'));
    var start = end - WINDOW * bucketMs;
    for (var t = Math.ceil(start / 300000) * 300000; t <= end; t += 300000) {
      var x = L + ((t - start) / bucketMs) * bw;
      if (x < L + 16 || x > W - R - 16) continue; // a label cut by the edge helps no one
      g.appendChild(svg('line', { x1: x, x2: x, y1: T + ph, y2: T + ph + 4, 'class': 'axis' }));
      g.appendChild(svg('text', { x: x, y: T + ph + 17, 'text-anchor': 'middle', 'class': 'xtick' }, hhmm(t)));
    }
    g.appendChild(svg('text', { x: L + pw / 2, y: H - 2, 'text-anchor': 'middle', 'class': 'xtitle' }, 'time (local)'));
    series.forEach(function (b) {
      var i = Math.round((b.start - start) / bucketMs);
      if (i < 0 || i >= WINDOW) return;
      var y = T + ph;
      SHOWN.forEach(function (a) {
        var n = count(b, surface, a[0]);
        if (!n) return;
        var h = Math.max(1.5, (n / max) * ph);
        y -= h;
        var r = svg('rect', { x: L + i * bw + 0.5, y: y, width: Math.max(1, bw - 1), height: h, 'class': a[0] });
        r.appendChild(svg('title', {}, a[1] + ': ' + n + ' at ' + hhmm(b.start)));
        g.appendChild(r);
      });
    });
    if (peak === 0) g.appendChild(svg('text', { x: L + pw / 2, y: T + ph / 2, 'text-anchor': 'middle', 'class': 'note' }, 'No blocks or asks in the last 30 minutes'));
    return { svg: g, peak: peak };
  }

  function tile(box, label, value, cls) {
    var t = el('div', { 'class': 'tile' });
    t.appendChild(el('div', { 'class': 'k' }, label));
    t.appendChild(el('div', { 'class': 'v ' + (cls || '') }, value));
    box.appendChild(t);
  }

  function render(tiles, box, d, pendingCount) {
    var buckets = d.buckets || [];
    var end = Math.max(Date.now(), buckets.length ? buckets[buckets.length - 1].start + d.bucketMs : 0);
    end = Math.ceil(end / d.bucketMs) * d.bucketMs;
    var totals = {};
    buckets.forEach(function (b) { for (var k in b.counts) totals[k] = (totals[k] || 0) + b.counts[k]; });
    var sum = function (a) { var n = 0; SURFACES.forEach(function (s) { n += totals[s + '/' + a] || 0; }); return n; };
    tiles.textContent = '';
    tile(tiles, 'Blocks', sum('block'), 'block');
    tile(tiles, 'Asks', sum('ask'), 'ask');
    tile(tiles, 'Approvals waiting', pendingCount, pendingCount ? 'ask' : '');
    tile(tiles, 'Would block (shadow)', sum('would_block'), '');
    tile(tiles, 'Allows', sum('allow'), 'allow');
    box.textContent = '';
    SURFACES.forEach(function (s) {
      var card = el('section', { 'class': 'chart', 'aria-label': s + ' chart', 'data-surface': s });
      var p = plot(s, buckets, d.bucketMs, end);
      var head = el('div', { 'class': 'head' });
      head.appendChild(el('h3', null, s.charAt(0).toUpperCase() + s.slice(1)));
      var lg = el('ul', { 'class': 'legend', 'aria-label': 'legend of ' + s });
      SHOWN.forEach(function (a) {
        var li = el('li');
        li.appendChild(el('span', { 'class': 'sw ' + a[0], 'aria-hidden': 'true' }));
        li.appendChild(document.createTextNode(a[1] + ' ' + (totals[s + '/' + a[0]] || 0)));
        lg.appendChild(li);
      });
      head.appendChild(lg);
      head.appendChild(el('span', { 'class': 'mut' }, 'allows ' + (totals[s + '/allow'] || 0) + ' · peak ' + p.peak + ' per ' + d.bucketMs / 1000 + ' s'));
      card.appendChild(head);
      card.appendChild(p.svg);
      box.appendChild(card);
    });
    var t = el('table');
    t.appendChild(el('caption', null, 'Totals over the last ' + Math.round((WINDOW * d.bucketMs) / 60000) + ' minutes'));
    var hr = el('tr');
    hr.appendChild(el('th', { scope: 'col' }, 'Surface'));
    ['allow', 'block', 'ask', 'would_block'].forEach(function (a) { hr.appendChild(el('th', { scope: 'col' }, a.replace('_', ' '))); });
    t.appendChild(el('thead')).appendChild(hr);
    var tb = t.appendChild(el('tbody'));
    SURFACES.forEach(function (s) {
      var tr = el('tr');
      tr.appendChild(el('th', { scope: 'row' }, s));
      ['allow', 'block', 'ask', 'would_block'].forEach(function (a) { tr.appendChild(el('td', { 'data-key': s + '/' + a }, totals[s + '/' + a] || 0)); });
      tb.appendChild(tr);
    });
    var tbox = el('div', { 'class': 'tablebox' });
    tbox.appendChild(t);
    box.appendChild(tbox);
  }
  window.LeashCharts = { render: render };
})();
`;
