//! Measurement shared by `hopper load` and `hopper bench`: the backlog and the report of a
//! [`load`] run, and the figures a process takes of itself ([`measure`]).

pub mod load;
pub mod measure;
