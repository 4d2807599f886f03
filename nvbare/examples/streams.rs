//! Two streams ordered by an event: stream `a` increments a buffer five times, stream `b`
//! waits for `a`'s event on the GPU, copies the result and increments the copy once more.
//! Runs on the simulated H100, or the device named on the command line
//! (`cargo run --example streams -- nvidia:0`).

fn main() -> Result<(), nvbare::Error> {
    let spec = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sim:gh100".into());
    let gpu = nvbare::open(&spec)?;
    let sm = gpu.info().sm;
    let cubin = nvbare::demo_cubin(sm)
        .ok_or_else(|| nvbare::Error::Program(format!("no demo cubin for sm_{sm}")))?;
    let module = gpu.load_cubin(cubin)?;
    let add1 = module.function("add1")?;
    let (a, b) = (gpu.new_stream()?, gpu.new_stream()?);
    let n: u32 = 1 << 22;
    let buf = a.htod_copy(&vec![0u32; n as usize])?;
    let cfg = nvbare::LaunchConfig::for_num_elems(n);
    for _ in 0..5 {
        a.launch_builder(&add1).arg(&buf).arg(&n).launch(cfg)?;
    }
    let done_on_a = a.record_event()?;
    b.wait_event(&done_on_a)?;
    let copy = gpu.alloc::<u32>(n as usize)?;
    b.dtod_copy(&buf, &copy)?;
    b.launch_builder(&add1).arg(&copy).arg(&n).launch(cfg)?;
    let out = b.dtoh_copy(&copy)?;
    if let Some(i) = out.iter().position(|&v| v != 6) {
        return Err(nvbare::Error::Program(format!(
            "element {i} is {}, not 6: stream b did not wait for stream a",
            out[i]
        )));
    }
    println!(
        "streams on {}: stream {} waited for stream {}'s event; {n} elements are 6",
        gpu.name(),
        b.index(),
        a.index()
    );
    gpu.close()
}
