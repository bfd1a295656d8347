//! What CMD leaves on the terminal cannot hide what netbox says after it. CMD ends its
//! output with a sequence that would hide, garble or swallow the text that follows
//! (conceal, the line-drawing set, the alternate screen, a hidden cursor, an unfinished
//! OSC or DCS string, half an escape sequence, a one-line scroll region, an open
//! hyperlink, the default colours made alike, left and right margins), and leaves git
//! metadata behind so that netbox warns after the run. Read by a model of an xterm-like terminal
//! (support/screen.rs) and by a real one (tmux), the warning shows as plain text, both
//! when CMD has a terminal of its own and when it writes to netbox's (`--no-tty`). With
//! --no-tty CMD can also change the terminal's modes (no echo, raw), stop its output and
//! set its window size: they are as before once netbox is done, and netbox's warning is
//! not held up. Inside GNU screen, which hands a DCS string's content to its own terminal,
//! what CMD passes through that way is reset there too. Controls: the warning is there; a run with nothing to say writes
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
    // Left and right margins two columns apart (DECLRMM on, then DECSLRM): xterm
    // squeezes the warning into them, and its start scrolls away.
    ("left and right margins", "\x1b[?69h\x1b[1;2s"),
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

/// With --no-tty CMD can stop the terminal's output (`tcflow(TCOOFF)`, as ^S does) and
/// set its window size: netbox's warning must not wait forever for output that never
/// starts again, and the size is put back.
#[test]
fn output_cmd_stopped_and_a_size_it_set_do_not_outlast_it() {
    let dir = TestDir::new("tty-reset-flow");
    // CMD sets the size and says it, then stops output and checks it is stopped (a
    // non-blocking write is refused), writing the result to a file: it cannot print.
    let script = "import fcntl, os, struct, sys, termios\n\
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack('HHHH', 3, 5, 0, 0))\n\
        print('SIZE', os.get_terminal_size(1).lines, os.get_terminal_size(1).columns, flush=True)\n\
        termios.tcflow(1, termios.TCOOFF)\n\
        os.set_blocking(1, False)\n\
        try:\n    os.write(1, b'x'); result = 'written'\n\
        except BlockingIOError:\n    result = 'stopped'\n\
        os.set_blocking(1, True)\n\
        open('flow.txt', 'w').write(result)\n\
        os.makedirs('p/.git')\n";
    let mut term = OnTerminal::start(&dir, &["--no-tty"], &["python3", "-c", script]);
    let slave = term.slave.try_clone().unwrap();
    let ended = term.exited_within(std::time::Duration::from_secs(15));
    if ended.is_none() {
        // Let it finish, so nothing is left running.
        let _ = nix::sys::termios::tcflow(&slave, nix::sys::termios::FlowArg::TCOON);
    }
    let size = crate::sandbox_tty::window_size(&slave);
    let (status, shown) = term.wait();
    // Positive control: CMD did set the size, and output was stopped.
    assert!(shown.contains("SIZE 3 5"), "{shown:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("ws/flow.txt")).unwrap(),
        "stopped"
    );
    assert!(
        ended.is_some(),
        "netbox waited on stopped output: {shown:?}"
    );
    assert_eq!(status.code(), Some(0), "{shown:?}");
    assert!(shown.contains(WARNING), "{shown:?}");
    assert_eq!(size, (24, 80), "the size CMD set stayed");
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

/// GNU screen between netbox and the terminal (tmux, read as above): screen hands the
/// content of a DCS string to its own terminal as it is, past its own state, so CMD can
/// leave conceal (or a line-drawing set, or left and right margins) on the terminal
/// screen runs in, which netbox's reset of screen's own state does not touch. The
/// warning shows there as plain text all the same. Control: the passthrough works here
/// (a CMD whose own text follows it shows concealed).
#[test]
fn inside_gnu_screen_what_cmd_passes_through_cannot_hide_the_warning() {
    let dir = TestDir::new("tty-reset-screen");
    let passed_through: &[(&str, &str)] = &[
        ("conceal", "\x1bP\x1b[8m\x1b\\"),
        ("line-drawing set", "\x1bP\x1b(0\x1b\\"),
        ("black on black", "\x1bP\x1b[30;40m\x1b\\"),
    ];
    let mut failed = Vec::new();
    for (n, (attack, bytes)) in passed_through.iter().enumerate() {
        let pane = Pane::run_between(&dir, n, &[], bytes, Between::Screen);
        let screen = pane.tmux(&["capture-pane", "-p", "-e"]);
        if !screen.contains(&format!("CMD-END{}", &WARNING[..40])) {
            failed.push(format!("{attack}: {screen:?}"));
        }
    }
    // Control: what CMD passes through reaches the terminal screen runs in.
    let pane = Pane::run_between(
        &dir,
        passed_through.len(),
        &[],
        "\x1bP\x1b[8m\x1b\\SEEN-CONCEALED",
        Between::Screen,
    );
    let screen = pane.tmux(&["capture-pane", "-p", "-e"]);
    assert!(
        screen.contains("CMD-END\x1b[8mSEEN-CONCEALED"),
        "the passthrough did not work here: {screen:?}"
    );
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// What stands between netbox and the terminal in a test pane.
#[derive(Clone, Copy)]
enum Between {
    Nothing,
    /// GNU screen, with its own settings only (`-c /dev/null`).
    Screen,
}

/// A tmux server of the test's own, with one pane running netbox; killed when dropped.
struct Pane {
    socket: std::path::PathBuf,
}

impl Pane {
    /// Runs netbox in a new 100x24 pane until it has exited: CMD leaves git metadata, then
    /// prints `CMD-END` and `bytes`.
    fn run(dir: &TestDir, n: usize, args: &[&str], bytes: &str) -> Pane {
        Pane::run_between(dir, n, args, bytes, Between::Nothing)
    }

    /// As `run`, with `between` between netbox and tmux (in a 250-column pane then, so
    /// that the warning is one line of screen's).
    fn run_between(dir: &TestDir, n: usize, args: &[&str], bytes: &str, between: Between) -> Pane {
        let done = dir.join(&format!("done-{n}"));
        let script = dir.join(&format!("pane-{n}.sh"));
        std::fs::create_dir_all(dir.join("ws")).unwrap();
        let netbox = format!(
            "cd {ws}\n{netbox} --quiet --log {log} {args} -- sh -c 'mkdir -p \"$1/.git\" && printf \"$2\"' sh tmux-{n} '{format}'\ntouch {done}\nexec sleep 60\n",
            ws = dir.join("ws").display(),
            netbox = crate::support::netbox_bin().display(),
            log = dir.join(&format!("events-{n}.jsonl")).display(),
            args = args.join(" "),
            format = printf_format(&format!("CMD-END{bytes}")),
            done = done.display(),
        );
        let (text, width) = match between {
            Between::Nothing => (format!("#!/bin/sh\n{netbox}"), "100"),
            Between::Screen => {
                let inner = dir.join(&format!("in-screen-{n}.sh"));
                std::fs::write(&inner, format!("#!/bin/sh\n{netbox}")).unwrap();
                std::fs::set_permissions(
                    &inner,
                    std::os::unix::fs::PermissionsExt::from_mode(0o755),
                )
                .unwrap();
                // screen's sockets in a directory of the test's (0700, as screen wants).
                let sockets = dir.join(&format!("screen-{n}"));
                std::fs::create_dir_all(&sockets).unwrap();
                std::fs::set_permissions(
                    &sockets,
                    std::os::unix::fs::PermissionsExt::from_mode(0o700),
                )
                .unwrap();
                (
                    format!(
                        "#!/bin/sh\nSCREENDIR={} exec screen -c /dev/null {}\n",
                        sockets.display(),
                        inner.display()
                    ),
                    "250",
                )
            }
        };
        std::fs::write(&script, text).unwrap();
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
                width,
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
