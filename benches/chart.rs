//! Draws benches/proxies.py's results as an SVG: one group of bars per scenario, one bar
//! per proxy, each the proxy's figure as a multiple of direct (or of bubblewrap, for
//! start-up), with the line at 1 and the target netbox is held to.
//!
//! `chart RESULTS.json OUT.svg` (benches/proxies.sh runs it). The JSON: `{"title": ...,
//! "subtitle": ..., "proxies": [names], "scenarios": [{"name", "better": "higher" |
//! "lower", "target": number | null, "ratios": {proxy: number}}]}`.

use std::process::ExitCode;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;

const WIDTH: u32 = 960;
const LEFT: i32 = 330;
const RIGHT: i32 = 40;
const TOP: i32 = 70;
const BAR: i32 = 16;
const GROUP_GAP: i32 = 22;
const COLOURS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xaa, 0xaa, 0xaa),
    RGBColor(0x77, 0x77, 0x77),
    RGBColor(0xd6, 0x9e, 0x2e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
];

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; the two paths are the arguments that are not flags.
    let paths: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let [input, output] = paths.as_slice() else {
        eprintln!("usage: chart RESULTS.json OUT.svg");
        return ExitCode::from(2);
    };
    match draw(input, output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chart: {e}");
            ExitCode::FAILURE
        }
    }
}

fn draw(input: &str, output: &str) -> Result<(), Box<dyn std::error::Error>> {
    let results: Value = serde_json::from_str(&std::fs::read_to_string(input)?)?;
    let proxies: Vec<&str> = results["proxies"]
        .as_array()
        .ok_or("no proxies")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let scenarios = results["scenarios"].as_array().ok_or("no scenarios")?;
    let group_height = |s: &Value| {
        let bars = proxies.iter().filter(|p| s["ratios"][**p].is_f64()).count();
        i32::try_from(bars).unwrap_or(0) * BAR + GROUP_GAP
    };
    let height = TOP + scenarios.iter().map(group_height).sum::<i32>() + 50;
    let most = scenarios
        .iter()
        .flat_map(|s| {
            let target = s["target"].as_f64();
            proxies
                .iter()
                .filter_map(move |p| s["ratios"][*p].as_f64())
                .chain(target)
        })
        .fold(1.0_f64, f64::max)
        .min(8.0);
    let scale = f64::from(i32::try_from(WIDTH).unwrap_or(960) - LEFT - RIGHT) / most;
    // The ratio is clamped to the scale, so the product is within the chart's width.
    #[allow(clippy::cast_possible_truncation)]
    let x_of = |ratio: f64| LEFT + (ratio.clamp(0.0, most) * scale).round() as i32;

    let root = SVGBackend::new(output, (WIDTH, u32::try_from(height)?)).into_drawing_area();
    root.fill(&WHITE)?;
    let font = |size: i32| ("sans-serif", size).into_font();
    let title = results["title"].as_str().unwrap_or("proxy overhead");
    root.draw_text(title, &font(18).color(&BLACK), (12, 10))?;
    let subtitle = results["subtitle"].as_str().unwrap_or("");
    root.draw_text(subtitle, &font(12).color(&RGBColor(90, 90, 90)), (12, 34))?;
    // The legend, one swatch per proxy.
    let mut x = LEFT;
    for (i, proxy) in proxies.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        root.draw(&Rectangle::new([(x, 52), (x + 12, 62)], colour.filled()))?;
        root.draw_text(proxy, &font(12).color(&BLACK), (x + 16, 51))?;
        x += 24 + 8 * i32::try_from(proxy.len()).unwrap_or(8);
    }

    let mut y = TOP;
    for scenario in scenarios {
        let name = scenario["name"].as_str().unwrap_or("");
        let lower = scenario["better"] == "lower";
        let label = format!(
            "{name} ({} is better)",
            if lower { "lower" } else { "higher" }
        );
        let right_aligned = font(12).color(&BLACK).pos(Pos::new(HPos::Right, VPos::Top));
        root.draw_text(&label, &right_aligned, (LEFT - 8, y + 2))?;
        let top = y;
        for (i, proxy) in proxies.iter().enumerate() {
            let Some(ratio) = scenario["ratios"][*proxy].as_f64() else {
                continue;
            };
            let colour = COLOURS[i % COLOURS.len()];
            root.draw(&Rectangle::new(
                [(LEFT, y + 2), (x_of(ratio), y + BAR - 2)],
                colour.filled(),
            ))?;
            if ratio > most {
                // Off the scale: said inside the bar's end, in white, where there is room.
                let shown = format!("{ratio:.2}x (off the scale)");
                let inside = font(11).color(&WHITE).pos(Pos::new(HPos::Right, VPos::Top));
                root.draw_text(&shown, &inside, (x_of(ratio) - 4, y + 2))?;
            } else {
                let shown = format!("{ratio:.2}x");
                root.draw_text(&shown, &font(11).color(&BLACK), (x_of(ratio) + 4, y + 2))?;
            }
            y += BAR;
        }
        if let Some(target) = scenario["target"].as_f64() {
            let at = x_of(target);
            let red = RGBColor(0xd6, 0x27, 0x28);
            root.draw(&PathElement::new(
                vec![(at, top), (at, y)],
                red.stroke_width(2),
            ))?;
            let text = format!("target {target}x");
            root.draw_text(&text, &font(10).color(&red), (at + 3, top - 11))?;
        }
        y += GROUP_GAP;
    }
    // The line at 1 (direct, or bubblewrap), and the scale under it all.
    let one = x_of(1.0);
    root.draw(&PathElement::new(
        vec![(one, TOP - 4), (one, y - GROUP_GAP + 4)],
        BLACK.stroke_width(1),
    ))?;
    let mut tick = 0.0;
    while tick <= most + 1e-9 {
        let at = x_of(tick);
        root.draw(&PathElement::new(vec![(at, y - 14), (at, y - 8)], BLACK))?;
        root.draw_text(
            &format!("{tick}x"),
            &font(11).color(&BLACK),
            (at - 8, y - 4),
        )?;
        tick += if most > 4.0 { 1.0 } else { 0.5 };
    }
    root.present()?;
    Ok(())
}
