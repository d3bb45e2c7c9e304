//! The three kinds of chart the report draws — lines (optionally on log
//! axes), grouped bars and stacked bars — drawn by `plotters` into SVG.
//!
//! Each series gets one colour of [`PALETTE`] and nothing else in a chart
//! is drawn in those colours (axes and text are black or grey), so the
//! page's check can count the series it sees in an SVG and compare them
//! with the legend, which the page writes in HTML from the same data.

use std::fmt;
use std::ops::Range;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Series colours, in order: Okabe and Ito's colour-blind-safe palette
/// ("Color Universal Design", 2008) without its black, which the axes
/// use, and yellow last since it reads worst on white; then a neutral grey
/// for reference values (a physical limit, a clock read), then three of
/// Paul Tol's "muted" colours for the rare chart with more series.
pub const PALETTE: [(u8, u8, u8); 11] = [
    (0x00, 0x72, 0xB2), // blue
    (0xE6, 0x9F, 0x00), // orange
    (0x00, 0x9E, 0x73), // bluish green
    (0xD5, 0x5E, 0x00), // vermillion
    (0x56, 0xB4, 0xE9), // sky blue
    (0xCC, 0x79, 0xA7), // reddish purple
    (0xF0, 0xE4, 0x42), // yellow
    (0x99, 0x99, 0x99), // grey
    (0x33, 0x22, 0x88), // indigo
    (0x88, 0x22, 0x55), // wine
    (0x44, 0xAA, 0x99), // teal
];

/// The palette colour of series `index`, as `#RRGGBB` (how plotters'
/// SVG backend writes colours, so the page's check can match them).
pub fn hex(index: usize) -> String {
    let (r, g, b) = PALETTE[index % PALETTE.len()];
    format!("#{r:02X}{g:02X}{b:02X}")
}

fn colour(index: usize) -> RGBColor {
    let (r, g, b) = PALETTE[index % PALETTE.len()];
    RGBColor(r, g, b)
}

/// Pixel size of every chart; the page scales it down on narrow screens.
const SIZE: (u32, u32) = (760, 380);

/// Why a chart could not be drawn.
#[derive(Debug, Clone, PartialEq)]
pub enum ChartError {
    /// Nothing to draw: no series, or no positive value on a log axis.
    Empty,
    /// plotters failed (its message).
    Drawing(String),
}

impl fmt::Display for ChartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChartError::Empty => write!(f, "no values to plot"),
            ChartError::Drawing(message) => write!(f, "drawing failed: {message}"),
        }
    }
}

fn drawing(error: impl fmt::Display) -> ChartError {
    ChartError::Drawing(error.to_string())
}

/// One axis: what it shows, with its unit, and whether it is logarithmic.
#[derive(Debug, Clone)]
pub struct Axis {
    /// E.g. `ns per lookup`.
    pub label: String,
    /// Log scale (values must be positive; others are left out).
    pub log: bool,
}

impl Axis {
    /// A linear axis.
    pub fn linear(label: &str) -> Axis {
        Axis {
            label: label.to_owned(),
            log: false,
        }
    }

    /// The unit of the label: what follows its last comma, e.g. `µs` of
    /// `latency, µs`, else its first word (`µs` of `µs per 128 MiB`).
    fn unit(&self) -> &str {
        let label = self.label.as_str();
        if let Some((_, unit)) = label.rsplit_once(", ") {
            return unit;
        }
        label.split_whitespace().next().unwrap_or("")
    }

    /// A logarithmic axis.
    pub fn log(label: &str) -> Axis {
        Axis {
            label: label.to_owned(),
            log: true,
        }
    }
}

/// A named series of (x, y) points.
#[derive(Debug, Clone)]
pub struct Line {
    /// The legend's name.
    pub name: String,
    /// Points in x order.
    pub points: Vec<(f64, f64)>,
    /// Draw as a step function without markers (a CDF of many samples).
    pub steps: bool,
}

/// A named series of bar heights, one per category (`None`: no bar).
#[derive(Debug, Clone)]
pub struct Bars {
    /// The legend's name.
    pub name: String,
    /// One value per category.
    pub values: Vec<Option<f64>>,
}

/// What a chart draws.
#[derive(Debug, Clone)]
pub enum Marks {
    /// Lines with markers.
    Lines(Vec<Line>),
    /// One group of bars per category, one bar per series.
    Grouped {
        /// Category labels; `\n` breaks a label into lines.
        categories: Vec<String>,
        /// The series.
        series: Vec<Bars>,
    },
    /// One bar per category, the series stacked bottom to top.
    Stacked {
        /// Category labels; `\n` breaks a label into lines.
        categories: Vec<String>,
        /// The series.
        series: Vec<Bars>,
    },
}

/// A chart: its axes, its marks and a line of text inside the plot.
#[derive(Debug, Clone)]
pub struct Chart {
    /// The horizontal axis (ignored for bars, whose x is the categories).
    pub x: Axis,
    /// The vertical axis.
    pub y: Axis,
    /// What is drawn.
    pub marks: Marks,
    /// A remark drawn at the plot's top left, e.g. a published figure.
    pub note: Option<String>,
}

impl Chart {
    /// The series' names, in colour order.
    pub fn series_names(&self) -> Vec<String> {
        match &self.marks {
            Marks::Lines(lines) => lines.iter().map(|l| l.name.clone()).collect(),
            Marks::Grouped { series, .. } | Marks::Stacked { series, .. } => {
                series.iter().map(|s| s.name.clone()).collect()
            }
        }
    }

    /// Draws the chart as an SVG document.
    pub fn to_svg(&self) -> Result<String, ChartError> {
        let (xs, ys) = self.ranges()?;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            root.fill(&WHITE).map_err(drawing)?;
            match (self.x.log, self.y.log) {
                (false, false) => self.draw(&root, xs, ys)?,
                (true, false) => self.draw(&root, xs.log_scale(), ys)?,
                (false, true) => self.draw(&root, xs, ys.log_scale())?,
                (true, true) => self.draw(&root, xs.log_scale(), ys.log_scale())?,
            }
            root.present().map_err(drawing)?;
        }
        Ok(svg)
    }

    /// The x and y ranges the data needs, with a margin.
    fn ranges(&self) -> Result<(Range<f64>, Range<f64>), ChartError> {
        let usable = |v: f64, log: bool| v.is_finite() && (!log || v > 0.0);
        let (xs, ys): (Vec<f64>, Vec<f64>) = match &self.marks {
            Marks::Lines(lines) => lines
                .iter()
                .flat_map(|l| l.points.iter().copied())
                .filter(|(x, y)| usable(*x, self.x.log) && usable(*y, self.y.log))
                .unzip(),
            Marks::Grouped { categories, series } => {
                let ys = series
                    .iter()
                    .flat_map(|s| s.values.iter().flatten().copied())
                    .filter(|y| usable(*y, self.y.log))
                    .collect();
                (vec![0.0, categories.len() as f64], ys)
            }
            Marks::Stacked { categories, series } => {
                let tops = (0..categories.len())
                    .map(|i| {
                        series
                            .iter()
                            .filter_map(|s| s.values.get(i).copied().flatten())
                            .filter(|y| usable(*y, self.y.log))
                            .sum::<f64>()
                    })
                    .filter(|top| *top > 0.0);
                let smallest = series
                    .iter()
                    .flat_map(|s| s.values.iter().flatten().copied())
                    .filter(|y| usable(*y, self.y.log));
                (
                    vec![0.0, categories.len() as f64],
                    tops.chain(smallest).collect(),
                )
            }
        };
        let (Some(x), Some(y)) = (span(&xs), span(&ys)) else {
            return Err(ChartError::Empty);
        };
        let bars = !matches!(self.marks, Marks::Lines(_));
        let x = if bars { x } else { pad(x, self.x.log) };
        let mut y = pad(y, self.y.log);
        if bars && !self.y.log {
            y.start = 0.0;
        }
        Ok((x, y))
    }

    fn draw<XS, YS>(
        &self,
        root: &DrawingArea<SVGBackend<'_>, Shift>,
        xs: XS,
        ys: YS,
    ) -> Result<(), ChartError>
    where
        XS: AsRangedCoord<Value = f64>,
        YS: AsRangedCoord<Value = f64>,
        XS::CoordDescType: ValueFormatter<f64>,
        YS::CoordDescType: ValueFormatter<f64>,
    {
        let categories = match &self.marks {
            Marks::Lines(_) => None,
            Marks::Grouped { categories, .. } | Marks::Stacked { categories, .. } => {
                Some(categories)
            }
        };
        // Category labels of up to three lines sit below the axis.
        let x_area = if categories.is_some() { 62 } else { 46 };
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(x_area)
            .y_label_area_size(74)
            .build_cartesian_2d(xs, ys)
            .map_err(drawing)?;
        let y_range = chart.y_range();
        let tick = |v: &f64| short(*v);
        let mut mesh = chart.configure_mesh();
        mesh.y_desc(self.y.label.as_str())
            .y_label_formatter(&tick)
            .axis_desc_style(("sans-serif", 18))
            .label_style(("sans-serif", 16))
            .light_line_style(WHITE);
        if categories.is_some() {
            mesh.disable_x_mesh().x_labels(0);
        } else {
            mesh.x_desc(self.x.label.as_str()).x_label_formatter(&tick);
        }
        mesh.draw().map_err(drawing)?;
        let floor = y_range.start;
        // Each stacked bar's total, printed above it: a short bar beside a
        // tall one shows its height no other way.
        let mut totals: Vec<f64> = Vec::new();
        match &self.marks {
            Marks::Lines(lines) => {
                for (i, line) in lines.iter().enumerate() {
                    let style = colour(i).stroke_width(2);
                    let points = line.points.iter().copied().filter(|(x, y)| {
                        x.is_finite()
                            && y.is_finite()
                            && (!self.x.log || *x > 0.0)
                            && (!self.y.log || *y > 0.0)
                    });
                    let points: Vec<(f64, f64)> = points.collect();
                    if line.steps {
                        let stepped = points
                            .iter()
                            .zip(points.iter().skip(1))
                            .flat_map(|(a, b)| [*a, (b.0, a.1)])
                            .chain(points.last().copied());
                        chart
                            .draw_series(LineSeries::new(stepped, style))
                            .map_err(drawing)?;
                    } else {
                        chart
                            .draw_series(LineSeries::new(points.iter().copied(), style))
                            .map_err(drawing)?;
                        chart
                            .draw_series(
                                points
                                    .iter()
                                    .map(|p| Circle::new(*p, 4, colour(i).filled())),
                            )
                            .map_err(drawing)?;
                    }
                }
            }
            Marks::Grouped { series, .. } => {
                let width = 0.8 / series.len().max(1) as f64;
                for (j, bars) in series.iter().enumerate() {
                    let rects = bars.values.iter().enumerate().filter_map(|(i, v)| {
                        let v = (*v)?;
                        let left = i as f64 + 0.1 + j as f64 * width;
                        (v > floor).then(|| {
                            Rectangle::new([(left, floor), (left + width, v)], colour(j).filled())
                        })
                    });
                    chart.draw_series(rects).map_err(drawing)?;
                }
            }
            Marks::Stacked { series, .. } => {
                let mut bottoms: Vec<f64> = vec![floor; categories.map_or(0, Vec::len)];
                totals.resize(bottoms.len(), 0.0);
                for (j, bars) in series.iter().enumerate() {
                    let mut rects = Vec::new();
                    for (i, bottom) in bottoms.iter_mut().enumerate() {
                        let Some(v) = bars.values.get(i).copied().flatten() else {
                            continue;
                        };
                        let top = if self.y.log && *bottom == floor {
                            v
                        } else {
                            *bottom + v
                        };
                        if top > *bottom {
                            totals[i] += v;
                            let left = i as f64 + 0.2;
                            rects.push(Rectangle::new(
                                [(left, *bottom), (left + 0.6, top)],
                                colour(j).filled(),
                            ));
                            *bottom = top;
                        }
                    }
                    chart.draw_series(rects).map_err(drawing)?;
                }
            }
        }
        let text = |size: i32, h: HPos, v: VPos| {
            TextStyle::from(("sans-serif", size).into_font())
                .color(&BLACK)
                .pos(Pos::new(h, v))
        };
        if let Some(categories) = categories {
            for (i, label) in categories.iter().enumerate() {
                let (x, y) = chart.backend_coord(&(i as f64 + 0.5, floor));
                for (n, part) in label.split('\n').enumerate() {
                    let at = (x, y + 6 + 15 * n as i32);
                    root.draw(&Text::new(part, at, text(16, HPos::Center, VPos::Top)))
                        .map_err(drawing)?;
                }
            }
        }
        for (i, total) in totals.iter().enumerate() {
            if *total > 0.0 {
                let (x, y) = chart.backend_coord(&(i as f64 + 0.5, *total));
                let label = format!("{} {}", short(*total), self.y.unit());
                root.draw(&Text::new(
                    label.trim_end().to_owned(),
                    (x, y - 4),
                    text(15, HPos::Center, VPos::Bottom),
                ))
                .map_err(drawing)?;
            }
        }
        if let Some(note) = &self.note {
            let (left, top) = {
                let (xr, yr) = chart.plotting_area().get_pixel_range();
                (xr.start, yr.start)
            };
            root.draw(&Text::new(
                note.as_str(),
                (left + 8, top + 6),
                text(16, HPos::Left, VPos::Top),
            ))
            .map_err(drawing)?;
        }
        Ok(())
    }
}

/// The smallest and largest of `values`, if any.
fn span(values: &[f64]) -> Option<Range<f64>> {
    let low = values.iter().copied().reduce(f64::min)?;
    let high = values.iter().copied().reduce(f64::max)?;
    Some(low..high)
}

/// Widens `range` so that its extreme points are not on the frame.
fn pad(range: Range<f64>, log: bool) -> Range<f64> {
    if log {
        (range.start / 1.6)..(range.end * 1.6)
    } else {
        let margin = ((range.end - range.start) * 0.08).max(range.end.abs() * 0.05);
        let margin = if margin > 0.0 { margin } else { 1.0 };
        // Values that are all positive keep a floor of zero.
        let start = if range.start >= 0.0 {
            (range.start - margin).max(0.0)
        } else {
            range.start - margin
        };
        start..(range.end + margin)
    }
}

/// A tick label: three significant digits at most, with k/M/G for
/// thousands, so log axes read "10k" rather than "10000.000".
pub fn short(value: f64) -> String {
    let magnitude = value.abs();
    let (scaled, suffix) = match magnitude {
        m if m >= 1e9 => (value / 1e9, "G"),
        m if m >= 1e6 => (value / 1e6, "M"),
        m if m >= 1e4 => (value / 1e3, "k"),
        _ => (value, ""),
    };
    let digits = match scaled.abs() {
        m if m >= 100.0 || m == 0.0 => 0,
        m if m >= 10.0 => 1,
        m if m >= 1.0 => 2,
        m => (2.0 - m.log10().floor()).clamp(2.0, 9.0) as usize,
    };
    let text = format!("{scaled:.digits$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    };
    format!("{text}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grouped(values: Vec<Option<f64>>) -> Chart {
        Chart {
            x: Axis::linear(""),
            y: Axis::log("seconds"),
            marks: Marks::Grouped {
                categories: vec!["a".into(), "b\nc".into()],
                series: vec![
                    Bars {
                        name: "one".into(),
                        values,
                    },
                    Bars {
                        name: "two".into(),
                        values: vec![Some(3.0), Some(4.0)],
                    },
                ],
            },
            note: Some("a remark".into()),
        }
    }

    #[test]
    fn each_series_is_drawn_in_its_own_palette_colour() {
        let svg = grouped(vec![Some(1.0), Some(2.0)]).to_svg().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert_eq!(svg.matches(&format!("fill=\"{}\"", hex(0))).count(), 2);
        assert_eq!(svg.matches(&format!("fill=\"{}\"", hex(1))).count(), 2);
        assert!(!svg.contains(&hex(2)));
        assert!(svg.contains(">\nb\n</text>") && svg.contains(">\nc\n</text>"));
        assert!(svg.contains("a remark") && svg.contains("seconds"));
    }

    #[test]
    fn a_log_axis_leaves_out_what_it_cannot_show() {
        let svg = grouped(vec![Some(0.0), None]).to_svg().unwrap();
        assert!(!svg.contains(&hex(0)), "a zero bar on a log axis was drawn");
        let empty = Chart {
            marks: Marks::Lines(vec![Line {
                name: "nothing".into(),
                points: vec![(1.0, -1.0)],
                steps: false,
            }]),
            ..grouped(vec![])
        };
        assert_eq!(empty.to_svg(), Err(ChartError::Empty));
    }

    #[test]
    fn stacked_bars_stack_and_lines_draw_markers() {
        let mut chart = grouped(vec![Some(1.0), Some(2.0)]);
        chart.y = Axis::linear("µs");
        if let Marks::Grouped { categories, series } = chart.marks {
            chart.marks = Marks::Stacked { categories, series };
        }
        let svg = chart.to_svg().unwrap();
        assert_eq!(svg.matches(&hex(1)).count(), 2);
        assert!(
            svg.contains(">\n4 µs\n<") && svg.contains(">\n6 µs\n<"),
            "totals"
        );
        let lines = Chart {
            x: Axis::log("segments"),
            y: Axis::linear("ns"),
            marks: Marks::Lines(vec![Line {
                name: "l".into(),
                points: vec![(1.0, 2.0), (10.0, 3.0), (100.0, 1.0)],
                steps: false,
            }]),
            note: None,
        };
        let svg = lines.to_svg().unwrap();
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("<polyline"));
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(short(10_000.0), "10k");
        assert_eq!(short(2_500_000.0), "2.5M");
        assert_eq!(short(0.002), "0.002");
        assert_eq!(short(12.5), "12.5");
        assert_eq!(short(100.0), "100");
        assert_eq!(short(0.0), "0");
    }
}
