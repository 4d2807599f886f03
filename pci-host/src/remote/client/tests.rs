//! The client against a small server thread speaking the wire format: a fake GPU with a few
//! registers, config space and host memory, and ways to misbehave.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvbare_core::hal::{DmaAllocator, DmaBuffer, HalError, Mmio, PciConfig};

use super::*;
use crate::remote::wire::{REQUEST_SIZE, probe_filters};

/// How the fake server misbehaves.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fault {
    None,
    /// Answers this command with an error carrying this text.
    Refuse(Cmd, String),
    /// Closes the connection on reading this command's request.
    CloseOn(Cmd),
    /// Sends a success header for this command, then closes before the data.
    CloseAfterHeader(Cmd),
    /// Answers PROBE with a huge length and nothing after it.
    HugeProbe,
    /// Answers this command with an error whose text is said to be huge.
    HugeErrorText(Cmd),
    /// Answers MAP_SYSMEM with one address too few.
    ShortSysmemList,
    /// Hands out host memory whose pages are 8 KiB apart.
    Scattered,
    /// Reads requests and never answers.
    Silent,
}

#[derive(Debug)]
struct State {
    devices: Vec<String>,
    /// `(bar, offset)` -> value.
    regs: HashMap<(u32, u64), u32>,
    /// `(bus address, size)` of BARs 0..6.
    bars: [(u64, u64); 6],
    config: Vec<u8>,
    /// Host memory by handle: `(bus address, bytes)`.
    sysmem: Vec<(u64, Vec<u8>)>,
    resets: u32,
    fault: Fault,
    /// Every request, with its payload length.
    log: Vec<(Request, usize)>,
    /// PROBE payloads.
    probes: Vec<Vec<u8>>,
    /// Stop accepting after the current connection.
    stop: bool,
}

impl State {
    fn new() -> Self {
        let mut config = vec![0u8; 4096];
        config[..4].copy_from_slice(&0x2335_10de_u32.to_le_bytes());
        let mut regs = HashMap::new();
        regs.insert((0, 0), 0x1b40_00a1);
        State {
            devices: vec!["0000:01:00.0:0".into(), "0000:41:00.0:7".into()],
            regs,
            bars: [
                (0xf000_0000, 16 << 20),
                (0x38_0000_0000, 256 << 20),
                (0, 0),
                (0x38_1000_0000, 32 << 20),
                (0, 0),
                (0, 0),
            ],
            config,
            sysmem: Vec::new(),
            resets: 0,
            fault: Fault::None,
            log: Vec::new(),
            probes: Vec::new(),
            stop: false,
        }
    }

    fn count(&self, cmd: Cmd) -> usize {
        self.log
            .iter()
            .filter(|(r, _)| r.cmd() == Some(cmd))
            .count()
    }
}

struct Fake {
    port: u16,
    state: Arc<Mutex<State>>,
    thread: Option<JoinHandle<()>>,
}

impl Fake {
    fn start(state: State) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(state));
        let st = state.clone();
        let thread = std::thread::spawn(move || {
            // One client per test (a connect made only to probe counts as one).
            for s in listener.incoming() {
                let Ok(s) = s else { return };
                if !serve(s, &st) {
                    return;
                }
            }
        });
        Fake {
            port,
            state,
            thread: Some(thread),
        }
    }

    fn with_fault(fault: Fault) -> Fake {
        let mut s = State::new();
        s.fault = fault;
        Fake::start(s)
    }

    fn connect(&self, index: u32) -> Result<RemoteGpu, RemoteError> {
        RemoteGpu::connect("127.0.0.1", self.port, index, Duration::from_secs(3))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        // Unblocks `incoming()` with a connection that closes at once.
        self.state.lock().unwrap().stop = true;
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ok(s: &mut TcpStream, r0: u64, r1: u64, data: &[u8]) -> std::io::Result<()> {
    let mut b = Response::ok(r0, r1).encode().to_vec();
    b.extend_from_slice(data);
    s.write_all(&b)
}

fn err(s: &mut TcpStream, text: &str) -> std::io::Result<()> {
    let mut b = Response::error(text.len()).encode().to_vec();
    b.extend_from_slice(text.as_bytes());
    s.write_all(&b)
}

/// Serves one connection; false once the server should stop accepting.
fn serve(mut s: TcpStream, st: &Mutex<State>) -> bool {
    // A client that goes away ends its connection; that is not an error here.
    let _ = serve_requests(&mut s, st);
    !st.lock().unwrap().stop
}

fn serve_requests(s: &mut TcpStream, st: &Mutex<State>) -> std::io::Result<()> {
    loop {
        let mut h = [0u8; REQUEST_SIZE];
        s.read_exact(&mut h)?;
        let req = Request::decode(&h).unwrap();
        let mut payload = vec![0u8; req.payload_len() as usize];
        s.read_exact(&mut payload)?;
        let mut g = st.lock().unwrap();
        g.log.push((req, payload.len()));
        let cmd = req.cmd().unwrap();
        match g.fault.clone() {
            Fault::CloseOn(c) if c == cmd => return Ok(()),
            Fault::Refuse(c, text) if c == cmd => {
                if cmd.has_response() {
                    err(s, &text)?;
                }
                continue;
            }
            Fault::HugeErrorText(c) if c == cmd => {
                let mut b = Response::error(0).encode();
                b[1..9].copy_from_slice(&(1u64 << 40).to_le_bytes());
                s.write_all(&b)?;
                continue;
            }
            Fault::CloseAfterHeader(c) if c == cmd => {
                ok(s, 0, 0, &[])?;
                return Ok(());
            }
            Fault::Silent => continue,
            _ => {}
        }
        let [a0, a1, a2] = req.args;
        match cmd {
            Cmd::Probe => {
                assert_eq!(probe_filters(&payload), vec![(0, 0)]);
                g.probes.push(payload);
                if g.fault == Fault::HugeProbe {
                    ok(s, 1 << 40, 0, &[])?;
                    continue;
                }
                let list = g.devices.join("\n");
                ok(s, list.len() as u64, 0, list.as_bytes())?;
            }
            Cmd::MapBar => {
                let (bus, size) = g.bars.get(req.bar as usize).copied().unwrap_or((0, 0));
                if size == 0 {
                    err(s, &format!("BAR{} does not exist", req.bar))?;
                } else {
                    ok(s, bus, size, &[])?;
                }
            }
            Cmd::CfgRead => {
                let o = a0 as usize;
                let mut v = 0u64;
                for i in 0..a1 as usize {
                    v |= u64::from(g.config[o + i]) << (8 * i);
                }
                ok(s, v, 0, &[])?;
            }
            Cmd::CfgWrite => {
                let o = a0 as usize;
                for i in 0..a1 as usize {
                    g.config[o + i] = (a2 >> (8 * i)) as u8;
                }
                ok(s, 0, 0, &[])?;
            }
            Cmd::Reset => {
                g.resets += 1;
                ok(s, 0, 0, &[])?;
            }
            Cmd::MmioRead => {
                assert_eq!(a1, 4);
                let v = g.regs.get(&(req.bar, a0)).copied().unwrap_or(0);
                ok(s, 0, 0, &v.to_le_bytes())?;
            }
            Cmd::MmioWrite => {
                let mut b = [0u8; 4];
                b.copy_from_slice(&payload);
                g.regs.insert((req.bar, a0), u32::from_le_bytes(b));
            }
            Cmd::MapSysmem => {
                assert_eq!(a1, 1, "nvbare asks for contiguous memory");
                let pages = a0 / 4096;
                let base = 0x1_0000_0000 + g.sysmem.len() as u64 * 0x1000_0000;
                let step = if g.fault == Fault::Scattered {
                    8192
                } else {
                    4096
                };
                let mut list: Vec<u8> = (0..pages)
                    .flat_map(|i| (base + i * step).to_le_bytes())
                    .collect();
                if g.fault == Fault::ShortSysmemList {
                    list.truncate(list.len() - 8);
                }
                let handle = g.sysmem.len() as u64;
                g.sysmem.push((base, vec![0u8; a0 as usize]));
                ok(s, list.len() as u64, handle, &list)?;
            }
            Cmd::SysmemRead => {
                let mem = &g.sysmem[req.bar as usize].1;
                let data = mem[a0 as usize..(a0 + a1) as usize].to_vec();
                ok(s, 0, 0, &data)?;
            }
            Cmd::SysmemWrite => {
                let mem = &mut g.sysmem[req.bar as usize].1;
                mem[a0 as usize..a0 as usize + payload.len()].copy_from_slice(&payload);
            }
            Cmd::Ping => ok(s, 0, 0, &[])?,
            Cmd::MapSysmemFd | Cmd::ResizeBar => err(s, "not supported")?,
        }
    }
}

#[test]
fn probes_and_picks_the_device_asked_for() {
    let fake = Fake::start(State::new());
    let gpu = fake.connect(1).unwrap();
    assert_eq!(gpu.device().name, "0000:41:00.0:7");
    assert_eq!(gpu.device().dev_id, 7);
    assert_eq!(gpu.device().bdf(), Some("0000:41:00.0".parse().unwrap()));
    assert_eq!(gpu.index(), 1);
    assert_eq!(gpu.addr(), format!("127.0.0.1:{}", fake.port));
    assert_eq!(gpu.bar0().size(), 16 << 20);
    assert_eq!(gpu.bar1().size(), 256 << 20);
    assert_eq!(gpu.bar1().bus_addr(), 0x38_0000_0000);
    assert_eq!(gpu.map_bar(3).unwrap().bus_addr(), 0x38_1000_0000);
    gpu.ping().unwrap();
    let st = fake.state();
    assert_eq!(st.probes.len(), 1);
    let (probe, len) = st.log[0];
    assert_eq!(probe.cmd(), Some(Cmd::Probe));
    assert_eq!(
        probe.args,
        [3, 8, 0x10de],
        "base class, payload bytes, vendor"
    );
    assert_eq!(len, 8);
    // Every request after PROBE names the device by its index from the list.
    assert!(
        st.log[1..].iter().all(|(r, _)| r.dev_id == 7),
        "{:?}",
        st.log
    );
}

#[test]
fn an_index_the_server_does_not_have_lists_what_it_has() {
    let fake = Fake::start(State::new());
    let e = fake.connect(2).unwrap_err();
    assert!(matches!(e, RemoteError::NoDevice { index: 2, .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("127.0.0.1:{}", fake.port)), "{msg}");
    assert!(
        msg.contains("0: 0000:01:00.0:0, 1: 0000:41:00.0:7"),
        "{msg}"
    );
    assert!(msg.contains("N below 2"), "{msg}");

    let mut st = State::new();
    st.devices.clear();
    let empty = Fake::start(st);
    let msg = empty.connect(0).unwrap_err().to_string();
    assert!(msg.contains("offers none"), "{msg}");
    assert_eq!(
        RemoteGpu::probe("127.0.0.1", fake.port, &RemoteOptions::default())
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn registers_and_config_space_round_trip() {
    let fake = Fake::start(State::new());
    let gpu = fake.connect(0).unwrap();
    let bar0 = gpu.bar0();
    assert_eq!(bar0.read32(0), 0x1b40_00a1);
    bar0.write32(0x1000, 0xdead_beef);
    assert_eq!(bar0.read32(0x1000), 0xdead_beef);
    bar0.write64(0x2000, 0x1122_3344_5566_7788);
    assert_eq!(bar0.read64(0x2000), 0x1122_3344_5566_7788);
    assert_eq!(bar0.try_read32(0x1000), Ok(0xdead_beef));
    bar0.try_write32(0x1004, 5).unwrap();
    assert_eq!(bar0.read32(0x1004), 5);
    // Outside the BAR or misaligned: all ones, no request, like a master abort.
    let before = fake.state().log.len();
    assert_eq!(bar0.read32(16 << 20), u32::MAX);
    assert_eq!(bar0.read32(2), u32::MAX);
    bar0.write32(16 << 20, 1);
    assert!(matches!(
        bar0.try_read32(16 << 20),
        Err(HalError::OutOfRange { .. })
    ));
    assert_eq!(fake.state().log.len(), before);
    // BAR1 is its own window.
    gpu.bar1().write32(0x10, 9);
    assert_eq!(gpu.bar1().read32(0x10), 9);
    assert_eq!(bar0.read32(0x10), 0);

    let pci = gpu.pci();
    assert_eq!(pci.read_config32(0).unwrap(), 0x2335_10de);
    assert_eq!(pci.read_config16(2).unwrap(), 0x2335);
    pci.set_bus_master(true).unwrap();
    assert_eq!(pci.read_config32(4).unwrap() & 0x4, 0x4);
    assert!(matches!(
        pci.read_config32(2),
        Err(HalError::Misaligned { .. })
    ));
    assert!(matches!(
        pci.read_config32(4096),
        Err(HalError::OutOfRange { .. })
    ));
    pci.reset_function().unwrap();
    gpu.reset().unwrap();
    assert_eq!(fake.state().resets, 2);
    assert!(gpu.last_error().is_none());
}

#[test]
fn dma_memory_is_contiguous_chunked_and_reused_zeroed() {
    let fake = Fake::start(State::new());
    let gpu = fake.connect(0).unwrap();
    let dma = gpu.dma();
    let n = 2 * SYSMEM_CHUNK + 4096 + 5;
    let buf = dma.alloc_dma(n).unwrap();
    assert_eq!(buf.len(), (n as u64).div_ceil(4096) as usize * 4096);
    assert_eq!(buf.dev_addr(), 0x1_0000_0000);
    let data: Vec<u8> = (0..n).map(|i| (i * 7 + i / 4096) as u8).collect();
    buf.write(0, &data).unwrap();
    let mut back = vec![0u8; n];
    buf.read(0, &mut back).unwrap();
    assert_eq!(back, data);
    {
        let st = fake.state();
        let writes: Vec<usize> = st
            .log
            .iter()
            .filter(|(r, _)| r.cmd() == Some(Cmd::SysmemWrite))
            .map(|(_, l)| *l)
            .collect();
        assert_eq!(writes, vec![SYSMEM_CHUNK, SYSMEM_CHUNK, 4096 + 5]);
        assert!(
            st.log
                .iter()
                .filter(|(r, _)| r.cmd() == Some(Cmd::SysmemRead))
                .all(|(r, _)| r.args[1] <= SYSMEM_CHUNK as u64)
        );
        assert_eq!(st.count(Cmd::SysmemRead), 3);
    }
    buf.write_u32(8, 0x0102_0304).unwrap();
    assert_eq!(buf.read_u32(8).unwrap(), 0x0102_0304);
    buf.fill(16, 100, 0xab).unwrap();
    assert_eq!(buf.read_u64(16).unwrap(), 0xabab_abab_abab_abab);
    assert!(matches!(
        buf.read(buf.len() - 4, &mut [0u8; 8]),
        Err(HalError::OutOfRange { .. })
    ));
    assert!(matches!(
        buf.write(buf.len(), &[1]),
        Err(HalError::OutOfRange { .. })
    ));
    let handle = buf.handle();
    drop(buf);
    // The protocol cannot free memory: the same size comes back, zeroed by the client.
    let again = dma.alloc_dma(n).unwrap();
    assert_eq!(again.handle(), handle);
    let mut z = vec![1u8; n];
    again.read(0, &mut z).unwrap();
    assert!(z.iter().all(|b| *b == 0));
    assert_eq!(fake.state().count(Cmd::MapSysmem), 1);
    // A different size is a new allocation; zero bytes still get a page.
    let small = dma.alloc_dma(0).unwrap();
    assert_eq!(small.len(), 4096);
    assert_ne!(small.handle(), handle);
}

#[test]
fn server_error_text_is_carried_and_reported() {
    let fake = Fake::with_fault(Fault::Refuse(Cmd::MmioRead, "BAR0 is not mapped".into()));
    let gpu = fake.connect(0).unwrap();
    // The fallible read says what failed; the text is kept.
    let e = gpu.bar0().try_read32(0).unwrap_err();
    assert_eq!(
        e,
        HalError::Os {
            op: "MMIO_READ on the remote GPU server",
            errno: 5
        }
    );
    let last = gpu.last_error().unwrap();
    assert!(
        matches!(&last, RemoteError::Server { cmd: Cmd::MmioRead, message, .. }
        if message == "BAR0 is not mapped")
    );
    assert!(
        last.to_string()
            .contains("refused MMIO_READ: BAR0 is not mapped"),
        "{last}"
    );
    // The infallible read returns all ones and leaves the error for the next fallible call.
    assert_eq!(gpu.bar0().read32(0), u32::MAX);
    assert!(gpu.pci().read_config32(0).is_err());
    // Reported once; the connection still works.
    assert_eq!(gpu.pci().read_config32(0).unwrap(), 0x2335_10de);
    gpu.ping().unwrap();
    assert!(gpu.broken().is_none());
    assert!(gpu.take_last_error().is_some());
    assert!(gpu.last_error().is_none());

    let fake = Fake::with_fault(Fault::Refuse(Cmd::MapSysmem, "out of hugepages".into()));
    let gpu = fake.connect(0).unwrap();
    assert_eq!(
        gpu.dma().alloc_dma(8192).unwrap_err(),
        HalError::NoMemory { requested: 8192 }
    );
    assert!(
        gpu.last_error()
            .unwrap()
            .to_string()
            .contains("out of hugepages")
    );

    let fake = Fake::with_fault(Fault::Refuse(Cmd::Reset, "no FLR".into()));
    let gpu = fake.connect(0).unwrap();
    assert_eq!(
        gpu.pci().reset_function(),
        Err(HalError::Unsupported("PCI function reset"))
    );
    let msg = gpu.reset().unwrap_err().to_string();
    assert!(msg.contains("refused RESET: no FLR"), "{msg}");

    // An error without text.
    let fake = Fake::with_fault(Fault::Refuse(Cmd::MapBar, String::new()));
    let msg = fake.connect(0).unwrap_err().to_string();
    assert!(msg.contains("refused MAP_BAR: unknown error"), "{msg}");
}

#[test]
fn a_server_that_closes_mid_request_breaks_the_connection() {
    let fake = Fake::with_fault(Fault::CloseOn(Cmd::SysmemRead));
    let gpu = fake.connect(0).unwrap();
    let buf = gpu.dma().alloc_dma(4096).unwrap();
    buf.write(0, &[1, 2, 3]).unwrap();
    let mut b = [0u8; 3];
    assert_eq!(buf.read(0, &mut b), Err(HalError::DeviceLost));
    let e = gpu.broken().unwrap();
    assert!(
        matches!(
            e,
            RemoteError::Closed {
                during: Cmd::SysmemRead,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("closed the connection during SYSMEM_READ")
    );
    // Every later access fails at once: reads return all ones, fallible calls say why.
    let requests = fake.state().log.len();
    assert_eq!(gpu.bar0().read32(0), u32::MAX);
    gpu.bar0().write32(0, 1);
    assert_eq!(gpu.bar0().try_read32(0), Err(HalError::DeviceLost));
    assert_eq!(gpu.pci().read_config32(0), Err(HalError::DeviceLost));
    assert!(gpu.dma().alloc_dma(4096).is_err());
    assert_eq!(gpu.ping().unwrap_err(), e);
    assert_eq!(fake.state().log.len(), requests);

    // Closed between the header and the data of an answer.
    let fake = Fake::with_fault(Fault::CloseAfterHeader(Cmd::MmioRead));
    let gpu = fake.connect(0).unwrap();
    assert_eq!(gpu.bar0().read32(0), u32::MAX);
    assert_eq!(gpu.pci().read_config32(0), Err(HalError::DeviceLost));
    assert!(matches!(
        gpu.broken(),
        Some(RemoteError::Closed {
            during: Cmd::MmioRead,
            ..
        })
    ));

    // Closed while connecting: connect fails with it.
    let fake = Fake::with_fault(Fault::CloseOn(Cmd::MapBar));
    let e = fake.connect(0).unwrap_err();
    assert!(
        matches!(
            e,
            RemoteError::Closed {
                during: Cmd::MapBar,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn oversize_answers_are_refused_unread() {
    let fake = Fake::with_fault(Fault::HugeProbe);
    let e = fake.connect(0).unwrap_err();
    assert!(
        matches!(
            e,
            RemoteError::TooLarge {
                cmd: Cmd::Probe,
                len: 1_099_511_627_776,
                limit: 65536,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("more than the 65536 nvbare accepts"),
        "{e}"
    );

    let fake = Fake::with_fault(Fault::HugeErrorText(Cmd::CfgRead));
    let gpu = fake.connect(0).unwrap();
    assert_eq!(gpu.pci().read_config32(0), Err(HalError::DeviceLost));
    assert!(matches!(
        gpu.broken(),
        Some(RemoteError::TooLarge {
            what: "error text",
            ..
        })
    ));

    let fake = Fake::with_fault(Fault::ShortSysmemList);
    let gpu = fake.connect(0).unwrap();
    assert_eq!(
        gpu.dma().alloc_dma(3 * 4096).unwrap_err(),
        HalError::DeviceLost
    );
    let e = gpu.broken().unwrap();
    assert!(
        matches!(
            e,
            RemoteError::WrongLength {
                len: 16,
                expected: 24,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("with 16 bytes of bus addresses"), "{msg}");
    assert!(msg.contains("where 24 were due"), "{msg}");
}

#[test]
fn scattered_pages_are_a_typed_error_that_says_why() {
    let fake = Fake::with_fault(Fault::Scattered);
    let gpu = fake.connect(0).unwrap();
    // One page is contiguous by definition.
    gpu.dma().alloc_dma(4096).unwrap();
    let e = gpu.dma().alloc(3 << 20).unwrap_err();
    assert!(
        matches!(
            e,
            RemoteError::NotContiguous {
                page: 1,
                got: 0x1_1000_2000,
                expected: 0x1_1000_1000,
                ..
            }
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("not contiguous in bus address"), "{msg}");
    assert!(msg.contains("IOMMU"), "{msg}");
    assert_eq!(
        gpu.dma().alloc_dma(8192).unwrap_err(),
        HalError::NoMemory { requested: 8192 }
    );
    // The whole list was read: the connection is still in step.
    gpu.ping().unwrap();
    assert_eq!(gpu.bar0().read32(0), 0x1b40_00a1);
}

#[test]
fn nothing_listening_fails_fast_naming_the_address() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t = Instant::now();
    let e = RemoteGpu::connect("127.0.0.1", port, 0, CONNECT_TIMEOUT).unwrap_err();
    assert!(t.elapsed() < CONNECT_TIMEOUT + Duration::from_secs(1));
    assert!(matches!(e, RemoteError::Connect { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("cannot connect to 127.0.0.1:{port} within 3 s")),
        "{msg}"
    );
    assert!(msg.contains("nvbare serve"), "{msg}");
}

#[test]
fn a_server_that_never_answers_times_out() {
    let fake = Fake::with_fault(Fault::Silent);
    let opts = RemoteOptions {
        io_timeout: Duration::from_millis(300),
        ..RemoteOptions::default()
    };
    let t = Instant::now();
    let e = RemoteGpu::connect_with("127.0.0.1", fake.port, 0, &opts).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(
        matches!(
            e,
            RemoteError::Timeout {
                during: Cmd::Probe,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("did not answer PROBE within 0.300 s"),
        "{e}"
    );
}

#[test]
fn probe_answers_parse() {
    let p = |s: &str| parse_probe("h:1", s.as_bytes());
    assert_eq!(p("").unwrap(), vec![]);
    assert_eq!(
        p("0000:01:00.0:0\n3\n").unwrap(),
        vec![
            RemoteDevice {
                name: "0000:01:00.0:0".into(),
                dev_id: 0
            },
            RemoteDevice {
                name: "3".into(),
                dev_id: 3
            }
        ]
    );
    assert_eq!(p("3").unwrap()[0].bdf(), None);
    let e = p("0000:01:00.0:x").unwrap_err().to_string();
    assert!(e.contains("does not end in a device index"), "{e}");
    assert!(parse_probe("h:1", &[0xff, 0xfe]).is_err());
    assert_eq!(format_addr("::1", 6667), "[::1]:6667");
    assert_eq!(format_addr("gpu-box", 1), "gpu-box:1");
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<RemoteGpu>();
    check::<RemoteBar>();
    check::<RemotePci>();
    check::<RemoteDma>();
    check::<RemoteBuffer>();
}
