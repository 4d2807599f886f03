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
    assert_eq!(
        (KMOD_VA_WINDOW.base(), KMOD_VA_WINDOW.end()),
        (VA_WINDOW_BASE, VA_WINDOW_END)
    );
}

#[test]
fn windows_inside_the_reserved_range_are_accepted() {
    let g = 1u64 << 30;
    for w in [
        KMOD_VA_WINDOW,
        VaWindow::new(VA_WINDOW_BASE, 4 * g).unwrap(),
        VaWindow::new(VA_WINDOW_END - 8 * g, 8 * g).unwrap(),
        KMOD_VA_WINDOW.slice(1, 2).unwrap(),
    ] {
        assert_eq!(check_window(w).unwrap(), w);
        let a = va_allocator(w).unwrap();
        assert_eq!((a.base(), a.size()), (w.base(), w.size()), "{w}");
    }
}

#[test]
fn windows_outside_the_reserved_range_are_refused_saying_where_to_go() {
    let g = 1u64 << 30;
    for w in [
        // Below the base: where RM and the CPU put things.
        VaWindow::new(0, 4 * g).unwrap(),
        // Straddling the base.
        VaWindow::new(VA_WINDOW_BASE - 2 * g, 4 * g).unwrap(),
        VaWindow::new(0, 1 << 40).unwrap(),
    ] {
        let e = check_window(w).unwrap_err();
        assert!(matches!(e, KmodError::VaWindow(_)), "{e:?}");
        let t = e.to_string();
        assert!(
            t.contains(&format!("{:#x}", w.base())) && t.contains(&KMOD_VA_WINDOW.to_string()),
            "{t}"
        );
        assert!(t.contains("choose a window inside it"), "{t}");
    }
}

#[test]
fn group_windows_are_disjoint_aligned_and_inside_the_window() {
    for n in 1..=8u64 {
        let w: Vec<_> = (0..n).map(|k| group_window(k, n).unwrap()).collect();
        for (i, p) in w.iter().enumerate() {
            assert!(p.size() >= 2 << 20 && p.size() % (2 << 20) == 0);
            assert!(p.base() >= VA_WINDOW_BASE && p.end() <= VA_WINDOW_END);
            if let Some(next) = w.get(i + 1) {
                assert!(p.end() <= next.base());
            }
        }
    }
    assert!(matches!(group_window(2, 2), Err(KmodError::VaWindow(_))));
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
