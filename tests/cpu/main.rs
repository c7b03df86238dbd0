//! The CPU suite: the tiled CPU implementation against the f64 oracle under the tolerance rule
//! (property tests over random shapes and inputs, and named cases), the input validation shared
//! by every path, and the walkthrough's numbers.
//!
//! Property tests run `PROPTEST_CASES` cases each when that is set, and a count chosen to keep
//! the suite short otherwise. Failures are persisted by proptest next to the sources, in
//! `tests/proptest-regressions/` (committed), and replayed first on every run.

mod backward;
mod cases;
mod context_parallel;
mod explain;
mod holes;
mod paged;
mod plan;
mod props;
mod validation;

use flashattn::Element;
use flashattn_testkit::tolerance::{check, check_untouched};
use flashattn_testkit::{Case, Report, Spec};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// Runs the CPU implementation on a fresh random case and checks it: the tolerance rule, the
/// log-sum-exp, and nothing written outside the output layout.
pub fn run_case<T: Element>(spec: &Spec, seed: u64) -> Result<Report, String> {
    let case = Case::<T>::random(&mut StdRng::seed_from_u64(seed), spec);
    run_on(&case)
}

/// Runs the CPU implementation on `case` and checks it.
pub fn run_on<T: Element>(case: &Case<T>) -> Result<Report, String> {
    let (out, lse) =
        case.run_cpu().map_err(|e| format!("the CPU implementation refused the case: {e}\n{case}"))?;
    let report = check(case, &out, Some(&lse))?;
    check_untouched(case, &out)?;
    Ok(report)
}
