//! The styles drawing uses, with colour or without (`NO_COLOR`).

use ratatui::style::{Color, Modifier, Style};

/// The styles of one frame: coloured, or the same emphasis without colour.
pub(super) struct Theme {
    /// Whether colours are used (off with `NO_COLOR`).
    pub(super) color: bool,
}

impl Theme {
    pub(super) fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }
    pub(super) fn bold(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
    pub(super) fn dim(&self) -> Style {
        if self.color {
            Style::new().fg(Color::DarkGray)
        } else {
            Style::new()
        }
    }
    pub(super) fn selected(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }
    pub(super) fn alert(&self) -> Style {
        if self.color {
            Style::new()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        }
    }
    pub(super) fn gauge(&self, ratio: f64) -> Style {
        if !self.color {
            return Style::new();
        }
        if ratio >= 0.95 {
            Style::new().fg(Color::Red)
        } else if ratio >= 0.80 {
            Style::new().fg(Color::Yellow)
        } else {
            Style::new().fg(Color::Green)
        }
    }
}
