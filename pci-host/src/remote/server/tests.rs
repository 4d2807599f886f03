//! The server against hostile and broken clients: in memory (a byte stream into
//! [`serve_one`]) over [`MemDevice`]s, and over TCP with several clients at once.

use std::io::{Cursor, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvbare_core::hal::{DmaAllocator, DmaBuffer, Mmio, PciConfig};

use super::testutil::{MEM_BAR0_BUS, MEM_BAR1_BUS, MEM_SYSMEM_BUS, MemDevice, MemStats};
use super::*;
use crate::remote::client::RemoteGpu;
use crate::remote::wire::{RESPONSE_SIZE, encode_probe_filters};

const SMALL: ServeLimits = ServeLimits {
    max_sysmem_alloc: 64 << 10,
    max_sysmem_per_connection: 128 << 10,
    max_transfer: 16 << 10,
    max_probe_payload: 64,
};

fn devices(n: usize) -> (Arc<Devices>, Vec<Arc<MemStats>>) {
    let devs: Vec<MemDevice> = (0..n).map(|_| MemDevice::new(64 << 10, 64 << 10)).collect();
    let stats = devs.iter().map(MemDevice::stats).collect();
    let boxed = devs
        .into_iter()
        .map(|d| Box::new(d) as Box<dyn ServedDevice>)
        .collect();
    (Devices::new(boxed), stats)
}

fn conn(n: usize, limits: ServeLimits) -> (Connection, Vec<Arc<MemStats>>) {
    let (d, s) = devices(n);
    (Connection::new(d, limits, "test"), s)
}

fn req(cmd: u8, dev: u32, bar: u32, args: [u64; 3]) -> Vec<u8> {
    Request {
        cmd,
        dev_id: dev,
        bar,
        args,
    }
    .encode()
    .to_vec()
}

fn reqp(cmd: Cmd, dev: u32, bar: u32, a0: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = req(cmd as u8, dev, bar, [a0, payload.len() as u64, 0]);
    v.extend_from_slice(payload);
    v
}

/// Feeds `input` to one `serve_one`: its result, what it wrote, how much it read.
fn one(c: &mut Connection, input: &[u8]) -> (io::Result<bool>, Vec<u8>, usize) {
    let mut rd = Cursor::new(input);
    let mut out = Vec::new();
    let r = serve_one(c, &mut rd, &mut out);
    (r, out, rd.position() as usize)
}

/// Runs one request that must be answered with success; returns the header and the data.
fn ok(c: &mut Connection, input: &[u8]) -> (Response, Vec<u8>) {
    let (r, out, _) = one(c, input);
    assert!(r.unwrap(), "the connection ended");
    let h = Response::decode(&out).expect("a response header");
    assert_eq!(
        h.status,
        0,
        "{}",
        String::from_utf8_lossy(&out[RESPONSE_SIZE..])
    );
    (h, out[RESPONSE_SIZE..].to_vec())
}

/// Runs one request that must be refused with a response; returns the error text.
fn refused(c: &mut Connection, input: &[u8]) -> String {
    let (r, out, _) = one(c, input);
    assert!(r.unwrap(), "the connection ended");
    let h = Response::decode(&out).expect("a response header");
    assert_ne!(h.status, 0, "expected a refusal");
    let text = &out[RESPONSE_SIZE..];
    assert_eq!(h.r0, text.len() as u64);
    String::from_utf8(text.to_vec()).unwrap()
}

/// Runs one write: no response, the connection goes on.
fn silent(c: &mut Connection, input: &[u8]) {
    let (r, out, used) = one(c, input);
    assert!(r.unwrap(), "the connection ended");
    assert!(out.is_empty(), "a write got a response: {out:?}");
    assert_eq!(used, input.len());
}

fn ping(c: &mut Connection) {
    let (h, d) = ok(c, &req(Cmd::Ping as u8, 0, 0, [0; 3]));
    assert_eq!((h.r0, h.r1, d.len()), (0, 0, 0));
}

fn map_sysmem(c: &mut Connection, dev: u32, size: u64) -> (u32, Vec<u64>) {
    let (h, d) = ok(c, &req(Cmd::MapSysmem as u8, dev, 0, [size, 1, 0]));
    assert_eq!(h.r0, d.len() as u64);
    let pages = d
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (h.r1 as u32, pages)
}

fn get(c: &std::sync::atomic::AtomicU64) -> u64 {
    MemStats::get(c)
}

#[test]
fn probe_lists_devices_by_pci_address_and_filters() {
    let (mut c, _) = conn(2, ServeLimits::DEFAULT);
    let (h, d) = ok(&mut c, &reqp(Cmd::Probe, 0, 0, 0, &[]));
    assert_eq!(d, b"0000:01:00.0:0\n0000:02:00.0:1");
    assert_eq!(h.r0, d.len() as u64);
    // tinygrad's query: NVIDIA, display class, device id masks.
    let f = encode_probe_filters(&[(0xff00, 0x2300)]);
    let mut r = req(Cmd::Probe as u8, 0, 0, [3, f.len() as u64, 0x10de]);
    r.extend_from_slice(&f);
    assert_eq!(ok(&mut c, &r).1, b"0000:01:00.0:0\n0000:02:00.0:1");
    let f = encode_probe_filters(&[(0xff00, 0x2b00)]);
    let mut r = req(Cmd::Probe as u8, 0, 0, [3, f.len() as u64, 0x10de]);
    r.extend_from_slice(&f);
    let (h, d) = ok(&mut c, &r);
    assert_eq!((h.r0, d.len()), (0, 0));
    assert!(
        ok(&mut c, &req(Cmd::Probe as u8, 0, 0, [0, 0, 0x1002]))
            .1
            .is_empty()
    );
    assert!(
        ok(&mut c, &req(Cmd::Probe as u8, 0, 0, [4, 0, 0]))
            .1
            .is_empty()
    );
}

#[test]
fn requests_reach_the_device_after_a_tick_each() {
    let (mut c, s) = conn(1, ServeLimits::DEFAULT);
    ping(&mut c);
    ok(&mut c, &reqp(Cmd::Probe, 0, 0, 0, &[]));
    assert_eq!(get(&s[0].ticks), 0, "PING and PROBE name no device");
    let (h, _) = ok(&mut c, &req(Cmd::MapBar as u8, 0, 0, [0; 3]));
    assert_eq!((h.r0, h.r1), (MEM_BAR0_BUS, 64 << 10));
    let (h, _) = ok(&mut c, &req(Cmd::MapBar as u8, 0, 1, [0; 3]));
    assert_eq!((h.r0, h.r1), (MEM_BAR1_BUS, 64 << 10));
    assert!(refused(&mut c, &req(Cmd::MapBar as u8, 0, 3, [0; 3])).contains("no BAR3"));
    ok(&mut c, &req(Cmd::ResizeBar as u8, 0, 1, [0; 3]));
    silent(
        &mut c,
        &reqp(Cmd::MmioWrite, 0, 0, 0x100, &[1, 2, 3, 4, 5, 6, 7, 8]),
    );
    let (_, d) = ok(&mut c, &req(Cmd::MmioRead as u8, 0, 0, [0x104, 4, 0]));
    assert_eq!(d, [5, 6, 7, 8]);
    let (h, _) = ok(&mut c, &req(Cmd::CfgRead as u8, 0, 0, [0, 4, 0]));
    assert_eq!(h.r0, 0x2335_10de);
    let (h, _) = ok(&mut c, &req(Cmd::CfgRead as u8, 0, 0, [2, 2, 0]));
    assert_eq!(h.r0, 0x2335);
    ok(&mut c, &req(Cmd::CfgWrite as u8, 0, 0, [4, 2, 0x0006]));
    let (h, _) = ok(&mut c, &req(Cmd::CfgRead as u8, 0, 0, [4, 1, 0]));
    assert_eq!(h.r0, 6);
    ok(&mut c, &req(Cmd::Reset as u8, 0, 0, [0; 3]));
    assert_eq!(get(&s[0].resets), 1);
    let (handle, pages) = map_sysmem(&mut c, 0, 5000);
    assert_eq!(pages, [MEM_SYSMEM_BUS, MEM_SYSMEM_BUS + 4096]);
    assert_ne!(handle, 0);
    silent(&mut c, &reqp(Cmd::SysmemWrite, 0, handle, 8186, b"abcd"));
    let (_, d) = ok(&mut c, &req(Cmd::SysmemRead as u8, 0, handle, [8184, 8, 0]));
    assert_eq!(d, b"\0\0abcd\0\0");
    assert!(
        refused(&mut c, &req(Cmd::MapSysmemFd as u8, 0, 0, [4096, 0, 0])).contains("MAP_SYSMEM")
    );
    // Every request that named the device, refused ones included: 4 MAP_BAR/RESIZE_BAR,
    // 2 MMIO, 4 config, RESET, MAP_SYSMEM, 2 sysmem, MAP_SYSMEM_FD.
    assert_eq!(get(&s[0].ticks), 15);
    assert_eq!(c.sysmem_buffers(), 1);
    assert_eq!(c.sysmem_bytes(), 8192);
}

#[test]
fn an_unknown_command_gets_an_error_and_the_connection_goes_on() {
    let (mut c, s) = conn(1, ServeLimits::DEFAULT);
    for cmd in [13u8, 99, 255] {
        // arg1 is no payload length for a command the server does not know: nothing is read
        // after the header.
        let mut r = req(cmd, 0, 0, [1, 1 << 40, 2]);
        r.extend_from_slice(&req(Cmd::Ping as u8, 0, 0, [0; 3]));
        let (res, out, used) = one(&mut c, &r);
        assert!(res.unwrap());
        assert_eq!(used, REQUEST_SIZE);
        let h = Response::decode(&out).unwrap();
        assert_eq!(h.status, 1);
        assert_eq!(
            String::from_utf8_lossy(&out[RESPONSE_SIZE..]),
            format!("unknown command {cmd}")
        );
        ping(&mut c);
    }
    assert_eq!(get(&s[0].accesses), 0);
}

#[test]
fn a_truncated_header_ends_the_connection_and_an_empty_stream_ends_it_cleanly() {
    let (mut c, _) = conn(1, ServeLimits::DEFAULT);
    let (r, out, _) = one(&mut c, &[]);
    assert!(!r.unwrap());
    assert!(out.is_empty());
    let full = req(Cmd::Ping as u8, 0, 0, [0; 3]);
    for n in [1, 10, REQUEST_SIZE - 1] {
        let (r, out, _) = one(&mut c, &full[..n]);
        let e = r.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains(&format!("after {n} bytes")), "{e}");
        assert!(out.is_empty());
    }
}

#[test]
fn a_client_gone_mid_payload_changes_nothing() {
    let (mut c, s) = conn(1, ServeLimits::DEFAULT);
    let (handle, _) = map_sysmem(&mut c, 0, 4096);
    let w = reqp(Cmd::SysmemWrite, 0, handle, 0, &[0xaa; 100]);
    let (r, out, _) = one(&mut c, &w[..REQUEST_SIZE + 50]);
    let e = r.unwrap_err();
    assert!(
        e.to_string().contains("payload truncated after 50 of 100"),
        "{e}"
    );
    assert!(out.is_empty());
    let m = reqp(Cmd::MmioWrite, 0, 1, 0, &[0xbb; 64]);
    assert!(one(&mut c, &m[..REQUEST_SIZE + 63]).0.is_err());
    assert!(one(&mut c, &m[..REQUEST_SIZE]).0.is_err());
    // Nothing of either write was applied.
    let (_, d) = ok(&mut c, &req(Cmd::SysmemRead as u8, 0, handle, [0, 100, 0]));
    assert_eq!(d, [0; 100]);
    let (_, d) = ok(&mut c, &req(Cmd::MmioRead as u8, 0, 1, [0, 64, 0]));
    assert_eq!(d, [0; 64]);
    assert_eq!(get(&s[0].accesses), 1, "only the read reached the device");
}

#[test]
fn mmio_outside_a_bar_is_refused_before_the_device_sees_it() {
    let (mut c, s) = conn(1, ServeLimits::DEFAULT);
    let size = 64u64 << 10;
    for (bar, off, len) in [
        (0, size - 4, 8),
        (0, size, 4),
        (1, 0, size + 1),
        (1, u64::MAX - 3, 8),
        (1, u64::MAX, 1 << 20),
    ] {
        let t = refused(&mut c, &req(Cmd::MmioRead as u8, 0, bar, [off, len, 0]));
        assert!(t.contains(&format!("outside BAR{bar}")), "{t}");
    }
    let t = refused(&mut c, &req(Cmd::MmioRead as u8, 0, 2, [0, 4, 0]));
    assert!(t.contains("has no BAR2"), "{t}");
    let t = refused(&mut c, &req(Cmd::MmioRead as u8, 0, u32::MAX, [0, 4, 0]));
    assert!(t.contains("has no BAR4294967295"), "{t}");
    let t = refused(&mut c, &req(Cmd::MmioRead as u8, 7, 0, [0, 4, 0]));
    assert!(t.contains("no device 7: this server has 1"), "{t}");
    // Writes get no response: dropped, and the connection goes on.
    silent(&mut c, &reqp(Cmd::MmioWrite, 0, 0, size - 4, &[0xcc; 8]));
    silent(
        &mut c,
        &reqp(Cmd::MmioWrite, 0, 1, u64::MAX - 3, &[0xcc; 8]),
    );
    silent(&mut c, &reqp(Cmd::MmioWrite, 0, 5, 0, &[0xcc; 4]));
    silent(&mut c, &reqp(Cmd::MmioWrite, 3, 0, 0, &[0xcc; 4]));
    ping(&mut c);
    assert_eq!(get(&s[0].accesses), 0, "no bad access reached the device");
    assert_eq!(get(&s[0].unchecked), 0);
    let (_, d) = ok(&mut c, &req(Cmd::MmioRead as u8, 0, 0, [size - 8, 8, 0]));
    assert_eq!(d, [0; 8]);
}

#[test]
fn sysmem_handles_belong_to_their_connection_and_device() {
    let (d, _) = devices(2);
    let mut a = Connection::new(d.clone(), ServeLimits::DEFAULT, "a");
    let mut b = Connection::new(d, ServeLimits::DEFAULT, "b");
    let (ha, _) = map_sysmem(&mut a, 0, 4096);
    for h in [0, ha + 1, 12345, u32::MAX] {
        let t = refused(&mut a, &req(Cmd::SysmemRead as u8, 0, h, [0, 4, 0]));
        assert!(
            t.contains(&format!("no sysmem handle {h} on this connection")),
            "{t}"
        );
        silent(&mut a, &reqp(Cmd::SysmemWrite, 0, h, 0, b"xxxx"));
    }
    // Another client's handle is not this client's.
    let t = refused(&mut b, &req(Cmd::SysmemRead as u8, 0, ha, [0, 4, 0]));
    assert!(t.contains("no sysmem handle"), "{t}");
    silent(&mut b, &reqp(Cmd::SysmemWrite, 0, ha, 0, b"xxxx"));
    // The same handle through another device.
    let t = refused(&mut a, &req(Cmd::SysmemRead as u8, 1, ha, [0, 4, 0]));
    assert!(t.contains("belongs to another device"), "{t}");
    let (_, d) = ok(&mut a, &req(Cmd::SysmemRead as u8, 0, ha, [0, 4, 0]));
    assert_eq!(d, [0; 4]);
}

#[test]
fn sysmem_accesses_beyond_the_region_are_refused() {
    let (mut c, s) = conn(1, ServeLimits::DEFAULT);
    let (h, _) = map_sysmem(&mut c, 0, 4096);
    silent(&mut c, &reqp(Cmd::SysmemWrite, 0, h, 0, &[0x11; 4097]));
    silent(&mut c, &reqp(Cmd::SysmemWrite, 0, h, 4095, &[0x11; 2]));
    silent(&mut c, &reqp(Cmd::SysmemWrite, 0, h, u64::MAX, &[0x11; 2]));
    for (off, len) in [(0, 4097), (4096, 1), (u64::MAX - 1, 4)] {
        let t = refused(&mut c, &req(Cmd::SysmemRead as u8, 0, h, [off, len, 0]));
        assert!(
            t.contains(&format!("outside sysmem {h} (4096 bytes)")),
            "{t}"
        );
    }
    let (_, d) = ok(&mut c, &req(Cmd::SysmemRead as u8, 0, h, [0, 4096, 0]));
    assert!(
        d.iter().all(|&b| b == 0),
        "a refused write left bytes behind"
    );
    assert_eq!(
        get(&s[0].unchecked),
        0,
        "a bad range reached the host memory"
    );
}

#[test]
fn map_sysmem_is_bounded_per_request_and_per_connection() {
    let (mut c, s) = conn(1, ServeLimits::DEFAULT);
    let t = refused(&mut c, &req(Cmd::MapSysmem as u8, 0, 0, [1 << 40, 1, 0]));
    assert!(
        t.contains("MAP_SYSMEM of 1099511627776 bytes is larger than the 1073741824"),
        "{t}"
    );
    let t = refused(&mut c, &req(Cmd::MapSysmem as u8, 0, 0, [u64::MAX, 1, 0]));
    assert!(t.contains("larger than"), "{t}");
    let t = refused(&mut c, &req(Cmd::MapSysmem as u8, 0, 0, [0, 1, 0]));
    assert!(t.contains("0 bytes"), "{t}");
    let t = refused(&mut c, &req(Cmd::MapSysmem as u8, 9, 0, [4096, 1, 0]));
    assert!(t.contains("no device 9"), "{t}");
    assert_eq!(get(&s[0].allocs), 0, "nothing was allocated");

    let (mut c, s) = conn(1, SMALL);
    map_sysmem(&mut c, 0, 64 << 10);
    map_sysmem(&mut c, 0, 60 << 10);
    // 4 KiB left: a 4097-byte request rounds to 8 KiB.
    let t = refused(&mut c, &req(Cmd::MapSysmem as u8, 0, 0, [4097, 1, 0]));
    assert!(t.contains("allowed per connection"), "{t}");
    map_sysmem(&mut c, 0, 4096);
    assert_eq!(c.sysmem_bytes(), 128 << 10);
    assert_eq!(get(&s[0].allocs), 3);
}

#[test]
fn payloads_above_the_caps_close_the_connection_unread() {
    for (cmd, cap) in [
        (Cmd::MmioWrite, SMALL.max_transfer),
        (Cmd::SysmemWrite, SMALL.max_transfer),
        (Cmd::Probe, SMALL.max_probe_payload),
    ] {
        let (mut c, s) = conn(1, SMALL);
        // The whole payload follows, then a PING: neither is read.
        let mut r = reqp(cmd, 0, 0, 0, &vec![0u8; cap as usize + 1]);
        r.extend_from_slice(&req(Cmd::Ping as u8, 0, 0, [0; 3]));
        let (res, out, used) = one(&mut c, &r);
        let e = res.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(
            e.to_string().contains(&format!(
                "payload of {} bytes is larger than the {cap}",
                cap + 1
            )),
            "{e}"
        );
        assert_eq!(used, REQUEST_SIZE, "{cmd}: the payload was read");
        assert!(out.is_empty());
        assert_eq!(get(&s[0].accesses), 0);
        // A header that claims 2^64 - 1 bytes and sends none is closed at once too.
        let r = req(cmd as u8, 0, 0, [0, u64::MAX, 0]);
        assert!(one(&mut c, &r).0.is_err());
        // At the cap it is served.
        let (mut c, _) = conn(1, SMALL);
        let r = reqp(cmd, 0, 0, 0, &vec![0u8; cap as usize]);
        assert!(one(&mut c, &r).0.unwrap());
    }
}

#[test]
fn payload_memory_follows_the_bytes_that_arrive() {
    // A header may claim up to the transfer cap; what is allocated is what was sent, plus at
    // most one step.
    let mut buf = Vec::new();
    let e = read_payload(&mut Cursor::new(&[7u8; 10][..]), 200 << 20, &mut buf).unwrap_err();
    assert!(
        e.to_string()
            .contains("payload truncated after 10 of 209715200"),
        "{e}"
    );
    assert!(
        buf.capacity() <= PAYLOAD_STEP,
        "{} bytes for 10 sent",
        buf.capacity()
    );
    let sent = vec![9u8; 3 * PAYLOAD_STEP + 5];
    let e = read_payload(&mut Cursor::new(&sent[..]), 200 << 20, &mut buf).unwrap_err();
    assert!(e.to_string().contains("after 3145733 of"), "{e}");
    assert!(
        buf.capacity() <= 2 * (sent.len() + PAYLOAD_STEP),
        "{}",
        buf.capacity()
    );
    read_payload(&mut Cursor::new(&sent[..]), sent.len() as u64, &mut buf).unwrap();
    assert!(buf == sent);
}

#[test]
fn reads_above_the_transfer_cap_are_refused_unallocated() {
    let (mut c, s) = conn(1, SMALL);
    let t = refused(
        &mut c,
        &req(Cmd::MmioRead as u8, 0, 1, [0, (16 << 10) + 4, 0]),
    );
    assert!(
        t.contains("larger than the 16384 this server allows"),
        "{t}"
    );
    let t = refused(&mut c, &req(Cmd::MmioRead as u8, 0, 1, [0, u64::MAX, 0]));
    assert!(t.contains("larger than"), "{t}");
    let (h, _) = map_sysmem(&mut c, 0, 64 << 10);
    let t = refused(&mut c, &req(Cmd::SysmemRead as u8, 0, h, [0, 32 << 10, 0]));
    assert!(t.contains("larger than"), "{t}");
    assert_eq!(get(&s[0].accesses), 0);
    let (_, d) = ok(&mut c, &req(Cmd::MmioRead as u8, 0, 1, [0, 16 << 10, 0]));
    assert_eq!(d.len(), 16 << 10);
}

#[test]
fn config_accesses_of_bad_size_or_alignment_are_refused() {
    let (mut c, s) = conn(1, ServeLimits::DEFAULT);
    for (off, size) in [
        (0, 0),
        (0, 3),
        (0, 8),
        (0, u64::MAX),
        (1, 2),
        (2, 4),
        (3, 4),
        (4096, 1),
        (4094, 4),
        (1 << 16, 4),
        (u64::MAX - 3, 4),
        (u64::MAX, 1),
    ] {
        for cmd in [Cmd::CfgRead, Cmd::CfgWrite] {
            let t = refused(&mut c, &req(cmd as u8, 0, 0, [off, size, 0]));
            assert!(t.contains("config access of"), "{off:#x}/{size}: {t}");
        }
    }
    let t = refused(&mut c, &req(Cmd::CfgWrite as u8, 0, 0, [4, 4, 1 << 32]));
    assert!(t.contains("wider than 32 bits"), "{t}");
    assert_eq!(get(&s[0].accesses), 0);
    for (off, size) in [(4095, 1), (4094, 2), (4092, 4)] {
        ok(&mut c, &req(Cmd::CfgRead as u8, 0, 0, [off, size, 0]));
    }
}

#[test]
fn a_client_s_sysmem_is_freed_when_its_connection_goes() {
    let (d, s) = devices(2);
    let mut a = Connection::new(d.clone(), ServeLimits::DEFAULT, "a");
    let mut b = Connection::new(d, ServeLimits::DEFAULT, "b");
    map_sysmem(&mut a, 0, 8192);
    map_sysmem(&mut a, 1, 4096);
    map_sysmem(&mut b, 0, 4096);
    assert_eq!(get(&s[0].live_sysmem), 12288);
    assert_eq!(get(&s[1].live_sysmem), 4096);
    drop(a);
    assert_eq!(get(&s[0].live_sysmem), 4096);
    assert_eq!(get(&s[1].live_sysmem), 0);
    drop(b);
    assert_eq!(get(&s[0].live_sysmem), 0);
}

#[test]
fn handles_are_never_zero_nor_reused_while_held() {
    let (mut c, _) = conn(1, ServeLimits::DEFAULT);
    c.next_handle = u32::MAX;
    let (a, _) = map_sysmem(&mut c, 0, 4096);
    let (b, _) = map_sysmem(&mut c, 0, 4096);
    assert_eq!((a, b), (u32::MAX, 1));
    c.next_handle = u32::MAX;
    let (x, _) = map_sysmem(&mut c, 0, 4096);
    assert_eq!(x, 2);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
    /// Any bytes: the loop ends, without a panic, having read no more than it was given.
    #[test]
    fn any_stream_ends_without_a_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
        let (mut c, _) = conn(2, SMALL);
        let mut rd = Cursor::new(&bytes[..]);
        let mut out = Vec::new();
        let _ = serve_stream(&mut c, &mut rd, &mut out);
        proptest::prop_assert!(rd.position() as usize <= bytes.len());
    }

    /// Well-formed headers with hostile fields: every request but the writes gets exactly one
    /// response, and the connection survives all of them.
    #[test]
    fn hostile_fields_get_one_response_each(
        reqs in proptest::collection::vec(
            (0u8..16, 0u32..3, proptest::prelude::any::<u32>(),
             proptest::prelude::any::<u64>(), 0u64..20_000, proptest::prelude::any::<u64>()),
            1..24),
    ) {
        let (mut c, stats) = conn(2, SMALL);
        map_sysmem(&mut c, 0, 4096);
        for (cmd, dev, bar, a0, a1, a2) in reqs {
            let bar = if bar % 2 == 0 { bar % 4 } else { bar };
            let a0 = if a0 % 2 == 0 { a0 % 70_000 } else { a0 };
            let mut r = req(cmd, dev, bar, [a0, a1, a2]);
            let has_payload = Cmd::from_u8(cmd).is_some_and(|c| c.has_payload());
            if has_payload {
                r.resize(r.len() + a1 as usize, 0x5a);
            }
            let (res, out, used) = one(&mut c, &r);
            let too_big = has_payload
                && a1 > if cmd == Cmd::Probe as u8 { SMALL.max_probe_payload } else { SMALL.max_transfer };
            if too_big {
                proptest::prop_assert!(res.is_err());
                continue;
            }
            proptest::prop_assert!(res.unwrap());
            proptest::prop_assert_eq!(used, r.len());
            let answers = Cmd::from_u8(cmd).is_none_or(|c| c.has_response());
            proptest::prop_assert_eq!(out.is_empty(), !answers);
            if answers {
                let h = Response::decode(&out).unwrap();
                if h.status != 0 {
                    proptest::prop_assert_eq!(h.r0 as usize, out.len() - RESPONSE_SIZE);
                }
            }
        }
        for s in &stats {
            proptest::prop_assert_eq!(get(&s.unchecked), 0, "a bad range reached a device");
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Over TCP.

fn start(devs: Vec<MemDevice>, limits: ServeLimits) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let boxed = devs
        .into_iter()
        .map(|d| Box::new(d) as Box<dyn ServedDevice>)
        .collect();
    let devices = Devices::new(boxed);
    std::thread::spawn(move || serve_forever(listener, devices, limits));
    port
}

fn client(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // A server that stops answering fails the test instead of hanging it.
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn call(s: &mut TcpStream, r: &[u8], data: usize) -> (Response, Vec<u8>) {
    s.write_all(r).unwrap();
    let mut h = [0u8; RESPONSE_SIZE];
    s.read_exact(&mut h).unwrap();
    let h = Response::decode(&h).unwrap();
    let n = if h.status != 0 { h.r0 as usize } else { data };
    let mut d = vec![0u8; n];
    s.read_exact(&mut d).unwrap();
    (h, d)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_misbehaving_client_does_not_stop_another() {
    let dev = MemDevice::new(64 << 10, 16 << 20);
    let stats = dev.stats();
    let port = start(vec![dev], ServeLimits::DEFAULT);

    let mut good = client(port);
    let ping = req(Cmd::Ping as u8, 0, 0, [0; 3]);
    assert_eq!(call(&mut good, &ping, 0).0.status, 0);
    let (h, pages) = call(&mut good, &req(Cmd::MapSysmem as u8, 0, 0, [4096, 1, 0]), 8);
    assert_eq!((h.status, h.r0, pages.len()), (0, 8, 8));
    let good_handle = h.r1 as u32;

    // One client allocates, then stops mid-payload and holds the connection open.
    let mut stalled = client(port);
    let (h, _) = call(
        &mut stalled,
        &req(Cmd::MapSysmem as u8, 0, 0, [1 << 20, 1, 0]),
        256 * 8,
    );
    assert_eq!(h.status, 0);
    let stalled_handle = h.r1 as u32;
    wait_until("both allocations", || {
        get(&stats.live_sysmem) == (1 << 20) + 4096
    });
    let w = reqp(Cmd::SysmemWrite, 0, stalled_handle, 0, &[0xee; 1000]);
    stalled.write_all(&w[..REQUEST_SIZE + 10]).unwrap();

    // Another asks for 16 MiB and never reads the answer: its thread blocks writing it.
    let mut greedy = client(port);
    greedy
        .write_all(&req(Cmd::MmioRead as u8, 0, 1, [0, 16 << 20, 0]))
        .unwrap();
    // A third sends a truncated header and waits.
    let mut half = client(port);
    half.write_all(&ping[..20]).unwrap();
    // A fourth sends garbage: an unknown command, then bad accesses.
    let mut bad = client(port);
    let (h, d) = call(&mut bad, &req(200, 0, 0, [0; 3]), 0);
    assert_eq!((h.status, &d[..]), (1, &b"unknown command 200"[..]));
    let (h, _) = call(
        &mut bad,
        &req(Cmd::MmioRead as u8, 0, 0, [64 << 10, 4, 0]),
        4,
    );
    assert_eq!(h.status, 1);
    let (h, _) = call(
        &mut bad,
        &req(Cmd::SysmemRead as u8, 0, good_handle, [0, 4, 0]),
        4,
    );
    assert_eq!(h.status, 1, "another client's handle");

    // Meanwhile the first client is served as usual, the device included.
    for i in 0..50u32 {
        let mut w = reqp(Cmd::MmioWrite, 0, 0, 4 * u64::from(i), &i.to_le_bytes());
        w.extend_from_slice(&req(Cmd::MmioRead as u8, 0, 0, [4 * u64::from(i), 4, 0]));
        let (h, d) = call(&mut good, &w, 4);
        assert_eq!((h.status, d), (0, i.to_le_bytes().to_vec()));
    }
    let (h, d) = call(
        &mut good,
        &req(Cmd::MmioRead as u8, 0, 1, [0, 4096, 0]),
        4096,
    );
    assert_eq!((h.status, d.len()), (0, 4096));

    // A payload over the cap closes that client's connection, at once.
    let mut over = client(port);
    over.write_all(&req(Cmd::MmioWrite as u8, 0, 1, [0, (256 << 20) + 1, 0]))
        .unwrap();
    let mut b = [0u8; 1];
    match over.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        other => panic!("the server kept the connection open: {other:?}"),
    }

    // The stalled client goes away mid-payload: its memory is freed, nothing was written.
    drop(stalled);
    wait_until("the stalled client's memory freed", || {
        get(&stats.live_sysmem) == 4096
    });
    drop(greedy);
    drop(half);
    drop(bad);
    assert_eq!(call(&mut good, &ping, 0).0.status, 0);
    let (h, d) = call(
        &mut good,
        &req(Cmd::SysmemRead as u8, 0, good_handle, [0, 4096, 0]),
        4096,
    );
    assert_eq!((h.status, d), (0, vec![0; 4096]));
    drop(good);
    wait_until("every client's memory freed", || {
        get(&stats.live_sysmem) == 0
    });
    assert_eq!(get(&stats.unchecked), 0);
}

#[test]
fn nvbare_s_client_drives_a_device_through_the_server() {
    let mut dev = MemDevice::new(16 << 20, 32 << 20);
    dev.bar0[..4].copy_from_slice(&0x1b40_00a1_u32.to_le_bytes());
    let stats = dev.stats();
    let port = start(vec![dev], ServeLimits::DEFAULT);
    let gpu = RemoteGpu::connect("127.0.0.1", port, 0, Duration::from_secs(3)).unwrap();
    assert_eq!(gpu.device().name, "0000:01:00.0:0");
    assert_eq!(gpu.bar0().bus_addr(), MEM_BAR0_BUS);
    assert_eq!(gpu.bar1().bus_addr(), MEM_BAR1_BUS);
    assert_eq!(gpu.bar0().size(), 16 << 20);
    assert_eq!(gpu.bar0().read32(0), 0x1b40_00a1);
    gpu.bar0().write32(0x1000, 0xdead_beef);
    assert_eq!(gpu.bar0().read32(0x1000), 0xdead_beef);
    // Outside the BAR a read floats high, like a PCI master abort.
    assert_eq!(gpu.bar0().read32(16 << 20), u32::MAX);
    assert_eq!(gpu.pci().read_config32(0).unwrap(), 0x2335_10de);
    gpu.pci().write_config32(0x10, 0x1234_5678).unwrap();
    assert_eq!(gpu.pci().read_config32(0x10).unwrap(), 0x1234_5678);
    gpu.reset().unwrap();
    gpu.ping().unwrap();
    let buf = gpu.dma().alloc_dma(3 << 20).unwrap();
    assert_eq!(buf.dev_addr(), MEM_SYSMEM_BUS);
    let data: Vec<u8> = (0..3 << 20).map(|i| (i * 7) as u8).collect();
    buf.write(0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    buf.read(0, &mut back).unwrap();
    assert!(back == data);
    assert_eq!(get(&stats.resets), 1);
    assert_eq!(get(&stats.live_sysmem), 3 << 20);
    drop(buf);
    drop(gpu);
    wait_until("the client's memory freed", || get(&stats.live_sysmem) == 0);
}
