//! PyTorch peers in the same run: the shapes go to a JSON file, `peers.py` runs them through
//! `scaled_dot_product_attention` pinned to each backend (and FlexAttention on causal and
//! sliding-window shapes, and alone on shapes with a score modifier: a softcap or ALiBi, which
//! it applies through its `score_mod`), in each pass of the run (the forward,
//! and through autograd the backward alone and the forward then the backward), and appends rows
//! to `peers.jsonl`, each with its pass.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::cli::LayoutArg;
use crate::models;
use crate::record::PEERS_FILE;
use crate::shapes::{Case, Pass};

/// The shapes file's name in the output folder.
pub const SHAPES_FILE: &str = "peers-shapes.json";

/// One shape as the peers script reads it.
#[derive(Debug, Serialize, PartialEq)]
pub struct PeerShape {
    /// The shape key (the peers' rows carry it, so the report can pair them with ours).
    pub key: String,
    /// Sweep part.
    pub group: String,
    /// bf16, f16, f32.
    pub dtype: String,
    /// B.
    pub batch: usize,
    /// H (query heads).
    pub heads: usize,
    /// K/V heads (a divisor of `heads`; fewer under grouped-query attention).
    pub kv_heads: usize,
    /// Nq.
    pub seqlen_q: usize,
    /// Nk.
    pub seqlen_k: usize,
    /// d.
    pub head_dim: usize,
    /// none or causal.
    pub mask: String,
    /// Causal (only with Nq == Nk, except with a window: FlexAttention aligns it bottom-right).
    pub causal: bool,
    /// Left sliding window (keys before each query's bottom-right-aligned diagonal); `null`
    /// without one. Only the script's FlexAttention backend applies it.
    pub window_left: Option<usize>,
    /// Logit softcap `C` (scaled scores `s` become `C·tanh(s/C)`); `null` without one. Only the
    /// script's FlexAttention backend applies it (a `score_mod`).
    pub softcap: Option<f32>,
    /// ALiBi with BLOOM's slopes `2^(−8(h+1)/H)` over the H query heads, bottom-right aligned
    /// (`−slope_h·|q + Nk − Nq − kv|`, after the softcap). Only FlexAttention applies it.
    pub alibi: bool,
    /// FLOPs by the same formula as ours (with a window: the visible pairs).
    pub flops: f64,
    /// Bytes of K plus V (storage type): decode rows (Nq = 1) report them over the time.
    pub kv_bytes: u64,
}

/// The shapes PyTorch can run with the same semantics (no varlen; causal only square, except
/// with a window or a score modifier, which only FlexAttention runs), once each.
pub fn peer_shapes(cases: &[Case]) -> Vec<PeerShape> {
    let mut out: Vec<PeerShape> = Vec::new();
    for c in cases.iter().filter(|c| c.shape.peer_comparable()) {
        let s = &c.shape;
        if out.iter().any(|p| p.key == s.key()) {
            continue;
        }
        out.push(PeerShape {
            key: s.key(),
            group: c.group.to_string(),
            dtype: s.dtype.name().to_string(),
            batch: s.batch,
            heads: s.heads,
            kv_heads: s.kv_heads,
            seqlen_q: s.seqlen_q,
            seqlen_k: s.seqlen_k,
            head_dim: s.head_dim,
            mask: s.mask.name().to_string(),
            causal: s.mask.causal(),
            window_left: s.window,
            softcap: s.softcap.map(|c| c.get()),
            alibi: s.alibi,
            flops: models::flops(s),
            kv_bytes: s.kv_bytes(),
        });
    }
    out
}

/// Where the script is: the flag, else next to this executable (the bundle's `bin/peers.py`),
/// else in the source tree.
pub fn locate(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_path_buf());
    }
    let beside = std::env::current_exe().ok().and_then(|e| e.parent().map(|d| d.join("peers.py")));
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers.py");
    [beside, Some(PathBuf::from("benches/peers.py")), Some(source)]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
}

/// Settings passed to the script.
pub struct PeerRun<'a> {
    /// Interpreter.
    pub python: &'a str,
    /// Script (see [`locate`]).
    pub script: Option<PathBuf>,
    /// Output folder.
    pub out: &'a Path,
    /// do_bench warm-up, ms.
    pub warmup_ms: f64,
    /// do_bench repetition time, ms.
    pub rep_ms: f64,
    /// Run id, commit (copied into the rows).
    pub run_id: &'a str,
    /// Commit.
    pub commit: &'a str,
    /// The passes to time (the run's `--pass`).
    pub passes: &'a [Pass],
    /// The tensors' memory order (the run's `--layout`); `None`: the script's own, (B, H, N, d).
    pub layout: Option<LayoutArg>,
}

/// The script's arguments after its path. `--passes` only when a pass other than the forward is
/// asked for, so that a forward-only run works with an older script (`--peers-script`).
pub fn script_args(cfg: &PeerRun<'_>, shapes_path: &Path) -> Vec<String> {
    let mut a = vec![
        "--shapes".to_string(),
        shapes_path.display().to_string(),
        "--out".to_string(),
        cfg.out.join(PEERS_FILE).display().to_string(),
        "--warmup-ms".to_string(),
        cfg.warmup_ms.to_string(),
        "--rep-ms".to_string(),
        cfg.rep_ms.to_string(),
        "--run-id".to_string(),
        cfg.run_id.to_string(),
        "--commit".to_string(),
        cfg.commit.to_string(),
    ];
    if let Some(l) = cfg.layout {
        a.extend(["--layout".to_string(), l.name().to_string()]);
    }
    if cfg.passes.iter().any(|&p| p != Pass::Fwd) {
        let names: Vec<&str> = cfg.passes.iter().map(|p| p.name()).collect();
        a.extend(["--passes".to_string(), names.join(",")]);
    }
    a
}

/// Runs the script on `cases`; its progress goes to this process's stderr. A missing interpreter,
/// script or torch is an error message, never a panic.
pub fn run(cfg: &PeerRun<'_>, cases: &[Case]) -> Result<usize, String> {
    let shapes = peer_shapes(cases);
    if shapes.is_empty() {
        return Ok(0);
    }
    let script = cfg
        .script
        .clone()
        .ok_or("peers.py not found (looked next to the executable and in benches/); pass --peers-script")?;
    let shapes_path = cfg.out.join(SHAPES_FILE);
    let json = serde_json::to_string_pretty(&shapes).map_err(|e| e.to_string())?;
    std::fs::write(&shapes_path, json).map_err(|e| format!("cannot write {}: {e}", shapes_path.display()))?;
    let status = Command::new(cfg.python)
        .arg(&script)
        .args(script_args(cfg, &shapes_path))
        .status()
        .map_err(|e| format!("cannot run `{} {}`: {e}", cfg.python, script.display()))?;
    if !status.success() {
        return Err(format!(
            "`{} {}` exited with {status} (see its messages above)",
            cfg.python,
            script.display()
        ));
    }
    Ok(shapes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::{Mask, Preset, Shape, Softcap, expand, with_score_mods};

    #[test]
    fn peer_shapes_skip_varlen_and_rectangular_causal() {
        let cases = expand(&Preset::Full.blocks()).unwrap();
        let shapes = peer_shapes(&cases);
        assert!(shapes.iter().all(|s| !s.mask.contains("varlen")));
        assert!(shapes.iter().all(|s| !s.causal || s.seqlen_q == s.seqlen_k));
        assert!(shapes.iter().any(|s| s.seqlen_q == 1 && s.mask == "none"));
        let headline = shapes.iter().filter(|s| s.group == "headline").count();
        assert_eq!(headline, 40);
        let s = shapes.iter().find(|s| s.key == "bf16/B16/H16/N1024x1024/d128/causal").unwrap();
        assert_eq!(s.flops, 4.0 * 16.0 * 16.0 * 1024.0 * 1024.0 * 128.0 / 2.0);
        assert_eq!((s.kv_heads, s.kv_bytes), (16, 2 * 16 * 1024 * 16 * 128 * 2));
        let json = serde_json::to_value(s).unwrap();
        assert_eq!(json["kv_heads"], 16, "the script reads kv_heads");
        let models = peer_shapes(&expand(&Preset::Models.blocks()).unwrap());
        let d = models.iter().find(|s| s.key == "bf16/B64/H32/KV8/N1x65536/d128/none").unwrap();
        assert_eq!((d.heads, d.kv_heads, d.group.as_str(), d.causal), (32, 8, "llama3-8b-decode", false));
        assert_eq!(d.kv_bytes, 16 << 30);
        assert_eq!(
            models.len(),
            expand(&Preset::Models.blocks()).unwrap().len(),
            "every model shape has peers"
        );
        assert_eq!(json["window_left"], serde_json::Value::Null, "no window: null");
        // Window shapes reach the peers (FlexAttention), rectangular causal ones included.
        let mut windowed =
            crate::shapes::with_windows(expand(&Preset::Quick.blocks()).unwrap(), Some(&[1024]));
        for c in &mut windowed {
            c.shape.seqlen_q = c.shape.seqlen_k / 2;
        }
        let w = peer_shapes(&windowed);
        assert!(w.iter().any(|s| s.causal && s.seqlen_q != s.seqlen_k));
        assert!(w.iter().all(|s| s.window_left == Some(1024) && s.key.ends_with("/w1024")));
        let c = windowed.iter().find(|c| c.shape.mask.causal() && !c.shape.mask.varlen()).unwrap();
        let p = w.iter().find(|p| p.key == c.shape.key()).unwrap();
        assert_eq!(p.flops, models::flops(&c.shape), "the visible pairs, as ours");
        assert_eq!(serde_json::to_value(p).unwrap()["window_left"], 1024);
        // The script's decode TB/s divides kv_bytes: with a window, the keys a query can see.
        let mut dec = Shape { seqlen_q: 1, seqlen_k: 16_384, mask: Mask::Causal, ..c.shape.clone() };
        let cases = [Case { shape: dec.clone(), ..c.clone() }];
        let per_key = 2 * (dec.kv_heads * dec.head_dim * dec.dtype.size_bytes() * dec.batch) as u64;
        assert_eq!(peer_shapes(&cases)[0].kv_bytes, 1025 * per_key);
        // (Without a window a rectangular causal shape is not the peers': the dense decode step.)
        (dec.window, dec.mask) = (None, Mask::Dense);
        assert_eq!(peer_shapes(&[Case { shape: dec, ..c.clone() }])[0].kv_bytes, 16_384 * per_key);
        // Score modifiers: `softcap` (a number, else null) and `alibi` (a bool) in every shape;
        // they make rectangular causal shapes the peers' too (only FlexAttention runs them).
        assert_eq!((json["softcap"].clone(), json["alibi"].clone()), (serde_json::Value::Null, false.into()));
        let caps = [Softcap::new(30.0).unwrap(), Softcap::new(2.5).unwrap()];
        let mut modded = with_score_mods(expand(&Preset::Quick.blocks()).unwrap(), Some(&caps), true);
        for c in &mut modded {
            c.shape.seqlen_q = c.shape.seqlen_k / 2;
        }
        let m = peer_shapes(&modded);
        assert!(m.iter().any(|s| s.causal && s.seqlen_q != s.seqlen_k));
        assert!(
            m.iter()
                .all(|s| s.alibi && (s.key.ends_with("/cap30/alibi") || s.key.ends_with("/cap2.5/alibi")))
        );
        assert!(m.iter().all(|s| !s.mask.contains("varlen")));
        let c = modded.iter().find(|c| c.shape.mask.causal() && !c.shape.mask.varlen()).unwrap();
        let p = m.iter().find(|p| p.key == c.shape.key()).unwrap();
        assert_eq!(p.flops, models::flops(&Shape { softcap: None, alibi: false, ..c.shape.clone() }));
        let json = serde_json::to_value(p).unwrap();
        assert_eq!((json["softcap"].as_f64(), json["alibi"].as_bool()), (Some(30.0), Some(true)));
        assert_eq!(json["window_left"], serde_json::Value::Null);
        let alibi_only = with_score_mods(expand(&Preset::Quick.blocks()).unwrap(), None, true);
        let json = serde_json::to_value(&peer_shapes(&alibi_only)[0]).unwrap();
        assert_eq!((json["softcap"].clone(), json["alibi"].clone()), (serde_json::Value::Null, true.into()));
        assert!(locate(Some(Path::new("/x/peers.py"))).is_some());
        assert!(locate(None).is_some(), "the source tree's script");
    }

    #[test]
    fn the_script_gets_the_passes() {
        let out = Path::new("/r");
        let cfg = |passes| PeerRun {
            python: "python3",
            script: None,
            out,
            warmup_ms: 25.0,
            rep_ms: 100.0,
            run_id: "id",
            commit: "c",
            passes,
            layout: None,
        };
        let fwd = script_args(&cfg(&[Pass::Fwd]), Path::new("/r/s.json"));
        assert_eq!(fwd[..4], ["--shapes", "/r/s.json", "--out", "/r/peers.jsonl"]);
        assert!(!fwd.contains(&"--passes".to_string()), "a forward-only run works with an older script");
        let all = script_args(&cfg(&[Pass::Fwd, Pass::Bwd, Pass::FwdBwd]), Path::new("/r/s.json"));
        assert_eq!(all[all.len() - 2..], ["--passes", "fwd,bwd,fwd+bwd"]);
        let bwd = script_args(&cfg(&[Pass::Bwd]), Path::new("/r/s.json"));
        assert_eq!(bwd[bwd.len() - 2..], ["--passes", "bwd"]);
        assert!(!bwd.contains(&"--layout".to_string()), "the script's own order unless asked");
        let bshd =
            script_args(&PeerRun { layout: Some(LayoutArg::Bshd), ..cfg(&[Pass::Fwd]) }, Path::new("/s"));
        assert_eq!(bshd[bshd.len() - 2..], ["--layout", "bshd"]);
        // The script knows the flag and the pass names.
        let script = std::fs::read_to_string(locate(None).unwrap()).unwrap();
        for want in [
            "\"--passes\"",
            "\"bwd\"",
            "\"fwd+bwd\"",
            "torch.autograd.grad",
            "\"window_left\"",
            "\"softcap\"",
            "\"alibi\"",
            "\"flex\"",
            "create_block_mask",
            "score_mod",
            "torch.tanh(score / c)",
        ] {
            assert!(script.contains(want), "peers.py lacks {want}");
        }
    }
}
