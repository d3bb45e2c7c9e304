//! Hotpluggable physical memory segments (NetBSD `uvm_hotplug(9)`, done better).
#![no_std]
extern crate alloc;
