//! The runtime under the kernels: fills, copies, and every error path a GPU can trigger.

use flashattn::internals::launch_fill_u32;
use flashattn::{Device, Element, Error, bf16, f16};
use flashattn_testkit::random_values;
use rand::SeedableRng;

use crate::GpuTest;

pub const TESTS: &[(&str, GpuTest)] = &[
    ("runtime::fill_poisons_every_element_f16", fill_poisons::<f16>),
    ("runtime::fill_poisons_every_element_bf16", fill_poisons::<bf16>),
    ("runtime::fill_poisons_every_element_f32", fill_poisons::<f32>),
    ("runtime::upload_download_round_trip", round_trip),
    ("runtime::error_bad_launch_shape", bad_launch),
    ("runtime::error_too_much_shared_memory", too_much_shared),
    ("runtime::error_out_of_memory", out_of_memory),
    ("runtime::error_no_such_device", no_such_device),
    ("runtime::error_length_mismatch", length_mismatch),
];

fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(msg()) }
}

fn rng() -> rand::rngs::StdRng {
    rand::rngs::StdRng::from_os_rng()
}

/// Random data first (so a no-op fill would be caught), then NaN everywhere, on an odd length.
fn fill_poisons<T: Element>(dev: &Device) -> Result<(), String> {
    let n = 1_000_003;
    let host: Vec<T> = random_values(&mut rng(), n).into_iter().map(T::from_f32).collect();
    let mut buf = dev.upload(&host).map_err(|e| e.to_string())?;
    dev.fill_nan(&mut buf).map_err(|e| e.to_string())?;
    let back = dev.download(&buf).map_err(|e| e.to_string())?;
    let bad = back.iter().position(|x| !x.to_f32().is_nan());
    check(bad.is_none(), || format!("{}: element {bad:?} not NaN after fill", T::DTYPE))?;
    // A pattern that is not NaN: 1.0 in each format.
    let one = match T::DTYPE {
        flashattn::DType::F16 => 0x3c00,
        flashattn::DType::BF16 => 0x3f80,
        flashattn::DType::F32 => 0x3f80_0000,
    };
    dev.fill_bits(&mut buf, one).map_err(|e| e.to_string())?;
    let back = dev.download(&buf).map_err(|e| e.to_string())?;
    let bad = back.iter().position(|x| x.to_f32() != 1.0);
    check(bad.is_none(), || format!("{}: element {bad:?} not 1.0 after fill", T::DTYPE))
}

fn round_trip(dev: &Device) -> Result<(), String> {
    for n in [0usize, 1, 7, 4097] {
        let host = random_values(&mut rng(), n);
        let buf = dev.upload(&host).map_err(|e| e.to_string())?;
        let back = dev.download(&buf).map_err(|e| e.to_string())?;
        check(back == host, || format!("round trip of {n} elements changed the data"))?;
    }
    Ok(())
}

fn bad_launch(dev: &Device) -> Result<(), String> {
    let mut buf = dev.alloc::<f32>(1024).map_err(|e| e.to_string())?;
    dev.fill_nan(&mut buf).map_err(|e| e.to_string())?;
    // 2048 threads per block is over every device's limit of 1024: the driver refuses it.
    let r = launch_fill_u32(dev, &mut buf, (1, 1, 1), (2048, 1, 1), 0);
    check(matches!(r, Err(Error::Launch { kernel: "fill_u32", .. })), || {
        format!("expected Error::Launch, got {r:?}")
    })?;
    // The device stays usable, and the refused launch wrote nothing.
    dev.synchronize().map_err(|e| e.to_string())?;
    let back = dev.download(&buf).map_err(|e| e.to_string())?;
    check(back.iter().all(|x| x.is_nan()), || "the refused launch wrote to the buffer".into())
}

fn too_much_shared(dev: &Device) -> Result<(), String> {
    let mut buf = dev.alloc::<f32>(16).map_err(|e| e.to_string())?;
    let limit = dev.props().max_shared_per_block;
    let r = launch_fill_u32(dev, &mut buf, (1, 1, 1), (32, 1, 1), limit + 1);
    check(
        matches!(r, Err(Error::SharedMemoryExceeded { requested, limit: l, .. }) if requested == limit + 1 && l == limit),
        || format!("expected SharedMemoryExceeded, got {r:?}"),
    )?;
    // At the limit it runs (the dynamic limit is raised first).
    launch_fill_u32(dev, &mut buf, (1, 1, 1), (32, 1, 1), limit)
        .map_err(|e| format!("launch at the limit: {e}"))?;
    dev.synchronize().map_err(|e| e.to_string())
}

fn out_of_memory(dev: &Device) -> Result<(), String> {
    let total = dev.props().total_memory;
    // Larger than the card: refused by the library's own check.
    let r = dev.alloc::<f32>((total / 4 + 1) as usize);
    check(matches!(r, Err(Error::OutOfMemory { .. })), || format!("expected OutOfMemory, got {r:?}"))?;
    // Smaller than the card but more than is free (the context itself uses memory): the driver's OOM.
    let r = dev.alloc::<f32>((total / 4 - 1024) as usize);
    check(matches!(r, Err(Error::OutOfMemory { .. })), || {
        format!("expected OutOfMemory from the driver, got {r:?}")
    })?;
    // And the device still works.
    round_trip(dev)
}

fn no_such_device(_dev: &Device) -> Result<(), String> {
    let count = Device::count().map_err(|e| e.to_string())?;
    let r = Device::new(count + 7);
    check(
        matches!(r, Err(Error::NoDevice { ordinal, count: c }) if ordinal == count + 7 && c == count),
        || format!("expected NoDevice, got {r:?}"),
    )
}

fn length_mismatch(dev: &Device) -> Result<(), String> {
    let buf = dev.alloc::<f32>(10).map_err(|e| e.to_string())?;
    let mut host = vec![0.0f32; 11];
    let r = dev.copy_to_host(&buf, &mut host);
    check(matches!(r, Err(Error::LengthMismatch { .. })), || format!("expected LengthMismatch, got {r:?}"))
}
