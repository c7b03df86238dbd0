//! The command line: `run`, `report`, and the hidden `one` that Nsight Compute profiles. Every
//! flag is checked before any GPU work; a bad value names the allowed ones.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use flashattn::{DType, Method};

use crate::shapes::{
    Case, DTypeArg, Mask, Overrides, Pass, Preset, Shape, Size, Softcap, TileSpec, Variant, expand,
};

/// flashattn's benchmark: where the time and the bytes go.
#[derive(Debug, Parser)]
#[command(
    name = "flashattn-bench",
    version,
    about = "Sweeps flashattn's attention over sequence length, head dim, batch, mask, dtype and method; \
             records time, TFLOP/s, modeled and measured HBM bytes, memory and error as JSON lines; \
             compares with PyTorch's attention backends; writes a Markdown report with SVG plots",
    after_help = "Examples:\n  \
        flashattn-bench run --preset quick\n  \
        flashattn-bench run --preset headline --peers --out results/h200\n  \
        flashattn-bench run --seqlens 1024,4096 --head-dims 64 --tokens 16384 --hidden 2048 --mask none,causal --dtype bf16\n  \
        flashattn-bench run --preset headline --methods flash --tiles 32x64,64x64,64x128\n  \
        flashattn-bench run --seqlens 4096,16384 --seqlen-q 1 --batch 16 --heads 16 --mask none\n  \
        flashattn-bench run --seqlens 4096,65536 --seqlen-q 1 --batch 16 --heads 32 --kv-heads 8 --mask none\n  \
        flashattn-bench run --seqlens 16384 --batch 1 --heads 16 --mask causal --window 256,1024 --methods flash-tc --peers\n  \
        flashattn-bench run --seqlens 4096 --mask causal --softcap 30,50 --alibi --pass fwd,bwd --peers\n  \
        flashattn-bench run --preset models --peers\n  \
        flashattn-bench report --in results/h200\n  \
        flashattn-bench context-parallel --seqlens 16384,65536,262144 --out results/h200-x2"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a sweep (on the GPU; on the CPU when there is none) and write JSONL rows, then the report.
    Run(Box<RunArgs>),
    /// Write report.md and SVG plots from the JSONL files (ours and the peers') in a folder.
    Report(ReportArgs),
    /// One attention call on one shape, nothing else: what `run --ncu` profiles.
    #[command(hide = true)]
    One(OneArgs),
    /// Context-parallel (ring) attention over every GPU against one GPU: scaling efficiency by
    /// sequence length and mask (B = 1, 32/8 heads, d = 128, bf16 by default).
    ContextParallel(crate::ring::RingArgs),
}

/// How much of the output to check against a reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Check {
    /// No error columns.
    None,
    /// The test kit's f64 oracle and low-precision baseline on one or two (sequence, head) slices
    /// (sampled rows when large), and its tolerance rule.
    Oracle,
    /// The oracle, plus every element against a GPU f32 flash run where the oracle only sampled.
    Full,
}

/// Which shapes get the complete-path columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompleteArg {
    /// The preset's choice (its headline shapes).
    Preset,
    /// Every shape.
    All,
    /// None.
    None,
}

/// What a GPU backward row starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BwdFromArg {
    /// A training forward's saved state (its residuals where the kernel keeps them).
    Residuals,
    /// The forward's log-sum-exp.
    Lse,
}

impl BwdFromArg {
    /// The name rows record.
    pub fn name(self) -> &'static str {
        match self {
            BwdFromArg::Residuals => "residuals",
            BwdFromArg::Lse => "lse",
        }
    }
}

/// Memory order of Q, K, V and O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// `(B, N, H, d)`: tokens outer, heads inner (FlashAttention's and the K/V caches' order).
    Bshd,
    /// `(B, H, N, d)`: PyTorch's SDPA order, each head's rows contiguous.
    Bhsd,
}

impl LayoutArg {
    /// The name in records and in the peers script's `--layout`.
    pub fn name(self) -> &'static str {
        match self {
            LayoutArg::Bshd => "bshd",
            LayoutArg::Bhsd => "bhsd",
        }
    }
}

/// `run`'s flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Named sweep; the flags below override its axes.
    #[arg(long, value_enum, default_value_t = Preset::Quick)]
    pub preset: Preset,
    /// Key sequence lengths N (comma-separated).
    #[arg(long, value_delimiter = ',', value_parser = positive)]
    pub seqlens: Option<Vec<usize>>,
    /// Head dimensions d, 1..=256 (flashattn::MAX_HEAD_DIM).
    #[arg(long, value_delimiter = ',', value_parser = head_dim)]
    pub head_dims: Option<Vec<usize>>,
    /// Fixed batch size B (instead of B = tokens / N).
    #[arg(long, value_parser = positive, conflicts_with = "tokens")]
    pub batch: Option<usize>,
    /// Fixed head count H (instead of H = hidden / d).
    #[arg(long, value_parser = positive, conflicts_with = "hidden")]
    pub heads: Option<usize>,
    /// K/V heads (grouped-query attention; the query heads must be a multiple). Default: the
    /// preset's (as many as the query heads, except in `models`).
    #[arg(long, value_parser = positive)]
    pub kv_heads: Option<usize>,
    /// Split-KV override for the tensor-core kernel (`AttentionOptions::splits`; 1: no split).
    /// Default: the planner's choice. Rows of other methods ignore it.
    #[arg(long, value_parser = positive)]
    pub splits: Option<usize>,
    /// Tokens per batch: B = TOKENS / N (the headline rule is 16384).
    #[arg(long, value_parser = positive)]
    pub tokens: Option<usize>,
    /// Hidden size: H = HIDDEN / d (the headline rule is 2048).
    #[arg(long, value_parser = positive)]
    pub hidden: Option<usize>,
    /// Masks: none, causal, varlen (ragged lengths around N, same total), varlen-causal.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub mask: Option<Vec<Mask>>,
    /// Sliding windows: each shape runs once per LEFT, each query seeing the LEFT keys before its
    /// diagonal (and, unless the mask is causal, every key after it). Combine with --mask causal
    /// for the usual local attention. Default: no window.
    #[arg(long, value_name = "LEFT", value_delimiter = ',', value_parser = positive)]
    pub window: Option<Vec<usize>>,
    /// Logit softcaps: each shape runs once per C > 0 (after the windows: every window meets
    /// every softcap), its scaled scores s becoming C·tanh(s/C) before the softmax
    /// (`AttentionOptions::softcap`), key suffix `/capC`. With --peers only FlexAttention runs
    /// them. Default: none.
    #[arg(long, value_name = "C", value_delimiter = ',', value_parser = softcap, allow_negative_numbers = true)]
    pub softcap: Option<Vec<Softcap>>,
    /// ALiBi on every shape: the logit of query t and key j gets −slope_h·|t + Nk − Nq − j|
    /// (bottom-right aligned), BLOOM's slopes slope_h = 2^(−8(h+1)/H) over the H query heads
    /// (`AttentionOptions::alibi_slopes`), key suffix `/alibi`. With --peers only FlexAttention
    /// runs it.
    #[arg(long)]
    pub alibi: bool,
    /// Element types.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub dtype: Option<Vec<DTypeArg>>,
    /// Query length when it differs from N (1 = decode-like).
    #[arg(long, value_parser = positive)]
    pub seqlen_q: Option<usize>,
    /// Tile overrides for the flash methods, BLOCK_MxBLOCK_N (`auto`: the library's choice).
    #[arg(long, value_delimiter = ',', value_parser = tiles)]
    pub tiles: Option<Vec<TileArg>>,
    /// Methods: flash, flash-tc, flash-hopper (sm_90 only), standard, auto.
    #[arg(long, value_delimiter = ',', value_parser = method)]
    pub methods: Option<Vec<Method>>,
    /// Passes to time: fwd, bwd (the backward alone, given the forward's O and LSE), fwd+bwd.
    /// On the GPU the backward is `Device::attention_backward` (f16/bf16, tensor-core methods;
    /// other rows say unsupported); with --peers, PyTorch's backends run the same passes.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fwd")]
    pub pass: Vec<Pass>,
    /// What a GPU backward row starts from: `residuals`, a training forward's saved state
    /// (`Device::attention_for_backward`, then `Device::attention_backward_saved`: the backward
    /// skips its pass over the keys where the forward's kernel kept its residuals — the Hopper
    /// kernel's plain instances), or `lse`, the forward's log-sum-exp alone
    /// (`Device::attention` and `Device::attention_backward`).
    #[arg(long, value_enum, default_value_t = BwdFromArg::Residuals)]
    pub bwd_from: BwdFromArg,
    /// Memory order of the tensors, ours and (with --peers) PyTorch's, so that both read the same
    /// layout. Without it ours are (B, N, H, d) and the peers' (B, H, N, d), each its native
    /// order. Varlen rows are packed by tokens either way.
    #[arg(long, value_enum)]
    pub layout: Option<LayoutArg>,
    /// Which shapes get upload/layout/launch-overhead/download measurements.
    #[arg(long, value_enum, default_value_t = CompleteArg::Preset)]
    pub complete_path: CompleteArg,
    /// Output error checks.
    #[arg(long, value_enum, default_value_t = Check::Full)]
    pub check: Check,
    /// Warm-up time per row before sampling, ms.
    #[arg(long, default_value_t = 25.0, value_parser = positive_f64)]
    pub warmup_ms: f64,
    /// Sampling time per row, ms (at least 5 samples, 3 for calls over 50 ms).
    #[arg(long, default_value_t = 100.0, value_parser = positive_f64, conflicts_with = "reps")]
    pub rep_ms: f64,
    /// Exactly this many samples per row (instead of --rep-ms).
    #[arg(long, value_parser = positive)]
    pub reps: Option<usize>,
    /// Run PyTorch's SDPA backends on the same shapes (benches/peers.py; needs python3 + torch).
    #[arg(long)]
    pub peers: bool,
    /// The peers script (default: peers.py next to this executable, else the source tree's).
    #[arg(long)]
    pub peers_script: Option<PathBuf>,
    /// Python interpreter for the peers script.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Profile rows under Nsight Compute and record measured DRAM bytes.
    #[arg(long)]
    pub ncu: bool,
    /// The ncu executable.
    #[arg(long, default_value = "ncu")]
    pub ncu_path: PathBuf,
    /// Profile at most this many rows (the first measured ones of the complete-path shapes).
    #[arg(long, default_value_t = 16)]
    pub ncu_limit: usize,
    /// Device ceilings for the roofline, `TB/s,TFLOP/s` (default: measured in the run).
    #[arg(long, value_parser = ceilings)]
    pub ceilings: Option<(f64, f64)>,
    /// Output folder (default: results/<date>-<device>); rows are appended to bench.jsonl.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Commit recorded in every row (default: $FLASHATTN_COMMIT, else `git rev-parse HEAD`).
    #[arg(long)]
    pub commit: Option<String>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Run the CPU sweep even when a GPU is present.
    #[arg(long)]
    pub cpu: bool,
    /// Print the rows the sweep would run and exit.
    #[arg(long)]
    pub list: bool,
    /// Do not write the report at the end.
    #[arg(long)]
    pub no_report: bool,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Write the output folder's path to this file (for `cargo xtask bench`).
    #[arg(long, hide = true)]
    pub out_marker: Option<PathBuf>,
}

/// `report`'s flags.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Folder with bench.jsonl (and peers.jsonl).
    #[arg(long = "in")]
    pub input: PathBuf,
    /// Where report.md and the plots go (default: the same folder).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Roofline ceilings `TB/s,TFLOP/s` when the results hold none.
    #[arg(long, value_parser = ceilings)]
    pub ceilings: Option<(f64, f64)>,
}

/// `one`'s flags: a single shape and method.
#[derive(Debug, Args)]
pub struct OneArgs {
    /// Element type.
    #[arg(long, value_enum)]
    pub dtype: DTypeArg,
    /// Batch.
    #[arg(long, value_parser = positive)]
    pub batch: usize,
    /// Heads.
    #[arg(long, value_parser = positive)]
    pub heads: usize,
    /// K/V heads (default: as many as the query heads).
    #[arg(long, value_parser = positive)]
    pub kv_heads: Option<usize>,
    /// Query length.
    #[arg(long, value_parser = positive)]
    pub seqlen_q: usize,
    /// Key length.
    #[arg(long, value_parser = positive)]
    pub seqlen_k: usize,
    /// Head dim.
    #[arg(long, value_parser = head_dim)]
    pub head_dim: usize,
    /// Mask.
    #[arg(long, value_enum)]
    pub mask: Mask,
    /// Left sliding window (default: none).
    #[arg(long, value_parser = positive)]
    pub window: Option<usize>,
    /// Logit softcap (default: none).
    #[arg(long, value_parser = softcap, allow_negative_numbers = true)]
    pub softcap: Option<Softcap>,
    /// ALiBi with BLOOM's slopes.
    #[arg(long)]
    pub alibi: bool,
    /// Method.
    #[arg(long, value_parser = method)]
    pub method: Method,
    /// Tile override.
    #[arg(long, value_parser = tiles)]
    pub tiles: Option<TileArg>,
    /// Device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
}

impl OneArgs {
    /// The shape and variant.
    pub fn case(&self) -> (Shape, Variant) {
        let shape = Shape {
            dtype: self.dtype.into(),
            batch: self.batch,
            heads: self.heads,
            kv_heads: self.kv_heads.unwrap_or(self.heads),
            seqlen_q: self.seqlen_q,
            seqlen_k: self.seqlen_k,
            head_dim: self.head_dim,
            mask: self.mask,
            window: self.window,
            softcap: self.softcap,
            alibi: self.alibi,
        };
        (shape, Variant { method: self.method, tiles: self.tiles.and_then(|t| t.0) })
    }

    /// The argument list that reproduces `one` for a shape and variant.
    pub fn args_for(shape: &Shape, variant: &Variant, device: usize) -> Vec<String> {
        let dtype = match shape.dtype {
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
        };
        let mut a: Vec<String> = [
            "one",
            "--dtype",
            dtype,
            "--batch",
            &shape.batch.to_string(),
            "--heads",
            &shape.heads.to_string(),
            "--kv-heads",
            &shape.kv_heads.to_string(),
            "--seqlen-q",
            &shape.seqlen_q.to_string(),
            "--seqlen-k",
            &shape.seqlen_k.to_string(),
            "--head-dim",
            &shape.head_dim.to_string(),
            "--mask",
            shape.mask.name(),
            "--method",
            variant.method.name(),
            "--device",
            &device.to_string(),
        ]
        .map(String::from)
        .to_vec();
        if let Some(t) = variant.tiles {
            a.extend(["--tiles".to_string(), t.to_string()]);
        }
        if let Some(w) = shape.window {
            a.extend(["--window".to_string(), w.to_string()]);
        }
        if let Some(c) = shape.softcap {
            a.extend(["--softcap".to_string(), c.to_string()]);
        }
        if shape.alibi {
            a.push("--alibi".to_string());
        }
        a
    }
}

/// A `--tiles` entry: a tile override, or `auto` (`None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileArg(pub Option<TileSpec>);

fn positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) | Err(_) => Err(format!("`{s}` is not a positive integer")),
        Ok(x) => Ok(x),
    }
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

fn softcap(s: &str) -> Result<Softcap, String> {
    s.parse()
}

fn head_dim(s: &str) -> Result<usize, String> {
    let max = flashattn::MAX_HEAD_DIM;
    match s.trim().parse::<usize>() {
        Ok(d) if (1..=max).contains(&d) => Ok(d),
        _ => Err(format!(
            "head dim `{s}` is not supported: allowed values are 1..={max} (flashattn::MAX_HEAD_DIM)"
        )),
    }
}

fn tiles(s: &str) -> Result<TileArg, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(TileArg(None));
    }
    s.parse::<TileSpec>().map(|t| TileArg(Some(t))).map_err(|e| format!("{e}, or `auto`"))
}

fn method(s: &str) -> Result<Method, String> {
    s.trim().parse::<Method>()
}

fn ceilings(s: &str) -> Result<(f64, f64), String> {
    let bad = || format!("ceilings `{s}`: expected TB/s,TFLOP/s with positive numbers, e.g. 4.3,790");
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    let a = positive_f64(a).map_err(|_| bad())?;
    let b = positive_f64(b).map_err(|_| bad())?;
    Ok((a, b))
}

impl RunArgs {
    /// The preset's blocks with this command line's overrides, expanded into cases.
    pub fn cases(&self) -> Result<Vec<Case>, String> {
        let o = self.overrides();
        let blocks: Vec<_> = self.preset.blocks().into_iter().map(|b| o.apply(b)).collect();
        let cases = o.modify(expand(&blocks)?);
        if cases.is_empty() {
            return Err("the sweep is empty".into());
        }
        Ok(cases)
    }

    /// The passes asked for, each once, in the order given.
    pub fn passes(&self) -> Vec<Pass> {
        let mut v: Vec<Pass> = Vec::new();
        for &p in &self.pass {
            if !v.contains(&p) {
                v.push(p);
            }
        }
        v
    }

    /// The axis overrides this command line asks for.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            seqlens: self.seqlens.clone(),
            head_dims: self.head_dims.clone(),
            batch: self.batch.map(Size::Fixed).or(self.tokens.map(Size::Per)),
            heads: self.heads.map(Size::Fixed).or(self.hidden.map(Size::Per)),
            kv_heads: self.kv_heads,
            masks: self.mask.clone(),
            dtypes: self.dtype.as_ref().map(|v| v.iter().map(|&d| d.into()).collect()),
            seqlen_q: self.seqlen_q,
            tiles: self.tiles.as_ref().map(|v| v.iter().map(|t| t.0).collect()),
            methods: self.methods.clone(),
            complete: match self.complete_path {
                CompleteArg::Preset => None,
                CompleteArg::All => Some(true),
                CompleteArg::None => Some(false),
            },
            windows: self.window.clone(),
            softcaps: self.softcap.clone(),
            alibi: self.alibi,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("flashattn-bench").chain(args.iter().copied()))
    }

    fn run_args(args: &[&str]) -> Box<RunArgs> {
        match parse(&[&["run"], args].concat()).unwrap().command {
            Command::Run(r) => r,
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn every_axis_flag_parses() {
        let r = run_args(&[
            "--seqlens",
            "1024,2048",
            "--head-dims",
            "64,128",
            "--tokens",
            "16384",
            "--hidden",
            "2048",
            "--mask",
            "none,causal,varlen",
            "--dtype",
            "bf16,f16,f32",
            "--seqlen-q",
            "1",
            "--tiles",
            "64x64,32x128,auto",
            "--methods",
            "flash,flash-tc,standard",
            "--peers",
            "--ncu",
            "--out",
            "x",
            "--warmup-ms",
            "10",
            "--reps",
            "7",
            "--ceilings",
            "4.3,790",
        ]);
        assert_eq!(r.seqlens, Some(vec![1024, 2048]));
        assert_eq!(r.mask, Some(vec![Mask::Dense, Mask::Causal, Mask::Varlen]));
        assert_eq!(r.tiles.as_ref().unwrap()[2], TileArg(None));
        assert_eq!(r.ceilings, Some((4.3, 790.0)));
        let cases = r.cases().unwrap();
        // 3 dtypes × 2 d × 3 masks × 2 N.
        assert_eq!(cases.len(), 36);
        assert!(cases.iter().all(|c| c.shape.seqlen_q == 1));
        let c = cases.iter().find(|c| c.shape.key() == "bf16/B8/H16/N1x2048/d128/none").unwrap();
        let labels: Vec<_> = c.variants.iter().map(|v| v.label()).collect();
        assert_eq!(
            labels,
            [
                "flash 64x64",
                "flash 32x128",
                "flash",
                "flash-tc 64x64",
                "flash-tc 32x128",
                "flash-tc",
                "standard"
            ]
        );
    }

    #[test]
    fn window_flag_adds_a_left_window_to_every_shape() {
        assert_eq!(run_args(&[]).window, None);
        assert!(run_args(&[]).cases().unwrap().iter().all(|c| c.shape.window.is_none()));
        let r = run_args(&[
            "--seqlens",
            "4096",
            "--head-dims",
            "128",
            "--mask",
            "causal",
            "--window",
            "256,1024",
        ]);
        assert_eq!(r.window, Some(vec![256, 1024]));
        assert_eq!(r.overrides().windows, Some(vec![256, 1024]));
        let cases = r.cases().unwrap();
        let keys: Vec<String> = cases.iter().map(|c| c.shape.key()).collect();
        assert_eq!(
            keys[..2],
            ["bf16/B4/H16/N4096x4096/d128/causal/w256", "bf16/B4/H16/N4096x4096/d128/causal/w1024"]
        );
        let plain_cases =
            run_args(&["--seqlens", "4096", "--head-dims", "128", "--mask", "causal"]).cases().unwrap();
        assert_eq!(cases.len(), 2 * plain_cases.len(), "every shape once per window");
        assert!(keys.iter().all(|k| k.ends_with("/w256") || k.ends_with("/w1024")), "{keys:?}");
        let opts = crate::models::options(&cases[1].shape).unwrap();
        assert_eq!(opts.window, flashattn::Window { left: Some(1024), right: None });
        assert!(opts.causal);
        // The visible pairs only: fewer FLOPs than plain causal attention.
        let plain = Shape { window: None, ..cases[1].shape.clone() };
        assert!(crate::models::flops(&cases[1].shape) < crate::models::flops(&plain));
        let e = parse(&["run", "--window", "0"]).unwrap_err().to_string();
        assert!(e.contains("positive"), "{e}");
        let e = parse(&["run", "--window", "wide"]).unwrap_err().to_string();
        assert!(e.contains("positive"), "{e}");
    }

    #[test]
    fn softcap_and_alibi_flags_modify_every_shape() {
        let r = run_args(&[]);
        assert_eq!((r.softcap.clone(), r.alibi), (None, false));
        assert!(r.cases().unwrap().iter().all(|c| c.shape.softcap.is_none() && !c.shape.alibi));
        let base = ["--seqlens", "4096", "--head-dims", "128", "--mask", "causal"];
        let plain_cases = run_args(&base).cases().unwrap();
        let r = run_args(&[&base[..], &["--softcap", "30,50.5"]].concat());
        let caps: Vec<f32> = r.softcap.as_ref().unwrap().iter().map(|c| c.get()).collect();
        assert_eq!(caps, [30.0, 50.5]);
        assert_eq!(r.overrides().softcaps, r.softcap);
        let cases = r.cases().unwrap();
        assert_eq!(cases.len(), 2 * plain_cases.len(), "every shape once per softcap");
        let keys: Vec<String> = cases.iter().map(|c| c.shape.key()).collect();
        assert_eq!(
            keys[..2],
            ["bf16/B4/H16/N4096x4096/d128/causal/cap30", "bf16/B4/H16/N4096x4096/d128/causal/cap50.5"]
        );
        assert!(keys.iter().all(|k| k.ends_with("/cap30") || k.ends_with("/cap50.5")), "{keys:?}");
        let opts = crate::models::options(&cases[1].shape).unwrap();
        assert_eq!((opts.softcap, opts.alibi_slopes), (Some(50.5), None));
        // FLOPs are unchanged by a modifier.
        let plain = Shape { softcap: None, ..cases[1].shape.clone() };
        assert_eq!(crate::models::flops(&cases[1].shape), crate::models::flops(&plain));

        // --alibi: every shape once, with BLOOM's slopes for its query heads.
        let r = run_args(&[&base[..], &["--alibi"]].concat());
        assert!(r.alibi && r.overrides().alibi);
        let cases = r.cases().unwrap();
        assert_eq!(cases.len(), plain_cases.len());
        assert!(cases.iter().all(|c| c.shape.alibi && c.shape.key().ends_with("/causal/alibi")));
        let s = &cases[0].shape;
        let opts = crate::models::options(s).unwrap();
        let slopes = opts.alibi_slopes.unwrap();
        assert_eq!(slopes.len(), s.heads);
        assert_eq!(slopes[s.heads - 1], 2f32.powi(-8), "2^(-8(h+1)/H), H = 16");
        assert!((slopes[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-7, "{slopes:?}");
        assert_eq!(opts.softcap, None);

        // Everything at once: windows × softcaps, ALiBi on each.
        let r = run_args(&[&base[..], &["--window", "256,1024", "--softcap", "30", "--alibi"]].concat());
        let keys: Vec<String> = r.cases().unwrap().iter().map(|c| c.shape.key()).collect();
        assert_eq!(
            keys[..2],
            [
                "bf16/B4/H16/N4096x4096/d128/causal/w256/cap30/alibi",
                "bf16/B4/H16/N4096x4096/d128/causal/w1024/cap30/alibi"
            ]
        );

        // Bad values are refused with what a softcap must be.
        for bad in ["0", "-30", "-0.5", "thirty", "inf", "nan", "30,0"] {
            let e = parse(&["run", "--softcap", bad]).unwrap_err().to_string();
            assert!(e.contains("positive finite number") && e.contains("C·tanh(s/C)"), "{bad}: {e}");
        }
        let e = parse(&["run", "--softcap=-1"]).unwrap_err().to_string();
        assert!(e.contains("positive finite number"), "{e}");
        let e = parse(&["run", "--alibi", "yes"]).unwrap_err().to_string();
        assert!(e.contains("unexpected argument"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_with_the_allowed_ones() {
        let err = |args: &[&str]| parse(&[&["run"], args].concat()).unwrap_err().to_string();
        let e = err(&["--mask", "none,diagonal"]);
        assert!(e.contains("diagonal") && e.contains("causal") && e.contains("varlen"), "{e}");
        let e = err(&["--dtype", "f64"]);
        assert!(e.contains("bf16") && e.contains("f16") && e.contains("f32"), "{e}");
        for d in ["0", "257"] {
            let e = err(&["--head-dims", d]);
            assert!(e.contains("1..=256"), "{e}");
        }
        let e = err(&["--tiles", "64by64"]);
        assert!(e.contains("BLOCK_MxBLOCK_N"), "{e}");
        let e = err(&["--methods", "fast"]);
        assert!(e.contains("flash-tc") && e.contains("standard"), "{e}");
        assert!(err(&["--seqlens", "0"]).contains("positive"));
        assert!(err(&["--batch", "2", "--tokens", "3"]).contains("cannot be used with"));
        assert!(err(&["--ceilings", "4.3"]).contains("TB/s,TFLOP/s"));
        assert!(err(&["--preset", "huge"]).contains("headline"));
    }

    #[test]
    fn passes_parse() {
        assert_eq!(run_args(&[]).passes(), [Pass::Fwd]);
        let r = run_args(&["--pass", "fwd,bwd,fwd+bwd,bwd"]);
        assert_eq!(r.passes(), [Pass::Fwd, Pass::Bwd, Pass::FwdBwd]);
        assert_eq!(run_args(&["--pass", "bwd"]).passes(), [Pass::Bwd]);
        let e = parse(&["run", "--pass", "backward"]).unwrap_err().to_string();
        assert!(e.contains("fwd+bwd") && e.contains("bwd"), "{e}");
        assert_eq!(Pass::FwdBwd.name(), "fwd+bwd");
        assert_eq!([Pass::Fwd, Pass::Bwd, Pass::FwdBwd].map(Pass::flops_factor), [1.0, 2.5, 3.5]);
    }

    #[test]
    fn fixed_batch_and_heads() {
        let r = run_args(&["--preset", "headline", "--batch", "2", "--heads", "4", "--seqlens", "64"]);
        let cases = r.cases().unwrap();
        assert!(cases.iter().all(|c| c.shape.batch == 2 && c.shape.heads == 4 && c.shape.seqlen_k == 64));
        assert_eq!(cases.len(), 8);
        let r = run_args(&["--seqlens", "64", "--heads", "8", "--kv-heads", "2", "--mask", "none"]);
        let cases = r.cases().unwrap();
        assert!(cases.iter().all(|c| c.shape.heads == 8 && c.shape.kv_heads == 2), "{cases:?}");
        assert!(cases.iter().any(|c| c.shape.key() == "bf16/B256/H8/KV2/N64x64/d128/none"));
        let e = run_args(&["--heads", "6", "--kv-heads", "4"]).cases().unwrap_err();
        assert!(e.contains("not a multiple"), "{e}");
        let r = run_args(&["--preset", "models"]);
        assert_eq!(r.preset, Preset::Models);
        assert!(r.cases().unwrap().iter().any(|c| c.group == "llama3-8b-decode"));
    }

    #[test]
    fn one_round_trips() {
        let shape = Shape {
            dtype: DType::F16,
            batch: 2,
            heads: 4,
            kv_heads: 2,
            seqlen_q: 5,
            seqlen_k: 7,
            head_dim: 96,
            mask: Mask::VarlenCausal,
            window: Some(3),
            softcap: Softcap::new(30.0),
            alibi: true,
        };
        let variant = Variant { method: Method::Flash, tiles: Some(TileSpec { block_m: 32, block_n: 64 }) };
        let args = OneArgs::args_for(&shape, &variant, 1);
        let cli = Cli::try_parse_from(std::iter::once("flashattn-bench".to_string()).chain(args)).unwrap();
        let Command::One(one) = cli.command else { panic!() };
        assert_eq!(one.case(), (shape, variant));
        assert_eq!(one.device, 1);
    }
}
