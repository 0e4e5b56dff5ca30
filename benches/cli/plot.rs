//! `--plot out.png`: bus bandwidth and roofline fraction against message size, one line per
//! collective, so a user can look rather than read.

use plotters::prelude::*;
use std::sync::Once;

/// One line of a plot: a label and (size in bytes, busbw GB/s, roofline fraction) points.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points, in increasing size.
    pub points: Vec<(u64, f64, f64)>,
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // DejaVu Sans (free license, benches/assets/DejaVuSans.LICENSE): plots render the same
        // on machines with no system fonts.
        let font: &'static [u8] = include_bytes!("../assets/DejaVuSans.ttf");
        plotters::style::register_font("sans-serif", FontStyle::Normal, font)
            .unwrap_or_else(|_| panic!("the embedded font is a valid TrueType file"));
    });
}

fn size_label(bytes: f64) -> String {
    let b = bytes.round() as u64;
    match b {
        b if b >= 1 << 30 => format!("{}G", b >> 30),
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

/// Writes a 1200×900 PNG: busbw (top) and roofline fraction (bottom) against size (log scale).
pub fn write_png(path: &std::path::Path, title: &str, series: &[Series]) -> Result<(), String> {
    register_font();
    let root = BitMapBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(450);
    let sizes = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0.max(1) as f64));
    let (lo, hi) = sizes.fold((f64::MAX, 1.0f64), |(lo, hi), s| (lo.min(s), hi.max(s)));
    let lo = if lo == f64::MAX { 1.0 } else { lo };
    let max_bw = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let max_roof = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.2))
        .fold(1.0f64, f64::max)
        * 1.1;
    for (area, (caption, y_desc, y_max, pick)) in [top, bottom].into_iter().zip([
        (title.to_string(), "busbw (GB/s)", max_bw, 1usize),
        (
            "fraction of the device-to-device copy roofline".to_string(),
            "roofline fraction",
            max_roof,
            2usize,
        ),
    ]) {
        let mut chart = ChartBuilder::on(&area)
            .caption(caption, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("message size (bytes)")
            .y_desc(y_desc)
            .x_label_formatter(&|x| size_label(*x))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let points: Vec<(f64, f64)> = s
                .points
                .iter()
                .map(|p| (p.0.max(1) as f64, if pick == 1 { p.1 } else { p.2 }))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(s.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 3, color.filled())),
                )
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_png() {
        let path =
            std::env::temp_dir().join(format!("purlin-plot-test-{}.png", std::process::id()));
        let series = vec![Series {
            label: "all_reduce x8".into(),
            points: vec![
                (1024, 1.0, 0.1),
                (1 << 20, 100.0, 0.5),
                (1 << 30, 300.0, 0.8),
            ],
        }];
        write_png(&path, "test", &series).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        std::fs::remove_file(path).ok();
    }
}
