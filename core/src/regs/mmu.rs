//! MMU TLB invalidation through the virtual-function block (`dev_vm.h`, used by every chip
//! from Turing on: `kgmmuCommitTlbInvalidate_TU102`). BAR0 = 0xb80000 + the header offset.

use crate::register;

register! {
    /// Which page directory to invalidate (ignored with ALL_PDB).
    pub NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB @ 0x00b8_30a0 {
        #[bits(1)] __: u8,
        /// 1:1 APERTURE (0 VID_MEM, 1 SYS_MEM)
        #[bits(1)] pub aperture_sys: bool,
        #[bits(2)] __: u8,
        /// 31:4 ADDR: PDB address >> 12 (low bits)
        #[bits(28)] pub addr: u32,
    }

    /// Upper PDB address bits.
    pub NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_UPPER_PDB @ 0x00b8_30a4 {
        /// 19:0 ADDR: PDB address >> 40
        #[bits(20)] pub addr: u32,
        #[bits(12)] __: u16,
    }

    /// Starts an invalidate when TRIGGER is written; TRIGGER reads 0 when it has finished.
    pub NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE @ 0x00b8_30b0 {
        /// 0:0 ALL_VA
        #[bits(1)] pub all_va: bool,
        /// 1:1 ALL_PDB
        #[bits(1)] pub all_pdb: bool,
        /// 2:2 HUBTLB_ONLY
        #[bits(1)] pub hubtlb_only: bool,
        /// 5:3 REPLAY
        #[bits(3)] pub replay: u8,
        /// 6:6 SYS_MEMBAR
        #[bits(1)] pub sys_membar: bool,
        /// 8:7 ACK (1 GLOBALLY, 2 INTRANODE)
        #[bits(2)] pub ack: u8,
        /// 14:9 CANCEL_CLIENT_ID
        #[bits(6)] pub cancel_client_id: u8,
        /// 19:15 CANCEL_GPC_ID
        #[bits(5)] pub cancel_gpc_id: u8,
        /// 20:20 CANCEL_CLIENT_TYPE
        #[bits(1)] pub cancel_client_type: bool,
        /// 21:21 USE_PASID
        #[bits(1)] pub use_pasid: bool,
        /// 22:22 USE_SIZE
        #[bits(1)] pub use_size: bool,
        /// 23:23 PROP_FLUSH
        #[bits(1)] pub prop_flush: bool,
        /// 26:24 CACHE_LEVEL (0 ALL)
        #[bits(3)] pub cache_level: u8,
        #[bits(4)] __: u8,
        /// 31:31 TRIGGER
        #[bits(1)] pub trigger: bool,
    }
}

/// `NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_ACK_GLOBALLY`.
pub const INVALIDATE_ACK_GLOBALLY: u8 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_the_vf_block_plus_the_header_offsets() {
        use crate::regs::Register;
        // tu102/dev_vm.h: NV_VIRTUAL_FUNCTION_FULL_PHYS_OFFSET 0x00BBFFFF:0x00B80000;
        // _PRIV_MMU_INVALIDATE_PDB 0x30A0, _UPPER_PDB 0x30A4, _INVALIDATE 0x30B0 (the PRIV
        // registers are 0x0-0x2FFFF of the block; the usermode page is 0x30000 on).
        const VF: usize = 0xb8_0000;
        assert_eq!(
            NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB::OFFSET as usize,
            VF + 0x30a0
        );
        assert_eq!(
            NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_UPPER_PDB::OFFSET as usize,
            VF + 0x30a4
        );
        assert_eq!(
            NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::OFFSET as usize,
            VF + 0x30b0
        );
    }

    #[test]
    fn invalidate_bits_match_header() {
        let v = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::new()
            .with_all_va(true)
            .with_all_pdb(true)
            .with_sys_membar(true)
            .with_trigger(true);
        assert_eq!(v.into_bits(), 0x8000_0043);
        let v = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE::new()
            .with_ack(INVALIDATE_ACK_GLOBALLY)
            .with_cache_level(7);
        assert_eq!(v.into_bits(), (1 << 7) | (7 << 24));
        let p = NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE_PDB::new()
            .with_aperture_sys(true)
            .with_addr(0x12345);
        assert_eq!(p.into_bits(), 0x0012_3452);
    }
}
