//! Channels and the work submitted through them.
//!
//! * [`qmd`]: queue meta-data (QMD) layouts V03_00 / V04_00 / V05_00 and [`qmd::LaunchDesc`].
//! * [`launch`]: pure launch helpers: limits, constant bank 0 layout, shared and local memory
//!   sizing.
pub mod launch;
pub mod qmd;
