// A small SVG line chart (no library): time on x, numbers on y, one line per series, an optional
// min/max band. Built with createElementNS and textContent only.

const NS = 'http://www.w3.org/2000/svg';
const H = 200;
const PAD = { left: 52, right: 12, top: 10, bottom: 24 };
export const COLORS = ['#2755d8', '#e07b00', '#1b9e5a', '#c2185b', '#6a4fc7', '#00838f', '#8d6e63'];

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

const fmtValue = (v) => String(Number(v.toPrecision(4)));

function fmtTime(t, span) {
  const d = new Date(t);
  return span > 86_400_000 ? d.toLocaleDateString([], { month: 'short', day: 'numeric' }) + ' ' + d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
    : d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

/**
 * A chart in `container`. `render(series)` draws `[{ name, points: [{ t, v }], band?: [{ t, lo, hi }] }]`
 * (t in ms, oldest first). The container's data-points holds the number of points drawn.
 */
export function lineChart(container, { emptyText = 'No data.' } = {}) {
  const svg = svgEl('svg', { role: 'img' });
  const legend = document.createElement('div');
  legend.className = 'legend';
  container.classList.add('chart');
  container.replaceChildren(svg, legend);

  function render(series) {
    const all = series.flatMap((s) => [...s.points.map((p) => [p.t, p.v]), ...(s.band ?? []).flatMap((b) => [[b.t, b.lo], [b.t, b.hi]])]);
    const count = series.reduce((n, s) => n + s.points.length, 0);
    container.dataset.points = String(count);
    svg.replaceChildren();
    legend.replaceChildren();
    // drawn at the container's width, so text keeps its size
    const W = Math.max(320, Math.round(container.clientWidth || 640));
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const x0 = PAD.left;
    const x1 = W - PAD.right;
    const y0 = H - PAD.bottom;
    const y1 = PAD.top;
    svg.append(svgEl('line', { class: 'axis', x1: x0, y1: y0, x2: x1, y2: y0 }), svgEl('line', { class: 'axis', x1: x0, y1: y1, x2: x0, y2: y0 }));
    if (count === 0) {
      svg.append(svgEl('text', { class: 'empty', x: W / 2, y: H / 2, 'text-anchor': 'middle' }, emptyText));
      return;
    }
    let tMin = Math.min(...all.map((p) => p[0]));
    let tMax = Math.max(...all.map((p) => p[0]));
    let vMin = Math.min(...all.map((p) => p[1]));
    let vMax = Math.max(...all.map((p) => p[1]));
    if (tMin === tMax) { tMin -= 1000; tMax += 1000; }
    if (vMin === vMax) { vMin -= Math.abs(vMin) * 0.1 || 1; vMax += Math.abs(vMax) * 0.1 || 1; }
    const sx = (t) => x0 + ((t - tMin) / (tMax - tMin)) * (x1 - x0);
    const sy = (v) => y0 - ((v - vMin) / (vMax - vMin)) * (y0 - y1);
    for (const v of [vMin, (vMin + vMax) / 2, vMax]) {
      svg.append(svgEl('line', { class: 'axis', x1: x0 - 4, y1: sy(v), x2: x0, y2: sy(v) }));
      svg.append(svgEl('text', { x: x0 - 6, y: sy(v) + 4, 'text-anchor': 'end' }, fmtValue(v)));
    }
    svg.append(svgEl('text', { x: x0, y: H - 6, 'text-anchor': 'start' }, fmtTime(tMin, tMax - tMin)));
    svg.append(svgEl('text', { x: x1, y: H - 6, 'text-anchor': 'end' }, fmtTime(tMax, tMax - tMin)));
    series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      if (s.band?.length) {
        const upper = s.band.map((b) => `${sx(b.t)},${sy(b.hi)}`);
        const lower = s.band.map((b) => `${sx(b.t)},${sy(b.lo)}`).reverse();
        svg.append(svgEl('polygon', { points: [...upper, ...lower].join(' '), fill: color, 'fill-opacity': 0.15, stroke: 'none' }));
        // whiskers too: a band of one bucket has no area
        for (const b of s.band) svg.append(svgEl('line', { x1: sx(b.t), y1: sy(b.lo), x2: sx(b.t), y2: sy(b.hi), stroke: color, 'stroke-opacity': 0.45, 'stroke-width': 2 }));
      }
      if (s.points.length === 0) return;
      svg.append(svgEl('polyline', { points: s.points.map((p) => `${sx(p.t)},${sy(p.v)}`).join(' '), fill: 'none', stroke: color, 'stroke-width': 2, 'data-series': s.name, 'data-count': s.points.length }));
      const last = s.points[s.points.length - 1];
      svg.append(svgEl('circle', { cx: sx(last.t), cy: sy(last.v), r: 3, fill: color }));
      const item = document.createElement('span');
      item.style.setProperty('--c', color);
      item.textContent = `${s.name}: ${fmtValue(last.v)}`;
      legend.append(item);
    });
  }

  render([]);
  return { render };
}
