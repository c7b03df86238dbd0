//! What planning one decode call costs on the host (no GPU needed): `Problem::new` and
//! `flashattn::plan` in a loop, in microseconds per call, and the plan itself.

use flashattn::{AttentionOptions, DType, DeviceProps, Layout, Problem, plan};
fn main() {
    let q = Layout::bshd(1, 1, 32, 128);
    let k = Layout::bshd(1, 1024, 8, 128);
    let opts = AttentionOptions::default();
    let props = DeviceProps::h200();
    let lens = [q, k, k, q].map(|l| l.required_len().unwrap());
    let n = 200_000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        let p = Problem::new(q, k, k, q, lens, &opts).unwrap();
        std::hint::black_box(&p);
    }
    println!("Problem::new {:.3} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    let p = Problem::new(q, k, k, q, lens, &opts).unwrap();
    let t = std::time::Instant::now();
    for _ in 0..n {
        let pl = plan(&props, DType::BF16, &p, &opts).unwrap();
        std::hint::black_box(&pl);
    }
    println!("plan {:.3} us", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    println!("{}", plan(&props, DType::BF16, &p, &opts).unwrap());
}
