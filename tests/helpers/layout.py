"""What a reader sees drawn over what: the layout checks of tests/e2e/test_layout.py, run in the page.

`problems(page, ...)` returns one line per problem on the page as shown now (the selected tab and the
header), empty when it reads cleanly:
- a tab's label missing from the tab bar, cut short, off screen, or behind Gradio's "⋯" menu;
- a text's box (a block label, a caption, any words on the page outside a figure) over an image, a
  plot or an upload drop zone that is not its own (a gallery caption on its own thumbnail, the
  words of a drop zone inside it are its own);
- inside a plotly figure: the legend over a tick label, an axis title, the title or a subplot title,
  or two tick labels of one axis over each other;
- a number in a table cell broken over two lines, and a table whose headers are Gradio's
  placeholders "1 2 3" (a table shown before it has columns);
- in presenter view, the tab's key figure not starting in the first screen.
"""

from __future__ import annotations

_JS = r"""
({titles, keySel}) => {
  const out = [];
  const seen = (el) => el && el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})
    && el.getBoundingClientRect().width > 0.5 && el.getBoundingClientRect().height > 0.5;
  const name = (el) => {
    const idd = el.closest('[id]');
    const cls = el.getAttribute('class');
    return (idd ? '#' + idd.id + ' ' : '') + el.tagName.toLowerCase() + (cls ? '.' + cls.trim().split(/\s+/)[0] : '');
  };
  const words = (s) => s.replace(/\s+/g, ' ').trim().slice(0, 50);
  const px = (q) => { const b = bounds(q); return `${Math.round(b.left)},${Math.round(b.top)} ${Math.round(b.right - b.left)}×${Math.round(b.bottom - b.top)}`; };

  // Shapes are quadrilaterals in page pixels (a rotated tick label is one), cut to what the
  // element's scrolling or clipping ancestors let through; two shapes meet when no axis of either
  // separates them by more than `slack` px (separating axis theorem).
  const clipCache = new Map();
  function clipOf(el) {
    if (!el || el === document.body || el === document.documentElement) return null;
    if (clipCache.has(el)) return clipCache.get(el);
    let clip = clipOf(el.parentElement);
    const s = getComputedStyle(el);
    if (s.overflowX !== 'visible' || s.overflowY !== 'visible') {
      const r = el.getBoundingClientRect();
      clip = clip ? {left: Math.max(clip.left, r.left), top: Math.max(clip.top, r.top),
                     right: Math.min(clip.right, r.right), bottom: Math.min(clip.bottom, r.bottom)} : r;
    }
    clipCache.set(el, clip);
    return clip;
  }
  const rectQuad = (r) => [[r.left, r.top], [r.right, r.top], [r.right, r.bottom], [r.left, r.bottom]];
  const bounds = (q) => ({left: Math.min(...q.map((p) => p[0])), right: Math.max(...q.map((p) => p[0])),
                          top: Math.min(...q.map((p) => p[1])), bottom: Math.max(...q.map((p) => p[1]))});
  function clipped(q, el) {  // the visible part of an axis-aligned shape, or null (rotated: kept whole)
    const c = clipOf(el);
    if (!c) return q;
    const b = bounds(q);
    const r = {left: Math.max(b.left, c.left), top: Math.max(b.top, c.top), right: Math.min(b.right, c.right),
               bottom: Math.min(b.bottom, c.bottom)};
    if (r.right - r.left < 1 || r.bottom - r.top < 1) return null;
    return q[0][1] === q[1][1] ? rectQuad(r) : q;
  }
  function svgQuad(el, inkOnly) {  // an SVG element's own box, turned as drawn
    const b = el.getBBox(), m = el.getScreenCTM();
    if (!m) return null;
    let y0 = b.y, y1 = b.y + b.height;
    if (inkOnly) { const cut = b.height * 0.1; y0 += cut; y1 -= cut; }  // a line box is taller than its letters
    return [[b.x, y0], [b.x + b.width, y0], [b.x + b.width, y1], [b.x, y1]].map(
      ([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
  }
  function meet(p, q, slack = 1) {
    for (const poly of [p, q]) {
      for (let i = 0; i < poly.length; i++) {
        const [x1, y1] = poly[i], [x2, y2] = poly[(i + 1) % poly.length];
        const len = Math.hypot(x2 - x1, y2 - y1);
        if (len < 1e-6) continue;
        const nx = (y1 - y2) / len, ny = (x2 - x1) / len;
        const proj = (poly2) => poly2.map(([x, y]) => x * nx + y * ny);
        const a = proj(p), b = proj(q);
        if (Math.min(Math.max(...a), Math.max(...b)) - Math.max(Math.min(...a), Math.min(...b)) <= slack) return false;
      }
    }
    return true;
  }

  // 1. every tab's label in the tab bar, whole and on screen; no overflow menu
  const bar = [...document.querySelectorAll('.tab-wrapper [role=tablist] button[role=tab]')].filter(seen);
  const shown = new Set(bar.filter((b) => {
    const r = b.getBoundingClientRect();
    return r.left >= 0 && r.right <= innerWidth + 0.5 && b.scrollWidth <= b.clientWidth + 1;
  }).map((b) => b.textContent.trim()));
  for (const t of titles) if (!shown.has(t)) out.push(`tab bar: "${t}" is not shown whole`);
  for (const m of document.querySelectorAll('.tab-wrapper .overflow-menu')) {
    if (seen(m)) out.push('tab bar: tabs hidden behind the "⋯" menu');
  }

  // 2. words over an image, a plot or a drop zone that is not theirs. A plot is what it draws: its
  // plotting areas, legend, title and axis words (not the empty margin around them).
  const obstacles = [];
  for (const el of document.querySelectorAll('img, canvas, video, svg.wb-race-svg, [aria-dropeffect]')) {
    if (!seen(el)) continue;
    const r = el.getBoundingClientRect();
    if (el.tagName === 'IMG' && (r.width < 24 || r.height < 24)) continue;  // an icon
    const q = clipped(rectQuad(r), el.parentElement);
    if (q) obstacles.push({el, q, own: el, what: el.matches('[aria-dropeffect]') ? 'drop zone' : el.tagName === 'IMG' ? 'image' : 'figure'});
  }
  const PLOT_TEXT = '.xtick text, .ytick text, [class*=tick] > text, .gtitle, [class^=g-][class$=title] text, .annotation-text';
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    if (!seen(plot)) continue;
    for (const part of plot.querySelectorAll(`.nsewdrag, g.legend rect.bg, .colorbar, ${PLOT_TEXT}`)) {
      if (!seen(part)) continue;
      const q = svgQuad(part, part.tagName === 'text');
      if (q) obstacles.push({el: part, q, own: plot, what: 'plot'});
    }
  }
  const OWN = 'figure, .thumbnail-item, .gallery-item, .js-plotly-plot, .wb-race-live, [aria-dropeffect]';
  const SKIP = 'script, style, textarea, select, option, svg, .toast-wrap, .toast-body, [data-testid=status-tracker], .wb-race-hover, [role=tooltip]';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  const told = new Set();
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!n.textContent.trim()) continue;
    const host = n.parentElement;
    if (!host || host.closest(SKIP) || !seen(host)) continue;
    range.selectNodeContents(n);
    const item = host.closest(OWN);
    for (const rect of range.getClientRects()) {
      if (rect.width < 1 || rect.height < 1) continue;
      const q = clipped(rectQuad(rect), host);
      if (!q) continue;
      for (const o of obstacles) {
        if (o.own.contains(n) || (item && item.contains(o.own)) || !meet(q, o.q, 2)) continue;
        const key = name(host) + '|' + name(o.own);
        if (told.has(key)) continue;
        told.add(key);
        out.push(`"${words(n.textContent)}" (${name(host)}) is drawn over the ${o.what} ${name(o.own)} at ${px(q)}`);
      }
    }
  }

  // 3. inside each plotly figure: the legend over other words, tick labels over each other
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    if (!seen(plot)) continue;
    const id = name(plot);
    const texts = [...plot.querySelectorAll(PLOT_TEXT)].filter((t) => seen(t) && t.textContent.trim());
    for (const lg of [...plot.querySelectorAll('g.legend rect.bg')].filter(seen)) {
      const lq = svgQuad(lg, false);
      const hit = texts.find((t) => !lg.parentNode.contains(t) && meet(lq, svgQuad(t, true)));
      if (hit) out.push(`${id}: the legend is drawn over "${words(hit.textContent)}"`);
    }
    for (const layer of plot.querySelectorAll('.xaxislayer-above, .yaxislayer-above')) {
      const ticks = [...layer.querySelectorAll('text')].filter((t) => seen(t) && t.textContent.trim());
      const qs = ticks.map((t) => svgQuad(t, true));
      const hit = qs.findIndex((q, i) => i > 0 && meet(qs[i - 1], q, 1));
      if (hit > 0) out.push(`${id}: tick labels "${words(ticks[hit - 1].textContent)}" and "${words(ticks[hit].textContent)}" over each other`);
    }
  }

  // 4. tables: no number broken over two lines, no placeholder headers
  const NUM = /[−+-]?(?:\d[\d,]*\.?\d*|\.\d+)(?:e[−+-]?\d+)?%?/gi;
  for (const table of document.querySelectorAll('table')) {
    if (!seen(table)) continue;
    const heads = [...table.querySelectorAll('thead th')].filter(seen).map((th) => th.textContent.replace(/[⋮↑↓▲▼⇅]/g, '').trim());
    if (heads.length > 1 && heads.every((h, i) => h === String(i + 1))) {
      out.push(`${name(table)}: placeholder headers "${heads.join(' ')}"`);
    }
    const cells = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
    for (let n = cells.nextNode(); n; n = cells.nextNode()) {
      if (!n.parentElement || !seen(n.parentElement)) continue;
      for (const m of n.textContent.matchAll(NUM)) {
        if (m[0].replace(/[^\d]/g, '').length < 2) continue;
        range.setStart(n, m.index);
        range.setEnd(n, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0.5).map((r) => Math.round(r.top)));
        if (tops.size > 1) out.push(`${name(n.parentElement)}: the number "${m[0]}" is broken over ${tops.size} lines`);
      }
    }
  }

  // 5. presenter view: the key figure starts in the first screen
  if (keySel) {
    const key = document.querySelector(keySel);
    if (!seen(key)) out.push(`key figure ${keySel} is not shown`);
    else {
      const top = key.getBoundingClientRect().top + scrollY;
      if (top > innerHeight - 120) out.push(`key figure ${keySel} starts at ${Math.round(top)} px, below the first screen (${innerHeight} px)`);
    }
  }
  return out;
}
"""


def problems(page, titles: list[str], key_selector: str | None = None) -> list[str]:
    """The layout problems of the page as it is shown now (see the module's doc)."""
    return page.evaluate(_JS, {"titles": titles, "keySel": key_selector})
