//! Shared helpers for nvbare's end-to-end tests.

pub mod sysfs_fixture;
