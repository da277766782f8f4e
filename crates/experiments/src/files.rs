//! The files the CLI's commands write and read: reports written atomically (a crash never
//! leaves half a file) and JSON-lines journals read back (a torn last line is skipped).

/// Write a report file durably ([`dpcotrain_federation::durable::write_report`]), so a crash
/// never leaves a half-written report.
pub fn write_atomic(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    Ok(dpcotrain_federation::durable::write_report(path, text)?)
}

/// Every row of a JSON-lines journal; a missing file is empty, and a torn last line (a crash
/// mid-write) is skipped with a note. Any other bad line is an error naming file and line.
pub(crate) fn load_jsonl<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> anyhow::Result<Vec<T>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut rows = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<T>(line) {
            Ok(r) => rows.push(r),
            Err(_) if i + 1 == lines.len() => eprintln!("{}: ignoring a torn last line", path.display()),
            Err(e) => anyhow::bail!("{} line {}: {e}", path.display(), i + 1),
        }
    }
    Ok(rows)
}
