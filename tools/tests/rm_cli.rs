//! `nvbare rm`, `nvbare events` and `-vv` as a user runs them, on the simulated GPU.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use nvbare_gsp_firmware::testutil;

fn nvbare(args: &[&str], stdin: Option<&str>) -> Output {
    let dir = testutil::require_firmware_dir();
    let mut c = Command::new(env!("CARGO_BIN_EXE_nvbare"));
    c.args(args)
        .env_remove("NVBARE_LOG")
        .env("NVBARE_FIRMWARE_DIR", Path::new(&dir))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("run nvbare");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or("").as_bytes())
        .expect("write stdin");
    drop(input);
    child.wait_with_output().expect("nvbare output")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

const CLASSLIST: &str = "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2";

#[test]
fn the_class_list_names_hoppers_compute_class() {
    let o = nvbare(
        &[
            "rm",
            "control",
            "--device",
            "sim:gh100",
            "--on",
            "device",
            CLASSLIST,
        ],
        None,
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(
        out.contains(&format!("{CLASSLIST} (0x00800292) on device")),
        "{out}"
    );
    assert!(out.contains(": NV_OK"), "{out}");
    assert!(out.contains("HOPPER_COMPUTE_A (0xcbc0)"), "{out}");

    let o = nvbare(
        &[
            "rm",
            "control",
            "--device",
            "sim:gh100",
            "--on",
            "device",
            CLASSLIST,
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["status"], "NV_OK");
    assert_eq!(v["cmd"], 0x0080_0292);
    let classes = v["params"]["classList"].as_array().expect("classList");
    assert_eq!(
        classes.len() as u64,
        v["params"]["numClasses"].as_u64().unwrap()
    );
    assert!(
        classes
            .iter()
            .any(|c| c["class"] == 0xcbc0 && c["name"] == "HOPPER_COMPUTE_A")
    );
}

#[test]
fn bad_commands_say_what_to_do() {
    // A typo: the nearest name.
    let o = nvbare(
        &[
            "rm",
            "control",
            "--on",
            "device",
            "NV0080_CTRL_CMD_GPU_GET_CLASLIST_V2",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains(&format!("did you mean {CLASSLIST}?")),
        "{}",
        text(&o.stderr)
    );
    // Params of the wrong size for a known control.
    let o = nvbare(
        &[
            "rm",
            "control",
            "--on",
            "subdevice",
            "NV2080_CTRL_CMD_PERF_BOOST",
            "--params",
            "0102",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("takes 8 bytes of params"),
        "{}",
        text(&o.stderr)
    );
    // Odd hex digits.
    let o = nvbare(
        &[
            "rm", "control", "--on", "device", "0x800292", "--params", "abc",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("3 hex digits"),
        "{}",
        text(&o.stderr)
    );
    // A handle that does not exist: RM's status by name, exit 1, no panic.
    let o = nvbare(
        &[
            "rm",
            "control",
            "--on",
            "0x1234",
            "NV2080_CTRL_CMD_MC_GET_ARCH_INFO",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("NV_ERR_INVALID_OBJECT_HANDLE"),
        "{}",
        text(&o.stderr)
    );
    // Freeing what the device layer owns.
    let o = nvbare(&["rm", "free", "device"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("not allocated in this session"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_session_allocates_controls_and_frees() {
    let script = "\
        # a channel group, its timeslice, a subcontext under it\n\
        alloc KEPLER_CHANNEL_GROUP_A --params engineType=1\n\
        control --on last NVA06C_CTRL_CMD_SET_TIMESLICE --params timesliceUs=2500\n\
        control --on $1 NVA06C_CTRL_CMD_GET_TIMESLICE\n\
        alloc FERMI_CONTEXT_SHARE_A --parent $1 --params hVASpace=vaspace\n\
        objects\n\
        control --on $1 NV2080_CTRL_CMD_MC_GET_ARCH_INFO\n\
        frobnicate\n\
        free $1\n\
        objects\n\
        quit\n";
    let o = nvbare(&["rm", "--device", "sim:ad102"], Some(script));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains("KEPLER_CHANNEL_GROUP_A (0xa06c) under 0x"),
        "{out}"
    );
    assert_eq!(
        out.matches("timesliceUs = 2500 (0x9c4)").count(),
        2,
        "{out}"
    );
    assert!(
        out.contains("FERMI_CONTEXT_SHARE_A (0x9067) under 0x"),
        "{out}"
    );
    // Errors go to stderr and the session goes on.
    assert!(err.contains("NV_ERR_NOT_SUPPORTED"), "{err}");
    assert!(
        err.contains("unrecognized subcommand 'frobnicate'"),
        "{err}"
    );
    assert!(out.contains("freed 0x"), "{out}");
    // After the free, `objects` lists nothing: the subcontext went with its group.
    let after = out.rsplit("freed ").next().unwrap();
    assert!(!after.contains("FERMI_CONTEXT_SHARE_A"), "{out}");
}

#[test]
fn the_control_table_needs_no_device() {
    let o = nvbare(&["rm", "controls"], None);
    let out = text(&o.stdout);
    assert!(o.status.success());
    assert!(out.contains(CLASSLIST) && out.contains("NV83DE_CTRL_CMD_DEBUG_READ_MMU_FAULT_INFO"));
}

#[test]
fn events_show_a_fault_decoded() {
    let o = nvbare(
        &[
            "events",
            "--device",
            "sim:ad102",
            // The watch waits for the fault's outcome whatever the deadline.
            "--seconds",
            "0",
            "--fault",
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let names: Vec<&str> = lines.iter().filter_map(|l| l["name"].as_str()).collect();
    for want in ["MMU_FAULT_QUEUED", "OS_ERROR_LOG", "RC_TRIGGERED"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let rc = lines.iter().find(|l| l["name"] == "RC_TRIGGERED").unwrap();
    assert!(
        rc["text"]
            .as_str()
            .unwrap()
            .contains("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT")
    );
    assert!(
        lines
            .iter()
            .any(|l| l["kind"] == "log" && l["line"].as_str().unwrap().contains("LOGRM: "))
    );

    let o = nvbare(&["events", "--device", "nvidia:0"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("kernel log"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn vv_prints_one_line_per_rpc() {
    let o = nvbare(
        &[
            "-vv",
            "rm",
            "control",
            "--device",
            "sim:gh100",
            "--on",
            "device",
            CLASSLIST,
        ],
        None,
    );
    let err = text(&o.stderr);
    assert!(o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains(&format!("rpc GSP_RM_CONTROL (76) {CLASSLIST}")))
        .unwrap_or_else(|| panic!("no RPC line in\n{err}"));
    assert!(
        line.contains("NV_OK in ") && line.contains(" B out, "),
        "{line}"
    );
    assert!(
        err.contains("rpc GSP_RM_ALLOC (103) KEPLER_CHANNEL_GROUP_A (0xa06c)"),
        "{err}"
    );
    assert!(err.contains("rpc UNLOADING_GUEST_DRIVER (47)"), "{err}");
}
