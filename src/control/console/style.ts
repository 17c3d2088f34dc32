/**
 * The console's style sheet, served as /console.css (the CSP allows no inline style). Colours are
 * chosen for WCAG AA (4.5:1 for text) on their own background in both schemes; the browser test
 * measures every visible text node (tests/integration/console-browser.test.ts).
 */
export const PAGE_CSS = `
:root {
  color-scheme: light dark;
  --bg: #f3f5f8; --panel: #ffffff; --panel-2: #f7f8fa; --fg: #1a1d23; --mut: #545c69; --line: #d9dde3;
  --accent: #1d5bbf; --accent-fg: #ffffff; --accent-soft: #e6eefb;
  --block: #b3261e; --block-bg: #fdecea; --ask: #8a4b00; --ask-bg: #fff2df; --allow: #1d6b35; --allow-bg: #e6f4ea;
  --wb: #6a3fb0; --wb-bg: #f1eafb; --focus: #1d5bbf; --shadow: 0 1px 2px rgba(16,24,40,.06), 0 1px 3px rgba(16,24,40,.08);
  --grid: #e6e9ee;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0f1216; --panel: #181c22; --panel-2: #1f242b; --fg: #e7e9ec; --mut: #a7afbb; --line: #2f363f;
    --accent: #8ab4ff; --accent-fg: #0f1216; --accent-soft: #1d2940;
    --block: #ff8a80; --block-bg: #3a1d1c; --ask: #ffc46b; --ask-bg: #3a2c14; --allow: #7fd99b; --allow-bg: #16301f;
    --wb: #c9a8ff; --wb-bg: #2a2140; --focus: #8ab4ff; --shadow: none; --grid: #262c34;
  }
}
* { box-sizing: border-box; }
[hidden] { display: none !important; }
html { background: var(--bg); }
body { font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; border-radius: 4px; }
.skip { position: absolute; left: -999px; } .skip:focus { left: 1rem; top: .5rem; background: var(--panel); padding: .4rem .6rem; z-index: 10; }
header.top { position: sticky; top: 0; z-index: 5; background: var(--panel); border-bottom: 1px solid var(--line); box-shadow: var(--shadow); }
.bar { display: flex; align-items: center; gap: 1.5rem; padding: 0 1.5rem; min-height: 56px; flex-wrap: wrap; }
.brand { display: flex; align-items: center; gap: .5rem; font-weight: 700; font-size: 16px; margin: 0; white-space: nowrap; }
.brand svg { width: 22px; height: 22px; }
nav ul { list-style: none; display: flex; gap: .25rem; margin: 0; padding: 0; }
nav a { display: block; padding: .45rem .8rem; border-radius: 6px; color: var(--mut); font-weight: 600; }
nav a:hover { background: var(--panel-2); color: var(--fg); text-decoration: none; }
nav a[aria-current="page"] { background: var(--accent-soft); color: var(--fg); }
.badge { display: inline-block; min-width: 1.4em; padding: 0 .4em; margin-left: .3em; border-radius: 999px; font-size: 12px; text-align: center; background: var(--panel-2); color: var(--mut); border: 1px solid var(--line); }
.badge.hot { background: var(--ask-bg); color: var(--ask); border-color: var(--ask); }
.status { display: flex; gap: .5rem; align-items: center; margin-left: auto; flex-wrap: wrap; }
.pill { display: inline-flex; align-items: center; gap: .35rem; padding: .15rem .6rem; border-radius: 999px; font-size: 12.5px; font-weight: 600; border: 1px solid var(--line); background: var(--panel-2); color: var(--fg); white-space: nowrap; }
.pill::before { content: ""; width: 8px; height: 8px; border-radius: 50%; background: var(--mut); }
.pill.ok::before { background: var(--allow); } .pill.warn::before { background: var(--ask); } .pill.bad::before { background: var(--block); }
main { max-width: 1280px; margin: 0 auto; padding: 1.25rem 1.5rem 3rem; }
h2 { font-size: 20px; margin: .25rem 0 1rem; }
h3 { font-size: 15px; margin: 0 0 .5rem; }
.lede { color: var(--mut); margin: -.5rem 0 1rem; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 1rem 1.2rem; margin: 0 0 1rem; box-shadow: var(--shadow); }
.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: .75rem; margin-bottom: 1rem; }
.tile { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: .75rem 1rem; box-shadow: var(--shadow); }
.tile .k { color: var(--mut); font-size: 12.5px; font-weight: 600; }
.tile .v { font-size: 24px; font-weight: 700; font-variant-numeric: tabular-nums; }
.tile .v.block { color: var(--block); } .tile .v.ask { color: var(--ask); } .tile .v.allow { color: var(--allow); }
.mut { color: var(--mut); }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: .45rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
thead th { font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: var(--mut); background: var(--panel-2); }
caption { text-align: left; color: var(--mut); padding: 0 0 .5rem; }
.tablebox { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; overflow: hidden; box-shadow: var(--shadow); }
.tablebox caption { padding: .6rem .8rem; }
tbody tr.row { cursor: pointer; }
tbody tr.row:hover, tbody tr.row.sel { background: var(--accent-soft); }
td.when { white-space: nowrap; color: var(--mut); }
td.what { word-break: break-all; }
.act { display: inline-block; padding: 0 .5rem; border-radius: 4px; font-weight: 700; font-size: 12.5px; white-space: nowrap; }
.act.block { color: var(--block); background: var(--block-bg); } .act.ask { color: var(--ask); background: var(--ask-bg); }
.act.allow { color: var(--allow); background: var(--allow-bg); } .act.would_block { color: var(--wb); background: var(--wb-bg); }
.nowrap { white-space: nowrap; }
.filters { display: flex; flex-wrap: wrap; gap: .75rem; align-items: flex-end; margin-bottom: 1rem; }
.filters label { display: flex; flex-direction: column; gap: .2rem; font-size: 12px; font-weight: 600; color: var(--mut); }
.seg { display: inline-flex; border: 1px solid var(--line); border-radius: 8px; overflow: hidden; }
.seg button { border: 0; border-radius: 0; margin: 0; border-right: 1px solid var(--line); }
.seg button:last-child { border-right: 0; }
.seg button[aria-pressed="true"] { background: var(--accent); color: var(--accent-fg); }
input, select, button { font: inherit; color: var(--fg); background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: .35rem .6rem; }
button { cursor: pointer; font-weight: 600; }
button:hover { background: var(--panel-2); }
button.primary { background: var(--accent); color: var(--accent-fg); border-color: var(--accent); }
button.danger { color: var(--block); border-color: var(--block); }
button:disabled { cursor: not-allowed; opacity: .6; }
.counter { margin: 0 0 .75rem; color: var(--mut); }
.counter.sampled { color: var(--ask); font-weight: 600; }
.split { display: grid; grid-template-columns: minmax(0, 1fr); gap: 1rem; }
.split.open { grid-template-columns: minmax(0, 1fr) 360px; }
aside.detail { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: 1rem 1.2rem; box-shadow: var(--shadow); align-self: start; position: sticky; top: 72px; }
dl.kv { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: .3rem 1rem; margin: .5rem 0 1rem; }
dl.kv dt { color: var(--mut); font-weight: 600; }
dl.kv dd { margin: 0; overflow-wrap: anywhere; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 1rem; list-style: none; padding: 0; margin: 0; }
.card.req { border-left: 4px solid var(--ask); }
.card.req .deadline { font-weight: 700; color: var(--ask); }
.actions { display: flex; flex-wrap: wrap; gap: .5rem; margin-top: .75rem; }
.empty { text-align: center; color: var(--mut); padding: 2.5rem 1rem; background: var(--panel); border: 1px dashed var(--line); border-radius: 10px; }
.result { min-height: 1.5em; font-weight: 600; }
.head { display: flex; align-items: baseline; gap: .75rem; flex-wrap: wrap; margin-bottom: .5rem; }
.tag { display: inline-block; padding: 0 .45rem; border-radius: 4px; font-size: 12px; font-weight: 600; background: var(--panel-2); color: var(--mut); border: 1px solid var(--line); white-space: nowrap; }
.tag.ok { color: var(--allow); border-color: var(--allow); background: var(--allow-bg); }
.tag.bad { color: var(--block); border-color: var(--block); background: var(--block-bg); }
.entries { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px; margin-top: .2rem; word-break: break-all; }
pre { white-space: pre-wrap; word-break: break-all; background: var(--panel-2); color: var(--fg); padding: .75rem; border-radius: 6px; border: 1px solid var(--line); font-size: 12.5px; }
.chart { background: var(--panel); border: 1px solid var(--line); border-radius: 10px; padding: .75rem 1rem; margin-bottom: 1rem; box-shadow: var(--shadow); }
.chart .head h3 { margin: 0; }
.legend { display: flex; gap: 1rem; list-style: none; margin: 0; padding: 0; font-size: 12.5px; color: var(--fg); }
.legend li { display: flex; align-items: center; gap: .35rem; }
.legend .sw { width: 12px; height: 12px; border-radius: 3px; display: inline-block; }
.sw.block { background: var(--block); } .sw.ask { background: var(--ask); } .sw.would_block { background: var(--wb); }
svg.plot { display: block; width: 100%; height: auto; }
svg.plot text { fill: var(--mut); font-size: 11px; }
svg.plot text.note { font-size: 13px; }
svg.plot .grid { stroke: var(--grid); } svg.plot .axis { stroke: var(--line); }
svg.plot rect.block { fill: var(--block); } svg.plot rect.ask { fill: var(--ask); } svg.plot rect.would_block { fill: var(--wb); }
footer.keys { max-width: 1280px; margin: 0 auto; padding: 0 1.5rem 2rem; color: var(--mut); font-size: 12.5px; }
kbd { font: 12px ui-monospace, monospace; border: 1px solid var(--line); border-bottom-width: 2px; border-radius: 4px; padding: 0 .3rem; background: var(--panel); color: var(--fg); }
@media (max-width: 900px) { .split.open { grid-template-columns: minmax(0, 1fr); } .status { margin-left: 0; } }
`;

/** The tab icon (served as /favicon.svg and /favicon.ico: a browser asks for one on every page load). */
export const FAVICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="7" fill="#1d5bbf"/><path d="M9 7v18h14" fill="none" stroke="#fff" stroke-width="4" stroke-linecap="round" stroke-linejoin="round"/><circle cx="21" cy="11" r="3" fill="#fff"/></svg>`;
