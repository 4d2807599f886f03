//! GSP registers the RPC transport uses (`published/turing/tu102/dev_gsp.h` and
//! `ampere/ga102/dev_gsp.h`; the gh100 and gb100 headers do not publish `NV_PGSP_QUEUE_HEAD`,
//! and OpenRM's `kgspSetCmdQueueHead_TU102` uses the tu102 one on every chip).

use crate::register;

register! {
    /// `NV_PGSP_QUEUE_HEAD(i)`: writing queue 0's head tells GSP-RM a command was queued
    /// (RM writes 0: `kgspSetCmdQueueHead_TU102`).
    pub NV_PGSP_QUEUE_HEAD @ 0x0011_0c00 [8; 8] {
        /// 31:0
        #[bits(32)] pub address: u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regs::RegisterArray;

    #[test]
    fn queue_head_offsets() {
        assert_eq!(NV_PGSP_QUEUE_HEAD::offset(0).unwrap(), 0x11_0c00);
        assert_eq!(NV_PGSP_QUEUE_HEAD::offset(7).unwrap(), 0x11_0c38);
        assert!(NV_PGSP_QUEUE_HEAD::offset(8).is_err());
    }
}
