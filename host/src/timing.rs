//! Timing GPU work with CUDA events.

use cudarc::driver::{CudaEvent, sys};

use crate::device::Device;
use crate::error::{DriverContext, Result};

/// A pair of CUDA events with timing enabled: `start`, queue work, `stop`, then
/// [`GpuTimer::elapsed_ms`] gives the GPU time between the two marks on the device's stream.
pub struct GpuTimer {
    start: CudaEvent,
    stop: CudaEvent,
}

impl GpuTimer {
    /// Creates the two events on `device`.
    pub fn new(device: &Device) -> Result<GpuTimer> {
        let ctx = device.stream().context();
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(GpuTimer {
            start: ctx.new_event(flags).context("creating a timing event")?,
            stop: ctx.new_event(flags).context("creating a timing event")?,
        })
    }

    /// Marks the start on the device's stream.
    pub fn start(&self, device: &Device) -> Result<()> {
        self.start.record(device.stream()).context("recording a timing event")
    }

    /// Marks the end on the device's stream.
    pub fn stop(&self, device: &Device) -> Result<()> {
        self.stop.record(device.stream()).context("recording a timing event")
    }

    /// Milliseconds between the two marks (waits for the second one).
    pub fn elapsed_ms(&self) -> Result<f32> {
        self.start.elapsed_ms(&self.stop).context("reading a timing event")
    }

    /// Times `call` as the examples do: `warmup` untimed calls, then `reps` calls, each alone
    /// between the two marks. `call` gets the call's index (warm-up calls first), to rotate
    /// input sets. Returns the `reps` times in milliseconds, sorted: the median is at `len / 2`.
    pub fn time_calls(
        device: &Device,
        warmup: usize,
        reps: usize,
        mut call: impl FnMut(usize) -> Result<()>,
    ) -> Result<Vec<f32>> {
        for i in 0..warmup {
            call(i)?;
        }
        let timer = GpuTimer::new(device)?;
        let mut times = Vec::with_capacity(reps);
        for i in warmup..warmup + reps {
            timer.start(device)?;
            call(i)?;
            timer.stop(device)?;
            times.push(timer.elapsed_ms()?);
        }
        times.sort_by(f32::total_cmp);
        Ok(times)
    }
}
