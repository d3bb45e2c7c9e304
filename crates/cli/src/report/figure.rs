//! A figure of the report: a chart drawn from one input, its caption, or
//! why it has no data.

use super::chart::{Bars, Chart};
use super::inputs::{Bench, Problem, Source};

/// A drawn chart and its series' names, in palette order (the legend).
#[derive(Debug, Clone)]
pub struct Plot {
    /// The SVG document.
    pub svg: String,
    /// The legend: one name per series, series `i` in palette colour `i`.
    pub series: Vec<String>,
}

/// One figure of the page.
#[derive(Debug, Clone)]
pub struct Figure {
    /// The figure's anchor on the page, e.g. `physmem-lookup`.
    pub id: &'static str,
    /// Its heading.
    pub title: String,
    /// The input it is drawn from.
    pub source: Source,
    /// What it shows and which target it meets (under the figure).
    pub caption: String,
    /// The chart, or why there is none.
    pub plot: Result<Plot, String>,
}

impl Figure {
    /// Draws `chart` for a figure; a chart that cannot be drawn, or that
    /// had no data, leaves the figure with the reason.
    pub fn new(
        id: &'static str,
        title: &str,
        source: Source,
        caption: String,
        chart: Result<Chart, Problem>,
    ) -> Figure {
        let plot = chart
            .map_err(|problem| problem.to_string())
            .and_then(|chart| {
                let svg = chart.to_svg().map_err(|error| error.to_string())?;
                Ok(Plot {
                    svg,
                    series: chart.series_names(),
                })
            });
        Figure {
            id,
            title: title.to_owned(),
            source,
            caption,
            plot,
        }
    }
}

/// The caption's sentence on the target `bench` states about `topic`
/// (see [`Bench::target`]), or nothing when the document is missing: the
/// figure then says why in its place.
pub fn target(bench: &Result<Bench<'_>, Problem>, topic: &str) -> String {
    bench
        .as_ref()
        .map_or_else(|_| String::new(), |b| format!(" {}.", b.target(topic)))
}

/// One series of bars per implementation: its figure `key` in each case
/// of `names` (`None` where it did not run the case).
pub fn bars_by_impl<S: AsRef<str>>(
    bench: &Bench<'_>,
    implementations: &[S],
    names: &[String],
    key: &str,
) -> Vec<Bars> {
    implementations
        .iter()
        .map(|implementation| Bars {
            name: implementation.as_ref().to_owned(),
            values: names
                .iter()
                .map(|name| bench.figure(name, implementation.as_ref(), key))
                .collect(),
        })
        .collect()
}
