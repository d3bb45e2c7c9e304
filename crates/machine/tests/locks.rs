//! The machine gets the locks it asks for (`features = ["parking_lot"]`):
//! its vCPUs are OS threads, which must sleep on a contended lock, not
//! spin. (Under `--cfg loom` the locks are loom's model instead.)
#![cfg(not(loom))]

use std::any::TypeId;

use hotkern_kernel::sync::{LockKind, Mutex, RwLock, LOCKS};

#[test]
fn the_shared_kernel_uses_parking_lot_in_the_machine() {
    assert_eq!(LOCKS, LockKind::ParkingLot);
    assert_eq!(
        TypeId::of::<Mutex<u64>>(),
        TypeId::of::<parking_lot::Mutex<u64>>()
    );
    assert_eq!(
        TypeId::of::<RwLock<u64>>(),
        TypeId::of::<parking_lot::RwLock<u64>>()
    );
}
