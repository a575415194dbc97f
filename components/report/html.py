"""One self-contained HTML file of a visitor's session (the header's Report button, the MCP tool
session_report). No gradio and no backend here: `build_html(report)` takes plain dicts (what
components.report.record keeps) and returns the page.

Self-contained: the page loads nothing. plotly.js is embedded once, gzipped and base64-encoded
(4.8 MB raw would leave no room under the 5 MB a five-tab report may take; 1.9 MB this way) and
unpacked by the browser's own DecompressionStream. Each figure keeps plotly's hover; for printing,
the page draws a PNG of every figure once it has rendered (Plotly.toImage, in the browser: no
image library on the server) and only print CSS shows those. Light and dark follow the reader's
system setting, and a button switches them.
"""
from __future__ import annotations

import base64
import functools
import gzip
import html
from typing import Iterable

E = html.escape


@functools.lru_cache(maxsize=1)
def plotly_bundle() -> str:
    """plotly.js (the version plotly.py ships, so the figures' JSON matches it), gzip + base64."""
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode(), compresslevel=6, mtime=0)).decode()


def _settings_table(rows: Iterable[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th scope='row'>{E(str(k))}</th><td>{E(str(v))}</td></tr>" for k, v in rows)
    return f"<table class='kv'>{body}</table>" if body else ""


def _table(part: dict) -> str:
    cols = part.get("columns") or []
    head = "".join(f"<th>{E(str(c))}</th>" for c in cols)
    rows = "".join("<tr>" + "".join(f"<td>{E(str(v))}</td>" for v in r) + "</tr>" for r in part.get("rows", []))
    cap = f"<caption>{E(part['title'])}</caption>" if part.get("title") else ""
    more = f"<p class='muted'>{E(part['more'])}</p>" if part.get("more") else ""
    return (f"<div class='tablewrap'><table class='data'>{cap}<thead><tr>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table></div>{more}")


def _part(part: dict, fig_ids: list) -> str:
    kind = part.get("kind")
    if kind == "figure":
        n = len(fig_ids)
        fig_ids.append(n)
        title = f"<h4>{E(part['title'])}</h4>" if part.get("title") else ""
        data = "".join(_table(t) for t in part.get("tables", []))
        data = f"<details class='figdata'><summary>the figure's numbers</summary>{data}</details>" if data else ""
        fig_json = part["json"].replace("</", "<\\/")
        return (f"<figure class='fig'>{title}<div class='plot' id='fig{n}' data-fig='{n}'></div>"
                f"<img class='print-fig' id='figimg{n}' alt='{E(part.get('title') or 'figure')}'>"
                f"<script type='application/json' id='figjson{n}'>{fig_json}</script>"
                f"{data}</figure>")
    if kind == "table":
        return _table(part)
    if kind == "html":
        return f"<div class='tabhtml'>{part['html']}</div>"
    if kind == "images":
        items = "".join(f"<figure class='thumb'><img src='data:image/png;base64,{it['png']}' "
                        f"alt='{E(it.get('caption') or part.get('title') or 'image')}'>"
                        f"<figcaption>{E(it.get('caption') or '')}</figcaption></figure>" for it in part["items"])
        title = f"<h4>{E(part['title'])}</h4>" if part.get("title") else ""
        return f"<div class='images'>{title}<div class='thumbs'>{items}</div></div>"
    return ""


def _result(r: dict, fig_ids: list, pinned: bool) -> str:
    when = f"computed {E(r['computed_at'])}" + (f" in {r['seconds']:.2f} s" if r.get("seconds") is not None else "")
    if pinned and r.get("pinned_at"):
        when += f" · pinned {E(r['pinned_at'])}"
    meta = [("model", r.get("model", "")), ("revision", r.get("revision", "")), ("method", r.get("method", ""))]
    link = (f"<p><a class='viewlink' href='{E(r['link'])}'>Open this view in the workbench</a> "
            f"<span class='muted'>(restores its settings{E(r.get('link_note', ''))})</span></p>" if r.get("link") else "")
    note = f"<p class='note'>{E(r['note'])}</p>" if r.get("note") else ""
    parts = "".join(_part(p, fig_ids) for p in r.get("parts", []))
    return (f"<article class='result{' pinned' if pinned else ''}' data-section='{E(r.get('section', ''))}'>"
            f"<h3>{'Pinned: ' if pinned else ''}{E(r.get('heading', ''))}</h3>"
            f"<p class='muted'>{when}</p>{note}"
            f"<div class='meta'>{_settings_table([m for m in meta if m[1]])}"
            f"<details open><summary>data and every setting</summary>{_settings_table(r.get('settings', []))}</details>"
            f"</div>{link}{parts}</article>")


def _tour(steps: list[dict], fig_ids: list) -> str:
    if not steps:
        return ""
    body = "".join(f"<article class='result tourstep'>{s.get('header_html', '')}{s.get('caption_html', '')}"
                   + "".join(_part(p, fig_ids) for p in s.get("parts", [])) + "</article>" for s in steps)
    return f"<section id='tour'><h2>Guided tour ({len(steps)} steps taken)</h2>{body}</section>"


def build_html(report: dict, plotly_b64: str | None = None) -> str:
    """The page. `report`: generated_at, origin (what made it), tabs (each: tab, title, current, pins),
    tour (steps). Every string in it is text except the *_html fields and html parts, which the
    caller has cleaned (components.report.record.clean_html)."""
    fig_ids: list[int] = []
    tabs = report.get("tabs", [])
    sections, toc = [], []
    for t in tabs:
        results = "".join(_result(r, fig_ids, False) for r in t.get("current", []))
        pins = "".join(_result(r, fig_ids, True) for r in t.get("pins", []))
        sections.append(f"<section id='tab-{E(t['tab'])}' class='tab'><h2>{E(t['title'])}</h2>{results}{pins}</section>")
        toc.append(f"<li><a href='#tab-{E(t['tab'])}'>{E(t['title'])}</a> "
                   f"<span class='muted'>({len(t.get('current', []))} result(s), {len(t.get('pins', []))} pinned)</span></li>")
    tour = _tour(report.get("tour", []), fig_ids)
    if tour:
        toc.append("<li><a href='#tour'>Guided tour</a></li>")
    if not sections and not tour:
        body = ("<p class='empty' id='nothing'>Nothing was computed in this session yet: open a tab and run "
                "something (every tab's results, pinned ones too, then appear here).</p>")
    else:
        body = f"<nav><ol>{''.join(toc)}</ol></nav>" + "".join(sections) + tour
    script = ""
    if fig_ids:
        script = (f"<script id='plotly-gz' type='application/octet-stream'>{plotly_b64 or plotly_bundle()}</script>"
                  f"<script>{_JS}</script>")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{E(report.get('title', 'Workbench session report'))}</title><style>{_CSS}</style></head>"
            f"<body data-figures='{len(fig_ids)}'><header><h1>{E(report.get('title', 'Workbench session report'))}</h1>"
            f"<p class='muted'>{E(report.get('origin', ''))} · made {E(report.get('generated_at', ''))} · "
            f"{len(tabs)} tab(s), {sum(len(t.get('current', [])) + len(t.get('pins', [])) for t in tabs)} result(s)</p>"
            f"<button id='theme' type='button' onclick='wbTheme()'>◐ Light / dark</button>"
            f"<p id='progress' class='muted'>{'Drawing figures…' if fig_ids else ''}</p></header>"
            f"<main>{body}</main>{script}"
            f"<script>function wbTheme(){{document.documentElement.classList.toggle('dark');"
            f"document.documentElement.classList.toggle('light');if(window.wbRecolour)wbRecolour();}}"
            f"{'' if fig_ids else chr(10) + 'document.body.dataset.ready=1;document.body.dataset.printReady=1;'}</script>"
            f"</body></html>")


_CSS = """
:root{--bg:#fff;--fg:#1f2937;--muted:#6b7280;--line:#d1d5db;--card:#f9fafb;--accent:#4f46e5;
--color-accent:var(--accent);--body-text-color:var(--fg);--body-text-color-subdued:var(--muted);
--border-color-primary:var(--line);--background-fill-primary:var(--bg);--background-fill-secondary:var(--card);
--block-background-fill:var(--bg);--neutral-200:#e5e7eb;color-scheme:light}
@media (prefers-color-scheme: dark){:root:not(.light){--bg:#111827;--fg:#e5e7eb;--muted:#9ca3af;--line:#374151;
--card:#1f2937;--accent:#818cf8;--neutral-200:#374151;color-scheme:dark}}
:root.dark{--bg:#111827;--fg:#e5e7eb;--muted:#9ca3af;--line:#374151;--card:#1f2937;--accent:#818cf8;
--neutral-200:#374151;color-scheme:dark}
body{margin:0 auto;max-width:1200px;padding:16px 24px;background:var(--bg);color:var(--fg);
font:15px/1.5 system-ui,-apple-system,'Segoe UI',sans-serif}
header{border-bottom:2px solid var(--accent);margin-bottom:12px;position:relative}
header h1{margin:0 0 4px 0;font-size:1.6rem}
#theme{position:absolute;right:0;top:4px;background:var(--card);color:var(--fg);border:1px solid var(--line);
border-radius:6px;padding:4px 10px;cursor:pointer}
h2{border-bottom:1px solid var(--line);padding-bottom:4px;margin-top:28px}
h3{margin:0 0 4px 0}h4{margin:10px 0 4px 0;font-size:1rem}
a{color:var(--accent)}.muted{color:var(--muted);font-size:.9rem}
.result{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 16px;margin:12px 0}
.result.pinned{border-left:4px solid var(--accent)}
.note{font-style:italic}
.meta{display:flex;flex-wrap:wrap;gap:8px 24px;align-items:flex-start}
table{border-collapse:collapse;font-size:.88rem}
table.kv th{text-align:left;font-weight:600;padding:2px 10px 2px 0;vertical-align:top;white-space:nowrap}
table.kv td{padding:2px 0;word-break:break-word;max-width:60ch}
.tablewrap{overflow-x:auto;max-width:100%;margin:8px 0}
table.data th,table.data td{border:1px solid var(--line);padding:3px 8px;text-align:left}
table.data caption{text-align:left;font-weight:600;padding:4px 0}
.fig{margin:10px 0;break-inside:avoid}.plot{width:100%;min-height:360px}
.print-fig{display:none;max-width:100%}
.thumbs{display:flex;flex-wrap:wrap;gap:8px}.thumb{margin:0;text-align:center;font-size:.8rem}
.thumb img{max-width:180px;max-height:180px;image-rendering:pixelated;border:1px solid var(--line)}
.tabhtml{margin:8px 0;overflow-x:auto}.tabhtml img{max-width:100%}
.wb-explain{border-left:3px solid var(--accent);padding:6px 12px;margin:4px 0 10px 0}
.wb-muted{color:var(--muted)}
.empty{font-size:1.1rem;padding:24px;border:1px dashed var(--line);border-radius:8px}
@media print{#theme,#progress,.plot,nav{display:none!important}.print-fig{display:block}
body{max-width:none;padding:0;background:#fff;color:#000;font-size:11pt}
:root,:root.dark{--bg:#fff;--fg:#000;--muted:#444;--line:#bbb;--card:#fff;--accent:#333;color-scheme:light}
.result{break-inside:auto;border-color:#bbb}details>*{display:block}details summary{display:none}
details:not([open])>*:not(summary){display:block}a.viewlink::after{content:" (" attr(href) ")";font-size:8pt;word-break:break-all}}
"""

# Unpack plotly (run as an inline script, as a page normally loads it), draw every figure, then make
# the print images off-screen; the page says how far it got and sets data-ready (figures drawn) and
# data-print-ready (print images made) on <body>.
_JS = r"""
(async function(){
  const say=(t)=>{const p=document.getElementById('progress');if(p)p.textContent=t;};
  say('Unpacking the plotting library…');
  const b=atob(document.getElementById('plotly-gz').textContent.trim());
  const bytes=new Uint8Array(b.length);for(let i=0;i<b.length;i++)bytes[i]=b.charCodeAt(i);
  const src=await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))).text();
  const tag=document.createElement('script');tag.textContent=src;document.head.appendChild(tag);
  const dark=()=>document.documentElement.classList.contains('dark')||(!document.documentElement.classList.contains('light')
    &&window.matchMedia&&window.matchMedia('(prefers-color-scheme: dark)').matches);
  const colours=(d)=>({paper_bgcolor:d?'#1f2937':'#f9fafb',plot_bgcolor:d?'#111827':'#ffffff',
    font:{color:d?'#e5e7eb':'#1f2937'}});
  const divs=[...document.querySelectorAll('.plot[data-fig]')];
  const figs={};
  let done=0;
  for(const div of divs){  // first every figure, interactive
    const n=div.dataset.fig;
    try{
      const fig=JSON.parse(document.getElementById('figjson'+n).textContent);
      const layout=Object.assign({},fig.layout||{});delete layout.width;layout.autosize=true;
      figs[n]={data:fig.data||[],layout:layout};
      const c=colours(dark());
      await Plotly.newPlot(div,fig.data||[],Object.assign({},layout,c,{font:Object.assign({},layout.font||{},c.font)}),
                           {responsive:true,displaylogo:false});
      div.dataset.rendered='1';
    }catch(e){div.dataset.error=String(e);div.textContent='This figure could not be drawn: '+e;}
    done++;say('Drawing figures… '+done+' of '+divs.length);
  }
  window.wbRecolour=()=>{for(const div of divs){if(div.dataset.rendered){const c=colours(dark());
    Plotly.relayout(div,{paper_bgcolor:c.paper_bgcolor,plot_bgcolor:c.plot_bgcolor,'font.color':c.font.color});}}};
  if(window.matchMedia)window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change',window.wbRecolour);
  document.body.dataset.ready='1';
  say(divs.length+' interactive figures: hover for values, drag to zoom. Preparing them for printing…');
  done=0;
  for(const div of divs){  // then a light picture of each for print (drawn off-screen)
    const n=div.dataset.fig;
    if(!figs[n])continue;
    try{
      const w=Math.max(div.clientWidth||800,600),h=Math.max(div.clientHeight||400,300);
      const c=colours(false);
      const layout=Object.assign({},figs[n].layout,c,{font:Object.assign({},figs[n].layout.font||{},c.font)});
      document.getElementById('figimg'+n).src=await Plotly.toImage({data:figs[n].data,layout:layout},
                                                                     {format:'png',width:w,height:h});
    }catch(e){div.dataset.printError=String(e);}
    done++;
  }
  say(divs.length+' interactive figures: hover for values, drag to zoom; printing shows them as images.');
  document.body.dataset.printReady='1';
})();
"""
