//! The library's one error type.

use cudarc::driver::DriverError;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, each with a message a user can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `libcuda` could not be loaded: no NVIDIA driver on this machine.
    #[error(
        "no CUDA driver found (libcuda.so could not be loaded): install the NVIDIA driver, \
         or run on a machine with an NVIDIA GPU; the CPU implementation works without one"
    )]
    NoDriver,

    /// The driver loaded, but there is no device with this ordinal.
    #[error("no CUDA device with ordinal {ordinal}: the driver reports {count} device(s)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver sees.
        count: usize,
    },

    /// The device is older than the kernels support.
    #[error(
        "device {ordinal} ({name}) has compute capability {major}.{minor}; \
         flashattn's kernels need 8.0 (Ampere) or newer"
    )]
    UnsupportedDevice {
        /// Device ordinal.
        ordinal: usize,
        /// Device name.
        name: String,
        /// Compute capability, major.
        major: i32,
        /// Compute capability, minor.
        minor: i32,
    },

    /// A device allocation did not fit.
    #[error(
        "out of device memory: {what} needs {requested} bytes ({requested_gib:.2} GiB); \
         {free} of {total} bytes are free"
    )]
    OutOfMemory {
        /// What the memory was for.
        what: String,
        /// Bytes asked for.
        requested: u64,
        /// The same in GiB, for reading.
        requested_gib: f64,
        /// Free device memory when it failed.
        free: u64,
        /// Total device memory.
        total: u64,
    },

    /// A kernel would need more shared memory per block than the device allows.
    #[error(
        "kernel `{kernel}` needs {requested} bytes of shared memory per block; this device allows \
         at most {limit}: choose smaller tiles"
    )]
    SharedMemoryExceeded {
        /// Kernel name.
        kernel: &'static str,
        /// Bytes per block asked for.
        requested: u32,
        /// The device's opt-in limit per block.
        limit: u32,
    },

    /// A launch was refused or failed while running.
    #[error("launch of kernel `{kernel}` failed: {source}")]
    Launch {
        /// Kernel name.
        kernel: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },

    /// The driver could not load (JIT-compile) the committed PTX.
    #[error(
        "the driver could not load the {target} PTX module: {source}. JIT log: {log}. \
         An older driver may not know this PTX version: update the NVIDIA driver"
    )]
    ModuleLoad {
        /// `sm_80` or `sm_90a`.
        target: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
        /// The JIT's error log.
        log: String,
    },

    /// A kernel the library expects is not in the committed PTX (a stale PTX file).
    #[error(
        "kernel `{kernel}` is missing from the {target} PTX: the committed PTX is stale; \
         run `cargo xtask ptx`"
    )]
    MissingKernel {
        /// Kernel name.
        kernel: &'static str,
        /// `sm_80` or `sm_90a`.
        target: &'static str,
    },

    /// A host↔device length mismatch in a copy.
    #[error("{what}: the host slice has {host} elements but the device buffer has {device}")]
    LengthMismatch {
        /// Which copy.
        what: &'static str,
        /// Host elements.
        host: usize,
        /// Device elements.
        device: usize,
    },

    /// Any other driver call that failed.
    #[error("CUDA driver call failed while {context}: {source}")]
    Driver {
        /// What the library was doing.
        context: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
}

/// Attaches a context string to a driver error.
pub(crate) trait DriverContext<T> {
    fn context(self, context: &'static str) -> Result<T>;
}

impl<T> DriverContext<T> for std::result::Result<T, DriverError> {
    fn context(self, context: &'static str) -> Result<T> {
        self.map_err(|source| Error::Driver { context, source })
    }
}
