fn main() -> nvbare::Result<()> {
    let gpu = nvbare::open("sim:gh100")?;
    let (stream, other) = (gpu.default_stream(), gpu.new_stream()?);
    let data: Vec<u32> = (0..1000).collect();
    let n = data.len() as u32;
    let buf = stream.htod_copy(&data)?;
    let module = gpu.load_cubin(nvbare::demo_cubin(gpu.info().sm).unwrap_or_default())?;
    let f = module.function("add1")?;
    stream.launch_builder(&f).arg(&buf).arg(&n).launch(nvbare::LaunchConfig::for_num_elems(n))?;
    let out: Vec<u32> = stream.dtoh_copy(&buf)?;
    let ev = stream.record_event()?;
    other.wait_event(&ev)?;
    ev.synchronize()?;
    assert_eq!(out, (1..=1000).collect::<Vec<u32>>());
    println!("nvbare from outside the workspace: add1 on {} passed", gpu.name());
    Ok(())
}
