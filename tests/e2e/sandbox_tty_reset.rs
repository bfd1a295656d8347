//! What CMD leaves on the terminal cannot hide what netbox says after it. CMD ends its
//! output with a sequence that would hide, garble or swallow the text that follows
//! (conceal, the line-drawing set, the alternate screen, a hidden cursor, an unfinished
//! OSC or DCS string, half an escape sequence, a one-line scroll region, an open
//! hyperlink, the default colours made alike), and leaves git metadata behind so that
//! netbox warns after the run. Read by a model of an xterm-like terminal
//! (support/screen.rs) and by a real one (tmux), the warning shows as plain text, both
//! when CMD has a terminal of its own and when it writes to netbox's (`--no-tty`). With
//! --no-tty CMD can also change the terminal's modes (no echo, raw): they are as before
//! once netbox is done. Controls: the warning is there; a run with nothing to say writes
//! nothing after CMD; no escape byte goes into a pipe or a file.

use std::process::Stdio;

use crate::sandbox_tty::{same_modes, OnTerminal};
use crate::support::screen::Screen;
use crate::support::{stderr, Run, TestDir};

/// Each ends CMD's output.
const ATTACKS: &[(&str, &str)] = &[
    ("conceal", "\x1b[8m"),
    ("black on black", "\x1b[30;40m"),
    ("line-drawing set in G0", "\x1b(0"),
    ("line-drawing set shifted in from G1", "\x1b)0\x0e"),
    ("alternate screen", "\x1b[?1049h"),
    ("cursor hidden", "\x1b[?25l"),
    ("unterminated OSC", "\x1b]0;"),
    ("unterminated DCS", "\x1bP"),
    ("half a CSI", "\x1b["),
    ("lone ESC", "\x1b"),
    ("one-line scroll region, no autowrap", "\x1b[1;1r\x1b[?7l"),
    ("open hyperlink", "\x1b]8;;http://evil.test/\x1b\\"),
    (
        "default colours alike",
        "\x1b]10;#000000\x07\x1b]11;#000000\x07",
    ),
    // A restore of the cursor (1049l restores what DECSC saved) must not bring the
    // concealing pen back after the reset.
    ("concealing pen saved", "\x1b[8m\x1b7\x1b[?1049h\x1b[0m"),
];

/// The warning netbox prints after the run (the git metadata check's).
const WARNING: &str = "netbox: warning: the command created a git directory";

/// CMD: git metadata in a directory named by $2 (new each run, so each run is warned
/// about), then `$1` as its last output.
const SCRIPT: &str = "mkdir -p \"$2/.git\" && printf '%s' \"$1\"";

#[test]
fn what_cmd_leaves_on_the_terminal_cannot_hide_netboxs_warnings() {
    let dir = TestDir::new("tty-reset");
    let mut failed = Vec::new();
    for (mode, args) in [("own pty", &[][..]), ("--no-tty", &["--no-tty"][..])] {
        for (n, (attack, bytes)) in ATTACKS.iter().enumerate() {
            let last = format!("CMD-END{bytes}");
            let planted = format!("planted-{mode}-{n}").replace([' ', '-'], "_");
            let term = OnTerminal::start(&dir, args, &["sh", "-c", SCRIPT, "sh", &last, &planted]);
            let (status, shown) = term.wait_bytes();
            let text = String::from_utf8_lossy(&shown);
            // Positive control: CMD ran and ended with the attack; netbox warned.
            assert_eq!(status.code(), Some(0), "{mode}, {attack}: {text:?}");
            assert!(
                text.contains(&last),
                "{mode}, {attack}: CMD's output: {text:?}"
            );
            assert!(text.contains(WARNING), "{mode}, {attack}: {text:?}");
            let mut screen = Screen::new(24);
            screen.feed(&shown);
            if let Err(why) = screen.shows(WARNING) {
                failed.push(format!("{mode}, {attack}: {why}; shown: {text:?}"));
            } else if !screen.cursor_visible {
                failed.push(format!("{mode}, {attack}: the cursor stays hidden"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));

    // Control: with nothing to say after the run, netbox writes nothing after CMD.
    let term = OnTerminal::start(&dir, &[], &["printf", "CMD-END\x1b[8m"]);
    let (status, shown) = term.wait_bytes();
    assert_eq!(status.code(), Some(0));
    assert!(
        shown.ends_with(b"CMD-END\x1b[8m"),
        "{:?}",
        String::from_utf8_lossy(&shown)
    );
}

/// With --no-tty CMD holds the caller's terminal itself: modes it changes there (no echo,
/// no line editing, no output processing) are put back before netbox says anything.
#[test]
fn modes_cmd_changed_on_the_callers_terminal_come_back() {
    let dir = TestDir::new("tty-reset-modes");
    let term = OnTerminal::start(
        &dir,
        &["--no-tty"],
        &[
            "sh",
            "-c",
            "stty -echo -icanon -opost raw && stty -a | grep -o -- ' -echo ' && mkdir -p p/.git",
        ],
    );
    let before = term.modes();
    let slave = term.slave.try_clone().unwrap();
    let (status, shown) = term.wait();
    let after = libc::termios::from(nix::sys::termios::tcgetattr(&slave).unwrap());
    assert_eq!(status.code(), Some(0), "{shown:?}");
    // Positive control: CMD did change them.
    assert!(shown.contains(" -echo "), "{shown:?}");
    assert!(shown.contains(WARNING), "{shown:?}");
    assert!(same_modes(&before, &after), "modes changed: {shown:?}");
}

/// netbox's standard output and error are a pipe and a file: not one escape byte of
/// netbox's goes into either, with a pty for CMD or without.
#[test]
fn no_escape_byte_goes_into_a_pipe_or_a_file() {
    let dir = TestDir::new("tty-reset-pipe");
    let all: String = ATTACKS.iter().map(|(_, bytes)| *bytes).collect();
    for (n, args) in [&[][..], &["--tty"][..]].into_iter().enumerate() {
        let errors = dir.join(&format!("stderr-{n}"));
        let mut run = Run::new(&dir).arg("--quiet");
        for arg in args {
            run = run.arg(*arg);
        }
        let out = run
            .command(&format!(
                "mkdir -p p{n}/.git && printf '{}'",
                printf_format(&format!("CMD-END{all}"))
            ))
            .stderr(Stdio::from(std::fs::File::create(&errors).unwrap()))
            .output()
            .unwrap();
        let said = std::fs::read(&errors).unwrap();
        let text = String::from_utf8_lossy(&said);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {text}");
        // CMD's bytes, exactly: nothing of netbox's after them.
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("CMD-END{all}"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(text.contains(WARNING), "{args:?}: {text:?}");
        assert!(
            said.iter().all(|&b| b == b'\n' || (b >= 0x20 && b != 0x7f)),
            "{args:?}: control bytes in netbox's stderr: {text:?}"
        );
    }
}

/// `text` as a printf format that prints it: octal escapes for every byte but plain ones.
fn printf_format(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            0x20..=0x7e if !matches!(b, b'\\' | b'%' | b'\'') => char::from(b).to_string(),
            _ => format!("\\{b:03o}"),
        })
        .collect()
}

/// A real terminal emulator's view (tmux's: its state and the screen's cells, read back
/// with `display-message` and `capture-pane -e`): netbox runs in a tmux pane, CMD ends
/// its output with each attack (all of them at once with --no-tty), and afterwards the
/// pane is on its main screen, with the cursor shown and autowrap on, and shows CMD's last
/// text followed by the warning with no attribute or character set in between.
#[test]
fn a_terminal_emulator_shows_the_warning() {
    let dir = TestDir::new("tty-reset-tmux");
    let all: String = ATTACKS.iter().map(|(_, bytes)| *bytes).collect();
    let mut runs: Vec<(String, &[&str], String)> = ATTACKS
        .iter()
        .map(|(attack, bytes)| ((*attack).to_owned(), &[][..], (*bytes).to_owned()))
        .collect();
    runs.push(("all at once, --no-tty".into(), &["--no-tty"][..], all));
    let mut failed = Vec::new();
    for (n, (attack, args, bytes)) in runs.iter().enumerate() {
        let pane = Pane::run(&dir, n, args, bytes);
        let state = pane.tmux(&[
            "display-message",
            "-p",
            "alternate=#{alternate_on} cursor=#{cursor_flag} autowrap=#{wrap_flag}",
        ]);
        // -J: a line the pane wrapped, joined again.
        let screen = pane.tmux(&["capture-pane", "-p", "-e", "-J"]);
        if state.trim() != "alternate=0 cursor=1 autowrap=1"
            || !screen.contains(&format!("CMD-END{WARNING}"))
        {
            failed.push(format!("{attack}: {}: {screen:?}", state.trim()));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// A tmux server of the test's own, with one 100x24 pane running netbox; killed when
/// dropped.
struct Pane {
    socket: std::path::PathBuf,
}

impl Pane {
    /// Runs netbox in a new pane until it has exited: CMD leaves git metadata, then prints
    /// `CMD-END` and `bytes`.
    fn run(dir: &TestDir, n: usize, args: &[&str], bytes: &str) -> Pane {
        let done = dir.join(&format!("done-{n}"));
        let script = dir.join(&format!("pane-{n}.sh"));
        std::fs::create_dir_all(dir.join("ws")).unwrap();
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\ncd {ws}\n{netbox} --quiet --log {log} {args} -- sh -c 'mkdir -p \"$1/.git\" && printf \"$2\"' sh tmux-{n} '{format}'\ntouch {done}\nexec sleep 60\n",
                ws = dir.join("ws").display(),
                netbox = crate::support::netbox_bin().display(),
                log = dir.join(&format!("events-{n}.jsonl")).display(),
                args = args.join(" "),
                format = printf_format(&format!("CMD-END{bytes}")),
                done = done.display(),
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let pane = Pane {
            socket: dir.join(&format!("tmux-{n}.sock")),
        };
        let started = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&pane.socket)
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "100",
                "-y",
                "24",
            ])
            .arg(&script)
            // The pane's command runs in $SHELL, else the user's login shell (nobody's
            // refuses to run anything).
            .env("SHELL", "/bin/sh")
            .status()
            .expect("run tmux (apt-get install tmux)");
        assert!(started.success());
        crate::support::wait_for_path(&done, "netbox did not finish in its tmux pane");
        // tmux reads the pane's output in its own time: a moment for the last of it.
        std::thread::sleep(std::time::Duration::from_millis(300));
        pane
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}
