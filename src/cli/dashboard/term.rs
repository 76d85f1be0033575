//! Taking the terminal (raw mode, alternate screen, hidden cursor) and giving it back
//! as it was: on return, on error and on panic.

use std::io::{self, Stdout};
use std::sync::Once;

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::Terminal;

pub type Term = Terminal<CrosstermBackend<Stdout>>;

/// Gives the terminal back when dropped (also while unwinding from a panic).
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        restore();
    }
}

/// Raw mode, the alternate screen and a hidden cursor, with a panic hook that restores
/// the terminal before the panic message is printed (else it would land on the
/// alternate screen and vanish with it).
pub fn enter() -> io::Result<(Term, Guard)> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
    enable_raw_mode()?;
    let guard = Guard(());
    execute!(io::stdout(), EnterAlternateScreen, Hide)?;
    let term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    Ok((term, guard))
}

/// Leave raw mode and the alternate screen, show the cursor. Harmless when repeated.
pub fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
}
