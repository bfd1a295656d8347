//! A model of how an xterm-like terminal reads a byte stream, enough to tell whether text
//! written to it would show as plain text: the parser's states (escape, CSI, OSC, DCS and
//! the other strings, with CAN, SUB and ESC ending them as in the DEC parser that xterm,
//! VTE and tmux follow), and the state that hides or garbles text: SGR (conceal, colours),
//! the character sets G0–G3 and the shifts that select them, the alternate screen and the
//! cursor saved with it (1049 restores the pen DECSC saved, as xterm's `CursorRestore`
//! does), the default colours (OSC 10 and 11), the scroll region, the left and right
//! margins (DECSLRM, which `CSI s` is while DECLRMM is on, and which resetting DECLRMM
//! clears, as xterm does), autowrap, cursor visibility and an open OSC 8 hyperlink.
//! Each printed character is kept with what, if anything, would hide it.

/// A character set designated into G0–G3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Charset {
    Ascii,
    /// `0`: the DEC special graphics (line-drawing) set.
    LineDrawing,
    Other,
}

/// What DECSC saves and DECRC restores (with the cursor's position, not modelled).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pen {
    /// No SGR attribute other than the defaults is on.
    plain: bool,
    concealed: bool,
    sets: [Charset; 4],
    /// The set invoked into GL (SI: G0, SO: G1, LS2, LS3).
    gl: usize,
}

impl Pen {
    fn new() -> Pen {
        Pen {
            plain: true,
            concealed: false,
            sets: [Charset::Ascii; 4],
            gl: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ground,
    Escape,
    Csi,
    Osc,
    /// DCS, SOS, PM and APC: swallowed to their end.
    OtherString,
}

/// One printed character and whatever would keep it from reading as plain text.
#[derive(Debug, Clone)]
pub struct Cell {
    pub ch: char,
    pub hidden_by: Vec<&'static str>,
}

pub struct Screen {
    rows: u16,
    state: State,
    /// The bytes of the sequence being parsed (after ESC, or the OSC's payload).
    seq: Vec<u8>,
    pen: Pen,
    /// DECSC's slot for each screen (normal, alternate), as xterm keeps them.
    saved: [Option<Pen>; 2],
    alternate: bool,
    pub cursor_visible: bool,
    autowrap: bool,
    full_margins: bool,
    /// DECLRMM: `CSI s` sets the left and right margins instead of saving the cursor.
    lr_mode: bool,
    full_lr_margins: bool,
    link: Option<String>,
    /// The default foreground and background, as OSC 10 and 11 may set them.
    colours_set: [bool; 2],
    single_shift: Option<usize>,
    utf8: Vec<u8>,
    pub cells: Vec<Cell>,
}

impl Screen {
    pub fn new(rows: u16) -> Screen {
        Screen {
            rows,
            state: State::Ground,
            seq: Vec::new(),
            pen: Pen::new(),
            saved: [None, None],
            alternate: false,
            cursor_visible: true,
            autowrap: true,
            full_margins: true,
            lr_mode: false,
            full_lr_margins: true,
            link: None,
            colours_set: [false; 2],
            single_shift: None,
            utf8: Vec::new(),
            cells: Vec::new(),
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    /// The printed text, and whether every character of `text`'s last occurrence in it
    /// shows as plain text: `Err` says what hides it (or that it never printed).
    pub fn shows(&self, text: &str) -> Result<(), String> {
        let printed: Vec<char> = self.cells.iter().map(|c| c.ch).collect();
        let wanted: Vec<char> = text.chars().collect();
        let at = (0..=printed.len().saturating_sub(wanted.len()))
            .rev()
            .find(|&i| printed[i..].starts_with(&wanted));
        let Some(at) = at else {
            return Err(format!(
                "{text:?} was never printed; printed: {:?}",
                printed.iter().collect::<String>()
            ));
        };
        let mut hidden: Vec<&str> = self.cells[at..at + wanted.len()]
            .iter()
            .flat_map(|c| c.hidden_by.iter().copied())
            .collect();
        hidden.sort_unstable();
        hidden.dedup();
        if hidden.is_empty() {
            Ok(())
        } else {
            Err(format!("{text:?} is printed but hidden by: {hidden:?}"))
        }
    }

    fn byte(&mut self, b: u8) {
        // Anywhere: CAN and SUB abandon a sequence or string, ESC starts a new one (and
        // ends a string: an OSC is carried out, ST being ESC \).
        match b {
            0x18 | 0x1a => {
                self.state = State::Ground;
                self.utf8.clear();
                return;
            }
            0x1b => {
                if self.state == State::Osc {
                    self.osc_done();
                }
                self.state = State::Escape;
                self.seq.clear();
                self.utf8.clear();
                return;
            }
            _ => {}
        }
        match self.state {
            State::Ground => self.ground(b),
            State::Escape => self.escape(b),
            State::Csi => match b {
                0x20..=0x3f => self.seq.push(b),
                0x40..=0x7e => {
                    self.csi_done(b);
                    self.state = State::Ground;
                }
                0x00..=0x1f => self.control(b),
                _ => {}
            },
            State::Osc => match b {
                0x07 => {
                    self.osc_done();
                    self.state = State::Ground;
                }
                _ => self.seq.push(b),
            },
            State::OtherString => {}
        }
    }

    fn ground(&mut self, b: u8) {
        if b < 0x20 {
            self.control(b);
            return;
        }
        if b == 0x7f {
            return;
        }
        self.utf8.push(b);
        let ch = match std::str::from_utf8(&self.utf8) {
            Ok(s) => s.chars().next().unwrap(),
            Err(e) if e.error_len().is_none() && self.utf8.len() < 4 => return,
            Err(_) => char::REPLACEMENT_CHARACTER,
        };
        self.utf8.clear();
        self.print(ch);
    }

    fn control(&mut self, b: u8) {
        match b {
            0x0e => self.pen.gl = 1,
            0x0f => self.pen.gl = 0,
            _ => {}
        }
    }

    fn print(&mut self, ch: char) {
        let set = match self.single_shift.take() {
            Some(g) => self.pen.sets[g],
            None => self.pen.sets[self.pen.gl],
        };
        let mut hidden_by = Vec::new();
        if self.pen.concealed {
            hidden_by.push("conceal (SGR 8)");
        }
        if !self.pen.plain {
            hidden_by.push("SGR attributes left on");
        }
        match set {
            Charset::Ascii => {}
            Charset::LineDrawing => hidden_by.push("line-drawing character set"),
            Charset::Other => hidden_by.push("another character set"),
        }
        if self.alternate {
            hidden_by.push("alternate screen");
        }
        if !self.full_margins {
            hidden_by.push("scroll region");
        }
        if !self.full_lr_margins {
            hidden_by.push("left and right margins");
        }
        if !self.autowrap {
            hidden_by.push("autowrap off");
        }
        if !self.cursor_visible {
            hidden_by.push("cursor hidden");
        }
        if self.link.is_some() {
            hidden_by.push("hyperlink open");
        }
        if self.colours_set.contains(&true) {
            hidden_by.push("default colours set");
        }
        self.cells.push(Cell { ch, hidden_by });
    }

    fn escape(&mut self, b: u8) {
        match b {
            0x20..=0x2f => self.seq.push(b),
            0x30..=0x7e => {
                self.state = State::Ground;
                match (self.seq.first(), b) {
                    (None, b'[') => {
                        self.state = State::Csi;
                        self.seq.clear();
                    }
                    (None, b']') => {
                        self.state = State::Osc;
                        self.seq.clear();
                    }
                    (None, b'P' | b'X' | b'^' | b'_') => self.state = State::OtherString,
                    (None, b'7') => {
                        self.saved[usize::from(self.alternate)] = Some(self.pen.clone())
                    }
                    (None, b'8') => self.restore_pen(),
                    (None, b'c') => *self = Screen::new(self.rows),
                    (None, b'n') => self.pen.gl = 2,
                    (None, b'o') => self.pen.gl = 3,
                    (None, b'N') => self.single_shift = Some(2),
                    (None, b'O') => self.single_shift = Some(3),
                    (Some(&g @ (b'(' | b')' | b'*' | b'+')), set) => {
                        let slot = usize::from(g - b'(');
                        self.pen.sets[slot] = match set {
                            b'B' => Charset::Ascii,
                            b'0' => Charset::LineDrawing,
                            _ => Charset::Other,
                        };
                    }
                    _ => {}
                }
            }
            0x00..=0x1f => self.control(b),
            _ => self.state = State::Ground,
        }
    }

    fn restore_pen(&mut self) {
        if let Some(pen) = self.saved[usize::from(self.alternate)].clone() {
            self.pen = pen;
        }
    }

    fn csi_done(&mut self, last: u8) {
        let text = String::from_utf8_lossy(&self.seq).into_owned();
        let private = text.starts_with('?');
        let body = text.trim_start_matches(['?', '>', '<', '=']);
        let params: Vec<&str> = body.split(';').collect();
        let number = |s: &str| s.split(':').next().unwrap_or("").parse::<u32>().ok();
        match (private, last) {
            (false, b'm') if !body.contains(['!', '$', ' ']) => self.sgr(&params),
            (true, b'h' | b'l') => {
                let on = last == b'h';
                for p in params.iter().filter_map(|p| number(p)) {
                    match p {
                        1049 if on => {
                            self.saved[0] = Some(self.pen.clone());
                            self.alternate = true;
                        }
                        1049 => {
                            self.alternate = false;
                            self.restore_pen();
                        }
                        47 | 1047 => self.alternate = on,
                        25 => self.cursor_visible = on,
                        7 => self.autowrap = on,
                        69 => {
                            self.lr_mode = on;
                            if !on {
                                self.full_lr_margins = true;
                            }
                        }
                        _ => {}
                    }
                }
            }
            (false, b'r') => {
                let top = params.first().and_then(|p| number(p)).unwrap_or(1);
                let bottom = params
                    .get(1)
                    .and_then(|p| number(p))
                    .unwrap_or(u32::from(self.rows));
                self.full_margins = top <= 1 && bottom >= u32::from(self.rows);
            }
            (false, b's') if self.lr_mode => {
                // The terminal's width is not modelled: margins that leave out any
                // column of an 80-column screen count as set.
                let left = params.first().and_then(|p| number(p)).unwrap_or(1);
                let right = params.get(1).and_then(|p| number(p)).unwrap_or(u32::MAX);
                self.full_lr_margins = left <= 1 && right >= 80;
            }
            (false, b's') => self.saved[usize::from(self.alternate)] = Some(self.pen.clone()),
            (false, b'u') => self.restore_pen(),
            (false, b'p') if body == "!" => {
                // DECSTR, as xterm does it.
                self.pen = Pen::new();
                self.cursor_visible = true;
                self.full_margins = true;
                self.autowrap = true;
            }
            _ => {}
        }
    }

    fn sgr(&mut self, params: &[&str]) {
        let numbers: Vec<u32> = params
            .iter()
            .map(|p| p.split(':').next().unwrap_or("").parse().unwrap_or(0))
            .collect();
        let mut i = 0;
        while i < numbers.len() {
            match numbers[i] {
                0 => {
                    let (sets, gl) = (self.pen.sets, self.pen.gl);
                    self.pen = Pen {
                        sets,
                        gl,
                        ..Pen::new()
                    };
                }
                8 => {
                    self.pen.concealed = true;
                    self.pen.plain = false;
                }
                28 => self.pen.concealed = false,
                38 | 48 | 58 => {
                    self.pen.plain = false;
                    i += match numbers.get(i + 1) {
                        Some(5) => 2,
                        Some(2) => 4,
                        _ => 0,
                    };
                }
                _ => self.pen.plain = false,
            }
            i += 1;
        }
    }

    fn osc_done(&mut self) {
        let payload = String::from_utf8_lossy(&self.seq).into_owned();
        let mut fields = payload.split(';');
        match fields.next() {
            Some("8") => {
                let uri = fields.nth(1).unwrap_or("");
                self.link = (!uri.is_empty()).then(|| uri.to_owned());
            }
            // OSC 10;fg;bg sets the colours in turn from 10 on; "?" asks instead.
            Some(first @ ("10" | "11")) => {
                let from = usize::from(first == "11");
                for (slot, value) in (from..2).zip(fields) {
                    if value != "?" {
                        self.colours_set[slot] = true;
                    }
                }
            }
            Some("110") => self.colours_set[0] = false,
            Some("111") => self.colours_set[1] = false,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Screen;

    fn shows(bytes: &str, text: &str) -> Result<(), String> {
        let mut screen = Screen::new(24);
        screen.feed(bytes.as_bytes());
        screen.shows(text)
    }

    /// The model sees each way of hiding text, and each way back.
    #[test]
    fn the_model_reads_hiding_and_resets_as_xterm_does() {
        assert!(shows("plain text", "text").is_ok());
        for hiding in [
            "\x1b[8m",
            "\x1b[30;40m",
            "\x1b(0",
            "\x1b)0\x0e",
            "\x1b[?1049h",
            "\x1b[?25l",
            "\x1b]0;title",
            "\x1bP1$r",
            "\x1b[",
            "\x1b[1;1r",
            "\x1b[?7l",
            "\x1b]8;;http://x.test/\x1b\\",
            "\x1b]10;#000000\x07",
            "\x1b]11;#000000\x1b\\",
            "\x1b[?69h\x1b[1;2s",
        ] {
            assert!(
                shows(&format!("{hiding}netbox"), "netbox").is_err(),
                "{hiding:?}"
            );
        }
        // CAN abandons a string: what follows prints.
        assert!(shows("\x1b]0;title\x18netbox", "netbox").is_ok());
        // An OSC ended by BEL or ST is carried out: what follows prints.
        assert!(shows("\x1b]0;title\x07netbox", "netbox").is_ok());
        assert!(shows("\x1b]0;title\x1b\\netbox", "netbox").is_ok());
        // Leaving the alternate screen restores the pen saved on entering it.
        assert!(shows("\x1b[8m\x1b[?1049h\x1b[0m\x1b[?1049lnetbox", "netbox").is_err());
        assert!(shows("\x1b[8m\x1b[?1049h\x1b[?1049l\x1b[0mnetbox", "netbox").is_ok());
        assert!(shows("\x1b(0\x1b(Bnetbox", "netbox").is_ok());
        assert!(shows("\x1b)0\x0e\x0fnetbox", "netbox").is_ok());
        assert!(shows("\x1b[1;1r\x1b[rnetbox", "netbox").is_ok());
        assert!(shows("\x1b[?69h\x1b[1;2s\x1b[?69lnetbox", "netbox").is_ok());
        // Without DECLRMM, `CSI s` saves the cursor: no margins.
        assert!(shows("\x1b[1;2snetbox", "netbox").is_ok());
        assert!(shows("\x1b]10;#000\x07\x1b]110\x07netbox", "netbox").is_ok());
        assert!(shows("\x1b]10;?\x07netbox", "netbox").is_ok());
    }
}
