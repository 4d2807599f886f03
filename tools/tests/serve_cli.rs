//! `nvbare serve` as a user runs it: a simulated GPU served on a free port and driven bare
//! metal by `nvbare demo --device remote:ADDR`, and devices it cannot serve.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use nvbare_gsp_firmware::testutil;

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// A running `nvbare serve`, killed when dropped.
struct Server {
    child: Child,
    stderr: PathBuf,
}

impl Server {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.stderr);
    }
}

/// Starts `nvbare serve ARGS --listen 127.0.0.1:0` and returns it with the address it
/// printed on its first line.
fn serve(args: &[&str], firmware: &Path) -> (Server, String) {
    // One log per server: the tests of this file run in parallel in one process.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let stderr = std::env::temp_dir().join(format!(
        "nvbare-serve-cli-{}-{}.log",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_nvbare"))
        .arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .env_remove("NVBARE_LOG")
        .env("NVBARE_FIRMWARE_DIR", firmware)
        .env("NVBARE_NO_FETCH", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).expect("create the server's log"))
        .spawn()
        .expect("start nvbare serve");
    let out = child.stdout.take().expect("stdout");
    let server = Server { child, stderr };
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .expect("read the server's first line");
    let addr = line
        .strip_prefix("nvbare serve: listening on ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| {
            panic!(
                "first line {line:?} does not name the address; the server said:\n{}",
                server.log()
            )
        })
        .to_string();
    assert!(
        line.contains("REMOTE=") && line.contains("--device remote:"),
        "{line}"
    );
    (server, addr)
}

fn nvbare(args: &[&str], firmware: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvbare"))
        .args(args)
        .env_remove("NVBARE_LOG")
        .env("NVBARE_FIRMWARE_DIR", firmware)
        .env("NVBARE_NO_FETCH", "1")
        .output()
        .expect("run nvbare")
}

#[test]
fn demo_passes_on_a_simulated_gpu_served_over_tcp() {
    let dir = testutil::require_firmware_dir();
    let (server, addr) = serve(&["--device", "sim:ad102"], &dir);
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let device = format!("remote:{addr}");
    let o = nvbare(&["demo", "--device", &device, "--elements", "4096"], &dir);
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}\nserver:\n{}",
        text(&o.stderr),
        server.log()
    );
    for want in [
        "all 4096 elements verified",
        "UNLOADING_GUEST_DRIVER",
        &format!("demo passed on remote:{addr}:0"),
        "bare metal over TCP",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    let log = server.log();
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_vfio_device_fails_to_serve_with_the_vfio_open_error() {
    let dir = std::env::temp_dir();
    let o = nvbare(
        &[
            "serve",
            "--device",
            "vfio:0000:01:00.0",
            "--listen",
            "127.0.0.1:0",
        ],
        &dir,
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.lines().any(|l| l.starts_with("error: ")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        text(&o.stdout).is_empty(),
        "nothing listens: {}",
        text(&o.stdout)
    );
    if !Path::new("/dev/vfio/vfio").exists() {
        assert!(err.contains("VFIO is not available"), "{err}");
        assert!(err.contains("modprobe vfio-pci"), "{err}");
    }
}

#[test]
fn devices_it_cannot_serve_are_refused_by_name() {
    let dir = std::env::temp_dir();
    for dev in ["remote:127.0.0.1:1", "nvidia:0"] {
        let o = nvbare(&["serve", "--device", dev, "--listen", "127.0.0.1:0"], &dir);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{dev}: {err}");
        assert!(
            err.contains("serves sim:CHIP and vfio:BDF devices") && err.contains(dev),
            "{dev}: {err}"
        );
    }
}

#[test]
fn rm_and_events_reach_a_remote_gpus_gsp() {
    let dir = testutil::require_firmware_dir();
    let (server, addr) = serve(&["--device", "sim:ad102"], &dir);
    let device = format!("remote:{addr}");
    let o = nvbare(
        &[
            "rm",
            "control",
            "--device",
            &device,
            "--on",
            "device",
            "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2",
        ],
        &dir,
    );
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}\n{}",
        text(&o.stderr),
        server.log()
    );
    assert!(out.contains("ADA_COMPUTE_A (0xc9c0)"), "{out}");
    let o = nvbare(
        &["events", "--device", &device, "--seconds", "0.3", "--fault"],
        &dir,
    );
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}\n{}",
        text(&o.stderr),
        server.log()
    );
    assert!(out.contains("RC_TRIGGERED: channel"), "{out}");
    // No logging ELF for the remote GPU's firmware: LIBOS records as raw words.
    assert!(out.contains("log LOGRM["), "{out}");
}
