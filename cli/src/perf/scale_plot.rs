//! `zcx plot` of a many-endpoints CSV (`scripts/scale-curve.sh`): latency per message and
//! memory per endpoint against the number of endpoints, one line per transport, on log axes (the
//! counts double and quadruple: 1, 16, 256, 1024).

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

/// Lines to draw: transport → (endpoints, value), one map per panel.
#[derive(Debug, Default, PartialEq)]
pub struct ScaleSeries {
    /// Latency per message, microseconds.
    pub latency: BTreeMap<String, Vec<(f64, f64)>>,
    /// Resident memory per endpoint, KiB, both sides together.
    pub rss: BTreeMap<String, Vec<(f64, f64)>>,
}

/// Whether a CSV's header line is a many-endpoints CSV's (it has an `endpoints` column).
pub fn is_scale_csv(text: &str) -> bool {
    first_line(text).is_some_and(|header| header.split(',').any(|h| h.trim() == "endpoints"))
}

fn first_line(text: &str) -> Option<&str> {
    text.lines().find(|l| !l.trim().is_empty() && !l.starts_with('#'))
}

impl ScaleSeries {
    /// Reads the CSV: columns `transport`, `endpoints`, `latency_us`, and optionally
    /// `client_rss_kib` and `server_rss_kib` (rows at one endpoint have no memory figure).
    pub fn from_csv(text: &str) -> Result<ScaleSeries, String> {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#'));
        let header: Vec<&str> =
            lines.next().ok_or("the CSV file is empty")?.split(',').map(str::trim).collect();
        let col = |name: &str| header.iter().position(|h| *h == name);
        let missing = |name: &str| format!("the CSV has no `{name}` column");
        let transport = col("transport").ok_or_else(|| missing("transport"))?;
        let endpoints = col("endpoints").ok_or_else(|| missing("endpoints"))?;
        let latency = col("latency_us").ok_or_else(|| missing("latency_us"))?;
        let (client_rss, server_rss) = (col("client_rss_kib"), col("server_rss_kib"));
        let mut series = ScaleSeries::default();
        for (i, line) in lines.enumerate() {
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            let number = |c: usize| cells.get(c).and_then(|v| v.parse::<f64>().ok());
            let n = number(endpoints)
                .filter(|n| *n >= 1.0)
                .ok_or_else(|| format!("row {}: bad endpoint count", i + 2))?;
            let name = cells.get(transport).copied().unwrap_or("").to_owned();
            if let Some(us) = number(latency).filter(|v| *v > 0.0) {
                series.latency.entry(name.clone()).or_default().push((n, us));
            }
            if let (Some(c), Some(s)) = (client_rss.and_then(number), server_rss.and_then(number)) {
                if c + s > 0.0 {
                    series.rss.entry(name).or_default().push((n, c + s));
                }
            }
        }
        if series.latency.is_empty() {
            return Err("the CSV has no positive latency".into());
        }
        Ok(series)
    }
}

/// Draws latency (left) and memory per endpoint (right) against the endpoint count.
pub fn draw(series: &ScaleSeries, path: &Path) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("cannot draw {}: {e}", path.display());
    let root = SVGBackend::new(path, (1280, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (left, right) = root.split_horizontally(640);
    panel(
        &left,
        "8 B tag ping-pong, round-robin over N endpoints",
        "latency per message (us, one-way)",
        &series.latency,
    )
    .map_err(|e| fail(&e))?;
    panel(&right, "Memory per endpoint", "resident KiB per endpoint (client + server)", &series.rss)
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn panel(
    area: &Area<'_>,
    title: &str,
    y_label: &str,
    lines: &BTreeMap<String, Vec<(f64, f64)>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let (mut x_max, mut y_min, mut y_max) = (1.0f64, f64::MAX, f64::MIN);
    for &(x, y) in lines.values().flatten() {
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    if y_min > y_max {
        (y_min, y_max) = (1.0, 10.0);
    }
    let (y_min, y_max) = (y_min / 2.0, (y_max * 2.0).max(y_min * 4.0));
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d((0.7..x_max * 1.5).log_scale(), (y_min..y_max).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("endpoints (N)")
        .y_desc(y_label)
        .x_label_formatter(&|x| format!("{}", x.round()))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()?;
    for (i, (transport, points)) in lines.iter().enumerate() {
        let mut points = points.clone();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let style = ShapeStyle { color: Palette99::pick(i).to_rgba(), filled: true, stroke_width: 2 };
        chart
            .draw_series(LineSeries::new(points.clone(), style))?
            .label(format!("zcx {transport}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, style)))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "transport,endpoints,latency_us,p99_us,client_rss_kib,server_rss_kib\n\
                       shm,1,0.25,0.3,,\nshm,16,0.3,0.4,9.5,10.5\ntcp,1,5.0,9,,\ntcp,16,5.5,11,40,44\n";

    #[test]
    fn rows_become_one_line_per_transport_and_panel() {
        assert!(is_scale_csv(CSV));
        assert!(!is_scale_csv("test,size,latency_us\ntag_lat,8,1\n"));
        let s = ScaleSeries::from_csv(CSV).unwrap();
        assert_eq!(s.latency["shm"], vec![(1.0, 0.25), (16.0, 0.3)]);
        assert_eq!(s.latency["tcp"], vec![(1.0, 5.0), (16.0, 5.5)]);
        assert_eq!(s.rss["shm"], vec![(16.0, 20.0)], "rows without memory figures are skipped");
        assert!(ScaleSeries::from_csv("transport,endpoints\nshm,1\n").is_err());
        assert!(ScaleSeries::from_csv("transport,endpoints,latency_us\nshm,0,1\n").is_err());
    }

    #[test]
    fn an_svg_is_written_with_both_panels() {
        let path = std::env::temp_dir().join(format!("zcx-scale-plot-test-{}.svg", std::process::id()));
        draw(&ScaleSeries::from_csv(CSV).unwrap(), &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(
            svg.starts_with("<svg") && svg.contains("zcx shm") && svg.contains("Memory per endpoint"),
            "{svg:.300}"
        );
    }
}
