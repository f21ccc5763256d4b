//! The README's tour, executed: every command of its `sh` blocks runs, in
//! order, against a fresh `tern dev`, and what it prints is compared with
//! what the README shows, positions and versions included. The README can
//! then never drift from what Tern does.
//!
//! The README's conventions, which this test enforces:
//! - a line `# => TEXT` right after a command is a line the command prints
//!   (blank lines of its output are not shown); a command with no such lines
//!   must still succeed;
//! - `U=http://127.0.0.1:7070` names the node (the test's node stands in);
//! - a command that streams (`curl -N`, `tern watch`) is read for
//!   `STREAM_READ` and then stopped.

use crate::common::{bin, Tern};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a streaming command is read before it is stopped: far longer
/// than a local node takes to send a snapshot and the changes after it.
const STREAM_READ: Duration = Duration::from_secs(2);
/// The longest any other command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// What the README says the node's address is (`tern dev`'s default).
const README_URL: &str = "http://127.0.0.1:7070";

/// One command of the tour and the lines the README says it prints.
#[derive(Debug)]
struct Step {
    /// The line of README.md the command starts on (1-based), for messages.
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// The `sh` blocks from `## Five-minute tour` up to the next `## ` heading.
fn tour_blocks(readme: &str) -> Vec<(usize, Vec<&str>)> {
    let mut blocks = Vec::new();
    let mut in_tour = false;
    let mut block: Option<(usize, Vec<&str>)> = None;
    for (index, line) in readme.lines().enumerate() {
        if line.starts_with("## ") {
            in_tour = line == "## Five-minute tour";
            continue;
        }
        if !in_tour {
            continue;
        }
        match (&mut block, line) {
            (None, "```sh") => block = Some((index + 2, Vec::new())),
            (Some(_), "```") => blocks.push(block.take().expect("a block")),
            (Some((_, lines)), line) => lines.push(line),
            (None, _) => {}
        }
    }
    assert!(block.is_none(), "README.md: a tour block is not closed");
    blocks
}

/// The steps of one block: commands (continued over lines while a single
/// quote is open) and the `# =>` lines after each.
fn steps_of(first_line: usize, lines: &[&str]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut open: Option<Step> = None;
    for (offset, line) in lines.iter().enumerate() {
        let number = first_line + offset;
        if let Some(step) = &mut open {
            step.command.push('\n');
            step.command.push_str(line);
            if step.command.matches('\'').count().is_multiple_of(2) {
                steps.push(open.take().expect("an open step"));
            }
            continue;
        }
        if let Some(output) = line.strip_prefix("# =>") {
            let step = steps.last_mut().unwrap_or_else(|| panic!("README.md:{number}: output shown before any command"));
            step.expected.push(output.strip_prefix(' ').unwrap_or(output).to_string());
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(url) = line.strip_prefix("U=") {
            assert_eq!(url, README_URL, "README.md:{number}: the tour's node is `tern dev`'s default address");
            continue;
        }
        let step = Step { line: number, command: line.to_string(), expected: Vec::new() };
        if step.command.matches('\'').count().is_multiple_of(2) {
            steps.push(step);
        } else {
            open = Some(step);
        }
    }
    assert!(open.is_none(), "README.md: a command's quote is never closed");
    steps
}

/// A `CURL_HOME` whose `.curlrc` makes curl exit non-zero on an HTTP error
/// (`--fail-with-body`): a tour step whose output is not shown still fails
/// on a 4xx or 5xx.
fn curl_home() -> std::path::PathBuf {
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let home = HOME.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join(".curlrc"), "fail-with-body\n").expect("a .curlrc");
        dir
    });
    home.path().to_path_buf()
}

fn streams(command: &str) -> bool {
    command.contains("curl -N") || command.contains("curl -sN") || command.starts_with("tern watch")
}

/// Runs one step's command with `U` and `TERN_URL` naming `url` and this
/// build's `tern` first on the PATH; returns (exit success, stdout).
fn run(step: &Step, url: &str) -> (bool, String) {
    let tern_dir = Path::new(&bin()).parent().expect("the binary's directory").to_path_buf();
    let path = format!("{}:{}", tern_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut child = Command::new("bash")
        .args(["-c", &step.command])
        // The tour as on a fresh shell: nothing of this one's settings, and
        // curl fails (still printing the body) on an error status.
        .env_remove("TERN_NS")
        .env_remove("TERN_TOKEN")
        .env_remove("TERN_CA")
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .env("CURL_HOME", curl_home())
        .env("U", url)
        .env("TERN_URL", url)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let limit = if streams(&step.command) { STREAM_READ } else { COMMAND_TIMEOUT };
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait on bash") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let success = match status {
        Some(status) => status.success(),
        None => {
            assert!(streams(&step.command), "README.md:{}: `{}` did not finish within {COMMAND_TIMEOUT:?}", step.line, step.command);
            // Stop the whole pipeline: bash and what it started.
            let _ = Command::new("pkill").args(["-TERM", "-P", &child.id().to_string()]).status();
            let _ = child.kill();
            let _ = child.wait();
            true
        }
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    let stdout = reader.join().expect("the reader");
    assert!(success, "README.md:{}: `{}` failed:\n{stdout}\n{stderr}", step.line, step.command);
    (success, stdout)
}

/// The lines a command printed, as the README shows them: without blank
/// lines or trailing spaces.
fn shown(stdout: &str) -> Vec<String> {
    stdout.lines().map(str::trim_end).filter(|l| !l.is_empty()).map(str::to_string).collect()
}

#[test]
fn the_readme_parser_reads_outputs_and_continued_commands() {
    let block = [
        "U=http://127.0.0.1:7070",
        "# a comment",
        "curl -s $U/a",
        "# => {\"x\":1}",
        "# =>",
        "curl -s -X POST $U/b -d '{",
        "  \"y\": 2}'",
        "# => done",
    ];
    let steps = steps_of(10, &block);
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!((steps[0].line, steps[0].expected.clone()), (12, vec!["{\"x\":1}".to_string(), String::new()]));
    assert_eq!(steps[1].command, "curl -s -X POST $U/b -d '{\n  \"y\": 2}'");
    assert_eq!(steps[1].expected, vec!["done".to_string()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_tour_prints_what_the_readme_shows() {
    let readme = std::fs::read_to_string(crate::common::checkout().join("README.md")).expect("README.md");
    let blocks = tour_blocks(&readme);
    assert!(blocks.len() >= 2, "README.md: the tour has its curl block and its CLI block");
    let steps: Vec<Step> = blocks.iter().flat_map(|(first, lines)| steps_of(*first, lines)).collect();
    assert!(steps.iter().filter(|s| !s.expected.is_empty()).count() >= 10, "the tour shows what its commands print");

    let dir = tempfile::tempdir().unwrap();
    let tern = Tern::dev(dir.path()).await;
    let url = tern.url.clone();
    let mut mismatches = Vec::new();
    for step in steps {
        let url = url.clone();
        let (step, stdout) = tokio::task::spawn_blocking(move || {
            let (_, stdout) = run(&step, &url);
            (step, stdout)
        })
        .await
        .unwrap();
        if step.expected.is_empty() {
            continue;
        }
        let expected: Vec<String> = step.expected.iter().filter(|l| !l.trim().is_empty()).cloned().collect();
        let printed = shown(&stdout);
        if printed != expected {
            mismatches.push(format!(
                "README.md:{}: `{}`\n  README shows:\n{}\n  it printed:\n{}",
                step.line,
                step.command,
                expected.iter().map(|l| format!("    # => {l}")).collect::<Vec<_>>().join("\n"),
                printed.iter().map(|l| format!("    # => {l}")).collect::<Vec<_>>().join("\n"),
            ));
        }
    }
    assert!(mismatches.is_empty(), "the README's tour drifted from what Tern prints:\n{}", mismatches.join("\n"));
}

/// The user's documents (the README and everything under docs/) speak to
/// users: no issue numbers, no planning words. The design records, which
/// keep decisions and their history, live outside docs/ (`design/`).
#[test]
fn the_users_documents_name_no_issues() {
    const PLANNING: [&str; 6] = ["left for later", "todo", "tbd", "fixme", "next session", "later session"];
    let root = crate::common::checkout();
    let mut documents = vec![root.join("README.md")];
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a docs folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                documents.push(path);
            }
        }
    }
    let mut found = Vec::new();
    for path in documents {
        let text = std::fs::read_to_string(&path).expect("a document");
        for (number, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let issue = lower.match_indices("issue ").any(|(at, _)| lower[at + 6..].starts_with(|c: char| c.is_ascii_digit() || c == '#'));
            let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric() && c != ' ').collect();
            let planning = PLANNING
                .iter()
                .any(|p| words.iter().any(|w| w.split(' ').collect::<Vec<_>>().windows(p.split(' ').count()).any(|ws| ws.join(" ") == *p)));
            if issue || planning {
                found.push(format!("{}:{}: {line}", path.display(), number + 1));
            }
        }
    }
    assert!(found.is_empty(), "documents that name issues or plans:\n{}", found.join("\n"));
}
