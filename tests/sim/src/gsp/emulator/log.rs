//! The LIBOS log buffers GSP-RM writes, with the metadata image a decoder reads them by.

use super::*;

impl Inner {
    pub(super) fn log_rpc(
        &mut self,
        core: &mut SimCore,
        hdr: &rpc_message_header_v03_00,
        status: u32,
    ) {
        if self.cfg.log_rpcs {
            self.log(
                core,
                1,
                &[hdr.function as u64, hdr.sequence as u64, status as u64],
            );
        }
    }

    /// Appends a LIBOS record (args, metadata pointer, timestamp) to every log buffer.
    pub(super) fn log(&mut self, core: &mut SimCore, meta: usize, args: &[u64]) {
        let ts = core.clock.nanos().max(1);
        let meta_va = LOG_IMAGE_BASE + (meta * 0x40) as u64;
        for i in 0..self.logs.len() {
            let l = self.logs[i].clone();
            let entries = l.size / 8 - 1;
            if entries == 0 {
                continue;
            }
            let mut put = l.put;
            for w in args.iter().chain([meta_va, ts].iter()) {
                let at = l.addr + 8 + (put % entries) * 8;
                let _ = core.host.write(at, &w.to_le_bytes());
                put += 1;
            }
            let _ = core.host.write(l.addr, &put.to_le_bytes());
            self.logs[i].put = put;
        }
    }
}

/// Metadata records: (format, argument count) at `LOG_IMAGE_BASE + i * 0x40`; strings from
/// `+0x800`.
const LOG_FORMATS: [(&str, u8); 3] = [
    ("emulated GSP-RM %s booted on %s\n", 2),
    ("RPC %u (seq %u) returned 0x%x\n", 3),
    ("injected fault %u\n", 1),
];

pub(super) fn build_log_image(model: &ChipModel) -> Vec<(u64, Vec<u8>)> {
    let mut img = vec![0u8; 0x1000];
    let file_va = LOG_IMAGE_BASE + 0x700;
    img[0x700..0x700 + 12].copy_from_slice(b"emulator.rs\0");
    for (i, (fmt, argc)) in LOG_FORMATS.iter().enumerate() {
        let meta = i * 0x40;
        let fmt_off = 0x400 + i * 0x100;
        img[fmt_off..fmt_off + fmt.len()].copy_from_slice(fmt.as_bytes());
        // libosLogMetadata: filename, format, lineNumber (aligned 8), argumentCount,
        // printLevel, specialType.
        img[meta..meta + 8].copy_from_slice(&file_va.to_le_bytes());
        img[meta + 8..meta + 16].copy_from_slice(&(LOG_IMAGE_BASE + fmt_off as u64).to_le_bytes());
        img[meta + 16..meta + 20].copy_from_slice(&(100 + i as u32).to_le_bytes());
        img[meta + 20] = *argc;
        img[meta + 21] = 1;
    }
    img[0x800..0x808].copy_from_slice(b"r570.144");
    let name = model.chipset.name().as_bytes();
    img[0x900..0x900 + name.len()].copy_from_slice(name);
    vec![(LOG_IMAGE_BASE, img)]
}
