//! CPU hotplug engine: a step table with classic (Linux) and Bolt engines.
#![no_std]
extern crate alloc;
