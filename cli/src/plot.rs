//! A small SVG line chart for `loco bench`: one line per series, x on a log2 axis (thread
//! counts), y linear from zero. Hand-written: a chart of a few lines does not need a plotting
//! crate and its font and image dependencies.

use std::fmt::Write as _;

/// One line of the chart: its name and its (x, y) points.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points, any order (drawn sorted by x).
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 780.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 250.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A readable number for an axis label: 1.2M, 350k, 12.5.
fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The chart as an SVG document.
pub fn svg(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|x| *x > 0.0)
        .collect();
    let (xmin, xmax) = xs
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    let (xmin, xmax) = if xs.is_empty() {
        (1.0, 2.0)
    } else if xmin == xmax {
        (xmin / 2.0, xmax * 2.0)
    } else {
        (xmin, xmax)
    };
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let px = |x: f64| LEFT + (x.log2() - xmin.log2()) / (xmax.log2() - xmin.log2()) * pw;
    let py = |y: f64| TOP + ph - y / ymax * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" font-size="15" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        esc(title)
    );
    // Axes, grid and ticks.
    let _ = writeln!(
        s,
        r#"<path d="M{LEFT} {TOP} V{} H{}" stroke="black" fill="none"/>"#,
        TOP + ph,
        LEFT + pw
    );
    for k in 0..=5 {
        let y = ymax / 1.1 * k as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y0}" y2="{y0}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            py(y) + 4.0,
            short(y),
            y0 = py(y)
        );
    }
    let mut ticks: Vec<f64> = xs.clone();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    for x in ticks {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px(x),
            TOP + ph + 18.0,
            short(x)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 18.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + ph / 2.0,
        esc(y_label)
    );
    // Lines and legend.
    for (i, ser) in series.iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        let mut pts: Vec<(f64, f64)> = ser
            .points
            .iter()
            .copied()
            .filter(|p| p.0 > 0.0 && p.1.is_finite())
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for &(x, y) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                px(x),
                py(y)
            );
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + pw + 16.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            esc(&ser.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Checks, before a benchmark runs, that its plot can be written at `path` (its directory
/// exists and is a directory, and a file can be created or opened for writing there), so that
/// a typo in `--plot`, or a directory where the file cannot be created, is reported at once,
/// not after every configuration was measured. Skipped with `--no-plot`. Leaves no file
/// behind and an existing one unchanged.
pub(crate) fn check_target(path: &std::path::Path, no_plot: bool) -> Result<(), String> {
    if no_plot {
        return Ok(());
    }
    // The plot is SVG whatever the name: an `x.png` would be an SVG file that no image viewer
    // opens as the name says.
    if let Some(ext) = path.extension() {
        if !ext.eq_ignore_ascii_case("svg") {
            return Err(format!(
                "cannot write the plot to {}: plots are SVG; give a name ending in .svg (or \
                 none), or --no-plot",
                path.display()
            ));
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "cannot write the plot to {}: {} is not a directory (give another --plot, or \
             --no-plot)",
            path.display(),
            dir.display()
        ));
    }
    if path.is_dir() {
        return Err(format!(
            "cannot write the plot to {}: it is a directory (give a file name, or --no-plot)",
            path.display()
        ));
    }
    probe(path).map_err(|e| {
        format!(
            "cannot write the plot to {}: {e} (give another --plot, or --no-plot)",
            path.display()
        )
    })
}

/// Opens `path` for writing as the plot will be written, without truncating it: an existing
/// file is left as it is, and one created here is removed again. Something that is not a
/// regular file (`/dev/null`, a FIFO) is not opened: opening a FIFO for writing would block
/// until it has a reader.
fn probe(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => std::fs::OpenOptions::new().write(true).open(path).map(drop),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)?;
            std::fs::remove_file(path)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_one_line_per_series_and_escapes_text() {
        let s = svg(
            "a <title>",
            "threads",
            "ops/s",
            &[
                Series {
                    name: "nlock".into(),
                    points: vec![(1.0, 10.0), (4.0, 30.0), (2.0, 20.0)],
                },
                Series {
                    name: "x & y".into(),
                    points: vec![(1.0, f64::INFINITY), (4.0, 5.0)],
                },
            ],
        );
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("a &lt;title&gt;") && s.contains("x &amp; y"));
        assert!(!s.contains("inf") && !s.contains("NaN"));
    }

    /// The check before a benchmark leaves no file behind, and an existing plot unchanged.
    #[test]
    fn checking_a_target_leaves_no_trace() {
        let dir = std::env::temp_dir().join(format!("loco-plot-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let new = dir.join("new.svg");
        check_target(&new, false).unwrap();
        assert!(!new.exists());
        let old = dir.join("old.svg");
        std::fs::write(&old, "kept").unwrap();
        check_target(&old, false).unwrap();
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "kept");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn one_point_and_no_points_still_draw() {
        for pts in [vec![(8.0, 3.0)], vec![]] {
            let s = svg(
                "t",
                "x",
                "y",
                &[Series {
                    name: "a".into(),
                    points: pts,
                }],
            );
            assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
        }
    }
}
