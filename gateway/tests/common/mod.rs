//! Helpers shared by the gateway's integration tests. Each test file uses
//! only some of them.
#![allow(dead_code)]

pub mod cluster;
