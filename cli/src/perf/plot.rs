//! `--plot FILE.svg` and `zcx plot`: latency and bandwidth of each test and source (zcx, or UCX
//! when the comparison script supplies its numbers), a latency panel and a bandwidth panel. SVG
//! only: text is emitted as SVG `<text>` elements, so no font library is needed.
//!
//! What a panel draws depends on what its series (one per test and source) hold:
//!
//! - **A sweep** (any series with two sizes or more): curves against message size on log-log
//!   axes, one per series; a series with a single size in such a panel is a large marker.
//! - **One size per series** (what `scripts/compare-ucx.sh` writes without `SWEEP=1`): grouped
//!   horizontal bars, one group per test (and size), one bar per source, each labelled with its
//!   value; the value axis is logarithmic when the values span more than a factor of 20 (a
//!   TCP get next to a shared-memory tag message), else linear from zero.
//!
//! The two panels decide apart: a CSV whose latency tests were swept and whose bandwidth tests
//! ran at one size draws curves on the left and bars on the right.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Args;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::perf::report::Report;
use crate::perf::scale_plot;

/// Options of `zcx plot`.
#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// CSV with a header naming at least `test` and `size`, and `latency_us` and/or
    /// `bandwidth_MBps` (what `zcx perf --csv` and `scripts/compare-ucx.sh` write); an optional
    /// `source` column (e.g. zcx, ucx) draws one line or bar per source. Where every test has
    /// a single size, each panel is grouped bars (a bar per source) instead of curves. A CSV
    /// with an `endpoints` column (`scripts/scale-curve.sh`) is drawn against the endpoint count.
    #[arg(long, value_name = "FILE.csv")]
    pub input: PathBuf,
    /// The SVG file to write.
    #[arg(long, value_name = "FILE.svg")]
    pub out: PathBuf,
}

/// The points to draw: (source, test) → (size, value) for each panel.
#[derive(Default, Debug)]
pub struct Series {
    /// Latency in microseconds.
    pub latency: BTreeMap<(String, String), Vec<(f64, f64)>>,
    /// Bandwidth in MB/s.
    pub bandwidth: BTreeMap<(String, String), Vec<(f64, f64)>>,
    /// Test names in the order they first appear (the order bars are drawn in).
    pub tests: Vec<String>,
}

impl Series {
    /// Remembers `test`'s place in the order of first appearance.
    fn saw(&mut self, test: &str) {
        if !self.tests.iter().any(|t| t == test) {
            self.tests.push(test.to_owned());
        }
    }

    /// The points of a `zcx perf` run (latency: the `latency_us` figure).
    pub fn from_reports(reports: &[Report], source: &str) -> Series {
        let mut series = Series::default();
        for report in reports {
            let spec = report.spec();
            series.saw(spec.kind.name());
            let key = (source.to_owned(), spec.kind.name().to_owned());
            match report {
                Report::Latency(l) => {
                    series.latency.entry(key).or_default().push((spec.size as f64, l.median_us()))
                }
                Report::Bandwidth(b) => {
                    series.bandwidth.entry(key).or_default().push((spec.size as f64, b.bytes_per_sec() / 1e6))
                }
            }
        }
        series
    }

    /// The points of a CSV file (see [`PlotArgs::input`]); rows with empty or non-positive values
    /// are skipped.
    pub fn from_csv(text: &str) -> Result<Series, String> {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
        let header: Vec<&str> =
            lines.next().ok_or("the CSV file is empty")?.split(',').map(str::trim).collect();
        let col = |name: &str| header.iter().position(|h| *h == name);
        let test = col("test").ok_or("the CSV has no `test` column")?;
        let size = col("size").ok_or("the CSV has no `size` column")?;
        let (source, lat, bw) = (col("source"), col("latency_us"), col("bandwidth_MBps"));
        if lat.is_none() && bw.is_none() {
            return Err("the CSV has neither a `latency_us` nor a `bandwidth_MBps` column".into());
        }
        let mut series = Series::default();
        for (i, line) in lines.enumerate() {
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            let cell = |c: usize| cells.get(c).copied().unwrap_or("");
            let bytes: f64 =
                cell(size).parse().map_err(|_| format!("row {}: bad size {:?}", i + 2, cell(size)))?;
            let key = (source.map_or("zcx", cell).to_owned(), cell(test).to_owned());
            let value = |c: Option<usize>| c.and_then(|c| cell(c).parse::<f64>().ok()).filter(|v| *v > 0.0);
            if let Some(v) = value(lat) {
                series.saw(&key.1);
                series.latency.entry(key.clone()).or_default().push((bytes.max(1.0), v));
            } else if let Some(v) = value(bw) {
                series.saw(&key.1);
                series.bandwidth.entry(key).or_default().push((bytes.max(1.0), v));
            }
        }
        if series.latency.is_empty() && series.bandwidth.is_empty() {
            return Err("the CSV has no positive latency or bandwidth values".into());
        }
        Ok(series)
    }
}

/// `zcx plot`: reads the CSV and draws it.
pub fn plot_csv(args: &PlotArgs) -> Result<(), String> {
    let text = std::fs::read_to_string(&args.input)
        .map_err(|e| format!("cannot read {}: {e}", args.input.display()))?;
    if scale_plot::is_scale_csv(&text) {
        let series =
            scale_plot::ScaleSeries::from_csv(&text).map_err(|e| format!("{}: {e}", args.input.display()))?;
        return scale_plot::draw(&series, &args.out);
    }
    let series = Series::from_csv(&text).map_err(|e| format!("{}: {e}", args.input.display()))?;
    draw(&series, &args.out)
}

/// Lines of one panel: (source, test) → points.
type Lines = BTreeMap<(String, String), Vec<(f64, f64)>>;

/// Width of one panel, in pixels.
const PANEL_WIDTH: u32 = 640;
/// Height of the picture when no panel needs more.
const MIN_HEIGHT: u32 = 560;
/// Height of one bar, and the gap after each group of bars, in pixels.
const BAR_PX: u32 = 22;
const GROUP_GAP_PX: u32 = 16;
/// Room for the caption, the value axis and the legend row of a bar panel, in pixels.
const BAR_PANEL_FRAME_PX: u32 = 150;

/// Draws the latency panel (left) and the bandwidth panel (right) into an SVG file.
pub fn draw(series: &Series, path: &Path) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let height = [&series.latency, &series.bandwidth]
        .into_iter()
        .filter(|lines| is_single_size(lines))
        .map(|lines| {
            let (groups, sources) =
                (bar_groups(lines, &series.tests).len() as u32, sources(lines).len() as u32);
            BAR_PANEL_FRAME_PX + groups * (sources * BAR_PX + GROUP_GAP_PX)
        })
        .fold(MIN_HEIGHT, u32::max);
    let root = SVGBackend::new(path, (2 * PANEL_WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(PANEL_WIDTH);
    panel(&left, "Latency", "latency (us)", &series.latency, &series.tests).map_err(|e| fail(&e))?;
    panel(&right, "Bandwidth", "bandwidth (MB/s, MB = 1e6 B)", &series.bandwidth, &series.tests)
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// Whether every series of a non-empty panel holds a single message size.
fn is_single_size(lines: &Lines) -> bool {
    !lines.is_empty()
        && lines.values().all(|points| {
            let sizes: BTreeSet<u64> = points.iter().map(|p| p.0.to_bits()).collect();
            sizes.len() == 1
        })
}

fn panel(
    area: &Area<'_>,
    title: &str,
    value_label: &str,
    lines: &Lines,
    tests: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    if is_single_size(lines) {
        bars(area, title, value_label, lines, tests)
    } else {
        curves(area, title, value_label, lines, tests)
    }
}

/// Colours that stay readable on white, zcx's first; more series than colours repeat them.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(230, 97, 1),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(90, 90, 90),
    RGBColor(160, 150, 20),
    RGBColor(23, 160, 180),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// The sources of a panel, zcx first, then the others by name.
fn sources(lines: &Lines) -> Vec<String> {
    let mut all: Vec<String> =
        lines.keys().map(|(source, _)| source.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    all.sort_by_key(|s| (!s.eq_ignore_ascii_case("zcx"), s.clone()));
    all
}

/// The groups of a bar panel, (test, size), in the order the tests first appear (by name for
/// a test not in `tests`), each test's sizes ascending.
fn bar_groups(lines: &Lines, tests: &[String]) -> Vec<(String, f64)> {
    let place = |test: &str| tests.iter().position(|t| t == test).unwrap_or(usize::MAX);
    let mut groups: Vec<(String, f64)> = lines
        .iter()
        .flat_map(|((_, test), points)| points.iter().map(move |p| (test.clone(), p.0)))
        .collect();
    groups.sort_by(|a, b| (place(&a.0), &a.0).cmp(&(place(&b.0), &b.0)).then(a.1.total_cmp(&b.1)));
    groups.dedup();
    groups
}

/// 1234.5 → "1234", 12.34 → "12.3", 0.1234 → "0.123": three significant digits or whole numbers.
fn value_label(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A value on an axis, without trailing zeros or the residue of float steps: "5000", not
/// "5000.0"; "0.15", not "0.15000000000000002".
fn axis_number(x: f64) -> String {
    let text = format!("{x:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Grouped horizontal bars: one group per (test, size), top to bottom in test order, one bar
/// per source inside it, each labelled with its value.
fn bars(
    area: &Area<'_>,
    title: &str,
    value_label_text: &str,
    lines: &Lines,
    tests: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let groups = bar_groups(lines, tests);
    let sources = sources(lines);
    let values: Vec<f64> = lines.values().flatten().map(|p| p.1).collect();
    let (lo, hi) = values.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let n = groups.len();
    // Group i is centred on y = n - 1 - i (the first on top); the extra unit above the first
    // group holds the legend.
    let y_range = -0.5..(n as f64 + 0.5);
    // Text of a group: the test, and its size when the CSV has several for it.
    let group_label = |i: usize| {
        let (test, size) = &groups[i];
        if groups.iter().filter(|g| g.0 == *test).count() > 1 {
            format!("{test} {}", human_size(*size))
        } else {
            test.clone()
        }
    };
    let label_width = (0..n).map(|i| group_label(i).len()).max().unwrap_or(0) as u32 * 8 + 16;
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(label_width);
    // Room on the right of the longest bar for its label.
    let log = hi / lo > 20.0;
    let group_of = |y: f64| {
        let i = n as f64 - 1.0 - y.round();
        ((y - y.round()).abs() < 1e-6 && i >= 0.0 && (i as usize) < n).then_some(i as usize)
    };
    let y_labels = |y: &f64| group_of(*y).map(group_label).unwrap_or_default();
    if log {
        let mut chart = builder.build_cartesian_2d((lo / 2.0..hi * 4.0).log_scale(), y_range)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n + 2)
            .y_label_formatter(&y_labels)
            .x_desc(format!("{value_label_text}, log scale"))
            .x_label_formatter(&|x| axis_number(*x))
            .label_style(("sans-serif", 14))
            .draw()?;
        draw_bars(&mut chart, &groups, &sources, lines, lo / 2.0)?;
    } else {
        let mut chart = builder.build_cartesian_2d(0.0..hi * 1.3, y_range)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n + 2)
            .y_label_formatter(&y_labels)
            .x_desc(value_label_text)
            .x_label_formatter(&|x| axis_number(*x))
            .label_style(("sans-serif", 14))
            .draw()?;
        draw_bars(&mut chart, &groups, &sources, lines, 0.0)?;
    }
    Ok(())
}

/// The bars of [`bars`] on `chart`, each from `base` to its value, with the legend.
fn draw_bars<'a, X>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    groups: &[(String, f64)],
    sources: &[String],
    lines: &Lines,
    base: f64,
) -> Result<(), Box<dyn std::error::Error>>
where
    X: Ranged<ValueType = f64>,
{
    let n = groups.len() as f64;
    let per_bar = 0.8 / sources.len().max(1) as f64;
    for (k, source) in sources.iter().enumerate() {
        let style = color(k).filled();
        // (value, top and bottom of the bar) of each group this source has a value in.
        let bars: Vec<(f64, f64, f64)> = groups
            .iter()
            .enumerate()
            .filter_map(|(i, (test, size))| {
                let points = lines.get(&(source.clone(), test.clone()))?;
                let value = points.iter().find(|p| p.0 == *size)?.1;
                let top = n - 1.0 - i as f64 + 0.4 - k as f64 * per_bar;
                Some((value, top, top - per_bar))
            })
            .collect();
        chart
            .draw_series(
                bars.iter().map(|&(v, top, bottom)| Rectangle::new([(base, top), (v, bottom)], style)),
            )?
            .label(source.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], style));
        let font = ("sans-serif", 13).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
        chart.draw_series(bars.iter().map(|&(v, top, bottom)| {
            EmptyElement::at((v, (top + bottom) / 2.0)) + Text::new(value_label(v), (4, 0), font.clone())
        }))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

/// Curves against message size on log-log axes, a colour per test: solid lines with dots for
/// zcx, thin lines with crosses for other sources; a series of one point is a large marker.
fn curves(
    area: &Area<'_>,
    title: &str,
    y_label: &str,
    lines: &Lines,
    tests: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let points = lines.values().flatten();
    let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    if lines.is_empty() {
        (x_min, x_max, y_min, y_max) = (8.0, 4.0 * 1024.0 * 1024.0, 1.0, 10.0);
    }
    // Some room around the data on log axes, and never an empty range.
    let (x_min, x_max) = (x_min / 1.5, (x_max * 1.5).max(x_min * 4.0));
    let (y_min, y_max) = (y_min / 2.0, (y_max * 2.0).max(y_min * 4.0));
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(y_label)
        .x_label_formatter(&|x| human_size(*x))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()?;
    for ((source, test), points) in lines {
        let mut points = points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        // One colour per test, so zcx's and UCX's lines of a test match; the marker and the
        // line's weight tell the sources apart.
        let place = tests.iter().position(|t| t == test).unwrap_or(tests.len());
        let style = ShapeStyle { color: color(place).to_rgba(), filled: true, stroke_width: 2 };
        let label = format!("{test} ({source})");
        // A lone point is not a line: a marker big enough to see.
        let radius = if points.len() == 1 { 6 } else { 3 };
        if source.eq_ignore_ascii_case("zcx") {
            chart
                .draw_series(LineSeries::new(points.clone(), style))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart.draw_series(points.iter().map(|&p| Circle::new(p, radius, style)))?;
        } else {
            let thin = ShapeStyle { stroke_width: 1, ..style };
            let cross = ShapeStyle { stroke_width: 2, ..style };
            chart
                .draw_series(LineSeries::new(points.clone(), thin))?
                .label(label)
                .legend(move |(x, y)| Cross::new((x + 10, y), 4, cross));
            chart.draw_series(points.iter().map(|&p| Cross::new(p, radius + 2, cross)))?;
        }
    }
    if !lines.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    Ok(())
}

/// 8 → "8", 4096 → "4K", 4194304 → "4M".
fn human_size(bytes: f64) -> String {
    let b = bytes.round() as u64;
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_become_lines_per_source_and_test() {
        let csv = "source,test,size,latency_us,bandwidth_MBps\nzcx,tag_lat,8,4.5,\nucx,tag_lat,8,3.9,\nzcx,tag_bw,1048576,,5000\n";
        let s = Series::from_csv(csv).unwrap();
        assert_eq!(s.latency.len(), 2);
        assert_eq!(s.bandwidth[&("zcx".into(), "tag_bw".into())], vec![(1048576.0, 5000.0)]);
        assert!(Series::from_csv("a,b\n1,2\n").is_err());
    }

    #[test]
    fn an_svg_is_written_with_text_elements() {
        let csv = "test,size,latency_us,bandwidth_MBps\ntag_lat,8,4.5,\ntag_lat,64,4.9,\ntag_bw,65536,,900\ntag_bw,1048576,,5000\n";
        let path = std::env::temp_dir().join(format!("zcx-plot-test-{}.svg", std::process::id()));
        draw(&Series::from_csv(csv).unwrap(), &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(
            svg.starts_with("<svg") && svg.contains("<text") && svg.contains("tag_bw (zcx)"),
            "{svg:.300}"
        );
        assert_eq!(human_size(4194304.0), "4M");
        assert_eq!(human_size(8.0), "8");
        assert_eq!(axis_number(5000.0), "5000");
        assert_eq!(axis_number(0.1 + 0.05), "0.15");
        assert_eq!(axis_number(0.0), "0");
    }

    /// The SVG `zcx plot` draws of `csv`.
    fn svg_of(csv: &str, name: &str) -> String {
        let path = std::env::temp_dir().join(format!("zcx-plot-{name}-{}.svg", std::process::id()));
        draw(&Series::from_csv(csv).unwrap(), &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        svg
    }

    /// `<rect` elements filled with `color`.
    fn rects_filled(svg: &str, color: RGBColor) -> usize {
        let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", color.0, color.1, color.2);
        svg.split("<rect").skip(1).filter(|r| r.split('>').next().is_some_and(|a| a.contains(&fill))).count()
    }

    /// `<polyline` elements stroked with `color` (axes and ticks are black).
    fn lines_stroked(svg: &str, color: RGBColor) -> usize {
        let stroke = format!("stroke=\"#{:02X}{:02X}{:02X}\"", color.0, color.1, color.2);
        svg.split("<polyline")
            .skip(1)
            .filter(|l| l.split('>').next().is_some_and(|a| a.contains(&stroke)))
            .count()
    }

    /// The text of every `<text>` element.
    fn texts(svg: &str) -> Vec<&str> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim()))
            .collect()
    }

    /// What `scripts/compare-ucx.sh` writes: one size per test, a row per source and test.
    const ONE_SIZE: &str = "source,test,size,transport,latency_us,bandwidth_MBps
ucx,tag_lat,8,posix,0.105,
zcx,tag_lat,8,posix,0.117,
ucx,get_lat,8,posix,812.5,
zcx,get_lat,8,posix,7.25,
ucx,tag_bw,1048576,posix,,9000
zcx,tag_bw,1048576,posix,,30150
ucx,am_bw,1048576,posix,,9500
";

    #[test]
    fn one_size_per_test_draws_a_labelled_bar_per_source_and_test() {
        let svg = svg_of(ONE_SIZE, "bars");
        // A bar per row, plus one legend swatch per source and panel.
        assert_eq!(rects_filled(&svg, color(0)), 3 + 2, "zcx's bars");
        assert_eq!(rects_filled(&svg, color(1)), 4 + 2, "ucx's bars");
        assert!(svg.matches("<rect").count() >= ONE_SIZE.lines().count() - 1);
        assert_eq!(lines_stroked(&svg, color(0)) + lines_stroked(&svg, color(1)), 0, "bars, not lines");
        let texts = texts(&svg);
        for text in ["tag_lat", "get_lat", "tag_bw", "am_bw", "zcx", "ucx"] {
            assert!(texts.contains(&text), "{text} missing from {texts:?}");
        }
        // Every value is written beside its bar.
        for value in ["0.105", "0.117", "812", "7.25", "9000", "30150", "9500"] {
            assert!(texts.contains(&value), "{value} missing from {texts:?}");
        }
        // Latency spans four orders of magnitude: a log axis, said so.
        assert!(svg.contains("latency (us), log scale"));
        assert!(!svg.contains("bandwidth (MB/s, MB = 1e6 B), log scale"), "bandwidth spans 3.4x: linear");
    }

    #[test]
    fn a_sweep_still_draws_curves_and_a_mixed_csv_decides_per_panel() {
        let sweep = "source,test,size,latency_us,bandwidth_MBps
zcx,tag_lat,8,0.12,
zcx,tag_lat,64,0.15,
ucx,tag_lat,8,0.10,
ucx,tag_lat,64,0.13,
zcx,tag_bw,65536,,9000
zcx,tag_bw,1048576,,30000
";
        let svg = svg_of(sweep, "sweep");
        // A colour per test: a line per source, and zcx's legend line (UCX's is a cross).
        assert_eq!(lines_stroked(&svg, color(0)), 2 + 1, "tag_lat's lines");
        assert_eq!(lines_stroked(&svg, color(1)), 1 + 1, "tag_bw's line");
        assert_eq!(rects_filled(&svg, color(0)) + rects_filled(&svg, color(1)), 0, "no bars");
        // Latency swept, bandwidth at one size: curves on the left, bars on the right.
        let mixed = "source,test,size,latency_us,bandwidth_MBps
zcx,tag_lat,8,0.12,
zcx,tag_lat,64,0.15,
zcx,tag_bw,1048576,,30000
ucx,tag_bw,1048576,,9000
";
        let svg = svg_of(mixed, "mixed");
        assert!(lines_stroked(&svg, color(0)) == 1 + 1 && svg.contains("tag_lat (zcx)"));
        assert_eq!(rects_filled(&svg, color(0)), 1 + 1, "zcx's tag_bw bar and its swatch");
    }
}
