/** The console's HTML shell (./page.ts explains the page; nothing from the service is in it). */
export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>Leash console</title>
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/console.css">
<script src="/charts.js" defer></script>
<script src="/console.js" defer></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top"><div class="bar">
<p class="brand"><svg viewBox="0 0 32 32" aria-hidden="true"><rect width="32" height="32" rx="7" fill="#1d5bbf"/><path d="M9 7v18h14" fill="none" stroke="#fff" stroke-width="4" stroke-linecap="round" stroke-linejoin="round"/><circle cx="21" cy="11" r="3" fill="#fff"/></svg>Leash</p>
<nav aria-label="Pages"><ul>
<li><a href="#charts" id="nav-charts">Activity</a></li>
<li><a href="#decisions" id="nav-decisions">Decisions</a></li>
<li><a href="#approvals" id="nav-approvals">Approvals<span id="approvals-count" class="badge" aria-label="pending">0</span></a></li>
<li><a href="#subjects" id="nav-subjects">Subjects</a></li>
<li><a href="#profiles" id="nav-profiles">Profiles</a></li>
</ul></nav>
<div class="status" aria-label="Service state">
<span id="svc-state" class="pill">Service: checking…</span>
<span id="svc-subjects" class="pill" hidden></span>
<span id="stream-status" class="pill" role="status" aria-live="polite">Connecting…</span>
</div>
</div></header>
<main id="main" tabindex="-1">
<section id="page-login" hidden aria-labelledby="h-login">
<h2 id="h-login">Sign in</h2>
<div class="card"><p id="login-why">This console needs the token <code>leash console</code> printed.</p>
<form id="login" class="filters"><label for="token">Token <input id="token" name="token" type="password" autocomplete="off" required></label> <button type="submit" class="primary">Open</button></form></div>
</section>
<section id="page-charts" hidden aria-labelledby="h-charts">
<h2 id="h-charts">Activity</h2>
<p class="lede">Blocks and asks per surface over the last half hour (10-second buckets). Allows are counted in the totals.</p>
<div id="tiles" class="tiles"></div>
<div id="charts"></div>
</section>
<section id="page-decisions" hidden aria-labelledby="h-decisions">
<h2 id="h-decisions">Decisions</h2>
<form id="filters" class="filters" aria-label="Filter decisions">
<div role="group" aria-label="Action" class="seg" id="f-actions">
<button type="button" data-action="block,ask,would_block" aria-pressed="true">Blocks &amp; asks</button>
<button type="button" data-action="block" aria-pressed="false">Blocks</button>
<button type="button" data-action="ask" aria-pressed="false">Asks</button>
<button type="button" data-action="allow" aria-pressed="false">Allows</button>
<button type="button" data-action="" aria-pressed="false">All</button>
</div>
<input type="hidden" id="f-action" name="action" value="block,ask,would_block">
<label for="f-uid">Subject <select id="f-uid" name="uid"><option value="">any</option></select></label>
<label for="f-surface">Surface <select id="f-surface" name="surface"><option value="">any</option><option>network</option><option>filesystem</option><option>commands</option><option>tools</option></select></label>
<label for="f-reason">Reason <input id="f-reason" name="reason" size="16" placeholder="e.g. deny_entry"></label>
<button type="submit">Apply</button>
</form>
<p id="counter" class="counter" role="status" aria-live="polite"></p>
<div id="split" class="split">
<div class="tablebox"><table id="decisions"><caption id="decisions-caption">Latest blocks and asks, newest first</caption>
<thead><tr><th scope="col">Time</th><th scope="col">Action</th><th scope="col">Subject</th><th scope="col">Surface</th><th scope="col">What</th><th scope="col">Reason</th><th scope="col">Ref</th></tr></thead>
<tbody id="decisions-body"></tbody></table>
<p id="decisions-empty" class="empty" hidden>No decision matches these filters yet.</p></div>
<aside id="detail" class="detail" role="region" aria-labelledby="h-detail" hidden><h3 id="h-detail">Decision <span id="detail-ref"></span></h3><dl id="detail-fields" class="kv"></dl><a href="#decisions" id="detail-close">Close detail (Esc)</a></aside>
</div>
</section>
<section id="page-approvals" hidden aria-labelledby="h-approvals">
<h2 id="h-approvals">Approvals</h2>
<p class="lede">An agent is waiting on each of these: it is blocked unless decided by its deadline.</p>
<p id="approvals-result" class="result" role="status" aria-live="assertive"></p>
<p id="approvals-empty" class="empty">No request is waiting.</p>
<ul id="approvals-list" class="cards"></ul>
</section>
<section id="page-subjects" hidden aria-labelledby="h-subjects"><h2 id="h-subjects">Subjects</h2><div id="subjects"></div></section>
<section id="page-profiles" hidden aria-labelledby="h-profiles"><h2 id="h-profiles">Profiles</h2><p class="lede">Read-only. A finding is what binding the profile to an agent would have to acknowledge.</p><div id="profiles"></div></section>
</main>
<footer class="keys">Keys: <kbd>1</kbd>–<kbd>5</kbd> pages · <kbd>j</kbd>/<kbd>k</kbd> next/previous decision · <kbd>Enter</kbd> its detail · <kbd>Esc</kbd> close</footer>
<noscript>The console needs JavaScript (its own script, from this console only).</noscript>
</body>
</html>
`;
