//! Dependency-free SVG figures for dpcotrain reports.
//!
//! Three things can be drawn, each as a standalone SVG string:
//! * [`LineChart`]: named series (e.g. test RMSE per round per party), a legend and labelled reference lines;
//! * [`ExchangePanel`]: a 1-D GP picture with private/queried points, posterior mean, shaded 95% band, truth;
//! * [`Figure`]: several panels side by side under one overall title.
//!
//! Non-finite values are skipped (a line breaks at a NaN), empty or flat data still gives a valid picture, and all
//! text is XML-escaped. Axis ticks come from [`ticks`] (1-2-5 steps) and the axes span the outermost ticks.

use std::fmt::Write;

/// Okabe–Ito colour-blind-safe palette; series colours are picked by index (modulo its length).
pub(crate) const PALETTE: [&str; 8] =
    ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442"];

/// Palette colour for index `i` (wraps around).
pub(crate) fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Point marker shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// Filled circle.
    Circle,
    /// Open square.
    Square,
    /// Diagonal cross.
    Cross,
}

/// How a series is drawn: palette index, dashed or solid line, optional markers at the points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    pub color: usize,
    pub dashed: bool,
    pub marker: Option<Marker>,
    /// Markers only, no connecting line (a scatter plot).
    pub no_line: bool,
}

/// A named polyline; non-finite points break the line.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub style: Style,
    /// Error-bar half-widths, one per point (a bar from y − e to y + e); empty, or a non-finite
    /// or non-positive entry, draws none.
    pub errors: Vec<f64>,
}

impl Series {
    /// Solid series without markers in palette colour `color`.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>, color: usize) -> Self {
        Series { name: name.into(), points, style: Style { color, ..Style::default() }, errors: vec![] }
    }
    /// Draw an error bar of half-width `errors[i]` at point `i` (see [`Series::errors`]).
    pub fn with_errors(mut self, errors: Vec<f64>) -> Self {
        self.errors = errors;
        self
    }
    /// The points' (y − e, y + e) ends of their drawable error bars.
    fn bar_ends(&self) -> impl Iterator<Item = (f64, f64, f64)> + '_ {
        self.points
            .iter()
            .zip(&self.errors)
            .filter(|((x, y), e)| x.is_finite() && y.is_finite() && e.is_finite() && **e > 0.0)
            .map(|(&(x, y), &e)| (x, y - e, y + e))
    }
    /// Draw the line dashed.
    pub fn dashed(mut self) -> Self {
        self.style.dashed = true;
        self
    }
    /// Draw `marker` at every finite point.
    pub fn markers(mut self, marker: Marker) -> Self {
        self.style.marker = Some(marker);
        self
    }
    /// Draw `marker` at every finite point and no line (a scatter plot).
    pub fn scatter(mut self, marker: Marker) -> Self {
        self.style.marker = Some(marker);
        self.style.no_line = true;
        self
    }
}

/// A horizontal reference line at `y` with a label drawn at its right end (e.g. "oracle 0.52").
#[derive(Clone, Debug)]
pub struct RefLine {
    pub y: f64,
    pub label: String,
}

/// A line chart with title, axis labels, series, legend and reference lines. Size in pixels.
#[derive(Clone, Debug)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub ref_lines: Vec<RefLine>,
    pub width: f64,
    pub height: f64,
    /// The x axis counts something (rounds): ticks at whole numbers only, at least two.
    pub integer_x: bool,
}

impl LineChart {
    /// Empty 640×400 chart.
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        let (title, x_label, y_label) = (title.into(), x_label.into(), y_label.into());
        LineChart {
            title,
            x_label,
            y_label,
            series: vec![],
            ref_lines: vec![],
            width: 640.0,
            height: 400.0,
            integer_x: false,
        }
    }
    /// Ticks on the x axis at whole numbers only (rounds, counts): never "0.5 rounds".
    pub fn integer_x(mut self) -> Self {
        self.integer_x = true;
        self
    }
    /// Add a series.
    pub fn with_series(mut self, s: Series) -> Self {
        self.series.push(s);
        self
    }
    /// Add a horizontal reference line.
    pub fn with_ref_line(mut self, y: f64, label: impl Into<String>) -> Self {
        self.ref_lines.push(RefLine { y, label: label.into() });
        self
    }
    /// Standalone SVG document.
    pub fn to_svg(&self) -> String {
        standalone(&Panel::Line(self.clone()))
    }
    fn frame(&self) -> Frame {
        let pts = self.series.iter().flat_map(|s| s.points.iter().copied());
        let bars = self.series.iter().flat_map(|s| s.bar_ends().flat_map(|(_, lo, hi)| [lo, hi]));
        let ys: Vec<f64> = pts.clone().map(|p| p.1).chain(self.ref_lines.iter().map(|r| r.y)).chain(bars).collect();
        let legend_w = legend_size(&self.legend_items()).0;
        Frame::new(self.width, self.height, pts.map(|p| p.0).collect(), ys, legend_w, self.integer_x)
    }
    fn legend_items(&self) -> Vec<(Swatch, &str)> {
        self.series
            .iter()
            .map(|s| {
                let sw = match (s.style.no_line, s.style.marker) {
                    (true, Some(m)) => Swatch::Point(m, color(s.style.color)),
                    _ => Swatch::Line { color: color(s.style.color), dashed: s.style.dashed, marker: s.style.marker },
                };
                (sw, s.name.as_str())
            })
            .collect()
    }
    fn render(&self, out: &mut String) {
        let items = self.legend_items();
        let f = self.frame();
        f.axes(out, &self.title, &self.x_label, &self.y_label);
        let (mut occupied, mut lines) = (vec![], String::new());
        for s in &self.series {
            let c = color(s.style.color);
            if !s.style.no_line {
                occupied.extend(path(&mut lines, &f, s.points.iter().copied(), c, s.style.dashed));
            }
            if let Some(m) = s.style.marker {
                finite(&s.points).for_each(|&(x, y)| marker(&mut lines, m, f.px(x), f.py(y), c));
            }
            for (x, lo, hi) in s.bar_ends() {
                let (px, attrs) = (f.px(x), format!(r#"stroke="{c}" stroke-width="1.5""#));
                line(&mut lines, (px, f.py(lo)), (px, f.py(hi)), &attrs);
                for y in [lo, hi] {
                    line(&mut lines, (px - 5.0, f.py(y)), (px + 5.0, f.py(y)), &attrs);
                }
                occupied.extend([(px, f.py(lo)), (px, f.py(hi))]);
            }
        }
        // Reference lines go under the series; each label sits at whichever end/side of its line is least crowded.
        for r in self.ref_lines.iter().filter(|r| r.y.is_finite()) {
            let (y, x0, x1) = (f.py(r.y), f.left, f.left + f.w);
            line(out, (x0, y), (x1, y), r##"stroke="#555" stroke-dasharray="2 3""##);
            let (w, h) = (6.5 * r.label.chars().count() as f64, 12.0);
            let cands = [(x1 - 4.0 - w, y - 15.0), (x0 + 4.0, y - 15.0), (x1 - 4.0 - w, y + 3.0), (x0 + 4.0, y + 3.0)];
            let (lx, ly) = least_covered(&cands, w, h, &occupied);
            text(out, lx, ly + 10.0, "start", r##"fill="#555""##, &r.label);
            occupied.extend((0..=4).map(|k| (lx + w * k as f64 / 4.0, ly + 6.0)));
        }
        out.push_str(&lines);
        legend(out, &f, &items);
    }
}

/// A 1-D Gaussian-process picture (cf. Thomas 2017, Fig 4.3). The posterior `mean`, `lower` and `upper` (95% band)
/// and the optional `truth` are evaluated on `grid`; missing or non-finite entries are skipped.
#[derive(Clone, Debug, Default)]
pub struct ExchangePanel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Private training points (filled circles).
    pub train: Vec<(f64, f64)>,
    /// Points queried from / sent to the other party (open squares).
    pub queried: Vec<(f64, f64)>,
    pub grid: Vec<f64>,
    pub mean: Vec<f64>,
    pub lower: Vec<f64>,
    pub upper: Vec<f64>,
    /// True function on `grid` (dashed), if known.
    pub truth: Option<Vec<f64>>,
    pub width: f64,
    pub height: f64,
}

impl ExchangePanel {
    /// Empty 640×400 panel with axis labels "x" and "y"; fill the public fields (struct update syntax works well).
    pub fn new(title: impl Into<String>) -> Self {
        let (x_label, y_label) = ("x".into(), "y".into());
        ExchangePanel { title: title.into(), x_label, y_label, width: 640.0, height: 400.0, ..Default::default() }
    }
    /// Standalone SVG document.
    #[allow(dead_code)] // a standalone panel (the reports draw panels inside a Figure)
    pub fn to_svg(&self) -> String {
        standalone(&Panel::Exchange(self.clone()))
    }
    fn curve<'a>(&'a self, v: &'a [f64]) -> impl Iterator<Item = (f64, f64)> + Clone + 'a {
        self.grid.iter().copied().zip(v.iter().copied())
    }
    /// Runs of grid points where x, lower and upper are all finite (one band polygon each).
    fn band_runs(&self) -> Vec<Vec<(f64, f64, f64)>> {
        let band: Vec<_> =
            self.grid.iter().zip(self.lower.iter().zip(&self.upper)).map(|(&x, (&l, &u))| (x, l, u)).collect();
        band.split(|&(x, l, u)| !(x.is_finite() && l.is_finite() && u.is_finite()))
            .filter(|r| r.len() > 1)
            .map(<[_]>::to_vec)
            .collect()
    }
    /// The legend: one entry per element the panel draws.
    fn legend_items(&self, band: bool) -> Vec<(Swatch, &'static str)> {
        let mut items = vec![];
        if band {
            items.push((Swatch::Band(color(0)), "95% band"));
        }
        if self.truth.is_some() {
            items.push((Swatch::Line { color: color(6), dashed: true, marker: None }, "true f"));
        }
        if !self.mean.is_empty() {
            items.push((Swatch::Line { color: color(0), dashed: false, marker: None }, "posterior mean"));
        }
        if !self.train.is_empty() {
            items.push((Swatch::Point(Marker::Circle, color(6)), "private data"));
        }
        if !self.queried.is_empty() {
            items.push((Swatch::Point(Marker::Square, color(3)), "queried"));
        }
        items
    }
    fn frame(&self, legend_w: f64) -> Frame {
        let truth = self.truth.as_deref().unwrap_or(&[]);
        let curves = [&self.mean[..], &self.lower, &self.upper, truth].into_iter().flat_map(|v| self.curve(v));
        let pts: Vec<(f64, f64)> =
            curves.chain(self.train.iter().copied()).chain(self.queried.iter().copied()).collect();
        let ys: Vec<f64> = pts.iter().map(|p| p.1).filter(|y| y.is_finite()).collect();
        Frame::new(self.width, self.height, pts.iter().map(|p| p.0).collect(), ys, legend_w, false)
    }
    fn render(&self, out: &mut String) {
        let runs = self.band_runs();
        let items = self.legend_items(!runs.is_empty());
        let f = self.frame(legend_size(&items).0);
        f.axes(out, &self.title, &self.x_label, &self.y_label);
        for run in &runs {
            let mut d = String::new();
            for (i, &(x, _, u)) in run.iter().enumerate() {
                let _ = write!(d, "{}{} {} ", if i == 0 { "M" } else { "L" }, n(f.px(x)), n(f.py(u)));
            }
            run.iter().rev().for_each(|&(x, l, _)| _ = write!(d, "L{} {} ", n(f.px(x)), n(f.py(l))));
            let _ = writeln!(out, r#"<path d="{}Z" fill="{}" fill-opacity="0.2" stroke="none"/>"#, d, color(0));
        }
        if let Some(t) = &self.truth {
            path(out, &f, self.curve(t), color(6), true);
        }
        if !self.mean.is_empty() {
            path(out, &f, self.curve(&self.mean), color(0), false);
        }
        for (pts, m, c) in [(&self.train, Marker::Circle, color(6)), (&self.queried, Marker::Square, color(3))] {
            finite(pts).for_each(|&(x, y)| marker(out, m, f.px(x), f.py(y), c));
        }
        legend(out, &f, &items);
    }
}

/// One panel of a [`Figure`].
#[derive(Clone, Debug)]
pub enum Panel {
    Line(LineChart),
    Exchange(ExchangePanel),
}

impl From<LineChart> for Panel {
    fn from(c: LineChart) -> Self {
        Panel::Line(c)
    }
}

impl From<ExchangePanel> for Panel {
    fn from(p: ExchangePanel) -> Self {
        Panel::Exchange(p)
    }
}

impl Panel {
    /// (width, height) in pixels.
    pub fn size(&self) -> (f64, f64) {
        match self {
            Panel::Line(c) => (c.width, c.height),
            Panel::Exchange(p) => (p.width, p.height),
        }
    }
    fn render(&self, out: &mut String) {
        let (w, h) = self.size();
        rect(out, (0.0, 0.0), (w, h), r#"fill="white""#);
        match self {
            Panel::Line(c) => c.render(out),
            Panel::Exchange(p) => p.render(out),
        }
    }
}

/// Panels laid out left to right, each with its own axes, under an overall title (a 32 px band if non-empty).
#[derive(Clone, Debug)]
pub struct Figure {
    pub title: String,
    pub panels: Vec<Panel>,
}

impl Figure {
    /// Empty figure.
    pub fn new(title: impl Into<String>) -> Self {
        Figure { title: title.into(), panels: vec![] }
    }
    /// Append a panel on the right.
    pub fn with_panel(mut self, p: impl Into<Panel>) -> Self {
        self.panels.push(p.into());
        self
    }
    /// Sum of panel widths.
    pub fn width(&self) -> f64 {
        self.panels.iter().map(|p| p.size().0).sum()
    }
    /// Title band plus the tallest panel.
    pub fn height(&self) -> f64 {
        self.title_h() + self.panels.iter().map(|p| p.size().1).fold(0.0, f64::max)
    }
    fn title_h(&self) -> f64 {
        if self.title.is_empty() { 0.0 } else { 32.0 }
    }
    /// Standalone SVG document.
    pub fn to_svg(&self) -> String {
        let (w, h) = (self.width().max(1.0), self.height().max(1.0));
        let mut out = header(w, h);
        rect(&mut out, (0.0, 0.0), (w, h), r#"fill="white""#);
        text(&mut out, w / 2.0, 22.0, "middle", r#"font-size="17" font-weight="bold""#, &self.title);
        let mut x = 0.0;
        for p in &self.panels {
            let _ = writeln!(out, r#"<g transform="translate({},{})">"#, n(x), n(self.title_h()));
            p.render(&mut out);
            out.push_str("</g>\n");
            x += p.size().0;
        }
        out + "</svg>\n"
    }
}

/// Nice axis ticks: equally spaced multiples of a 1-2-5 step (1, 2 or 5 × 10^k) whose first tick is ≤ `lo` and
/// last ≥ `hi`, with the smallest such step giving at most `max_ticks` ticks (raised to 3, the fewest that cover any
/// range straddling 0); at least 2 ticks for finite input. Reversed ends are swapped; equal ends are padded (by 10%
/// of |lo|, or 1 around 0); a non-finite end gives an empty vector.
pub fn ticks(lo: f64, hi: f64, max_ticks: usize) -> Vec<f64> {
    if !lo.is_finite() || !hi.is_finite() {
        return vec![];
    }
    let (mut lo, mut hi) = (lo.min(hi), lo.max(hi));
    if hi - lo <= 1e-12 * lo.abs().max(hi.abs()) || hi == lo {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo, hi) = (lo - pad, hi + pad);
    }
    let max_ticks = max_ticks.max(3);
    let mut e = ((hi - lo) / (max_ticks - 1) as f64).log10().floor() as i32;
    loop {
        for m in [1.0, 2.0, 5.0] {
            // k·m·10^e, computed so that e.g. 0.3 prints as 0.3 rather than 0.30000000000000004.
            let val = |k: f64| if e < 0 { k * m / 10f64.powi(-e) } else { k * m * 10f64.powi(e) };
            let step = val(1.0);
            let (a, b) = ((lo / step + 1e-9).floor(), (hi / step - 1e-9).ceil());
            if b - a < max_ticks as f64 {
                return (0..=(b - a) as i64).map(|i| val(a + i as f64)).collect();
            }
        }
        e += 1;
    }
}

/// Compact tick labels: fixed decimals matching the step, or exponent form ("2e5", "1.5e-6") for large/tiny axes.
fn tick_labels(t: &[f64]) -> Vec<String> {
    tick_labels_ascii(t).into_iter().map(|s| s.replace('-', "−")).collect()
}

fn tick_labels_ascii(t: &[f64]) -> Vec<String> {
    let step = if t.len() > 1 { t[1] - t[0] } else { 1.0 };
    let step_exp = (step.abs().log10() + 1e-9).floor();
    let big = t.iter().map(|v| v.abs()).fold(0.0, f64::max);
    let sci = !(1e-3..1e5).contains(&big);
    t.iter()
        .map(|&v| {
            if v.abs() < step.abs() * 1e-6 {
                "0".to_string()
            } else if sci {
                let s = format!("{:.*e}", (v.abs().log10().floor() - step_exp).max(0.0) as usize, v);
                let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
                let mant = if mant.contains('.') { mant.trim_end_matches('0').trim_end_matches('.') } else { mant };
                format!("{mant}e{exp}")
            } else {
                format!("{:.*}", (-step_exp).max(0.0) as usize, v)
            }
        })
        .collect()
}

/// Pixel mapping for one panel: plot area (left, top, w, h) and the data ranges spanned by the outer ticks.
struct Frame {
    left: f64,
    top: f64,
    w: f64,
    h: f64,
    xt: Vec<f64>,
    yt: Vec<f64>,
    panel_w: f64,
    panel_h: f64,
}

impl Frame {
    /// `legend_w`: width kept free right of the plot area for the legend (0 for none);
    /// `integer_x`: x ticks at whole numbers only (a step of at least 1, at least two ticks).
    fn new(panel_w: f64, panel_h: f64, xs: Vec<f64>, ys: Vec<f64>, legend_w: f64, integer_x: bool) -> Frame {
        let (left, top, bottom) = (64.0, 36.0, 48.0);
        let right = if legend_w > 0.0 { 16.0 + legend_w + 8.0 } else { 16.0 };
        let (w, h) = ((panel_w - left - right).max(10.0), (panel_h - top - bottom).max(10.0));
        let range = |v: Vec<f64>, max| {
            let v: Vec<f64> = v.into_iter().filter(|x| x.is_finite() && x.abs() < 1e300).collect();
            let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
            if v.is_empty() { ticks(0.0, 1.0, max) } else { ticks(lo, hi, max) }
        };
        let mut xt = range(xs, ((w / 80.0) as usize).clamp(3, 10));
        if integer_x && xt.len() > 1 && (xt[1] - xt[0] < 1.0 || xt.iter().any(|x| x.fract() != 0.0)) {
            let (a, b) = (xt[0].ceil(), xt[xt.len() - 1].floor());
            let (a, b) = if b > a { (a, b) } else { (a.floor(), a.floor() + 1.0) };
            xt = (0..=(b - a) as i64).map(|i| a + i as f64).collect();
        }
        let yt = range(ys, ((h / 45.0) as usize).clamp(3, 8));
        Frame { left, top, w, h, xt, yt, panel_w, panel_h }
    }
    fn px(&self, x: f64) -> f64 {
        let (a, b) = (self.xt[0], self.xt[self.xt.len() - 1]);
        self.left + (x - a) / (b - a) * self.w
    }
    fn py(&self, y: f64) -> f64 {
        let (a, b) = (self.yt[0], self.yt[self.yt.len() - 1]);
        self.top + self.h - (y - a) / (b - a) * self.h
    }
    /// Title, grid lines, tick labels, plot border and axis labels.
    fn axes(&self, out: &mut String, title: &str, x_label: &str, y_label: &str) {
        let (l, t, r, b) = (self.left, self.top, self.left + self.w, self.top + self.h);
        text(out, self.panel_w / 2.0, 22.0, "middle", r#"font-size="15" font-weight="bold""#, title);
        out.push_str("<g stroke=\"#e4e4e4\">\n");
        self.xt[1..self.xt.len() - 1].iter().for_each(|&x| line(out, (self.px(x), t), (self.px(x), b), ""));
        self.yt[1..self.yt.len() - 1].iter().for_each(|&y| line(out, (l, self.py(y)), (r, self.py(y)), ""));
        out.push_str("</g>\n");
        rect(out, (l, t), (self.w, self.h), r##"fill="none" stroke="#444""##);
        for (&x, s) in self.xt.iter().zip(tick_labels(&self.xt)) {
            text(out, self.px(x), b + 15.0, "middle", "", &s);
        }
        for (&y, s) in self.yt.iter().zip(tick_labels(&self.yt)) {
            text(out, l - 5.0, self.py(y) + 4.0, "end", "", &s);
        }
        text(out, l + self.w / 2.0, self.panel_h - 10.0, "middle", r#"font-size="13""#, x_label);
        let (cy, lab) = (n(t + self.h / 2.0), esc(y_label));
        let _ = writeln!(
            out,
            r#"<text transform="translate(16,{cy}) rotate(-90)" text-anchor="middle" font-size="13">{lab}</text>"#
        );
    }
}

/// Legend sample: a line (optionally dashed, optionally with a marker), a lone marker, or a shaded band.
enum Swatch {
    Line { color: &'static str, dashed: bool, marker: Option<Marker> },
    Point(Marker, &'static str),
    Band(&'static str),
}

/// (width, height) of the legend box for `items` (0 × 0 when there are none).
fn legend_size(items: &[(Swatch, &str)]) -> (f64, f64) {
    if items.is_empty() {
        return (0.0, 0.0);
    }
    let chars = items.iter().map(|(_, s)| s.chars().count()).max().unwrap_or(0);
    (40.0 + 6.5 * chars as f64, 8.0 + 16.0 * items.len() as f64)
}

/// Legend box right of the plot area, top-aligned with it: it never covers data (the frame
/// reserved its width).
fn legend(out: &mut String, f: &Frame, items: &[(Swatch, &str)]) {
    if items.is_empty() {
        return;
    }
    let (w, h) = legend_size(items);
    let (x, y) = (f.left + f.w + 8.0, f.top);
    rect(out, (x, y), (w, h), r##"fill="white" stroke="#999""##);
    for (i, (sw, label)) in items.iter().enumerate() {
        let cy = y + 12.0 + 16.0 * i as f64;
        match *sw {
            Swatch::Line { color, dashed, marker: m } => {
                let attrs = format!(r#"stroke="{color}" stroke-width="2"{}"#, if dashed { DASH } else { "" });
                line(out, (x + 6.0, cy), (x + 30.0, cy), &attrs);
                if let Some(m) = m {
                    marker(out, m, x + 18.0, cy, color);
                }
            }
            Swatch::Point(m, c) => marker(out, m, x + 18.0, cy, c),
            Swatch::Band(c) => {
                rect(out, (x + 6.0, cy - 5.0), (24.0, 10.0), &format!(r#"fill="{c}" fill-opacity="0.2""#))
            }
        }
        text(out, x + 36.0, cy + 4.0, "start", "", label);
    }
}

/// The candidate top-left corner whose w×h box (plus a 5 px margin for strokes and markers) contains the fewest
/// `occupied` points; the first candidate wins ties.
fn least_covered(cands: &[(f64, f64)], w: f64, h: f64, occupied: &[(f64, f64)]) -> (f64, f64) {
    let inside = |&(x, y): &(f64, f64), &(cx, cy): &(f64, f64)| {
        x >= cx - 5.0 && x <= cx + w + 5.0 && y >= cy - 5.0 && y <= cy + h + 5.0
    };
    let score = |c: &(f64, f64)| occupied.iter().filter(|p| inside(p, c)).count();
    cands.iter().copied().min_by_key(score).unwrap_or(cands[0])
}

/// Draw a polyline, starting a new sub-path after every non-finite point; returns the pixel points and segment
/// midpoints (for legend placement). Emits nothing when there are no drawable segments.
fn path(
    out: &mut String,
    f: &Frame,
    pts: impl Iterator<Item = (f64, f64)>,
    color: &str,
    dashed: bool,
) -> Vec<(f64, f64)> {
    let (mut d, mut occ, mut prev) = (String::new(), vec![], None::<(f64, f64)>);
    for (x, y) in pts {
        if !(x.is_finite() && y.is_finite()) {
            prev = None;
            continue;
        }
        let p = (f.px(x), f.py(y));
        let _ = write!(d, "{}{} {} ", if prev.is_some() { "L" } else { "M" }, n(p.0), n(p.1));
        if let Some(q) = prev {
            occ.push(((p.0 + q.0) / 2.0, (p.1 + q.1) / 2.0));
        }
        occ.push(p);
        prev = Some(p);
    }
    if d.contains('L') {
        let dash = if dashed { DASH } else { "" };
        let _ = writeln!(out, r#"<path d="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#, d.trim_end());
    }
    occ
}

fn finite(pts: &[(f64, f64)]) -> impl Iterator<Item = &(f64, f64)> {
    pts.iter().filter(|(x, y)| x.is_finite() && y.is_finite())
}

fn marker(out: &mut String, m: Marker, x: f64, y: f64, c: &str) {
    let (x, y) = (n(x), n(y));
    let _ = match m {
        Marker::Circle => writeln!(out, r#"<circle cx="{x}" cy="{y}" r="3.5" fill="{c}"/>"#),
        Marker::Square => {
            writeln!(out, r#"<path d="M{x} {y}m-4 -4h8v8h-8z" fill="none" stroke="{c}" stroke-width="1.6"/>"#)
        }
        Marker::Cross => writeln!(out, r#"<path d="M{x} {y}m-4 -4l8 8m0 -8l-8 8" stroke="{c}" stroke-width="1.6"/>"#),
    };
}

const DASH: &str = r#" stroke-dasharray="6 4""#;

fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), attrs: &str) {
    let _ = writeln!(out, r#"<line x1="{}" y1="{}" x2="{}" y2="{}"{}/>"#, n(x1), n(y1), n(x2), n(y2), sp(attrs));
}

fn rect(out: &mut String, (x, y): (f64, f64), (w, h): (f64, f64), attrs: &str) {
    let _ = writeln!(out, r#"<rect x="{}" y="{}" width="{}" height="{}"{}/>"#, n(x), n(y), n(w), n(h), sp(attrs));
}

/// Extra attributes with a separating space (nothing when empty).
fn sp(attrs: &str) -> String {
    if attrs.is_empty() { String::new() } else { format!(" {attrs}") }
}

fn text(out: &mut String, x: f64, y: f64, anchor: &str, attrs: &str, s: &str) {
    if !s.is_empty() {
        let _ =
            writeln!(out, r#"<text x="{}" y="{}" text-anchor="{anchor}"{}>{}</text>"#, n(x), n(y), sp(attrs), esc(s));
    }
}

/// Pixel number with one decimal, trailing ".0" dropped, clamped to ±1e6; never "NaN"/"inf".
fn n(v: f64) -> String {
    if !v.is_finite() {
        return "0".into();
    }
    let s = format!("{:.1}", v.clamp(-1e6, 1e6));
    let s = s.strip_suffix(".0").unwrap_or(&s);
    if s == "-0" { "0".into() } else { s.into() }
}

/// XML-escape `&`, `<`, `>`, `"` and `'`.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

fn header(w: f64, h: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         font-family=\"sans-serif\" font-size=\"11\">\n",
        w = n(w),
        h = n(h)
    )
}

fn standalone(p: &Panel) -> String {
    let (w, h) = p.size();
    let mut out = header(w, h);
    p.render(&mut out);
    out + "</svg>\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minimal well-formedness check: tags balance (self-closing allowed), quotes in tags balance, every `&` starts
    /// a known entity, and there is exactly one root element.
    fn check_xml(s: &str) {
        let (mut stack, mut roots, mut rest) = (Vec::<String>::new(), 0, s);
        while let Some(i) = rest.find(['<', '&']) {
            let text = &rest[i..];
            if let Some(after) = text.strip_prefix('&') {
                let ok = ["amp;", "lt;", "gt;", "quot;", "apos;"].iter().any(|e| after.starts_with(e));
                assert!(ok, "bad entity at {:?}", &text[..text.len().min(20)]);
                rest = after;
                continue;
            }
            let end = text.find('>').expect("unterminated tag");
            let tag = &text[1..end];
            assert!(!tag.contains('<'), "'<' inside tag {tag:?}");
            assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes in {tag:?}");
            let name = |t: &str| t.split(|c: char| c.is_whitespace() || c == '/').next().unwrap().to_string();
            if let Some(closing) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(closing), "mismatched </{closing}>");
            } else if !tag.ends_with('/') {
                roots += stack.is_empty() as usize;
                stack.push(name(tag));
            } else {
                roots += stack.is_empty() as usize;
            }
            rest = &text[end + 1..];
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        assert_eq!(roots, 1, "expected exactly one root element");
        assert!(s.starts_with("<svg "));
    }

    fn clean(s: &str) {
        check_xml(s);
        let low = s.to_lowercase();
        assert!(!low.contains("nan") && !low.contains("inf"), "non-finite number in output");
    }

    /// Values of attribute `attr` on all `<tag ` elements.
    fn attrs(s: &str, tag: &str, attr: &str) -> Vec<f64> {
        let pat = format!(" {attr}=\"");
        s.split(&format!("<{tag} "))
            .skip(1)
            .filter_map(|e| {
                let e = format!(" {}", &e[..e.find('>').unwrap()]);
                let v = &e[e.find(&pat)? + pat.len()..];
                v[..v.find('"').unwrap()].parse().ok()
            })
            .collect()
    }

    fn rmse_chart() -> LineChart {
        let pts = |a: f64| (0..=25).map(|r| (r as f64, 0.5 + a * (-(r as f64) / 6.0).exp())).collect();
        LineChart::new("Test RMSE per round", "round", "RMSE")
            .with_series(Series::new("party A", pts(0.8), 0).markers(Marker::Circle))
            .with_series(Series::new("party B", pts(0.6), 1).dashed())
            .with_series(Series::new("party C", pts(0.4), 2).markers(Marker::Cross))
            .with_ref_line(0.52, "oracle 0.52")
    }

    #[test]
    fn ticks_are_nice_and_cover() {
        let ranges = [
            (0.0, 25.0),
            (0.43, 1.27),
            (-3.7, 12.2),
            (-250.0, -3.0),
            (1.2e-6, 3.7e-6),
            (0.0, 1e6),
            (-5e5, 2.2e6),
            (5.0, 5.0),
            (0.0, 0.0),
            (-2e-6, -2e-6),
            (10.0, -10.0),
        ];
        for (lo, hi) in ranges {
            for max in [3, 4, 5, 8, 10] {
                let t = ticks(lo, hi, max);
                assert!(t.len() >= 2 && t.len() <= max, "{lo}..{hi} max {max}: {t:?}");
                let step = t[1] - t[0];
                let mant = step / 10f64.powf(step.log10().floor());
                assert!([1.0, 2.0, 5.0, 10.0].iter().any(|m| (mant - m).abs() < 1e-6), "step {step} not 1-2-5");
                for w in t.windows(2) {
                    assert!(((w[1] - w[0]) / step - 1.0).abs() < 1e-9, "uneven {t:?}");
                }
                t.iter().for_each(|v| assert!((v / step - (v / step).round()).abs() < 1e-6, "{v} not on grid"));
                let (a, b) = (lo.min(hi), lo.max(hi));
                let eps = 1e-9 * step;
                assert!(t[0] <= a + eps && t[t.len() - 1] >= b - eps, "{lo}..{hi}: {t:?} does not cover");
                if a == b {
                    assert!(t[0] < a && t[t.len() - 1] > b, "equal ends must be padded: {t:?}");
                }
            }
        }
        assert_eq!(ticks(0.0, 25.0, 8), vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0]);
        assert_eq!(ticks(0.43, 1.27, 6), vec![0.4, 0.6, 0.8, 1.0, 1.2, 1.4]);
        assert!(ticks(f64::NAN, 1.0, 5).is_empty() && ticks(0.0, f64::INFINITY, 5).is_empty());
    }

    #[test]
    fn tick_labels_are_compact() {
        assert_eq!(
            tick_labels(&ticks(0.0, 1.0, 11)),
            ["0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1.0"]
        );
        assert_eq!(tick_labels(&ticks(0.0, 1e6, 6)), ["0", "2e5", "4e5", "6e5", "8e5", "1e6"]);
        assert_eq!(tick_labels(&ticks(1e-6, 2e-6, 3)), ["1e−6", "1.5e−6", "2e−6"]);
        assert_eq!(tick_labels(&ticks(-20.0, 20.0, 5)), ["−20", "−10", "0", "10", "20"]);
    }

    /// The x-axis tick labels of a standalone chart (the texts anchored "middle" below the plot).
    fn x_tick_texts(svg: &str) -> Vec<String> {
        svg.lines()
            .filter(|l| l.starts_with("<text ") && l.contains(r#"text-anchor="middle">"#))
            .map(|l| l[l.find('>').unwrap() + 1..l.find("</text>").unwrap()].to_string())
            .collect()
    }

    #[test]
    fn one_round_has_whole_number_ticks_and_its_error_bar_sets_the_range() {
        // Round 0 (alone) and round 1: the x axis says 0 and 1, never 0.5.
        let plain = LineChart::new("p", "round", "RMSE")
            .with_series(Series::new("co-trained", vec![(0.0, 0.609), (1.0, 0.588)], 0).markers(Marker::Circle));
        let ticks_x =
            |c: &LineChart| x_tick_texts(&c.to_svg()).into_iter().filter(|t| t != "round").collect::<Vec<_>>();
        assert!(ticks_x(&plain).contains(&"0.5".to_string()), "the unmarked chart would print 0.5");
        assert_eq!(ticks_x(&plain.clone().integer_x()), ["0", "1"]);
        let many = LineChart::new("p", "round", "RMSE").integer_x().with_series(Series::new(
            "s",
            (0..=25).map(|r| (r as f64, 1.0)).collect(),
            0,
        ));
        assert_eq!(ticks_x(&many), ["0", "5", "10", "15", "20", "25"], "steps ≥ 1 are kept");
        // An error bar of ±0.05 at round 1 draws a bar with two caps, and the y axis covers it.
        let bar = plain.clone().integer_x();
        let mut bar = bar;
        bar.series[0] = bar.series[0].clone().with_errors(vec![f64::NAN, 0.05]);
        let svg = bar.to_svg();
        clean(&svg);
        let lines_before = plain.clone().integer_x().to_svg().matches("<line ").count();
        assert_eq!(svg.matches("<line ").count(), lines_before + 3 + 1, "bar, two caps (and one more grid line)");
        let f = bar.frame();
        assert!(f.yt[0] <= 0.538 && f.yt[f.yt.len() - 1] >= 0.638, "{:?}", f.yt);
        // Non-positive or non-finite half-widths draw nothing.
        let mut none = plain.clone();
        none.series[0] = none.series[0].clone().with_errors(vec![0.0, f64::INFINITY]);
        assert_eq!(none.to_svg(), plain.to_svg());
    }

    #[test]
    fn nan_and_inf_are_skipped_and_break_lines() {
        let pts =
            vec![(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN), (3.0, 3.0), (f64::INFINITY, 1.0), (4.0, 2.0), (5.0, 1.0)];
        let c = LineChart::new("t", "x", "y").with_series(Series::new("s", pts, 0).markers(Marker::Square));
        let s = c.to_svg();
        clean(&s);
        let d = s.split("<path d=\"").nth(1).unwrap();
        let d = &d[..d.find('"').unwrap()];
        assert_eq!(d.matches('M').count(), 3, "line must restart after each non-finite point: {d}");
        assert_eq!(d.matches('L').count(), 2);
        let nan = f64::NAN;
        let p = ExchangePanel {
            train: vec![(0.0, 1.0), (nan, 2.0)],
            queried: vec![(1.0, f64::NEG_INFINITY)],
            grid: vec![0.0, 1.0, 2.0, 3.0],
            mean: vec![0.0, nan, 1.0, 2.0],
            lower: vec![-1.0, -1.0, nan, 1.0],
            upper: vec![1.0, 1.0, 2.0, 3.0],
            truth: Some(vec![nan, nan, nan, nan]),
            ..ExchangePanel::new("gp")
        };
        clean(&p.to_svg());
        clean(&LineChart::new("t", "x", "y").with_ref_line(f64::NAN, "r").to_svg());
    }

    #[test]
    fn empty_and_flat_data_give_valid_pictures() {
        for c in [
            LineChart::new("", "", ""),
            LineChart::new("empty", "x", "y").with_series(Series::new("none", vec![], 0)),
            LineChart::new("flat", "x", "y").with_series(Series::new("f", vec![(0.0, 0.7), (1.0, 0.7)], 0)),
            LineChart::new("one", "x", "y").with_series(Series::new("p", vec![(3.0, 0.0)], 0).markers(Marker::Circle)),
        ] {
            let s = c.to_svg();
            clean(&s);
            let f = c.frame();
            assert!(f.xt.len() >= 2 && f.yt.len() >= 2);
            assert!(f.yt[f.yt.len() - 1] > f.yt[0] && f.xt[f.xt.len() - 1] > f.xt[0]);
        }
        let f = LineChart::new("flat", "x", "y").with_series(Series::new("f", vec![(0.0, 0.7), (1.0, 0.7)], 0)).frame();
        assert!(f.yt[0] < 0.7 && *f.yt.last().unwrap() > 0.7);
        clean(&ExchangePanel::new("empty").to_svg());
        clean(&Figure::new("").to_svg());
    }

    #[test]
    fn text_is_escaped() {
        let nasty = r#"a & b <c> "d" 'e'"#;
        let c = LineChart::new(nasty, nasty, nasty).with_series(Series::new(nasty, vec![(0.0, 1.0), (1.0, 2.0)], 0));
        let s = c.with_ref_line(1.5, nasty).to_svg();
        clean(&s);
        assert!(!s.contains("<c>") && !s.contains("\"d\""));
        assert_eq!(s.matches("a &amp; b &lt;c&gt; &quot;d&quot; &apos;e&apos;").count(), 5);
        let f = Figure::new(nasty).with_panel(ExchangePanel::new(nasty));
        assert!(f.to_svg().contains("&lt;c&gt;"));
        check_xml(&f.to_svg());
    }

    #[test]
    fn wellformedness_checker_can_fail() {
        for bad in ["<svg><g></svg>", "<svg><g></g>", "<svg>a & b</svg>", "<svg x=\"1></svg>", "<svg/><svg/>"] {
            assert!(std::panic::catch_unwind(|| check_xml(bad)).is_err(), "{bad} accepted");
        }
        check_xml("<svg a=\"1\"><g><rect/></g>&amp;</svg>");
    }

    #[test]
    fn data_maximum_maps_inside_plot_area() {
        let c = LineChart::new("m", "x", "y")
            .with_series(Series::new("s", vec![(0.0, 0.0), (7.3, 3.25), (13.7, 0.2)], 0).markers(Marker::Circle));
        let f = c.frame();
        let (l, r, t, b) = (f.left, f.left + f.w, f.top, f.top + f.h);
        let (x, y) = (f.px(13.7), f.py(3.25));
        assert!(x > l && x <= r && y >= t && y < b, "({x},{y}) outside [{l},{r}]x[{t},{b}]");
        let s = c.to_svg();
        let (cx, cy) = (attrs(&s, "circle", "cx"), attrs(&s, "circle", "cy"));
        assert_eq!(cx.len(), 3 + 1, "3 data markers + 1 legend marker");
        for (x, y) in cx[..3].iter().zip(&cy) {
            assert!(*x >= l && *x <= r && *y >= t && *y <= b, "marker ({x},{y}) outside plot area");
        }
        // The legend's marker is right of the plot area: the legend never covers data.
        assert!(cx[3] > r, "legend marker at {} inside the plot (right edge {r})", cx[3]);
        // Among the data markers the highest point is drawn highest (smallest pixel y), the rightmost furthest right.
        assert_eq!(cy[..3].iter().cloned().fold(f64::INFINITY, f64::min), cy[1]);
        assert_eq!(cx[..3].iter().cloned().fold(0.0, f64::max), cx[2]);
        assert!((cx[2] - x).abs() < 0.06 && (cy[1] - y).abs() < 0.06);
    }

    /// Data filling every corner of the plot: the legend box (the rect with a #999 stroke) lies
    /// wholly right of the plot area, and the panel keeps its size.
    #[test]
    fn legend_is_outside_the_plot_area() {
        let corners = vec![(0.0, 0.0), (0.0, 10.0), (10.0, 10.0), (10.0, 0.0)];
        let c = LineChart::new("c", "x", "y")
            .with_series(Series::new("a fairly long series name", corners, 0))
            .with_series(Series::new("b", vec![(5.0, 5.0)], 1).markers(Marker::Circle));
        let f = c.frame();
        let s = c.to_svg();
        let boxes: Vec<&str> = s.lines().filter(|l| l.starts_with("<rect") && l.contains("#999")).collect();
        assert_eq!(boxes.len(), 1, "{s}");
        let x: f64 = boxes[0].split("x=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
        let w: f64 = boxes[0].split("width=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
        assert!(x > f.left + f.w, "legend at x = {x}, plot ends at {}", f.left + f.w);
        assert!(x + w <= c.width, "legend leaves the panel: {} > {}", x + w, c.width);
    }

    #[test]
    fn legend_names_every_series() {
        let c = rmse_chart();
        let s = c.to_svg();
        clean(&s);
        for name in ["party A", "party B", "party C"] {
            assert!(s.contains(&format!(">{name}</text>")), "legend lacks {name}");
        }
        assert!(s.contains(">oracle 0.52</text>"));
        assert!(s.contains("stroke-dasharray=\"6 4\""));
    }

    #[test]
    fn exchange_panel_draws_band_points_and_curves() {
        let s = sample_exchange("with DP", 0.3).to_svg();
        clean(&s);
        assert_eq!(s.matches("fill-opacity=\"0.2\"").count(), 2, "band polygon + legend swatch");
        assert_eq!(attrs(&s, "circle", "cx").len(), 6 + 1, "6 training points + legend marker");
        for l in ["95% band", "posterior mean", "true f", "private data", "queried"] {
            assert!(s.contains(&format!(">{l}</text>")));
        }
    }

    #[test]
    fn figure_width_is_sum_of_panels() {
        let mut b = sample_exchange("with DP", 0.3);
        b.width = 500.0;
        let f = Figure::new("GP exchange").with_panel(sample_exchange("without DP", 0.0)).with_panel(b);
        let s = f.to_svg();
        clean(&s);
        assert_eq!(attrs(&s, "svg", "width"), vec![1140.0]);
        assert_eq!(f.width(), 1140.0);
        assert!(s.contains("translate(640,32)"));
    }

    pub(crate) fn sample_exchange(title: &str, noise: f64) -> ExchangePanel {
        let f = |x: f64| (3.0 * x).sin() + 0.3 * x;
        let grid: Vec<f64> = (0..=100).map(|i| i as f64 / 100.0 * 4.0 - 2.0).collect();
        let sd: Vec<f64> = grid.iter().map(|&x| 0.15 + noise + 0.25 * (x - 0.2).abs()).collect();
        let mean: Vec<f64> = grid.iter().map(|&x| f(x) + 0.1 * x.cos()).collect();
        ExchangePanel {
            train: [-1.7, -1.1, -0.4, 0.1, 0.6, 1.2].iter().map(|&x| (x, f(x) + 0.05)).collect(),
            queried: [-1.5, -0.8, 0.4, 1.5, 1.8].iter().map(|&x| (x, f(x) + noise)).collect(),
            lower: mean.iter().zip(&sd).map(|(m, s)| m - 1.96 * s).collect(),
            upper: mean.iter().zip(&sd).map(|(m, s)| m + 1.96 * s).collect(),
            truth: Some(grid.iter().map(|&x| f(x)).collect()),
            mean,
            grid,
            ..ExchangePanel::new(title)
        }
    }
}
