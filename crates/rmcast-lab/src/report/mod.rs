//! Reports: Markdown and SVG from a scenario's runs ([`scenario`]) or a
//! suite's points ([`suite`]), and the plot of Hunt's controller trace
//! ([`trace_plot`]).

pub mod scenario;
pub mod suite;
pub mod trace_plot;
