//! One module per subcommand; `main.rs` holds the clap tree and the dispatch.

pub mod certs;
pub mod data;
pub mod data_view;
pub mod demo;
pub mod gp;
pub mod node;
pub mod party_figures;
pub mod privacy;
pub mod run;
pub mod status;
pub mod svgp;

/// How a command prints its typed report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The report's `Display`.
    Human,
    /// One line of JSON.
    Json,
    /// Indented JSON.
    PrettyJson,
}

impl Output {
    /// `--json` (compact) or the human text.
    pub fn json_if(json: bool) -> Self {
        if json { Output::Json } else { Output::Human }
    }
}

/// Print a command's report. JSON goes through a `serde_json::Value`, so every object's keys
/// print sorted, as every `--json` output here always has.
pub fn print_report<R: serde::Serialize + std::fmt::Display>(report: &R, out: Output) -> anyhow::Result<()> {
    match out {
        Output::Human => print!("{report}"),
        Output::Json => println!("{}", serde_json::to_value(report)?),
        Output::PrettyJson => println!("{}", serde_json::to_string_pretty(&serde_json::to_value(report)?)?),
    }
    Ok(())
}

/// A number as JSON spells it (shortest round-trip form; `null` for a non-finite one).
pub fn json_number(v: f64) -> serde_json::Value {
    serde_json::json!(v)
}
