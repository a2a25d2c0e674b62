//! `--plot FILE.svg` and `zcx plot`: latency and bandwidth against message size, one line per
//! test and source (zcx, or UCX when the comparison script supplies its numbers), on log-log
//! axes. SVG only: text is emitted as SVG `<text>` elements, so no font library is needed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use plotters::prelude::*;

use crate::perf::report::Report;
use crate::perf::scale_plot;

/// Options of `zcx plot`.
#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// CSV with a header naming at least `test` and `size`, and `latency_us` and/or
    /// `bandwidth_MBps` (what `zcx perf --csv` and `scripts/compare-ucx.sh` write); an optional
    /// `source` column (e.g. zcx, ucx) draws one line per source. A CSV with an `endpoints`
    /// column (`scripts/scale-curve.sh`) is drawn against the endpoint count instead.
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
}

impl Series {
    /// The points of a `zcx perf` run (latency: the `latency_us` figure).
    pub fn from_reports(reports: &[Report], source: &str) -> Series {
        let mut series = Series::default();
        for report in reports {
            let spec = report.spec();
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
                series.latency.entry(key.clone()).or_default().push((bytes.max(1.0), v));
            } else if let Some(v) = value(bw) {
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

/// Draws the latency panel (left) and the bandwidth panel (right) into an SVG file.
pub fn draw(series: &Series, path: &Path) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(640);
    panel(&left, "Latency", "latency (us)", &series.latency).map_err(|e| fail(&e))?;
    panel(&right, "Bandwidth", "bandwidth (MB/s, MB = 1e6 B)", &series.bandwidth).map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn panel(
    area: &Area<'_>,
    title: &str,
    y_label: &str,
    lines: &BTreeMap<(String, String), Vec<(f64, f64)>>,
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
    for (i, ((source, test), points)) in lines.iter().enumerate() {
        let mut points = points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let color = Palette99::pick(i).to_rgba();
        // UCX's lines are dashed-looking (points only), zcx's solid with points.
        let style = ShapeStyle { color, filled: true, stroke_width: 2 };
        let label = format!("{test} ({source})");
        if source.eq_ignore_ascii_case("zcx") {
            chart
                .draw_series(LineSeries::new(points.clone(), style))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, style)))?;
        } else {
            let thin = ShapeStyle { stroke_width: 1, ..style };
            chart
                .draw_series(LineSeries::new(points.clone(), thin))?
                .label(label)
                .legend(move |(x, y)| Cross::new((x + 10, y), 4, thin));
            chart.draw_series(points.iter().map(|&p| Cross::new(p, 5, thin)))?;
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
    }
}
