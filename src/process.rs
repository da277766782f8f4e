//! What both binaries (`dpcotrain`, the product, and `dpcotrain-lab`) do as processes: parse
//! the command line the same way, log the same way, report an error on one line with the
//! usage-error convention, and set the process-wide knobs (SIGPIPE, the allocator's thresholds).

/// Every (sub)command accepts negative numbers as option values, so `--epsilon -1` reaches our
/// validation ("must be positive") instead of clap's "unexpected argument '-1'".
pub fn with_negative_numbers(cmd: clap::Command) -> clap::Command {
    cmd.allow_negative_numbers(true).mut_subcommands(with_negative_numbers)
}

/// Logs go to stderr as text or JSON (`format`: "text" or "json"); RUST_LOG sets the levels,
/// `default` when it is unset (a node serves at info, so each RPC leaves one line).
pub fn init_logging(format: &str, default: &str) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).with_target(false);
    if format == "json" {
        builder.json().init();
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
}

/// Parse the command line of `C` (negative numbers accepted as values); a line that does not
/// parse ends the process as [`usage_error`] says.
pub fn parse<C: clap::Parser>() -> C {
    let matches = match with_negative_numbers(C::command()).try_get_matches() {
        Ok(m) => m,
        Err(e) => usage_error(&e),
    };
    C::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

/// End the process for a command's result: nothing on success; otherwise the error and its
/// causes on one line ([`error_line`]) and exit status 1.
pub fn finish(result: anyhow::Result<()>) {
    if let Err(e) = result {
        eprintln!("error: {}", error_line(&e));
        std::process::exit(1);
    }
}

/// A command line that does not parse: help and version as clap prints them; any other error
/// as one line (clap's message without its usage block) and exit status 2, the usage-error
/// convention (every other error exits 1).
pub fn usage_error(e: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        e.exit();
    }
    let text = e.to_string();
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
        .collect();
    let line = parts
        .iter()
        .enumerate()
        .map(|(i, l)| if i > 0 && l.starts_with("tip:") { format!("; {l}") } else { format!(" {l}") })
        .collect::<String>()
        .trim()
        .replace(":  ", ": ");
    eprintln!("{} (--help lists the options)", line.trim_end_matches('.'));
    std::process::exit(2);
}

/// Let a write to a closed pipe end the process the way other command-line tools end (`… |
/// head`), rather than as a panic in `println!`. Only for commands that write a report to
/// stdout and hold no sockets: a node keeps the runtime's "ignore SIGPIPE" so a peer that hangs
/// up is an error on that connection, never the end of the process.
pub fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Keep freed memory in the process. glibc's malloc serves a block above its mmap threshold
/// (128 KiB, raised only as large blocks are freed) from a fresh mapping and trims the heap
/// above 128 KiB of free top, so every step of a model that allocates a few 4 MB matrices
/// (the SVGP step's K_uf, A = L⁻¹K_uf and their gradients at M = 500, batch 1,000) faulted and
/// zeroed them in again: a fresh `bench svgp --n 10000` spent a third of a step in the kernel's
/// page faults (69–78 ms per step; 49–51 ms with these two settings, A B A B on one machine,
/// docs/results.md "Allocator"). Blocks up to 32 MiB (glibc's ceiling) come from the heap, and
/// up to 256 MiB of free heap stays mapped for the next step. Numbers do not change (only
/// where memory lives); library users keep their allocator's defaults.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets two thresholds of glibc's allocator; called at start, before any
    // thread is started.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

/// An error and its causes on one line, `outer: inner`, leaving out a cause whose text the
/// message already contains (many errors quote their source: no `No such file or directory (os
/// error 2): No such file or directory (os error 2)`).
pub fn error_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// The process's peak resident set size (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
