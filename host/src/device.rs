//! Device selection, properties, memory, and launches.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::{self, CUdevice_attribute as Attr};
use cudarc::driver::{CudaContext, CudaStream, DevicePtrMut, DriverError, result};
use flashattn_kernels::params::{FILL_THREADS, FillParams};

use flashattn_kernels::registry::{Family, Target};

use crate::buffer::{DeviceBuffer, Element};
use crate::error::{DriverContext, Error, Result};
use crate::registry::{Function, KernelId, Module};

/// What tile sizing and reports need to know about a device, read once at [`Device::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceProps {
    /// The ordinal the device was opened with.
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Number of streaming multiprocessors.
    pub sm_count: u32,
    /// Shared memory a block may use after opting in (bytes): the tile budget.
    pub max_shared_per_block: u32,
    /// Shared memory per multiprocessor (bytes).
    pub shared_per_sm: u32,
    /// L2 cache size (bytes).
    pub l2_bytes: u64,
    /// Device memory (bytes).
    pub total_memory: u64,
    /// CUDA driver version as the driver reports it (e.g. 13000 for 13.0).
    pub driver_version: i32,
    /// Which committed PTX this device runs: "sm_90a" or "sm_80".
    pub ptx_target: &'static str,
}

impl std::fmt::Display for DeviceProps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (device {}, compute capability {}.{}, {} SMs, {} KiB shared memory per block, \
             {} MiB L2, {:.1} GiB memory, driver CUDA {}.{}, PTX {})",
            self.name,
            self.ordinal,
            self.compute_capability.0,
            self.compute_capability.1,
            self.sm_count,
            self.max_shared_per_block / 1024,
            self.l2_bytes / (1024 * 1024),
            self.total_memory as f64 / (1u64 << 30) as f64,
            self.driver_version / 1000,
            (self.driver_version % 1000) / 10,
            self.ptx_target
        )
    }
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchShape {
    /// Blocks in the grid (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads per block (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

/// A paged cache's table (its pages, held so that their address stays theirs) and its device
/// copy, shared with the calls that read it until each has queued its kernels.
type KeptPageTable = (Arc<[u32]>, Arc<DeviceBuffer<u32>>);

/// One CUDA device, the library's kernels (loaded on first use) and one stream on which all its
/// work runs.
///
/// Everything is ordered on that stream; methods that return host data synchronize it. Buffers
/// belong to the `Device` that made them: passing one to another `Device` (another GPU, or a
/// second `Device` of the same GPU, whose stream is not ordered with this one's) is
/// [`Error::WrongDevice`].
pub struct Device {
    // Field order is drop order: cuBLAS, the module and the stream go before the context.
    blas: OnceLock<CudaBlas>,
    /// Split-KV's partial results, kept between calls (up to [`SPLIT_SCRATCH_KEEP`] bytes), so
    /// that a decode step allocates and frees nothing; locked while a call enqueues its kernels.
    split_scratch: Mutex<Option<DeviceBuffer<u8>>>,
    /// The Hopper kernel's recurring TMA tensor-map sets, kept on the device.
    pub(crate) tensor_maps: Mutex<crate::hopper::TensorMapCache>,
    /// The last paged cache's table a call on the device's own stream used, with its device
    /// copy: a decode loop that passes the same table (the same `Arc` of pages) again copies
    /// nothing.
    page_table: Mutex<Option<KeptPageTable>>,
    module: OnceLock<Module>,
    target: Target,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
    props: DeviceProps,
    /// Per kernel: the dynamic shared-memory limit already raised with the driver.
    raised_shared: Vec<AtomicU32>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("props", &self.props).finish_non_exhaustive()
    }
}

/// The largest split-KV scratch a [`Device`] keeps between calls (bytes): decode steps of every
/// `models` shape need less than 2 MiB.
pub const SPLIT_SCRATCH_KEEP: u64 = 64 << 20;

/// The smallest split-KV scratch a [`Device`] allocates to keep (bytes), so that small growth
/// does not reallocate.
const SPLIT_SCRATCH_MIN: u64 = 1 << 20;

/// Freed device memory the device's default memory pool keeps for reuse when a stream is
/// synchronised (bytes): the library's per-call scratch (split-KV partials on a caller's stream,
/// a Hopper call's tensor maps) then reuses it instead of mapping fresh memory after every
/// synchronisation, which the driver's default of 0 makes it do.
pub const POOL_RELEASE_THRESHOLD: u64 = 256 << 20;

/// Raises the release threshold of `ctx`'s device's default memory pool (the pool
/// `cuMemAllocAsync` draws from) to [`POOL_RELEASE_THRESHOLD`], never lowering what the process
/// set before.
fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    let attr = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut now: u64 = 0;
    // SAFETY: valid out-pointers; the attribute is a u64 (cuuint64_t), read then written.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
            .result()
            .context("reading the device's default memory pool")?;
        sys::cuMemPoolGetAttribute(pool, attr, (&mut now as *mut u64).cast())
            .result()
            .context("reading the memory pool's release threshold")?;
        if now < POOL_RELEASE_THRESHOLD {
            let mut value = POOL_RELEASE_THRESHOLD;
            sys::cuMemPoolSetAttribute(pool, attr, (&mut value as *mut u64).cast())
                .result()
                .context("raising the memory pool's release threshold")?;
        }
    }
    Ok(())
}

/// Whether the CUDA driver library is there: cudarc loads it on first use and panics if it
/// cannot, so this probes first.
#[cfg(not(feature = "dynamic-linking"))]
pub(crate) fn driver_library_present() -> bool {
    // SAFETY: only probes whether the shared library can be loaded.
    unsafe { sys::is_culib_present() }
}

/// Whether the CUDA driver library is there: with the `dynamic-linking` feature (what
/// candle-core's CUDA build asks of cudarc) it was linked at build time, and the program could
/// not have started without it.
#[cfg(feature = "dynamic-linking")]
pub(crate) fn driver_library_present() -> bool {
    true
}

/// Whether the cuBLAS library is there ([`driver_library_present`]'s rules).
#[cfg(not(feature = "dynamic-linking"))]
fn cublas_library_present() -> bool {
    // SAFETY: only probes whether the shared library can be loaded.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

/// Whether the cuBLAS library is there ([`driver_library_present`]'s rules).
#[cfg(feature = "dynamic-linking")]
fn cublas_library_present() -> bool {
    true
}

/// Loads the driver and returns the number of devices, without panicking when it is missing.
fn init_driver() -> Result<usize> {
    if !driver_library_present() {
        return Err(Error::NoDriver);
    }
    match result::init() {
        Ok(()) => {}
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => return Ok(0),
        Err(source) => return Err(Error::Driver { context: "initialising the CUDA driver", source }),
    }
    let count = result::device::get_count().context("counting CUDA devices")?;
    Ok(count.max(0) as usize)
}

impl Device {
    /// Number of CUDA devices; `Err(Error::NoDriver)` when no driver is installed.
    pub fn count() -> Result<usize> {
        init_driver()
    }

    /// Opens device `ordinal`, loads the PTX that matches it (sm_90a on compute capability 9.0,
    /// sm_80 on other 8.x and later) and creates the stream all work runs on.
    pub fn new(ordinal: usize) -> Result<Device> {
        let count = init_driver()?;
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).context("creating the CUDA context")?;
        // One stream, ordered by construction: cudarc's per-buffer event tracking would only
        // add work to every launch.
        // SAFETY: no buffer exists yet; all work of this Device runs on its one stream.
        unsafe { ctx.disable_event_tracking() };
        let attr = |a: Attr| ctx.attribute(a).context("reading a device attribute");
        let name = ctx.name().context("reading the device name")?;
        let major = attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let Some(target) = Target::for_compute_capability(major, minor) else {
            return Err(Error::UnsupportedDevice { ordinal, name, major, minor });
        };
        let mut driver_version = 0;
        // SAFETY: valid out-pointer.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .context("reading the driver version")?;
        let props = DeviceProps {
            ordinal,
            name,
            compute_capability: (major, minor),
            sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            max_shared_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
            shared_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)? as u32,
            l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            total_memory: ctx.total_mem().context("reading the memory size")? as u64,
            driver_version,
            ptx_target: target.name(),
        };
        let stream = ctx.new_stream().context("creating a stream")?;
        if ctx.has_async_alloc() {
            keep_freed_memory(&ctx)?;
        }
        let raised_shared = flashattn_kernels::registry::KERNELS.iter().map(|_| AtomicU32::new(0)).collect();
        Ok(Device {
            blas: OnceLock::new(),
            split_scratch: Mutex::new(None),
            tensor_maps: Mutex::new(crate::hopper::TensorMapCache::new()),
            page_table: Mutex::new(None),
            module: OnceLock::new(),
            target,
            stream,
            ctx,
            props,
            raised_shared,
        })
    }

    /// The loaded module, loading (JIT-compiling) this device's PTX on first use.
    fn module(&self) -> Result<&Module> {
        if let Some(m) = self.module.get() {
            return Ok(m);
        }
        self.bind()?;
        let loaded = Module::load(self.target)?;
        // Another thread may have loaded it meanwhile: keep one, unload the other.
        Ok(self.module.get_or_init(|| loaded))
    }

    /// Whether `buf` was made by this `Device` (on its stream); [`Error::WrongDevice`] if not.
    pub(crate) fn owns<T>(&self, what: &'static str, buf: &DeviceBuffer<T>) -> Result<()> {
        if Arc::ptr_eq(buf.slice.stream(), &self.stream) {
            return Ok(());
        }
        Err(Error::WrongDevice {
            what,
            buffer_device: buf.slice.stream().context().ordinal(),
            device: self.props.ordinal,
        })
    }

    /// The PTX this device loads.
    pub(crate) fn target(&self) -> Target {
        self.target
    }

    /// The device's properties.
    pub fn props(&self) -> &DeviceProps {
        &self.props
    }

    /// The stream all of this device's work is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Wraps `cu_stream`, a stream its owner keeps (PyTorch's current stream, say), so that this
    /// device's work can be queued on it ([`crate::external`]). Dropping the wrapper leaves the
    /// stream alone.
    ///
    /// # Safety
    /// `cu_stream` must be a stream of this device's primary context (or the null stream) that
    /// outlives the wrapper and every allocation made on it.
    pub(crate) unsafe fn borrow_stream(&self, cu_stream: sys::CUstream) -> Arc<CudaStream> {
        // SAFETY: the caller's contract.
        unsafe { self.ctx.wrap_borrowed_stream(cu_stream) }
    }

    /// The driver handle of this device's (primary) context.
    pub(crate) fn cu_ctx(&self) -> sys::CUcontext {
        self.ctx.cu_ctx()
    }

    /// Makes this device's context current on the calling thread (needed before raw driver
    /// calls; the safe methods do it themselves).
    pub(crate) fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().context("binding the CUDA context to this thread")
    }

    /// Waits for all work queued in this device's context, on every stream (a caller's too).
    pub(crate) fn synchronize_context(&self) -> Result<()> {
        self.bind()?;
        self.ctx.synchronize().map_err(|source| Error::Driver {
            context: "waiting for all queued GPU work of the context (a kernel may have failed)",
            source,
        })
    }

    /// Free and total device memory, in bytes.
    pub fn memory_info(&self) -> Result<(u64, u64)> {
        let (free, total) = self.ctx.mem_get_info().context("reading free memory")?;
        Ok((free as u64, total as u64))
    }

    /// Waits until all work queued on this device's stream has finished, and reports any error
    /// a kernel raised while running.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().map_err(|source| Error::Driver {
            context: "waiting for queued GPU work (a kernel may have failed)",
            source,
        })
    }

    /// Turns an allocation failure into [`Error::OutOfMemory`] with the numbers a user needs.
    pub(crate) fn alloc_error(&self, source: DriverError, what: String, requested: u64) -> Error {
        if source.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            let (free, total) = self.memory_info().unwrap_or((0, self.props.total_memory));
            Error::OutOfMemory {
                what,
                requested,
                requested_gib: requested as f64 / (1u64 << 30) as f64,
                free,
                total,
            }
        } else {
            Error::Driver { context: "allocating device memory", source }
        }
    }

    /// Allocates `len` elements without initialising them (their bits are whatever the memory
    /// held; every bit pattern is a valid float).
    pub fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let requested = (len as u64).saturating_mul(size_of::<T>() as u64);
        let what = || format!("a buffer of {len} {} elements", T::DTYPE);
        if requested > self.props.total_memory {
            return Err(self.alloc_error(
                DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY),
                what(),
                requested,
            ));
        }
        // A zero-length buffer keeps one element of storage, so that its address is valid.
        // SAFETY: `Element` types are floats, valid for any bit pattern.
        let slice = unsafe { self.stream.alloc::<T>(len.max(1)) }
            .map_err(|e| self.alloc_error(e, what(), requested))?;
        Ok(DeviceBuffer { slice, len })
    }

    /// Allocates `bytes` of scratch memory (at least one byte). An out-of-memory failure reports
    /// `what` and `total` bytes: everything the caller needs at once, not just this piece.
    pub(crate) fn alloc_scratch(
        &self,
        bytes: u64,
        total: u64,
        what: impl FnOnce() -> String,
    ) -> Result<DeviceBuffer<u8>> {
        self.alloc_scratch_on(&self.stream, bytes, total, what)
    }

    /// [`Device::alloc_scratch`] in `stream`'s order (allocated and freed there): this device's
    /// own stream, or a caller's ([`crate::external`]).
    pub(crate) fn alloc_scratch_on(
        &self,
        stream: &Arc<CudaStream>,
        bytes: u64,
        total: u64,
        what: impl FnOnce() -> String,
    ) -> Result<DeviceBuffer<u8>> {
        let oom = || DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        let len = usize::try_from(bytes.max(1)).map_err(|_| self.alloc_error(oom(), String::new(), total))?;
        if total > self.props.total_memory {
            return Err(self.alloc_error(oom(), what(), total));
        }
        // SAFETY: scratch bytes are written before they are read.
        let slice = unsafe { stream.alloc::<u8>(len) }.map_err(|e| self.alloc_error(e, what(), total))?;
        Ok(DeviceBuffer { slice, len })
    }

    /// Runs `enqueue` with the device address of at least `bytes` of split-KV scratch. Up to
    /// [`SPLIT_SCRATCH_KEEP`] bytes, the buffer is kept for the next call (all work runs on the
    /// device's one stream, in order; the lock is held while `enqueue` queues the kernels that
    /// write and read it); larger ones are allocated for this call and freed in stream order.
    ///
    /// On another stream than the device's own (a caller's, [`crate::external`]) nothing is
    /// kept: the buffer is allocated for the call in that stream's order, since work on two
    /// streams is not ordered.
    pub(crate) fn with_split_scratch<R>(
        &self,
        stream: &Arc<CudaStream>,
        bytes: u64,
        total: u64,
        what: impl FnOnce() -> String,
        enqueue: impl FnOnce(u64) -> Result<R>,
    ) -> Result<R> {
        if bytes > SPLIT_SCRATCH_KEEP || !Arc::ptr_eq(stream, &self.stream) {
            let buf = self.alloc_scratch_on(stream, bytes, total, what)?;
            return enqueue(buf.device_address());
        }
        let mut kept = self.split_scratch.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let address = match kept.as_ref() {
            Some(buf) if buf.size_bytes() as u64 >= bytes => buf.device_address(),
            _ => {
                // The old buffer is freed in stream order, after the kernels that used it.
                *kept = None;
                let buf = self.alloc_scratch(bytes.max(SPLIT_SCRATCH_MIN), total, what)?;
                let address = buf.device_address();
                *kept = Some(buf);
                address
            }
        };
        enqueue(address)
    }

    /// The cuBLAS handle (created on first use, on this device's stream).
    pub(crate) fn blas(&self) -> Result<&CudaBlas> {
        if let Some(b) = self.blas.get() {
            return Ok(b);
        }
        if !cublas_library_present() {
            return Err(Error::BlasMissing);
        }
        self.bind()?;
        let blas = CudaBlas::new(self.stream.clone())
            .map_err(|source| Error::Blas { context: "creating the cuBLAS handle", source })?;
        let _ = self.blas.set(blas);
        self.blas.get().ok_or(Error::BlasMissing)
    }

    /// A new device buffer of `len` zeroed `u32` words (a memset in `stream`'s order, no copy
    /// from the host): a launch's counters.
    pub(crate) fn zeroed_u32(&self, stream: &Arc<CudaStream>, len: usize) -> Result<DeviceBuffer<u32>> {
        let slice = stream
            .alloc_zeros::<u32>(len.max(1))
            .map_err(|e| self.alloc_error(e, format!("{len} counters"), 4 * len as u64))?;
        Ok(DeviceBuffer { slice, len })
    }

    /// Copies `u32` words (sequence offsets) into a new device buffer, in `stream`'s order.
    pub(crate) fn upload_u32(&self, stream: &Arc<CudaStream>, host: &[u32]) -> Result<DeviceBuffer<u32>> {
        if host.is_empty() {
            return self.zeroed_u32(stream, 0);
        }
        let slice = stream.clone_htod(host).map_err(|e| {
            self.alloc_error(e, format!("{} sequence offsets", host.len()), 4 * host.len() as u64)
        })?;
        Ok(DeviceBuffer { slice, len: host.len() })
    }

    /// The device address of a paged cache's table for work queued on `stream`, and the copy
    /// it is in: the caller keeps that until its kernels are queued (its drop frees the copy in
    /// stream order after them, if nothing else holds it).
    ///
    /// On the device's own stream the copy is kept for the next call that passes the same
    /// table (pointer-equal pages: an `Arc<[u32]>` never changes, and holding it keeps its
    /// address from being reused); a different table replaces it. A call on another thread that
    /// took the old copy's address still holds the old copy, so it is freed only after that
    /// call's kernels too (session 13: before, the replacement freed it at once, and a kernel
    /// queued afterwards read the other table's pages, NaN from a pool's spare pages). On
    /// another stream (a caller's) the table is copied for the call and freed in that stream's
    /// order, since two streams are not ordered.
    pub(crate) fn page_table_on(
        &self,
        stream: &Arc<CudaStream>,
        table: &crate::problem::BlockTable,
    ) -> Result<(u64, Arc<DeviceBuffer<u32>>)> {
        if !Arc::ptr_eq(stream, &self.stream) {
            let buf = self.upload_u32(stream, &table.pages)?;
            return Ok((buf.device_address(), Arc::new(buf)));
        }
        let mut kept = self.page_table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((pages, buf)) = kept.as_ref() {
            if Arc::ptr_eq(pages, &table.pages) {
                return Ok((buf.device_address(), Arc::clone(buf)));
            }
        }
        *kept = None;
        let buf = Arc::new(self.upload_u32(stream, &table.pages)?);
        *kept = Some((table.pages.clone(), Arc::clone(&buf)));
        Ok((buf.device_address(), buf))
    }

    /// Allocates `len` elements set to zero.
    pub fn alloc_zeros<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let mut buf = self.alloc::<T>(len)?;
        if len > 0 {
            self.stream.memset_zeros(&mut buf.slice).context("zeroing a buffer")?;
        }
        Ok(buf)
    }

    /// Copies a host slice into a new device buffer.
    pub fn upload<T: Element>(&self, host: &[T]) -> Result<DeviceBuffer<T>> {
        let mut buf = self.alloc::<T>(host.len())?;
        self.copy_to_device(host, &mut buf)?;
        Ok(buf)
    }

    /// Copies a host slice into an existing buffer of the same length.
    pub fn copy_to_device<T: Element>(&self, host: &[T], dst: &mut DeviceBuffer<T>) -> Result<()> {
        self.owns("the destination buffer", dst)?;
        if host.len() != dst.len() {
            return Err(Error::LengthMismatch {
                what: "copy to device",
                host: host.len(),
                device: dst.len(),
            });
        }
        if !host.is_empty() {
            let mut view = dst.slice.slice_mut(0..dst.len);
            self.stream.memcpy_htod(host, &mut view).context("copying to the device")?;
        }
        Ok(())
    }

    /// Copies a device buffer into a new host vector (waits for queued work first).
    pub fn download<T: Element>(&self, src: &DeviceBuffer<T>) -> Result<Vec<T>> {
        let mut host = vec![T::default(); src.len()];
        self.copy_to_host(src, &mut host)?;
        Ok(host)
    }

    /// Copies a device buffer into a host slice of the same length (waits for queued work first).
    pub fn copy_to_host<T: Element>(&self, src: &DeviceBuffer<T>, host: &mut [T]) -> Result<()> {
        self.owns("the source buffer", src)?;
        if host.len() != src.len() {
            return Err(Error::LengthMismatch { what: "copy to host", host: host.len(), device: src.len() });
        }
        if !host.is_empty() {
            let view = src.slice.slice(0..src.len);
            self.stream.memcpy_dtoh(&view, host).context("copying to the host")?;
        }
        self.synchronize()
    }

    /// Writes NaN to every element: the poison the tests put in outputs before each launch, so
    /// that an element a kernel failed to write cannot pass as correct.
    pub fn fill_nan<T: Element>(&self, buf: &mut DeviceBuffer<T>) -> Result<()> {
        self.fill_bits(buf, T::NAN_BITS)
    }

    /// Writes one bit pattern (the low 16 bits for 16-bit types) to every element.
    pub fn fill_bits<T: Element>(&self, buf: &mut DeviceBuffer<T>, bits: u32) -> Result<()> {
        self.owns("the buffer to fill", buf)?;
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len() as u64;
        let (ptr, _sync) = buf.slice.device_ptr_mut(&self.stream);
        let params = FillParams { ptr, len, value: bits, _pad: 0 };
        let kernel = self.fill_kernel(Family::Fill(size_of::<T>() as u32))?;
        let blocks = len.div_ceil(FILL_THREADS as u64).min(self.props.sm_count as u64 * 8) as u32;
        let shape = LaunchShape { grid: (blocks, 1, 1), block: (FILL_THREADS, 1, 1), shared_bytes: 0 };
        // SAFETY: `params` is the kernel's parameter struct; ptr/len describe `buf`.
        unsafe { self.launch(kernel, shape, &params) }
    }

    /// The registry's kernel of a fixed family (fills, softmax): always instantiated.
    pub(crate) fn fill_kernel(&self, family: Family) -> Result<KernelId> {
        KernelId::of(family).ok_or(Error::MissingKernel { kernel: "fill", target: self.target.name() })
    }

    /// Launches `kernel` on this device's stream with `params` as its single by-value parameter.
    ///
    /// Shared memory above the default 48 KiB is enabled for the kernel first; a request above
    /// the device's limit is [`Error::SharedMemoryExceeded`], and a launch the driver refuses
    /// (say, too many threads per block) is [`Error::Launch`]. Errors raised while the kernel
    /// runs surface at the next [`Device::synchronize`].
    ///
    /// # Safety
    /// `P` must be the `#[repr(C)]` parameter struct that `kernel` takes, and every device
    /// address in it must be valid for the accesses the kernel makes with this shape.
    pub(crate) unsafe fn launch<P: Copy>(
        &self,
        kernel: KernelId,
        shape: LaunchShape,
        params: &P,
    ) -> Result<()> {
        // SAFETY: the caller's contract; the device's own stream.
        unsafe { self.launch_on(self.stream.cu_stream(), kernel, shape, params, false) }
    }

    /// [`Device::launch`] on `stream`: this device's own, or a caller's ([`crate::external`]).
    /// With `dependent`, as a *programmatic dependent launch* (sm_90): the kernel may start while
    /// the previous one in the stream is finishing, which hides most of the gap between two
    /// launches; it must then wait (`griddepcontrol.wait`) before it reads what that one wrote.
    ///
    /// # Safety
    /// As [`Device::launch`], and `stream` must be a live stream of this device's primary
    /// context; with `dependent`, the kernel waits for the previous grid before its first access
    /// to memory that grid writes.
    pub(crate) unsafe fn launch_on<P: Copy>(
        &self,
        stream: sys::CUstream,
        kernel: KernelId,
        shape: LaunchShape,
        params: &P,
        dependent: bool,
    ) -> Result<()> {
        self.bind()?;
        let Function(f, static_shared) = self.module()?.function(kernel)?;
        let name = kernel.name();
        let requested = shape.shared_bytes.saturating_add(static_shared);
        let limit = self.props.max_shared_per_block;
        if requested > limit {
            return Err(Error::SharedMemoryExceeded { kernel: name, requested, limit });
        }
        let raised = &self.raised_shared[kernel.index()];
        if shape.shared_bytes > raised.load(Ordering::Relaxed) {
            // SAFETY: valid function handle; the value was checked against the device's limit.
            unsafe {
                sys::cuFuncSetAttribute(
                    f,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shape.shared_bytes as i32,
                )
            }
            .result()
            .map_err(|source| Error::Launch { kernel: name, source })?;
            raised.fetch_max(shape.shared_bytes, Ordering::Relaxed);
        }
        let mut args = [params as *const P as *mut c_void];
        if dependent {
            // SAFETY: a zeroed union is a valid value; the one member set is the one the
            // attribute's id names.
            let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attribute.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attribute.value.programmaticStreamSerializationAllowed = 1;
            let config = sys::CUlaunchConfig {
                gridDimX: shape.grid.0,
                gridDimY: shape.grid.1,
                gridDimZ: shape.grid.2,
                blockDimX: shape.block.0,
                blockDimY: shape.block.1,
                blockDimZ: shape.block.2,
                sharedMemBytes: shape.shared_bytes,
                hStream: stream,
                attrs: &mut attribute,
                numAttrs: 1,
            };
            // SAFETY: as below; `config` and its attribute outlive the call.
            return unsafe { sys::cuLaunchKernelEx(&config, f, args.as_mut_ptr(), std::ptr::null_mut()) }
                .result()
                .map_err(|source| Error::Launch { kernel: name, source });
        }
        // SAFETY: the caller guarantees `params` matches the kernel; the pointer outlives the
        // call (the driver copies parameters at launch).
        unsafe { result::launch_kernel(f, shape.grid, shape.block, shape.shared_bytes, stream, &mut args) }
            .map_err(|source| Error::Launch { kernel: name, source })
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // The module is unloaded right after this, in the device's context.
        let _ = self.ctx.bind_to_thread();
    }
}
