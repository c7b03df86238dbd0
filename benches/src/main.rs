//! `flashattn-bench`: sweeps that show where the time and the bytes go.
//!
//! `run` measures each shape × method (kernel time with its spread, TFLOP/s, modeled and measured
//! bytes, extra memory, error; the complete path on a subset; Nsight Compute bytes with `--ncu`;
//! PyTorch's backends with `--peers`) and appends JSON lines to `bench.jsonl`; `report` turns a
//! folder of them into `report.md` and SVG plots. Without a GPU, `run` runs the CPU sweep. Every
//! failure of a row is recorded as the row's status; nothing panics on a failed call.

mod ceilings;
mod cli;
mod cpu;
mod gpu;
mod inputs;
mod meta;
mod models;
mod ncu;
mod peers;
mod plots;
mod progress;
mod record;
mod report;
mod ring;
mod shapes;
mod stats;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use flashattn::{DType, Device, Method};
use serde_json::json;

use crate::cli::{Cli, Command, OneArgs, RunArgs};
use crate::gpu::{Flow, GpuRunner};
use crate::inputs::Pools;
use crate::meta::RunInfo;
use crate::progress::Progress;
use crate::record::{Ceilings, JsonlWriter, Meta, ROWS_FILE, Record, Row};
use crate::shapes::{Case, Pass, Preset, TileSpec, Variant};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(&args),
        Command::Report(a) => {
            let out = a.out.clone().unwrap_or_else(|| a.input.clone());
            report::write(&a.input, &out, a.ceilings)
                .map(|p| eprintln!("flashattn-bench: wrote {}", p.display()))
        }
        Command::One(a) => gpu::one(&a),
        Command::ContextParallel(a) => ring::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flashattn-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How a sweep ended.
enum End {
    Done,
    Stopped,
    DeviceLost(String),
}

fn run(args: &RunArgs) -> Result<(), String> {
    // Everything about the flags is checked here, before any device work.
    let cases = args.cases()?;
    // `--preset cpu` is the CPU sweep whether or not a GPU is there.
    let cpu = args.cpu || args.preset == Preset::Cpu;
    if args.list {
        let cases = if cpu { cpu::cases(&args.overrides())?.0 } else { cases };
        for c in &cases {
            let v: Vec<String> = c
                .variants
                .iter()
                .map(|v| {
                    if cpu {
                        v.label().replacen(v.method.name(), cpu::method_name(v.method), 1)
                    } else {
                        v.label()
                    }
                })
                .collect();
            println!(
                "{:<42} {:<9} {}{}",
                c.shape.key(),
                c.group,
                v.join(", "),
                if c.complete { "  [complete path]" } else { "" }
            );
        }
        let passes = args.passes();
        let rows = cases.iter().map(|c| c.variants.len()).sum::<usize>() * passes.len();
        if passes == [Pass::Fwd] {
            println!("{} shapes, {rows} rows", cases.len());
        } else {
            let names: Vec<&str> = passes.iter().map(|p| p.name()).collect();
            println!("{} shapes, {rows} rows (passes {})", cases.len(), names.join(", "));
        }
        return Ok(());
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // A handler may already exist (never in this binary); then Ctrl-C just ends the process.
        let _ = ctrlc::set_handler(move || {
            if stop.swap(true, Ordering::SeqCst) {
                eprintln!("\nflashattn-bench: second Ctrl-C, exiting now");
                std::process::exit(130);
            }
            eprintln!(
                "\nflashattn-bench: Ctrl-C, stopping after the current row (again to exit now); rows so far are kept"
            );
        });
    }
    let device = if cpu {
        None
    } else {
        match Device::new(args.device) {
            Ok(d) => Some(d),
            Err(e) if std::env::var("FLASHATTN_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
                return Err(format!("no usable GPU and FLASHATTN_REQUIRE_GPU=1: {e}"));
            }
            Err(e) => {
                eprintln!(
                    "flashattn-bench: no usable GPU ({e})\nflashattn-bench: running the CPU sweep instead"
                );
                None
            }
        }
    };
    let info = RunInfo {
        run_id: meta::now(),
        device: device.as_ref().map_or("cpu".to_string(), |d| d.props().name.clone()),
        commit: meta::commit(args.commit.as_deref()),
        host: meta::host(),
    };
    let out = args.out.clone().unwrap_or_else(|| meta::default_out(&info.run_id, &info.device));
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut writer = JsonlWriter::append(&out.join(ROWS_FILE))?;
    writer.write(&Record::Meta(meta_record(args, &info, device.as_ref())))?;
    eprintln!(
        "flashattn-bench: {} on {} (commit {}), rows to {}",
        info.run_id,
        info.device,
        info.commit,
        out.join(ROWS_FILE).display()
    );

    let end = match &device {
        Some(dev) => gpu_sweep(dev, args, &cases, &info, &mut writer, &stop)?,
        None => cpu_sweep(args, &info, &mut writer, &stop)?,
    };
    if let (Some(_), true, End::Done) = (&device, args.peers, &end) {
        let cfg = peers::PeerRun {
            python: &args.python,
            script: peers::locate(args.peers_script.as_deref()),
            out: &out,
            warmup_ms: args.warmup_ms,
            rep_ms: args.rep_ms,
            run_id: &info.run_id,
            commit: &info.commit,
            passes: &args.passes(),
            layout: args.layout,
        };
        eprintln!("flashattn-bench: running the PyTorch peers");
        match peers::run(&cfg, &cases) {
            Ok(n) => eprintln!("flashattn-bench: peers ran {n} shapes"),
            Err(e) => eprintln!("flashattn-bench: peers skipped: {e}"),
        }
    }
    drop(device);
    if !args.no_report {
        match report::write(&out, &out, args.ceilings) {
            Ok(p) => eprintln!("flashattn-bench: wrote {}", p.display()),
            Err(e) => eprintln!("flashattn-bench: no report: {e}"),
        }
    }
    if let Some(m) = &args.out_marker {
        std::fs::write(m, out.display().to_string())
            .map_err(|e| format!("cannot write {}: {e}", m.display()))?;
    }
    eprintln!("flashattn-bench: results in {}", out.display());
    match end {
        End::Done => Ok(()),
        End::Stopped => {
            eprintln!("flashattn-bench: stopped early; the rows written so far are in the results");
            Ok(())
        }
        End::DeviceLost(msg) => Err(format!("{msg}; the rows before it are in {}", out.display())),
    }
}

fn meta_record(args: &RunArgs, info: &RunInfo, dev: Option<&Device>) -> Meta {
    let mut extra = std::collections::BTreeMap::new();
    extra.insert("backend".into(), json!(if dev.is_some() { "gpu" } else { "cpu" }));
    extra.insert("args".into(), json!(std::env::args().collect::<Vec<_>>()));
    extra.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    extra.insert(
        "settings".into(),
        json!({
            "preset": format!("{:?}", args.preset).to_lowercase(),
            "warmup_ms": args.warmup_ms,
            "rep_ms": args.rep_ms,
            "reps": args.reps,
            "check": format!("{:?}", args.check).to_lowercase(),
            "passes": args.passes().iter().map(|p| p.name()).collect::<Vec<_>>(),
            "seed": args.seed,
            "min_input_sets": gpu::MIN_SETS,
            "batch_below_ms": gpu::BATCH_BELOW_MS,
            "oracle_budget_flops": gpu::ORACLE_BUDGET,
        }),
    );
    if let Some(d) = dev {
        let p = d.props();
        extra.insert(
            "compute_capability".into(),
            json!(format!("{}.{}", p.compute_capability.0, p.compute_capability.1)),
        );
        extra.insert("sm_count".into(), json!(p.sm_count));
        extra.insert(
            "driver_version".into(),
            json!(format!("{}.{}", p.driver_version / 1000, (p.driver_version % 1000) / 10)),
        );
        extra.insert("ptx_target".into(), json!(p.ptx_target));
        extra.insert("l2_bytes".into(), json!(p.l2_bytes));
        extra.insert("total_memory".into(), json!(p.total_memory));
        extra.insert("max_shared_per_block".into(), json!(p.max_shared_per_block));
    }
    Meta {
        source: "flashattn-bench".into(),
        run_id: info.run_id.clone(),
        timestamp: info.run_id.clone(),
        host: info.host.clone(),
        commit: info.commit.clone(),
        device: info.device.clone(),
        extra,
    }
}

/// One line per row for the log.
fn summary(r: &Row) -> String {
    let mut name = match &r.tiles {
        Some(t) => format!("{} {t}", r.method),
        None => r.method.clone(),
    };
    if r.pass() != "fwd" {
        name += &format!(" [{}]", r.pass());
    }
    if !r.ok() {
        let msg: String = r.message.clone().unwrap_or_default().chars().take(160).collect();
        return format!("{} {name}: {} ({msg})", r.key, r.status);
    }
    let mut s = format!("{} {name}: {:.4} ms", r.key, r.median_ms().unwrap_or(f64::NAN));
    if let Some(t) = r.tflops {
        if r.backend == "cpu" {
            s += &format!(", {:.2} GFLOP/s", t * 1e3);
        } else {
            s += &format!(", {t:.1} TFLOP/s");
        }
    }
    if let Some(e) = r.error.as_ref().and_then(|e| e.oracle_max_abs) {
        s += &format!(", err {e:.1e}");
    }
    if let Some(n) = &r.ncu {
        match (&n.error, n.dram_read, n.dram_write) {
            (None, Some(a), Some(b)) => s += &format!(", ncu {:.3} GB", (a + b) / 1e9),
            (Some(e), _, _) => s += &format!(", ncu failed: {}", e.chars().take(100).collect::<String>()),
            _ => {}
        }
    }
    s
}

/// The variant a row was measured with (to re-run it under ncu).
fn variant_of(r: &Row) -> Option<Variant> {
    let method: Method = r.method.parse().ok()?;
    let tiles = match &r.tiles {
        Some(t) => Some(t.parse::<TileSpec>().ok()?),
        None => None,
    };
    Some(Variant { method, tiles })
}

fn gpu_sweep(
    dev: &Device,
    args: &RunArgs,
    cases: &[Case],
    info: &RunInfo,
    writer: &mut JsonlWriter,
    stop: &AtomicBool,
) -> Result<End, String> {
    eprintln!("flashattn-bench: {}", dev.props());
    let mut runner = GpuRunner::new(dev, args, info, cases);
    let ceil = match args.ceilings {
        Some((bw, tf)) => Ceilings {
            run_id: info.run_id.clone(),
            device: info.device.clone(),
            bandwidth_tbs: bw,
            tflops: tf,
            source: "--ceilings".into(),
            notes: String::new(),
        },
        None => {
            eprintln!("flashattn-bench: measuring the roofline ceilings (copy bandwidth, bf16 matmul)");
            ceilings::measure(dev, runner.pools(), &info.run_id)
        }
    };
    eprintln!(
        "flashattn-bench: ceilings {:.2} TB/s, {:.0} TFLOP/s ({}; {})",
        ceil.bandwidth_tbs, ceil.tflops, ceil.source, ceil.notes
    );
    writer.write(&Record::Ceilings(ceil))?;

    let total: usize = cases.iter().map(|c| c.variants.len()).sum::<usize>() * args.passes().len();
    let progress = Progress::new(total as u64);
    let exe = std::env::current_exe().ok();
    let any_complete = cases.iter().any(|c| c.complete);
    let mut ncu_left = if args.ncu { args.ncu_limit } else { 0 };
    let mut end = End::Done;
    for case in cases {
        if stop.load(Ordering::SeqCst) {
            end = End::Stopped;
            break;
        }
        progress.set_message(case.shape.key());
        let profile = case.complete || !any_complete;
        let mut emit = |mut row: Row| -> Result<(), String> {
            row.derive();
            // `one` runs the forward: backward rows are not profiled.
            if ncu_left > 0
                && profile
                && row.ok()
                && row.pass() == "fwd"
                && let (Some(exe), Some(v)) = (&exe, variant_of(&row))
            {
                progress.set_message(format!("{} {} under ncu", row.key, row.method));
                let b = ncu::profile(&args.ncu_path, exe, &OneArgs::args_for(&case.shape, &v, args.device));
                ncu_left -= 1;
                if b.error.as_deref().is_some_and(|e| e.starts_with("cannot run")) {
                    progress.log(&format!(
                        "flashattn-bench: Nsight Compute unavailable, no more profiling: {}",
                        b.error.as_deref().unwrap_or("")
                    ));
                    ncu_left = 0;
                }
                row.ncu = Some(b);
            }
            progress.log(&summary(&row));
            writer.write(&Record::Row(Box::new(row)))?;
            progress.inc();
            Ok(())
        };
        match runner.run_case(case, stop, &mut emit)? {
            Flow::Continue => {}
            Flow::Stop => {
                end = End::Stopped;
                break;
            }
            Flow::DeviceLost(msg) => {
                progress.log(&format!("flashattn-bench: {msg}; stopping the sweep"));
                end = End::DeviceLost(msg);
                break;
            }
        }
    }
    progress.finish();
    Ok(end)
}

fn cpu_sweep(
    args: &RunArgs,
    info: &RunInfo,
    writer: &mut JsonlWriter,
    stop: &AtomicBool,
) -> Result<End, String> {
    let (cases, dropped) = cpu::cases(&args.overrides())?;
    for k in dropped {
        eprintln!("flashattn-bench: {k} left out of the CPU sweep (over {:.0e} FLOPs)", cpu::CPU_MAX_FLOPS);
    }
    if cases.is_empty() {
        return Err("no shape small enough for the CPU sweep: pass smaller --seqlens".into());
    }
    let mut dtypes: Vec<DType> = cases.iter().map(|c| c.shape.dtype).collect();
    dtypes.sort();
    dtypes.dedup();
    let pools = Pools::new(gpu::pool_len(cases.iter().map(|c| &c.shape)), args.seed, &dtypes);
    let settings = cpu::Settings {
        reps: args.reps,
        rep_ms: args.rep_ms,
        passes: args.passes(),
        check: args.check != cli::Check::None,
    };
    let per_variant = settings.passes.len() as u64;
    let progress = Progress::new(cases.iter().map(|c| c.variants.len() as u64 * per_variant).sum());
    for case in &cases {
        if stop.load(Ordering::SeqCst) {
            return Ok(End::Stopped);
        }
        progress.set_message(case.shape.key());
        let mut emit = |mut row: Row| -> Result<(), String> {
            row.derive();
            progress.log(&summary(&row));
            writer.write(&Record::Row(Box::new(row)))?;
            progress.inc();
            Ok(())
        };
        if let Flow::Stop = cpu::run_case(case, &pools, info, &settings, stop, &mut emit)? {
            progress.finish();
            return Ok(End::Stopped);
        }
    }
    progress.finish();
    Ok(End::Done)
}
