//! The runner: one task owns the [`App`]: terminal input, the host's events and a clock tick
//! meet in one `tokio::select!`, bursts are drained before one redraw, and every change goes
//! through [`update`]. The terminal is restored on quit, on error and on panic.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use crossterm::event::{DisableMouseCapture, EnableMouseCapture, Event as TermEvent, EventStream};
use futures::{FutureExt, StreamExt};
use ratatui::DefaultTerminal;

use super::app::{Action, App, Effect};
use super::net::Net;
use super::update::update;

/// How often the clock moves on screen (and coalesced reads are sent).
const TICK: Duration = Duration::from_millis(250);

/// Whether colour is wanted: off when `NO_COLOR` is set to anything non-empty.
pub fn color_wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// What the operator at this console may change on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Verify, stop, acknowledge and clear, each after its confirmation.
    Full,
    /// Look only (`--read-only`): the keys that would change the host are refused.
    ReadOnly,
}

/// Runs the console against the host whose sockets are in `socket_dir` until the operator quits.
pub async fn run(socket_dir: PathBuf, access: Access) -> io::Result<()> {
    let mut terminal = ratatui::try_init()?;
    // The mouse is captured while the console runs and released on quit, on error and on
    // panic (ratatui's own hook restores the rest of the terminal).
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = crossterm::execute!(io::stdout(), DisableMouseCapture);
        hook(info);
    }));
    let _ = crossterm::execute!(io::stdout(), EnableMouseCapture);
    let result = event_loop(&mut terminal, socket_dir, access).await;
    let _ = crossterm::execute!(io::stdout(), DisableMouseCapture);
    ratatui::restore();
    result
}

async fn event_loop(
    terminal: &mut DefaultTerminal,
    socket_dir: PathBuf,
    access: Access,
) -> io::Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let net = Net::start(socket_dir.clone(), tx);
    let mut app = App::new(
        socket_dir.display().to_string(),
        crate::protocol::now_millis(),
    );
    app.color = color_wanted();
    app.read_only = access == Access::ReadOnly;
    let size = terminal.size()?;
    apply(
        &mut app,
        &net,
        terminal,
        Action::Resize(size.width, size.height),
    )?;
    let mut input = EventStream::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        terminal.draw(|f| f.render_widget(&app, f.area()))?;
        let action = tokio::select! {
            ev = input.next() => match ev {
                Some(Ok(TermEvent::Key(k))) => Action::Key(k),
                Some(Ok(TermEvent::Mouse(m))) => Action::Mouse(m),
                Some(Ok(TermEvent::Resize(c, r))) => Action::Resize(c, r),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
            Some(a) = rx.recv() => a,
            _ = tick.tick() => Action::Tick(crate::protocol::now_millis()),
        };
        apply(&mut app, &net, terminal, action)?;
        // Drain whatever else is already waiting (typed-ahead keys, a burst of host events)
        // before the next redraw.
        while let Some(Some(Ok(ev))) = input.next().now_or_never() {
            let action = match ev {
                TermEvent::Key(k) => Action::Key(k),
                TermEvent::Mouse(m) => Action::Mouse(m),
                TermEvent::Resize(c, r) => Action::Resize(c, r),
                _ => continue,
            };
            apply(&mut app, &net, terminal, action)?;
        }
        while let Ok(a) = rx.try_recv() {
            apply(&mut app, &net, terminal, a)?;
        }
        if app.quit {
            return Ok(());
        }
    }
}

fn apply(
    app: &mut App,
    net: &Net,
    terminal: &mut DefaultTerminal,
    action: Action,
) -> io::Result<()> {
    let first = update(app, action);
    let queued = std::mem::take(&mut app.outbox);
    for effect in first.into_iter().chain(queued) {
        match effect {
            Effect::Quit => {}
            Effect::Copy(text) => {
                let backend = terminal.backend_mut();
                backend.write_all(osc52(&text).as_bytes())?;
                backend.flush()?;
            }
            other => net.run(other),
        }
    }
    Ok(())
}

/// The OSC 52 sequence that asks the terminal to put `text` on the clipboard (`c`), its bytes
/// in base64 and ended by BEL, which xterm, kitty, WezTerm, iTerm2 and tmux (with
/// `set-clipboard on`) read.
pub fn osc52(text: &str) -> String {
    use base64::Engine;
    format!(
        "\x1b]52;c;{}\x07",
        base64::engine::general_purpose::STANDARD.encode(text)
    )
}
