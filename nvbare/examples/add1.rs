//! Adds 1 to a million numbers on the simulated H100 (or the device named on the command line:
//! `cargo run --example add1 -- nvidia:0`), and checks the result.

fn main() -> Result<(), nvbare::Error> {
    let spec = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sim:gh100".into());
    let gpu = nvbare::open(&spec)?;
    let stream = gpu.default_stream();
    let n: u32 = 1 << 20;
    let data: Vec<u32> = (0..n).collect();
    let buf = stream.htod_copy(&data)?;
    let sm = gpu.info().sm;
    let cubin = nvbare::demo_cubin(sm)
        .ok_or_else(|| nvbare::Error::Program(format!("no demo cubin for sm_{sm}")))?;
    let module = gpu.load_cubin(cubin)?;
    let add1 = module.function("add1")?;
    stream
        .launch_builder(&add1)
        .arg(&buf)
        .arg(&n)
        .launch(nvbare::LaunchConfig::for_num_elems(n))?;
    let out: Vec<u32> = stream.dtoh_copy(&buf)?;
    if let Some(i) = (0..data.len()).find(|&i| out[i] != data[i] + 1) {
        return Err(nvbare::Error::Program(format!(
            "element {i} is {}, not {}",
            out[i],
            data[i] + 1
        )));
    }
    println!("add1 on {}: {n} elements, all incremented", gpu.name());
    gpu.close()
}
