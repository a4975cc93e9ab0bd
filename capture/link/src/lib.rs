//! ccscope-link: a mahimahi-style userspace link emulator shell.
pub mod config;
pub mod emu;
pub mod hist;
pub mod json;
pub mod packet;
pub mod pcap;
pub mod rng;
pub mod shell;
pub mod sys;
#[cfg(test)]
mod fuzz_tests;
