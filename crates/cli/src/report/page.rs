//! The HTML page: one file with everything inline (style, SVG, the check
//! script), so it opens from disk, offline, as it was written.

use std::fmt::Write as _;

use super::chart::{hex, PALETTE};
use super::figure::Figure;

/// What the header says about where and when the report was written.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// The CPU model.
    pub cpu: String,
    /// Logical CPUs the host has.
    pub cores: usize,
    /// The load averages (1, 5, 15 min) when the report was written.
    pub load: String,
    /// `qemu-system-x86_64 --version`'s first line, or why there is none.
    pub qemu: String,
    /// The commit the binary was run from.
    pub commit: String,
    /// When the report was written (UTC).
    pub date: String,
    /// Where the inputs came from.
    pub inputs: String,
}

/// One target stated by a benchmark, and whether it was met.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The benchmark's note, e.g. `physmem: target … met (5.8x)`.
    pub text: String,
    /// `Some(true)` met, `Some(false)` missed, `None` the note says neither.
    pub met: Option<bool>,
}

impl Target {
    /// Reads a note's verdict: "missed" wins over "met" (a note may list
    /// both), and neither leaves it unknown.
    pub fn from_note(text: &str) -> Target {
        let words: Vec<&str> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let met = if words.iter().any(|w| w.eq_ignore_ascii_case("missed")) {
            Some(false)
        } else if words.iter().any(|w| w.eq_ignore_ascii_case("met")) {
            Some(true)
        } else {
            None
        };
        Target {
            text: text.to_owned(),
            met,
        }
    }
}

/// `text` with HTML's special characters escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = "
body { font: 15px/1.45 system-ui, sans-serif; color: #111; max-width: 980px; margin: 0 auto; padding: 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
h3 { font-size: 1.05em; margin: 0 0 0.4em; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { text-align: left; padding: 2px 8px; vertical-align: top; border-bottom: 1px solid #eee; }
td.met, td.missed { white-space: nowrap; }
.met { color: #00603f; font-weight: bold; }
.missed { color: #a33a00; font-weight: bold; }
figure { margin: 1.5em 0; padding: 0.8em; border: 1px solid #ddd; border-radius: 4px; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { font-size: 0.92em; color: #333; margin-top: 0.4em; }
ul.legend { list-style: none; padding: 0; margin: 0.3em 0; display: flex; flex-wrap: wrap; gap: 0.3em 1.2em; font-size: 0.92em; }
ul.legend span { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.35em; vertical-align: -0.1em; border: 1px solid #555; }
.nodata p { background: #fff4e5; padding: 0.8em; margin: 0; }
#verdict { display: none; }
";

/// Checks every figure once the page is laid out, and writes the result
/// as JSON into `#verdict` for the browser test to read: per figure, the
/// series the data has (`data-series`), the legend's entries, and the
/// distinct series colours painted with a non-empty box in its SVG.
const CHECK: &str = r#"
(function () {
  const palette = new Set(JSON.parse(document.getElementById('palette').textContent));
  const verdict = { figures: [], nodata: [] };
  for (const figure of document.querySelectorAll('figure.figure')) {
    if (figure.classList.contains('nodata')) {
      verdict.nodata.push({ id: figure.id, source: figure.dataset.source,
        why: figure.querySelector('.why').textContent });
      continue;
    }
    const svg = figure.querySelector('svg');
    const expected = Number(figure.dataset.series);
    const legend = figure.querySelectorAll('ul.legend li').length;
    const colours = new Set();
    let painted = 0;
    for (const element of svg ? svg.querySelectorAll('*') : []) {
      for (const attribute of ['fill', 'stroke']) {
        const colour = (element.getAttribute(attribute) || '').toUpperCase();
        if (!palette.has(colour) || typeof element.getBBox !== 'function') continue;
        const box = element.getBBox();
        if (box.width > 0 || box.height > 0) { colours.add(colour); painted += 1; }
      }
    }
    const box = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
    verdict.figures.push({ id: figure.id, source: figure.dataset.source, expected, legend,
      series: colours.size, painted, width: box.width, height: box.height,
      ok: box.width > 0 && box.height > 0 && painted > 0 && colours.size === expected &&
          legend === expected });
  }
  document.getElementById('verdict').textContent = JSON.stringify(verdict);
})();
"#;

/// The whole page.
pub fn render(header: &Header, targets: &[Target], sections: &[(&str, Vec<Figure>)]) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>hotkern report</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>hotkern report</h1>\n"
    );
    header_table(&mut html, header);
    targets_table(&mut html, targets);
    html.push_str("<nav><p>Figures: ");
    let links: Vec<String> = sections
        .iter()
        .flat_map(|(_, figures)| figures)
        .map(|f| format!("<a href=\"#{}\">{}</a>", f.id, escape(&f.title)))
        .collect();
    html.push_str(&links.join(" · "));
    html.push_str("</p></nav>\n");
    for (title, figures) in sections {
        let _ = writeln!(html, "<h2>{}</h2>", escape(title));
        for figure in figures {
            figure_html(&mut html, figure);
        }
    }
    let palette: Vec<String> = (0..PALETTE.len()).map(hex).collect();
    let _ = write!(
        html,
        "<pre id=\"verdict\"></pre>\n<script type=\"application/json\" id=\"palette\">{}</script>\n\
         <script>{CHECK}</script>\n</body>\n</html>\n",
        serde_json::Value::from(palette)
    );
    html
}

fn header_table(html: &mut String, header: &Header) {
    let rows = [
        (
            "machine",
            format!("{} — {} logical CPUs", header.cpu, header.cores),
        ),
        ("load average", header.load.clone()),
        ("QEMU", header.qemu.clone()),
        ("commit", header.commit.clone()),
        ("written", header.date.clone()),
        ("inputs", header.inputs.clone()),
    ];
    html.push_str("<table class=\"header\">\n");
    for (name, value) in rows {
        let _ = writeln!(html, "<tr><th>{name}</th><td>{}</td></tr>", escape(&value));
    }
    html.push_str("</table>\n");
}

fn targets_table(html: &mut String, targets: &[Target]) {
    let met = targets.iter().filter(|t| t.met == Some(true)).count();
    let missed = targets.iter().filter(|t| t.met == Some(false)).count();
    let _ = writeln!(
        html,
        "<h2 id=\"targets\">Targets: {met} met, {missed} missed</h2>\n<table class=\"targets\">"
    );
    for target in targets {
        let (class, word) = match target.met {
            Some(true) => ("met", "✓ met"),
            Some(false) => ("missed", "✗ missed"),
            None => ("", "?"),
        };
        let _ = writeln!(
            html,
            "<tr><td class=\"{class}\">{word}</td><td>{}</td></tr>",
            escape(&target.text)
        );
    }
    if targets.is_empty() {
        html.push_str("<tr><td>no benchmark document stated a target</td></tr>\n");
    }
    html.push_str("</table>\n");
}

fn figure_html(html: &mut String, figure: &Figure) {
    let source = figure.source.file();
    match &figure.plot {
        Ok(plot) => {
            let _ = writeln!(
                html,
                "<figure class=\"figure\" id=\"{}\" data-source=\"{source}\" data-series=\"{}\">\n\
                 <h3>{}</h3>",
                figure.id,
                plot.series.len(),
                escape(&figure.title)
            );
            html.push_str("<ul class=\"legend\">");
            for (i, name) in plot.series.iter().enumerate() {
                let _ = write!(
                    html,
                    "<li><span style=\"background:{}\"></span>{}</li>",
                    hex(i),
                    escape(name)
                );
            }
            html.push_str("</ul>\n");
            // plotters writes an XML declaration-free <svg>, fit for inline use.
            html.push_str(&plot.svg);
        }
        Err(why) => {
            let _ = writeln!(
                html,
                "<figure class=\"figure nodata\" id=\"{}\" data-source=\"{source}\">\n<h3>{}</h3>\n\
                 <p>No data for this figure: <span class=\"why\">{}</span></p>",
                figure.id,
                escape(&figure.title),
                escape(why)
            );
        }
    }
    let _ = writeln!(
        html,
        "<figcaption>{} <em>(from {source})</em></figcaption>\n</figure>",
        escape(&figure.caption)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::inputs::Source;

    #[test]
    fn a_note_says_met_or_missed() {
        assert_eq!(Target::from_note("target x: 2x met").met, Some(true));
        assert_eq!(
            Target::from_note("target: met on a, missed on b").met,
            Some(false)
        );
        assert_eq!(Target::from_note("target: metric 3").met, None);
    }

    #[test]
    fn a_figure_without_data_says_why_and_text_is_escaped() {
        let figure = Figure {
            id: "f",
            title: "a <b>".into(),
            source: Source::Boot,
            caption: "c & d".into(),
            plot: Err("boot.json was not given".into()),
        };
        let html = render(&Header::default(), &[], &[("S", vec![figure])]);
        assert!(html.contains("class=\"figure nodata\" id=\"f\" data-source=\"boot.json\""));
        assert!(html.contains("<span class=\"why\">boot.json was not given</span>"));
        assert!(html.contains("a &lt;b&gt;") && html.contains("c &amp; d"));
        assert!(!html.contains("http"), "the page must fetch nothing");
    }
}
