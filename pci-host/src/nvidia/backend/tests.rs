use super::*;

#[test]
fn placements_put_only_rings_and_commands_in_video_memory() {
    use Purpose::*;
    let all = [
        Buffer,
        Program,
        Ring,
        Commands,
        Notifier,
        Staging,
        LocalMemory,
    ];
    for (v, want) in [
        (VramFor::Both, &[Ring, Commands][..]),
        (VramFor::Rings, &[Ring][..]),
        (VramFor::Commands, &[Commands][..]),
        (VramFor::Neither, &[][..]),
    ] {
        for p in all {
            assert_eq!(v.covers(p), want.contains(&p), "{v:?} {p:?}");
        }
    }
}

#[test]
fn placement_values_and_a_bad_one() {
    use GpuPageSize::*;
    for (v, want) in [
        (None, (VramFor::Both, Big)),
        (Some(""), (VramFor::Both, Big)),
        (Some("vram"), (VramFor::Both, Big)),
        (Some("vram4k"), (VramFor::Both, Small)),
        (Some("vram2m"), (VramFor::Both, Huge)),
        (Some("host"), (VramFor::Neither, Small)),
        (Some("ring-host"), (VramFor::Commands, Big)),
        (Some("cmds-host"), (VramFor::Rings, Big)),
    ] {
        assert_eq!(placement(v).unwrap(), want, "{v:?}");
    }
    let e = placement(Some("VRAM")).unwrap_err().to_string();
    assert!(
        e.contains("NVBARE_KMOD_CMDS=\"VRAM\"") && e.contains("`ring-host`"),
        "{e}"
    );
}

#[test]
fn the_window_is_below_2_40_and_page_aligned() {
    const { assert!(VA_WINDOW_END <= 1 << 40) };
    assert_eq!(VA_WINDOW_BASE % (2 << 20), 0);
    assert_eq!(VA_WINDOW_END % (2 << 20), 0);
}

#[test]
fn group_windows_are_disjoint_aligned_and_inside_the_window() {
    for n in 1..=8u64 {
        let w: Vec<_> = group_windows(n).collect();
        assert_eq!(w.len() as u64, n);
        for (i, &(base, len)) in w.iter().enumerate() {
            assert!(len >= 2 << 20 && len % (2 << 20) == 0);
            assert!(base >= VA_WINDOW_BASE && base + len <= VA_WINDOW_END);
            if let Some(&(next, _)) = w.get(i + 1) {
                assert!(base + len <= next);
            }
        }
    }
}

#[test]
fn va_mode_values() {
    assert_eq!(VaMode::parse(None).unwrap(), VaMode::Rm);
    assert_eq!(VaMode::parse(Some("")).unwrap(), VaMode::Rm);
    assert_eq!(VaMode::parse(Some("rm")).unwrap(), VaMode::Rm);
    assert_eq!(VaMode::parse(Some("uvm")).unwrap(), VaMode::Uvm);
    let e = VaMode::parse(Some("UVM")).unwrap_err().to_string();
    assert!(e.contains("NVBARE_KMOD_VA") && e.contains("uvm"), "{e}");
}

#[test]
fn host_mappings_are_snooped_4k_and_gpu_uncached() {
    let flags = (NVOS46_FLAGS_PAGE_SIZE_4KB << NVOS46_FLAGS_PAGE_SIZE_SHIFT)
        | (NVOS46_FLAGS_CACHE_SNOOP_ENABLE << NVOS46_FLAGS_CACHE_SNOOP_SHIFT)
        | NVOS46_FLAGS_GPU_CACHEABLE_NO;
    // nvos.h: CACHE_SNOOP 4:4, PAGE_SIZE 11:8 (4KB = 1), GPU_CACHEABLE 18:17 (NO = 2).
    assert_eq!(flags, (1 << 4) | (1 << 8) | (2 << 17));
}
